//! One reconcile of a MigrationRun, as a short list of named steps, each in the module that
//! owns its rules:
//!
//! [`gate`] (may it start now; the claim) → [`assess`] (history
//! readable and complete, declarations valid, no interrupted upgrade) →
//! [`freeze`] (the plan frozen into status on the first pass; on later passes,
//! the Migration must still declare it) → [`preflight`] (before the first
//! change) → [`approval`] (a `Manual` run's plan approved) →
//! [`execute`] (one action at a time, ledger first) →
//! [`finish`].
//!
//! Each step returns [`Step`]: go on with what it produced, or end this reconcile with a
//! requeue (the run waits, or ended). This module holds the run being reconciled and how its
//! status is written.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_crds::unversioned::{
    ActionDecision, ActionStatus, MigrationRunStatus, MigrationStatus,
};
use stagehand_crds::{Migration, MigrationRun};
use tracing::{Instrument, debug, info, info_span, warn};

use super::conditions::{MAX_DETAIL_BYTES, Phase, bounded, run_conditions};
use super::context::{Context, Error, event};
use super::gate::{terminal, unblocked};
use super::history::{History, mirror};
use super::ledger::Ledger;
use super::status::{StatusError, apply_run_status};
use super::{
    approval, assess, execute, finalizer, findings, finish, freeze, gate, preflight, retention,
};

/// What a step returns: `Continue` with what the next step needs, or `Break` with how this
/// reconcile ends (the run waits, or it ended).
pub type Step<T> = Result<ControlFlow<Requeue, T>, Error>;

/// Goes on with a step's result, or returns its requeue from the pipeline.
macro_rules! next {
    ($step:expr) => {
        match $step? {
            ControlFlow::Continue(value) => value,
            ControlFlow::Break(requeue) => return Ok(requeue),
        }
    };
}

/// The reason of an action that ran in dry-run mode (the run's `spec.dryRun` or its own
/// `config.dryRun`): it changed nothing, records no footprint and does not count as applied.
pub const DRY_RUN: &str = "DryRun";

pub(super) fn now() -> String {
    Timestamp::now().to_string()
}

/// `status.progress`: finished actions over all, and the running action's figure when it
/// reports one (`3/7 2,100/5,000 accounts`, [`super::progress::run_progress`]).
pub(super) fn progress(actions: &[ActionStatus]) -> String {
    let done = actions
        .iter()
        .filter(|a| a.decision != ActionDecision::Run)
        .count();
    let running = actions
        .iter()
        .find(|a| {
            a.decision == ActionDecision::Run
                && a.start_time.is_some()
                && a.completion_time.is_none()
        })
        .and_then(|a| a.progress.as_ref());
    super::progress::run_progress(done, actions.len(), running)
}

/// The run as its metrics name it (its Migration and stage; the name keys only what the
/// operator remembers).
pub(crate) fn run_ref(run: &MigrationRun) -> crate::metrics::RunRef {
    crate::metrics::RunRef {
        namespace: run.namespace().unwrap_or_default(),
        migration: run.spec.migration_ref.clone(),
        stage: run.spec.stage.to_string(),
        name: run.name_any(),
    }
}

/// `action <index> <id>`, as every message names an action.
pub(super) fn label(a: &ActionStatus) -> String {
    format!("action {} {}", a.index, a.id)
}

/// How long a waiting run sleeps when nothing wakes it: a change it waits for wakes it at
/// once (a run of its Migration finishing, the Migration changing); this only bounds how late
/// a timeout or a missed wake-up is seen.
pub(super) const WAKE_FALLBACK: Duration = Duration::from_secs(60);

/// When to look at a waiting run again if nothing wakes it: when its wait times out, at the
/// latest after [`WAKE_FALLBACK`].
pub(super) fn until_timeout(run: &MigrationRun, status: &MigrationRunStatus) -> Duration {
    let now = Timestamp::now();
    let waited = run.metadata.creation_timestamp.as_ref().map_or(0, |t| {
        now.duration_since(t.0).as_secs() - super::gate::suspended_seconds(status, now)
    });
    let left = u64::try_from(run.spec.wait_timeout_seconds - waited + 1).unwrap_or(1);
    Duration::from_secs(left.clamp(1, WAKE_FALLBACK.as_secs()))
}

