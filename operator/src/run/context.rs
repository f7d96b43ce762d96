//! What both controllers share: the [`Context`] every reconcile gets, the [`Error`] that makes
//! the controller retry one, and [`event`], how they publish Events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
use stagehand_actions::action::{StopSender, StopSignal};
use stagehand_config::AllowedEndpoints;
use tokio::sync::watch;
use tracing::warn;

use super::history::HistoryError;
use super::status::StatusError;
use super::view::RunsView;

/// What the controllers share.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Counts runs and actions for `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// How the operator stops the engine ([`Steering`]).
    pub steering: Steering,
    /// The runs as the run controller sees them (unfinished ones in its store, finished ones
    /// in a small index), and whom to wake.
    pub runs: RunsView,
    /// Whose rights a run's preflight and actions use.
    pub tenancy: Tenancy,
}

/// Whose rights a run's preflight and actions use for their Kubernetes calls
/// (docs/deploy.md#tenancy-and-the-threat-model): the ServiceAccount its Migration names
/// (`spec.serviceAccountName`), else `--default-service-account`, both impersonated; with
/// neither, the operator's own (single-tenant mode). The operator's bookkeeping (status, the
/// history ledger, findings, Events, leases) always uses its own client. Cheap to clone.
#[derive(Clone)]
pub struct Tenancy {
    /// The operator's own configuration, which an impersonating client copies.
    config: kube::Config,
    /// `--default-service-account`.
    default_service_account: Option<String>,
    /// `--allowed-endpoints`: the network endpoints a run's declarations may name.
    allowed_endpoints: AllowedEndpoints,
    /// One client per impersonated identity, built once.
    clients: Arc<Mutex<HashMap<String, Client>>>,
    /// Where the impersonating clients' requests are counted.
    metrics: Option<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenancy")
            .field("default_service_account", &self.default_service_account)
            .field("allowed_endpoints", &self.allowed_endpoints.describe())
            .finish_non_exhaustive()
    }
}

/// The client a run's preflight and actions use, and whom it acts as.
#[derive(Clone)]
pub struct RunClient {
    /// The client.
    pub client: Client,
    /// `system:serviceaccount:<namespace>:<name>` when impersonating; `None`: the operator.
    pub identity: Option<String>,
}

impl std::fmt::Debug for RunClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunClient")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The impersonating client could not be built (its configuration is refused).
#[derive(Debug, thiserror::Error)]
#[error("cannot build a client impersonating {identity}: {source}")]
pub struct TenancyError {
    /// The identity.
    pub identity: String,
    /// Why.
    #[source]
    pub source: kube::Error,
}

impl Tenancy {
    /// The tenancy of an operator whose own client was built from `config`.
    pub fn new(config: kube::Config, default_service_account: Option<String>) -> Self {
        Self {
            config,
            default_service_account: default_service_account.filter(|s| !s.is_empty()),
            allowed_endpoints: AllowedEndpoints::everything(),
            clients: Arc::default(),
            metrics: None,
        }
    }

    /// The same tenancy, its impersonating clients' requests counted in `metrics`
    /// (`stagehand_kube_client_requests_total`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same tenancy, allowing runs only the endpoints `allowed` matches.
    #[must_use]
    pub fn with_allowed_endpoints(mut self, allowed: AllowedEndpoints) -> Self {
        self.allowed_endpoints = allowed;
        self
    }

    /// The endpoints a run's declarations may name (`--allowed-endpoints`).
    pub fn allowed_endpoints(&self) -> &AllowedEndpoints {
        &self.allowed_endpoints
    }

    /// The user a run in `namespace` whose Migration names `service_account` acts as (pure);
    /// `None`: the operator itself.
    pub fn identity(&self, namespace: &str, service_account: Option<&str>) -> Option<String> {
        service_account
            .filter(|s| !s.is_empty())
            .or(self.default_service_account.as_deref())
            .map(|sa| format!("system:serviceaccount:{namespace}:{sa}"))
    }

