//! The operator's Prometheus metrics (docs/design.md#operational-surface): runs and actions by
//! result, action duration, reconcile errors, the number of runs waiting, whether this
//! replica leads, and since when each unfinished run waits or runs (the chart's
//! PrometheusRule alerts on these, `deploy/charts/stagehand/templates/prometheusrule.yaml`).
//!
//! [`Metrics`] is a cheap, cloneable handle (an `Arc` inside) with no global state: the
//! command creates one, hands a clone to the controllers and serves [`Metrics::encode`] on
//! `/metrics`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionOnly {
    action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunPhaseLabels {
    /// `namespace/name` (one label: `namespace` is the scraped pod's own in most setups).
    run: String,
    /// `waiting` (also suspended or awaiting approval) or `running`.
    phase: String,
}

/// Every result `stagehand_runs_total` can carry (the terminal phases' reasons, lower
/// case): all exist from the start at zero, so `increase()` sees a run's first failure.
pub const RUN_RESULTS: [&str; 11] = [
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
];

type DurationFamily = Family<ActionOnly, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 50 ms .. ~14 min.
    Histogram::new(exponential_buckets(0.05, 2.0, 15))
}

struct Inner {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    actions: Family<ActionLabels, Counter>,
    durations: DurationFamily,
    reconcile_errors: Family<KindLabels, Counter>,
    queue_depth: Gauge,
    waiting: Mutex<HashSet<String>>,
    leader: Gauge,
    run_phase_since: Family<RunPhaseLabels, Gauge>,
    phases: Mutex<HashMap<String, &'static str>>,
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
    /// Creates and registers every metric (all start at zero).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let runs = Family::<RunLabels, Counter>::default();
        registry.register(
            "stagehand_runs",
            "MigrationRuns finished, by result (succeeded, failed, invalid)",
            runs.clone(),
        );
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "stagehand_actions",
            "Actions finished, by action id and result (succeeded, failed, skipped)",
            actions.clone(),
        );
        let durations: DurationFamily = Family::new_with_constructor(duration_histogram);
        registry.register(
            "stagehand_action_duration_seconds",
            "Wall-clock time of an action's plan and apply, by action id",
            durations.clone(),
        );
        let reconcile_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "stagehand_reconcile_errors",
            "Reconciles that ended in an error (retried), by resource kind",
            reconcile_errors.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "stagehand_queue_depth",
            "MigrationRuns waiting to start (for their Migration, release, pre run or another run)",
            queue_depth.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "stagehand_leader",
            "1 while this replica leads (runs the controllers), 0 while it stands by",
            leader.clone(),
        );
        let run_phase_since = Family::<RunPhaseLabels, Gauge>::default();
        registry.register(
            "stagehand_run_phase_start_timestamp_seconds",
            "Unix time at which an unfinished MigrationRun (namespace/name) entered its phase, waiting or running, as this operator saw it; gone when the run finishes",
            run_phase_since.clone(),
        );
        // Every run result and the two kinds exist from the start, at zero.
        for result in RUN_RESULTS {
            let _ = runs.get_or_create(&RunLabels {
                result: result.into(),
            });
        }
        for kind in ["MigrationRun", "Migration"] {
            let _ = reconcile_errors.get_or_create(&KindLabels { kind: kind.into() });
        }
        Self {
            inner: Arc::new(Inner {
                registry,
                runs,
                actions,
                durations,
                reconcile_errors,
                queue_depth,
                waiting: Mutex::new(HashSet::new()),
                leader,
                run_phase_since,
                phases: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A run reached a terminal state: `result` is `succeeded`, `failed` or `invalid`.
    pub fn run_finished(&self, result: &str) {
        self.inner
            .runs
            .get_or_create(&RunLabels {
                result: result.to_string(),
            })
            .inc();
    }

    /// An action finished: `result` is `succeeded`, `failed` or `skipped`; `seconds` (its
    /// plan and apply time) is recorded in the duration histogram unless it was skipped.
    pub fn action_finished(&self, id: &str, result: &str, seconds: f64) {
        self.inner
            .actions
            .get_or_create(&ActionLabels {
                action: id.to_string(),
                result: result.to_string(),
            })
            .inc();
        if result != "skipped" {
            self.inner
                .durations
                .get_or_create(&ActionOnly {
                    action: id.to_string(),
                })
                .observe(seconds.max(0.0));
        }
    }

    /// A reconcile of `kind` (`MigrationRun` or `Migration`) ended in an error.
    pub fn reconcile_error(&self, kind: &str) {
        self.inner
            .reconcile_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Marks the run `key` (e.g. `namespace/name`) as waiting to start or not; the queue depth
    /// gauge is the number of runs currently waiting. Idempotent.
    pub fn run_waiting(&self, key: &str, waiting: bool) {
        let mut set = match self.inner.waiting.lock() {
            Ok(set) => set,
            Err(poisoned) => poisoned.into_inner(),
        };
        if waiting {
            set.insert(key.to_string());
        } else {
            set.remove(key);
        }
        self.inner
            .queue_depth
            .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
    }

    /// Whether this replica leads (runs the controllers).
    pub fn set_leader(&self, leading: bool) {
        self.inner.leader.set(i64::from(leading));
    }

    /// The run `key` (`namespace/name`) is in `phase` (`Some("waiting")`, `Some("running")`)
    /// or finished (`None`). On a change of phase its start timestamp series is replaced by
    /// one of the new phase, stamped now; finished runs have none. Idempotent.
    pub fn run_phase(&self, key: &str, phase: Option<&'static str>) {
        let mut phases = match self.inner.phases.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        let before = phases.get(key).copied();
        if before == phase {
            return;
        }
        if let Some(old) = before {
            self.inner.run_phase_since.remove(&RunPhaseLabels {
                run: key.to_string(),
                phase: old.to_string(),
            });
        }
        match phase {
            Some(new) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or_default();
                self.inner
                    .run_phase_since
                    .get_or_create(&RunPhaseLabels {
                        run: key.to_string(),
                        phase: new.to_string(),
                    })
                    .set(i64::try_from(now).unwrap_or(i64::MAX));
                phases.insert(key.to_string(), new);
            }
            None => {
                phases.remove(key);
            }
        }
    }

    /// Sets the queue depth gauge directly (instead of [`Metrics::run_waiting`]).
    pub fn set_queue_depth(&self, depth: i64) {
        self.inner.queue_depth.set(depth);
    }

    /// The metrics in the OpenMetrics text format (which Prometheus scrapes).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric() {
        let m = Metrics::new();
        m.run_finished("succeeded");
        m.action_finished("workload_scale", "succeeded", 1.5);
        m.action_finished("workload_scale", "skipped", 0.0);
        m.reconcile_error("MigrationRun");
        m.run_waiting("ns/a", true);
        m.run_waiting("ns/b", true);
        m.run_waiting("ns/a", false);
        let text = m.encode();
        assert!(text.contains("stagehand_runs_total{result=\"succeeded\"} 1"));
        assert!(text.contains("stagehand_runs_total{result=\"invalid\"} 0"));
        assert!(
            text.contains(
                "stagehand_actions_total{action=\"workload_scale\",result=\"skipped\"} 1"
            )
        );
        assert!(
            text.contains("stagehand_action_duration_seconds_count{action=\"workload_scale\"} 1")
        );
        assert!(text.contains("stagehand_reconcile_errors_total{kind=\"MigrationRun\"} 1"));
        assert!(text.contains("stagehand_queue_depth 1"));
        assert!(text.contains("stagehand_leader 0"));
    }

    #[test]
    fn every_run_result_starts_at_zero() {
        let text = Metrics::new().encode();
        for result in RUN_RESULTS {
            let line = format!("stagehand_runs_total{{result=\"{result}\"}} 0");
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn a_run_has_one_phase_series_until_it_finishes() {
        let m = Metrics::new();
        m.set_leader(true);
        m.run_phase("ns/a", Some("waiting"));
        let text = m.encode();
        assert!(text.contains("stagehand_leader 1"), "{text}");
        assert!(
            text.contains(
                "stagehand_run_phase_start_timestamp_seconds{run=\"ns/a\",phase=\"waiting\"} "
            ),
            "{text}"
        );
        m.run_phase("ns/a", Some("running"));
        let text = m.encode();
        assert!(!text.contains("phase=\"waiting\""), "{text}");
        assert!(text.contains("{run=\"ns/a\",phase=\"running\"} "), "{text}");
        m.run_phase("ns/a", None);
        assert!(!m.encode().contains("run=\"ns/a\""));
    }
}
