//! The runner of concurrent requests ([`run_bounded`]) every action that sends them in
//! parallel uses, and what a batch of them did ([`Batch`]).

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use futures::stream::{FuturesUnordered, Stream, StreamExt};

use crate::action::{ActionError, StopSignal};

/// What a batch of concurrent requests did, every request that was started awaited: the
/// counts are what the server did, not what was seen before giving up.
#[derive(Debug)]
pub struct Batch<E> {
    /// Jobs started (`succeeded` plus the failed ones).
    pub started: usize,
    /// Jobs whose request succeeded.
    pub succeeded: usize,
    /// The failed jobs, in the order they failed: the job's index (in the order of the jobs)
    /// and its error. The first one stopped the batch.
    pub failed: Vec<(usize, E)>,
    /// Why the batch stopped starting jobs before they ran out, when the operator asked it to
    /// stop ([`StopSignal`]); the jobs started before were all awaited and counted.
    pub stopped: Option<String>,
}

impl<E> Batch<E> {
    /// The error that stopped the batch, with its job's index; `None` when every job
    /// succeeded.
    pub fn into_first_failure(self) -> Option<(usize, E)> {
        self.failed.into_iter().next()
    }

    /// `2 of 3 mailboxes were removed in OX App Suite, 1 failed`: `what` names the `total`
    /// jobs with their count (`3 mailboxes`), `done` what a job that succeeded did.
    pub fn report(&self, total: usize, what: &str, done: &str) -> String {
        format!(
            "{} of {what} {} {done}, {}",
            self.succeeded,
            if total == 1 { "was" } else { "were" },
            self.failures(total)
        )
    }

    /// What failed and what was not tried, of `total` jobs: `1 failed`, `2 failed and 3 were
    /// not started after the first failure`, `0 failed and 3 were not started: the operator
    /// asked to stop`.
    pub fn failures(&self, total: usize) -> String {
        let mut out = format!("{} failed", self.failed.len());
        let why = if self.failed.is_empty() && self.stopped.is_some() {
            ": the operator asked to stop"
        } else {
            " after the first failure"
        };
        match total.saturating_sub(self.started) {
            0 => {}
            1 => out.push_str(&format!(" and 1 was not started{why}")),
            n => out.push_str(&format!(" and {n} were not started{why}")),
        }
        out
    }

    /// [`ActionError::Stopped`] when the batch stopped because the operator asked it to (and
    /// no job failed): the caller returns it with what the batch did.
    pub fn stop_error(&self) -> Option<ActionError> {
        match &self.stopped {
            Some(reason) if self.failed.is_empty() => Some(ActionError::Stopped(reason.clone())),
            _ => None,
        }
    }
}

