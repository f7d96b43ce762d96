//! The operator's Prometheus metrics (docs/operator.md#metrics lists every series; a test
//! scrapes a running operator and compares the two). They follow the conventions platform
//! teams know from controller-runtime: reconcile totals, errors and durations per controller,
//! work-queue depth, adds and latency, API-client requests by verb and code, build info; and
//! Stagehand's own: runs and actions by result, labelled with the Migration's namespace and
//! name (never a run's name: the label sets stay bounded by the Migrations), the newest
//! finished run per Migration and stage, since when runs wait or run, how far a running
//! action is inside its work (the figure the run's status shows), whether this replica
//! leads. The chart's PrometheusRule alerts on them
//! (`deploy/charts/stagehand/templates/prometheusrule.yaml`).
//!
//! The Migration's namespace is the label `migration_namespace`, not `namespace`: a scrape
//! adds `namespace` (the operator pod's), and the alerts select a release by it.
//!
//! [`Metrics`] is a cheap, cloneable handle (an `Arc` inside) with no global state: the
//! command creates one, hands a clone to the controllers and the API client, and serves
//! [`Metrics::encode`] on `/metrics`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The run controller's name in the `controller` label.
pub const RUN_CONTROLLER: &str = "migrationrun";
/// The Migration controller's name in the `controller` label.
pub const MIGRATION_CONTROLLER: &str = "migration";
/// Both controllers: their series exist from the start, at zero.
pub const CONTROLLERS: [&str; 2] = [RUN_CONTROLLER, MIGRATION_CONTROLLER];

