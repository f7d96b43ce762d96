//! The operator on the real control plane: runs go to Ready (kubectl wait works), invalid
//! declarations stall a run without executing anything, an action that fails stalls the run
//! naming it, and the post run records the release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{Scene, apply, condition, get, kubectl, ok, stderr, wait};

fn run(ns: &str, name: &str, stage: &str, release: &str) -> String {
    MigrationRun::new(ns, name, stage)
        .release(release)
        .to_yaml()
}

#[tokio::test]
async fn a_fresh_installation_runs_no_action_and_records_the_release() {
    let ns = Scene::operator("op-fresh").await;
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/opendesk-v1.18.yaml"
    ))
    .unwrap()
    .replace("namespace: opendesk", &format!("namespace: {}", ns.name));
    apply(&example);
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&run(&ns.name, "pre", "pre", "v1.18.0"));
    apply(&run(&ns.name, "post", "post", "v1.18.0"));
    wait(&ns.name, "migrationrun/pre", "Ready");
    wait(&ns.name, "migrationrun/post", "Ready");
    let post = get(&ns.name, "migrationrun/post");
    assert_eq!(post["status"]["progress"], "2/2");
    assert!(
        post["status"]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["decision"] == "Skipped" && a["reason"] == "FreshInstallation"),
        "{post}"
    );
    assert_eq!(condition(&post, "Succeeded")["status"], "True");
    assert_eq!(condition(&post, "Reconciling")["status"], "False");
    let migration = get(&ns.name, "migration/opendesk");
    assert_eq!(migration["status"]["lastMigratedRelease"], "v1.18.0");
    assert_eq!(
        migration["status"]["history"],
        serde_json::json!([]),
        "no action ran, no footprint"
    );
    // The columns users watch.
    let table = ok("get", &kubectl(&["get", "migrationruns", "-n", &ns.name]));
    assert!(
        table.lines().any(|l| l.starts_with("post")
            && l.contains("True")
            && l.contains("Succeeded")
            && l.contains("2/2")),
        "{table}"
    );
}

#[tokio::test]
async fn invalid_declarations_stall_the_run_before_anything_runs() {
    let ns = Scene::operator("op-invalid").await;
    // Valid for the API server's schema, invalid for Stagehand: an unknown action, a window
    // that ends before it starts, and an opt-out with the wrong tag.
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::new("scale_everything"))
            .pre(
                Action::scale_without_timeout("ox-connector", 0)
                    .tag("v1.18.0")
                    .versions(json!({"minimum": "v1.15", "from": "v1.16", "to": "v1.15"})),
            )
            .skip("pre", "workload_scale", "v1.17.0")
            .to_yaml(),
    );
    wait(&ns.name, "migration/opendesk", "Stalled");
    let migration = get(&ns.name, "migration/opendesk");
    let codes: Vec<&str> = migration["status"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["UnknownAction", "ToBeforeFrom", "MistypedSkip"],
        "{migration}"
    );
    let stalled = condition(&migration, "Stalled")["message"]
        .as_str()
        .unwrap();
    assert!(
        stalled.contains("UnknownAction")
            && stalled.contains("ToBeforeFrom")
            && stalled.contains("MistypedSkip"),
        "{stalled}"
    );

    apply(&run(&ns.name, "pre", "pre", "v1.18.0"));
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(condition(&pre, "Ready")["reason"], "Invalid");
    assert_eq!(condition(&pre, "Succeeded")["status"], "False");
    assert_eq!(
        pre["status"]["actions"],
        serde_json::json!([]),
        "nothing planned or executed: {pre}"
    );
    assert_eq!(pre["status"]["problems"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_failing_action_stalls_the_run_naming_it() {
    let ns = Scene::operator("op-fail").await;
    // The workload to scale does not exist: the run must fail on the action, naming it, and
    // not pretend it ran.
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::scale_without_timeout("ox-connector-missing", 0).tag("v1.18.0"))
            .to_yaml(),
    );
    apply(&run(&ns.name, "pre", "pre", "v1.18.0"));
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(condition(&pre, "Ready")["reason"], "Failed");
    let message = condition(&pre, "Stalled")["message"].as_str().unwrap();
    assert!(
        message.contains("action 0 workload_scale failed"),
        "{message}"
    );
    assert_eq!(pre["status"]["actions"][0]["decision"], "Failed");
    assert_eq!(pre["status"]["progress"], "1/1");
    let migration = get(&ns.name, "migration/opendesk");
    assert_eq!(
        migration["status"]["history"],
        serde_json::json!([]),
        "a failed action records no footprint"
    );
    let events = ok(
        "events",
        &kubectl(&["get", "events", "-n", &ns.name, "-o", "json"]),
    );
    assert!(
        events.contains("workload_scale"),
        "an Event names the action"
    );
}