/// One run being reconciled: its APIs and the status being built.
pub(crate) struct Reconcile {
    pub(super) context: Arc<Context>,
    pub(super) run: Arc<MigrationRun>,
    pub(super) runs: Api<MigrationRun>,
    pub(super) migrations: Api<Migration>,
    pub(super) status: MigrationRunStatus,
    /// The Migration's `spec.runHistoryLimit`, once read.
    pub(super) run_history_limit: Option<u32>,
    /// The run's resourceVersion this reconcile started from, until a write under it as a
    /// precondition proved it the newest ([`Reconcile::write_before_change`]).
    pub(super) unconfirmed_version: Option<String>,
    /// The other runs of the Migration as the gate saw them (empty for a run that started).
    pub(super) siblings: Vec<MigrationRun>,
    /// Whether the run carries the run finalizer ([`finalizer`]), as far as this reconcile
    /// knows.
    pub(super) holds_finalizer: bool,
    /// The history this reconcile knows (the Migration's status with the ledger mirrored into
    /// it, once assessed): what a ledger deleted meanwhile is written again from.
    pub(super) history_seed: Option<MigrationStatus>,
}

impl Reconcile {
    /// Writes the run's status in `phase` (conditions derived from it). A replica that lost
    /// its leadership writes nothing ([`Error::Deposed`]).
    pub(super) async fn write(&mut self, phase: &Phase) -> Result<(), Error> {
        self.write_with(phase, false).await
    }

    /// Writes the run's status before a change to the systems: like [`Reconcile::write`], but
    /// sent even when nothing in it changed while this reconcile has not yet proven (by a
    /// write under the resourceVersion it read) that it decides from the run's newest
    /// version.
    pub(super) async fn write_before_change(&mut self, phase: &Phase) -> Result<(), Error> {
        self.write_with(phase, true).await
    }

