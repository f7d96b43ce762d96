//! Benchmark driver of `e2e/bench/synapse-orphans`: `synapse_deactivate_orphaned_users` against
//! the script a person would write (`e2e/bench/synapse-orphans-peer.py`), on the real Synapse
//! and PostgreSQL of `stagehand_e2e::synapse` and the real slapd of `stagehand_e2e::slapd`.
//!
//! `bench-synapse-orphans` (env `N`, default 20000 accounts; `ORPHANS`, default 1000): one
//! slapd holds the `N - ORPHANS` users that still exist; each side gets a fresh PostgreSQL and
//! Synapse with the same `N` OIDC-bound accounts written into the database. The peer lists
//! (admin API pages, one lookup per account, one ldapsearch) and deactivates one by one;
//! Stagehand dry-runs, then applies. Both results are checked in the database (exactly the
//! orphans deactivated and erased, nobody else). Prints the times, the ratios and what each
//! deactivation cost Synapse (its own access log: the request's processing time).

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use serde_json::{Value, json};
use stagehand_actions::action::{SecretValue, StopSignal};
use stagehand_actions::clients::ldap::exec::ExecDirectory;
use stagehand_actions::synapse_deactivate_orphaned_users::{Config, Sources};
use stagehand_e2e::slapd::{BASE_DN, LocalLdapUtils, ROOT_DN, ROOT_PASSWORD, Slapd, SlapdOptions};
use stagehand_e2e::synapse::{FixtureUser, Postgres, Synapse, SynapseOptions};

/// The OIDC subject of account `i` (a UUID, as `univentionObjectIdentifier` is).
fn subject(i: usize) -> String {
    format!("{i:08x}-5a9e-4c0d-8e1f-{i:012x}")
}

/// Every 20th account (for 1,000 of 20,000) has lost its IAM user.
fn orphaned(i: usize, n: usize, orphans: usize) -> bool {
    let step = (n / orphans.max(1)).max(1);
    orphans > 0 && i.is_multiple_of(step) && i / step < orphans
}

fn env_usize(name: &str, default: usize) -> Result<usize, String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a number")),
        _ => Ok(default),
    }
}

/// The LDIF of the users that still exist.
fn directory_ldif(n: usize, orphans: usize) -> String {
    let mut out = format!("dn: cn=users,{BASE_DN}\nobjectClass: organizationalRole\ncn: users\n\n");
    for i in (0..n).filter(|i| !orphaned(*i, n, orphans)) {
        out.push_str(&format!(
            "dn: uid=user{i:06},cn=users,{BASE_DN}\nobjectClass: inetOrgPerson\nobjectClass: univentionObject\nuid: user{i:06}\ncn: User {i}\nsn: {i}\nuniventionObjectType: users/user\nuniventionObjectIdentifier: {}\n\n",
            subject(i)
        ));
    }
    out
}

/// A fresh PostgreSQL and Synapse holding the `n` accounts.
fn fresh_synapse(n: usize) -> (Postgres, Synapse, f64) {
    let pg = Postgres::start();
    let synapse = Synapse::start(&pg, SynapseOptions::default());
    let users: Vec<FixtureUser> = (0..n)
        .map(|i| FixtureUser {
            localpart: format!("user{i:06}"),
            display_name: format!("User {i}"),
            subject: subject(i),
            creation_ts: 1_650_000_000 + i64::try_from(i).unwrap_or_default(),
        })
        .collect();
    let t = Instant::now();
    synapse.write_oidc_users(&users);
    (pg, synapse, t.elapsed().as_secs_f64())
}

