//! `ox_functional_accounts_export` (pre) and `ox_shared_accounts_import` (post) against a real
//! MinIO (behind a pass-through proxy) and the UDM REST and OX SOAP simulators, through the
//! action library's `instantiate`, planned and applied as the run engine does. Kubernetes is
//! never called (an offline client). The crash tests are in `functional_accounts_crash.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use stagehand_actions::action::ActionContext;
use stagehand_config::ObjectStore;
use stagehand_e2e::functional_accounts::{
    AccountSpec, CONTEXT, EXPORT, IMPORT, KEY, PERMISSION, SECRET_KEY_FILE, UserSpec, World,
    small_fixture,
};
use stagehand_e2e::minio::BUCKET;
use stagehand_simulators::http::{FaultRule, Faults};

const FA_PATH: &str = "/univention/udm/oxmail/functional_account/";
const SA_PATH: &str = "/univention/udm/oxmail/shared_account/";
const SECONDARY: &str = "/webservices/OXSecondaryAccountService";
/// How late the requests of a concurrent batch answer that do not fail.
const SLOW_MS: u64 = 300;

fn spec(name: &str, mail: &str, users: &[&str]) -> AccountSpec {
    AccountSpec {
        name: name.into(),
        mail: mail.into(),
        users: users.iter().map(|u| u.to_string()).collect(),
    }
}

fn users(uids: &[&str]) -> Vec<UserSpec> {
    uids.iter()
        .map(|u| UserSpec {
            uid: u.to_string(),
            ox: true,
        })
        .collect()
}

/// The IAM, OX and the store are as seeded: nothing was changed.
fn assert_untouched(w: &World, accounts: usize) {
    assert_eq!(
        w.functional_accounts().len(),
        accounts,
        "Functional Accounts"
    );
    assert!(w.handover().is_none(), "a handover was written");
    assert!(
        w.shared_accounts().is_empty(),
        "Shared Accounts were created"
    );
    assert!(
        !w.udm.requests().iter().any(|r| r.method == "DELETE"),
        "something was deleted in the IAM"
    );
    assert!(
        !w.ox
            .requests()
            .iter()
            .any(|r| r.op.as_deref() == Some("delete")),
        "something was deleted in OX App Suite"
    );
}

