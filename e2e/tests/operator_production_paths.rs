//! Runs decided right on the paths production takes (issue 25), on the real control plane with
//! the operator as a process: a redeploy whose new pre run fails ends its post run at once
//! (`PreRunFailed`) instead of letting last week's pre run release it; a run deleted while its
//! action runs stops that action at a safe point and lets the next run start only after it is
//! gone; a ledger the API server refuses to create fails the preflight before any change; a
//! ledger deleted while a run is going is written again from the Migration's history.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, condition, first_action_started, footprints, get, kubectl, ledger, ok,
    provisioning_deletes as deletes, provisioning_sim, reason_becomes, replicas, running_pods,
    statefulset, status_time, wait, wait_for,
};
use stagehand_simulators::http::FaultRule;

fn message(obj: &Value) -> String {
    condition(obj, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The Events of object `name` in `ns` (core/v1, as kubectl lists them).
fn events(ns: &str, name: &str) -> Vec<Value> {
    let out = ok(
        "events",
        &kubectl(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ]),
    );
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Item 1: a redeploy of v1.18.0 (both runs applied again) whose new pre run fails, after a
/// first deployment whose pre run succeeded and whose post run failed (the release is not
/// recorded). That older succeeded pre run must not release the new post run: it ends
/// `PreRunFailed` at once, naming the new pre run, and applies nothing.
#[tokio::test]
async fn a_redeploy_whose_new_pre_run_fails_ends_its_post_run_at_once() {
    let ns = Scene::cluster("prod-redeploy").await;
    apply(&statefulset(&ns.name, "web", 0));
    let _operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::scale("web", 0))
            .post(Action::scale("after", 1))
            .to_yaml(),
    );
    let both = |n: u32| {
        format!(
            "{}---\n{}",
            MigrationRun::new(&ns.name, &format!("pre-{n}"), "pre").to_yaml(),
            MigrationRun::new(&ns.name, &format!("post-{n}"), "post").to_yaml()
        )
    };
    // The first deployment: the pre run succeeds, the post run fails (no `after` yet).
    apply(&both(1));
    wait(&ns.name, "migrationrun/pre-1", "Ready");
    wait(&ns.name, "migrationrun/post-1", "Stalled");

    // The redeploy: `after` exists now, but the pre stage's workload is gone, so the new pre
    // run fails.
    apply(&statefulset(&ns.name, "after", 0));
    ok(
        "delete web",
        &kubectl(&["delete", "statefulset", "web", "-n", &ns.name]),
    );
    apply(&both(2));
    let post = reason_becomes(&ns.name, "migrationrun/post-2", "PreRunFailed").await;
    assert!(
        message(&post).starts_with("pre run pre-2 of release v1.18.0 did not succeed"),
        "{post}"
    );
    assert!(
        post["status"]["actions"]
            .as_array()
            .is_none_or(|a| a.iter().all(|a| a["startTime"].is_null())),
        "the post run applied nothing: {post}"
    );
    assert_eq!(
        replicas(&ns.name, "after"),
        0,
        "the post action did not run"
    );
    let pre = get(&ns.name, "migrationrun/pre-2");
    assert_eq!(condition(&pre, "Succeeded")["status"], "False", "{pre}");
}

/// Item 4: a run deleted while its action runs (a user cancelling it, `run.keep: false`, a
/// GitOps prune). The action stops at its next safe point (between two DELETEs), the run ends
/// `Terminating` saying what was stopped (an Event outlives it), then the object goes; the run
/// waiting behind it starts only after that, and finishes the work without repeating it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_deleted_inside_its_action_stops_it_before_the_next_run_starts() {
    let ns = Scene::cluster("prod-cancel").await;
    let names = ["s1", "s2", "s3", "s4", "s5", "s6"];
    let sim = provisioning_sim(&ns.name, &names).await;
    // Each DELETE takes 1.5 s: the action is inside its loop when the run is deleted.
    sim.faults()
        .add(FaultRule::any().method("DELETE").delay_ms(1_500));
    let _operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("provisioning-api-password", "provisioning", "password")
            .pre(
                Action::new("provisioning_drop_subscriptions")
                    .tag("v1.18.0")
                    .config(json!({
                        "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 20},
                        "subscriptions": names,
                    })),
            )
            .to_yaml(),
    );
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    first_action_started(&ns.name, "migrationrun/pre").await;
    let started = get(&ns.name, "migrationrun/pre");
    assert!(
        started["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "stagehand.dev/run-in-progress")),
        "a started run carries the finalizer: {started}"
    );
    apply(&MigrationRun::new(&ns.name, "next", "pre").to_yaml());
    wait_for("the first DELETE", Duration::from_secs(30), || async {
        (deletes(&sim) >= 1).then_some(())
    })
    .await;
    ok(
        "delete the run",
        &kubectl(&[
            "delete",
            "migrationrun",
            "pre",
            "-n",
            &ns.name,
            "--wait=false",
        ]),
    );
    // Gone once its action stopped.
    wait_for("the deleted run to go", Duration::from_secs(30), || async {
        let out = kubectl(&["get", "migrationrun", "pre", "-n", &ns.name]);
        (!out.status.success()).then_some(())
    })
    .await;
    let stopped_after = deletes(&sim);
    assert!(
        stopped_after < names.len(),
        "the action stopped before its last DELETE: {stopped_after}"
    );
    let ended = events(&ns.name, "pre")
        .into_iter()
        .find(|e| e["reason"] == "Stopped")
        .unwrap_or_else(|| panic!("no Stopped Event: {:?}", events(&ns.name, "pre")));
    let note = ended["message"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(
            "MigrationRun pre was deleted while action 0 provisioning_drop_subscriptions ran: it stopped at a safe point"
        ),
        "{note}"
    );

    // The next run starts after the deleted one is gone, and drops the rest.
    wait(&ns.name, "migrationrun/next", "Ready");
    let next = get(&ns.name, "migrationrun/next");
    let ended_at: Timestamp = ended["eventTime"]
        .as_str()
        .or(ended["lastTimestamp"].as_str())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        status_time(&next, "startTime") > ended_at,
        "next started {} before pre's action stopped ({ended_at})",
        next["status"]["startTime"]
    );
    assert!(sim.state().names().is_empty(), "every subscription dropped");
    assert_eq!(
        deletes(&sim),
        names.len(),
        "no subscription was deleted twice"
    );
    let l = ledger(&ns.name).unwrap();
    assert_eq!(
        footprints(&l, "pre.provisioning_drop_subscriptions.").len(),
        1,
        "{l}"
    );
}

