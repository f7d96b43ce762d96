//! What the deploy tools' own health checkers report for every state of a MigrationRun and a
//! Migration, on objects the operator wrote and the API server returns: kstatus
//! (`sigs.k8s.io/cli-utils` `status.Compute`), Flux's fork of it, Flux's CEL
//! `healthCheckExprs` reader (`deploy/flux/kustomization.yaml`, through
//! `github.com/fluxcd/pkg/runtime/cel` as kustomize-controller runs it) and Argo CD's Lua
//! evaluator (`github.com/argoproj/argo-cd/v3/util/lua` behind gitops-engine's
//! `GetResourceHealth`, with `deploy/argocd/<group>/<Kind>/health.lua`). The expected answers
//! are the table in docs/gitops.md "What each tool reports, state by state", parsed here, so
//! the docs cannot drift from what the tools answer.
//!
//! The checkers are the Go programs of e2e/waiters, built by `e2e/waiters/build` (or taken
//! from the directory `$STAGEHAND_WAITERS_BIN`). Missing binaries fail the test.
//!
//! With `STAGEHAND_WRITE_TESTDATA=1` the test (re)writes the Argo CD testdata
//! (`deploy/argocd/stagehand.dev/<Kind>/testdata/*.yaml` and `health_test.yaml`) from the real
//! objects; either way it runs `argocd-health test deploy/argocd` over what is committed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, condition, create_secret, get, kubectl, ok, reason_becomes, run_with_stdin, wait,
    wait_for,
};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::provisioning::{self, ProvisioningConfig, ProvisioningSim};

const FINALIZER: &str = "e2e.stagehand.dev/hold";

/// Every state: the docs table's first column, and the Argo CD testdata file of its object.
const STATES: &[(&str, &str)] = &[
    (
        "MigrationRun just created, operator stopped",
        "created-operator-stopped.yaml",
    ),
    (
        "MigrationRun waiting behind another run",
        "waiting-behind-another-run.yaml",
    ),
    (
        "MigrationRun waiting for its pre run",
        "waiting-for-pre-run.yaml",
    ),
    ("MigrationRun suspended", "suspended.yaml"),
    ("MigrationRun awaiting approval", "awaiting-approval.yaml"),
    ("MigrationRun running", "running.yaml"),
    ("MigrationRun succeeded", "succeeded.yaml"),
    ("MigrationRun dry run succeeded", "dry-run-succeeded.yaml"),
    ("MigrationRun stalled, invalid", "stalled-invalid.yaml"),
    ("MigrationRun failed action", "failed-action.yaml"),
    ("MigrationRun preflight failed", "preflight-failed.yaml"),
    (
        "MigrationRun declarations changed",
        "declarations-changed.yaml",
    ),
    (
        "MigrationRun post run whose pre run failed",
        "pre-run-failed.yaml",
    ),
    (
        "MigrationRun deleted, finalizer pending",
        "terminating.yaml",
    ),
    (
        "Migration just created, operator stopped",
        "created-operator-stopped.yaml",
    ),
    ("Migration ready", "ready.yaml"),
    ("Migration stalled, invalid", "stalled-invalid.yaml"),
];

