//! Bad input at the edges (issue 17), through the operator on the local control plane: a run
//! naming a Migration that does not exist, a Migration deleted while its run is going, 1,000
//! runs of one Migration created at once, and an action config of 1 MiB. Each gets a clear
//! condition, and the operator serves another Migration's run meanwhile. (A run whose
//! namespace is being deleted: `operator_namespace_deleted.rs`, which needs an operator of
//! every namespace to itself.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stagehand_e2e::kube_proxy::KubeProxy;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, condition, first_action_started, footprints, get, hold_pod, kubectl,
    kubectl_stdin, ok, reason_becomes, release_pod, running_pods, statefulset, status_time, stdout,
    wait, wait_up_to,
};

/// Another Migration (`other`, no actions) and its pre run `other-pre`: what the operator must
/// keep serving while a test's bad input is in front of it.
fn other_run(ns: &str) {
    apply(&Migration::new(ns).name("other").to_yaml());
    apply(
        &MigrationRun::new(ns, "other-pre", "pre")
            .of("other")
            .to_yaml(),
    );
}

fn message(obj: &Value) -> String {
    condition(obj, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `kubectl create -f -` of `yaml` (not `apply`: its last-applied annotation would copy a
/// 1 MiB object into an annotation, which may hold 256 KiB).
fn create(yaml: &str) {
    ok(
        "kubectl create",
        &kubectl_stdin(&["create", "-f", "-"], Some(yaml)),
    );
}

/// A run naming a Migration that does not exist waits (`Waiting`, naming the Migration and the
/// namespace), and gives up after its `waitTimeoutSeconds` (`Failed`, `Stalled=True`); a run
/// whose Migration is created while it waits starts then. Another Migration's run goes Ready
/// before the orphan gives up.
#[tokio::test]
async fn a_run_naming_a_missing_migration_waits_then_fails() {
    let ns = Scene::operator("edge-missing").await;
    apply(
        &MigrationRun::new(&ns.name, "orphan", "pre")
            .of("nowhere")
            .wait_timeout_seconds(30)
            .to_yaml(),
    );
    apply(
        &MigrationRun::new(&ns.name, "early", "pre")
            .of("later")
            .to_yaml(),
    );
    let orphan = reason_becomes(&ns.name, "migrationrun/orphan", "Waiting").await;
    let waiting = format!(
        "waiting for Migration nowhere to be created in {} (not found)",
        ns.name
    );
    assert_eq!(message(&orphan), waiting);
    assert_eq!(condition(&orphan, "Reconciling")["status"], "True");
    assert_eq!(condition(&orphan, "Stalled")["status"], "False");

    other_run(&ns.name);
    wait(&ns.name, "migrationrun/other-pre", "Ready");
    // The Migration the second run names appears: that run starts (no polling: the Migration
    // controller wakes it).
    apply(&Migration::new(&ns.name).name("later").to_yaml());
    wait(&ns.name, "migrationrun/early", "Ready");

    wait_up_to(
        &ns.name,
        "migrationrun/orphan",
        "Stalled",
        Duration::from_secs(90),
    );
    let orphan = get(&ns.name, "migrationrun/orphan");
    assert_eq!(condition(&orphan, "Ready")["reason"], "Failed", "{orphan}");
    assert_eq!(
        message(&orphan),
        format!("gave up after waitTimeoutSeconds=30: {waiting}")
    );
    assert_eq!(condition(&orphan, "Succeeded")["status"], "False");
    let other = get(&ns.name, "migrationrun/other-pre");
    assert!(
        status_time(&other, "completionTime") < status_time(&orphan, "completionTime"),
        "the other run was served while the orphan waited"
    );
}

/// A Migration deleted while its run is inside an action: the action finishes (its footprint
/// goes to the history ledger, which outlives the Migration), then the run applies nothing
/// more and ends `DeclarationsChanged`, saying the Migration was deleted. Another Migration's
/// run goes Ready while the action is held. A recreated Migration's new run skips the recorded
/// action and does the rest.
#[tokio::test]
async fn a_migration_deleted_while_its_run_is_going_stops_it_at_the_next_action() {
    let ns = Scene::operator("edge-deleted").await;
    apply(&statefulset(&ns.name, "slow", 1));
    apply(&statefulset(&ns.name, "after", 0));
    running_pods(&ns.name, "slow", 1).await;
    // The scale-down of `slow` waits until its pod is gone: held, it keeps the action going.
    hold_pod(&ns.name, "slow-0");
    let migration = Migration::new(&ns.name)
        .installed("v1.17.3")
        .pre(Action::scale("slow", 0).tag("v1.18.0").run_mode("apply"))
        .pre(
            Action::scale("after", 0)
                .tag("v1.18.0-after")
                .run_mode("apply"),
        )
        .to_yaml();
    apply(&migration);
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    first_action_started(&ns.name, "migrationrun/pre").await;

    other_run(&ns.name);
    wait(&ns.name, "migrationrun/other-pre", "Ready");

    ok(
        "delete the Migration",
        &kubectl(&["delete", "migration", "opendesk", "-n", &ns.name]),
    );
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(condition(&pre, "Ready")["reason"], "Running", "{pre}");
    ok("release the pod", &release_pod(&ns.name, "slow-0"));

    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        condition(&pre, "Ready")["reason"],
        "DeclarationsChanged",
        "{pre}"
    );
    assert!(
        message(&pre).starts_with(
            "Migration opendesk was deleted while the run was going; nothing more is applied"
        ),
        "{pre}"
    );
    let actions = &pre["status"]["actions"];
    assert_eq!(
        actions[0]["decision"], "Succeeded",
        "the action in flight finished and says so: {pre}"
    );
    assert!(
        actions[1]["startTime"].is_null(),
        "nothing more started: {pre}"
    );
    let ledger = get(&ns.name, "configmap/opendesk-history");
    assert_eq!(
        footprints(&ledger, "").len(),
        1,
        "the finished action's footprint is in the ledger: {ledger}"
    );

    // Recreated, with a new run: the recorded action is not applied again.
    apply(&migration);
    apply(&MigrationRun::new(&ns.name, "pre-again", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre-again", "Ready");
    let again = get(&ns.name, "migrationrun/pre-again");
    assert_eq!(
        (
            &again["status"]["actions"][0]["decision"],
            &again["status"]["actions"][0]["reason"],
            &again["status"]["actions"][1]["decision"],
        ),
        (
            &json!("Skipped"),
            &json!("FootprintRecorded"),
            &json!("Succeeded")
        ),
        "{again}"
    );
}

/// The runs of namespace `ns`, as `kubectl get` lists them.
fn runs(ns: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(&ok(
        "list runs",
        &kubectl(&["get", "migrationruns", "-n", ns, "-o", "json"]),
    ))
    .unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn ready(run: &Value) -> Option<&Value> {
    run["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// The runs named `burst-{from:04}` up to `to` (excluded) of Migration `burst`, created in
/// that order (`kubectl create` of a List creates its items one after the other).
fn create_burst(ns: &str, from: usize, to: usize) {
    let items: Vec<Value> = (from..to)
        .map(|i| {
            MigrationRun::new(ns, &format!("burst-{i:04}"), "pre")
                .of("burst")
                .to_value()
        })
        .collect();
    create(
        &serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap(),
    );
}

/// A namespace with an operator-less Migration `burst` keeping `n` runs.
async fn burst_namespace(prefix: &str, n: usize) -> Scene {
    let ns = Scene::cluster(prefix).await;
    apply(
        &Migration::new(&ns.name)
            .name("burst")
            .run_history_limit(n as u32)
            .to_yaml(),
    );
    ns
}

/// Waits until `n` runs in `ns` are all `Ready`, and returns them.
async fn all_ready(ns: &str, n: usize, timeout: Duration) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let runs = runs(ns);
        let done = runs
            .iter()
            .filter(|r| ready(r).is_some_and(|c| c["status"] == "True"))
            .count();
        if runs.len() == n && done == n {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {n} runs Ready after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Checks that the runs of `burst` (sorted by name: their creation order) ran one at a time
/// in that order: each started after the one before it finished.
fn assert_one_at_a_time(mut burst: Vec<Value>) {
    burst.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    for pair in burst.windows(2) {
        assert!(
            status_time(&pair[1], "startTime") >= status_time(&pair[0], "completionTime"),
            "one at a time, in creation order: {} started ({}) before {} finished ({})",
            pair[1]["metadata"]["name"],
            pair[1]["status"]["startTime"],
            pair[0]["metadata"]["name"],
            pair[0]["status"]["completionTime"],
        );
    }
}

/// Runs of one Migration that the operator finds when it starts (its first list) and runs
/// created while it works (its watch) run one at a time in creation order, and each ends
/// once. A run is never decided from a list that is not complete yet (it would not see the
/// runs ahead of it), nor from a copy of itself older than what the operator already wrote
/// (a finished run would be ended again, and its `completionTime` moved past the next run's
/// start): one "run succeeded" per run in the operator's log.
#[tokio::test]
async fn listed_and_watched_runs_go_one_at_a_time_and_end_once() {
    const LISTED: usize = 40;
    const N: usize = 80;
    let ns = burst_namespace("edge-order", N).await;
    create_burst(&ns.name, 0, LISTED);
    let operator = ns.start_operator();
    create_burst(&ns.name, LISTED, N);
    let burst = all_ready(&ns.name, N, Duration::from_secs(300)).await;
    assert_one_at_a_time(burst);
    for (name, ended) in times_ended(&operator.logs(), N) {
        assert_eq!(ended, 1, "{name} ended {ended} times");
    }
}

/// How many times the operator's log says each of the runs `burst-0000`.. ended.
fn times_ended(logs: &str, n: usize) -> Vec<(String, usize)> {
    (0..n)
        .map(|i| {
            let name = format!("burst-{i:04}");
            let field = format!("\"run\":\"{name}\"");
            let ended = logs
                .lines()
                .filter(|l| l.contains("\"message\":\"run succeeded\"") && l.contains(&field))
                .count();
            (name, ended)
        })
        .collect()
}

/// The operator's watch trails its own writes by a second (a proxy delays every watch
/// answer): the event of a run's `planned` write wakes a reconcile after the run has ended,
/// and that reconcile reads the older copy. It changes nothing: its first write, conditional
/// on the version it read, is refused (409), and the run is not ended a second time (nor its
/// `completionTime` moved past the next run's start).
#[tokio::test]
async fn a_reconcile_of_an_old_copy_changes_nothing() {
    const N: usize = 6;
    let ns = burst_namespace("edge-stale", N).await;
    let proxy = KubeProxy::start().await;
    proxy.lag_watches(Duration::from_secs(1));
    let operator = ns.start_operator_with(proxy.kubeconfig(), &[]);
    create_burst(&ns.name, 0, N);
    let burst = all_ready(&ns.name, N, Duration::from_secs(120)).await;
    // The stale reconciles come a second after each end: let the last one's come.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (name, ended) in times_ended(&operator.logs(), N) {
        assert_eq!(ended, 1, "{name} ended {ended} times");
    }
    assert_one_at_a_time(burst);
    let refused = proxy
        .log()
        .iter()
        .filter(|s| {
            s.method == "PATCH" && s.path.contains("/migrationruns/burst-") && s.status == 409
        })
        .count();
    assert!(
        refused >= 1,
        "no write from an old copy was refused: the watch did not trail"
    );
    eprintln!("{refused} writes from an old copy refused");
}

/// 1,000 runs of one Migration created at once: each gets a condition (waiting ones name the
/// run ahead of them), they run one at a time in creation order, and all succeed; another
/// Migration's run, created after them, goes Ready long before the last of them.
///
/// Against a release operator only (`e2e/test` runs it with
/// `STAGEHAND_E2E_OPERATOR_BIN` naming a release operator and `--ignored`, like the
/// scale test): every reconcile of a run decodes its Migration's runs from the store, so a
/// debug operator on a loaded 2-core machine did not reach the other run within 300 s
/// (24 of the 1,000 done after 4 minutes).
#[tokio::test]
#[ignore = "1,000 runs: run by e2e/test against a release operator (STAGEHAND_E2E_OPERATOR_BIN, --ignored)"]
async fn a_thousand_runs_of_one_migration_created_at_once() {
    const N: usize = 1000;
    let ns = Scene::operator("edge-burst").await;
    apply(
        &Migration::new(&ns.name)
            .name("burst")
            .run_history_limit(N as u32)
            .to_yaml(),
    );
    let begun = Instant::now();
    create_burst(&ns.name, 0, N);
    eprintln!("created {N} runs in {:?}", begun.elapsed());
    other_run(&ns.name);
    wait_up_to(
        &ns.name,
        "migrationrun/other-pre",
        "Ready",
        Duration::from_secs(300),
    );
    let other_done = status_time(&get(&ns.name, "migrationrun/other-pre"), "completionTime");
    eprintln!("other-pre Ready after {:?}", begun.elapsed());

    // Every run gets a condition; one that has not finished says what it waits for.
    let mut seen_all = false;
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let burst: Vec<Value> = runs(&ns.name)
            .into_iter()
            .filter(|r| r["spec"]["migrationRef"] == "burst")
            .collect();
        assert_eq!(burst.len(), N, "runHistoryLimit keeps them all");
        let with_condition = burst.iter().filter(|r| ready(r).is_some()).count();
        if with_condition == N && !seen_all {
            seen_all = true;
            eprintln!("every run has a condition after {:?}", begun.elapsed());
            for r in &burst {
                let c = ready(r).unwrap();
                let (reason, text) = (
                    c["reason"].as_str().unwrap(),
                    c["message"].as_str().unwrap(),
                );
                let clear = match reason {
                    "Waiting" => {
                        text.starts_with("MigrationRun burst-")
                            && (text.ends_with(" of the same Migration is running")
                                || text.ends_with(" of the same Migration was created first"))
                    }
                    "Running" | "Succeeded" => true,
                    _ => false,
                };
                assert!(clear, "{}: {reason}: {text}", r["metadata"]["name"]);
            }
        }
        let done = burst
            .iter()
            .filter(|r| ready(r).is_some_and(|c| c["status"] == "True"))
            .count();
        if done == N {
            eprintln!("all {N} Ready after {:?}", begun.elapsed());
            let last = burst
                .iter()
                .map(|r| status_time(r, "completionTime"))
                .max()
                .unwrap();
            assert_one_at_a_time(burst);
            for (name, ended) in times_ended(&ns.operator_process().logs(), N) {
                assert_eq!(ended, 1, "{name} ended {ended} times");
            }
            assert!(
                other_done < last,
                "the other Migration's run was served while the burst went on"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {N} runs Ready after {:?}",
            begun.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert!(seen_all, "every run had a condition");
}

/// A Migration whose action config is 1 MiB, one value of it (1 MiB of digits where the
/// replica count belongs) wrong: the Migration and its run are `Invalid`, their messages
/// naming the action and the field, cut to 32 KiB (and each problem to 4 KiB) so that the
/// status holding them can be written; the run's Event is published with its note cut to the
/// API's 1 KiB. Another Migration's run goes Ready.
#[tokio::test]
async fn an_action_config_of_one_mebibyte_gets_a_bounded_condition() {
    let ns = Scene::operator("edge-big").await;
    let big = "9".repeat(1 << 20);
    create(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::new("workload_scale").config(json!({"workload": {
                "kind": "StatefulSet", "name": "ox-connector", "replicas": big,
            }})))
            .to_yaml(),
    );
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    other_run(&ns.name);
    wait(&ns.name, "migrationrun/other-pre", "Ready");

    for what in ["migration/opendesk", "migrationrun/pre"] {
        wait(&ns.name, what, "Stalled");
        let obj = get(&ns.name, what);
        assert_eq!(condition(&obj, "Stalled")["reason"], "Invalid", "{what}");
        let text = message(&obj);
        assert!(
            text.len() <= 32 * 1024
                && text.contains("workload_scale")
                && text.contains("config.workload.replicas")
                && text.ends_with("bytes in all]"),
            "{what}: a bounded message naming the action and the field: {}...",
            &text[..text.len().min(300)]
        );
        let problems = obj["status"]["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{what}");
        assert_eq!(problems[0]["field"], "config.workload.replicas", "{what}");
        assert!(problems[0]["message"].as_str().unwrap().len() <= 4 * 1024);
    }
    let pre = get(&ns.name, "migrationrun/pre");
    assert!(
        pre["status"]["actions"].as_array().unwrap().is_empty(),
        "nothing planned: {pre}"
    );
    let events: Value = serde_json::from_str(&stdout(&kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &ns.name,
        "-o",
        "json",
    ])))
    .unwrap();
    let notes: Vec<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "Invalid"
                && e["regarding"]["kind"] == "MigrationRun"
                && e["regarding"]["name"] == "pre"
        })
        .filter_map(|e| e["note"].as_str())
        .collect();
    assert!(
        notes.len() == 1 && notes[0].len() <= 1024 && notes[0].contains("workload_scale"),
        "the run's Invalid Event, its note cut to 1 KiB: {notes:?}"
    );
}
