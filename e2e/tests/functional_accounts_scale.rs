//! Scale of the Functional Accounts to Shared Accounts pair: 5,000 Functional Accounts with
//! three groupware users each (15,000 OX secondary account rows) go through
//! `ox_functional_accounts_export` and `ox_shared_accounts_import` as the pre and post
//! MigrationRuns of the operator on the local control plane, against a real MinIO and the UDM
//! and OX simulators, and every account is checked at the end. Prints the handover's size and
//! the time of every stage (run with `--nocapture` to see them); `STAGEHAND_FA_SCALE` changes
//! the number of accounts.
//!
//! The `pre` operator talks to the API server through a recording proxy: the test reads the
//! run's status writes from it, and checks that the export's progress ("2,100/5,000
//! accounts") moved through the status while the writes stayed bounded (one per
//! `WRITE_EVERY` at most, whatever the rate of the work), and prints their count and cost.
//! Meanwhile it scrapes the operator's `/metrics`: the same figures move in
//! `stagehand_action_progress_done` and `_ratio`, and go back to 0 when the action ends.
//!
//! The OX simulator answers each mailbox removal, and the UDM simulator each Shared Account
//! create, [`phase_delay`] late, so that the export's removal and the import's creates last at
//! least [`SLOW_PHASE`] on any machine: at one progress write per 3 s, the removal alone then
//! writes at least two part-way counts of the 5,000, and `/metrics` (read every second) shows
//! several counts of each. Without the delays, a fast machine finished a phase between two
//! writes and the progress checks depended on its speed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use stagehand_actions::functional_accounts::IN_FLIGHT;
use stagehand_e2e::functional_accounts::{KEY, World, scale_fixture};
use stagehand_e2e::kube_proxy::{KubeProxy, Seen};
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::minio::BUCKET;
use stagehand_e2e::{Scene, apply, get, wait_up_to};
use stagehand_simulators::http::FaultRule;

/// The OX SOAP service that removes the mailboxes (secondary accounts).
const SECONDARY: &str = "/webservices/OXSecondaryAccountService";

/// Where the import creates the Shared Accounts (`POST`).
const SHARED_ACCOUNTS: &str = "/univention/udm/oxmail/shared_account/";

/// The least time the export's mailbox removal and the import's creates take, whatever the
/// machine: four times the progress write interval (3 s).
const SLOW_PHASE: Duration = Duration::from_secs(12);