/// The tools, in the docs table's column order after the state.
const TOOLS: [&str; 4] = ["kstatus", "Flux kstatus", "Flux CEL", "Argo CD"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The directory holding `waitcheck` and `argocd-health`: `$STAGEHAND_WAITERS_BIN`, else what
/// `e2e/waiters/build` prints (it builds on first use). Panics, saying what to do, otherwise.
fn waiters_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BIN.get_or_init(|| {
        let dir = match std::env::var("STAGEHAND_WAITERS_BIN") {
            Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                let script = root().join("e2e/waiters/build");
                eprintln!("waiters: checking/building the checkers with {}", script.display());
                let out = Command::new(&script)
                    .stdin(Stdio::null())
                    .stderr(Stdio::inherit())
                    .output()
                    .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
                if !out.status.success() {
                    return Err(format!("{} failed ({})", script.display(), out.status));
                }
                let text = String::from_utf8_lossy(&out.stdout);
                PathBuf::from(text.lines().last().unwrap_or_default().trim())
            }
        };
        for name in ["waitcheck", "argocd-health"] {
            if !dir.join(name).is_file() {
                return Err(format!(
                    "{} holds no {name}: run e2e/waiters/build, or point STAGEHAND_WAITERS_BIN at its output",
                    dir.display()
                ));
            }
        }
        Ok(dir)
    });
    match found {
        Ok(dir) => dir.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Runs a checker with `objects` (a JSON array) on stdin; its JSON array answer.
fn check(program: &str, args: &[&str], objects: &Value) -> Vec<Value> {
    let out = run_with_stdin(
        Command::new(waiters_bin().join(program))
            .args(args)
            .current_dir(root()),
        Some(objects.to_string().as_bytes()),
    );
    let stdout = ok(&format!("{program} {}", args.join(" ")), &out);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{program}: not JSON ({e}): {stdout}"))
}

/// The table under "## What each tool reports, state by state" in docs/gitops.md: state →
/// the four tools' statuses.
fn documented_table() -> BTreeMap<String, Vec<String>> {
    let docs = std::fs::read_to_string(root().join("docs/gitops.md")).unwrap();
    let section = docs
        .split("\n## What each tool reports, state by state\n")
        .nth(1)
        .expect("docs/gitops.md has a section \"## What each tool reports, state by state\"");
    let section = section.split("\n## ").next().unwrap();
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().replace(['`', '*'], ""))
            .collect()
    };
    let mut lines = section
        .lines()
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'));
    let header = cells(lines.next().expect("a table in the section"));
    assert_eq!(
        header,
        ["state", "kstatus", "Flux kstatus", "Flux CEL", "Argo CD"],
        "the table's columns"
    );
    lines.next(); // |---|---|
    let mut table = BTreeMap::new();
    for line in lines {
        let row = cells(line);
        assert_eq!(row.len(), 5, "a row of five cells: {line}");
        // A cell may explain itself after the status ("Progressing (pending deletion)").
        let statuses = row[1..]
            .iter()
            .map(|c| c.split_whitespace().next().unwrap_or_default().to_string())
            .collect();
        assert!(
            table.insert(row[0].clone(), statuses).is_none(),
            "row {} twice",
            row[0]
        );
    }
    table
}

/// A run `name` of the Migration `migration` for `stage`.
fn run(ns: &str, migration: &str, name: &str, stage: &str) -> MigrationRun {
    MigrationRun::new(ns, name, stage).of(migration)
}

/// A Migration `name` adopting v1.17.3.
fn adopting(ns: &str, name: &str) -> Migration {
    Migration::new(ns).name(name).installed("v1.17.3")
}

/// [`adopting`], with the Provisioning API's password from the Secret `secret`.
fn provisioned(ns: &str, name: &str, secret: &str) -> Migration {
    adopting(ns, name).secret_file("provisioning-api-password", secret, "password")
}

/// `provisioning_drop_subscriptions` of `name` against `sim`, tagged `tag`.
fn drop_subscription(sim: &ProvisioningSim, name: &str, tag: &str) -> Action {
    Action::new("provisioning_drop_subscriptions")
        .tag(tag)
        .config(json!({
            "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 60},
            "subscriptions": [name],
        }))
}

