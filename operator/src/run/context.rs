//! What both controllers share: the [`Context`] every reconcile gets, the [`Error`] that makes
//! the controller retry one, and [`event`], how they publish Events.

use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
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
    /// Becomes true when the operator is asked to stop: no new action starts.
    pub stopping: watch::Receiver<bool>,
    /// The runs as the run controller sees them (unfinished ones in its store, finished ones
    /// in a small index), and whom to wake.
    pub runs: RunsView,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
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