#[tokio::test]
async fn export_then_import_carries_every_account_over() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let seeded = w.seed(&u, &a, true);

    // Planning (a dry run) says what would happen and changes nothing.
    let plan = w.plan(EXPORT, &w.export_config(json!({}))).await.unwrap();
    for needle in [
        "would record 4 Functional Accounts",
        "remove 3 mailboxes",
        "context 1: 3 mailboxes with 5 user entries",
        "users linked: 5",
        "users that cannot be linked (no groupware account, isOxUser is not set): 1 (dora (in \"Team Sales\"))",
        "foreign secondary accounts left alone: 1 (other@example.org (context 1))",
    ] {
        assert!(plan.contains(needle), "{needle:?} not in {plan}");
    }
    let dry = w
        .run(EXPORT, &w.export_config(json!({"dryRun": true})))
        .await
        .unwrap();
    assert!(dry.starts_with("dryRun is set, nothing changed"), "{dry}");
    assert_untouched(&w, 4);

    // Part 1.
    let summary = w.export().await.unwrap();
    assert!(
        summary.contains(
            "recorded 4 Functional Accounts in the handover \"ox-functional-accounts.yaml\""
        ),
        "{summary}"
    );
    assert!(
        summary.contains(
            "removed 3 mailboxes in OX App Suite (context 1: 3 mailboxes with 5 user entries"
        ),
        "{summary}"
    );
    assert!(
        summary.contains("read back: none of them is left"),
        "{summary}"
    );
    assert!(
        w.functional_accounts().is_empty(),
        "Functional Accounts left in the IAM"
    );
    for (spec, _, _) in &seeded.accounts {
        assert_eq!(w.ox_rows(&spec.mail), 0, "{} left in OX", spec.mail);
    }
    assert_eq!(
        w.ox_rows("other@example.org"),
        1,
        "the foreign account was touched"
    );

    // The handover holds everything part 2 needs.
    let h = w.handover().expect("a handover");
    assert_eq!(h.accounts.len(), 4);
    let yaml = String::from_utf8(w.minio.object(BUCKET, KEY).unwrap()).unwrap();
    println!(
        "handover of the small fixture ({} bytes):\n{yaml}",
        yaml.len()
    );
    for (spec, dn, uuid) in &seeded.accounts {
        let r = h
            .accounts
            .iter()
            .find(|r| &r.entry_uuid == uuid)
            .unwrap_or_else(|| panic!("{} not recorded", spec.name));
        assert_eq!(r.name, spec.name);
        assert_eq!(&r.dn, dn);
        assert_eq!(r.mail_primary_address, spec.mail);
        assert_eq!(r.ox_context, CONTEXT);
        let uids: Vec<&str> = r.users.iter().map(|u| u.uid.as_str()).collect();
        assert_eq!(
            uids,
            spec.users.iter().map(String::as_str).collect::<Vec<_>>()
        );
        for u in &r.users {
            let (udn, uoid, ox) = &seeded.users[&u.uid];
            assert_eq!(&u.dn, udn);
            assert_eq!(
                u.univention_object_identifier.as_deref(),
                Some(uoid.as_str())
            );
            assert_eq!(u.is_ox_user, *ox, "{}", u.uid);
        }
        let ox_users = spec.users.iter().filter(|u| seeded.users[*u].2).count();
        assert_eq!(r.ox_secondary_accounts.len(), ox_users, "{}", spec.name);
    }

    // Part 2, planned, then applied.
    let plan = w.plan(IMPORT, &w.import_config(json!({}))).await.unwrap();
    assert!(plan.contains("would create 4 Shared Accounts (0 exist as recorded), linking 5 users with the permission"), "{plan}");
    let summary = w.import().await.unwrap();
    assert!(summary.contains("created 4 Shared Accounts"), "{summary}");
    w.assert_imported_exactly(&seeded);
    let team = w
        .shared_accounts()
        .into_iter()
        .find(|s| s.property_str("displayName").as_deref() == Some("Team Sales"))
        .unwrap();
    assert_eq!(team.property_str("name").as_deref(), Some("Team-Sales"));
    let support = w
        .shared_accounts()
        .into_iter()
        .find(|s| s.property_str("displayName").as_deref() == Some("Support (EU)"))
        .unwrap();
    assert_eq!(support.property_str("name").as_deref(), Some("Support-EU"));

    // Both again: part 1 only reads back, part 2 finds everything done.
    let again = w.export().await.unwrap();
    assert!(again.starts_with("nothing left to export"), "{again}");
    let again = w.import().await.unwrap();
    assert!(
        again.contains("created 0 Shared Accounts") && again.contains("(4 existed as recorded)"),
        "{again}"
    );
    w.assert_imported_exactly(&seeded);
}

#[tokio::test]
async fn names_that_leave_nothing_to_build_on_fail_in_planning_even_on_a_dry_run() {
    let w = World::start().await;
    let accounts = vec![
        spec("Team Sales", "sales@example.org", &["anna"]),
        spec("2024", "y2024@example.org", &["anna"]),
        spec("---", "dashes@example.org", &[]),
    ];
    w.seed(&users(&["anna"]), &accounts, true);
    for config in [
        w.export_config(json!({"dryRun": true})),
        w.export_config(json!({})),
    ] {
        let e = w.run(EXPORT, &config).await.unwrap_err().to_string();
        assert!(
            e.contains("2 Functional Account names cannot become a Shared Account"),
            "{e}"
        );
        assert!(e.contains("\"2024\"") && e.contains("\"---\""), "{e}");
        assert!(
            e.contains("rename the Functional Account in the IAM"),
            "{e}"
        );
        assert!(!e.contains("Team Sales"), "a good name was named: {e}");
    }
    assert_untouched(&w, 3);
    assert!(
        !w.proxy.requests().iter().any(|(m, _, _)| m == "PUT"),
        "the store was written"
    );
}

