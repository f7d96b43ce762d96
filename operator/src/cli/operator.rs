//! `stagehand operator`: logging set-up, the probe and metrics servers, leader election, then
//! the controllers until SIGTERM/SIGINT (or until the leadership is lost).

use std::time::Duration;

use clap::{ArgAction, ValueEnum};
use stagehand_config::AllowedEndpoints;
use tokio::sync::watch;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

use super::output::{EXIT_OK, EXIT_USAGE};
use crate::leader::{
    LeaderConfig, Leadership, LeaseTimings, Lost, default_identity, lease_namespace,
};
use crate::metrics::Metrics;
use crate::run::context::{EngineControl, Steering, Tenancy};
use crate::run::own_crds::{CrdPolicy, ensure_current_crds};
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

/// A replica that lost its leadership exits this long before a standby may take the Lease at
/// the earliest, even if its action has not reached a safe point by then.
const EXPIRY_MARGIN: Duration = Duration::from_secs(1);

/// The end of `stagehand operator --help`: the supported Kubernetes versions
/// (`crate::supported`; a unit test keeps the two in step).
pub const SUPPORTED_HELP: &str = "Supported Kubernetes versions: 1.35–1.37 (docs/deploy.md#supported-kubernetes-versions); \
the API server's version is logged at start-up, with a warning outside this range.";

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
    /// Seconds a Lease lasts after its last renewal; then a standby may take it.
    #[arg(long, env = "STAGEHAND_LEASE_DURATION_SECONDS", default_value_t = crate::leader::LEASE_DURATION_SECONDS)]
    pub lease_duration_seconds: u64,
    /// Seconds the leader goes on without a successful renewal before it stops leading (stops
    /// its action at a safe point and exits); must be shorter than the lease duration.
    #[arg(long, env = "STAGEHAND_RENEW_DEADLINE_SECONDS", default_value_t = crate::leader::RENEW_DEADLINE_SECONDS)]
    pub renew_deadline_seconds: u64,
    /// Seconds between two renewals of the Lease; must be shorter than the renew deadline.
    #[arg(long, env = "STAGEHAND_RENEW_EVERY_SECONDS", default_value_t = crate::leader::RENEW_EVERY_SECONDS)]
    pub renew_every_seconds: u64,
    /// MigrationRuns reconciled at the same time, at most: a burst of new runs is worked
    /// through a bounded queue (memory and API requests stay bounded), and it is how many runs
    /// of different Migrations execute actions at once.
    #[arg(long, env = "STAGEHAND_MAX_CONCURRENT_RUNS", default_value_t = crate::run::controller::DEFAULT_MAX_CONCURRENT_RUNS, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_runs: u16,
    /// The ServiceAccount (of the run's namespace) a run impersonates when its Migration names
    /// none (`spec.serviceAccountName`): with it set, no run uses the operator's own rights.
    /// Unset, such runs use the operator's rights (single-tenant mode,
    /// docs/deploy.md#tenancy-and-the-threat-model).
    #[arg(long, env = "STAGEHAND_DEFAULT_SERVICE_ACCOUNT")]
    pub default_service_account: Option<String>,
    /// The network endpoints runs may contact, as comma-separated host patterns
    /// (`ldap.example.org`, `*.example.org` for any name below it, an IP address; each
    /// optionally `:port`): an action's endpoint (its defaults applied) or the Migration's
    /// `objectStore.endpoint` matching none is the declaration problem `EndpointNotAllowed`,
    /// and nothing of the run runs. Unset, every endpoint is allowed
    /// (docs/deploy.md#tenancy-and-the-threat-model).
    #[arg(long, env = "STAGEHAND_ALLOWED_ENDPOINTS", value_parser = AllowedEndpoints::parse)]
    pub allowed_endpoints: Option<AllowedEndpoints>,
    /// What to do at start-up about installed CRDs of Stagehand's that do not hold this
    /// operator's schema (docs/deploy.md#crd-policy): `check` refuses them (no controllers,
    /// `/readyz` 503, re-checked periodically), `apply` applies this operator's CRDs first
    /// (server-side, field manager `stagehand`), `ignore` only warns (UNSAFE).
    #[arg(long, env = "STAGEHAND_CRD_POLICY", value_enum, default_value_t = CrdPolicy::Check)]
    pub crd_policy: CrdPolicy,
    /// Seconds between two checks of CRDs refused at start-up.
    #[arg(long, env = "STAGEHAND_CRD_CHECK_INTERVAL_SECONDS", default_value_t = crate::run::own_crds::CRD_CHECK_INTERVAL_SECONDS, value_parser = clap::value_parser!(u64).range(1..))]
    pub crd_check_interval_seconds: u64,
}

