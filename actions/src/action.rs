//! The contract every action implements (docs/design.md#actions-reports-and-dry-runs): its typed
//! config ([`ActionConfig`]), a read-only planning phase and an apply phase ([`Action`]), run by
//! the operator's run engine in that order, and what they run against ([`ActionContext`]: the
//! cluster, the run's credentials, the Migration's object store). Nothing here imports an action or
//! a client: they all build on this.

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use stagehand_config::{ConfigIssue, ObjectStore};
use tokio::sync::watch;

pub use crate::progress::Progress;

/// A typed action config: what a declaration's `config` is read as. Configs reject unknown
/// keys (`deny_unknown_fields`) and carry the defaults the openDesk reference shows.
pub trait ActionConfig: DeserializeOwned + JsonSchema {
    /// The action id the config belongs to.
    const ID: &'static str;

    /// Rules the schema cannot state (e.g. a Redis pattern needs a literal prefix).
    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        Vec::new()
    }
}

/// A credential's value, taken from a Secret named in `secretFiles`. Held in memory only;
/// its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a value read from a Secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it (an Authorization header, a bind).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

/// The credentials of a run, by `secretFiles` name. Optional ones that were missing are
/// absent; an action that needs one fails naming the secret file, never its value.
#[derive(Debug, Clone, Default)]
pub struct Secrets(BTreeMap<String, SecretValue>);

impl Secrets {
    /// Secrets from `(name, value)` pairs.
    pub fn new(values: impl IntoIterator<Item = (String, SecretValue)>) -> Self {
        Self(values.into_iter().collect())
    }

    /// The credential named `name`, or an error naming the secret file.
    pub fn get(&self, name: &str) -> Result<&SecretValue, ActionError> {
        self.0.get(name).ok_or_else(|| {
            ActionError::NotFound(format!(
                "the secret file {name:?} is not available: add it to the Migration's secretFiles (or create the Secret it names)"
            ))
        })
    }
}

/// What an action runs against.
#[derive(Clone)]
pub struct ActionContext {
    /// A client of the cluster the Migration lives in.
    pub client: kube::Client,
    /// The Migration's namespace: where workloads are looked up.
    pub namespace: String,
    /// The run's credentials.
    pub secrets: Secrets,
    /// The Migration's object store (`spec.objectStore`), where the stages hand work over;
    /// `None` when the Migration declares none.
    pub object_store: Option<ObjectStore>,
    /// Which run this is, for what actions write down (the handover records it).
    pub run: RunIdentity,
    /// Set when the operator must stop (it lost its leadership, or it is shutting down): the
    /// action stops at its next safe point — between destructive requests, every request
    /// already sent awaited and counted — and returns [`ActionError::Stopped`] (wrapped in
    /// [`ActionError::Interrupted`] with what was done), so that the next run of it works out
    /// what is left.
    pub stop: StopSignal,
    /// The findings a person approved for this run (a `Manual` run whose plan carried them,
    /// docs/design.md#findings): an action that reports findings compares what it finds at
    /// execution with them and stops before its first change when they differ
    /// ([`ActionError::FindingsChanged`]). `None`: nothing was approved, nothing to compare.
    pub approved_findings: Option<Findings>,
    /// What the action reports about an insecure setting it used (a TLS certificate not
    /// verified): each is logged as a warning when recorded; the operator puts them in the
    /// action's summary (`Warning: ...` lines) and on the run as Warning Events.
    pub warnings: Warnings,
    /// How far the action is inside its work: an action that touches more than a handful of
    /// objects names each phase and counts what it did ([`Progress`]); the operator writes
    /// it to the run's status every few seconds.
    pub progress: Progress,
}

/// The warnings of one action's execution (the one path for an insecure setting to reach the
/// log, the run's Events and the action's summary). Cheap to clone; clones share the list.
/// The same message recorded twice (every connection of a client) is kept once.
#[derive(Debug, Clone, Default)]
pub struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    /// Records `message` (once) and logs it as a warning the first time.
    pub fn warn(&self, message: impl Into<String>) {
        let message = message.into();
        let mut list = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !list.contains(&message) {
            tracing::warn!(warning = %message, "insecure setting in use");
            list.push(message);
        }
    }

    /// The warnings recorded so far, in order.
    pub fn list(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// `summary` followed by one `Warning: <message>` line per warning.
    pub fn summary_with(&self, summary: &str) -> String {
        self.list()
            .iter()
            .fold(summary.to_string(), |out, w| format!("{out}\nWarning: {w}"))
    }
}

