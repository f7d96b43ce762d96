//! Crash tests of the Functional Accounts to Shared Accounts pair: a fault at every external
//! call of `ox_functional_accounts_export` (the handover's write and read-back in MinIO, each
//! SOAP delete, each UDM delete, the final read-back of OX) and of `ox_shared_accounts_import`
//! (the permission wait, each create). After each fault the stage is run again as the reference
//! prescribes (for the "handover present while accounts remain" stop: the documented manual
//! clean-up, then a rerun), and the promise is checked: every account is still in the IAM or
//! described in the handover, never neither, and part 2 then creates exactly the accounts that
//! were exported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_actions::action::RunIdentity;
use stagehand_e2e::functional_accounts::{IMPORT, S3Fault, S3Rule, Seeded, World, small_fixture};
use stagehand_simulators::http::FaultRule;

const FA_PATH: &str = "/univention/udm/oxmail/functional_account/";
const SA_PATH: &str = "/univention/udm/oxmail/shared_account/";
const SECONDARY: &str = "/webservices/OXSecondaryAccountService";

async fn seeded_world() -> (World, Seeded) {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let seeded = w.seed(&u, &a, true);
    (w, seeded)
}

/// Whether an export error is the stop of a run that finds a handover while accounts remain.
fn is_stop(message: &str) -> bool {
    message.contains("already exists") && message.contains("Nothing was changed")
}

/// After a failed export: heals every fault, checks the promise, then runs the stage again as
/// the reference prescribes until it succeeds (a stop is answered with the manual clean-up it
/// asks for, and the stop itself must change nothing); then part 2 must create exactly the
/// exported accounts. Answers how many stops there were.
async fn recover(w: &World, seeded: &Seeded, first_error: &str) -> usize {
    w.proxy.heal();
    w.udm.faults().clear();
    w.ox.faults().clear();
    assert!(
        !first_error.contains("udm-secret-pw") && !first_error.contains("ox-master-secret-pw"),
        "{first_error}"
    );
    w.assert_every_account_described(seeded);
    let mut stops = 0;
    for _ in 0..3 {
        match w.export().await {
            Ok(summary) => {
                w.assert_every_account_described(seeded);
                assert!(w.functional_accounts().is_empty(), "{summary}");
                for (spec, _, _) in &seeded.accounts {
                    assert_eq!(w.ox_rows(&spec.mail), 0, "{} left in OX", spec.mail);
                }
                assert_eq!(w.ox_rows("other@example.org"), 1);
                let h = w.handover().expect("a handover");
                assert_eq!(h.accounts.len(), seeded.accounts.len(), "{summary}");
                w.import().await.unwrap();
                w.assert_imported_exactly(seeded);
                return stops;
            }
            Err(e) => {
                let e = e.to_string();
                assert!(is_stop(&e), "the rerun failed otherwise: {e}");
                stops += 1;
                let before_iam = w.functional_accounts().len();
                let before = w.minio.object(
                    stagehand_e2e::minio::BUCKET,
                    stagehand_e2e::functional_accounts::KEY,
                );
                w.assert_every_account_described(seeded);
                assert_eq!(
                    w.minio.object(
                        stagehand_e2e::minio::BUCKET,
                        stagehand_e2e::functional_accounts::KEY
                    ),
                    before
                );
                assert_eq!(w.functional_accounts().len(), before_iam);
                let cleaned = w.manual_cleanup().await;
                assert_eq!(
                    cleaned, before_iam,
                    "every remaining account is described: {e}"
                );
                w.assert_every_account_described(seeded);
            }
        }
    }
    panic!("the export did not finish after three reruns");
}

// ---- part 1: the handover ----------------------------------------------------------------

#[tokio::test]
async fn the_handover_write_fails_nothing_is_removed_and_a_rerun_goes_through() {
    for fault in [S3Fault::Status(500), S3Fault::Drop] {
        let (w, seeded) = seeded_world().await;
        w.proxy.fail(S3Rule::object("PUT", fault));
        let e = w.export().await.unwrap_err().to_string();
        assert!(e.contains("object store"), "{e}");
        // Nothing was removed, nothing written.
        assert!(w.handover().is_none());
        assert_eq!(w.functional_accounts().len(), 4);
        assert!(
            w.ox.requests()
                .iter()
                .all(|r| r.op.as_deref() != Some("delete"))
        );
        assert!(w.udm.requests().iter().all(|r| r.method != "DELETE"));
        let stops = recover(&w, &seeded, &e).await;
        assert_eq!(
            stops, 0,
            "no handover was written, so the rerun starts afresh"
        );
    }
}

