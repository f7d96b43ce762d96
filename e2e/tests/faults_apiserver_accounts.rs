//! The API server lost in the middle of the 5,000-account Functional Accounts export (issue
//! 17, item 2), on a control plane of this test's own (`e2e/cluster/up` in a fresh state dir),
//! against a real MinIO and the UDM and OX simulators (the `World` of
//! `stagehand_e2e::functional_accounts`, seeded with the scale fixture: three groupware users
//! per account, 15,000 secondary account rows).
//!
//! The test stops kube-apiserver with `e2e/cluster/ctl` once the export has deleted its first
//! mailbox (the handover is written, the destructive part has begun), keeps it stopped for
//! 30 s (`STAGEHAND_FAULTS_OUTAGE_SECONDS`) and starts it again with the same flags, ports and
//! data. The leader cannot renew its Lease: at its renew deadline it stops the export at the
//! next safe point and exits non-zero; the test restarts it as a Deployment would. The next
//! leader re-enters the action, which continues from the handover of the same run.
//!
//! What it shows: the run ends Ready; every Functional Account is gone from UDM and every one
//! of its mailbox rows from OX, the foreign row kept; the handover describes every account;
//! no mailbox and no account was deleted twice (the simulators' request logs); the
//! footprint is in the ledger once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use stagehand_e2e::functional_accounts::{EXPORT, World, scale_fixture};
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::private_cluster::{PrivateCluster, Replicas};
use stagehand_e2e::{env_or, footprints};

/// The served SOAP deletes (one per mailbox) and UDM DELETEs (one per account), each
/// with the number of times it was served.
fn deletes(w: &World) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut soap = BTreeMap::new();
    for r in w.ox.requests() {
        if r.op.as_deref() == Some("delete") && r.status.is_some() {
            *soap.entry(r.object.unwrap_or(r.path)).or_default() += 1;
        }
    }
    let mut udm = BTreeMap::new();
    for r in w.udm.requests() {
        if r.method == "DELETE" && r.status.is_some() {
            *udm.entry(r.path).or_default() += 1;
        }
    }
    (soap, udm)
}

fn repeated(counts: &BTreeMap<String, usize>) -> Vec<(&String, &usize)> {
    counts.iter().filter(|(_, n)| **n > 1).collect()
}

// A debug build takes several minutes for the export alone: e2e/test runs it in release.
#[ignore = "run against a release operator by e2e/test: STAGEHAND_E2E_OPERATOR_BIN=target/release/stagehand cargo test -p stagehand-e2e --test faults_apiserver_accounts -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_lost_mid_functional_accounts_export() {
    let n = usize::try_from(env_or("STAGEHAND_FA_SCALE", 5_000)).unwrap();
    let outage = Duration::from_secs(env_or("STAGEHAND_FAULTS_OUTAGE_SECONDS", 30));
    let cluster = PrivateCluster::up();
    cluster.install_crds();
    let ns = "outage-accounts";
    cluster.create_namespace(ns);
    let w = World::start().await;
    let (users, accounts) = scale_fixture(n);
    let seeded = w.seed(&users, &accounts, true);
    let rows = w.ox.state().secondary_accounts(1).len();
    assert_eq!(
        rows,
        3 * n + 1,
        "secondary account rows (and the foreign one)"
    );
    for (name, key, value) in w.secret_objects() {
        cluster.create_secret(ns, name, key, value);
    }
    cluster.apply(&w.migration_with(ns, &[EXPORT], &[]));
    let mut replicas = Replicas::start(&cluster, ns);
    let began = Instant::now();
    cluster.apply(&MigrationRun::new(ns, "pre", "pre").to_yaml());

    // Stop the API server once the first mailbox is deleted.
    let started_at = loop {
        replicas.tick();
        if !deletes(&w).0.is_empty()
            && let Some(run) = cluster.get(ns, "migrationrun/pre")
        {
            break run["status"]["actions"][0]["startTime"].clone();
        }
        assert!(
            began.elapsed() < Duration::from_secs(600),
            "the export deleted nothing in 600 s:\n{}",
            replicas.current.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(started_at.is_string(), "the action started: {started_at}");
    let rows_at_stop = w.ox.state().secondary_accounts(1).len();
    let o = replicas
        .outage(
            "kube-apiserver",
            outage,
            "pre",
            outage + Duration::from_secs(900),
            || w.ox.state().secondary_accounts(1).len() as u64,
        )
        .await;
    let run = o.run;
    let action = &run["status"]["actions"][0];
    assert_eq!(action["decision"], "Succeeded", "{run}");
    assert_eq!(
        action["startTime"], started_at,
        "re-entered, not started again: {run}"
    );

    // The servers: every account and mailbox row gone, the foreign row kept, every account
    // described by the handover.
    assert!(
        w.functional_accounts().is_empty(),
        "every Functional Account deleted"
    );
    assert_eq!(
        w.ox.state().secondary_accounts(1).len(),
        1,
        "only the foreign row is left"
    );
    assert_eq!(w.handover().unwrap().accounts.len(), n);
    w.assert_every_account_described(&seeded);
    // Nothing deleted twice, nothing left out.
    let (soap, udm) = deletes(&w);
    assert!(
        repeated(&soap).is_empty(),
        "mailboxes deleted twice: {:?}",
        repeated(&soap)
    );
    assert!(
        repeated(&udm).is_empty(),
        "accounts deleted twice: {:?}",
        repeated(&udm)
    );
    assert_eq!(
        soap.len(),
        n,
        "one SOAP delete per mailbox (its three user rows go with it)"
    );
    assert_eq!(udm.len(), n, "one UDM DELETE per account");
    // The footprint is in the ledger once.
    let ledger = cluster
        .get(ns, "configmap/opendesk-history")
        .expect("the ledger");
    assert_eq!(
        footprints(&ledger, "").len(),
        1,
        "one footprint: {}",
        ledger["data"]
    );
    // The leader cut off stopped at its renew deadline and exited non-zero.
    assert!(
        !replicas.exited.is_empty(),
        "the leader cut off from its API server exited"
    );
    for (exit, _) in &replicas.exited {
        assert!(!exit.success(), "{exit:?}");
    }
    assert!(
        replicas
            .exited
            .iter()
            .any(|(_, log)| log.contains("the renew deadline")),
        "the leader gave up at its renew deadline"
    );
    let logged = |text: &str| replicas.exited.iter().any(|(_, l)| l.contains(text));
    let how = if logged("action stopped at a safe point") {
        "stopped the export at a safe point"
    } else if logged("action applied; writing its result") {
        "finished the export, could not write its result"
    } else {
        "exited inside the export before it reached a safe point (a request in flight when the replica had to exit, 1 s before its Lease could expire)"
    };
    eprintln!(
        "kube-apiserver: stopped after the first mailbox was deleted ({rows_at_stop} of {rows} rows left then, {} when it came back after {:.1} s; `ctl stop` took {:.1} s); the leader {how} and exited non-zero ({} exit(s) in all); Ready {:.1} s after the stop; {} SOAP and {} UDM deletes, none repeated",
        o.left_after,
        o.back_after.as_secs_f64(),
        o.stopped_after.as_secs_f64(),
        replicas.exited.len(),
        o.ready_after.as_secs_f64(),
        soap.len(),
        udm.len(),
    );
}