/// Runs `run` on every job of `jobs`, at most `in_flight` at once (at least one). After the
/// first error, or once `stop` asks to stop (the batch's safe point: between requests), no new
/// job is started, but every job already started is awaited, success or failure: a server
/// carries out a request whose client hung up, so stopping early without waiting would report
/// fewer changes than were made.
pub async fn run_bounded<S, F, Fut, E>(
    jobs: S,
    in_flight: usize,
    stop: &StopSignal,
    mut run: F,
) -> Batch<E>
where
    S: Stream,
    F: FnMut(S::Item) -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let limit = in_flight.max(1);
    let mut jobs = pin!(jobs);
    let mut stop_requested = pin!(stop.requested());
    let mut running = FuturesUnordered::new();
    let mut exhausted = false;
    let mut batch = Batch {
        started: 0,
        succeeded: 0,
        failed: Vec::new(),
        stopped: None,
    };
    futures::future::poll_fn(|cx| {
        loop {
            // Polled for its wake-up too: a stop asked while every request waits is seen.
            if batch.stopped.is_none() && stop_requested.as_mut().poll(cx).is_ready() {
                batch.stopped = Some(stop.reason().unwrap_or_default());
            }
            while !exhausted
                && batch.failed.is_empty()
                && batch.stopped.is_none()
                && running.len() < limit
            {
                match jobs.as_mut().poll_next(cx) {
                    Poll::Ready(Some(job)) => {
                        let index = batch.started;
                        batch.started += 1;
                        let request = run(job);
                        running.push(async move { (index, request.await) });
                    }
                    Poll::Ready(None) => exhausted = true,
                    Poll::Pending => break,
                }
            }
            match running.poll_next_unpin(cx) {
                Poll::Ready(Some((_, Ok(())))) => batch.succeeded += 1,
                Poll::Ready(Some((index, Err(e)))) => batch.failed.push((index, e)),
                // Nothing in flight: done unless more jobs may come (then `jobs` wakes us).
                Poll::Ready(None)
                    if exhausted || !batch.failed.is_empty() || batch.stopped.is_some() =>
                {
                    return Poll::Ready(());
                }
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    batch
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Job `i` takes `i * 10` ms; the ones in `failing` fail. Answers the batch and the jobs
    /// that finished (in the order they finished).
    async fn batch_of(
        n: usize,
        in_flight: usize,
        failing: &[usize],
    ) -> (Batch<String>, Vec<usize>) {
        let finished = Mutex::new(Vec::new());
        let batch = run_bounded(
            futures::stream::iter(0..n),
            in_flight,
            &StopSignal::never(),
            |i| {
                let finished = &finished;
                async move {
                    tokio::time::sleep(Duration::from_millis(10 * i as u64)).await;
                    finished.lock().unwrap().push(i);
                    if failing.contains(&i) {
                        Err(format!("job {i} failed"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .await;
        (batch, finished.into_inner().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn every_job_runs_when_none_fails() {
        let (batch, finished) = batch_of(7, 3, &[]).await;
        assert_eq!((batch.started, batch.succeeded), (7, 7));
        assert!(batch.failed.is_empty());
        assert_eq!(finished.len(), 7);
        assert_eq!(batch.failures(7), "0 failed");
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_failure_the_jobs_in_flight_are_awaited_and_no_new_one_starts() {
        // 0, 1, 2 start; 0 fails first; 1 and 2 are still awaited; 3.. never start.
        let (batch, finished) = batch_of(6, 3, &[0]).await;
        assert_eq!(finished, vec![0, 1, 2]);
        assert_eq!(batch.started, 3);
        assert_eq!(batch.succeeded, 2);
        assert_eq!(
            batch.failures(6),
            "1 failed and 3 were not started after the first failure"
        );
        let (index, e) = batch.into_first_failure().unwrap();
        assert_eq!((index, e.as_str()), (0, "job 0 failed"));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_among_the_jobs_in_flight_are_all_counted() {
        let (batch, finished) = batch_of(5, 5, &[1, 3]).await;
        assert_eq!(finished, vec![0, 1, 2, 3, 4]);
        assert_eq!((batch.started, batch.succeeded), (5, 3));
        let indexes: Vec<usize> = batch.failed.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, vec![1, 3]);
        assert_eq!(batch.failures(5), "2 failed");
        let (batch, _) = batch_of(3, 1, &[1]).await;
        assert_eq!(
            batch.failures(3),
            "1 failed and 1 was not started after the first failure"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_that_arrive_late_are_started_as_they_come() {
        let jobs = futures::stream::iter(0..4u64).then(|i| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            i
        });
        let batch = run_bounded(jobs, 2, &StopSignal::never(), |i| async move {
            tokio::time::sleep(Duration::from_millis(i)).await;
            Ok::<(), String>(())
        })
        .await;
        assert_eq!((batch.started, batch.succeeded), (4, 4));
        let empty = run_bounded(
            futures::stream::iter(Vec::<u8>::new()),
            0,
            &StopSignal::never(),
            |_| async { Ok::<(), String>(()) },
        )
        .await;
        assert_eq!((empty.started, empty.succeeded), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_starts_no_new_job_and_awaits_and_counts_the_started_ones() {
        let (sender, signal) = StopSignal::channel();
        let finished = Mutex::new(Vec::new());
        // Job i takes 100 ms; 2 at a time; the stop comes at 250 ms, while jobs 4 and 5 run.
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(250)).await;
            sender.stop("the operator lost its leadership");
        };
        let (batch, ()) = futures::join!(
            run_bounded(futures::stream::iter(0..10usize), 2, &signal, |i| {
                let finished = &finished;
                async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    finished.lock().unwrap().push(i);
                    Ok::<(), String>(())
                }
            }),
            stopper
        );
        assert_eq!(finished.into_inner().unwrap(), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!((batch.started, batch.succeeded), (6, 6));
        assert_eq!(
            batch.stopped.as_deref(),
            Some("the operator lost its leadership")
        );
        assert_eq!(
            batch.failures(10),
            "0 failed and 4 were not started: the operator asked to stop"
        );
        assert!(batch.stop_error().is_some_and(|e| e.is_stop()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_is_seen_while_waiting_for_more_jobs() {
        let (sender, signal) = StopSignal::channel();
        // The jobs never come: only the stop ends the batch.
        let jobs = futures::stream::pending::<u8>();
        let stopper = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.stop("shutting down");
        };
        let (batch, ()) = futures::join!(
            run_bounded(jobs, 2, &signal, |_| async { Ok::<(), String>(()) }),
            stopper
        );
        assert_eq!(batch.started, 0);
        assert_eq!(batch.stopped.as_deref(), Some("shutting down"));
        let none = run_bounded(futures::stream::iter(0..3u8), 1, &signal, |_| async {
            Ok::<(), String>(())
        })
        .await;
        assert_eq!(none.started, 0, "an already stopped signal starts nothing");
    }
}