/// How late a simulator answers each of `n` requests so that [`IN_FLIGHT`] at a time take at
/// least [`SLOW_PHASE`] (20 ms for 5,000 accounts).
fn phase_delay(n: usize) -> u64 {
    let ms = SLOW_PHASE.as_millis() as u64 * IN_FLIGHT as u64;
    ms.div_ceil(n.max(1) as u64)
}

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
    let delay = phase_delay(n);
    w.ox.faults()
        .add(FaultRule::path(SECONDARY).with_op("delete").delay_ms(delay));
    w.udm.faults().add(
        FaultRule::prefix(SHARED_ACCOUNTS)
            .method("POST")
            .delay_ms(delay),
    );
    w.create_secrets(&ns.name);
    apply(&w.migration(&ns.name));

    let proxy = KubeProxy::start().await;
    let metrics = format!("127.0.0.1:{}", stagehand_e2e::local_server::free_port());
    let mut operator = ns.start_operator_with(proxy.kubeconfig(), &["--metrics-address", &metrics]);
    let scraper = ProgressScraper::start(&metrics, &ns.name, "pre", EXPORT);
    let (pre_time, pre) = run_stage(&ns.name, "pre", "pre");
    let scraped = scraper.stop();
    let writes = status_writes(&proxy.log(), &ns.name, "pre");
    let figures = progress_figures(&writes);
    let progress_writes = writes.iter().filter(|w| is_progress(w)).count();
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
    // The figures moved: several distinct counts of the 5,000, each phase's counts rising.
    let counted: Vec<&(String, u64, u64)> = figures
        .iter()
        .filter(|(_, done, total)| *total == n as u64 && *done > 0 && *done < n as u64)
        .collect();
    // The removal lasts at least SLOW_PHASE (12 s), so a 3 s throttle lets at least two
    // part-way counts through; the phases before and after are written too.
    assert!(
        counted.len() >= 2,
        "the export's progress was written part-way through the 5,000: {figures:?}"
    );
    let states: std::collections::BTreeSet<&(String, u64, u64)> = figures.iter().collect();
    assert!(
        states.len() >= 3,
        "the progress moved through at least three states: {figures:?}"
    );
    for pair in figures.windows(2) {
        if pair[0].0 == pair[1].0 {
            assert!(
                pair[0].1 <= pair[1].1,
                "a phase's count never goes back: {figures:?}"
            );
        }
    }
    // The metrics showed the removal's counts as it went (read every second), with their
    // ratio, and the figure went back to 0 once the action ended.
    let part_way: Vec<&(u64, f64)> = scraped
        .iter()
        .filter(|(done, _)| *done > 0 && *done < n as u64)
        .collect();
    let distinct: std::collections::BTreeSet<u64> = part_way.iter().map(|(d, _)| *d).collect();
    assert!(
        distinct.len() >= 3,
        "/metrics showed at least three part-way counts of the 5,000 during the removal: {scraped:?}"
    );
    assert!(
        part_way
            .iter()
            .any(|(d, r)| (r - *d as f64 / n as f64).abs() < 1e-9),
        "the ratio is done over the phase's total: {scraped:?}"
    );
    let after = stagehand_e2e::http_get(&metrics, "/metrics")
        .map(|(_, body)| progress_samples(&body, &ns.name, "pre", EXPORT))
        .unwrap_or_default();
    assert_eq!(
        after,
        Some((0, 0.0)),
        "a finished action shows no figure in /metrics"
    );
    // Throttled: two progress writes are WRITE_EVERY (3 s) apart at least, as the operator
    // sampled them; 2 s between their arrivals leaves the time a write takes to be sent.
    let progress_at: Vec<Instant> = writes
        .iter()
        .filter(|w| is_progress(w))
        .map(|w| w.at)
        .collect();
    for pair in progress_at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_secs(2),
            "two progress writes {:.2} s apart, the throttle allows one per 3 s: {figures:?}",
            gap.as_secs_f64()
        );
    }
    // Bounded: a progress write at most every WRITE_EVERY (3 s), plus the run's other writes.
    let bound = 12 + (pre_time.as_secs() / 3) as usize;
    assert!(
        writes.len() <= bound,
        "{} status writes in {:.1} s, more than {bound}: {figures:?}",
        writes.len(),
        pre_time.as_secs_f64()
    );
    let write_time: Duration = writes.iter().map(|w| w.took).sum();
    let progress_time: Duration = writes
        .iter()
        .filter(|w| is_progress(w))
        .map(|w| w.took)
        .sum();
    let write_bytes: usize = writes.iter().map(|w| w.body.len()).sum();
    let (udm_pre, ox_pre, s3_pre) = (
        w.udm.requests().len(),
        w.ox.requests().len(),
        w.proxy.requests().len(),
    );

    // Between the stages the operator is replaced, as a rollout of the release would.
    operator.kill();
    let metrics = format!("127.0.0.1:{}", stagehand_e2e::local_server::free_port());
    let _operator = ns.start_operator_with(
        &stagehand_e2e::kubeconfig(),
        &["--metrics-address", &metrics],
    );
    let scraper = ProgressScraper::start(&metrics, &ns.name, "post", IMPORT);
    let (post_time, post) = run_stage(&ns.name, "post", "post");
    let imported = scraper.stop();
    // The import's creates were counted as they went.
    let creating: std::collections::BTreeSet<u64> = imported
        .iter()
        .map(|(done, _)| *done)
        .filter(|done| *done > 0 && *done < n as u64)
        .collect();
    assert!(
        creating.len() >= 3,
        "/metrics showed at least three part-way counts of the import's creates: {imported:?}"
    );
    let summary = post["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains(&format!("created {n} Shared Accounts")),
        "{summary}"
    );
    w.assert_imported_exactly(&seeded);
    // The delays fired: the phases were slowed as the progress checks assume.
    let delayed = |requests: Vec<stagehand_simulators::http::LoggedRequest>| {
        requests
            .iter()
            .filter(|r| r.fault.as_deref() == Some("delay"))
            .count()
    };
    assert_eq!(delayed(w.ox.requests()), n, "every OX removal was delayed");
    assert_eq!(
        delayed(w.udm.requests()),
        n,
        "every Shared Account create was delayed"
    );
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
    println!(
        "  OX answers each removal, UDM each Shared Account create, {delay} ms late (each phase lasts >= {} s)",
        SLOW_PHASE.as_secs()
    );
    line("pre run (export: plan + apply)", pre_time);
    line("post run (import: plan + apply)", post_time);
    line("whole test up to the last check", whole);
    println!(
        "  pre status writes: {} ({} of them progress), {write_bytes} bytes, {:.1} ms at the API server ({:.1} ms for progress)",
        writes.len(),
        progress_writes,
        write_time.as_secs_f64() * 1e3,
        progress_time.as_secs_f64() * 1e3
    );
    println!(
        "  progress seen in them: {}",
        figures
            .iter()
            .map(|(phase, done, total)| format!("{phase} {done}/{total}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  export progress in /metrics (each change, read every 200 ms): {}",
        scraped
            .iter()
            .map(|(done, ratio)| format!("{done} ({ratio:.3})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  import progress in /metrics: {} changes, {} part-way counts of the creates",
        imported.len(),
        creating.len()
    );
    println!(
        "  requests: pre UDM {udm_pre}, OX SOAP {ox_pre}, S3 {s3_pre}; post UDM {}, OX SOAP {}, S3 {}",
        w.udm.requests().len() - udm_pre,
        w.ox.requests().len() - ox_pre,
        w.proxy.requests().len() - s3_pre
    );
}

/// The export's and the import's action ids.
const EXPORT: &str = "ox_functional_accounts_export";
const IMPORT: &str = "ox_shared_accounts_import";

/// `action`'s `stagehand_action_progress_done` and `_ratio` in a `/metrics` body.
fn progress_samples(body: &str, ns: &str, stage: &str, action: &str) -> Option<(u64, f64)> {
    let labels = format!(
        "{{migration_namespace=\"{ns}\",migration=\"opendesk\",stage=\"{stage}\",action=\"{action}\"}} "
    );
    let value = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{labels}")))
            .map(str::trim)
    };
    let done = value("stagehand_action_progress_done")?.parse().ok()?;
    let ratio = value("stagehand_action_progress_ratio")?.parse().ok()?;
    Some((done, ratio))
}

/// Reads the operator's `/metrics` every 200 ms until stopped: an action's figures seen, in
/// order, each change once.
struct ProgressScraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, f64)>>,
}