/// The object without what changes from one run to the next (uid, resourceVersion,
/// managedFields, times, the namespaces' and the simulator's names), for the testdata.
fn stable(obj: &Value, replace: &[(&str, &str)]) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["managedFields", "uid", "resourceVersion"] {
                    map.remove(key);
                }
                if let Some(Value::Object(a)) = map.get_mut("annotations") {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                    if a.is_empty() {
                        map.remove("annotations");
                    }
                }
                for (key, value) in map.iter_mut() {
                    if ["Time", "Timestamp", "At", "Since"]
                        .iter()
                        .any(|end| key.ends_with(end))
                        && value.is_string()
                    {
                        *value = json!("2026-01-01T00:00:00Z");
                    } else {
                        walk(value);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut text = obj.to_string();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    let mut v: Value = serde_json::from_str(&text).unwrap();
    walk(&mut v);
    v
}

fn kind_dir(kind: &str) -> PathBuf {
    root().join("deploy/argocd/stagehand.dev").join(kind)
}

/// Writes each state's object to its Argo CD testdata file and the kinds' health_test.yaml
/// with what the real evaluator answered (the table has already been checked).
fn write_testdata(states: &[(&str, &str, Value)], argocd: &[Value]) {
    let mut tests: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for ((_, file, obj), answer) in states.iter().zip(argocd) {
        let kind = obj["kind"].as_str().unwrap().to_string();
        let dir = kind_dir(&kind).join("testdata");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), serde_norway::to_string(obj).unwrap()).unwrap();
        tests.entry(kind).or_default().push(json!({
            "healthStatus": {"status": answer["status"], "message": answer["message"]},
            "inputPath": format!("testdata/{file}"),
        }));
    }
    for (kind, tests) in tests {
        let text = format!(
            "# Written by e2e/tests/deploy_tools.rs (STAGEHAND_WRITE_TESTDATA=1) from objects the\n# operator wrote; run by `argocd-health test deploy/argocd` like Argo CD's TestLuaHealthScript.\n{}",
            serde_norway::to_string(&json!({ "tests": tests })).unwrap()
        );
        std::fs::write(kind_dir(&kind).join("health_test.yaml"), text).unwrap();
    }
}

