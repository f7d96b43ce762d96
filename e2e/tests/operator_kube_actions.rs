//! The operator running the Kubernetes actions against a StatefulSet on the kwok node: pre and
//! post runs go Ready, footprints stop a second run, a dry run changes nothing, a killed
//! operator's run is finished by the next one without repeating a completed action, and
//! secret values appear nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, assert_no_secret_leak, create_secret, get, hold_pod, kubectl, ok, release_pod,
    replicas, running_pods, statefulset, wait, wait_for,
};

fn run(ns: &str, name: &str, stage: &str, dry_run: bool) -> String {
    MigrationRun::new(ns, name, stage)
        .dry_run(dry_run)
        .to_yaml()
}

/// The Migration adopting v1.17.3 whose post stage restarts ox-connector; the tests add the pre
/// actions.
fn migration(ns: &str) -> Migration {
    let restart = Action::new("ox_connector_restart")
        .run_mode("default")
        .versions(json!({"minimum": "v1.15", "from": "v1.15", "to": "v1"}))
        .config(json!({"statefulset": {"name": "ox-connector", "replicas": 1, "waitSeconds": 1}}));
    Migration::new(ns)
        .installed("v1.17.3")
        .secret_file(
            "redis-password",
            "cache-intercom-service-password",
            "password",
        )
        .post(restart)
}

/// Scales ox-connector to 0, once (tagged).
fn scale_down() -> Action {
    Action::scale("ox-connector", 0)
        .tag("v1.18.0")
        .run_mode("apply")
}

#[tokio::test]
async fn pre_and_post_runs_scale_the_connector_and_footprints_stop_a_second_run() {
    let ns = Scene::cluster("op-kube").await;
    let secret_value = format!("s3cr3t-{}-value", std::process::id());
    create_secret(
        &ns.name,
        "cache-intercom-service-password",
        "password",
        &secret_value,
    );
    apply(&statefulset(&ns.name, "ox-connector", 2));
    running_pods(&ns.name, "ox-connector", 2).await;
    let operator = ns.start_operator();
    apply(&migration(&ns.name).pre(scale_down()).to_yaml());

    // A dry run first: plans (proving it may scale), changes nothing, records nothing.
    apply(&run(&ns.name, "dry", "pre", true));
    wait(&ns.name, "migrationrun/dry", "Ready");
    let dry = get(&ns.name, "migrationrun/dry");
    assert!(
        dry["status"]["actions"][0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("dry run: StatefulSet ox-connector: 2 -> 0"),
        "{dry}"
    );
    assert_eq!(
        replicas(&ns.name, "ox-connector"),
        2,
        "a dry run does not scale"
    );
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["history"],
        serde_json::json!([]),
        "nor records a footprint"
    );

    apply(&run(&ns.name, "pre", "pre", false));
    wait(&ns.name, "migrationrun/pre", "Ready");
    assert_eq!(replicas(&ns.name, "ox-connector"), 0);
    let pods = ok(
        "pods",
        &kubectl(&[
            "get",
            "pods",
            "-n",
            &ns.name,
            "-l",
            "app=ox-connector",
            "-o",
            "name",
        ]),
    );
    assert!(
        pods.trim().is_empty(),
        "the run waited until the pods were gone: {pods}"
    );
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(pre["status"]["actions"][0]["decision"], "Succeeded");
    assert_eq!(pre["status"]["lastMigratedRelease"], "v1.17.3");
    let history = get(&ns.name, "migration/opendesk")["status"]["history"].clone();
    assert_eq!(history.as_array().unwrap().len(), 1, "{history}");
    assert_eq!(history[0]["id"], "workload_scale");
    assert_eq!(history[0]["tag"], "v1.18.0");
    assert_eq!(history[0]["runMode"], "apply");
    assert_eq!(history[0]["runName"], "pre");

    // The same release's pre stage again: the tagged action's footprint skips it.
    apply(&run(&ns.name, "pre-again", "pre", false));
    wait(&ns.name, "migrationrun/pre-again", "Ready");
    let again = get(&ns.name, "migrationrun/pre-again");
    assert_eq!(again["status"]["actions"][0]["decision"], "Skipped");
    assert_eq!(again["status"]["actions"][0]["reason"], "FootprintRecorded");

    apply(&run(&ns.name, "post", "post", false));
    wait(&ns.name, "migrationrun/post", "Ready");
    assert_eq!(
        replicas(&ns.name, "ox-connector"),
        1,
        "the restart brought it back"
    );
    running_pods(&ns.name, "ox-connector", 1).await;
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["lastMigratedRelease"],
        "v1.18.0"
    );

    // The secret value is nowhere: statuses, events, the ledger, the operator's log.
    let logs = operator.logs();
    assert!(
        logs.contains("action succeeded"),
        "the operator log was captured"
    );
    assert_no_secret_leak(&ns.name, &[&secret_value], &[("the operator's log", &logs)]);
}