#[tokio::test]
async fn two_accounts_that_would_share_a_name_or_an_existing_shared_account_fail_before_anything() {
    let w = World::start().await;
    let accounts = vec![
        spec("Team Sales", "sales@example.org", &["anna"]),
        spec("Team-Sales", "sales2@example.org", &["anna"]),
    ];
    w.seed(&users(&["anna"]), &accounts, true);
    let e = w.export().await.unwrap_err().to_string();
    assert!(
        e.contains(
            "\"Team Sales\" and \"Team-Sales\" would both become the Shared Account \"Team-Sales\""
        ),
        "{e}"
    );
    assert_untouched(&w, 2);

    let w = World::start().await;
    w.seed(
        &users(&["anna"]),
        &[spec("Team Sales", "sales@example.org", &["anna"])],
        true,
    );
    w.udm
        .state()
        .add_object(
            "oxmail/shared_account",
            json!({"name": "Team-Sales", "displayName": "x", "oxContext": 1,
                   "mailPrimaryAddress": "other-sales@example.org", "univentionObjectIdentifier": "another"}),
        )
        .unwrap();
    let e = w.export().await.unwrap_err().to_string();
    assert!(e.contains("already has that name"), "{e}");
    assert_eq!(w.functional_accounts().len(), 1);
    assert!(w.handover().is_none());
}

#[tokio::test]
async fn planning_proves_the_store_the_iam_and_ox_before_anything() {
    let mut w = World::start().await;
    let (u, a) = small_fixture();
    w.seed(&u, &a, true);

    // No objectStore in the Migration.
    let store = w.ctx.object_store.take();
    let e = w.export().await.unwrap_err().to_string();
    assert!(
        e.contains("the Migration declares none: set spec.objectStore"),
        "{e}"
    );
    w.ctx.object_store = store;

    // Wrong OX password.
    let good = w.ctx.secrets.clone();
    w.ctx.secrets = stagehand_actions::action::Secrets::new([
        (
            "udm-admin-password".to_string(),
            good.get("udm-admin-password").unwrap().clone(),
        ),
        (
            "ox-master-password".to_string(),
            stagehand_actions::action::SecretValue::new("wrong-pw-123"),
        ),
        (
            "objectstore-migrations-secret-key".to_string(),
            good.get("objectstore-migrations-secret-key")
                .unwrap()
                .clone(),
        ),
    ]);
    let e = w.export().await.unwrap_err().to_string();
    assert!(
        e.contains("refused the credentials") && e.contains("ox-master-password"),
        "{e}"
    );
    assert!(
        !e.contains("wrong-pw-123"),
        "the password is in the error: {e}"
    );
    w.ctx.secrets = good;

    // The store is down.
    w.minio.stop();
    let e = w
        .plan(EXPORT, &w.export_config(json!({"dryRun": true})))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("object store"), "{e}");
    w.minio.restart();

    assert_untouched(&w, 4);
    // And with everything in place, it goes through.
    w.export().await.unwrap();
    assert!(w.functional_accounts().is_empty());
}

#[tokio::test]
async fn no_functional_account_writes_an_empty_handover_and_import_creates_nothing() {
    let w = World::start().await;
    w.add_permission();
    let e = w.import().await.unwrap_err().to_string();
    assert!(
        e.contains("there is no handover \"ox-functional-accounts.yaml\"")
            && e.contains("did not run"),
        "{e}"
    );
    let plan = w.plan(EXPORT, &w.export_config(json!({}))).await.unwrap();
    assert!(plan.contains("would write an empty handover"), "{plan}");
    let summary = w.export().await.unwrap();
    assert!(summary.contains("wrote an empty handover"), "{summary}");
    assert_eq!(w.handover().unwrap().accounts.len(), 0);
    let summary = w.import().await.unwrap();
    assert!(summary.contains("created 0 Shared Accounts"), "{summary}");
    assert!(w.shared_accounts().is_empty());
    // A rerun of part 1 with the empty handover only reads back.
    let again = w.export().await.unwrap();
    assert!(again.starts_with("nothing left to export"), "{again}");
}