/// Checks that exactly the orphans are deactivated (and erased) among the fixture accounts.
fn check(synapse: &Synapse, n: usize, orphans: usize, who: &str) -> Result<(), String> {
    let rows = synapse.psql(
        "SELECT u.name, u.deactivated, (SELECT count(*) FROM erased_users x WHERE x.user_id = u.name) \
         FROM users u JOIN user_external_ids e ON e.user_id = u.name WHERE e.auth_provider = 'oidc'",
    );
    let mut wrong = Vec::new();
    let mut deactivated = 0;
    for row in rows.lines() {
        let cols: Vec<&str> = row.split('|').collect();
        let [name, gone, erased] = cols.as_slice() else {
            return Err(format!("unexpected row {row:?}"));
        };
        let i: usize = name
            .trim_start_matches("@user")
            .split(':')
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("unexpected account {name}"))?;
        let should = orphaned(i, n, orphans);
        let is = *gone == "1";
        deactivated += usize::from(is);
        if should != is || (is && *erased != "1") {
            wrong.push(format!("{name} deactivated={gone} erased={erased}"));
        }
    }
    if !wrong.is_empty() || deactivated != orphans {
        return Err(format!(
            "{who}: {deactivated} deactivated, expected the {orphans} orphans; wrong: {:?}",
            wrong.iter().take(5).collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// What Synapse logged for one request (its access log): processing time, CPU (user+sys of
/// the request's own work) and time in database transactions, seconds.
#[derive(Debug, Clone, Copy)]
struct Cost {
    wall: f64,
    cpu: f64,
    db: f64,
}

/// The costs Synapse logged for deactivating the fixture accounts (not the admins).
fn deactivation_costs(log: &str) -> Vec<Cost> {
    log.lines()
        .filter(|l| {
            l.contains("POST /_synapse/admin/v1/deactivate/%40user")
                || l.contains("POST /_synapse/admin/v1/deactivate/@user")
        })
        .filter_map(|l| {
            // `Processed request: 0.104sec/0.001sec ru=(0.051sec, 0.004sec) db=(0.030sec/0.001sec/25)`
            let rest = l.split("Processed request: ").nth(1)?;
            let wall = rest.split("sec/").next()?.parse().ok()?;
            let ru = rest.split("ru=(").nth(1)?;
            let mut ru = ru.split("sec");
            let user: f64 = ru.next()?.trim().parse().ok()?;
            let sys: f64 = ru.next()?.trim_start_matches(',').trim().parse().ok()?;
            let db = rest
                .split("db=(")
                .nth(1)?
                .split("sec/")
                .next()?
                .parse()
                .ok()?;
            Some(Cost {
                wall,
                cpu: user + sys,
                db,
            })
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(((s.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn run() -> Result<(), String> {
    let n = env_usize("N", 20_000)?;
    let orphans = env_usize("ORPHANS", 1_000)?;
    if orphans > n {
        return Err(format!("ORPHANS={orphans} is more than N={n}"));
    }
    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/synapse-orphans-peer.py");
    let runtime =
        stagehand_e2e::bench_runtime("bench-synapse-orphans").map_err(|_| "no runtime")?;

    eprintln!("== slapd with the {} users that still exist", n - orphans);
    let slapd = Slapd::start_with(&SlapdOptions {
        initial_ldif: directory_ldif(n, orphans),
        nosync: true,
        ..SlapdOptions::default()
    });
    let work = stagehand_e2e::local_server::temp_dir("sh-bench-synapse");
    std::fs::write(work.join("ldap-password"), ROOT_PASSWORD).map_err(|e| e.to_string())?;

    // The peer (PEER=no skips it: Stagehand's side alone, its figures only).
    let with_peer = std::env::var("PEER").map_or(true, |v| v != "no");
    let (mut peer_list, mut peer_apply, mut peer_costs) = (f64::NAN, f64::NAN, Vec::new());
    if with_peer {
        eprintln!(
            "== peer: {n} accounts ({orphans} orphaned) written into a fresh Synapse's database"
        );
        let (pg, synapse, fill_s) = fresh_synapse(n);
        eprintln!("   fixtures written in {fill_s:.2} s");
        let admin = runtime.block_on(synapse.register_admin());
        std::fs::write(work.join("token"), &admin.access_token).map_err(|e| e.to_string())?;
        eprintln!("== peer: list, look up, ldapsearch, deactivate one by one");
        let out = Command::new("python3")
            .arg(&peer)
            .args(["--url", &synapse.base_url(), "--token-file"])
            .arg(work.join("token"))
            .args([
                "--ldap-url",
                &slapd.url(),
                "--bind-dn",
                ROOT_DN,
                "--bind-password-file",
            ])
            .arg(work.join("ldap-password"))
            .args(["--base", BASE_DN, "--apply"])
            .output()
            .map_err(|e| format!("cannot run python3 {}: {e}", peer.display()))?;
        if !out.status.success() {
            return Err(format!(
                "the peer failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let peer_out: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "the peer printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        peer_list = peer_out["listing_s"].as_f64().unwrap_or_default();
        peer_apply = peer_out["deactivate_s"].as_f64().unwrap_or_default();
        if peer_out["orphans"] != json!(orphans) {
            return Err(format!(
                "the peer found {} orphans, expected {orphans}",
                peer_out["orphans"]
            ));
        }
        check(&synapse, n, orphans, "peer")?;
        peer_costs = deactivation_costs(&synapse.log());
        drop(synapse);
        drop(pg);
    }

    // Stagehand.
    eprintln!("== stagehand: the same {n} accounts in a fresh Synapse");
    let (pg, synapse, fill_s) = fresh_synapse(n);
    eprintln!("   fixtures written in {fill_s:.2} s");
    let config = |dry_run: bool| -> Result<Config, String> {
        serde_json::from_value(json!({
            "ldap": {"ldapiUrl": slapd.ldapi_url()},
            "synapse": {
                "connection": {"url": synapse.base_url()},
                "dryRun": dry_run,
                "erase": true,
                "postgres": {"host": pg.host(), "port": pg.port(), "name": pg.db(), "user": pg.user()},
                "configPath": synapse.config_path().display().to_string(),
            },
            "safety": {"maxOrphanPercent": 25},
        }))
        .map_err(|e| format!("the action's config: {e}"))
    };
    let directory = ExecDirectory::new(LocalLdapUtils, slapd.ldapi_url());
    let sources = || Sources {
        synapse_pod: &LocalLdapUtils,
        directory: &directory,
        db_password: SecretValue::new(pg.password().to_string()),
        marker: Some("legacy_auth".into()),
        warnings: Default::default(),
    };
    let before = synapse.log().len();
    let dry = config(true)?;
    let t = Instant::now();
    let planned = runtime
        .block_on(dry.plan_with(&sources(), true, None))
        .map_err(|e| format!("stagehand's dry run failed: {e}"))?;
    let sh_list = t.elapsed().as_secs_f64();
    eprintln!("   dry run: {}", short(&planned.summary));
    let apply = config(false)?;
    let t = Instant::now();
    let applied = runtime
        .block_on(apply.apply_with(&sources(), None, &StopSignal::never()))
        .map_err(|e| format!("stagehand's apply failed: {e}"))?;
    let sh_apply = t.elapsed().as_secs_f64();
    eprintln!("   apply: {}", short(&applied.summary));
    check(&synapse, n, orphans, "stagehand")?;
    let log = synapse.log();
    let sh_costs = deactivation_costs(log.get(before..).unwrap_or(&log));
    drop(synapse);
    drop(pg);
    let _ = std::fs::remove_dir_all(&work);

    let walls: Vec<f64> = peer_costs.iter().map(|c| c.wall).collect();
    let cpus: Vec<f64> = peer_costs.iter().map(|c| c.cpu).collect();
    let dbs: Vec<f64> = peer_costs.iter().map(|c| c.db).collect();
    let sh_cpu: f64 = sh_costs.iter().map(|c| c.cpu).sum();
    println!(
        "accounts: {n} OIDC-bound in Synapse on PostgreSQL, {orphans} orphaned; slapd holds the other {}\n",
        n - orphans
    );
    println!(
        "peer (python, admin API):  listing {peer_list:8.2} s   deactivate loop {peer_apply:8.2} s"
    );
    println!(
        "stagehand:                 dry run {sh_list:8.2} s   apply           {sh_apply:8.2} s"
    );
    println!(
        "ratio   listing: peer / stagehand dry run       {:8.1}x  (target >= 10)",
        peer_list / sh_list
    );
    println!(
        "ratio   apply:   peer loop / stagehand apply    {:8.2}x",
        peer_apply / sh_apply
    );
    println!(
        "synapse per deactivation, one at a time (the peer's {} requests, erase=true): processing mean {:.1} ms (p50 {:.1}, p95 {:.1}), of which CPU {:.1} ms and database {:.1} ms",
        peer_costs.len(),
        mean(&walls) * 1000.0,
        percentile(&walls, 0.5) * 1000.0,
        percentile(&walls, 0.95) * 1000.0,
        mean(&cpus) * 1000.0,
        mean(&dbs) * 1000.0
    );
    println!(
        "stagehand apply: {:.1} ms per deactivation; Synapse's CPU for its {} deactivations {sh_cpu:.2} s = {:.0}% of the apply (the rest: database waits, LDAP re-reads, read-back)",
        sh_apply * 1000.0 / orphans.max(1) as f64,
        sh_costs.len(),
        100.0 * sh_cpu / sh_apply.max(f64::MIN_POSITIVE)
    );
    // The target is for openDesk's scale; small runs only print the ratio.
    if with_peer && n >= 10_000 && sh_list * 10.0 > peer_list {
        return Err(format!(
            "stagehand's dry run ({sh_list:.2} s) is not 10x faster than the peer's listing ({peer_list:.2} s)"
        ));
    }
    Ok(())
}

fn short(text: &str) -> String {
    let cut: String = text.chars().take(300).collect();
    if cut.len() < text.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-synapse-orphans: {e}");
            ExitCode::FAILURE
        }
    }
}