/// Every result `stagehand_runs_total` and `stagehand_last_run_result` can carry (the
/// terminal phases' reasons, lower case): all exist at zero as soon as a Migration's first
/// run is seen, so `increase()` sees its first failure and the alert its first `terminating`.
pub const RUN_RESULTS: [&str; 12] = [
    "succeeded",
    "failed",
    "invalid",
    "declarationschanged",
    "preflightfailed",
    "historyunreadable",
    "terminating",
    "prerunfailed",
    "prerunoutdated",
    "historyincomplete",
    "interruptedupgrade",
    "findingschanged",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    /// `success` or `error`.
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The Kubernetes verb: get, list, watch, create, update, patch, delete,
    /// deletecollection (`other` for anything else).
    verb: String,
    /// The HTTP status code, or `error` when no answer came.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    migration_namespace: String,
    migration: String,
    stage: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    migration_namespace: String,
    migration: String,
    action: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionOnly {
    migration_namespace: String,
    migration: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageActionLabels {
    migration_namespace: String,
    migration: String,
    stage: String,
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    migration_namespace: String,
    migration: String,
    stage: String,
    /// `waiting` (also suspended or awaiting approval) or `running`.
    phase: String,
}

/// A run as its series name it: the Migration's namespace and name and the stage; the run's
/// own name only keys what this process remembers, never a label.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunRef {
    /// The run's (and its Migration's) namespace.
    pub namespace: String,
    /// The Migration (`spec.migrationRef`).
    pub migration: String,
    /// `pre` or `post`.
    pub stage: String,
    /// The run's name.
    pub name: String,
}

impl RunRef {
    fn run_labels(&self, result: &str) -> RunLabels {
        RunLabels {
            migration_namespace: self.namespace.clone(),
            migration: self.migration.clone(),
            stage: self.stage.clone(),
            result: result.to_string(),
        }
    }

    fn group(&self) -> (String, String, String) {
        (
            self.namespace.clone(),
            self.migration.clone(),
            self.stage.clone(),
        )
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 50 ms .. ~14 min.
    Histogram::new(exponential_buckets(0.05, 2.0, 15))
}

fn reconcile_histogram() -> Histogram {
    // 5 ms .. ~10 min (a run's reconcile lasts as long as its action).
    Histogram::new(exponential_buckets(0.005, 4.0, 10))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// What this process remembers to keep the gauges right.
#[derive(Default)]
struct State {
    /// Objects triggered and not yet reconciled, per controller and `namespace/name`: when
    /// they were first triggered.
    queued: HashMap<(&'static str, String), Instant>,
    /// Runs waiting to start (`namespace/name`).
    waiting: std::collections::HashSet<String>,
    /// Unfinished runs' phase and since when, by `namespace/name`.
    phases: HashMap<String, (PhaseLabels, i64)>,
    /// The newest finished run per (namespace, Migration, stage): its creation time (Unix
    /// seconds) and result.
    last_run: HashMap<(String, String, String), i64>,
}

struct Inner {
    registry: Registry,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    active: Family<ControllerLabels, Gauge>,
    queue_depth: Family<ControllerLabels, Gauge>,
    queue_adds: Family<ControllerLabels, Counter>,
    queue_latency: HistogramFamily<ControllerLabels>,
    requests: Family<RequestLabels, Counter>,
    runs: Family<RunLabels, Counter>,
    last_run: Family<RunLabels, Gauge>,
    actions: Family<ActionLabels, Counter>,
    durations: HistogramFamily<ActionOnly>,
    running: Family<StageActionLabels, Gauge>,
    progress_done: Family<StageActionLabels, Gauge>,
    progress_ratio: Family<StageActionLabels, Gauge<f64, AtomicU64>>,
    runs_waiting: Gauge,
    leader: Gauge,
    run_phase_since: Family<PhaseLabels, Gauge>,
    state: Mutex<State>,
}

/// The operator's metrics: a cheap handle to share with the controllers.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric; every series an alert reads that does not depend
    /// on a Migration exists from the start, at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let build = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "stagehand_build_info",
            "1, labelled with the operator's version and the git commit it was built from",
            build.clone(),
        );
        let _ = build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("STAGEHAND_GIT_COMMIT").into(),
            })
            .set(1);
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "stagehand_reconcile",
            "Reconciles per controller, by result (success, error); mirrors controller_runtime_reconcile_total",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "stagehand_reconcile_errors",
            "Reconciles that ended in an error (retried with backoff) per controller; mirrors controller_runtime_reconcile_errors_total",
            reconcile_errors.clone(),
        );
        let reconcile_duration: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register(
            "stagehand_reconcile_duration_seconds",
            "Time of one reconcile per controller (a run's reconcile includes the action it executes); mirrors controller_runtime_reconcile_time_seconds",
            reconcile_duration.clone(),
        );
        let active = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "stagehand_reconcile_active",
            "Reconciles in flight per controller; mirrors controller_runtime_active_workers",
            active.clone(),
        );
        let queue_depth = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "stagehand_workqueue_depth",
            "Objects triggered (watch event or wake-up) and not yet reconciled, per controller; kube-rs has no work queue: this counts what reaches its scheduler, delayed requeues not included",
            queue_depth.clone(),
        );
        let queue_adds = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "stagehand_workqueue_adds",
            "Objects that became due for a reconcile (a trigger while not already pending), per controller",
            queue_adds.clone(),
        );
        let queue_latency: HistogramFamily<ControllerLabels> =
            Family::new_with_constructor(reconcile_histogram);
        registry.register(
            "stagehand_workqueue_queue_duration_seconds",
            "Time from an object's first pending trigger to the start of its reconcile, per controller",
            queue_latency.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "stagehand_kube_client_requests",
            "Requests of the operator's Kubernetes clients, by verb and HTTP status code (error: no answer); mirrors rest_client_requests_total",
            requests.clone(),
        );
        let runs = Family::<RunLabels, Counter>::default();
        registry.register(
            "stagehand_runs",
            "MigrationRuns finished, by the Migration's namespace and name, stage and result",
            runs.clone(),
        );
        let last_run = Family::<RunLabels, Gauge>::default();
        registry.register(
            "stagehand_last_run_result",
            "1 for the result of the newest finished run (by creation) of a Migration and stage, 0 for every other result",
            last_run.clone(),
        );
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "stagehand_actions",
            "Actions finished, by the Migration's namespace and name, action id and result (succeeded, failed, skipped, stopped)",
            actions.clone(),
        );
        let durations: HistogramFamily<ActionOnly> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "stagehand_action_duration_seconds",
            "Wall-clock time of an action's plan and apply, by the Migration's namespace and name and action id",
            durations.clone(),
        );
        let running = Family::<StageActionLabels, Gauge>::default();
        registry.register(
            "stagehand_actions_running",
            "Actions executing now, by the Migration's namespace and name, stage and action id",
            running.clone(),
        );
        let progress_done = Family::<StageActionLabels, Gauge>::default();
        registry.register(
            "stagehand_action_progress_done",
            "Objects a running action has done in its current phase, as its status shows them (sampled every second); 0 when it is not running",
            progress_done.clone(),
        );
        let progress_ratio = Family::<StageActionLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "stagehand_action_progress_ratio",
            "Done over total (0 to 1) of a running action's current phase when it knows its total; 0 when it does not or is not running",
            progress_ratio.clone(),
        );
        let runs_waiting = Gauge::default();
        registry.register(
            "stagehand_runs_waiting",
            "MigrationRuns waiting to start (for their Migration, release, pre run, another run, a suspension or an approval)",
            runs_waiting.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "stagehand_leader",
            "1 while this replica leads (runs the controllers), 0 while it stands by",
            leader.clone(),
        );
        let run_phase_since = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "stagehand_run_phase_start_timestamp_seconds",
            "Unix time at which the longest-waiting (or -running) unfinished run of a Migration and stage entered its phase, as this operator saw it; gone when none is in that phase",
            run_phase_since.clone(),
        );
        for controller in CONTROLLERS {
            let labels = ControllerLabels {
                controller: controller.into(),
            };
            for result in ["success", "error"] {
                let _ = reconciles.get_or_create(&ReconcileLabels {
                    controller: controller.into(),
                    result: result.into(),
                });
            }
            let _ = reconcile_errors.get_or_create(&labels);
            let _ = reconcile_duration.get_or_create(&labels);
            let _ = active.get_or_create(&labels);
            let _ = queue_depth.get_or_create(&labels);
            let _ = queue_adds.get_or_create(&labels);
            let _ = queue_latency.get_or_create(&labels);
        }
        Self {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                reconcile_errors,
                reconcile_duration,
                active,
                queue_depth,
                queue_adds,
                queue_latency,
                requests,
                runs,
                last_run,
                actions,
                durations,
                running,
                progress_done,
                progress_ratio,
                runs_waiting,
                leader,
                run_phase_since,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The object `key` (`namespace/name`) of `controller` was triggered (a watch event, a
    /// wake-up): it is due for a reconcile. Counted once until its reconcile starts.
    pub fn triggered(&self, controller: &'static str, key: &str) {
        let mut state = lock(&self.inner.state);
        let entry = (controller, key.to_string());
        if state.queued.contains_key(&entry) {
            return;
        }
        state.queued.insert(entry, Instant::now());
        self.inner
            .queue_adds
            .get_or_create(&controller_labels(controller))
            .inc();
        self.set_depth(&state, controller);
    }

    /// The object `key` of `controller` will not be reconciled (it is gone).
    pub fn dropped(&self, controller: &'static str, key: &str) {
        let mut state = lock(&self.inner.state);
        if state
            .queued
            .remove(&(controller, key.to_string()))
            .is_some()
        {
            self.set_depth(&state, controller);
        }
    }

    fn set_depth(&self, state: &State, controller: &'static str) {
        let depth = state
            .queued
            .keys()
            .filter(|(c, _)| *c == controller)
            .count();
        self.inner
            .queue_depth
            .get_or_create(&controller_labels(controller))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A reconcile of `key` by `controller` starts: the time it was pending is observed;
    /// [`Reconciling::finished`] records how it ended.
    pub fn reconcile_started(&self, controller: &'static str, key: &str) -> Reconciling {
        let labels = controller_labels(controller);
        {
            let mut state = lock(&self.inner.state);
            if let Some(since) = state.queued.remove(&(controller, key.to_string())) {
                self.inner
                    .queue_latency
                    .get_or_create(&labels)
                    .observe(since.elapsed().as_secs_f64());
                self.set_depth(&state, controller);
            }
        }
        self.inner.active.get_or_create(&labels).inc();
        Reconciling {
            metrics: self.clone(),
            controller,
            started: Instant::now(),
        }
    }

    /// A request of a Kubernetes client was answered with `code` (`None`: no answer).
    pub fn kube_request(&self, verb: &str, code: Option<u16>) {
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                code: code.map_or_else(|| "error".to_string(), |c| c.to_string()),
            })
            .inc();
    }

    /// A run of a Migration and stage was seen: every result of its runs' series exists
    /// from now on (at zero), so the first of each counts. Idempotent.
    pub fn run_seen(&self, run: &RunRef) {
        for result in RUN_RESULTS {
            let labels = run.run_labels(result);
            let _ = self.inner.runs.get_or_create(&labels);
            let _ = self.inner.last_run.get_or_create(&labels);
        }
    }

    /// A run ended with `result` (its Ready reason, lower case): counted once, by the
    /// operator that wrote it.
    pub fn run_finished(&self, run: &RunRef, result: &str) {
        self.run_seen(run);
        self.inner.runs.get_or_create(&run.run_labels(result)).inc();
    }

    /// A finished run was seen (ended by this operator, or listed by its watch): when it is
    /// the newest of its Migration and stage by `created` (Unix seconds; at equal times the
    /// one seen last), its result becomes the Migration's last one. Idempotent.
    pub fn last_run(&self, run: &RunRef, created: i64, result: &str) {
        self.run_seen(run);
        let mut state = lock(&self.inner.state);
        let group = run.group();
        if state
            .last_run
            .get(&group)
            .is_some_and(|&seen| seen > created)
        {
            return;
        }
        state.last_run.insert(group, created);
        for r in RUN_RESULTS {
            self.inner
                .last_run
                .get_or_create(&run.run_labels(r))
                .set(i64::from(r == result));
        }
    }

    /// An action of `run` executes until the returned guard is dropped; its progress
    /// ([`ActionRunning::progress`]) is shown meanwhile and goes back to 0 with the guard.
    pub fn action_running(&self, run: &RunRef, id: &str) -> ActionRunning {
        let labels = StageActionLabels {
            migration_namespace: run.namespace.clone(),
            migration: run.migration.clone(),
            stage: run.stage.clone(),
            action: id.to_string(),
        };
        let gauge = self.inner.running.get_or_create(&labels).clone();
        gauge.inc();
        let done = self.inner.progress_done.get_or_create(&labels).clone();
        let ratio = self.inner.progress_ratio.get_or_create(&labels).clone();
        done.set(0);
        ratio.set(0.0);
        ActionRunning { gauge, done, ratio }
    }

    /// An action of `run` finished: `result` is `succeeded`, `failed`, `skipped` or
    /// `stopped`; `seconds` (its plan and apply time) is recorded in the duration histogram
    /// unless it was skipped.
    pub fn action_finished(&self, run: &RunRef, id: &str, result: &str, seconds: f64) {
        self.inner
            .actions
            .get_or_create(&ActionLabels {
                migration_namespace: run.namespace.clone(),
                migration: run.migration.clone(),
                action: id.to_string(),
                result: result.to_string(),
            })
            .inc();
        if result != "skipped" {
            self.inner
                .durations
                .get_or_create(&ActionOnly {
                    migration_namespace: run.namespace.clone(),
                    migration: run.migration.clone(),
                    action: id.to_string(),
                })
                .observe(seconds.max(0.0));
        }
    }

    /// Whether this replica leads (runs the controllers).
    pub fn set_leader(&self, leading: bool) {
        self.inner.leader.set(i64::from(leading));
    }

    /// The run is in `phase` (`Some("waiting")`, `Some("running")`) or finished (`None`):
    /// the runs-waiting gauge and the phase start series of its Migration and stage (the
    /// earliest start among its runs in that phase) follow. Idempotent.
    pub fn run_phase(&self, run: &RunRef, phase: Option<&'static str>) {
        let key = format!("{}/{}", run.namespace, run.name);
        let mut state = lock(&self.inner.state);
        let changed = if phase == Some("waiting") {
            state.waiting.insert(key.clone())
        } else {
            state.waiting.remove(&key)
        };
        if changed {
            self.inner
                .runs_waiting
                .set(i64::try_from(state.waiting.len()).unwrap_or(i64::MAX));
        }
        let before = state.phases.get(&key).map(|(l, _)| l.phase.clone());
        if before.as_deref() == phase {
            return;
        }
        if let Some((old, _)) = state.phases.remove(&key) {
            self.set_phase_since(&state, &old);
        }
        if let Some(new) = phase {
            let labels = PhaseLabels {
                migration_namespace: run.namespace.clone(),
                migration: run.migration.clone(),
                stage: run.stage.clone(),
                phase: new.to_string(),
            };
            state.phases.insert(key, (labels.clone(), unix_now()));
            self.set_phase_since(&state, &labels);
        }
    }

    /// The series of `labels`: the earliest start of its runs, gone when it has none.
    fn set_phase_since(&self, state: &State, labels: &PhaseLabels) {
        let earliest = state
            .phases
            .values()
            .filter(|(l, _)| l == labels)
            .map(|(_, since)| *since)
            .min();
        match earliest {
            Some(since) => {
                self.inner.run_phase_since.get_or_create(labels).set(since);
            }
            None => {
                self.inner.run_phase_since.remove(labels);
            }
        }
    }

    /// The metrics in the OpenMetrics text format (which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }

    /// A Kubernetes client built from `config` whose requests are counted here.
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&CountRequests {
                metrics: self.clone(),
            })
            .build())
    }
}