#[tokio::test]
async fn import_waits_for_a_permission_that_appears_late() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let mut seeded = w.seed(&u, &a, false);
    w.export().await.unwrap();
    let created = w
        .udm
        .state()
        .add_delayed(
            "oxmail/shared_account_permission",
            json!({"name": PERMISSION, "displayName": "Mail: Full access, Calendar: Full access",
                   "univentionObjectIdentifier": "7d3a0000-0000-4000-8000-00000000beef"}),
            Duration::from_secs(3),
        )
        .unwrap();
    let plan = w.plan(IMPORT, &w.import_config(json!({}))).await.unwrap();
    assert!(
        plan.contains("which is not in the IAM yet (apply waits up to 2s for it)"),
        "{plan}"
    );
    let started = Instant::now();
    // What the operator would read from the reporter while the import waits and creates,
    // sampled every 100 ms (it reads every second).
    let reporter = w.ctx.progress.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut lines: Vec<String> = Vec::new();
        loop {
            if let Some(seen) = reporter.snapshot()
                && lines.last() != Some(&seen.line())
            {
                lines.push(seen.line());
            }
            tokio::select! {
                _ = &mut stop_rx => return lines,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    });
    let summary = w
        .run(
            IMPORT,
            &w.import_config(json!({"sharedAccounts": {"permissionWaitSeconds": 30}})),
        )
        .await
        .unwrap();
    let _ = stop_tx.send(());
    let lines = sampler.await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(2), "did not wait");
    // While it waited (polling every 5 s), the wait showed its seconds out of 30 (the
    // creates' counts are seen moving in functional_accounts_scale.rs).
    assert!(
        lines.contains(&format!(
            "waiting for the permission \"{PERMISSION}\" in the IAM: 0/30 seconds"
        )),
        "the wait was shown while it lasted: {lines:?}"
    );

    assert!(summary.contains("created 4 Shared Accounts"), "{summary}");
    assert!(w.udm.state().object(&created.dn).is_some());
    seeded.permission = Some("7d3a0000-0000-4000-8000-00000000beef".into());
    w.assert_imported_exactly(&seeded);
}

#[tokio::test]
async fn import_refuses_conflicting_shared_accounts_before_creating_any() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    w.seed(&u, &a, true);
    w.export().await.unwrap();
    // Someone created a Shared Account with one of the names in between.
    w.udm
        .state()
        .add_object(
            "oxmail/shared_account",
            json!({"name": "Team-Sales", "displayName": "Not ours", "oxContext": 1,
                   "mailPrimaryAddress": "not-ours@example.org", "univentionObjectIdentifier": "not-ours"}),
        )
        .unwrap();
    for config in [
        w.import_config(json!({"dryRun": true})),
        w.import_config(json!({})),
    ] {
        let e = w.run(IMPORT, &config).await.unwrap_err().to_string();
        assert!(
            e.contains("1 Shared Account cannot be created, nothing was created"),
            "{e}"
        );
        assert!(e.contains("is already named \"Team-Sales\""), "{e}");
    }
    assert_eq!(w.shared_accounts().len(), 1, "something was created");
    assert!(!w.udm.requests().iter().any(|r| r.method == "POST"));
}

#[tokio::test]
async fn a_handover_present_while_accounts_remain_stops_without_changing_anything() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let seeded = w.seed(&u, &a, true);
    w.export().await.unwrap();
    let before = w.minio.object(BUCKET, KEY).unwrap();
    // A new Functional Account appears after part 1 (and before anything else).
    w.seed(
        &users(&["erik"]),
        &[spec("Late", "late@example.org", &["erik"])],
        false,
    );
    for config in [
        w.export_config(json!({"dryRun": true})),
        w.export_config(json!({})),
    ] {
        let e = w.run(EXPORT, &config).await.unwrap_err().to_string();
        assert!(
            e.contains("already exists") && e.contains("1 Functional Account is still in the IAM"),
            "{e}"
        );
        assert!(e.contains("Nothing was changed"), "{e}");
        assert!(e.contains("the handover does not describe 1 Functional Account (\"Late\" <late@example.org> (context 1))"), "{e}");
        assert!(e.contains("keeping the handover"), "{e}");
    }
    assert_eq!(
        w.minio.object(BUCKET, KEY).unwrap(),
        before,
        "the handover was rewritten"
    );
    assert_eq!(w.functional_accounts().len(), 1);
    assert_eq!(w.ox_rows("late@example.org"), 1);
    w.assert_every_account_described(&seeded);
}

