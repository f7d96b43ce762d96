//! Argo CD's order, run (issue 30, item 3): the recipe of docs/gitops.md "Argo CD" synced by
//! gitops-engine's sync code, as Argo CD v3.6.1's application controller drives it, against
//! the local control plane with the operator as a process.
//!
//! The recipe is read from the repository: the Application's manifests
//! `deploy/gitops/argocd/opendesk/` (`deploy/gitops/argocd/opendesk/migration.yaml`: the
//! Migration in wave -2; `deploy/gitops/argocd/opendesk/runs.yaml`: the pre run as a Sync
//! hook in wave -1 and the post run as a PostSync hook, both with `generateName` and
//! `BeforeHookCreation`; `deploy/gitops/argocd/opendesk/ox-connector.yaml`: the applications'
//! stand-in in wave 0) and the health checks `deploy/gitops/argocd/argocd-cm.yaml`, applied as
//! the argocd-cm ConfigMap of a namespace standing for Argo CD's, where Argo CD's own
//! SettingsManager reads them.
//!
//! The sync is `argocd-health sync` (e2e/waiters/argocd-health/sync.go, built by
//! `e2e/waiters/build` into `$STAGEHAND_WAITERS_BIN`; unset, the test fails saying so). Every
//! assertion about order reads the API server while the sync runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use stagehand_e2e::{
    Scene, TestNamespace, apply, condition, decisions, kubeconfig, kubectl, ok, running_pods,
    statefulset,
};

/// The Application's manifests: everything under this directory is synced.
const APPLICATION: &str = "deploy/gitops/argocd/opendesk";
/// The argocd-cm keys holding Stagehand's health checks.
const ARGOCD_CM: &str = "deploy/gitops/argocd/argocd-cm.yaml";
/// The Argo CD annotation marking an object as the Application's (the harness writes it).
const TRACKING: &str = "argocd.argoproj.io/tracking-id";
/// gitops-engine's finalizer on a hook until it has completed.
const HOOK_FINALIZER: &str = "argocd.argoproj.io/hook-finalizer";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `argocd-health` of `$STAGEHAND_WAITERS_BIN` (e2e/waiters/build prints the directory).
fn harness() -> PathBuf {
    let dir = match std::env::var("STAGEHAND_WAITERS_BIN") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "STAGEHAND_WAITERS_BIN is not set: export STAGEHAND_WAITERS_BIN=\"$(e2e/waiters/build | tail -n1)\" (e2e/test does)"
        ),
    };
    let bin = dir.join("argocd-health");
    assert!(
        bin.is_file(),
        "{} is missing: rebuild with e2e/waiters/build",
        bin.display()
    );
    bin
}

/// The argocd-cm of the recipe in a namespace of its own (Argo CD's, here).
async fn argocd_namespace(scene: &Scene) -> TestNamespace {
    let argocd = TestNamespace::new(scene.client(), "argocd").await;
    ok(
        "apply argocd-cm",
        &kubectl(&[
            "apply",
            "-n",
            &argocd.name,
            "-f",
            root().join(ARGOCD_CM).to_str().unwrap(),
        ]),
    );
    argocd
}

/// What the API server holds of the Application in `ns`: the runs (by stage, oldest first)
/// and the StatefulSet `ox-connector`, if any.
struct Live {
    pre: Vec<Value>,
    post: Vec<Value>,
    connector: Option<Value>,
}

