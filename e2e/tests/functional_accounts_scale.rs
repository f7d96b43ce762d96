//! Scale of the Functional Accounts to Shared Accounts pair: 5,000 Functional Accounts with
//! three groupware users each (15,000 OX secondary account rows) go through
//! `ox_functional_accounts_export` and `ox_shared_accounts_import` as the pre and post
//! MigrationRuns of the operator on the local control plane, against a real MinIO and the UDM
//! and OX simulators, and every account is checked at the end. Prints the handover's size and
//! the time of every stage (run with `--nocapture` to see them); `STAGEHAND_FA_SCALE` changes
//! the number of accounts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use stagehand_e2e::functional_accounts::{KEY, World, scale_fixture};
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::minio::BUCKET;
use stagehand_e2e::{Scene, apply, get, wait_up_to};

/// How long one stage may take before the test fails (a release build needs well under a
/// minute per stage for 5,000 accounts on two cores).
const STAGE_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs the MigrationRun `name` for `stage` and waits until it is Ready: the wall time, and the
/// action's status entry.
fn run_stage(ns: &str, name: &str, stage: &str) -> (Duration, serde_json::Value) {
    let t = Instant::now();
    apply(&MigrationRun::new(ns, name, stage).to_yaml());
    wait_up_to(ns, &format!("migrationrun/{name}"), "Ready", STAGE_TIMEOUT);
    let took = t.elapsed();
    let run = get(ns, &format!("migrationrun/{name}"));
    let action = run["status"]["actions"][0].clone();
    assert_eq!(action["decision"], "Succeeded", "{run}");
    (took, action)
}

// Run by e2e/test against a release operator (`-- --ignored`): a debug operator takes ~13 minutes.
#[ignore = "run against a release operator by e2e/test: STAGEHAND_E2E_OPERATOR_BIN=target/release/stagehand cargo test -p stagehand-e2e --test functional_accounts_scale -- --ignored"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_functional_accounts_with_three_users_each() {
    let n: usize = std::env::var("STAGEHAND_FA_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let began = Instant::now();
    let ns = Scene::cluster("fa-scale").await;
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
    w.create_secrets(&ns.name);
    apply(&w.migration(&ns.name));

    let mut operator = ns.start_operator();
    let (pre_time, pre) = run_stage(&ns.name, "pre", "pre");
    let summary = pre["summary"].as_str().unwrap_or_default();
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
    assert_eq!(w.handover().unwrap().accounts.len(), n);
    w.assert_every_account_described(&seeded);
    let (udm_pre, ox_pre, s3_pre) = (
        w.udm.requests().len(),
        w.ox.requests().len(),
        w.proxy.requests().len(),
    );

    // Between the stages the operator is replaced, as a rollout of the release would.
    operator.kill();
    let _operator = ns.start_operator();
    let (post_time, post) = run_stage(&ns.name, "post", "post");
    let summary = post["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains(&format!("created {n} Shared Accounts")),
        "{summary}"
    );
    w.assert_imported_exactly(&seeded);
    let whole = began.elapsed();

    let line = |what: &str, d: Duration| {
        println!("  {what:<34} {:>8.2} s", d.as_secs_f64());
    };
    println!(
        "functional accounts scale: {n} accounts x 3 users ({rows} OX rows), through the operator"
    );
    println!(
        "  handover size                      {size} bytes ({:.0} bytes per account)",
        size as f64 / n as f64
    );
    line("seed (in-process)", seed_time);
    line("pre run (export: plan + apply)", pre_time);
    line("post run (import: plan + apply)", post_time);
    line("whole test up to the last check", whole);
    println!(
        "  requests: pre UDM {udm_pre}, OX SOAP {ox_pre}, S3 {s3_pre}; post UDM {}, OX SOAP {}, S3 {}",
        w.udm.requests().len() - udm_pre,
        w.ox.requests().len() - ox_pre,
        w.proxy.requests().len() - s3_pre
    );
}