#[tokio::test]
async fn mailboxes_that_come_back_fail_the_read_back_and_a_rerun_still_reports_them() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    let seeded = w.seed(&u, &a, true);
    w.ox.state().set_accounts_come_back(true);
    let e = w.export().await.unwrap_err().to_string();
    assert!(
        e.contains("OX App Suite still holds the secondary accounts of 3 mailboxes"),
        "{e}"
    );
    assert!(
        e.contains("sales@example.org in context 1 (2 user entries)"),
        "{e}"
    );
    w.assert_every_account_described(&seeded);
    assert!(w.functional_accounts().is_empty());
    // The rerun repeats only the read-back, and still reports them.
    let e = w.export().await.unwrap_err().to_string();
    assert!(
        e.contains("still holds the secondary accounts of 3 mailboxes"),
        "{e}"
    );
    // Removed by hand, the rerun succeeds.
    w.ox.state().set_accounts_come_back(false);
    let ox = stagehand_actions::clients::ox::OxClient::new(
        &w.ox.soap_url(),
        "admin",
        stagehand_actions::action::SecretValue::new("ox-master-secret-pw"),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    for (spec, _, _) in &seeded.accounts {
        ox.delete_secondary_account(
            CONTEXT,
            &spec.mail,
            stagehand_actions::clients::ox::AccountOwners::Everyone,
        )
        .await
        .unwrap();
    }
    let ok = w.export().await.unwrap();
    assert!(ok.starts_with("nothing left to export"), "{ok}");
    w.import().await.unwrap();
    w.assert_imported_exactly(&seeded);
}

#[tokio::test]
async fn secrets_never_appear_in_summaries_or_errors() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    w.seed(&u, &a, true);
    let secrets = [
        "udm-secret-pw".to_string(),
        "ox-master-secret-pw".to_string(),
        w.minio.secret_key().to_string(),
    ];
    let mut texts = vec![w.export().await.unwrap(), w.import().await.unwrap()];
    let mut bad = w.import_config(json!({}));
    bad["sharedAccounts"]["permission"] = json!("no-such-permission");
    let e = w.run(IMPORT, &bad).await.unwrap_err().to_string();
    assert!(e.contains("\"no-such-permission\""), "{e}");
    texts.push(e);
    for t in &texts {
        for s in &secrets {
            assert!(!t.contains(s.as_str()), "a secret in {t}");
        }
    }
    let yaml = String::from_utf8(w.minio.object(BUCKET, KEY).unwrap()).unwrap();
    for s in &secrets {
        assert!(!yaml.contains(s.as_str()));
    }
}

/// Three Functional Accounts with a groupware user each: three mailboxes, three IAM objects,
/// three Shared Accounts, each sent as one request of one concurrent batch.
fn three_accounts(w: &World) -> Vec<String> {
    let accounts: Vec<AccountSpec> = ["anna", "ben", "carl"]
        .iter()
        .map(|u| spec(&format!("Box {u}"), &format!("box-{u}@example.org"), &[u]))
        .collect();
    w.seed(&users(&["anna", "ben", "carl"]), &accounts, true);
    accounts.into_iter().map(|a| a.mail).collect()
}

/// The second request `rule` matches fails at once (500); every other one is carried out,
/// [`SLOW_MS`] late, so that it is still in flight when the failure is answered.
fn fail_the_second_and_slow_the_rest(faults: &Faults, rule: FaultRule) {
    faults.add(rule.clone().nth(2).status(500));
    faults.add(rule.delay_ms(SLOW_MS));
}

/// Gives a request the server carries out after its client gave up the time to finish, so
/// that the state read next is what the server did.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(2 * SLOW_MS)).await;
}

#[tokio::test]
async fn a_failed_mailbox_removal_reports_the_removals_made_while_it_failed() {
    let w = World::start().await;
    let mails = three_accounts(&w);
    fail_the_second_and_slow_the_rest(w.ox.faults(), FaultRule::path(SECONDARY).with_op("delete"));
    let e = w.export().await.unwrap_err().to_string();
    settle().await;
    let removed = mails.iter().filter(|m| w.ox_rows(m) == 0).count();
    assert_eq!(
        removed,
        mails.len() - 1,
        "only the failed delete is left in OX"
    );
    assert!(
        e.contains(&format!(
            "{removed} of 3 mailboxes were removed in OX App Suite, 1 failed; no Functional Account was deleted from the IAM yet"
        )),
        "{e}"
    );
    assert!(
        e.contains("injected fault"),
        "the failure itself is named: {e}"
    );
    assert!(e.contains("describes all 3 accounts"), "{e}");
    assert_eq!(w.functional_accounts().len(), 3);
}

