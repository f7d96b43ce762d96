//! openDesk's helmfile layout deployed for real (issue 30): helmfile (built from the Go module
//! proxy by `e2e/helmfile/build`, with the helm-diff plugin `helmfile apply` needs) runs the
//! recipe of docs/gitops.md, `deploy/gitops/helmfile/helmfile.yaml.gotmpl`, unchanged, with
//! helm v4 against the local control plane and the operator running as a process. The
//! recipe's environment (NAMESPACE, OPENDESK_RELEASE, OPENDESK_INSTALLED_RELEASE,
//! CI_PIPELINE_ID) is all that differs between the deployments.
//!
//! The namespace starts as openDesk v1.17.3 left it: the application release
//! `deploy/gitops/helmfile/charts/ox-connector` installed by helm, no Stagehand history. Then
//! five `helmfile apply` in a row:
//!
//! 1. v1.17.3 → v1.18.0: a new pre run, the application upgraded after it, a new post run;
//! 2. v1.18.0 again, unchanged: new runs all the same (the untagged actions run again), while
//!    helmfile leaves the unchanged application release alone;
//! 3. v1.18.0 → v1.19.0 with a ConfigMap in the way of the tagged v1.19 action: the pre run
//!    fails, helmfile exits non-zero, and neither the application release nor the post stage
//!    is touched;
//! 4. v1.19.0 once the ConfigMap is gone: the tagged action runs, the application is upgraded;
//! 5. v1.19.0 again, unchanged: the tagged action is skipped (`FootprintRecorded`), the
//!    untagged one runs again.
//!
//! Everything is asserted against the API server: the runs, their actions' decisions, the
//! Helm release records (helm's Secrets), the StatefulSet and the history ledger.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::Value;
use stagehand_e2e::helm::{Background, Helmfile, helm_command, helm4_bin, helmfile};
use stagehand_e2e::{
    Scene, apply, condition, get, kubectl, ledger, ok, replicas, running_pods, stdout,
};

/// The recipe docs/gitops.md shows, which this test runs as it is.
const RECIPE: &str = "deploy/gitops/helmfile/helmfile.yaml.gotmpl";
/// The recipe's application chart (the OX Connector's StatefulSet).
const APP_CHART: &str = "deploy/gitops/helmfile/charts/ox-connector";

/// One namespace's deployments: helmfile and helm v4 with homes of their own.
struct Deployer {
    ns: String,
    dir: PathBuf,
    helm: PathBuf,
    helmfile: Helmfile,
}

impl Deployer {
    /// `helmfile apply` of the recipe deploying `release` as pipeline `pipeline`; its exit
    /// status and output.
    fn apply(&self, release: &str, pipeline: &str) -> (ExitStatus, String) {
        let mut cmd = helm_command(&self.helmfile.bin, &self.dir);
        cmd.env("HELM_PLUGINS", &self.helmfile.plugins)
            .env("NAMESPACE", &self.ns)
            .env("OPENDESK_RELEASE", release)
            .env("OPENDESK_INSTALLED_RELEASE", "v1.17.3")
            .env("CI_PIPELINE_ID", pipeline)
            .arg("--file")
            .arg(RECIPE)
            .arg("--helm-binary")
            .arg(&self.helm)
            .args(["apply", "--skip-deps"]);
        let mut helmfile = Background::spawn(cmd, self.dir.join(format!("apply-{pipeline}.out")));
        let status = helmfile.wait(Duration::from_secs(400));
        let output = helmfile.output();
        eprintln!(
            "helmfile apply {release} (pipeline {pipeline}): {status} after {:.1} s",
            helmfile.started.elapsed().as_secs_f64()
        );
        (status, output)
    }

    /// Like [`Deployer::apply`], asserting that helmfile succeeded.
    fn apply_ok(&self, release: &str, pipeline: &str) -> String {
        let (status, output) = self.apply(release, pipeline);
        assert!(
            status.success(),
            "helmfile apply {release} ({pipeline}) failed: {status}\n{output}"
        );
        output
    }
}