fn controller_labels(controller: &str) -> ControllerLabels {
    ControllerLabels {
        controller: controller.to_string(),
    }
}

/// An action executing ([`Metrics::action_running`]).
#[derive(Debug)]
pub struct ActionRunning {
    gauge: Gauge,
    done: Gauge,
    ratio: Gauge<f64, AtomicU64>,
}

impl ActionRunning {
    /// The action reported `done` objects of its phase's `total` (when known).
    pub fn progress(&self, done: u64, total: Option<u64>) {
        self.done.set(i64::try_from(done).unwrap_or(i64::MAX));
        self.ratio.set(progress_ratio(done, total));
    }
}

/// Done over total, within 0 to 1; 0 without a total.
fn progress_ratio(done: u64, total: Option<u64>) -> f64 {
    match total {
        Some(total) if total > 0 => (done as f64 / total as f64).clamp(0.0, 1.0),
        _ => 0.0,
    }
}

impl Drop for ActionRunning {
    fn drop(&mut self) {
        self.gauge.dec();
        self.done.set(0);
        self.ratio.set(0.0);
    }
}

/// A reconcile in flight ([`Metrics::reconcile_started`]).
#[derive(Debug)]
pub struct Reconciling {
    metrics: Metrics,
    controller: &'static str,
    started: Instant,
}