impl ProgressScraper {
    fn start(address: &str, ns: &str, stage: &'static str, action: &'static str) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (address, ns, flag) = (address.to_string(), ns.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<(u64, f64)> = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(figure) = stagehand_e2e::http_get(&address, "/metrics")
                    .and_then(|(_, body)| progress_samples(&body, &ns, stage, action))
                    && seen.last() != Some(&figure)
                {
                    seen.push(figure);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            seen
        });
        ProgressScraper { stop, thread }
    }

    fn stop(self) -> Vec<(u64, f64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the scraper thread")
    }
}

/// The run's status writes the operator sent (`PATCH .../migrationruns/<name>/status`) and the
/// API server accepted, in order.
fn status_writes(log: &[Seen], ns: &str, name: &str) -> Vec<Seen> {
    let path = format!("/namespaces/{ns}/migrationruns/{name}/status");
    log.iter()
        .filter(|s| s.is_write() && s.path.split('?').next().is_some_and(|p| p.ends_with(&path)))
        .filter(|s| (200..300).contains(&s.status))
        .cloned()
        .collect()
}

/// Whether a status write carries an action's progress figure while it runs.
fn is_progress(write: &Seen) -> bool {
    let body = write.json();
    body["status"]["actions"].as_array().is_some_and(|a| {
        a.iter()
            .any(|a| a["progress"].is_object() && a["completionTime"].is_null())
    })
}

/// The running action's progress in each write: (phase, done, total), in order.
fn progress_figures(writes: &[Seen]) -> Vec<(String, u64, u64)> {
    writes
        .iter()
        .filter_map(|w| {
            let body = w.json();
            let actions = body["status"]["actions"].as_array()?.clone();
            actions.iter().find_map(|a| {
                let p = &a["progress"];
                (a["completionTime"].is_null() && p.is_object()).then(|| {
                    (
                        p["phase"].as_str().unwrap_or_default().to_string(),
                        p["done"].as_u64().unwrap_or_default(),
                        p["total"].as_u64().unwrap_or_default(),
                    )
                })
            })
        })
        .collect()
}
