//! A leader cut off from the API server (issue 17, item 3), on the real control plane with
//! two operator processes: replica-a reaches the API server only through a TCP proxy the test
//! cuts while replica-a is inside a slow destructive action (`provisioning_drop_subscriptions`
//! of many subscriptions, each DELETE delayed by the Provisioning simulator); replica-b, the
//! standby, reaches it directly. replica-a cannot renew its Lease: after the renew deadline
//! (10 s) it stops its action at the next safe point (between two DELETEs) and exits, before
//! the Lease expires (15 s) and replica-b takes it. The simulator's request log, each request
//! with the replica that sent it (its User-Agent), shows that replica-a sent nothing once
//! replica-b had started, and that every subscription was deleted exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::proxy::{CutProxy, api_server_of, replica_args, replica_of};
use stagehand_e2e::{Scene, create_secret, get, kubeconfig, kubectl, stdout, wait_for, wait_up_to};
use stagehand_simulators::http::{FaultRule, LoggedRequest};
use stagehand_simulators::provisioning::{self, ProvisioningConfig};

/// Subscriptions the action drops, one DELETE each.
const SUBSCRIPTIONS: usize = 60;
/// How long the simulator takes over each DELETE: the action takes about 18 s in all, so the
/// cut lands inside it and replica-a is still inside it when its renew deadline passes.
const DELETE_DELAY_MS: u64 = 300;

fn lease_holder(ns: &str) -> String {
    stdout(&kubectl(&[
        "get",
        "lease",
        "stagehand-leader",
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_can_expire() {
    let ns = Scene::cluster("cut-leader").await;
    let names: Vec<String> = (0..SUBSCRIPTIONS).map(|i| format!("sub-{i:02}")).collect();
    let password = format!("prov-{}-S3cret", std::process::id());
    let sim = provisioning::start(ProvisioningConfig::new("admin", &password))
        .await
        .unwrap();
    for name in &names {
        sim.state()
            .add_subscription(name, &[("udm", "users/user")], false, "c");
    }
    sim.faults().add(
        FaultRule::prefix("/v1/subscriptions/")
            .method("DELETE")
            .delay_ms(DELETE_DELAY_MS),
    );
    create_secret(&ns.name, "provisioning", "password", &password);

    let config = kubeconfig();
    let proxy = CutProxy::start(api_server_of(&config)).await.unwrap();
    let through_proxy = proxy.kubeconfig(&config);
    let mut a = ns.start_operator_with(through_proxy.to_str().unwrap(), &replica_args("replica-a"));
    wait_for("replica-a to lead", Duration::from_secs(60), || async {
        (lease_holder(&ns.name) == "replica-a").then_some(())
    })
    .await;
    let mut b = ns.start_operator_with(&config, &replica_args("replica-b"));

    stagehand_e2e::apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("provisioning-api-password", "provisioning", "password")
            .pre(
                Action::new("provisioning_drop_subscriptions").config(json!({
                    "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": 20},
                    "subscriptions": names,
                })),
            )
            .to_yaml(),
    );
    stagehand_e2e::apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());

    // Cut replica-a off once it has dropped a few subscriptions.
    wait_for(
        "replica-a to be deleting",
        Duration::from_secs(60),
        || async {
            (sim.requests()
                .iter()
                .filter(|r| r.method == "DELETE")
                .count()
                >= 5)
                .then_some(())
        },
    )
    .await;
    let cut_at = Instant::now();
    proxy.cut();
    let deleted_at_cut = SUBSCRIPTIONS - sim.state().names().len();

    // replica-a stops on its own (non-zero), before its Lease can expire.
    let exit = loop {
        if let Some(exit) = a.try_wait() {
            break exit;
        }
        assert!(
            cut_at.elapsed() < Duration::from_secs(30),
            "replica-a did not exit after the cut:\n{}",
            a.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let a_exited_after = cut_at.elapsed();
    assert!(!exit.success(), "a deposed leader exits non-zero: {exit:?}");
    let a_logs = a.logs();
    assert!(
        a_logs.contains("the renew deadline"),
        "it saw the renew deadline pass:\n{a_logs}"
    );
    assert!(
        a_logs.contains("action stopped at a safe point")
            && a_logs.contains("no action in flight: exiting"),
        "its action stopped at a safe point before it exited:\n{a_logs}"
    );
    assert!(
        a_exited_after < Duration::from_secs(12),
        "it gave up within the renew deadline (10 s after its last renewal, which came before the cut), not at the lease's expiry: {a_exited_after:?}"
    );

    // replica-b takes the Lease once it expires, and finishes the run.
    wait_for("replica-b to lead", Duration::from_secs(60), || async {
        (lease_holder(&ns.name) == "replica-b").then_some(())
    })
    .await;
    let b_led_after = cut_at.elapsed();
    wait_up_to(
        &ns.name,
        "migrationrun/pre",
        "Ready",
        Duration::from_secs(120),
    );
    let done = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        done["status"]["actions"][0]["decision"], "Succeeded",
        "{done}"
    );

    // The request log: replica-a's requests all came before replica-b's first one.
    let log = sim.requests();
    let by_replica: Vec<&str> = log.iter().map(replica_of).collect();
    assert!(
        !by_replica.contains(&"unknown"),
        "every request names its replica: {log:?}"
    );
    let first_b = by_replica
        .iter()
        .position(|r| *r == "replica-b")
        .expect("replica-b sent requests");
    let a_after: Vec<&LoggedRequest> = log[first_b..]
        .iter()
        .filter(|r| replica_of(r) == "replica-a")
        .collect();
    assert!(
        a_after.is_empty(),
        "replica-a sent {} request(s) after replica-b's first one: {a_after:?}",
        a_after.len()
    );
    let a_deleted = log[..first_b]
        .iter()
        .filter(|r| r.method == "DELETE" && matches!(r.status, Some(200 | 204)))
        .count();
    assert!(
        a_deleted < SUBSCRIPTIONS,
        "replica-a was stopped inside the action, not after it: it deleted {a_deleted}"
    );
    // Each subscription deleted exactly once (a DELETE answered 200), by one replica or the
    // other; the ones replica-a deleted are "already gone" for replica-b.
    let mut deleted: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for r in &log {
        if r.method == "DELETE" && matches!(r.status, Some(200 | 204)) {
            let name = r.path.rsplit('/').next().unwrap_or_default().to_string();
            deleted.entry(name).or_default().push(replica_of(r));
        }
    }
    for name in &names {
        assert_eq!(
            deleted.get(name).map(Vec::len),
            Some(1),
            "{name} deleted exactly once: {deleted:?}"
        );
    }
    assert!(sim.state().names().is_empty());
    let summary = done["status"]["actions"][0]["summary"]
        .as_str()
        .unwrap_or_default();
    assert!(summary.contains("already gone"), "{summary}");
    eprintln!(
        "cut after {deleted_at_cut} deletes; replica-a deleted {a_deleted} of {SUBSCRIPTIONS} and exited {:.1} s after the cut; replica-b led {:.1} s after the cut",
        a_exited_after.as_secs_f64(),
        b_led_after.as_secs_f64()
    );
    assert!(a_exited_after < b_led_after);
    b.terminate();
}
