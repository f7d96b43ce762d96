//! The operator's Prometheus metrics (SPEC 5, operational surface): runs and actions by
//! result, action duration, reconcile errors and the number of runs waiting.
//!
//! [`Metrics`] is a cheap, cloneable handle (an `Arc` inside) with no global state: the
//! command creates one, hands a clone to the controllers and serves [`Metrics::encode`] on
//! `/metrics`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

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
        // Every run result and the two kinds exist from the start, at zero.
        for result in ["succeeded", "failed", "invalid"] {
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
    }
}
