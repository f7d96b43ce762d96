//! A leader cut off from the API server in the delete phase of `ox_functional_accounts_export`
//! (issue 26, item 3), on the real control plane with two operator processes, a real MinIO
//! and the UDM REST and OX SOAP simulators (the `World` of `stagehand_e2e::functional_accounts`).
//! As in `faults_leader.rs`, replica-a reaches the API server only through a TCP proxy the
//! test cuts, replica-b reaches it directly.
//!
//! The export records 128 Functional Accounts in the handover, removes their mailboxes in OX
//! and then deletes them from the IAM, 8 at a time, each UDM `DELETE` delayed 1 s by the
//! simulator (about 16 s in all). The test cuts replica-a off once the first `DELETE` was
//! answered: the handover is written, every mailbox is removed, the IAM deletion has begun and
//! has more than the renew deadline (10 s) left. replica-a cannot renew its Lease; at its renew
//! deadline it stops the export at the next safe point (no new `DELETE`, the ones in flight
//! awaited) and exits; replica-b takes the Lease and continues the same run's export from the
//! handover.
//!
//! Asserted: no destructive request of replica-a (SOAP `delete`, UDM `DELETE`) reached the
//! simulators after its renew deadline (the `renewTime` of its last renewal plus 10 s; the
//! simulators log when each request arrived) nor after replica-b's first request; replica-a
//! stopped inside the IAM deletion and its log says how far it got; the run ends Ready with the
//! export continued; every account is in the IAM or in the handover at every point the test
//! looks, and at the end the handover describes all of them and the IAM holds none; every
//! mailbox and every account was deleted exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use stagehand_e2e::functional_accounts::{EXPORT, World, scale_fixture};
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::proxy::{CutProxy, api_server_of, replica_args, replica_of};
use stagehand_e2e::{Scene, get, kubeconfig, wait_for, wait_up_to};
use stagehand_simulators::http::{FaultRule, LoggedRequest};

/// Functional Accounts exported.
const ACCOUNTS: usize = 128;
/// How long the UDM simulator takes over each `DELETE`: with 8 in flight the IAM deletion
/// takes about `ACCOUNTS / 8` s, longer than the renew deadline after the cut.
const DELETE_DELAY_MS: u64 = 1_000;
/// The operator's renew deadline (its default).
const RENEW_DEADLINE_MS: u64 = 10_000;
/// From the renew deadline to the stop being seen by the export's batch: the replica's
/// deadline timer firing and the stop reaching the batch, on a loaded 2-core machine. A
/// `DELETE` sent just before the stop arrives within it; without the stop the export deletes
/// on for up to 4 s more (until the process exits, 1 s before the Lease can expire).
const STOP_LATENCY_MS: u64 = 1_000;
const FA_PATH: &str = "/univention/udm/oxmail/functional_account/";

/// The destructive requests the simulators logged: SOAP `delete`s (one per mailbox) and UDM
/// `DELETE`s of Functional Accounts (one per account), with the object each one is for.
fn destructive(w: &World) -> Vec<(String, LoggedRequest)> {
    let soap =
        w.ox.requests()
            .into_iter()
            .filter(|r| r.op.as_deref() == Some("delete"))
            .map(|r| (r.object.clone().unwrap_or_else(|| r.path.clone()), r));
    let udm = w
        .udm
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.starts_with(FA_PATH))
        .map(|r| (r.path.clone(), r));
    soap.chain(udm).collect()
}

/// Whether the first request of replica-b in `log` comes after every request of replica-a.
fn a_before_b(log: &[LoggedRequest]) -> Result<(), String> {
    let Some(first_b) = log.iter().position(|r| replica_of(r) == "replica-b") else {
        return Err("replica-b sent no request".into());
    };
    let late: Vec<&LoggedRequest> = log[first_b..]
        .iter()
        .filter(|r| replica_of(r) == "replica-a")
        .collect();
    if late.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "replica-a sent {} request(s) after replica-b's first one: {late:?}",
            late.len()
        ))
    }
}