/// Asks a running action to stop at its next safe point. Cheap to clone; the default never
/// stops (tests, benchmarks, the command line). It may listen to several senders
/// ([`StopSignal::or`]): the operator's (shutdown, lost leadership) and its run's (the run
/// was deleted).
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Vec<watch::Receiver<Option<String>>>);

/// The sending half of a [`StopSignal`]: [`StopSender::stop`] asks every action holding the
/// signal to stop, saying why.
#[derive(Debug)]
pub struct StopSender(watch::Sender<Option<String>>);

impl StopSender {
    /// Asks the actions to stop; the first reason given is kept.
    pub fn stop(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.0.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }
}

impl StopSignal {
    /// A signal and the sender that sets it.
    pub fn channel() -> (StopSender, StopSignal) {
        let (tx, rx) = watch::channel(None);
        (StopSender(tx), StopSignal(vec![rx]))
    }

    /// A signal that never asks to stop.
    pub fn never() -> Self {
        Self(Vec::new())
    }

    /// A signal that asks to stop when either this one or `other` does (the first reason
    /// given wins).
    #[must_use]
    pub fn or(mut self, other: StopSignal) -> Self {
        self.0.extend(other.0);
        self
    }

    /// Why the action must stop, once it was asked to.
    pub fn reason(&self) -> Option<String> {
        self.0.iter().find_map(|rx| rx.borrow().clone())
    }

    /// `Err(ActionError::Stopped)` once a stop was asked: what a sequential loop calls before
    /// each destructive request.
    pub fn check(&self) -> Result<(), ActionError> {
        match self.reason() {
            Some(reason) => Err(ActionError::Stopped(reason)),
            None => Ok(()),
        }
    }

    /// Resolves when a stop is asked (never for [`StopSignal::never`], nor once its sender is
    /// gone without asking).
    pub async fn requested(&self) {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.0.iter().map(|rx| {
            let mut rx = rx.clone();
            Box::pin(async move {
                if rx.wait_for(Option::is_some).await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
        });
        futures::future::select_all(waits).await;
    }
}

/// The run an action executes in: recorded in what it writes down, so that a reader can tell
/// which release and run wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunIdentity {
    /// The release being migrated to (the Migration's `releaseVersion`); empty when unknown.
    pub release: String,
    /// The MigrationRun's name, when the action runs in one.
    pub name: Option<String>,
    /// The MigrationRun's `metadata.uid`: the same run re-entered after a restart has it,
    /// another run of the same name (deleted and created again) does not.
    pub uid: Option<String>,
    /// Whether `apply` follows this `plan` at once (a real run, not a dry run): planning must
    /// still prove everything apply needs, but may leave out what only a dry run's report
    /// needs (e.g. counting what apply would change). `false` (the default) plans in full.
    pub apply_follows: bool,
}

impl fmt::Debug for ActionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActionContext")
            .field("namespace", &self.namespace)
            .field("secrets", &self.secrets)
            .field("run", &self.run)
            .field("stop", &self.stop.reason())
            .field("warnings", &self.warnings.list())
            .finish()
    }
}

/// What a phase did or would do, in a short human summary (it goes into the run's status),
/// and, for an action whose work is a list a person reviews, the list itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// E.g. `StatefulSet ox-connector: 2 -> 0 replicas; 2 pods gone after 3s`.
    pub summary: String,
    /// The objects the phase found and would change (or changed), one row each: what a
    /// review reads instead of a Job log. The operator keeps them after the run
    /// (docs/design.md#findings). `None` for actions that report no list.
    pub findings: Option<Findings>,
}

impl Outcome {
    /// An outcome with this summary.
    pub fn new(summary: impl Into<String>) -> Self {
        Self {
            summary: summary.into(),
            findings: None,
        }
    }

    /// The same outcome carrying `findings`.
    #[must_use]
    pub fn with_findings(mut self, findings: Findings) -> Self {
        self.findings = Some(findings);
        self
    }
}

/// The objects an action found, as a table a person reviews: named columns, one row per
/// object, each row in a group (e.g. `orphaned`, `guest`), and counts the summary quotes
/// (e.g. `activeOidcBound`). Rows are kept sorted so that two readings of the same state are
/// equal, and their [`Findings::digest`] is what an approval binds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Findings {
    /// The column names, in order (e.g. `matrixId`, `displayName`, `oidcSubject`, `created`).
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Vec<FindingRow>,
    /// Named counts (e.g. `orphaned: 3`, `activeOidcBound: 12`).
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
}

