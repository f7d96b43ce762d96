//! Runs that cannot do the wrong thing (issue 12), on the real control plane with the operator
//! as a process: a dry run in an action's config records no footprint; an edited Migration
//! stops the run before the changed action; the preflight reports every problem before the
//! first change; the history ledger outlives the Migration, is never rewritten when malformed,
//! is written from the status of an older Stagehand, and keeps a resumed run from applying a
//! recorded action again; `suspend`; ordering and exclusivity seen in the runs' times;
//! warnings as Events and span fields in the JSON logs; SIGTERM inside a slow action.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::slapd::{BASE_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::{
    Scene, apply, condition, create_secret, first_action_started, get, kubectl, kubectl_stdin,
    ledger, ok, provisioning_sim, reason_becomes, replicas, running_pods, statefulset, status_time,
    stdout, wait, wait_for,
};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::provisioning::ProvisioningSim;

fn run(ns: &str, name: &str, stage: &str) -> String {
    MigrationRun::new(ns, name, stage).to_yaml()
}

/// The Migration `opendesk` adopting v1.17.3.
fn adopting(ns: &str) -> Migration {
    Migration::new(ns).installed("v1.17.3")
}

/// [`adopting`], with the Provisioning API's password (the Secret of [`provisioning_sim`]).
fn provisioned(ns: &str) -> Migration {
    adopting(ns).secret_file("provisioning-api-password", "provisioning", "password")
}

/// `workload_scale` of StatefulSet `sts` to `replicas`, tagged.
fn scale(sts: &str, replicas: u32) -> Action {
    Action::scale(sts, replicas).tag("v1.18.0")
}

/// `provisioning_drop_subscriptions` of `name` against `sim`, untagged.
fn drop_subscription(sim: &ProvisioningSim, name: &str) -> Action {
    Action::new("provisioning_drop_subscriptions").config(json!({
        "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 20},
        "subscriptions": [name],
    }))
}

fn reason(obj: &Value) -> String {
    condition(obj, "Ready")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn deletes(sim: &ProvisioningSim) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path)
        .collect()
}
/// Defect 1: an action whose own config says `dryRun: true` changes nothing, is `Succeeded`
/// with reason `DryRun`, records no footprint, and a later run without it does the work.
#[tokio::test]
async fn a_dry_run_in_the_config_records_no_footprint_and_a_later_run_does_the_work() {
    let ns = Scene::cluster("safe-dry").await;
    let ldif = format!(
        "dn: cn=users,{BASE_DN}\nobjectClass: organizationalRole\ncn: users\n\n\
         dn: uid=alice,cn=users,{BASE_DN}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuniventionObjectType: users/user\nuid: alice\ncn: alice\nsn: alice\nentryUUID: 00000001-0000-4000-8000-000000000001\nuniventionObjectIdentifier: 00000002-0000-4000-8000-000000000001\n\n"
    );
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: ldif,
        ..SlapdOptions::default()
    });
    create_secret(&ns.name, "ldap", "password", ROOT_PASSWORD);
    let declare = |dry: bool| {
        adopting(&ns.name)
            .secret_file("ldap-admin-password", "ldap", "password")
            .pre(
                Action::new("ldap_entryuuid_to_object_identifier")
                    .tag("v1.18.0")
                    .run_mode("apply")
                    .config(
                        json!({"dryRun": dry, "ldap": {"url": slapd.url(), "baseDn": BASE_DN}}),
                    ),
            )
            .to_yaml()
    };
    let identifier = || slapd.search("(uid=alice)", &["univentionObjectIdentifier"]);
    let _operator = ns.start_operator();
    apply(&declare(true));
    apply(&run(&ns.name, "pre-1", "pre"));
    wait(&ns.name, "migrationrun/pre-1", "Ready");
    let first = get(&ns.name, "migrationrun/pre-1");
    let action = &first["status"]["actions"][0];
    assert_eq!(action["decision"], "Succeeded", "{first}");
    assert_eq!(action["reason"], "DryRun", "{first}");
    assert!(
        action["summary"].as_str().unwrap().contains("1 differ"),
        "the summary says what it would have done: {action}"
    );
    assert!(
        identifier().contains("00000002-0000-4000-8000-000000000001"),
        "nothing changed"
    );
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["history"],
        json!([]),
        "no footprint"
    );
    assert!(
        ledger(&ns.name).is_none_or(|l| !l["data"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.starts_with("footprint."))),
        "no footprint in the ledger"
    );

    apply(&declare(false));
    apply(&run(&ns.name, "pre-2", "pre"));
    wait(&ns.name, "migrationrun/pre-2", "Ready");
    let second = get(&ns.name, "migrationrun/pre-2");
    assert_eq!(
        second["status"]["actions"][0]["reason"], "InWindow",
        "{second}"
    );
    assert_eq!(second["status"]["actions"][0]["decision"], "Succeeded");
    assert!(
        identifier().contains("00000001-0000-4000-8000-000000000001"),
        "the work is done: {}",
        identifier()
    );
    let l = ledger(&ns.name).expect("the ledger exists");
    assert!(
        l["data"]["footprint.pre.ldap_entryuuid_to_object_identifier.v1.18.0.apply"].is_string(),
        "{l}"
    );
}