/// The Helm release records of `release` in `ns` (helm's Secrets `owner=helm`): (revision,
/// status), oldest first.
fn revisions(ns: &str, release: &str) -> Vec<(u32, String)> {
    let selector = format!("owner=helm,name={release}");
    let out = kubectl(&["get", "secrets", "-n", ns, "-l", &selector, "-o", "json"]);
    let list: Value = serde_json::from_str(&ok("helm's release records", &out)).unwrap();
    let mut out: Vec<(u32, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels = &s["metadata"]["labels"];
            (
                labels["version"].as_str().unwrap().parse().unwrap(),
                labels["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The revision numbers of [`revisions`].
fn revision_numbers(ns: &str, release: &str) -> Vec<u32> {
    revisions(ns, release).into_iter().map(|(n, _)| n).collect()
}

/// The names of the namespace's MigrationRuns, sorted.
fn run_names(ns: &str) -> Vec<String> {
    let mut names: Vec<String> = get(ns, "migrationruns")["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Each action's (id, decision, reason) in the run's status.
fn decisions(run: &Value) -> Vec<(String, String, String)> {
    run["status"]["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("no actions in the status: {run}"))
        .iter()
        .map(|a| {
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (field("id"), field("decision"), field("reason"))
        })
        .collect()
}

fn triple(id: &str, decision: &str, reason: &str) -> (String, String, String) {
    (id.into(), decision.into(), reason.into())
}

/// Asserts that the runs `names` (and no others) are new since `before`, that each succeeded,
/// was made for `release` by pipeline `pipeline`, and returns them.
fn new_runs(
    ns: &str,
    before: &[String],
    names: &[&str],
    release: &str,
    pipeline: &str,
) -> Vec<Value> {
    let now = run_names(ns);
    let new: Vec<&String> = now.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(
        new, names,
        "pipeline {pipeline}: the new runs (all: {now:?})"
    );
    assert!(
        before.iter().all(|b| now.contains(b)),
        "the earlier runs are kept: {before:?} → {now:?}"
    );
    names
        .iter()
        .map(|name| {
            let run = get(ns, &format!("migrationrun/{name}"));
            assert_eq!(condition(&run, "Ready")["status"], "True", "{run}");
            assert_eq!(run["spec"]["release"], release, "{run}");
            assert_eq!(
                run["metadata"]["annotations"]["stagehand.dev/deployment"], pipeline,
                "{run}"
            );
            run
        })
        .collect()
}

/// The StatefulSet's (generation, version label, image).
fn connector(ns: &str) -> (u64, String, String) {
    let sts = get(ns, "statefulset/ox-connector");
    (
        sts["metadata"]["generation"].as_u64().unwrap(),
        sts["metadata"]["labels"]["app.kubernetes.io/version"]
            .as_str()
            .unwrap()
            .to_string(),
        sts["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// The ledger's last migrated release.
fn last_migrated(ns: &str) -> String {
    let ledger = ledger(ns).expect("no history ledger");
    ledger["data"]["lastMigratedRelease"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A time of the API server (RFC 3339, seconds).
fn time(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("no time: {value}"))
        .to_string()
}

/// The creation time of the Helm record `release` revision `n`.
fn revision_created(ns: &str, release: &str, n: u32) -> String {
    time(
        &get(ns, &format!("secret/sh.helm.release.v1.{release}.v{n}"))["metadata"]["creationTimestamp"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helmfile_apply_runs_the_stages_in_order_with_a_new_run_per_deployment() {
    let scene = Scene::cluster("helmfile").await;
    let ns = scene.name.clone();
    let deployer = Deployer {
        ns: ns.clone(),
        dir: scene.dir(),
        helm: helm4_bin(),
        helmfile: helmfile(),
    };

    // openDesk v1.17.3 as its own helmfile left it: the application release, no Stagehand.
    let mut install = helm_command(&deployer.helm, &deployer.dir);
    install
        .args(["install", "ox-connector", APP_CHART, "--namespace", &ns])
        .args(["--set", "release=v1.17.3", "--wait", "--timeout", "120s"]);
    ok("helm install v1.17.3", &install.output().unwrap());
    running_pods(&ns, "ox-connector", 1).await;
    let _operator = scene.start_operator();

    // 1. v1.17.3 → v1.18.0.
    deployer.apply_ok("v1.18.0", "101");
    let runs = new_runs(
        &ns,
        &[],
        &["migrations-post-post-1", "migrations-pre-pre-1"],
        "v1.18.0",
        "101",
    );
    let (post, pre) = (&runs[0], &runs[1]);
    assert_eq!(
        decisions(pre),
        [triple("workload_scale", "Succeeded", "InWindow")],
        "{pre}"
    );
    assert_eq!(
        decisions(post),
        [triple("workload_scale", "Succeeded", "InWindow")],
        "{post}"
    );
    assert_eq!(
        revisions(&ns, "ox-connector"),
        [(1, "superseded".into()), (2, "deployed".into())]
    );
    assert_eq!(
        connector(&ns).2,
        "example.invalid/ox-connector:v1.18.0",
        "the application release was upgraded"
    );
    // The order `needs:` gives: the pre run had succeeded before the application release was
    // upgraded, and the post run was created after it.
    let pre_ready = time(&condition(pre, "Ready")["lastTransitionTime"]);
    let app_upgraded = revision_created(&ns, "ox-connector", 2);
    let post_created = time(&post["metadata"]["creationTimestamp"]);
    assert!(
        pre_ready <= app_upgraded && app_upgraded <= post_created,
        "pre Ready {pre_ready}, application revision 2 {app_upgraded}, post created {post_created}"
    );
    assert_eq!(
        replicas(&ns, "ox-connector"),
        1,
        "the post stage started it again"
    );
    assert_eq!(last_migrated(&ns), "v1.18.0");

    // 2. The same release again, nothing changed but the pipeline: new runs, the untagged
    // actions run again; helmfile leaves the unchanged application release alone.
    let before = run_names(&ns);
    deployer.apply_ok("v1.18.0", "102");
    let runs = new_runs(
        &ns,
        &before,
        &["migrations-post-post-2", "migrations-pre-pre-2"],
        "v1.18.0",
        "102",
    );
    for run in &runs {
        assert_eq!(
            decisions(run),
            [triple("workload_scale", "Succeeded", "InWindow")],
            "the untagged action ran again: {run}"
        );
    }
    assert_eq!(
        revision_numbers(&ns, "ox-connector"),
        [1, 2],
        "no diff, no upgrade"
    );
    assert_eq!(replicas(&ns, "ox-connector"), 1);

    // 3. v1.19.0 with a ConfigMap in the way of its tagged action: the pre run fails and
    // helmfile stops before anything after it.
    apply(&format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: element-markers
  namespace: {ns}
  labels: {{app.kubernetes.io/managed-by: matrix-tools-deployment-markers}}
data: {{MATRIX_STACK_MSC3861: delegated_auth}}
"#
    ));
    let before = run_names(&ns);
    let connector_before = connector(&ns);
    let (status, output) = deployer.apply("v1.19.0", "103");
    assert!(
        !status.success(),
        "helmfile succeeded although the pre stage failed:\n{output}"
    );
    let mut expected = [before.clone(), vec!["migrations-pre-pre-3".to_string()]].concat();
    expected.sort();
    assert_eq!(run_names(&ns), expected, "only the pre run is new");
    let failed = get(&ns, "migrationrun/migrations-pre-pre-3");
    assert_eq!(condition(&failed, "Stalled")["status"], "True", "{failed}");
    let message = condition(&failed, "Stalled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("element-markers already exists with other data"),
        "{message}"
    );
    assert!(
        output.contains("migrations-pre-pre-3"),
        "helmfile shows helm's error naming the run:\n{output}"
    );
    assert_eq!(
        revision_numbers(&ns, "ox-connector"),
        [1, 2],
        "the application release was not touched:\n{output}"
    );
    assert_eq!(connector(&ns), connector_before, "nor its StatefulSet");
    assert_eq!(
        replicas(&ns, "ox-connector"),
        1,
        "nothing was scaled (the preflight failed)"
    );
    assert_eq!(
        revision_numbers(&ns, "migrations-post"),
        [1, 2],
        "nor the post stage"
    );
    assert_eq!(last_migrated(&ns), "v1.18.0");

    // 4. The ConfigMap removed, v1.19.0 again: its tagged action runs.
    ok(
        "delete the ConfigMap",
        &kubectl(&["delete", "configmap", "element-markers", "-n", &ns]),
    );
    let before = run_names(&ns);
    deployer.apply_ok("v1.19.0", "104");
    let runs = new_runs(
        &ns,
        &before,
        &["migrations-post-post-3", "migrations-pre-pre-4"],
        "v1.19.0",
        "104",
    );
    let (post, pre) = (&runs[0], &runs[1]);
    assert_eq!(
        decisions(pre),
        [
            triple("workload_scale", "Succeeded", "InWindow"),
            triple("configmap_create", "Succeeded", "InWindow"),
        ],
        "{pre}"
    );
    assert_eq!(
        decisions(post),
        [triple("workload_scale", "Succeeded", "InWindow")],
        "{post}"
    );
    let marker = get(&ns, "configmap/element-markers");
    assert_eq!(
        marker["data"]["MATRIX_STACK_MSC3861"], "legacy_auth",
        "{marker}"
    );
    assert_eq!(
        revisions(&ns, "ox-connector").last().unwrap(),
        &(3, "deployed".to_string())
    );
    assert_eq!(connector(&ns).2, "example.invalid/ox-connector:v1.19.0");
    assert_eq!(replicas(&ns, "ox-connector"), 1);
    assert_eq!(last_migrated(&ns), "v1.19.0");

    // 5. v1.19.0 again, unchanged: the tagged action's footprint is recorded, so it is
    // skipped; the untagged one runs again.
    let before = run_names(&ns);
    deployer.apply_ok("v1.19.0", "105");
    let runs = new_runs(
        &ns,
        &before,
        &["migrations-post-post-4", "migrations-pre-pre-5"],
        "v1.19.0",
        "105",
    );
    assert_eq!(
        decisions(&runs[1]),
        [
            triple("workload_scale", "Succeeded", "InWindow"),
            triple("configmap_create", "Skipped", "FootprintRecorded"),
        ],
        "{}",
        runs[1]
    );
    assert_eq!(
        decisions(&runs[0]),
        [triple("workload_scale", "Succeeded", "InWindow")],
        "{}",
        runs[0]
    );
    assert_eq!(revision_numbers(&ns, "ox-connector"), [1, 2, 3]);
    assert_eq!(
        stdout(&kubectl(&["get", "migrationruns", "-n", &ns, "-o", "name"]))
            .lines()
            .count(),
        9,
        "every deployment's runs are kept"
    );
}