/// Runs the operator; returns the exit code.
pub fn run(args: OperatorArgs) -> u8 {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    // Whatever RUST_LOG says, what an exec carries (a key file, a shared secret) is not logged.
    for cap in stagehand_actions::clients::ldap::exec::PAYLOAD_LOG_CAPS {
        match cap.parse() {
            Ok(directive) => filter = filter.add_directive(directive),
            Err(e) => {
                eprintln!("stagehand operator: the log directive {cap:?} does not parse: {e}");
                return EXIT_USAGE;
            }
        }
    }
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
    let timings = match LeaseTimings::new(
        args.lease_duration_seconds,
        args.renew_deadline_seconds,
        args.renew_every_seconds,
    ) {
        Ok(t) => t,
        Err(e) => {
            error!(error = %e, "invalid leader election timings");
            eprintln!("stagehand operator: {e}");
            return EXIT_USAGE;
        }
    };
    let metrics = Metrics::new();
    let readiness = Readiness::default();
    crate::serve::start(
        &args.probe_address,
        &args.metrics_address,
        readiness.clone(),
        metrics.clone(),
    )
    .await;
    let allowed_endpoints = args
        .allowed_endpoints
        .clone()
        .unwrap_or_else(AllowedEndpoints::everything);
    let (client, tenancy) = match connect(
        args.default_service_account.clone(),
        allowed_endpoints,
        &metrics,
    )
    .await
    {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "cannot connect");
            eprintln!("stagehand operator: cannot connect: {e}");
            return EXIT_USAGE;
        }
    };
    // One GET /version in the background: logged with the supported range, a warning outside it.
    let version_client = client.clone();
    tokio::spawn(async move { crate::supported::log_server_version(&version_client).await });
    let namespace = args.namespace.clone();
    let identity = args
        .leader_election_identity
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(default_identity);
    // The external systems' access logs tell the replicas apart by their user agent.
    stagehand_actions::clients::http::set_instance(&identity);
    let (engine, steering) = EngineControl::new();
    let engine = std::sync::Arc::new(engine);
    // One signal listener for the whole life of the process: a signal is never lost between
    // the phases. It also stops the engine: no new action, the one in flight stops at its
    // next safe point.
    let (stop_tx, stop) = watch::channel(false);
    let on_signal = std::sync::Arc::clone(&engine);
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown requested");
        on_signal.shut_down();
        let _ = stop_tx.send(true);
    });

    // The CRDs first: on a stale one the controllers would write status fields the API server
    // drops without an error. Until they are current, /readyz answers why not.
    if !ensure_current_crds(
        &client,
        args.crd_policy,
        Duration::from_secs(args.crd_check_interval_seconds),
        &readiness,
        stopping(stop.clone()),
    )
    .await
    {
        info!("asked to stop while the CRDs were refused");
        return EXIT_OK;
    }

    if !args.leader_elect {
        info!("leader election disabled");
        readiness.set(true);
        metrics.set_leader(true);
        run_controllers(
            client,
            namespace,
            metrics,
            steering,
            args.max_concurrent_runs,
            tenancy,
        )
        .await;
        return EXIT_OK;
    }

    let config = LeaderConfig::new(
        lease_namespace(
            args.leader_election_namespace.as_deref(),
            namespace.as_deref(),
        ),
        identity,
    );
    let mut leadership = match Leadership::start(client.clone(), config, timings).await {
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

    // Leading: the controllers stop by themselves on SIGTERM/SIGINT (the action in flight
    // stops at its next safe point). Losing the leadership — another holder, or no renewal
    // within the renew deadline — stops the engine the same way and writes nothing more; the
    // process exits non-zero once no action is in flight, and at the latest just before a
    // standby may take the Lease, so that no two replicas ever apply at once.
    let controllers = run_controllers(
        client,
        namespace,
        metrics,
        steering,
        args.max_concurrent_runs,
        tenancy,
    );
    tokio::pin!(controllers);
    enum Ended {
        Controllers,
        Lost(Lost),
        Signal,
    }
    let ended = tokio::select! {
        () = &mut controllers => Ended::Controllers,
        why = leadership.lost() => Ended::Lost(why),
        () = stopping(stop.clone()) => Ended::Signal,
    };
    let code = match ended {
        Ended::Controllers => EXIT_OK,
        Ended::Lost(lost) => {
            engine.depose(&lost.why);
            // Another replica may lead already: no waiting. Else until just before the Lease
            // can expire.
            let budget = if lost.now {
                Duration::ZERO
            } else {
                leadership.until_expiry().saturating_sub(EXPIRY_MARGIN)
            };
            error!(identity = %leadership.identity(), reason = %lost.why, budget = ?budget, "leadership lost: stopping the action in flight at its next safe point, then exiting");
            // The controllers go on being polled, so that the action reaches its safe point.
            let stopped = tokio::time::timeout(budget, async {
                tokio::select! {
                    () = &mut controllers => {}
                    () = engine.idle() => {}
                }
            })
            .await;
            match stopped {
                Ok(()) => info!("no action in flight: exiting"),
                Err(_) => warn!(
                    "an action did not reach a safe point before the Lease can expire: exiting without waiting for it (the next leader re-enters it)"
                ),
            }
            leader_gauge.set_leader(false);
            leadership.abandon();
            info!(code = EXIT_FAILURE, "operator stopped");
            return EXIT_FAILURE;
        }
        Ended::Signal => {
            // The controllers got the same signal (unless it came before they listened):
            // give the current reconcile time to finish.
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers)
                .await
                .is_err()
            {
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

/// Runs the controllers until they stop (on SIGTERM/SIGINT); `steering` tells the run engine
/// to start no new action and to stop the one in flight at its next safe point.
async fn run_controllers(
    client: kube::Client,
    namespace: Option<String>,
    metrics: Metrics,
    steering: Steering,
    max_concurrent_runs: u16,
    tenancy: Tenancy,
) {
    crate::run::controller::run(
        client,
        namespace,
        metrics,
        steering,
        max_concurrent_runs,
        tenancy,
    )
    .await;
}

/// The operator's own client and the tenancy of its runs, from the inferred configuration (the
/// pod's ServiceAccount in a cluster, else the kubeconfig).
/// Every request of both is counted in `metrics`.
async fn connect(
    default_service_account: Option<String>,
    allowed_endpoints: AllowedEndpoints,
    metrics: &Metrics,
) -> Result<(kube::Client, Tenancy), kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let client = metrics.client(config.clone())?;
    Ok((
        client,
        Tenancy::new(config, default_service_account)
            .with_allowed_endpoints(allowed_endpoints)
            .with_metrics(metrics.clone()),
    ))
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