#[tokio::test]
async fn the_handover_lands_but_its_answer_is_lost_the_rerun_stops_and_the_manual_steps_finish() {
    let (w, seeded) = seeded_world().await;
    w.proxy
        .fail(S3Rule::object("PUT", S3Fault::ForwardThenDrop));
    let e = w.export().await.unwrap_err().to_string();
    assert!(e.contains("object store"), "{e}");
    assert!(w.handover().is_some(), "the write landed");
    assert_eq!(w.functional_accounts().len(), 4, "something was deleted");
    assert!(
        w.ox.requests()
            .iter()
            .all(|r| r.op.as_deref() != Some("delete"))
    );
    let stops = recover(&w, &seeded, &e).await;
    assert_eq!(stops, 1);
}

#[tokio::test]
async fn the_handover_read_back_fails_nothing_is_removed() {
    for fault in [S3Fault::Drop, S3Fault::Status(503)] {
        let (w, seeded) = seeded_world().await;
        w.proxy.fail(S3Rule {
            after_put: true,
            ..S3Rule::object("GET", fault)
        });
        let e = w.export().await.unwrap_err().to_string();
        assert!(e.contains("reading \"ox-functional-accounts.yaml\""), "{e}");
        assert!(w.handover().is_some());
        assert_eq!(w.functional_accounts().len(), 4);
        assert!(
            w.ox.requests()
                .iter()
                .all(|r| r.op.as_deref() != Some("delete"))
        );
        let stops = recover(&w, &seeded, &e).await;
        assert_eq!(stops, 1);
    }
}

#[tokio::test]
async fn the_handover_read_back_differs_nothing_is_removed() {
    // The store answers the read-back with other bytes: a store that did not keep the write.
    let (w, seeded) = seeded_world().await;
    w.proxy.fail(S3Rule {
        after_put: true,
        ..S3Rule::object(
            "GET",
            S3Fault::Answer(b"apiVersion: stagehand.dev/handover/v1\n"),
        )
    });
    let e = w.export().await.unwrap_err().to_string();
    assert!(e.contains("does not read back as written"), "{e}");
    assert_eq!(w.functional_accounts().len(), 4);
    assert!(
        w.ox.requests()
            .iter()
            .all(|r| r.op.as_deref() != Some("delete"))
    );
    recover(&w, &seeded, &e).await;
}

// ---- part 1: OX and the IAM --------------------------------------------------------------

#[tokio::test]
async fn each_soap_delete_fails_in_turn() {
    // Three mailboxes: a failure at the first, second and third delete, answered by a fault or
    // with the delete made and its answer lost.
    for k in 1..=3 {
        for lost_answer in [false, true] {
            let (w, seeded) = seeded_world().await;
            let rule = FaultRule::path(SECONDARY).with_op("delete").nth(k);
            w.ox.faults().add(if lost_answer {
                rule.after_apply().drop_connection()
            } else {
                rule.status(500)
            });
            let e = w.export().await.unwrap_err().to_string();
            assert!(
                e.contains("The handover \"ox-functional-accounts.yaml\" is written and describes all 4 accounts"),
                "{e}"
            );
            assert!(
                e.contains("no Functional Account was deleted from the IAM yet"),
                "{e}"
            );
            assert_eq!(w.functional_accounts().len(), 4);
            let (_, described) = w.assert_every_account_described(&seeded);
            assert_eq!(described, 4);
            let stops = recover(&w, &seeded, &e).await;
            assert_eq!(stops, 1, "k={k}");
        }
    }
}

/// The objects of the requests `w`'s simulators carried out: SOAP deletes (by mailbox) and UDM
/// deletes (by path).
fn deletes_carried_out(w: &World) -> Vec<String> {
    let soap =
        w.ox.requests().into_iter().filter(|r| {
            r.op.as_deref() == Some("delete") && r.status.is_some() && r.fault.is_none()
        });
    let udm = w
        .udm
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.status.is_some() && r.fault.is_none());
    soap.map(|r| r.object.unwrap_or(r.path))
        .chain(udm.map(|r| r.path))
        .collect()
}