/// Removes the cluster-scoped admission policy `name` and its binding when dropped.
struct Policy(String);

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            &self.0,
            "--ignore-not-found",
        ]);
    }
}

/// Item 3: an admission policy refuses to create the ledger (as a platform team's policy, an
/// RBAC gap or a quota would). The preflight proves the write before the first change, so the
/// run ends `PreflightFailed` naming the ConfigMap and the API server's answer, and no action
/// changed anything (before, the action ran and its footprint could not be recorded).
#[tokio::test]
async fn a_ledger_the_api_server_refuses_fails_the_preflight_before_any_change() {
    let ns = Scene::cluster("prod-refused").await;
    apply(&statefulset(&ns.name, "web", 1));
    running_pods(&ns.name, "web", 1).await;
    let policy = Policy(format!("deny-ledger-{}", ns.name));
    apply(&format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {p}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}}
  validations:
  - expression: "object.metadata.name != 'opendesk-history'"
    message: "no history ledgers in this namespace"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {p}}}
spec:
  policyName: {p}
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}
"#,
        p = policy.0,
        ns = ns.name
    ));
    // The policy takes a moment to be enforced.
    wait_for("the policy to refuse", Duration::from_secs(60), || async {
        let out = kubectl(&[
            "create",
            "configmap",
            "opendesk-history",
            "-n",
            &ns.name,
            "--dry-run=server",
        ]);
        (!out.status.success()).then_some(())
    })
    .await;
    let _operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::scale("web", 0).tag("v1.18.0"))
            .to_yaml(),
    );
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    let pre = reason_becomes(&ns.name, "migrationrun/pre", "PreflightFailed").await;
    let m = message(&pre);
    assert!(
        m.contains(&format!(
            "the operator may not create the history ledger ConfigMap {}/opendesk-history",
            ns.name
        )) && m.contains("no history ledgers in this namespace"),
        "names the ledger and the API server's answer: {m}"
    );
    assert!(
        pre["status"]["actions"][0]["startTime"].is_null(),
        "no action started: {pre}"
    );
    assert_eq!(replicas(&ns.name, "web"), 1, "nothing was applied");
    assert!(ledger(&ns.name).is_none());
}

/// Item 3: the ledger deleted while a run is going. The next footprint is not written into a
/// ledger started from nothing: it is written again from the Migration's history (the first
/// action's footprint kept), `status.history` loses nothing, and an Event says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_deleted_while_a_run_is_going_is_written_again_from_the_history() {
    let ns = Scene::cluster("prod-ledger").await;
    let sim = provisioning_sim(&ns.name, &["s1"]).await;
    // The second action's DELETE waits: time to delete the ledger after the first recorded.
    sim.faults()
        .add(FaultRule::any().method("DELETE").delay_ms(4_000));
    apply(&statefulset(&ns.name, "web", 0));
    let _operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("provisioning-api-password", "provisioning", "password")
            .pre(Action::scale("web", 0).tag("v1.18.0"))
            .pre(
                Action::new("provisioning_drop_subscriptions")
                    .tag("v1.18.0")
                    .config(json!({
                        "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 20},
                        "subscriptions": ["s1"],
                    })),
            )
            .to_yaml(),
    );
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    wait_for("the first footprint", Duration::from_secs(60), || async {
        ledger(&ns.name)
            .is_some_and(|l| footprints(&l, "pre.workload_scale.").len() == 1)
            .then_some(())
    })
    .await;
    ok(
        "delete the ledger",
        &kubectl(&["delete", "configmap", "opendesk-history", "-n", &ns.name]),
    );
    wait(&ns.name, "migrationrun/pre", "Ready");
    let l = ledger(&ns.name).expect("the ledger is back");
    assert_eq!(
        footprints(&l, "").len(),
        2,
        "both footprints, the first one from the Migration's history: {l}"
    );
    let m = get(&ns.name, "migration/opendesk");
    assert_eq!(
        m["status"]["history"].as_array().map(Vec::len),
        Some(2),
        "status.history lost nothing: {m}"
    );
    assert!(
        events(&ns.name, "pre")
            .iter()
            .any(|e| e["reason"] == "HistoryRecreated"),
        "{:?}",
        events(&ns.name, "pre")
    );
}