    async fn write_with(&mut self, phase: &Phase, before_change: bool) -> Result<(), Error> {
        if self.context.steering.is_deposed() {
            return Err(Error::Deposed);
        }
        let run = &self.run;
        let status = &mut self.status;
        status.conditions = run_conditions(phase, run.metadata.generation, &status.conditions);
        status.observed_generation = run.metadata.generation;
        status.progress = Some(progress(&status.actions));
        // What it does now, while it runs (the action and its figure); nothing once it waits
        // or ended.
        status.current_phase = match phase {
            Phase::Running(message) => Some(bounded(message, MAX_DETAIL_BYTES)),
            _ => None,
        };
        // A summary quoting its input (an error naming a 1 MiB value) is cut, so that the
        // status stays writable.
        for a in &mut status.actions {
            if let Some(summary) = a.summary.as_mut().filter(|s| s.len() > MAX_DETAIL_BYTES) {
                *summary = bounded(summary, MAX_DETAIL_BYTES);
            }
        }
        let reference = run_ref(run);
        self.context.metrics.run_phase(
            &reference,
            match phase {
                Phase::Running(_) => Some("running"),
                p if !p.is_terminal() => Some("waiting"),
                _ => None,
            },
        );
        let finishing = phase.is_terminal() && status.completion_time.is_none();
        if finishing {
            status.completion_time = Some(now());
        }
        // A run woken again with nothing new costs no request.
        let confirm = before_change && self.unconfirmed_version.is_some();
        if finishing || confirm || run.status.as_ref() != Some(&*status) {
            // The first write of a reconcile is conditional on the version it started from:
            // a copy older than what this operator already wrote (a finished run, an action
            // already done) is refused before it ends the run twice or applies anything.
            let precondition = self.unconfirmed_version.take();
            apply_run_status(&self.runs, &run.name_any(), status, precondition.as_deref()).await?;
        }
        if finishing {
            // Counted once written (a reconcile of an older copy is refused above), before
            // anything else can fail.
            let result = phase.reason().to_ascii_lowercase();
            self.context.metrics.run_finished(&reference, &result);
            let created = run
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second());
            self.context.metrics.last_run(&reference, created, &result);
            // Ended: the run no longer holds its deletion back (a run deleted while it ran
            // goes now, what completed recorded above).
            if self.holds_finalizer {
                finalizer::release(&self.runs, &run.name_any()).await?;
                self.holds_finalizer = false;
            }
            let namespace = run.namespace().unwrap_or_default();
            self.context
                .runs
                .mark_finished(&namespace, &run.name_any(), status);
            let siblings = self.siblings_as_finished();
            self.prune(&siblings).await;
            let woken = unblocked(&siblings);
            self.context.runs.wake(
                &namespace,
                woken
                    .iter()
                    .map(|r| r.metadata.name.as_deref().unwrap_or_default()),
            );
        }
        Ok(())
    }

    /// The runs of this run's Migration as the store holds them, this one with the status
    /// just written (the store may not have seen it yet).
    fn siblings_as_finished(&self) -> Vec<MigrationRun> {
        let namespace = self.run.namespace().unwrap_or_default();
        let name = self.run.name_any();
        let mut runs: Vec<MigrationRun> = self
            .context
            .runs
            .of_migration(&namespace, &self.run.spec.migration_ref)
            .into_iter()
            .filter(|r| r.name_any() != name)
            .collect();
        let mut this = (*self.run).clone();
        this.status = Some(self.status.clone());
        runs.push(this);
        runs
    }

    /// Deletes the finished runs of this run's Migration and stage beyond its
    /// `runHistoryLimit` ([`retention`]). A failure is logged, never the run's failure.
    async fn prune(&self, runs: &[MigrationRun]) {
        let keep = self
            .run_history_limit
            .unwrap_or(retention::DEFAULT_RUN_HISTORY_LIMIT);
        let name = self.run.name_any();
        for old in retention::expired(
            runs,
            &self.run.spec.migration_ref,
            self.run.spec.stage,
            keep,
            &name,
        ) {
            let params = kube::api::DeleteParams {
                preconditions: old
                    .metadata
                    .uid
                    .clone()
                    .map(|uid| kube::api::Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                ..Default::default()
            };
            match self.runs.delete(&old.name_any(), &params).await {
                Ok(_) => {
                    info!(deleted = %old.name_any(), keep, "deleted an old finished run (runHistoryLimit)")
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    warn!(run = %old.name_any(), error = %e, "cannot delete an old finished run")
                }
            }
        }
    }

    pub(super) async fn event(&self, type_: EventType, reason: &str, note: String) {
        event(&self.context.recorder, &*self.run, type_, reason, note).await;
    }

    /// Ends the run in a stalled `phase`: writes the status, then a Warning Event with the
    /// same message.
    pub(super) async fn end(&mut self, phase: Phase) -> Result<Requeue, Error> {
        self.write(&phase).await?;
        let message = phase.message().to_string();
        warn!(reason = phase.reason(), %message, "run stalled");
        self.event(EventType::Warning, phase.reason(), message)
            .await;
        Ok(Requeue::await_change())
    }

    /// [`Reconcile::end`] as a step's result.
    pub(super) async fn stop<T>(&mut self, phase: Phase) -> Step<T> {
        self.end(phase).await.map(ControlFlow::Break)
    }

    /// Writes `change` into the history ledger, then mirrors the ledger into the Migration's
    /// status. A ledger gone meanwhile is never started from nothing: it is written again from
    /// the history this reconcile knows (the Migration's `status.history` and what the run
    /// recorded since), with a Warning Event `HistoryRecreated`.
    pub(super) async fn record(
        &mut self,
        history: &History,
        change: impl FnMut(&mut Ledger),
    ) -> Result<(), Error> {
        let written = history
            .update_seeded(self.history_seed.as_ref(), change)
            .await?;
        if written.recreated {
            let footprints = self.history_seed.as_ref().map_or(0, |s| s.history.len());
            let message = format!(
                "the history ledger ConfigMap {} was gone while the run was going: it was written again from the Migration's status.history ({footprints} footprint(s)) before recording more; check who deletes it",
                history.name()
            );
            warn!(%message, "history ledger recreated");
            self.event(EventType::Warning, "HistoryRecreated", message)
                .await;
        }
        if let Some(seed) = self.history_seed.as_mut() {
            written.ledger.mirror_into(seed);
        }
        mirror(
            &self.migrations,
            &self.run.spec.migration_ref,
            &written.ledger,
        )
        .await?;
        Ok(())
    }

    /// Reads the run's Migration (`None` when it does not exist).
    pub(super) async fn read_migration(&self) -> Result<Option<Migration>, Error> {
        self.migrations
            .get_opt(&self.run.spec.migration_ref)
            .await
            .map_err(|source| Error::Read {
                context: format!("reading Migration {}", self.run.spec.migration_ref),
                source,
            })
    }
}