/// Defect 2: a Migration edited while its run is going: the run applies nothing more, ends
/// `DeclarationsChanged` naming the first changed action, and keeps what it completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_migration_stops_the_run_before_the_changed_action() {
    let ns = Scene::cluster("safe-edit").await;
    let sim = provisioning_sim(&ns.name, &["first", "second", "third"]).await;
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/first")
            .method("DELETE")
            .delay_ms(3000),
    );
    let _operator = ns.start_operator();
    let declare = |second: &str| {
        provisioned(&ns.name)
            .pre(drop_subscription(&sim, "first").tag("v1.18.0"))
            .pre(drop_subscription(&sim, second).tag("v1.18.1"))
            .to_yaml()
    };
    apply(&declare("second"));
    apply(&run(&ns.name, "pre", "pre"));
    // While the first action waits on its slow DELETE, the second declaration changes.
    first_action_started(&ns.name, "migrationrun/pre").await;
    let planned_generation = get(&ns.name, "migration/opendesk")["metadata"]["generation"].clone();
    apply(&declare("third"));
    let pre = reason_becomes(&ns.name, "migrationrun/pre", "DeclarationsChanged").await;
    let message = condition(&pre, "Stalled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("action 1 provisioning_drop_subscriptions was changed"),
        "{message}"
    );
    assert!(
        message.contains(&format!("generation {planned_generation} when planned")),
        "{message}"
    );
    assert_eq!(condition(&pre, "Stalled")["status"], "True");
    assert_eq!(condition(&pre, "Reconciling")["status"], "False");
    assert_eq!(condition(&pre, "Succeeded")["status"], "False");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "{pre}"
    );
    assert!(pre["status"]["actions"][1]["startTime"].is_null(), "{pre}");
    assert_eq!(
        deletes(&sim),
        ["/v1/subscriptions/first"],
        "neither the planned nor the new second action ran"
    );
    assert_eq!(sim.state().names(), ["second", "third"]);
    let history = get(&ns.name, "migration/opendesk")["status"]["history"].clone();
    assert_eq!(
        history.as_array().unwrap().len(),
        1,
        "the completed action's footprint stays: {history}"
    );
}

