//! A run whose namespace is being deleted (issue 17, bad input at the edges), through an
//! operator of every namespace on the local control plane. Runs that a finalizer keeps (a
//! GitOps tool's; here the test's) while their namespace is deleted: the one that started
//! (planned, waiting for its approval) starts no action, the one waiting never starts; both end
//! `Terminating`, saying so. The operator serves a run in another namespace meanwhile.
//!
//! Its own test binary: an operator of every namespace would race the namespaced operators of
//! tests running beside it in one binary (cargo runs the binaries one after another).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    OperatorProcess, Scene, TestNamespace, apply, condition, get, hold, kubectl, ok,
    reason_becomes, release, statefulset, wait, wait_for,
};

#[tokio::test]
async fn a_run_whose_namespace_is_being_deleted_starts_nothing_more() {
    let doomed = Scene::cluster("edge-nsdel").await;
    let other = TestNamespace::new(doomed.client(), "edge-nsdel-other").await;
    let _operator = OperatorProcess::start_all_namespaces(&other.name);
    let ns = doomed.name.as_str();
    // No pod: the namespace controller deletes pods first and waits for them to be gone
    // before it deletes anything else (ordered namespace deletion).
    apply(&statefulset(ns, "after", 0));
    apply(
        &Migration::new(ns)
            .installed("v1.17.3")
            .pre(Action::scale("after", 0))
            .to_yaml(),
    );
    // The pre run plans (its start) and waits for its plan's approval; the post run waits for
    // the pre run.
    apply(
        &MigrationRun::new(ns, "pre", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    hold(ns, "migrationrun/pre");
    apply(&MigrationRun::new(ns, "post", "post").to_yaml());
    hold(ns, "migrationrun/post");
    reason_becomes(ns, "migrationrun/pre", "AwaitingApproval").await;
    reason_becomes(ns, "migrationrun/post", "Waiting").await;

    ok(
        "delete the namespace",
        &kubectl(&["delete", "namespace", ns, "--wait=false"]),
    );
    // Another namespace's run is served meanwhile.
    apply(&Migration::new(&other.name).to_yaml());
    apply(&MigrationRun::new(&other.name, "pre", "pre").to_yaml());
    wait(&other.name, "migrationrun/pre", "Ready");

    wait(ns, "migrationrun/pre", "Stalled");
    let pre = get(ns, "migrationrun/pre");
    assert!(pre["metadata"]["deletionTimestamp"].is_string(), "{pre}");
    assert_eq!(condition(&pre, "Ready")["reason"], "Terminating", "{pre}");
    let message = condition(&pre, "Ready")["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("MigrationRun pre is being deleted (metadata.deletionTimestamp is set: the run or its namespace {ns} was deleted"))
            && message.ends_with("no further action starts"),
        "{message}"
    );
    assert_eq!(condition(&pre, "Succeeded")["status"], "False");
    assert!(
        pre["status"]["actions"][0]["startTime"].is_null(),
        "no action started: {pre}"
    );

    wait(ns, "migrationrun/post", "Stalled");
    let post = get(ns, "migrationrun/post");
    assert_eq!(condition(&post, "Ready")["reason"], "Terminating", "{post}");
    assert!(
        condition(&post, "Ready")["message"]
            .as_str()
            .unwrap()
            .ends_with("it never started, nothing was applied"),
        "{post}"
    );
    assert!(post["status"]["startTime"].is_null(), "{post}");

    for run in ["migrationrun/pre", "migrationrun/post"] {
        ok("release the run", &release(ns, run));
    }
    wait_for("the runs to be gone", Duration::from_secs(60), || async {
        let out = kubectl(&["get", "migrationruns", "-n", ns, "-o", "name"]);
        stagehand_e2e::stdout(&out).trim().is_empty().then_some(())
    })
    .await;
}
