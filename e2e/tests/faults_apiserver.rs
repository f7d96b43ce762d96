//! The API server and etcd lost in the middle of a long action (issue 17, item 2), on a
//! control plane of this test's own (`e2e/cluster/up` in a fresh state dir; the shared one is
//! never stopped). A real redis-server holds the sessions `flush_intercom_sessions` deletes
//! (1,000,000 by default, `STAGEHAND_FAULTS_SESSIONS`; about 5–10 s of SCAN and UNLINK here).
//! The test stops kube-apiserver (then, in a second namespace, etcd) with `e2e/cluster/ctl` as
//! soon as the run's status says the action started, keeps it stopped for 30 s
//! (`STAGEHAND_FAULTS_OUTAGE_SECONDS`), and starts it again with the same flags, ports and data.
//!
//! What it shows: the operator that was leading cannot renew its Lease, so after the renew
//! deadline it stops the flush at its next safe point (or, if the flush ended first, gives up
//! writing its result) and exits non-zero, writing nothing; the test restarts it as a
//! Deployment would. Once the server is back, the next operator takes the Lease, re-enters
//! the action, deletes what is left and writes the status: the run ends Ready, every session
//! is gone and no other key, the footprint is in the ledger once, and the keys the first
//! operator reported deleted plus the ones the run's summary reports add up to exactly the
//! sessions the server held (nothing counted twice, nothing lost).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use serde_json::json;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::private_cluster::{PrivateCluster, Replicas};
use stagehand_e2e::redis::{RedisOptions, RedisServer};
use stagehand_e2e::{env_or, footprints, ok};

const OTHERS: u64 = 100_000;
const PASSWORD: &str = "outage-S3cret-pw";

/// The number before the first ` keys matching` in `text`.
fn keys_in(text: &str) -> Option<u64> {
    let at = text.find(" keys matching")?;
    let digits: String = text[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// What the replicas that exited reported deleting: the lines where an action stopped at a
/// safe point or was applied and then lost its leadership before writing.
fn deleted_by_exited(exited: &[(ExitStatus, String)]) -> u64 {
    exited
        .iter()
        .flat_map(|(_, log)| log.lines())
        .filter(|l| {
            l.contains("action stopped at a safe point")
                || l.contains("action applied; writing its result")
        })
        .filter_map(keys_in)
        .sum()
}

async fn outage_during_a_flush(cluster: &PrivateCluster, component: &str) -> String {
    let sessions = env_or("STAGEHAND_FAULTS_SESSIONS", 1_000_000);
    let outage = Duration::from_secs(env_or("STAGEHAND_FAULTS_OUTAGE_SECONDS", 30));
    let ns = format!("outage-{component}");
    cluster.create_namespace(&ns);
    let redis = RedisServer::start(RedisOptions {
        default_password: Some(PASSWORD.into()),
        debug_command: true,
        ..RedisOptions::default()
    });
    redis.populate(0, sessions, "sess", 50);
    redis.populate(0, OTHERS, "ox:session", 50);
    assert_eq!(redis.dbsize(0), sessions + OTHERS);
    ok(
        "create secret",
        &cluster.kubectl(&[
            "create",
            "secret",
            "generic",
            "redis",
            "-n",
            &ns,
            &format!("--from-literal=password={PASSWORD}"),
        ]),
    );
    cluster.apply(
        &Migration::new(&ns)
            .installed("v1.17.3")
            .secret_file("redis-password", "redis", "password")
            .pre(
                Action::new("flush_intercom_sessions")
                    .tag("v1.18.0")
                    .config(json!({"redis": {
                        "host": "127.0.0.1", "port": redis.port(), "username": "default",
                        "keyPattern": "sess:*", "requestTimeoutSeconds": 10,
                    }})),
            )
            .to_yaml(),
    );
    let mut replicas = Replicas::start(cluster, &ns);
    cluster.apply(&MigrationRun::new(&ns, "pre", "pre").to_yaml());

    // Stop the component as soon as the action has started.
    let waiting = Instant::now();
    let started_at = loop {
        replicas.tick();
        if let Some(run) = cluster.get(&ns, "migrationrun/pre")
            && run["status"]["actions"][0]["startTime"].is_string()
        {
            break run["status"]["actions"][0]["startTime"].clone();
        }
        assert!(
            waiting.elapsed() < Duration::from_secs(120),
            "the action did not start:\n{}",
            replicas.current.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let left_at_stop = redis.dbsize(0) - OTHERS;
    let o = replicas
        .outage(
            component,
            outage,
            "pre",
            outage + Duration::from_secs(120),
            || redis.dbsize(0) - OTHERS,
        )
        .await;
    let run = o.run;
    let action = &run["status"]["actions"][0];
    assert_eq!(action["decision"], "Succeeded", "{run}");
    assert_eq!(
        action["startTime"], started_at,
        "re-entered, not started again: {run}"
    );

    // The server: every session gone, nothing else.
    assert_eq!(redis.count_matching(0, "sess:*"), 0);
    assert_eq!(redis.dbsize(0), OTHERS, "only the sessions were deleted");
    // The counts: what the replica that lost the server reported plus what the run reports.
    assert!(
        !replicas.exited.is_empty(),
        "the leader cut off from its {component} exited"
    );
    for (exit, _) in &replicas.exited {
        assert!(!exit.success(), "{exit:?}");
    }
    let first = deleted_by_exited(&replicas.exited);
    let summary = action["summary"].as_str().unwrap_or_default();
    let last = if summary.contains("nothing to do") {
        0
    } else {
        keys_in(summary).unwrap_or_else(|| panic!("no count in {summary:?}"))
    };
    assert_eq!(
        first + last,
        sessions,
        "the deletions reported add up to the sessions held: {first} by the replica that lost its {component}, {last} in the run's summary ({summary})"
    );
    // The footprint is in the ledger once.
    let ledger = cluster
        .get(&ns, "configmap/opendesk-history")
        .expect("the ledger");
    assert_eq!(
        footprints(&ledger, "").len(),
        1,
        "one footprint: {}",
        ledger["data"]
    );
    let stopped_logs: Vec<&String> = replicas
        .exited
        .iter()
        .map(|(_, log)| log)
        .filter(|log| log.contains("the renew deadline"))
        .collect();
    assert!(
        !stopped_logs.is_empty(),
        "the leader gave up at its renew deadline: {:?}",
        replicas.exited.iter().map(|(_, l)| l).collect::<Vec<_>>()
    );
    let how = if replicas
        .exited
        .iter()
        .any(|(_, l)| l.contains("action stopped at a safe point"))
    {
        "stopped the flush at a safe point"
    } else {
        "finished the flush, could not write its result"
    };
    let exits = replicas.exited.len();
    drop(replicas);
    format!(
        "{component}: stopped once the action had started ({left_at_stop} of {sessions} sessions left then, {} when `ctl stop` returned after {:.1} s, {} when it came back after {:.1} s); the leader {how} and exited non-zero ({exits} exit(s) in all, counting restarts while the server was away); it reported {first} deleted, the next leader {last}; Ready {:.1} s after the stop",
        o.left_when_stopped,
        o.stopped_after.as_secs_f64(),
        o.left_after,
        o.back_after.as_secs_f64(),
        o.ready_after.as_secs_f64(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_and_etcd_lost_mid_action() {
    let cluster = PrivateCluster::up();
    cluster.install_crds();
    let apiserver = outage_during_a_flush(&cluster, "kube-apiserver").await;
    eprintln!("{apiserver}");
    let etcd = outage_during_a_flush(&cluster, "etcd").await;
    eprintln!("{etcd}");
}