/// Defect 3: the preflight checks every credential and every API before the first change:
/// all problems at once, `PreflightFailed`, the StatefulSet of the first action untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preflight_reports_every_problem_before_the_first_change() {
    let ns = Scene::cluster("safe-pre").await;
    let sim = provisioning_sim(&ns.name, &["ox-connector"]).await;
    // The credential the Provisioning API is given is wrong.
    ok(
        "wrong password",
        &kubectl(&["delete", "secret", "provisioning", "-n", &ns.name]),
    );
    create_secret(&ns.name, "provisioning", "password", "not-the-password");
    apply(&statefulset(&ns.name, "ox-connector", 2));
    running_pods(&ns.name, "ox-connector", 2).await;
    let _operator = ns.start_operator();
    let flush = Action::new("flush_intercom_sessions")
        .tag("v1.18.0")
        .config(json!({"redis": {"host": "127.0.0.1", "port": 1, "username": "default", "keyPattern": "sess:*"}}));
    apply(
        &provisioned(&ns.name)
            .secret_file("redis-password", "redis", "password")
            .pre(scale("ox-connector", 0))
            .pre(drop_subscription(&sim, "ox-connector").tag("v1.18.0"))
            .pre(flush)
            .to_yaml(),
    );
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&run(&ns.name, "pre", "pre"));
    let pre = reason_becomes(&ns.name, "migrationrun/pre", "PreflightFailed").await;
    let message = condition(&pre, "Stalled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with(
            "preflight: 2 problem(s) found before the first change, nothing was applied: "
        ),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "secret file \"redis-password\": Secret {}/redis does not exist (action 2 flush_intercom_sessions read(s) it)",
            ns.name
        )),
        "{message}"
    );
    assert!(
        message.contains("action 1 provisioning_drop_subscriptions: "),
        "{message}"
    );
    assert!(!message.contains("not-the-password"), "{message}");
    assert_eq!(condition(&pre, "Ready")["status"], "False");
    assert_eq!(condition(&pre, "Reconciling")["status"], "False");
    assert!(pre["status"]["actions"][0]["startTime"].is_null(), "{pre}");
    assert_eq!(
        replicas(&ns.name, "ox-connector"),
        2,
        "the first action did not run"
    );
    assert!(deletes(&sim).is_empty());
    assert_eq!(sim.state().names(), ["ox-connector"]);
}

/// Defect 4: the history lives in a ledger ConfigMap without owner: a recreated Migration
/// finds it (in its status within seconds, before any run) and does not run a recorded
/// action again.
#[tokio::test]
async fn the_history_outlives_a_recreated_migration() {
    let ns = Scene::cluster("safe-ledger").await;
    apply(&statefulset(&ns.name, "ox-connector", 2));
    running_pods(&ns.name, "ox-connector", 2).await;
    let _operator = ns.start_operator();
    let declared = adopting(&ns.name).pre(scale("ox-connector", 0)).to_yaml();
    apply(&declared);
    apply(&run(&ns.name, "pre-1", "pre"));
    wait(&ns.name, "migrationrun/pre-1", "Ready");
    assert_eq!(replicas(&ns.name, "ox-connector"), 0);
    let l = ledger(&ns.name).expect("ledger");
    assert_eq!(l["data"]["format"], "stagehand.dev/history/v1");
    assert_eq!(
        l["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "stagehand"
    );
    assert!(l["metadata"]["ownerReferences"].is_null(), "{l}");
    let print: Value = serde_json::from_str(
        l["data"]["footprint.pre.workload_scale.v1.18.0."]
            .as_str()
            .expect("footprint key"),
    )
    .unwrap();
    assert_eq!(print["runName"], "pre-1");
    assert_eq!(print["stage"], "pre");

    // The deployment scales back up; the Migration is replaced (a GitOps tool recreating it).
    ok(
        "scale",
        &kubectl(&[
            "scale",
            "statefulset/ox-connector",
            "--replicas=2",
            "-n",
            &ns.name,
        ]),
    );
    ok(
        "delete",
        &kubectl(&["delete", "migration", "opendesk", "-n", &ns.name]),
    );
    ok(
        "delete runs",
        &kubectl(&["delete", "migrationruns", "--all", "-n", &ns.name]),
    );
    apply(&declared);
    wait_for(
        "the history mirrored into the new Migration",
        Duration::from_secs(20),
        || async {
            let m = get(&ns.name, "migration/opendesk");
            (m["status"]["history"]
                .as_array()
                .is_some_and(|h| h.len() == 1))
            .then_some(())
        },
    )
    .await;
    apply(&run(&ns.name, "pre-2", "pre"));
    wait(&ns.name, "migrationrun/pre-2", "Ready");
    let again = get(&ns.name, "migrationrun/pre-2");
    assert_eq!(
        again["status"]["actions"][0]["reason"], "FootprintRecorded",
        "{again}"
    );
    assert_eq!(
        replicas(&ns.name, "ox-connector"),
        2,
        "not scaled down a second time"
    );
}

/// A ledger that exists but is malformed stalls runs (`HistoryUnreadable`), changes nothing
/// and is never rewritten; the Migration shows it too.
#[tokio::test]
async fn an_unreadable_ledger_stalls_the_run_and_is_left_alone() {
    let ns = Scene::cluster("safe-unread").await;
    apply(&statefulset(&ns.name, "ox-connector", 1));
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "opendesk-history", "namespace": ns.name},
        "data": {"footprint.pre.workload_scale.v1.18.0.": "{not json"}});
    ok(
        "ledger",
        &kubectl_stdin(&["create", "-f", "-"], Some(&bad.to_string())),
    );
    let before = ledger(&ns.name).unwrap();
    let _operator = ns.start_operator();
    apply(&adopting(&ns.name).pre(scale("ox-connector", 0)).to_yaml());
    apply(&run(&ns.name, "pre", "pre"));
    let pre = reason_becomes(&ns.name, "migrationrun/pre", "HistoryUnreadable").await;
    let message = condition(&pre, "Stalled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("opendesk-history") && message.contains("format"),
        "{message}"
    );
    assert_eq!(condition(&pre, "Reconciling")["status"], "False");
    assert_eq!(pre["status"]["actions"], json!([]), "nothing planned");
    let m = reason_becomes(&ns.name, "migration/opendesk", "HistoryUnreadable").await;
    assert_eq!(condition(&m, "Stalled")["status"], "True");
    assert_eq!(replicas(&ns.name, "ox-connector"), 1);
    let after = ledger(&ns.name).unwrap();
    assert_eq!(after["data"], before["data"], "never rewritten");
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