/// One object found: its group and its values, one per column.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct FindingRow {
    /// Which list it is in (e.g. `orphaned`, `guest`).
    pub group: String,
    /// The values, in the order of [`Findings::columns`]; the first identifies the object.
    pub values: Vec<String>,
}

impl Findings {
    /// Findings with these columns and rows (sorted) and counts.
    pub fn new(
        columns: &[&str],
        mut rows: Vec<FindingRow>,
        counts: impl IntoIterator<Item = (String, u64)>,
    ) -> Self {
        rows.sort();
        Self {
            columns: columns.iter().map(|c| (*c).to_string()).collect(),
            rows,
            counts: counts.into_iter().collect(),
        }
    }

    /// A digest of the rows (group and the identifying first value of each), what an approval
    /// binds: the same objects found give the same digest, whatever else changed about them.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for row in &self.rows {
            hasher.update(row.group.as_bytes());
            hasher.update([0]);
            hasher.update(row.values.first().map_or("", String::as_str).as_bytes());
            hasher.update([0xff]);
        }
        let bytes = hasher.finalize();
        bytes.iter().fold(String::from("sha256:"), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        })
    }

    /// The objects found now (`self`) that were not approved, and the approved ones no longer
    /// found, by group and identifying value: `None` when they are the same objects.
    pub fn difference_from(&self, approved: &Findings) -> Option<String> {
        let keys = |f: &Findings| -> std::collections::BTreeSet<(String, String)> {
            f.rows
                .iter()
                .map(|r| {
                    (
                        r.group.clone(),
                        r.values.first().cloned().unwrap_or_default(),
                    )
                })
                .collect()
        };
        let (now, then) = (keys(self), keys(approved));
        if now == then {
            return None;
        }
        let show = |set: Vec<&(String, String)>| -> String {
            let shown: Vec<String> = set
                .iter()
                .take(20)
                .map(|(g, k)| format!("{k} ({g})"))
                .collect();
            let more = set.len().saturating_sub(shown.len());
            if more > 0 {
                format!("{} (and {more} more)", shown.join(", "))
            } else {
                shown.join(", ")
            }
        };
        let added: Vec<_> = now.difference(&then).collect();
        let gone: Vec<_> = then.difference(&now).collect();
        let mut parts = Vec::new();
        if !added.is_empty() {
            parts.push(format!("found now but not approved: {}", show(added)));
        }
        if !gone.is_empty() {
            parts.push(format!("approved but no longer found: {}", show(gone)));
        }
        Some(parts.join("; "))
    }
}

/// Why an action cannot go on. Messages name what failed and never carry secret values.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The config could not be read as the action's typed config.
    #[error("invalid config: {0}")]
    Config(String),
    /// A Kubernetes call failed.
    #[error("{context}: {source}")]
    Kubernetes {
        /// What was being done, e.g. `scaling StatefulSet ox-connector`.
        context: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// A server refused what was asked by a rule of its own: a credential (HTTP 401, LDAP
    /// invalidCredentials, an OX authentication fault), a permission (HTTP 403, LDAP
    /// insufficientAccessRights, a Redis NOPERM) or a rule of its data (UDM 400/422, an OX
    /// refusal such as `Changing username is disabled!`). Asking again changes nothing: the
    /// credential, the grant or the data must change first.
    #[error("{0}")]
    Refused(String),
    /// Something the action needs does not exist: an object, a bucket, a handover, a secret
    /// file (HTTP 404, LDAP noSuchObject, an OX `No such ...` fault).
    #[error("{0}")]
    NotFound(String),
    /// The state differs from what the action expected: the object changed since it was read
    /// (HTTP 409/412), or another object already holds the name or address (a rename or a
    /// create that would collide).
    #[error("{0}")]
    Conflict(String),
    /// A server answered something that cannot be read: not JSON, not SOAP, not LDIF, fields
    /// missing or of the wrong kind. The server (or a proxy in front of it) is not what the
    /// config points at, or not a version Stagehand speaks.
    #[error("{0}")]
    InvalidAnswer(String),
    /// A server could not be reached or did not answer in time (connection refused, DNS, TLS
    /// handshake, a timeout, HTTP 502/503/504): a later run may succeed without any change.
    #[error("{0}")]
    Unavailable(String),
    /// The action ran and could not reach its goal: a verification found objects still
    /// differing, a wait timed out, a task died.
    #[error("{0}")]
    Failed(String),
    /// What the action found at execution is not what a person approved
    /// ([`ActionContext::approved_findings`]); nothing was changed. The message names the
    /// difference. A new run plans (and is approved) again.
    #[error("{0}")]
    FindingsChanged(String),
    /// The operator asked the action to stop (it lost its leadership, or it is shutting
    /// down) and it did, at a safe point: every request it sent was answered. Not a failure:
    /// the run stays resumable and the next run of the action works out what is left.
    #[error("stopped at a safe point: {0}")]
    Stopped(String),
    /// The action stopped part-way: `cause` stopped it after it had done what `progress`
    /// says (what the server confirmed), so a rerun knows what is left.
    #[error("{cause}; {progress}")]
    Interrupted {
        /// Why it stopped.
        cause: Box<ActionError>,
        /// What was done before, e.g. `120 keys matching "sess:*" were deleted before this
        /// error, a rerun deletes the rest`.
        progress: String,
    },
}