#[tokio::test]
async fn the_run_that_wrote_the_handover_continues_it_another_run_stops() {
    // A run (by uid) stops after the handover, one mailbox removed (then two, then every
    // mailbox and two accounts): as when its operator is killed there. Another run finds the
    // handover and stops; the same run, re-entered, removes what is left, nothing twice.
    let cut = |k: u64| {
        if k <= 3 {
            FaultRule::path(SECONDARY).with_op("delete").from_nth(k)
        } else {
            FaultRule::prefix(FA_PATH).method("DELETE").from_nth(k - 3)
        }
    };
    for k in [2, 3, 6] {
        let (mut w, seeded) = seeded_world().await;
        let run = RunIdentity {
            release: "v1.18.0".into(),
            name: Some("pre".into()),
            uid: Some("run-uid-1".into()),
            apply_follows: false,
        };
        w.ctx.run = run.clone();
        let rule = cut(k).status(500);
        if k <= 3 {
            w.ox.faults().add(rule);
        } else {
            w.udm.faults().add(rule);
        }
        let e = w.export().await.unwrap_err().to_string();
        assert!(
            e.contains("is written and describes all 4 accounts"),
            "k={k}: {e}"
        );
        w.ox.faults().clear();
        w.udm.faults().clear();
        let written = w.handover().expect("the handover");
        assert_eq!(written.run_uid.as_deref(), Some("run-uid-1"));

        // Another run of the same name (another uid) stops, changing nothing.
        w.ctx.run.uid = Some("run-uid-2".into());
        let before = deletes_carried_out(&w);
        let stop = w.export().await.unwrap_err().to_string();
        assert!(is_stop(&stop), "k={k}: {stop}");
        assert_eq!(
            deletes_carried_out(&w),
            before,
            "k={k}: the stop changed nothing"
        );

        // The run that wrote it, re-entered, finishes: each mailbox and account once.
        w.ctx.run = run;
        let summary = w.export().await.unwrap();
        assert!(
            summary.starts_with("continued the export this run began"),
            "k={k}: {summary}"
        );
        let done = deletes_carried_out(&w);
        let unique: std::collections::BTreeSet<&String> = done.iter().collect();
        assert_eq!(
            unique.len(),
            done.len(),
            "k={k}: a delete was sent twice: {done:?}"
        );
        assert_eq!(done.len(), 3 + 4, "k={k}: {done:?}");
        assert!(w.functional_accounts().is_empty());
        for (spec, _, _) in &seeded.accounts {
            assert_eq!(w.ox_rows(&spec.mail), 0, "{} left in OX", spec.mail);
        }
        assert_eq!(w.ox_rows("other@example.org"), 1);
        assert_eq!(
            w.handover(),
            Some(written),
            "k={k}: the handover is not rewritten"
        );
        w.assert_every_account_described(&seeded);
        w.import().await.unwrap();
        w.assert_imported_exactly(&seeded);
    }
}

#[tokio::test]
async fn each_udm_delete_fails_in_turn() {
    for k in 1..=4 {
        let (w, seeded) = seeded_world().await;
        w.udm.faults().add(
            FaultRule::prefix(FA_PATH)
                .method("DELETE")
                .nth(k)
                .status(500),
        );
        let e = w.export().await.unwrap_err().to_string();
        assert!(
            e.contains("every mailbox was removed in OX App Suite"),
            "{e}"
        );
        assert!(
            !w.functional_accounts().is_empty(),
            "the failed delete's account is left"
        );
        w.assert_every_account_described(&seeded);
        let stops = recover(&w, &seeded, &e).await;
        assert_eq!(stops, 1, "k={k}");
    }
    // A delete made and its answer lost: counted as done by the rerun's clean-up.
    let (w, seeded) = seeded_world().await;
    w.udm.faults().add(
        FaultRule::prefix(FA_PATH)
            .method("DELETE")
            .nth(2)
            .after_apply()
            .drop_connection(),
    );
    let e = w.export().await.unwrap_err().to_string();
    recover(&w, &seeded, &e).await;
}