impl Reconciling {
    /// The reconcile ended: `ok` (`success`) or in an error (`error`, also counted in
    /// `stagehand_reconcile_errors_total`).
    pub fn finished(self, ok: bool) {
        let inner = &self.metrics.inner;
        let labels = controller_labels(self.controller);
        inner
            .reconciles
            .get_or_create(&ReconcileLabels {
                controller: self.controller.to_string(),
                result: if ok { "success" } else { "error" }.to_string(),
            })
            .inc();
        if !ok {
            inner.reconcile_errors.get_or_create(&labels).inc();
        }
        inner
            .reconcile_duration
            .get_or_create(&labels)
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Reconciling {
    fn drop(&mut self) {
        self.metrics
            .inner
            .active
            .get_or_create(&controller_labels(self.controller))
            .dec();
    }
}

/// The Kubernetes verb of a request (`get`, `list`, `watch`, `create`, `update`, `patch`,
/// `delete`, `deletecollection`; `other`), from its method and path: a path that ends at a
/// resource type is a collection.
pub fn verb(method: &http::Method, uri: &http::Uri) -> &'static str {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    // `namespaces` itself, a resource type (cluster-wide or in a namespace): a collection.
    let collection = matches!(rest, [_] | ["namespaces", _, _]);
    let watching = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if collection => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if collection => "deletecollection",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// The tower layer that counts a Kubernetes client's requests ([`Metrics::client`]).
#[derive(Clone, Debug)]
struct CountRequests {
    metrics: Metrics,
}

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Counted {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A service whose requests are counted by verb and status code.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    metrics: Metrics,
}

impl<S, B, R> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let verb = verb(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = answer.as_ref().ok().map(|r| r.status().as_u16());
            metrics.kube_request(verb, code);
            answer
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(name: &str) -> RunRef {
        RunRef {
            namespace: "ns".into(),
            migration: "opendesk".into(),
            stage: "pre".into(),
            name: name.into(),
        }
    }

    const GROUP: &str = "migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\"";

    #[test]
    fn encodes_every_metric() {
        let m = Metrics::new();
        m.run_finished(&run("a"), "succeeded");
        m.action_finished(&run("a"), "workload_scale", "succeeded", 1.5);
        m.action_finished(&run("a"), "workload_scale", "skipped", 0.0);
        m.reconcile_started(RUN_CONTROLLER, "ns/a").finished(false);
        m.run_phase(&run("a"), Some("waiting"));
        m.run_phase(&run("b"), Some("waiting"));
        m.run_phase(&run("a"), Some("running"));
        m.kube_request("patch", Some(200));
        m.kube_request("get", None);
        let running = m.action_running(&run("a"), "workload_scale");
        let text = m.encode();
        assert!(text.contains("stagehand_actions_running{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 1"), "{text}");
        running.progress(2_100, Some(5_000));
        let text = m.encode();
        for line in [
            "stagehand_action_progress_done{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 2100",
            "stagehand_action_progress_ratio{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 0.42",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        drop(running);
        let text = m.encode();
        for line in [
            "stagehand_action_progress_done{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 0",
            "stagehand_action_progress_ratio{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 0.0",
        ] {
            assert!(
                text.contains(line),
                "a finished action's figure goes back to 0: {line} missing:\n{text}"
            );
        }
        for line in [
            &format!("stagehand_runs_total{{{GROUP},result=\"succeeded\"}} 1"),
            &format!("stagehand_runs_total{{{GROUP},result=\"terminating\"}} 0"),
            "stagehand_actions_total{migration_namespace=\"ns\",migration=\"opendesk\",action=\"workload_scale\",result=\"skipped\"} 1",
            "stagehand_action_duration_seconds_count{migration_namespace=\"ns\",migration=\"opendesk\",action=\"workload_scale\"} 1",
            "stagehand_reconcile_errors_total{controller=\"migrationrun\"} 1",
            "stagehand_reconcile_errors_total{controller=\"migration\"} 0",
            "stagehand_reconcile_total{controller=\"migrationrun\",result=\"error\"} 1",
            "stagehand_reconcile_total{controller=\"migration\",result=\"success\"} 0",
            "stagehand_reconcile_duration_seconds_count{controller=\"migrationrun\"} 1",
            "stagehand_reconcile_active{controller=\"migrationrun\"} 0",
            "stagehand_runs_waiting 1",
            "stagehand_actions_running{migration_namespace=\"ns\",migration=\"opendesk\",stage=\"pre\",action=\"workload_scale\"} 0",
            "stagehand_leader 0",
            "stagehand_kube_client_requests_total{verb=\"patch\",code=\"200\"} 1",
            "stagehand_kube_client_requests_total{verb=\"get\",code=\"error\"} 1",
            &format!(
                "stagehand_build_info{{version=\"{}\",commit=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION"),
                env!("STAGEHAND_GIT_COMMIT")
            ),
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
        assert!(!text.contains("run=\""), "no run names as labels:\n{text}");
    }

    #[test]
    fn every_run_result_starts_at_zero_once_a_migration_is_seen() {
        let m = Metrics::new();
        m.run_seen(&run("a"));
        let text = m.encode();
        for result in RUN_RESULTS {
            for name in ["stagehand_runs_total", "stagehand_last_run_result"] {
                let line = format!("{name}{{{GROUP},result=\"{result}\"}} 0");
                assert!(text.contains(&line), "{line} missing:\n{text}");
            }
        }
    }

    #[test]
    fn the_last_run_is_the_newest_by_creation() {
        let m = Metrics::new();
        m.last_run(&run("old"), 100, "failed");
        let text = m.encode();
        assert!(text.contains(&format!(
            "stagehand_last_run_result{{{GROUP},result=\"failed\"}} 1"
        )));
        // An older run seen later (a list after a restart) does not hide the newer one.
        m.last_run(&run("older"), 50, "succeeded");
        let text = m.encode();
        assert!(
            text.contains(&format!(
                "stagehand_last_run_result{{{GROUP},result=\"failed\"}} 1"
            )),
            "{text}"
        );
        m.last_run(&run("new"), 200, "succeeded");
        let text = m.encode();
        assert!(
            text.contains(&format!(
                "stagehand_last_run_result{{{GROUP},result=\"failed\"}} 0"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "stagehand_last_run_result{{{GROUP},result=\"succeeded\"}} 1"
            )),
            "{text}"
        );
    }

    #[test]
    fn the_work_queue_counts_an_object_once_until_its_reconcile_starts() {
        let m = Metrics::new();
        m.triggered(RUN_CONTROLLER, "ns/a");
        m.triggered(RUN_CONTROLLER, "ns/a");
        m.triggered(RUN_CONTROLLER, "ns/b");
        let text = m.encode();
        assert!(
            text.contains("stagehand_workqueue_depth{controller=\"migrationrun\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("stagehand_workqueue_adds_total{controller=\"migrationrun\"} 2"),
            "{text}"
        );
        let reconciling = m.reconcile_started(RUN_CONTROLLER, "ns/a");
        m.dropped(RUN_CONTROLLER, "ns/b");
        let text = m.encode();
        assert!(
            text.contains("stagehand_workqueue_depth{controller=\"migrationrun\"} 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "stagehand_workqueue_queue_duration_seconds_count{controller=\"migrationrun\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("stagehand_reconcile_active{controller=\"migrationrun\"} 1"),
            "{text}"
        );
        reconciling.finished(true);
        let text = m.encode();
        assert!(
            text.contains("stagehand_reconcile_active{controller=\"migrationrun\"} 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "stagehand_reconcile_total{controller=\"migrationrun\",result=\"success\"} 1"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_migration_has_one_phase_series_per_stage_until_its_runs_finish() {
        let m = Metrics::new();
        m.set_leader(true);
        m.run_phase(&run("a"), Some("waiting"));
        m.run_phase(&run("b"), Some("waiting"));
        let text = m.encode();
        assert!(text.contains("stagehand_leader 1"), "{text}");
        let waiting =
            format!("stagehand_run_phase_start_timestamp_seconds{{{GROUP},phase=\"waiting\"}} ");
        assert_eq!(text.matches(&waiting).count(), 1, "{text}");
        m.run_phase(&run("a"), Some("running"));
        let text = m.encode();
        assert!(text.contains(&waiting), "b still waits: {text}");
        assert!(text.contains("phase=\"running\"} "), "{text}");
        m.run_phase(&run("a"), None);
        m.run_phase(&run("b"), None);
        let text = m.encode();
        assert!(
            !text.contains("stagehand_run_phase_start_timestamp_seconds{"),
            "{text}"
        );
        assert!(text.contains("stagehand_runs_waiting 0"), "{text}");
    }

    #[test]
    fn requests_are_named_by_their_kubernetes_verb() {
        let cases = [
            (
                "GET",
                "/apis/stagehand.dev/v1/namespaces/ns/migrationruns?watch=true&resourceVersion=1",
                "watch",
            ),
            (
                "GET",
                "/apis/stagehand.dev/v1/namespaces/ns/migrationruns?limit=100",
                "list",
            ),
            ("GET", "/apis/stagehand.dev/v1/migrationruns", "list"),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps/opendesk-history",
                "get",
            ),
            ("GET", "/api/v1/namespaces/ns", "get"),
            ("GET", "/api/v1/namespaces", "list"),
            (
                "PATCH",
                "/apis/stagehand.dev/v1/namespaces/ns/migrationruns/r/status",
                "patch",
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/ns/events",
                "create",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/stagehand-leader",
                "update",
            ),
            (
                "DELETE",
                "/apis/stagehand.dev/v1/namespaces/ns/migrationruns/old",
                "delete",
            ),
            ("DELETE", "/api/v1/namespaces/ns/pods", "deletecollection"),
        ];
        for (method, uri, expected) in cases {
            let method: http::Method = method.parse().unwrap();
            let uri: http::Uri = uri.parse().unwrap();
            assert_eq!(verb(&method, &uri), expected, "{method} {uri}");
        }
    }

    #[test]
    fn the_progress_ratio_is_done_over_a_known_total_within_0_and_1() {
        assert_eq!(progress_ratio(2_100, Some(5_000)), 0.42);
        assert_eq!(progress_ratio(5_000, Some(5_000)), 1.0);
        assert_eq!(progress_ratio(7, None), 0.0, "no total: no ratio");
        assert_eq!(
            progress_ratio(7, Some(0)),
            0.0,
            "an empty phase divides by nothing"
        );
        assert_eq!(
            progress_ratio(9, Some(5)),
            1.0,
            "a count past its total stays at 1"
        );
    }
}