/// A Migration whose status holds a history (written by a Stagehand without the ledger) gets
/// its ledger written from it on the first reconcile, so upgrading loses nothing.
#[tokio::test]
async fn the_status_history_of_an_older_stagehand_becomes_the_ledger() {
    let ns = Scene::cluster("safe-upgrade").await;
    apply(&adopting(&ns.name).pre(scale("ox-connector", 0)).to_yaml());
    let status = json!({"status": {"lastMigratedRelease": "v1.17.3", "history": [
        {"stage": "pre", "id": "workload_scale", "tag": "v1.18.0", "release": "v1.18.0", "runName": "old", "completedAt": "2026-01-01T00:00:00Z"}]}});
    ok(
        "old status",
        &kubectl(&[
            "patch",
            "migration",
            "opendesk",
            "-n",
            &ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ]),
    );
    assert!(ledger(&ns.name).is_none());
    let _operator = ns.start_operator();
    let l = wait_for("the ledger", Duration::from_secs(30), || async {
        ledger(&ns.name)
    })
    .await;
    assert_eq!(l["data"]["lastMigratedRelease"], "v1.17.3");
    let print: Value = serde_json::from_str(
        l["data"]["footprint.pre.workload_scale.v1.18.0."]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(print["runName"], "old");
    // The run plans from it: the recorded action is skipped.
    apply(&statefulset(&ns.name, "ox-connector", 1));
    apply(&run(&ns.name, "pre", "pre"));
    wait(&ns.name, "migrationrun/pre", "Ready");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["reason"], "FootprintRecorded",
        "{pre}"
    );
}

