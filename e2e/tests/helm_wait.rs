//! Helm waits for a MigrationRun (issue 3) and every deployment gets a new run (issue 5), with
//! the chart `deploy/charts/stagehand-migration` on the real control plane:
//!
//! - Helm 4 (`helm install --wait`, the kstatus watcher): with the operator stopped helm keeps
//!   waiting (the CRDs default `status.observedGeneration` to -1, so a run nobody has seen is
//!   InProgress, not Current); started, the operator runs the stage and helm returns 0 only
//!   once the run is `Ready=True`.
//! - Helm 4 on a failing action: the run ends `Stalled=True`, kstatus says Failed, and helm exits
//!   non-zero long before its timeout, naming the run and the Stalled message.
//! - A redeployment (`helm upgrade`, a new Helm revision) creates a new run: its tagged action is
//!   skipped (`FootprintRecorded`), its untagged action runs again.
//! - Helm 3 does not wait on custom resources: `helm install --wait` returns while the run has
//!   not even been seen. The chart's hook Job runs `stagehand wait` instead; the Job cannot run
//!   on the kwok node, so its rendering is checked, and `stagehand wait` itself is run from the
//!   host.
//!
//! The helm binaries: v4 from `STAGEHAND_HELM4_BIN` (e2e/test sets it from
//! `e2e/cluster/build-helm 4`), else built with that script; v3 from `e2e/cluster/build-helm`,
//! as in rbac.rs. Without a binary or a control plane the tests fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use stagehand_e2e::helm::{Background, helm_command, helm3_bin, helm4_bin};
use stagehand_e2e::manifests::{Action, yaml};
use stagehand_e2e::{
    Scene, apply, condition, get, kubeconfig, kubectl, ok, replicas, running_pods, statefulset,
    stdout,
};

const CHART: &str = "deploy/charts/stagehand-migration";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A test's scratch directory (helm's homes, values files, helm's output).
fn scratch(ns: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stagehand-helm-wait-{ns}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A values file for one stage release that creates the Migration `opendesk` adopting v1.17.3
/// with these pre actions.
fn values(dir: &Path, name: &str, stage: &str, create: bool, pre: &[Action]) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let values = json!({
        "stage": stage,
        "release": "v1.18.0",
        "migration": {
            "name": "opendesk",
            "create": create,
            "spec": {"installedRelease": "v1.17.3", "actions": {"pre": pre, "post": []}},
        },
    });
    std::fs::write(&path, yaml(&values)).unwrap();
    path
}

/// `workload_scale` of StatefulSet `sts` to `replicas`, tagged (runs once) or not (runs every
/// time).
fn scale(sts: &str, replicas: u32, tagged: bool) -> Action {
    let action = Action::scale(sts, replicas);
    if tagged {
        action.tag("v1.18.0")
    } else {
        action
    }
}

/// The recipes of docs/gitops.md "Helm 4" and "Helm 3", which these tests execute.
const HELM4_RECIPE: &str = "deploy/gitops/helm/helm4.sh";
const HELM3_RECIPE: &str = "deploy/gitops/helm/helm3.sh";

/// The arguments after `helm` of the recipe file `recipe` (its one `helm` command, `\`
/// continuations joined, comments left out), with the values the docs use for a user's
/// deployment replaced by the test's: the namespace `opendesk`, the values file
/// `migrations-pre.yaml` and the value of `--timeout`.
fn recipe_args(recipe: &str, ns: &str, values: &Path, timeout: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(recipe)).unwrap();
    let command = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let mut words = command.split_whitespace();
    assert_eq!(words.next(), Some("helm"), "{recipe} runs no helm command");
    let mut args = Vec::new();
    let mut after_timeout = false;
    for word in words {
        args.push(match word {
            _ if after_timeout => timeout.to_string(),
            "opendesk" => ns.to_string(),
            "migrations-pre.yaml" => values.display().to_string(),
            other => other.to_string(),
        });
        after_timeout = word == "--timeout";
    }
    args
}

/// The recipe `recipe` run with helm `bin`: `helm upgrade --install` of the chart as release
/// `migrations-pre`.
fn helm_recipe(
    bin: &Path,
    dir: &Path,
    recipe: &str,
    ns: &str,
    values: &Path,
    timeout: &str,
) -> Command {
    let mut cmd = helm_command(bin, dir);
    cmd.args(recipe_args(recipe, ns, values, timeout));
    cmd
}