#[tokio::test]
async fn a_run_for_another_release_waits() {
    let ns = Scene::operator("op-stale").await;
    apply(&Migration::new(&ns.name).to_yaml());
    apply(&run(&ns.name, "old", "pre", "v1.17.0"));
    let out = kubectl(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}=Waiting",
        "--timeout=60s",
        "migrationrun/old",
        "-n",
        &ns.name,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let old = get(&ns.name, "migrationrun/old");
    assert!(
        condition(&old, "Ready")["message"]
            .as_str()
            .unwrap()
            .contains("declares v1.18.0"),
        "{old}"
    );
    assert_eq!(condition(&old, "Reconciling")["status"], "True");
}

/// A run the typed API cannot read (a status index beyond u32, which the API server accepts)
/// is reported on itself and does not stall the controller: the next run still completes.
#[tokio::test]
async fn a_malformed_run_does_not_stall_the_others() {
    let ns = Scene::cluster("op-malformed").await;
    apply(&Migration::new(&ns.name).to_yaml());
    apply(&run(&ns.name, "bad", "pre", "v1.18.0"));
    ok(
        "corrupt status",
        &kubectl(&[
            "patch",
            "migrationrun",
            "bad",
            "-n",
            &ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"actions":[{"index":9999999999,"id":"x","decision":"Run","reason":"InWindow"}]}}"#,
        ]),
    );
    let _operator = ns.start_operator();
    apply(&run(&ns.name, "good", "pre", "v1.18.0"));
    wait(&ns.name, "migrationrun/good", "Ready");
    wait(&ns.name, "migrationrun/bad", "Stalled");
    let bad = get(&ns.name, "migrationrun/bad");
    assert_eq!(condition(&bad, "Stalled")["reason"], "Malformed");
    assert!(
        condition(&bad, "Stalled")["message"]
            .as_str()
            .unwrap()
            .contains("cannot read this object"),
        "{bad}"
    );
}

/// A required Secret that does not exist fails the run before any action, naming the secret
/// file and the Secret (never a value).
#[tokio::test]
async fn a_missing_required_secret_fails_before_any_action() {
    let ns = Scene::operator("op-secret").await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file(
                "redis-password",
                "cache-intercom-service-password",
                "password",
            )
            .pre(Action::scale_without_timeout("does-not-matter", 0))
            .to_yaml(),
    );
    apply(&run(&ns.name, "pre", "pre", "v1.18.0"));
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    let message = condition(&pre, "Stalled")["message"].as_str().unwrap();
    assert!(
        message.contains("secret file \"redis-password\"")
            && message.contains("cache-intercom-service-password"),
        "{message}"
    );
    assert!(
        pre["status"]["actions"][0]["startTime"].is_null(),
        "no action started: {pre}"
    );
}

/// Pre and post applied together (post first, in the same second, and sorting first by name):
/// the post run waits for the pre run, and the pre run does not wait for the post run.
#[tokio::test]
async fn pre_and_post_applied_together_both_finish() {
    let ns = Scene::operator("op-together").await;
    apply(&Migration::new(&ns.name).to_yaml());
    // One apply, the pre run first: kubectl creates the documents in order, so the post run is
    // never created in a later second than its pre run (a post run created before any pre
    // run of its release waits for a new one, by design). The names sort the other way round,
    // so within one second the tie is broken by stage, not by name.
    apply(&format!(
        "{}---\n{}",
        run(&ns.name, "b-pre", "pre", "v1.18.0"),
        run(&ns.name, "a-post", "post", "v1.18.0")
    ));
    wait(&ns.name, "migrationrun/b-pre", "Ready");
    wait(&ns.name, "migrationrun/a-post", "Ready");
}