/// A crash after the ledger write and before the run's status write: the resumed run finds
/// the footprint in the ledger and does not apply the action again.
#[tokio::test]
async fn a_footprint_written_before_a_crash_is_not_applied_again() {
    let ns = Scene::cluster("safe-crash").await;
    apply(&statefulset(&ns.name, "ox-connector", 2));
    apply(&adopting(&ns.name).pre(scale("ox-connector", 0)).to_yaml());
    apply(&run(&ns.name, "pre", "pre"));
    // What the operator left behind: the plan frozen, the action started, its footprint in
    // the ledger, the run's status not yet updated.
    let spec: stagehand_crds::MigrationSpec =
        serde_json::from_value(get(&ns.name, "migration/opendesk")["spec"].clone()).unwrap();
    let declarations =
        stagehand_config::Declarations::from_spec(&serde_json::to_value(&spec).unwrap()).unwrap();
    let print = declarations.fingerprint(stagehand_config::Stage::Pre);
    let started = Timestamp::now().to_string();
    let status = json!({"status": {
        "startTime": started,
        "frozenPlan": {"migrationGeneration": 1, "digest": print.digest(),
            "releaseVersion": print.fields[0], "secretFiles": print.fields[1],
            "objectStore": print.fields[2], "actionsSkip": print.fields[3]},
        "actions": [{"index": 0, "id": "workload_scale", "tag": "v1.18.0", "decision": "Run",
            "reason": "InWindow", "startTime": started, "digest": print.actions[0].digest}]}});
    ok(
        "status",
        &kubectl(&[
            "patch",
            "migrationrun",
            "pre",
            "-n",
            &ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ]),
    );
    let footprint = json!({"stage": "pre", "id": "workload_scale", "tag": "v1.18.0", "runMode": null,
        "release": "v1.18.0", "runName": "pre", "completedAt": started});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "opendesk-history", "namespace": ns.name},
        "data": {"format": "stagehand.dev/history/v1", "footprint.pre.workload_scale.v1.18.0.": footprint.to_string()}});
    ok(
        "ledger",
        &kubectl_stdin(&["create", "-f", "-"], Some(&cm.to_string())),
    );
    let _operator = ns.start_operator();
    wait(&ns.name, "migrationrun/pre", "Ready");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "{pre}"
    );
    assert_eq!(
        pre["status"]["actions"][0]["reason"], "FootprintRecorded",
        "{pre}"
    );
    assert_eq!(replicas(&ns.name, "ox-connector"), 2, "not applied again");
}

/// `suspend: true` holds a new run (`Suspended`, Reconciling) until it is lifted; a run that
/// is going finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_holds_new_runs_and_lets_a_running_one_finish() {
    let ns = Scene::cluster("safe-suspend").await;
    let sim = provisioning_sim(&ns.name, &["a", "b"]).await;
    let _operator = ns.start_operator();
    let declare = |suspend: bool| {
        provisioned(&ns.name)
            .suspend(suspend)
            .pre(drop_subscription(&sim, "a").tag("v1.18.0"))
            .to_yaml()
    };
    apply(&declare(true));
    apply(
        &MigrationRun::new(&ns.name, "pre-1", "pre")
            .wait_timeout_seconds(4)
            .to_yaml(),
    );
    let held = reason_becomes(&ns.name, "migrationrun/pre-1", "Suspended").await;
    assert_eq!(condition(&held, "Ready")["status"], "False");
    assert_eq!(condition(&held, "Reconciling")["status"], "True");
    assert_eq!(condition(&held, "Stalled")["status"], "False");
    // Longer than its waitTimeoutSeconds: suspended time does not count.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(reason(&get(&ns.name, "migrationrun/pre-1")), "Suspended");
    assert!(deletes(&sim).is_empty());
    apply(&declare(false));
    wait(&ns.name, "migrationrun/pre-1", "Ready");
    assert_eq!(deletes(&sim), ["/v1/subscriptions/a"]);

    // Suspending while a run is going: it finishes; the next one waits.
    sim.faults().add(
        FaultRule::path("/v1/subscriptions")
            .method("GET")
            .delay_ms(2500),
    );
    let declare_b = |suspend: bool| {
        provisioned(&ns.name)
            .suspend(suspend)
            .pre(drop_subscription(&sim, "b"))
            .to_yaml()
    };
    apply(&declare_b(false));
    apply(&run(&ns.name, "pre-2", "pre"));
    reason_becomes(&ns.name, "migrationrun/pre-2", "Running").await;
    ok(
        "suspend",
        &kubectl(&[
            "patch",
            "migration",
            "opendesk",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ]),
    );
    wait(&ns.name, "migrationrun/pre-2", "Ready");
    assert_eq!(
        deletes(&sim),
        ["/v1/subscriptions/a", "/v1/subscriptions/b"]
    );
    apply(&run(&ns.name, "pre-3", "pre"));
    reason_becomes(&ns.name, "migrationrun/pre-3", "Suspended").await;
}