/// The run's Ready condition status ("True", "False"), or None while it has none.
fn ready(run: &Value) -> Option<String> {
    run["status"]["conditions"].as_array().and_then(|c| {
        c.iter()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["status"].as_str().map(str::to_string))
    })
}

/// Issue 3, Helm 4: helm waits while the operator is stopped, and returns 0 only once the run
/// is Ready.
#[tokio::test]
async fn helm4_install_wait_waits_for_the_run_while_the_operator_is_stopped() {
    let ns = Scene::cluster("helm4-wait").await;
    let helm4 = helm4_bin();
    let dir = scratch(&ns.name);
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    let values = values(&dir, "pre", "pre", true, &[scale("ox-connector", 0, true)]);

    let mut helm = Background::spawn(
        helm_recipe(&helm4, &dir, HELM4_RECIPE, &ns.name, &values, "120s"),
        dir.join("helm.out"),
    );
    let run_name = "migrations-pre-pre-1";
    // The operator is not running: nothing will ever observe the run. helm must still be
    // waiting after several seconds, and the run must have no Ready condition.
    let mut seen = false;
    while helm.started.elapsed() < Duration::from_secs(10) {
        assert!(
            helm.exited().is_none(),
            "helm 4 returned after {:?} although no operator runs: the run counted as ready\n{}",
            helm.started.elapsed(),
            helm.output()
        );
        let out = kubectl(&[
            "get",
            &format!("migrationrun/{run_name}"),
            "-n",
            &ns.name,
            "-o",
            "json",
        ]);
        if out.status.success() {
            seen = true;
            let run: Value = serde_json::from_str(&stdout(&out)).unwrap();
            assert_eq!(ready(&run), None, "nobody reconciled it: {run}");
            assert_eq!(run["status"]["observedGeneration"], -1, "{run}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let still_waiting = helm.started.elapsed();
    assert!(seen, "helm created no run {run_name}:\n{}", helm.output());
    assert!(helm.exited().is_none(), "{}", helm.output());

    let operator_started = helm.started.elapsed();
    let _operator = ns.start_operator();
    let mut ready_seen = None;
    let deadline = Instant::now() + Duration::from_secs(110);
    let status = loop {
        // helm first, then the run: a run read after helm's exit that is Ready was Ready when
        // helm exited, or after (Ready never goes back once Succeeded).
        let exited = helm.exited();
        let run = get(&ns.name, &format!("migrationrun/{run_name}"));
        let is_ready = ready(&run).as_deref() == Some("True");
        if is_ready && ready_seen.is_none() {
            ready_seen = Some(helm.started.elapsed());
        }
        if let Some(status) = exited {
            assert!(
                is_ready,
                "helm 4 returned ({status}) before the run was Ready: {run}\n{}",
                helm.output()
            );
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "helm did not return:\n{}",
            helm.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let returned = helm.started.elapsed();
    let output = helm.output();
    assert!(status.success(), "helm 4 failed ({status}):\n{output}");
    assert!(output.contains("STATUS: deployed"), "{output}");
    let run = get(&ns.name, &format!("migrationrun/{run_name}"));
    assert_eq!(condition(&run, "Succeeded")["status"], "True", "{run}");
    assert_eq!(
        run["status"]["actions"][0]["decision"], "Succeeded",
        "{run}"
    );
    let ready_seen = ready_seen.unwrap();
    eprintln!(
        "helm 4 --wait, operator stopped: still waiting at {:.1} s; operator started at {:.1} s; \
         run Ready seen at {:.1} s; helm returned 0 at {:.1} s (polled every 0.1 s)",
        still_waiting.as_secs_f64(),
        operator_started.as_secs_f64(),
        ready_seen.as_secs_f64(),
        returned.as_secs_f64()
    );
    assert!(ready_seen <= returned);
}

/// Issue 3, Helm 4 on a failure: helm exits non-zero well before its timeout and says which
/// run failed and why.
#[tokio::test]
async fn helm4_install_wait_fails_fast_on_a_failed_run_with_its_message() {
    let ns = Scene::cluster("helm4-fail").await;
    let helm4 = helm4_bin();
    let dir = scratch(&ns.name);
    // The workload to scale does not exist: action 0 fails, the run ends Stalled.
    let values = values(
        &dir,
        "pre",
        "pre",
        true,
        &[scale("ox-connector-missing", 0, true)],
    );
    let _operator = ns.start_operator();
    let mut helm = Background::spawn(
        helm_recipe(&helm4, &dir, HELM4_RECIPE, &ns.name, &values, "180s"),
        dir.join("helm.out"),
    );
    let status = helm.wait(Duration::from_secs(170));
    let elapsed = helm.started.elapsed();
    let output = helm.output();
    assert!(
        !status.success(),
        "helm 4 succeeded on a failed run:\n{output}"
    );
    assert!(
        elapsed < Duration::from_secs(90),
        "helm 4 took {elapsed:?}: it should fail fast on a Failed resource, not time out\n{output}"
    );
    let run = get(&ns.name, "migrationrun/migrations-pre-pre-1");
    assert_eq!(condition(&run, "Stalled")["status"], "True", "{run}");
    let message = condition(&run, "Stalled")["message"].as_str().unwrap();
    assert!(
        message.contains("action 0 workload_scale failed"),
        "{message}"
    );
    assert!(
        output.contains("MigrationRun/") && output.contains("migrations-pre-pre-1"),
        "helm names the run: {output}"
    );
    assert!(output.contains("status: Failed"), "{output}");
    assert!(
        output.contains(message),
        "helm shows the Stalled message: {output}"
    );
    assert!(!output.contains("context deadline exceeded"), "{output}");
    eprintln!(
        "helm 4 --wait on a failed run: {status} after {:.1} s (timeout 180 s); it printed:\n{}",
        elapsed.as_secs_f64(),
        output.trim()
    );
}

/// Issue 5: a redeployment (a new Helm revision) is a new run; the tagged action stays
/// once-only, the untagged one runs again.
#[tokio::test]
async fn a_redeployment_creates_a_new_run_tagged_actions_once_untagged_every_time() {
    let ns = Scene::cluster("helm-redeploy").await;
    let helm4 = helm4_bin();
    let dir = scratch(&ns.name);
    apply(&statefulset(&ns.name, "ox-connector", 1));
    apply(&statefulset(&ns.name, "sessions", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    running_pods(&ns.name, "sessions", 1).await;
    let pre = [scale("ox-connector", 0, true), scale("sessions", 0, false)];
    let values = values(&dir, "pre", "pre", true, &pre);
    let _operator = ns.start_operator();

    let mut names = Vec::new();
    for (i, verb) in ["install", "upgrade"].into_iter().enumerate() {
        if i > 0 {
            // Between the deployments both workloads are back up: the second run shows which
            // action ran again.
            for sts in ["ox-connector", "sessions"] {
                ok(
                    "scale",
                    &kubectl(&[
                        "scale",
                        &format!("statefulset/{sts}"),
                        "--replicas=1",
                        "-n",
                        &ns.name,
                    ]),
                );
                running_pods(&ns.name, sts, 1).await;
            }
        }
        let mut helm = Background::spawn(
            helm_recipe(&helm4, &dir, HELM4_RECIPE, &ns.name, &values, "120s"),
            dir.join(format!("helm-{verb}.out")),
        );
        let status = helm.wait(Duration::from_secs(130));
        assert!(status.success(), "helm {verb}:\n{}", helm.output());
        let out = ok(
            "runs",
            &kubectl(&[
                "get",
                "migrationruns",
                "-n",
                &ns.name,
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ]),
        );
        let runs: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(runs.len(), i + 1, "one new run per deployment: {runs:?}");
        let new: Vec<&str> = runs
            .iter()
            .copied()
            .filter(|r| !names.contains(&r.to_string()))
            .collect();
        assert_eq!(new.len(), 1, "{runs:?} after {names:?}");
        names.push(new[0].to_string());
    }
    assert_eq!(names, ["migrations-pre-pre-1", "migrations-pre-pre-2"]);

    let first = get(&ns.name, &format!("migrationrun/{}", names[0]));
    let second = get(&ns.name, &format!("migrationrun/{}", names[1]));
    for run in [&first, &second] {
        assert_eq!(condition(run, "Ready")["status"], "True", "{run}");
    }
    // First deployment: both actions ran.
    assert_eq!(
        first["status"]["actions"][0]["decision"], "Succeeded",
        "{first}"
    );
    assert_eq!(
        first["status"]["actions"][1]["decision"], "Succeeded",
        "{first}"
    );
    // Second deployment: the tagged action's footprint is recorded, so it is skipped; the
    // untagged one ran again.
    let tagged = &second["status"]["actions"][0];
    assert_eq!(tagged["decision"], "Skipped", "{second}");
    assert_eq!(tagged["reason"], "FootprintRecorded", "{second}");
    assert_eq!(
        second["status"]["actions"][1]["decision"], "Succeeded",
        "{second}"
    );
    assert_eq!(
        replicas(&ns.name, "ox-connector"),
        1,
        "the tagged scale-down did not run again"
    );
    assert_eq!(
        replicas(&ns.name, "sessions"),
        0,
        "the untagged scale-down ran again"
    );
}

/// Issue 3, Helm 3: its `--wait` does not look at custom resources, so it returns while the run
/// has not been seen; the chart's hook Job runs `stagehand wait`, which does wait.
#[tokio::test]
async fn helm3_install_wait_does_not_wait_for_the_run_the_hook_job_does() {
    let ns = Scene::cluster("helm3-wait").await;
    let helm3 = helm3_bin();
    let dir = scratch(&ns.name);
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    let values = values(&dir, "pre", "pre", true, &[scale("ox-connector", 0, true)]);
    let run_name = "migrations-pre-pre-1";

    // The pitfall: no operator, yet helm 3 `--wait` reports success.
    let mut helm = Background::spawn(
        {
            // Not the recipe: what a user of Helm 3 might try first.
            let mut cmd = helm_command(&helm3, &dir);
            cmd.args([
                "install",
                "migrations-pre",
                CHART,
                "--namespace",
                &ns.name,
                "--wait",
                "--timeout",
                "120s",
                "-f",
            ])
            .arg(&values);
            cmd
        },
        dir.join("helm3.out"),
    );
    let status = helm.wait(Duration::from_secs(60));
    let took = helm.started.elapsed();
    assert!(status.success(), "{}", helm.output());
    let run = get(&ns.name, &format!("migrationrun/{run_name}"));
    assert_eq!(
        ready(&run),
        None,
        "helm 3 returned before anyone looked at the run: {run}"
    );
    eprintln!(
        "helm 3 --wait returned 0 after {:.1} s with the run never reconciled (no operator)",
        took.as_secs_f64()
    );

    // The hook Job the chart renders for Helm 3.
    // The recipe (docs/gitops.md "Helm 3"), rendered instead of installed: `template` for
    // `upgrade --install`.
    let mut args = recipe_args(HELM3_RECIPE, &ns.name, &values, "120s");
    assert_eq!(
        &args[..2],
        ["upgrade", "--install"],
        "{HELM3_RECIPE}: {args:?}"
    );
    args.splice(..2, ["template".to_string()]);
    let job_timeout = args
        .iter()
        .find_map(|a| a.strip_prefix("wait.job.timeout="))
        .unwrap_or_else(|| panic!("{HELM3_RECIPE} sets no wait.job.timeout: {args:?}"))
        .to_string();
    let mut template = helm_command(&helm3, &dir);
    template.args(&args);
    let rendered = ok("helm template", &template.output().unwrap());
    let job = serde_norway::Deserializer::from_str(&rendered)
        .map(|d| serde_json::to_value(serde_norway::Value::deserialize(d).unwrap()).unwrap())
        .find(|d| d["kind"] == "Job")
        .unwrap_or_else(|| panic!("no Job in:\n{rendered}"));
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"], "post-install,post-upgrade",
        "{job}"
    );
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["args"],
        serde_json::json!([
            "wait",
            format!("migrationrun/{run_name}"),
            "--namespace",
            ns.name,
            "--timeout",
            job_timeout
        ]),
        "{job}"
    );
    assert_eq!(
        container["image"], "ghcr.io/stagehand-dev/stagehand:0.1.0",
        "{job}"
    );

    // What the Job's container runs, run from the host: it waits while nobody reconciles the
    // run, and exits 0 once the operator has run it.
    let mut wait = Command::new(stagehand_e2e::stagehand_bin());
    wait.env("KUBECONFIG", kubeconfig()).args([
        "wait",
        &format!("migrationrun/{run_name}"),
        "--namespace",
        &ns.name,
        "--timeout",
        "90s",
    ]);
    let mut waiter = Background::spawn(wait, dir.join("wait.out"));
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        waiter.exited().is_none(),
        "stagehand wait returned while no operator runs:\n{}",
        waiter.output()
    );
    let _operator = ns.start_operator();
    let status = waiter.wait(Duration::from_secs(100));
    assert!(
        status.success(),
        "stagehand wait ({status}):\n{}",
        waiter.output()
    );
    let run = get(&ns.name, &format!("migrationrun/{run_name}"));
    assert_eq!(ready(&run).as_deref(), Some("True"), "{run}");
}