fn live(ns: &str) -> Live {
    let out = kubectl(&[
        "get",
        "migrationruns.stagehand.dev,statefulsets",
        "-n",
        ns,
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&ok("kubectl get", &out)).unwrap();
    let mut live = Live {
        pre: Vec::new(),
        post: Vec::new(),
        connector: None,
    };
    for item in list["items"].as_array().unwrap() {
        match (item["kind"].as_str(), item["spec"]["stage"].as_str()) {
            (Some("MigrationRun"), Some("pre")) => live.pre.push(item.clone()),
            (Some("MigrationRun"), Some("post")) => live.post.push(item.clone()),
            (Some("StatefulSet"), _) if item["metadata"]["name"] == "ox-connector" => {
                live.connector = Some(item.clone())
            }
            _ => {}
        }
    }
    for runs in [&mut live.pre, &mut live.post] {
        runs.sort_by_key(|r| {
            r["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap()
                .to_string()
        });
    }
    live
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap().to_string()
}

fn is_ready(run: &Value) -> bool {
    run["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The StatefulSet as the sync left it: carrying the Application's tracking annotation.
fn synced(connector: &Value) -> bool {
    connector["metadata"]["annotations"][TRACKING]
        .as_str()
        .is_some_and(|t| t.starts_with("opendesk:"))
}

/// What the sync did: its exit, its JSON result, and what `observe` said of the API server
/// each time it polled while the sync ran (every 100 ms).
struct Synced {
    success: bool,
    result: Value,
    stderr: String,
}

/// Runs one sync of the Application into `ns`, calling `observe` with the live state every
/// 100 ms until it ends (3 minutes at most).
async fn sync(ns: &str, argocd_ns: &str, mut observe: impl FnMut(&Live)) -> Synced {
    let log = std::env::temp_dir().join(format!("argocd-sync-{ns}-{}.log", unique()));
    let mut child = Command::new(harness())
        .current_dir(root())
        .env("KUBECONFIG", kubeconfig())
        .args([
            "sync",
            "--app",
            "opendesk",
            "--namespace",
            ns,
            "--argocd-namespace",
            argocd_ns,
            // The commit synced: the hooks' names carry its first 7 characters.
            "--revision",
            "4e1a3c5b9d2f7a6e8c0b1d3f5a7c9e2b4d6f8a0c",
            "--timeout",
            "180s",
            APPLICATION,
        ])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", harness().display()));
    let deadline = Instant::now() + Duration::from_secs(200);
    let status = loop {
        observe(&live(ns));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "the sync did not end; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let result = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the sync printed no JSON result ({e}): {stdout}\nits log:\n{stderr}")
    });
    Synced {
        success: status.success(),
        result,
        stderr,
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The sync result's entry for the resource `kind`/`name`.
fn result_of<'a>(synced: &'a Synced, kind: &str, name: &str) -> &'a Value {
    synced.result["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == kind && r["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in the sync result {}", synced.result))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_run_before_the_applications_post_run_after_and_every_sync_new_runs() {
    let scene = Scene::cluster("argocd-sync").await;
    let ns = scene.namespace().to_string();
    let argocd = argocd_namespace(&scene).await;
    // What v1.17.3 deployed: the connector the pre stage stops.
    apply(&statefulset(&ns, "ox-connector", 1));
    running_pods(&ns, "ox-connector", 1).await;
    let _operator = scene.start_operator();

    // First sync: the pre run is Ready before the applications are touched, the post run is
    // created only after the applications are synced.
    let mut seen_synced_app = false;
    let mut seen_post = false;
    let first = sync(&ns, &argocd.name, |live| {
        let app_synced = live.connector.as_ref().is_some_and(synced);
        if app_synced && !seen_synced_app {
            seen_synced_app = true;
            assert_eq!(
                live.pre.len(),
                1,
                "one pre run when the applications are synced"
            );
            assert!(
                is_ready(&live.pre[0]),
                "the pre run is Ready before the applications are synced: {}",
                live.pre[0]
            );
        }
        if !live.post.is_empty() && !seen_post {
            seen_post = true;
            assert!(
                app_synced,
                "the post run is created after the applications are synced"
            );
        }
        if !app_synced {
            assert!(live.post.is_empty(), "no post run before the applications");
        }
    })
    .await;
    assert!(
        first.success && first.result["phase"] == "Succeeded",
        "the first sync succeeds: {}\n{}",
        first.result,
        first.stderr
    );
    assert!(
        seen_synced_app && seen_post,
        "the sync touched the applications and created the post run"
    );

    let after_first = live(&ns);
    assert_eq!((after_first.pre.len(), after_first.post.len()), (1, 1));
    let (pre1, post1) = (&after_first.pre[0], &after_first.post[0]);
    for run in [pre1, post1] {
        assert!(is_ready(run), "Ready: {run}");
        assert!(
            !run["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == HOOK_FINALIZER)),
            "gitops-engine removed its hook finalizer: {run}"
        );
    }
    for (run, prefix) in [
        (pre1, "opendesk-pre-4e1a3c5-sync-"),
        (post1, "opendesk-post-4e1a3c5-postsync-"),
    ] {
        assert!(
            name(run).starts_with(prefix),
            "{} is named as Argo CD names a generateName hook",
            name(run)
        );
    }
    assert_eq!(
        decisions(pre1),
        [("Succeeded".to_string(), "InWindow".to_string())],
        "the tagged action ran"
    );
    assert_eq!(
        decisions(post1),
        [("Succeeded".to_string(), "InWindow".to_string())],
        "the untagged action ran"
    );
    let pre_result = result_of(&first, "MigrationRun", &name(pre1));
    assert_eq!(
        (
            pre_result["hookType"].as_str(),
            pre_result["hookPhase"].as_str()
        ),
        (Some("Sync"), Some("Succeeded")),
        "{pre_result}"
    );
    let post_result = result_of(&first, "MigrationRun", &name(post1));
    assert_eq!(
        (
            post_result["hookType"].as_str(),
            post_result["hookPhase"].as_str()
        ),
        (Some("PostSync"), Some("Succeeded")),
        "{post_result}"
    );
    let connector = after_first.connector.as_ref().unwrap();
    assert_eq!(
        connector["spec"]["template"]["spec"]["containers"][0]["image"],
        "example.invalid/ox-connector:v1.18.0",
        "wave 0 applied v1.18.0's connector"
    );
    assert!(
        result_of(&first, "StatefulSet", "ox-connector")["order"]
            .as_u64()
            .is_some()
    );

    // A resync of the same commit: new runs; the tagged action is skipped, the untagged one
    // runs again; the first sync's runs stay (the operator's runHistoryLimit removes them).
    let second = sync(&ns, &argocd.name, |_| {}).await;
    assert!(
        second.success && second.result["phase"] == "Succeeded",
        "the resync succeeds: {}\n{}",
        second.result,
        second.stderr
    );
    let after_second = live(&ns);
    let pre_names: Vec<String> = after_second.pre.iter().map(name).collect();
    let post_names: Vec<String> = after_second.post.iter().map(name).collect();
    assert_eq!(pre_names.len(), 2, "a new pre run per sync: {pre_names:?}");
    assert_eq!(
        post_names.len(),
        2,
        "a new post run per sync: {post_names:?}"
    );
    assert!(
        pre_names.contains(&name(pre1)) && post_names.contains(&name(post1)),
        "the first sync's runs are kept: {pre_names:?} {post_names:?}"
    );
    let pre2 = after_second
        .pre
        .iter()
        .find(|r| name(r) != name(pre1))
        .unwrap();
    let post2 = after_second
        .post
        .iter()
        .find(|r| name(r) != name(post1))
        .unwrap();
    assert_eq!(
        decisions(pre2),
        [("Skipped".to_string(), "FootprintRecorded".to_string())],
        "the tagged action runs once: {pre2}"
    );
    assert_eq!(
        decisions(post2),
        [("Succeeded".to_string(), "InWindow".to_string())],
        "the untagged action runs on every sync: {post2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pre_run_stops_the_sync_before_the_applications() {
    let scene = Scene::cluster("argocd-sync-fail").await;
    let ns = scene.namespace().to_string();
    let argocd = argocd_namespace(&scene).await;
    // No ox-connector: the pre stage's workload_scale fails on it.
    let _operator = scene.start_operator();

    let synced = sync(&ns, &argocd.name, |live| {
        assert!(
            live.connector.is_none(),
            "the applications are never synced while the pre run has not succeeded"
        );
        assert!(live.post.is_empty(), "no post run");
    })
    .await;
    assert!(
        !synced.success,
        "the harness fails with the sync: {}",
        synced.result
    );
    assert_eq!(synced.result["phase"], "Failed", "{}", synced.result);

    let after = live(&ns);
    assert!(
        after.connector.is_none(),
        "the StatefulSet was never created"
    );
    assert!(after.post.is_empty(), "no post run");
    assert_eq!(after.pre.len(), 1);
    let pre = &after.pre[0];
    let stalled = condition(pre, "Stalled");
    assert_eq!(stalled["status"], "True", "{pre}");
    assert!(
        stalled["message"]
            .as_str()
            .unwrap()
            .contains("ox-connector"),
        "the run names the workload: {stalled}"
    );
    let pre_result = result_of(&synced, "MigrationRun", &name(pre));
    assert_eq!(pre_result["hookPhase"], "Failed", "{pre_result}");
    assert!(
        pre_result["message"]
            .as_str()
            .unwrap()
            .contains("ox-connector"),
        "Argo CD shows the run's Degraded message: {pre_result}"
    );
}

/// The argocd-cm of the recipe holds exactly the health checks the deploy tools' tests run
/// (deploy/argocd/stagehand.dev/<Kind>/health.lua), so the two cannot drift.
#[test]
fn the_argocd_cm_holds_the_tested_health_checks() {
    let text = std::fs::read_to_string(root().join(ARGOCD_CM)).unwrap();
    let cm: Value = serde_norway::from_str(&text).unwrap();
    let data = cm["data"].as_object().unwrap();
    let mut keys: Vec<&String> = data.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "resource.customizations.health.stagehand.dev_Migration",
            "resource.customizations.health.stagehand.dev_MigrationRun"
        ]
    );
    for kind in ["Migration", "MigrationRun"] {
        let script = std::fs::read_to_string(
            root().join(format!("deploy/argocd/stagehand.dev/{kind}/health.lua")),
        )
        .unwrap();
        assert_eq!(
            data[&format!("resource.customizations.health.stagehand.dev_{kind}")],
            script,
            "{ARGOCD_CM} holds deploy/argocd/stagehand.dev/{kind}/health.lua"
        );
    }
}