impl ActionError {
    /// Wraps a kube error with what was being done.
    pub fn kube(context: impl Into<String>) -> impl FnOnce(kube::Error) -> ActionError {
        let context = context.into();
        move |source| ActionError::Kubernetes { context, source }
    }

    /// The variant an HTTP answer with `status` (one the caller did not expect) stands for:
    /// 401/403 [`ActionError::Refused`], 404/410 [`ActionError::NotFound`], 409/412
    /// [`ActionError::Conflict`], 502/503/504 [`ActionError::Unavailable`], any other
    /// [`ActionError::Failed`]; `message` is the text, unchanged.
    pub fn for_status(status: u16, message: String) -> ActionError {
        match status {
            401 | 403 => ActionError::Refused(message),
            404 | 410 => ActionError::NotFound(message),
            409 | 412 => ActionError::Conflict(message),
            502..=504 => ActionError::Unavailable(message),
            _ => ActionError::Failed(message),
        }
    }

    /// The same kind of error with its message rewritten by `f`, which is given the message
    /// as printed: how a caller adds what it was doing (`renaming X failed: {cause}`) without
    /// losing what happened. [`ActionError::Config`] and [`ActionError::Kubernetes`] become
    /// [`ActionError::Failed`]; [`ActionError::Stopped`] and [`ActionError::Interrupted`] are
    /// returned as they are (a stop stays a stop).
    #[must_use]
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> ActionError {
        match self {
            ActionError::Refused(m) => ActionError::Refused(f(m)),
            ActionError::NotFound(m) => ActionError::NotFound(f(m)),
            ActionError::Conflict(m) => ActionError::Conflict(f(m)),
            ActionError::InvalidAnswer(m) => ActionError::InvalidAnswer(f(m)),
            ActionError::Unavailable(m) => ActionError::Unavailable(f(m)),
            ActionError::Failed(m) => ActionError::Failed(f(m)),
            ActionError::FindingsChanged(m) => ActionError::FindingsChanged(f(m)),
            e @ (ActionError::Config(_) | ActionError::Kubernetes { .. }) => {
                ActionError::Failed(f(e.to_string()))
            }
            e @ (ActionError::Stopped(_) | ActionError::Interrupted { .. }) => e,
        }
    }

    /// Whether the action stopped because it was asked to ([`ActionError::Stopped`], also
    /// inside [`ActionError::Interrupted`]): the run is resumable, not failed.
    pub fn is_stop(&self) -> bool {
        match self {
            ActionError::Stopped(_) => true,
            ActionError::Interrupted { cause, .. } => cause.is_stop(),
            _ => false,
        }
    }

    /// `self`, with what was done before it (`progress`) when anything was: the error of an
    /// action stopped or failed part-way.
    pub fn after(self, progress: Option<String>) -> ActionError {
        match progress {
            Some(progress) => ActionError::Interrupted {
                cause: Box::new(self),
                progress,
            },
            None => self,
        }
    }
}

/// An action, built from its declaration's config.
pub trait Action: Send + Sync + fmt::Debug {
    /// Read-only: resolves the config against the cluster, proves it can reach and change
    /// what it would change, and says what it would do. Fails before any change if the action
    /// could not finish. A dry run stops here.
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>>;