#[tokio::test]
async fn a_killed_operator_s_run_is_finished_by_the_next_without_repeating() {
    let ns = Scene::cluster("op-kill").await;
    create_secret(&ns.name, "cache-intercom-service-password", "password", "x");
    apply(&statefulset(&ns.name, "first", 1));
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "first", 1).await;
    running_pods(&ns.name, "ox-connector", 1).await;
    // ox-connector-0 cannot go away until the test lets it: the run is held inside action 1.
    hold_pod(&ns.name, "ox-connector-0");
    // Action 0 is untagged: only the run's own status keeps it from running twice.
    apply(
        &migration(&ns.name)
            .pre(Action::scale_without_timeout("first", 0))
            .pre(scale_down())
            .to_yaml(),
    );
    let mut first_operator = ns.start_operator();
    apply(&run(&ns.name, "pre", "pre", false));
    let before = wait_for(
        "action 1 to be running",
        Duration::from_secs(90),
        || async {
            let r = get(&ns.name, "migrationrun/pre");
            r["status"]["actions"][1]["startTime"]
                .is_string()
                .then_some(r)
        },
    )
    .await;
    assert_eq!(before["status"]["actions"][0]["decision"], "Succeeded");
    first_operator.kill();
    let first_log = first_operator.logs();

    // Let the pod go, and start a new operator: it finishes the run.
    ok("release", &release_pod(&ns.name, "ox-connector-0"));
    let _second_operator = ns.start_operator();
    wait(&ns.name, "migrationrun/pre", "Ready");
    let after = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        after["status"]["actions"][0], before["status"]["actions"][0],
        "the completed action was not repeated"
    );
    assert_eq!(after["status"]["actions"][1]["decision"], "Succeeded");
    assert_eq!(
        after["status"]["actions"][1]["startTime"], before["status"]["actions"][1]["startTime"],
        "the interrupted action was re-entered"
    );
    let events: Value = serde_json::from_str(&ok(
        "events",
        &kubectl(&["get", "events", "-n", &ns.name, "-o", "json"]),
    ))
    .unwrap();
    let started_first = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "Started"
                && e["note"].as_str().or(e["message"].as_str()).unwrap_or("")
                    == "action 0 workload_scale"
        })
        .map(|e| {
            e["count"]
                .as_u64()
                .unwrap_or(1)
                .max(e["series"]["count"].as_u64().unwrap_or(1))
        })
        .sum::<u64>();
    let ours: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "Started")
        .collect();
    assert_eq!(
        started_first, 1,
        "action 0 started exactly once: {ours:#?}\nfirst operator:\n{first_log}"
    );
    let history = get(&ns.name, "migration/opendesk")["status"]["history"].clone();
    assert_eq!(
        history.as_array().unwrap().len(),
        1,
        "only the tagged action leaves a footprint: {history}"
    );
    assert_eq!(replicas(&ns.name, "ox-connector"), 0);
}

fn lease_holder(ns: &str) -> String {
    stagehand_e2e::stdout(&kubectl(&[
        "get",
        "lease",
        "stagehand-leader",
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]))
}

/// Two replicas: the leader is stopped with SIGTERM while an action waits; it shuts down
/// leaving the run resumable, and the standby takes the Lease and finishes the run.
#[tokio::test]
async fn the_standby_finishes_the_run_of_a_leader_stopped_mid_action() {
    let ns = Scene::cluster("op-handover").await;
    create_secret(&ns.name, "cache-intercom-service-password", "password", "x");
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    hold_pod(&ns.name, "ox-connector-0");
    apply(&migration(&ns.name).pre(scale_down()).to_yaml());
    let config = stagehand_e2e::kubeconfig();
    let mut first =
        ns.start_operator_with(&config, &stagehand_e2e::proxy::replica_args("replica-a"));
    wait_for("replica-a to lead", Duration::from_secs(60), || async {
        (lease_holder(&ns.name) == "replica-a").then_some(())
    })
    .await;
    let _second = ns.start_operator_with(&config, &stagehand_e2e::proxy::replica_args("replica-b"));
    apply(&run(&ns.name, "pre", "pre", false));
    wait_for(
        "the action to be running",
        Duration::from_secs(60),
        || async {
            get(&ns.name, "migrationrun/pre")["status"]["actions"][0]["startTime"]
                .is_string()
                .then_some(())
        },
    )
    .await;
    let status = first.terminate();
    assert!(status.is_some(), "replica-a exited after SIGTERM");
    let stopped = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        stopped["status"]["actions"][0]["decision"], "Run",
        "interrupted, not failed: {stopped}"
    );
    ok("release", &release_pod(&ns.name, "ox-connector-0"));
    wait_for("replica-b to lead", Duration::from_secs(60), || async {
        (lease_holder(&ns.name) == "replica-b").then_some(())
    })
    .await;
    wait(&ns.name, "migrationrun/pre", "Ready");
    let done = get(&ns.name, "migrationrun/pre");
    assert_eq!(done["status"]["actions"][0]["decision"], "Succeeded");
    assert_eq!(
        done["status"]["actions"][0]["startTime"], stopped["status"]["actions"][0]["startTime"],
        "re-entered, not restarted"
    );
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["history"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(replicas(&ns.name, "ox-connector"), 0);
}