fn millis(t: SystemTime) -> u64 {
    u64::try_from(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_in_the_export_deletes_nothing_after_its_renew_deadline() {
    let ns = Scene::cluster("cut-export").await;
    let client = ns.client().clone();
    let w = World::start().await;
    let (users, accounts) = scale_fixture(ACCOUNTS);
    let seeded = w.seed(&users, &accounts, true);
    w.udm.faults().add(
        FaultRule::prefix(FA_PATH)
            .method("DELETE")
            .delay_ms(DELETE_DELAY_MS),
    );
    w.create_secrets(&ns.name);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let lease = || async {
        let spec = leases
            .get("stagehand-leader")
            .await
            .ok()
            .and_then(|l| l.spec)
            .unwrap_or_default();
        (
            spec.holder_identity.unwrap_or_default(),
            spec.renew_time.map(|t| SystemTime::from(t.0)),
        )
    };

    let config = kubeconfig();
    let proxy = CutProxy::start(api_server_of(&config)).await.unwrap();
    let through_proxy = proxy.kubeconfig(&config);
    let mut a = ns.start_operator_with(through_proxy.to_str().unwrap(), &replica_args("replica-a"));
    wait_for("replica-a to lead", Duration::from_secs(60), || async {
        (lease().await.0 == "replica-a").then_some(())
    })
    .await;
    let mut b = ns.start_operator_with(&config, &replica_args("replica-b"));

    stagehand_e2e::apply(&w.migration_with(&ns.name, &[EXPORT], &[]));
    stagehand_e2e::apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());

    // Cut replica-a off once the IAM deletion has begun (a DELETE answered).
    wait_for(
        "replica-a to be deleting Functional Accounts",
        Duration::from_secs(180),
        || async {
            destructive(&w)
                .iter()
                .any(|(_, r)| r.path.starts_with(FA_PATH) && r.status.is_some())
                .then_some(())
        },
    )
    .await;
    let cut_at = Instant::now();
    proxy.cut();
    let in_iam_at_cut = w.functional_accounts().len();
    assert!(
        in_iam_at_cut > ACCOUNTS / 2,
        "the cut came early in the IAM deletion: {in_iam_at_cut} of {ACCOUNTS} left"
    );
    let described: BTreeSet<String> = w
        .handover()
        .expect("the handover is written before the first DELETE")
        .accounts
        .iter()
        .map(|a| a.entry_uuid.to_lowercase())
        .collect();
    assert_eq!(
        described,
        seeded.uuids(),
        "the handover describes every account before the first DELETE"
    );
    // Every account in the IAM or in the handover (which is not rewritten: read once).
    let in_iam_or_handover = || {
        let in_iam: BTreeSet<String> = w
            .functional_accounts()
            .iter()
            .map(|o| o.uuid.to_lowercase())
            .collect();
        let lost: Vec<String> = seeded
            .uuids()
            .into_iter()
            .filter(|u| !in_iam.contains(u) && !described.contains(u))
            .collect();
        assert!(
            lost.is_empty(),
            "neither in the IAM nor in the handover: {lost:?}"
        );
    };

    // replica-a stops on its own (non-zero), before its Lease can expire; meanwhile every
    // account is in the IAM or in the handover.
    let exit = loop {
        if let Some(exit) = a.try_wait() {
            break exit;
        }
        in_iam_or_handover();
        assert!(
            cut_at.elapsed() < Duration::from_secs(30),
            "replica-a did not exit after the cut:\n{}",
            a.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let a_exited_after = cut_at.elapsed();
    // Nobody renewed the Lease since replica-a's last renewal: its renewTime is that one.
    let (holder, renewed) = lease().await;
    assert_eq!(
        holder, "replica-a",
        "replica-a exited before replica-b could take the Lease"
    );
    let deadline_ms = millis(renewed.expect("the Lease has a renewTime")) + RENEW_DEADLINE_MS;
    // No destructive request of replica-a reached a simulator after its renew deadline.
    let a_deletes: Vec<(String, LoggedRequest)> = destructive(&w)
        .into_iter()
        .filter(|(_, r)| replica_of(r) == "replica-a")
        .collect();
    let last_a_delete = a_deletes
        .iter()
        .map(|(_, r)| r.received_unix_ms)
        .max()
        .expect("replica-a deleted");
    let late: Vec<&(String, LoggedRequest)> = a_deletes
        .iter()
        .filter(|(_, r)| r.received_unix_ms > deadline_ms + STOP_LATENCY_MS)
        .collect();
    assert!(
        late.is_empty(),
        "{} delete(s) of replica-a arrived after its renew deadline (renewTime + 10 s, plus {STOP_LATENCY_MS} ms for the stop to be seen); the last {} ms after it: {:?}",
        late.len(),
        last_a_delete.saturating_sub(deadline_ms),
        late.iter()
            .map(|(o, r)| (o, r.received_unix_ms))
            .collect::<Vec<_>>()
    );

    assert!(!exit.success(), "a deposed leader exits non-zero: {exit:?}");
    let a_logs = a.logs();
    for (what, text) in [
        ("saw the renew deadline pass", "the renew deadline"),
        (
            "stopped its action at a safe point",
            "action stopped at a safe point",
        ),
        (
            "said how far the export got",
            "every mailbox was removed in OX App Suite",
        ),
        (
            "said the handover holds every account",
            "is written and describes all 128 accounts",
        ),
        (
            "said the run continues from it",
            "continues the export from the handover",
        ),
        (
            "exited with no action in flight",
            "no action in flight: exiting",
        ),
    ] {
        assert!(a_logs.contains(text), "replica-a {what}:\n{a_logs}");
    }
    let in_iam_after_a = w.functional_accounts().len();
    assert!(
        in_iam_after_a > 0,
        "replica-a was stopped inside the IAM deletion, not after it"
    );
    w.assert_every_account_described(&seeded);

    // replica-b takes the Lease once it expires and continues the export from the handover.
    w.udm.faults().clear();
    wait_for("replica-b to lead", Duration::from_secs(60), || async {
        (lease().await.0 == "replica-b").then_some(())
    })
    .await;
    let b_led_after = cut_at.elapsed();
    wait_up_to(
        &ns.name,
        "migrationrun/pre",
        "Ready",
        Duration::from_secs(180),
    );
    let done = get(&ns.name, "migrationrun/pre");
    let action = &done["status"]["actions"][0];
    assert_eq!(action["decision"], "Succeeded", "{done}");
    let summary = action["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("continued the export this run began")
            && summary.contains(&format!(
                "deleted the {in_iam_after_a} Functional Accounts left"
            )),
        "{summary}"
    );
    assert!(w.functional_accounts().is_empty(), "the IAM holds none");
    assert_eq!(
        w.handover().map(|h| h.accounts.len()),
        Some(ACCOUNTS),
        "the handover describes every account"
    );
    w.assert_every_account_described(&seeded);

    // replica-a sent nothing once replica-b had started; every mailbox and every account was
    // deleted exactly once, by one replica or the other.
    a_before_b(&w.ox.requests()).unwrap();
    a_before_b(&w.udm.requests()).unwrap();
    let mut deleted: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let all = destructive(&w);
    for (object, r) in &all {
        deleted
            .entry(object.clone())
            .or_default()
            .push(replica_of(r));
    }
    let repeated: Vec<_> = deleted.iter().filter(|(_, by)| by.len() != 1).collect();
    assert!(repeated.is_empty(), "deleted more than once: {repeated:?}");
    assert_eq!(
        deleted.len(),
        2 * ACCOUNTS,
        "one SOAP delete per mailbox and one DELETE per account"
    );
    assert!(
        all.iter().all(|(_, r)| matches!(r.status, Some(200 | 204))),
        "every delete answered: {all:?}"
    );
    let by_b = all
        .iter()
        .filter(|(_, r)| replica_of(r) == "replica-b")
        .count();
    eprintln!(
        "cut with {in_iam_at_cut} of {ACCOUNTS} accounts in the IAM; replica-a left {in_iam_after_a}, its last delete {} ms before its renew deadline, and exited {:.1} s after the cut; replica-b led {:.1} s after the cut and deleted {by_b}",
        i128::from(deadline_ms) - i128::from(last_a_delete),
        a_exited_after.as_secs_f64(),
        b_led_after.as_secs_f64(),
    );
    assert!(a_exited_after < b_led_after);
    b.terminate();
}