/// Ordering as the runs' times show it: a second run of one Migration starts after the first
/// completed; a post run starts after its pre run completed; runs of two Migrations overlap;
/// a post run without a pre run gives up after waitTimeoutSeconds naming what it waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_and_exclusivity_are_seen_in_start_and_completion_times() {
    let ns = Scene::cluster("safe-order").await;
    let sim = provisioning_sim(&ns.name, &["one", "two", "three"]).await;
    sim.faults().add(
        FaultRule::prefix("/v1/subscriptions")
            .method("GET")
            .delay_ms(1500),
    );
    let _operator = ns.start_operator();
    apply(
        &provisioned(&ns.name)
            .pre(drop_subscription(&sim, "one"))
            .post(drop_subscription(&sim, "two"))
            .to_yaml(),
    );
    apply(
        &provisioned(&ns.name)
            .name("other")
            .pre(drop_subscription(&sim, "three"))
            .to_yaml(),
    );
    // A pre run and its post run in one apply (the post run's name sorts first: created in
    // the same second, the pre run still counts as earlier), then a second pre run, then the
    // other Migration's run.
    apply(&format!(
        "{}---\n{}",
        run(&ns.name, "b-pre", "pre"),
        run(&ns.name, "a-post", "post")
    ));
    std::thread::sleep(Duration::from_millis(1100));
    apply(&run(&ns.name, "c-pre", "pre"));
    apply(
        &MigrationRun::new(&ns.name, "d-other", "pre")
            .of("other")
            .to_yaml(),
    );
    for r in ["a-post", "b-pre", "c-pre", "d-other"] {
        wait(&ns.name, &format!("migrationrun/{r}"), "Ready");
    }
    let [post, b, c, d] = ["a-post", "b-pre", "c-pre", "d-other"]
        .map(|r| get(&ns.name, &format!("migrationrun/{r}")));
    assert!(
        status_time(&c, "startTime") >= status_time(&b, "completionTime"),
        "c-pre waited for b-pre"
    );
    assert!(
        status_time(&post, "startTime") >= status_time(&b, "completionTime"),
        "post after its pre run"
    );
    assert!(
        status_time(&post, "startTime") >= status_time(&c, "completionTime")
            || status_time(&c, "startTime") >= status_time(&post, "completionTime"),
        "never two runs of one Migration at once"
    );
    assert!(
        status_time(&d, "startTime") < status_time(&b, "completionTime")
            && status_time(&b, "startTime") < status_time(&d, "completionTime"),
        "two Migrations run at the same time: b {}..{}, d {}..{}",
        status_time(&b, "startTime"),
        status_time(&b, "completionTime"),
        status_time(&d, "startTime"),
        status_time(&d, "completionTime")
    );
    // Nobody runs a third Migration's pre stage: its post run gives up.
    apply(&adopting(&ns.name).name("third").to_yaml());
    apply(
        &MigrationRun::new(&ns.name, "e-post", "post")
            .of("third")
            .wait_timeout_seconds(3)
            .to_yaml(),
    );
    let e = reason_becomes(&ns.name, "migrationrun/e-post", "Failed").await;
    let message = condition(&e, "Stalled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        message,
        "gave up after waitTimeoutSeconds=3: waiting for the pre run of release v1.18.0 to succeed; runbook: docs/runbook.md#failed"
    );
}

