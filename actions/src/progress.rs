//! How far an action is inside its work ([`Progress`]): how many objects it has done, how
//! many there are when it knows, their unit and a short phase ("deleting mailboxes"). An
//! action reports through [`crate::action::ActionContext::progress`]; the operator samples it
//! every few seconds and writes what it read to the run's status (`status.actions[i].progress`,
//! docs/operator.md#progress). Reporting costs an atomic add per object: no lock, no I/O in the
//! action's loop. Only a new phase takes a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// `total` when the action does not know it (yet).
const UNKNOWN: u64 = u64::MAX;

/// What an action reported last: read by the operator, never by the action.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProgressSnapshot {
    /// A short description of the current part of the work, e.g. `deleting mailboxes`.
    pub phase: String,
    /// Objects done in this phase.
    pub done: u64,
    /// Objects this phase has in all, when known.
    pub total: Option<u64>,
    /// What is counted, plural (`accounts`, `entries`, `keys`).
    pub unit: String,
}

impl ProgressSnapshot {
    /// The figure, as the status, `kubectl get` and `stagehand wait` show it:
    /// `2,100/5,000 accounts`, or `2,100 keys` when the total is unknown.
    /// Empty for a phase that counts nothing ([`Progress::step`]).
    pub fn figure(&self) -> String {
        if self.unit.is_empty() && self.total.is_none() {
            return String::new();
        }
        let done = grouped(self.done);
        let counted = match self.total {
            Some(total) => format!("{done}/{}", grouped(total)),
            None => done,
        };
        if self.unit.is_empty() {
            counted
        } else {
            format!("{counted} {}", self.unit)
        }
    }

    /// The phase and the figure: `deleting accounts: 2,100/5,000 accounts` (the phase alone
    /// when it counts nothing).
    pub fn line(&self) -> String {
        let figure = self.figure();
        match (self.phase.is_empty(), figure.is_empty()) {
            (true, _) => figure,
            (false, true) => self.phase.clone(),
            (false, false) => format!("{}: {figure}", self.phase),
        }
    }
}

/// `5000` as `5,000`: thousands grouped, as a person reads a count.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[derive(Debug)]
struct Shared {
    done: AtomicU64,
    total: AtomicU64,
    /// The phase and unit; `None` until the action names a phase (nothing reported).
    label: Mutex<Option<(String, String)>>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            done: AtomicU64::new(0),
            total: AtomicU64::new(UNKNOWN),
            label: Mutex::new(None),
        }
    }
}

/// The progress reporter of one action's execution. Cheap to clone; clones share the figures
/// (an action hands one to the tasks of its batches). The default reports to no one until the
/// operator reads it.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Shared>);

impl Progress {
    /// Starts a phase: `phase` (e.g. `deleting accounts`), `total` objects when known,
    /// counted in `unit` (plural, e.g. `accounts`); done starts at 0.
    pub fn phase(&self, phase: impl Into<String>, total: Option<u64>, unit: impl Into<String>) {
        let mut label = self.0.label.lock().unwrap_or_else(PoisonError::into_inner);
        self.0.done.store(0, Ordering::Relaxed);
        self.0
            .total
            .store(total.unwrap_or(UNKNOWN), Ordering::Relaxed);
        *label = Some((phase.into(), unit.into()));
    }

    /// Starts a phase that counts nothing (one request, a wait): `reading the IAM`.
    pub fn step(&self, phase: impl Into<String>) {
        self.phase(phase, None, "");
    }

    /// `n` more objects done (one atomic add: call it per object).
    pub fn add(&self, n: u64) {
        self.0.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets how many objects are done (for work counted elsewhere, e.g. a scan's total).
    pub fn set_done(&self, done: u64) {
        self.0.done.store(done, Ordering::Relaxed);
    }

    /// Sets the phase's total once it is known.
    pub fn set_total(&self, total: u64) {
        self.0.total.store(total, Ordering::Relaxed);
    }

    /// What was reported last; `None` before the first [`Progress::phase`].
    pub fn snapshot(&self) -> Option<ProgressSnapshot> {
        let label = self
            .0
            .label
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (phase, unit) = label?;
        let total = self.0.total.load(Ordering::Relaxed);
        Some(ProgressSnapshot {
            phase,
            done: self.0.done.load(Ordering::Relaxed),
            total: (total != UNKNOWN).then_some(total),
            unit,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(2_100), "2,100");
        assert_eq!(grouped(1_234_567), "1,234,567");
    }

    #[test]
    fn clones_share_the_figures_and_a_phase_starts_at_zero() {
        let progress = Progress::default();
        assert_eq!(progress.snapshot(), None, "nothing reported yet");
        let task = progress.clone();
        progress.phase("deleting accounts", Some(5_000), "accounts");
        task.add(2_000);
        task.add(100);
        let now = progress.snapshot().expect("a phase was named");
        assert_eq!(now.figure(), "2,100/5,000 accounts");
        assert_eq!(now.line(), "deleting accounts: 2,100/5,000 accounts");
        progress.phase("unlinking keys", None, "keys");
        task.set_done(7);
        assert_eq!(
            progress.snapshot().expect("a phase").line(),
            "unlinking keys: 7 keys"
        );
        progress.set_total(9);
        assert_eq!(progress.snapshot().expect("a phase").figure(), "7/9 keys");
        progress.step("writing the handover");
        let step = progress.snapshot().expect("a phase");
        assert_eq!(
            (step.figure().as_str(), step.line().as_str()),
            ("", "writing the handover")
        );
    }
}