    /// The client of a run in `namespace` whose Migration names `service_account`: `own`
    /// (the operator's) in single-tenant mode, else one impersonating the ServiceAccount.
    pub fn client(
        &self,
        own: &Client,
        namespace: &str,
        service_account: Option<&str>,
    ) -> Result<RunClient, TenancyError> {
        let Some(identity) = self.identity(namespace, service_account) else {
            return Ok(RunClient {
                client: own.clone(),
                identity: None,
            });
        };
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(&identity) {
            return Ok(RunClient {
                client: client.clone(),
                identity: Some(identity),
            });
        }
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(identity.clone());
        // Groups left to the API server: impersonating a ServiceAccount's user name, it adds
        // `system:serviceaccounts` and `system:serviceaccounts:<namespace>` itself.
        config.auth_info.impersonate_groups = None;
        let client = match &self.metrics {
            Some(metrics) => metrics.client(config),
            None => Client::try_from(config),
        }
        .map_err(|source| TenancyError {
            identity: identity.clone(),
            source,
        })?;
        clients.insert(identity.clone(), client.clone());
        Ok(RunClient {
            client,
            identity: Some(identity),
        })
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

/// The run engine's side of [`EngineControl`]: what it reads before each action and each
/// write, and where it counts its actions in flight.
#[derive(Debug, Clone)]
pub struct Steering {
    /// Becomes true when the operator is asked to stop or lost its leadership: no new action
    /// starts.
    pub stopping: watch::Receiver<bool>,
    /// Tells the action in flight to stop at its next safe point (it is in every
    /// `ActionContext`).
    pub stop: StopSignal,
    /// Becomes true when this replica lost its leadership: it writes nothing more (no status,
    /// no ledger), since another replica may lead by the time a write lands.
    pub deposed: watch::Receiver<bool>,
    /// The actions in flight.
    in_flight: Arc<watch::Sender<usize>>,
}

impl Steering {
    /// Counts an action in flight until the guard is dropped.
    pub fn action_started(&self) -> InFlight {
        self.in_flight.send_modify(|n| *n += 1);
        InFlight(Arc::clone(&self.in_flight))
    }

    /// Whether this replica lost its leadership.
    pub fn is_deposed(&self) -> bool {
        *self.deposed.borrow()
    }
}

/// One action in flight, counted while it lives.
#[derive(Debug)]
pub struct InFlight(Arc<watch::Sender<usize>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The operator's side of [`Steering`]: stops the engine on shutdown or when the leadership is
/// lost, and waits until no action is in flight.
#[derive(Debug)]
pub struct EngineControl {
    stopping: watch::Sender<bool>,
    stop: StopSender,
    deposed: watch::Sender<bool>,
    in_flight: Arc<watch::Sender<usize>>,
}

impl EngineControl {
    /// A control and the steering the engine gets.
    pub fn new() -> (Self, Steering) {
        let (stopping_tx, stopping) = watch::channel(false);
        let (stop_tx, stop) = StopSignal::channel();
        let (deposed_tx, deposed) = watch::channel(false);
        let in_flight = Arc::new(watch::channel(0usize).0);
        (
            Self {
                stopping: stopping_tx,
                stop: stop_tx,
                deposed: deposed_tx,
                in_flight: Arc::clone(&in_flight),
            },
            Steering {
                stopping,
                stop,
                deposed,
                in_flight,
            },
        )
    }

    /// SIGTERM: no new action; the action in flight stops at its next safe point and its run's
    /// status says it will resume.
    pub fn shut_down(&self) {
        self.stopping.send_replace(true);
        self.stop.stop("the operator is shutting down");
    }

    /// The leadership is lost: as [`EngineControl::shut_down`], and nothing more is written.
    pub fn depose(&self, why: &str) {
        self.deposed.send_replace(true);
        self.stopping.send_replace(true);
        self.stop
            .stop(format!("this replica is no longer the leader ({why})"));
    }

    /// Resolves when no action is in flight.
    pub async fn idle(&self) {
        let mut rx = self.in_flight.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// Why a reconcile could not finish; the controller retries it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A status write failed.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The history ledger could not be reached.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// This replica lost its leadership: it writes nothing more.
    #[error("this replica is no longer the leader: nothing more is written")]
    Deposed,
    /// Reading the cluster failed.
    #[error("{context}: {source}")]
    Read {
        /// What was read.
        context: String,
        /// The answer.
        source: kube::Error,
    },
}

/// The most bytes of an Event's note (events.k8s.io/v1 validation).
pub const EVENT_NOTE_BYTES: usize = 1024;

/// Publishes an Event on `object`; a failure to publish is logged, never fatal.
///
/// Events of one action (`action 3 workload_scale: ...`) carry `action-3-workload_scale` as
/// their action, others `Run`: the recorder folds events with the same reason and action
/// into one series, and two actions' starts must stay two events.
pub async fn event<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    object: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let action = match note.strip_prefix("action ") {
        Some(rest) => format!(
            "action-{}",
            rest.split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .replace(' ', "-")
        ),
        None => "Run".to_string(),
    };
    let ev = Event {
        type_,
        reason: reason.into(),
        // The API server refuses a note longer than 1 KiB: a long message (every preflight
        // problem, a declaration quoting a 1 MiB value) is cut; the conditions hold more.
        note: Some(super::conditions::bounded(&note, EVENT_NOTE_BYTES)),
        action: action.chars().take(128).collect(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &object.object_ref(&())).await {
        warn!(error = %e, "cannot publish event");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tenancy(default: Option<&str>) -> Tenancy {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        Tenancy::new(config, default.map(str::to_string))
    }

    #[test]
    fn a_run_acts_as_its_migration_s_service_account_else_the_default_else_the_operator() {
        let single = tenancy(None);
        assert_eq!(single.identity("od", None), None);
        assert_eq!(single.identity("od", Some("")), None);
        assert_eq!(
            single.identity("od", Some("tenant")).as_deref(),
            Some("system:serviceaccount:od:tenant")
        );
        let multi = tenancy(Some("runner"));
        assert_eq!(
            multi.identity("od", None).as_deref(),
            Some("system:serviceaccount:od:runner")
        );
        assert_eq!(
            multi.identity("od", Some("tenant")).as_deref(),
            Some("system:serviceaccount:od:tenant")
        );
        assert_eq!(tenancy(Some("")).identity("od", None), None);
    }

    #[tokio::test]
    async fn an_impersonating_client_is_built_once_per_identity() {
        let t = tenancy(Some("runner"));
        let own =
            Client::try_from(kube::Config::new("https://127.0.0.1:6443".parse().unwrap())).unwrap();
        let a = t.client(&own, "od", None).unwrap();
        assert_eq!(
            a.identity.as_deref(),
            Some("system:serviceaccount:od:runner")
        );
        let _ = t.client(&own, "od", None).unwrap();
        let _ = t.client(&own, "other", Some("x")).unwrap();
        assert_eq!(t.clients.lock().unwrap().len(), 2);
        assert_eq!(
            tenancy(None).client(&own, "od", None).unwrap().identity,
            None
        );
    }
}