#[tokio::test]
async fn a_failed_functional_account_delete_reports_the_deletes_made_while_it_failed() {
    let w = World::start().await;
    three_accounts(&w);
    fail_the_second_and_slow_the_rest(w.udm.faults(), FaultRule::prefix(FA_PATH).method("DELETE"));
    let e = w.export().await.unwrap_err().to_string();
    settle().await;
    let left = w.functional_accounts().len();
    assert_eq!(
        left, 1,
        "only the failed delete's account is left in the IAM"
    );
    assert!(
        e.contains(&format!(
            "every mailbox was removed in OX App Suite; {} of 3 Functional Accounts were deleted from the IAM, 1 failed",
            3 - left
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_failed_shared_account_create_reports_the_creates_made_while_it_failed() {
    let w = World::start().await;
    three_accounts(&w);
    w.export().await.unwrap();
    fail_the_second_and_slow_the_rest(w.udm.faults(), FaultRule::prefix(SA_PATH).method("POST"));
    let e = w.import().await.unwrap_err().to_string();
    settle().await;
    let created = w.shared_accounts().len();
    assert_eq!(
        created, 2,
        "every create but the failed one was carried out"
    );
    assert!(
        e.contains(&format!(
            "{created} of 3 Shared Accounts were created, 1 failed; a rerun creates the rest"
        )),
        "{e}"
    );
}

#[test]
fn both_actions_are_in_the_library() {
    for id in [EXPORT, IMPORT] {
        assert!(
            stagehand_actions::instantiate(id, &json!({})).is_ok(),
            "{id}"
        );
    }
}

/// Both halves' preflight, before the export has written anything: the bucket is reachable
/// and the credentials are accepted (the handover need not exist), and nothing is written.
#[tokio::test]
async fn preflight_proves_the_bucket_udm_and_ox_before_any_handover_exists() {
    let w = World::start().await;
    let (u, a) = small_fixture();
    w.seed(&u, &a, true);
    let export = stagehand_actions::instantiate(EXPORT, &w.export_config(json!({}))).unwrap();
    let import = stagehand_actions::instantiate(IMPORT, &w.import_config(json!({}))).unwrap();

    export.preflight(&w.ctx).await.unwrap();
    import.preflight(&w.ctx).await.unwrap();
    // The import's planning needs the handover; its preflight does not.
    let err = w
        .plan(IMPORT, &w.import_config(json!({})))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("there is no handover"), "{err}");

    let wrong = "not-the-secret-value";
    for (file, actions) in [
        (SECRET_KEY_FILE, vec![&export, &import]),
        ("udm-admin-password", vec![&export, &import]),
        ("ox-master-password", vec![&export]),
    ] {
        let ctx = w.ctx_with_secret(file, wrong);
        for action in actions {
            let err = action.preflight(&ctx).await.unwrap_err().to_string();
            assert!(err.contains(file), "{file}: {err}");
            assert!(!err.contains(wrong), "the secret leaked: {err}");
            let server = match file {
                SECRET_KEY_FILE => {
                    assert!(err.contains(&format!("bucket {BUCKET:?}")), "{err}");
                    w.proxy.endpoint()
                }
                "udm-admin-password" => w.udm.api_url().trim_end_matches('/').to_string(),
                _ => w.ox.soap_url().trim_end_matches('/').to_string(),
            };
            assert!(err.contains(&server), "{file}: {server} not in {err}");
        }
    }
    let missing = ObjectStore {
        bucket: "no-such-bucket".into(),
        ..w.ctx.object_store.clone().unwrap()
    };
    let ctx = ActionContext {
        object_store: Some(missing),
        ..w.ctx.clone()
    };
    let err = import.preflight(&ctx).await.unwrap_err().to_string();
    // The bucket identity may not see other buckets: refused (or NoSuchBucket), named.
    assert!(err.contains("bucket \"no-such-bucket\""), "{err}");

    // Only reads: the proxy saw no PUT, UDM and OX no change.
    assert!(
        w.proxy.requests().iter().all(|(m, _, _)| m == "GET"),
        "{:?}",
        w.proxy.requests()
    );
    assert!(
        w.udm.requests().iter().all(|r| r.method == "GET"),
        "{:?}",
        w.udm.requests()
    );
    assert!(
        w.ox.requests()
            .iter()
            .all(|r| r.op.as_deref() == Some("listAll")),
        "{:?}",
        w.ox.requests()
    );
    assert_untouched(&w, 4);
}