/// Every state driven on the real control plane, fetched from the API server and run through
/// all four checkers; each answer must be the one docs/gitops.md's table gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_reports_every_state_as_the_docs_table_says() {
    let table = documented_table();
    let documented: Vec<&str> = table.keys().map(String::as_str).collect();
    let mut states_sorted: Vec<&str> = STATES.iter().map(|(s, _)| *s).collect();
    states_sorted.sort_unstable();
    assert_eq!(
        documented, states_sorted,
        "docs/gitops.md's table has one row per state the test drives"
    );
    waiters_bin();

    let idle = Scene::cluster("tools-idle").await;
    let mut objects: BTreeMap<&str, Value> = BTreeMap::new();

    // No operator watches this namespace.
    apply(&adopting(&idle.name, "opendesk").to_yaml());
    apply(&run(&idle.name, "opendesk", "pre", "pre").to_yaml());
    objects.insert(
        "MigrationRun just created, operator stopped",
        get(&idle.name, "migrationrun/pre"),
    );
    objects.insert(
        "Migration just created, operator stopped",
        get(&idle.name, "migration/opendesk"),
    );

    let ns = Scene::cluster("tools").await;
    let password = format!("prov-{}-S3cret", std::process::id());
    let sim = provisioning::start(ProvisioningConfig::new("admin", &password))
        .await
        .unwrap();
    for name in ["slow", "next", "quick", "boom", "dry", "never", "held"] {
        sim.state()
            .add_subscription(name, &[("udm", "users/user")], false, "c");
    }
    create_secret(&ns.name, "provisioning", "password", &password);
    create_secret(
        &ns.name,
        "provisioning-wrong",
        "password",
        "not-the-password",
    );
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/slow")
            .method("DELETE")
            .delay_ms(15_000),
    );
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/boom")
            .method("DELETE")
            .status(400),
    );
    let _operator = ns.start_operator();
    let n = &ns.name;
    let busy = |second: &str| {
        provisioned(n, "busy", "provisioning")
            .pre(drop_subscription(&sim, "slow", "v1.18.0"))
            .pre(drop_subscription(&sim, second, "v1.18.1"))
            .to_yaml()
    };
    // A Migration whose one action drops `subscription`.
    let dropping = |migration: &str, subscription: &str| {
        provisioned(n, migration, "provisioning").pre(drop_subscription(
            &sim,
            subscription,
            "v1.18.0",
        ))
    };
    apply(&busy("next"));
    apply(&dropping("good", "quick").to_yaml());
    apply(&dropping("dry", "dry").to_yaml());
    apply(&adopting(n, "lonely").to_yaml());
    apply(&dropping("paused", "never").suspend(true).to_yaml());
    apply(
        &adopting(n, "broken")
            .pre(Action::new("no_such_action").tag("v1.18.0"))
            .to_yaml(),
    );
    apply(&dropping("failing", "boom").to_yaml());
    apply(
        &provisioned(n, "preflight", "provisioning-wrong")
            .pre(drop_subscription(&sim, "never", "v1.18.0"))
            .to_yaml(),
    );

    apply(&dropping("manual", "held").to_yaml());

    // The slow run and a second run of its Migration behind it.
    apply(&run(n, "busy", "running", "pre").to_yaml());
    apply(&run(n, "good", "succeeded", "pre").to_yaml());
    apply(&run(n, "dry", "dry-run", "pre").dry_run(true).to_yaml());
    apply(
        &run(n, "lonely", "post", "post")
            .wait_timeout_seconds(3600)
            .to_yaml(),
    );
    apply(&run(n, "paused", "suspended", "pre").to_yaml());
    apply(&run(n, "broken", "invalid", "pre").to_yaml());
    apply(
        &run(n, "manual", "approval", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    apply(&run(n, "failing", "failed", "pre").to_yaml());
    // Its post run, created in the same second or after: it ends PreRunFailed at once.
    apply(&run(n, "failing", "failed-post", "post").to_yaml());
    apply(&run(n, "preflight", "preflight", "pre").to_yaml());
    // Running, with its action's progress written (the operator samples it every second).
    let running = wait_for(
        "the slow run's first action to start and report its progress",
        Duration::from_secs(60),
        || async {
            let obj = get(n, "migrationrun/running");
            obj["status"]["actions"][0]["progress"]
                .is_object()
                .then_some(obj)
        },
    )
    .await;
    assert_eq!(
        condition(&running, "Ready")["reason"],
        "Running",
        "{running}"
    );
    // What every tool shows of a running run carries the action's phase and figure.
    let figure =
        "action 0 provisioning_drop_subscriptions: dropping subscriptions: 0/1 subscriptions";
    for c in ["Ready", "Reconciling"] {
        assert_eq!(condition(&running, c)["message"], figure, "{running}");
    }
    assert_eq!(running["status"]["currentPhase"], figure, "{running}");
    assert_eq!(
        running["status"]["progress"], "0/2 0/1 subscriptions",
        "{running}"
    );
    objects.insert("MigrationRun running", running);
    apply(&run(n, "busy", "behind", "pre").to_yaml());
    objects.insert(
        "MigrationRun waiting behind another run",
        reason_becomes(n, "migrationrun/behind", "Waiting").await,
    );
    ok(
        "delete the run behind",
        &kubectl(&["delete", "migrationrun", "behind", "-n", n]),
    );
    // While the first action waits on its slow DELETE, the second declaration changes.
    apply(&busy("quick"));

    objects.insert(
        "MigrationRun waiting for its pre run",
        reason_becomes(n, "migrationrun/post", "Waiting").await,
    );
    objects.insert(
        "MigrationRun suspended",
        reason_becomes(n, "migrationrun/suspended", "Suspended").await,
    );
    objects.insert(
        "MigrationRun awaiting approval",
        reason_becomes(n, "migrationrun/approval", "AwaitingApproval").await,
    );
    wait(n, "migrationrun/succeeded", "Ready");
    objects.insert("MigrationRun succeeded", get(n, "migrationrun/succeeded"));
    wait(n, "migrationrun/dry-run", "Ready");
    objects.insert(
        "MigrationRun dry run succeeded",
        get(n, "migrationrun/dry-run"),
    );
    objects.insert(
        "MigrationRun stalled, invalid",
        reason_becomes(n, "migrationrun/invalid", "Invalid").await,
    );
    objects.insert(
        "MigrationRun failed action",
        reason_becomes(n, "migrationrun/failed", "Failed").await,
    );
    objects.insert(
        "MigrationRun post run whose pre run failed",
        reason_becomes(n, "migrationrun/failed-post", "PreRunFailed").await,
    );
    objects.insert(
        "MigrationRun preflight failed",
        reason_becomes(n, "migrationrun/preflight", "PreflightFailed").await,
    );
    objects.insert(
        "MigrationRun declarations changed",
        reason_becomes(n, "migrationrun/running", "DeclarationsChanged").await,
    );
    wait(n, "migration/good", "Ready");
    objects.insert("Migration ready", get(n, "migration/good"));
    wait(n, "migration/broken", "Stalled");
    objects.insert("Migration stalled, invalid", get(n, "migration/broken"));

    // A succeeded run, deleted while a finalizer holds it.
    ok(
        "add a finalizer",
        &kubectl(&[
            "patch",
            "migrationrun",
            "succeeded",
            "-n",
            n,
            "--type=merge",
            "-p",
            &json!({"metadata": {"finalizers": [FINALIZER]}}).to_string(),
        ]),
    );
    ok(
        "delete",
        &kubectl(&[
            "delete",
            "migrationrun",
            "succeeded",
            "-n",
            n,
            "--wait=false",
        ]),
    );
    let terminating = get(n, "migrationrun/succeeded");
    ok(
        "remove the finalizer",
        &kubectl(&[
            "patch",
            "migrationrun",
            "succeeded",
            "-n",
            n,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]),
    );
    assert!(
        terminating["metadata"]["deletionTimestamp"].is_string(),
        "{terminating}"
    );
    objects.insert("MigrationRun deleted, finalizer pending", terminating);

    // The objects in STATES order, as the API server returned them, and as the testdata
    // keeps them.
    let url = sim.api_url();
    let replace = [
        (idle.name.as_str(), "opendesk"),
        (ns.name.as_str(), "opendesk"),
        (url.as_str(), "http://provisioning-api.opendesk.svc:8080"),
    ];
    let states: Vec<(&str, &str, Value)> = STATES
        .iter()
        .map(|(state, file)| {
            let obj = objects
                .remove(state)
                .unwrap_or_else(|| panic!("no object for {state}"));
            (*state, *file, stable(&obj, &replace))
        })
        .collect();
    let live = Value::Array(states.iter().map(|(_, _, o)| o.clone()).collect());

    let kustomization = root().join("deploy/flux/kustomization.yaml");
    let kustomization = kustomization.to_str().unwrap();
    let argocd_dir = root().join("deploy/argocd");
    let argocd_dir = argocd_dir.to_str().unwrap();
    let answers = [
        check("waitcheck", &["kstatus"], &live),
        check("waitcheck", &["flux-kstatus"], &live),
        check(
            "waitcheck",
            &["flux-cel", "--kustomization", kustomization],
            &live,
        ),
        check("argocd-health", &["--dir", argocd_dir], &live),
    ];
    let mut mismatches = Vec::new();
    let mut report = String::from(
        "| state | kstatus | Flux kstatus | Flux CEL | Argo CD |\n|---|---|---|---|---|\n",
    );
    for (i, (state, _, obj)) in states.iter().enumerate() {
        let expected = &table[*state];
        report.push_str(&format!("| {state} |"));
        for (t, tool) in TOOLS.iter().enumerate() {
            let answer = &answers[t][i];
            assert_eq!(
                answer["name"], obj["metadata"]["name"],
                "{tool}: answers in order"
            );
            let status = answer["status"].as_str().unwrap_or_default();
            report.push_str(&format!(
                " {status} ({}{}) |",
                answer["message"].as_str().unwrap_or_default(),
                answer["error"]
                    .as_str()
                    .map(|e| format!(" error: {e}"))
                    .unwrap_or_default()
            ));
            if status != expected[t] || answer.get("error").is_some() {
                mismatches.push(format!(
                    "{state}: {tool} says {answer}, docs/gitops.md says {}",
                    expected[t]
                ));
            }
        }
        report.push('\n');
    }
    eprintln!("what the tools answered:\n{report}");
    assert!(
        mismatches.is_empty(),
        "{} answer(s) differ from docs/gitops.md:\n{}\nobjects:\n{}",
        mismatches.len(),
        mismatches.join("\n"),
        serde_json::to_string_pretty(&live).unwrap()
    );

    if std::env::var("STAGEHAND_WRITE_TESTDATA").as_deref() == Ok("1") {
        write_testdata(&states, &answers[3]);
    }
    for (_, file, obj) in &states {
        let path = kind_dir(obj["kind"].as_str().unwrap())
            .join("testdata")
            .join(file);
        assert!(
            path.is_file(),
            "{} is missing: run this test with STAGEHAND_WRITE_TESTDATA=1",
            path.display()
        );
    }
    argocd_testdata_passes();
}

/// The committed Argo CD testdata and health_test.yaml, through the real evaluator.
fn argocd_testdata_passes() {
    let out = Command::new(waiters_bin().join("argocd-health"))
        .args(["test", "deploy/argocd"])
        .current_dir(root())
        .output()
        .unwrap();
    ok("argocd-health test deploy/argocd", &out);
}

/// docs/gitops.md shows deploy/flux/kustomization.yaml verbatim (the file the test evaluates).
#[test]
fn the_docs_show_the_flux_kustomization_that_is_tested() {
    let _scene = Scene::offline();
    let file = std::fs::read_to_string(root().join("deploy/flux/kustomization.yaml")).unwrap();
    let docs = std::fs::read_to_string(root().join("docs/gitops.md")).unwrap();
    let section = docs
        .split("\n## Flux health checks\n")
        .nth(1)
        .expect("docs/gitops.md has a section \"## Flux health checks\"");
    let section = section.split("\n## ").next().unwrap();
    let block = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml code block in the section");
    assert_eq!(
        block, file,
        "docs/gitops.md \"Flux health checks\" and deploy/flux/kustomization.yaml differ"
    );
}

/// Each kind's health.lua is what docs/gitops.md installs in argocd-cm, and is written for the
/// libraries an argocd-cm script gets (base, table, a safe os): no string or math library.
#[test]
fn the_argocd_scripts_use_only_base_and_table() {
    let _scene = Scene::offline();
    let docs = std::fs::read_to_string(root().join("docs/gitops.md")).unwrap();
    for kind in ["Migration", "MigrationRun"] {
        let script: String = std::fs::read_to_string(kind_dir(kind).join("health.lua"))
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .map(|l| format!("{l}\n"))
            .collect();
        for lib in [
            "string.", "math.", "io.", "os.", ":format", ":sub", ":find", ":match",
        ] {
            assert!(
                !script.contains(lib),
                "{kind}/health.lua uses {lib}, which argocd-cm scripts do not have"
            );
        }
        assert!(
            docs.contains(&format!(
                "resource.customizations.health.stagehand.dev_{kind}:"
            )),
            "docs/gitops.md installs {kind}/health.lua"
        );
        assert!(
            Path::new(&kind_dir(kind).join("health_test.yaml")).is_file(),
            "{kind}/health_test.yaml"
        );
    }
}
