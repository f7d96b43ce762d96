//! `stagehand operator`: logging set-up, the probe and metrics servers, leader election, then
//! the controllers until SIGTERM/SIGINT (or until the leadership is lost).

use std::time::Duration;

use clap::{ArgAction, ValueEnum};
use tokio::sync::watch;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

use super::output::{EXIT_OK, EXIT_USAGE};
use crate::leader::{LeaderConfig, Leadership, default_identity, lease_namespace};
use crate::metrics::Metrics;
use crate::serve::Readiness;

/// Log formats of the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Exit code: the operator stopped abnormally (leadership lost, or the election failed); the
/// Deployment restarts it.
pub const EXIT_FAILURE: u8 = 1;

/// How long a shutdown waits for the Lease to be released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a shutdown waits for the controllers (the current reconcile) to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// The options of `stagehand operator`.
#[derive(Debug, Clone, clap::Args)]
pub struct OperatorArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "STAGEHAND_NAMESPACE")]
    pub namespace: Option<String>,
    /// Log format.
    #[arg(long, env = "STAGEHAND_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Address of `/healthz` and `/readyz` (port 0: any free port, logged as `probe_address`).
    #[arg(long, env = "STAGEHAND_PROBE_ADDRESS", default_value = "0.0.0.0:8080")]
    pub probe_address: String,
    /// Address of `/metrics` (port 0: any free port, logged as `metrics_address`).
    #[arg(
        long,
        env = "STAGEHAND_METRICS_ADDRESS",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_address: String,
    /// Run the controllers only while holding the Lease `stagehand-leader`
    /// (`--leader-elect=false` to run them unconditionally).
    #[arg(
        long,
        env = "STAGEHAND_LEADER_ELECT",
        action = ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true"
    )]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: the watched namespace, else the pod's, else
    /// `default`).
    #[arg(long, env = "STAGEHAND_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// This replica's identity in the Lease (default: `POD_NAME`, else `<hostname>-<pid>`).
    #[arg(long, env = "STAGEHAND_LEADER_ELECTION_IDENTITY")]
    pub leader_election_identity: Option<String>,
    /// MigrationRuns reconciled at the same time, at most: a burst of new runs is worked
    /// through a bounded queue (memory and API requests stay bounded), and it is how many runs
    /// of different Migrations execute actions at once.
    #[arg(long, env = "STAGEHAND_MAX_CONCURRENT_RUNS", default_value_t = crate::run::controller::DEFAULT_MAX_CONCURRENT_RUNS, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_runs: u16,
}

/// Runs the operator; returns the exit code.
pub fn run(args: OperatorArgs) -> u8 {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match args.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(e) = installed {
        eprintln!("stagehand operator: cannot set up logging: {e}");
        return EXIT_USAGE;
    }
    let Some(runtime) = super::cluster::runtime("operator") else {
        return EXIT_USAGE;
    };
    runtime.block_on(operate(args))
}

async fn operate(args: OperatorArgs) -> u8 {
    let metrics = Metrics::new();
    let readiness = Readiness::default();
    crate::serve::start(
        &args.probe_address,
        &args.metrics_address,
        readiness.clone(),
        metrics.clone(),
    )
    .await;
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "cannot connect");
            eprintln!("stagehand operator: cannot connect: {e}");
            return EXIT_USAGE;
        }
    };
    let namespace = args.namespace.clone();
    // One signal listener for the whole life of the process: a signal is never lost between
    // the phases.
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });

    if !args.leader_elect {
        info!("leader election disabled");
        readiness.set(true);
        metrics.set_leader(true);
        run_controllers(client, namespace, metrics, stop, args.max_concurrent_runs).await;
        return EXIT_OK;
    }

    let config = LeaderConfig::new(
        lease_namespace(
            args.leader_election_namespace.as_deref(),
            namespace.as_deref(),
        ),
        args.leader_election_identity
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(default_identity),
    );
    let mut leadership = match Leadership::start(client.clone(), config).await {
        Ok(l) => l,
        Err(e) => {
            error!(error = %e, "cannot start the leader election");
            return EXIT_FAILURE;
        }
    };
    // A standby is ready: readiness does not depend on leadership.
    readiness.set(true);

    // Standby until leading, or until asked to stop.
    let acquired = tokio::select! {
        acquired = leadership.acquired() => acquired,
        () = stopping(stop.clone()) => {
            info!("asked to stop while standing by");
            leadership.release(RELEASE_TIMEOUT).await;
            return EXIT_OK;
        }
    };
    if !acquired {
        return EXIT_FAILURE;
    }
    metrics.set_leader(true);
    let leader_gauge = metrics.clone();

    // Leading: the controllers stop by themselves on SIGTERM/SIGINT (letting the current
    // reconcile finish); losing the lease stops them at once and exits non-zero so that no two
    // replicas ever run together.
    let controllers = run_controllers(
        client,
        namespace,
        metrics,
        stop.clone(),
        args.max_concurrent_runs,
    );
    tokio::pin!(controllers);
    let code = tokio::select! {
        () = &mut controllers => EXIT_OK,
        () = leadership.lost() => {
            error!(identity = %leadership.identity(), "leadership lost: stopping the controllers");
            EXIT_FAILURE
        }
        () = stopping(stop.clone()) => {
            // The controllers got the same signal (unless it came before they listened):
            // give the current reconcile time to finish.
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await.is_err() {
                warn!(grace = ?SHUTDOWN_GRACE, "the controllers did not stop in time");
            }
            EXIT_OK
        }
    };
    leader_gauge.set_leader(false);
    leadership.release(RELEASE_TIMEOUT).await;
    info!(code, "operator stopped");
    code
}

/// Resolves once a shutdown was requested.
async fn stopping(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Runs the controllers until they stop (on SIGTERM/SIGINT); `stop` tells the run engine to
/// start no new action.
async fn run_controllers(
    client: kube::Client,
    namespace: Option<String>,
    metrics: Metrics,
    stop: watch::Receiver<bool>,
    max_concurrent_runs: u16,
) {
    crate::run::controller::run(client, namespace, metrics, stop, max_concurrent_runs).await;
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