#[tokio::test]
async fn the_final_read_back_fails_and_the_rerun_repeats_only_it() {
    // `list` of the secondary accounts: once in planning, once in apply's survey, then the
    // read-back.
    for fault in ["status", "drop"] {
        let (w, seeded) = seeded_world().await;
        let rule = FaultRule::path(SECONDARY).with_op("list").from_nth(3);
        w.ox.faults().add(if fault == "status" {
            rule.status(500)
        } else {
            rule.drop_connection()
        });
        let e = w.export().await.unwrap_err().to_string();
        assert!(e.contains("OXSecondaryAccountService.list"), "{e}");
        // Everything was done but the read-back.
        assert!(w.functional_accounts().is_empty());
        let (in_iam, described) = w.assert_every_account_described(&seeded);
        assert_eq!((in_iam, described), (0, 4));
        w.ox.faults().clear();
        let deletes_before =
            w.ox.requests()
                .iter()
                .filter(|r| r.op.as_deref() == Some("delete"))
                .count();
        let summary = w.export().await.unwrap();
        assert!(summary.starts_with("nothing left to export"), "{summary}");
        let deletes_after =
            w.ox.requests()
                .iter()
                .filter(|r| r.op.as_deref() == Some("delete"))
                .count();
        assert_eq!(deletes_before, deletes_after, "the rerun changed OX");
        let stops = recover(&w, &seeded, &e).await;
        assert_eq!(stops, 0);
    }
}

// ---- part 2 ------------------------------------------------------------------------------

#[tokio::test]
async fn the_permission_never_appears_nothing_is_created_and_a_rerun_creates_everything() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let mut seeded = w.seed(&u, &a, false);
    w.export().await.unwrap();
    let e = w
        .run(
            IMPORT,
            &w.import_config(json!({"sharedAccounts": {"permissionWaitSeconds": 1}})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the permission \"opendesk_mail_author_calendar_author\" (oxmail/shared_account_permission, by its UDM name) did not appear in the IAM within 1s"),
        "{e}"
    );
    assert!(w.shared_accounts().is_empty());
    seeded.permission = Some(w.add_permission());
    w.import().await.unwrap();
    w.assert_imported_exactly(&seeded);
}

#[tokio::test]
async fn each_create_fails_in_turn_and_a_rerun_creates_exactly_the_rest() {
    for k in 1..=4 {
        let (w, seeded) = seeded_world().await;
        w.export().await.unwrap();
        w.udm
            .faults()
            .add(FaultRule::prefix(SA_PATH).method("POST").nth(k).status(500));
        let e = w.import().await.unwrap_err().to_string();
        assert!(e.contains("creating the Shared Account"), "{e}");
        assert!(e.contains("a rerun creates the rest"), "{e}");
        assert!(w.shared_accounts().len() < 4);
        w.assert_every_account_described(&seeded);
        w.udm.faults().clear();
        let summary = w.import().await.unwrap();
        assert!(summary.contains("existed as recorded"), "{summary}");
        w.assert_imported_exactly(&seeded);
    }
}

#[tokio::test]
async fn a_create_whose_answer_is_lost_counts_as_done() {
    for k in 1..=4 {
        let (w, seeded) = seeded_world().await;
        w.export().await.unwrap();
        w.udm.faults().add(
            FaultRule::prefix(SA_PATH)
                .method("POST")
                .nth(k)
                .after_apply()
                .drop_connection(),
        );
        w.import().await.unwrap();
        w.assert_imported_exactly(&seeded);
        // And a rerun is a no-op.
        let again = w.import().await.unwrap();
        assert!(again.contains("created 0 Shared Accounts"), "{again}");
    }
}

#[tokio::test]
async fn the_udm_api_unavailable_during_import_is_retried() {
    let (w, seeded) = seeded_world().await;
    w.export().await.unwrap();
    w.udm.faults().add(
        FaultRule::prefix(SA_PATH)
            .method("POST")
            .nth(1)
            .status_retry_after(503, 1),
    );
    w.import().await.unwrap();
    w.assert_imported_exactly(&seeded);
}