/// Warnings reach the user: an opt-out that matches nothing is a Warning Event on the
/// Migration; action log lines carry the run and action fields in JSON logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_are_events_and_action_logs_carry_run_and_action() {
    let ns = Scene::cluster("safe-warn").await;
    let sim = provisioning_sim(&ns.name, &["ox-connector"]).await;
    let operator = ns.start_operator();
    apply(
        &provisioned(&ns.name)
            .pre(drop_subscription(&sim, "ox-connector").tag("v1.18.0"))
            .skip("pre", "ox_names_to_object_identifier", "v1.18.0")
            .to_yaml(),
    );
    apply(&run(&ns.name, "pre", "pre"));
    wait(&ns.name, "migrationrun/pre", "Ready");
    let events = wait_for("the warning event", Duration::from_secs(30), || async {
        let out = stdout(&kubectl(&["get", "events", "-n", &ns.name, "-o", "json"]));
        out.contains("SkipMatchesNothing").then_some(out)
    })
    .await;
    let events: Value = serde_json::from_str(&events).unwrap();
    let warning = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "SkipMatchesNothing")
        .unwrap();
    assert_eq!(warning["type"], "Warning");
    assert_eq!(
        warning["regarding"]["kind"]
            .as_str()
            .or(warning["involvedObject"]["kind"].as_str()),
        Some("Migration")
    );
    let logs = operator.logs();
    assert!(logs.contains("SkipMatchesNothing"), "logged too");
    // The action's own log line ("dropped ..." or similar) carries both spans' fields.
    let action_lines: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["span"]["name"] == "action")
        .collect();
    assert!(!action_lines.is_empty(), "{logs}");
    for line in &action_lines {
        let spans = line["spans"].as_array().unwrap();
        assert!(
            spans
                .iter()
                .any(|s| s["name"] == "run" && s["run"] == "pre"),
            "{line}"
        );
        assert_eq!(
            line["span"]["id"], "provisioning_drop_subscriptions",
            "{line}"
        );
    }
}

/// SIGTERM inside a slow action: the call in flight finishes, no new action starts, the
/// operator exits and the run is left resumable; the next operator finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_inside_a_slow_action_lets_it_finish_and_starts_no_new_one() {
    let ns = Scene::cluster("safe-term").await;
    let sim = provisioning_sim(&ns.name, &["ox-connector"]).await;
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/ox-connector")
            .method("DELETE")
            .delay_ms(4000),
    );
    apply(&statefulset(&ns.name, "ox-connector", 1));
    let mut operator = ns.start_operator();
    apply(
        &provisioned(&ns.name)
            .pre(drop_subscription(&sim, "ox-connector").tag("v1.18.0"))
            .pre(scale("ox-connector", 0))
            .to_yaml(),
    );
    apply(&run(&ns.name, "pre", "pre"));
    // SIGTERM while the first action waits on its slow DELETE (4 s).
    first_action_started(&ns.name, "migrationrun/pre").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(sim.state().names() == ["ox-connector"], "still in flight");
    let exit = operator.terminate();
    assert!(
        exit.is_some_and(|e| e.success()),
        "{exit:?}\n{}",
        operator.logs()
    );
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "the call in flight finished: {pre}"
    );
    assert!(
        pre["status"]["actions"][1]["startTime"].is_null(),
        "no new action: {pre}"
    );
    assert_eq!(
        condition(&pre, "Reconciling")["status"],
        "True",
        "resumable: {pre}"
    );
    assert_eq!(replicas(&ns.name, "ox-connector"), 1);
    assert!(sim.state().names().is_empty());
    let _next = ns.start_operator();
    wait(&ns.name, "migrationrun/pre", "Ready");
    assert_eq!(replicas(&ns.name, "ox-connector"), 0);
    assert_eq!(
        deletes(&sim).len(),
        1,
        "the finished action was not repeated"
    );
}
