//! Scale of the Functional Accounts to Shared Accounts pair: 5,000 Functional Accounts with
//! three groupware users each (15,000 OX secondary account rows) go through
//! `ox_functional_accounts_export` and `ox_shared_accounts_import` against a real MinIO and the
//! UDM and OX simulators, and every account is checked at the end. Prints the handover's size
//! and the time of every stage (run with `--nocapture` to see them); `STAGEHAND_FA_SCALE`
//! changes the number of accounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use serde_json::json;
use stagehand_e2e::functional_accounts::{EXPORT, IMPORT, KEY, World, scale_fixture};
use stagehand_e2e::minio::BUCKET;

// Run by e2e/test in a release build (`-- --ignored`): a debug build takes ~13 minutes.
#[ignore = "run in release by e2e/test: cargo test --release -p stagehand-e2e --test functional_accounts_scale -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_functional_accounts_with_three_users_each() {
    let n: usize = std::env::var("STAGEHAND_FA_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let w = World::start().await;
    let (users, accounts) = scale_fixture(n);
    let t = Instant::now();
    let seeded = w.seed(&users, &accounts, true);
    let seed_time = t.elapsed();
    let rows = w.ox.state().secondary_accounts(1).len();
    assert_eq!(
        rows,
        3 * n + 1,
        "secondary account rows (plus the foreign one)"
    );

    let export = stagehand_actions::instantiate(EXPORT, &w.export_config(json!({}))).unwrap();
    let t = Instant::now();
    let plan = export.plan(&w.ctx).await.unwrap().summary;
    let export_plan = t.elapsed();
    assert!(
        plan.contains(&format!("would record {n} Functional Accounts")),
        "{plan}"
    );
    let t = Instant::now();
    let summary = export.apply(&w.ctx).await.unwrap().summary;
    let export_apply = t.elapsed();
    assert!(
        summary.contains(&format!("recorded {n} Functional Accounts")),
        "{summary}"
    );
    assert!(w.functional_accounts().is_empty());
    assert_eq!(
        w.ox.state().secondary_accounts(1).len(),
        1,
        "only the foreign row is left"
    );
    let size = w.minio.object(BUCKET, KEY).unwrap().len();
    let handover = w.handover().unwrap();
    assert_eq!(handover.accounts.len(), n);

    let import = stagehand_actions::instantiate(IMPORT, &w.import_config(json!({}))).unwrap();
    let t = Instant::now();
    let plan = import.plan(&w.ctx).await.unwrap().summary;
    let import_plan = t.elapsed();
    assert!(
        plan.contains(&format!("would create {n} Shared Accounts")),
        "{plan}"
    );
    let t = Instant::now();
    let summary = import.apply(&w.ctx).await.unwrap().summary;
    let import_apply = t.elapsed();
    assert!(
        summary.contains(&format!("created {n} Shared Accounts")),
        "{summary}"
    );
    w.assert_imported_exactly(&seeded);

    let line = |what: &str, d: std::time::Duration| {
        println!("  {what:<28} {:>8.2} s", d.as_secs_f64());
    };
    println!("functional accounts scale: {n} accounts x 3 users ({rows} OX rows)");
    println!(
        "  handover size                {size} bytes ({:.0} bytes per account)",
        size as f64 / n as f64
    );
    line("seed (in-process)", seed_time);
    line("export plan", export_plan);
    line("export apply", export_apply);
    line("import plan", import_plan);
    line("import apply", import_apply);
    println!(
        "  requests: UDM {}, OX SOAP {}, S3 {}",
        w.udm.requests().len(),
        w.ox.requests().len(),
        w.proxy.requests().len()
    );
}
