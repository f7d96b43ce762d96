//! How an action's progress reaches the run's status (docs/operator.md#progress), without
//! I/O: the operator samples the action's reporter every [`SAMPLE_EVERY`] and writes what it
//! read when it changed and the last progress write is at least [`WRITE_EVERY`] old
//! ([`Throttle`]), whatever the rate of the action's work; the action's end writes the last
//! figure with its result. The lines `kubectl get`, the conditions and `stagehand wait` show
//! are built here too.

use std::time::{Duration, Instant};

use stagehand_actions::progress::ProgressSnapshot;
use stagehand_crds::unversioned::ActionProgress;

/// How often the operator reads a running action's reporter (an atomic load, no request).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The least time between two progress writes of a run's status: an action that counts
/// 5,000 objects a second still costs one write every few seconds.
pub const WRITE_EVERY: Duration = Duration::from_secs(3);

/// Decides when a sampled figure is written.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    last_write: Option<Instant>,
    written: Option<ProgressSnapshot>,
}

impl Throttle {
    /// Writes at most once per `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last_write: None,
            written: None,
        }
    }

    /// Whether `seen`, sampled at `now`, is to be written now: it differs from the figure
    /// written last, and the last write was at least `every` before `now`. When it says yes,
    /// it counts the write as done.
    pub fn due(&mut self, now: Instant, seen: &ProgressSnapshot) -> bool {
        if self.written.as_ref() == Some(seen) {
            return false;
        }
        if self
            .last_write
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return false;
        }
        self.last_write = Some(now);
        self.written = Some(seen.clone());
        true
    }
}

/// The status form of a snapshot.
pub fn status_of(seen: &ProgressSnapshot) -> ActionProgress {
    ActionProgress {
        phase: seen.phase.clone(),
        done: seen.done,
        total: seen.total,
        unit: seen.unit.clone(),
    }
}

/// The snapshot a status entry holds (to print it the way the operator does).
pub fn snapshot_of(p: &ActionProgress) -> ProgressSnapshot {
    ProgressSnapshot {
        phase: p.phase.clone(),
        done: p.done,
        total: p.total,
        unit: p.unit.clone(),
    }
}

/// `status.progress`: finished actions over all (`3/7`), followed by the running action's
/// figure when it reports one (`3/7 2,100/5,000 accounts`).
pub fn run_progress(finished: usize, all: usize, running: Option<&ActionProgress>) -> String {
    match running.map(|p| snapshot_of(p).figure()) {
        Some(figure) if !figure.is_empty() => format!("{finished}/{all} {figure}"),
        _ => format!("{finished}/{all}"),
    }
}

/// `status.currentPhase` and the Reconciling condition's message while an action runs:
/// `action 3 x: deleting accounts: 2,100/5,000 accounts`, or the label alone before it
/// reported anything.
pub fn phase_line(label: &str, running: Option<&ActionProgress>) -> String {
    match running {
        Some(p) => format!("{label}: {}", snapshot_of(p).line()),
        None => label.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn figure(done: u64) -> ProgressSnapshot {
        ProgressSnapshot {
            phase: "deleting accounts".into(),
            done,
            total: Some(5_000),
            unit: "accounts".into(),
        }
    }

    #[test]
    fn the_first_figure_is_written_then_one_per_interval_and_only_when_it_changed() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut t = Throttle::new(Duration::from_secs(3));
        assert!(t.due(at(0), &figure(1)), "the first figure is written");
        assert!(!t.due(at(1_000), &figure(500)), "too soon");
        assert!(!t.due(at(2_999), &figure(900)), "still too soon");
        assert!(t.due(at(3_000), &figure(1_200)), "an interval later");
        assert!(
            !t.due(at(10_000), &figure(1_200)),
            "unchanged: nothing to write"
        );
        assert!(t.due(at(10_001), &figure(1_201)), "changed after a pause");
    }

    #[test]
    fn lines_name_the_action_its_phase_and_the_figure() {
        let p = status_of(&figure(2_100));
        assert_eq!(run_progress(3, 7, Some(&p)), "3/7 2,100/5,000 accounts");
        assert_eq!(run_progress(3, 7, None), "3/7");
        assert_eq!(
            phase_line("action 2 ox_functional_accounts_export", Some(&p)),
            "action 2 ox_functional_accounts_export: deleting accounts: 2,100/5,000 accounts"
        );
        assert_eq!(phase_line("action 2 x", None), "action 2 x");
        let unknown = ActionProgress {
            phase: String::new(),
            done: 12_345,
            total: None,
            unit: "keys".into(),
        };
        assert_eq!(run_progress(0, 1, Some(&unknown)), "0/1 12,345 keys");
        let step = ActionProgress {
            phase: "writing the handover".into(),
            ..ActionProgress::default()
        };
        assert_eq!(run_progress(0, 1, Some(&step)), "0/1");
        assert_eq!(
            phase_line("action 0 x", Some(&step)),
            "action 0 x: writing the handover"
        );
        assert_eq!(snapshot_of(&p), figure(2_100));
    }

    proptest! {
        /// Whatever the rate of work and however the samples fall: at most one write per
        /// interval (plus the first), never the same figure twice in a row, and a figure that
        /// stops changing is written by the first sample an interval after the last write.
        #[test]
        fn writes_stay_bounded_and_the_last_figure_gets_out(
            steps in proptest::collection::vec((0u64..2_500, 0u64..50), 1..400),
            every_ms in 500u64..5_000,
        ) {
            let start = Instant::now();
            let every = Duration::from_millis(every_ms);
            let mut t = Throttle::new(every);
            let (mut now_ms, mut done) = (0u64, 0u64);
            let mut writes: Vec<(u64, u64)> = Vec::new();
            for (dt, work) in &steps {
                now_ms += dt;
                done += work;
                if t.due(start + Duration::from_millis(now_ms), &figure(done)) {
                    writes.push((now_ms, done));
                }
            }
            let bound = 1 + now_ms / every_ms;
            prop_assert!(writes.len() as u64 <= bound, "{} writes in {now_ms} ms", writes.len());
            for pair in writes.windows(2) {
                prop_assert!(pair[1].0 - pair[0].0 >= every_ms);
                prop_assert!(pair[1].1 != pair[0].1);
            }
            // The work stops: the next sample an interval later writes the last figure,
            // unless it was written already.
            let last_written = writes.last().map(|w| w.1);
            let later = start + Duration::from_millis(now_ms + every_ms);
            prop_assert_eq!(t.due(later, &figure(done)), last_written != Some(done));
            prop_assert!(!t.due(later, &figure(done)));
        }
    }
}