    /// Makes the change. Works out what is left from the state it finds, so that a run
    /// interrupted inside it can re-enter it safely.
    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>>;

    /// What the action needs from its run (secret files, the object store's handover), for
    /// validation and the run's preflight. Nothing unless the action says so.
    fn needs(&self) -> stagehand_config::Needs {
        stagehand_config::Needs::default()
    }

    /// The network endpoints the action contacts, its config's defaults applied (`namespace`:
    /// the Migration's, for a default naming it): what the operator's `--allowed-endpoints`
    /// is checked against before a run starts. None unless the action says so (one that only
    /// talks to the cluster, or executes in a pod).
    fn endpoints(&self, _namespace: &str) -> Vec<stagehand_config::Endpoint> {
        Vec::new()
    }

    /// Whether the action's own config makes it a dry run (`config.dryRun: true`): the engine
    /// then runs only its planning phase, records no footprint and does not count it as
    /// applied.
    fn dry_run(&self) -> bool {
        false
    }

    /// Whether the action's outcome carries [`Findings`] (the list a person reviews). The
    /// operator plans such an action before a `Manual` run waits for its approval, keeps its
    /// findings and binds them into the digest approved; at execution the action receives them
    /// as [`ActionContext::approved_findings`] (docs/design.md#findings).
    fn reports_findings(&self) -> bool {
        false
    }

    /// Read-only, run for every planned action of the stage before the first change: proves
    /// connectivity and credentials that do not depend on what earlier actions change (an API
    /// answering, a credential accepted, a bucket reachable). The default proves nothing.
    fn preflight<'a>(&'a self, _ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn an_interrupted_action_says_why_and_what_was_done_whatever_stopped_it() {
        let e = ActionError::Interrupted {
            cause: Box::new(ActionError::Config(
                "redis.database 300 is out of range".into(),
            )),
            progress: "120 keys were deleted before this error".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid config: redis.database 300 is out of range; 120 keys were deleted before this error"
        );
    }

    #[test]
    fn warnings_are_shared_by_clones_kept_once_and_end_the_summary() {
        let warnings = Warnings::default();
        let client_side = warnings.clone();
        client_side.warn("ldap.insecureSkipTlsVerify is set");
        client_side.warn("ldap.insecureSkipTlsVerify is set");
        warnings.warn("redis.insecureSkipTlsVerify is set");
        assert_eq!(
            warnings.list(),
            [
                "ldap.insecureSkipTlsVerify is set",
                "redis.insecureSkipTlsVerify is set"
            ]
        );
        assert_eq!(
            warnings.summary_with("3 entries changed"),
            "3 entries changed\nWarning: ldap.insecureSkipTlsVerify is set\nWarning: redis.insecureSkipTlsVerify is set"
        );
        assert_eq!(Warnings::default().summary_with("done"), "done");
    }

    #[tokio::test]
    async fn a_signal_of_two_senders_stops_when_either_asks() {
        let (operator, operator_signal) = StopSignal::channel();
        let (run, run_signal) = StopSignal::channel();
        let both = operator_signal.or(run_signal);
        assert!(both.check().is_ok());
        run.stop("MigrationRun pre was deleted");
        both.requested().await;
        assert_eq!(
            both.reason().as_deref(),
            Some("MigrationRun pre was deleted")
        );
        operator.stop("the operator is shutting down");
        assert_eq!(
            both.reason().as_deref(),
            Some("the operator is shutting down"),
            "the operator's sender is listed first"
        );
    }

    #[tokio::test]
    async fn a_stop_is_seen_by_every_clone_with_its_first_reason() {
        let (sender, signal) = StopSignal::channel();
        let clone = signal.clone();
        assert!(signal.check().is_ok());
        assert_eq!(clone.reason(), None);
        sender.stop("the operator lost its leadership");
        sender.stop("the operator is shutting down");
        clone.requested().await;
        let e = signal.check().expect_err("stopped");
        assert!(e.is_stop());
        assert_eq!(
            e.to_string(),
            "stopped at a safe point: the operator lost its leadership"
        );
        let after = e.after(Some("3 of 5 subscriptions were dropped".into()));
        assert!(after.is_stop());
        assert!(!ActionError::Failed("x".into()).is_stop());
        assert!(StopSignal::never().check().is_ok());
        assert!(StopSignal::default().reason().is_none());
    }
}