/// Reconciles one MigrationRun (within a `run` span: every log line carries the run, its
/// namespace, Migration and stage).
pub async fn reconcile(run: Arc<MigrationRun>, context: Arc<Context>) -> Result<Requeue, Error> {
    let span = info_span!(
        "run",
        run = %run.name_any(),
        namespace = %run.namespace().unwrap_or_default(),
        migration = %run.spec.migration_ref,
        stage = %run.spec.stage,
    );
    match pipeline(run, context).instrument(span.clone()).await {
        // Decided from an old copy: nothing was changed; the newer copy decides again.
        Err(Error::Status(e @ StatusError::Stale(_))) => {
            span.in_scope(
                || debug!(reason = %e, "reconciling again from the run's newest version"),
            );
            Ok(Requeue::requeue(STALE_RETRY))
        }
        result => result,
    }
}

/// How soon a reconcile that started from an old copy of its run runs again (by then the
/// watch has delivered the newer one, which wakes it anyway).
const STALE_RETRY: Duration = Duration::from_millis(200);

/// The steps of a reconcile, in order (docs/architecture.md draws them;
/// `operator/tests/architecture.rs` checks that the two agree).
async fn pipeline(run: Arc<MigrationRun>, context: Arc<Context>) -> Result<Requeue, Error> {
    let namespace = run.namespace().unwrap_or_default();
    let mut r = Reconcile {
        runs: Api::namespaced(context.client.clone(), &namespace),
        migrations: Api::namespaced(context.client.clone(), &namespace),
        status: run.status.clone().unwrap_or_default(),
        run_history_limit: None,
        unconfirmed_version: run.metadata.resource_version.clone(),
        siblings: Vec::new(),
        holds_finalizer: finalizer::held(run.metadata.finalizers.as_deref()),
        history_seed: None,
        context,
        run,
    };
    if terminal(&r.status) {
        return finish::settled(&mut r).await;
    }
    let migration = next!(gate::step(&mut r).await);
    let assessed = next!(assess::step(&mut r, &migration).await);
    let planned = next!(freeze::step(&mut r, &migration, &assessed).await);
    let ctx = next!(preflight::step(&mut r, &migration, &assessed, &planned).await);
    let keeper = findings::Keeper {
        api: Api::namespaced(r.context.client.clone(), &namespace),
        namespace: namespace.clone(),
        run: r.run.name_any(),
        migration: migration.name_any(),
        owner: findings::owner_of(&migration),
    };
    next!(approval::step(&mut r, &planned, &ctx, &keeper).await);
    next!(execute::step(&mut r, &assessed, &planned, &ctx, &keeper).await);
    finish::step(&mut r, &assessed.history, &migration.spec.release_version).await
}
