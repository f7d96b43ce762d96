//! The operator's operational surface on the real control plane: `/healthz`, `/readyz` and
//! `/metrics` on free ports, leader election on the Lease `stagehand-leader` (one of two
//! replicas leads, the standby is ready too and takes over when the leader is killed, a
//! SIGTERM releases the Lease), and the idle memory of one operator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    OperatorProcess, Scene, http_get, kubeconfig, kubectl, kubectl_stdin, logged, ok, wait_for,
    wait_up_to,
};

/// A port that was free a moment ago.
fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// The Lease's holder, `Some("")` when released, `None` when it does not exist.
fn holder(ns: &str) -> Option<String> {
    let out = kubectl(&[
        "get",
        "lease",
        "stagehand-leader",
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The pid of the one process whose command line contains `unique`.
fn pid_of(unique: &str) -> u32 {
    let out = std::process::Command::new("pgrep")
        .args(["-f", unique])
        .output()
        .unwrap();
    let pids: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(pids.len(), 1, "processes matching {unique}: {pids:?}");
    pids[0]
}

/// VmRSS of `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn probes_and_metrics_answer_on_free_ports() {
    let ns = Scene::cluster("surface-probe").await;
    let identity = format!("probe-{}", ns.name);
    let started = Instant::now();
    let operator = ns.start_operator_with(
        &kubeconfig(),
        &[
            "--probe-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
            "--leader-election-identity",
            &identity,
        ],
    );
    let (probe, metrics) = wait_for(
        "the bound addresses in the log",
        Duration::from_secs(30),
        || {
            let logs = operator.logs();
            async move {
                Some((
                    logged(&logs, "probe_address")?,
                    logged(&logs, "metrics_address")?,
                ))
            }
        },
    )
    .await;
    assert!(
        probe.starts_with("127.0.0.1:") && !probe.ends_with(":0"),
        "{probe}"
    );
    assert_ne!(probe, metrics);

    let (status, _) = http_get(&probe, "/healthz").unwrap();
    assert_eq!(status, 200, "/healthz");
    wait_for("/readyz 200", Duration::from_secs(30), || {
        let probe = probe.clone();
        async move { (http_get(&probe, "/readyz")?.0 == 200).then_some(()) }
    })
    .await;
    // The only replica leads.
    wait_for(
        "the lease held by the operator",
        Duration::from_secs(30),
        || {
            let ns = ns.name.clone();
            let identity = identity.clone();
            async move { (holder(&ns)? == identity).then_some(()) }
        },
    )
    .await;

    // A run (a fresh installation: its one action is skipped) shows up in the counters.
    let migration = Migration::new(&ns.name)
        .pre(Action::scale_without_timeout("ox-connector", 0))
        .to_yaml();
    let run = [
        migration,
        MigrationRun::new(&ns.name, "pre", "pre").to_yaml(),
    ]
    .join("---\n");
    ok("apply", &kubectl_stdin(&["apply", "-f", "-"], Some(&run)));
    wait_up_to(
        &ns.name,
        "migrationrun/pre",
        "Ready",
        Duration::from_secs(60),
    );
    let (status, body) = http_get(&metrics, "/metrics").unwrap();
    assert_eq!(status, 200, "/metrics");
    let group = format!("migration_namespace=\"{}\",migration=\"opendesk\"", ns.name);
    for line in [
        format!("stagehand_runs_total{{{group},stage=\"pre\",result=\"succeeded\"}} 1"),
        format!(
            "stagehand_actions_total{{{group},action=\"workload_scale\",result=\"skipped\"}} 1"
        ),
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "{line} missing from /metrics:\n{body}"
        );
    }
    // (The per-action series, stagehand_actions_total and
    // stagehand_action_duration_seconds, appear once an action has finished; every series
    // is checked against docs/operator.md by observability.rs.)
    for name in [
        "stagehand_reconcile_errors_total",
        "stagehand_runs_waiting",
        "stagehand_build_info",
    ] {
        assert!(body.contains(name), "{name} missing from /metrics:\n{body}");
    }
    // The probe port does not serve metrics.
    assert_eq!(http_get(&probe, "/metrics").unwrap().0, 404);

    // Idle memory after ~10 s.
    let idle = Duration::from_secs(10);
    if let Some(rest) = idle.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let pid = pid_of(&identity);
    let rss = rss_kb(pid);
    println!(
        "idle RSS of the operator (pid {pid}) after {:?}: {rss} kB ({:.1} MiB)",
        started.elapsed(),
        rss as f64 / 1024.0
    );
    assert!(rss > 0);
}

#[tokio::test]
async fn one_of_two_replicas_leads_and_the_standby_takes_over() {
    let ns = Scene::cluster("surface-leader").await;
    let ids = [
        format!("replica-a-{}", ns.name),
        format!("replica-b-{}", ns.name),
    ];
    let probes = [free_address(), free_address()];
    let mut replicas: Vec<OperatorProcess> = (0..2)
        .map(|i| {
            let metrics = free_address();
            ns.start_operator_with(
                &kubeconfig(),
                &[
                    "--probe-address",
                    &probes[i],
                    "--metrics-address",
                    &metrics,
                    "--leader-elect=true",
                    "--leader-election-identity",
                    &ids[i],
                ],
            )
        })
        .collect();

    // Exactly one holds the Lease; both are ready.
    let leader = wait_for("a leader", Duration::from_secs(30), || {
        let ns = ns.name.clone();
        let ids = ids.clone();
        async move { ids.iter().position(|id| holder(&ns).as_deref() == Some(id)) }
    })
    .await;
    let standby = 1 - leader;
    for probe in &probes {
        wait_for(
            "/readyz 200 on both replicas",
            Duration::from_secs(30),
            || {
                let probe = probe.clone();
                async move { (http_get(&probe, "/readyz")?.0 == 200).then_some(()) }
            },
        )
        .await;
    }
    // The leader keeps it (renewing) while it lives: longer than one lease duration.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            holder(&ns.name).as_deref(),
            Some(ids[leader].as_str()),
            "the lease changed hands while its holder was alive"
        );
    }

    // Kill the leader (a crash: no release); the standby takes over once the lease expires.
    let killed = Instant::now();
    replicas[leader].kill();
    wait_for(
        "the standby to take the lease",
        Duration::from_secs(30),
        || {
            let ns = ns.name.clone();
            let id = ids[standby].clone();
            async move { (holder(&ns)? == id).then_some(()) }
        },
    )
    .await;
    println!(
        "the standby took the lease {:?} after the leader was killed",
        killed.elapsed()
    );
    assert_eq!(http_get(&probes[standby], "/readyz").unwrap().0, 200);

    // SIGTERM on the new leader: it releases the lease and exits.
    let pid = pid_of(&ids[standby]);
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // (At most the shutdown grace, 25 s, if the signal came before the controllers listened.)
    wait_for("the lease to be released", Duration::from_secs(40), || {
        let ns = ns.name.clone();
        async move { holder(&ns).filter(String::is_empty).map(|_| ()) }
    })
    .await;
    wait_for(
        "the operator to exit",
        Duration::from_secs(15),
        || async move {
            (!std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| s.contains("State:\tZ")))
            .then_some(())
        },
    )
    .await;
    drop(replicas);
}
