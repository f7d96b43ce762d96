//! One reconcile of a MigrationRun, as a short pipeline of named steps:
//!
//! `gate` (may it start now) → `assess` (history readable, declarations valid) → `plan`
//! (frozen into status on the first pass; on later passes, the Migration must still declare
//! it) → `preflight` (before the first change) → `execute` (one action at a time, ledger
//! first) → `finish`.
//!
//! Each step that decides is a pure function in its own module ([`super::gate`],
//! [`super::assess`], [`super::freeze`], [`super::ledger`], [`super::preflight`]); this
//! module only reads and writes the cluster around them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_actions::action::{ActionContext, ActionError, RunIdentity, Secrets};
use stagehand_actions::instantiate;
use stagehand_config::{Declarations, Footprint, Plan, Reason, Stage, plan_stage};
use stagehand_crds::unversioned::{ActionDecision, ActionStatus, HistoryEntry, MigrationRunStatus};
use stagehand_crds::{Migration, MigrationRun};
use tracing::{Instrument, debug, info, info_span, warn};

use super::approval;
use super::assess::{Assessment, assess};
use super::conditions::{MAX_DETAIL_BYTES, Phase, bounded, bounded_problems, run_conditions};
use super::context::{Context, Error, event};
use super::freeze::{declarations_changed, freeze};
use super::gate::{Gate, gate, pre_run_of, terminal, track_suspension, unblocked};
use super::history::{History, HistoryError, mirror};
use super::preflight::{Prepared, declared_problems, load_secrets, needed_files, prove};
use super::retention;
use super::status::{StatusError, apply_run_status};

/// The reason of an action that ran in dry-run mode (the run's `spec.dryRun` or its own
/// `config.dryRun`): it changed nothing, records no footprint and does not count as applied.
pub const DRY_RUN: &str = "DryRun";

fn now() -> String {
    Timestamp::now().to_string()
}

fn progress(actions: &[ActionStatus]) -> String {
    let done = actions
        .iter()
        .filter(|a| a.decision != ActionDecision::Run)
        .count();
    format!("{done}/{}", actions.len())
}

/// `action <index> <id>`, as every message names an action.
fn label(a: &ActionStatus) -> String {
    format!("action {} {}", a.index, a.id)
}

/// How long a waiting run sleeps when nothing wakes it: a change it waits for wakes it at
/// once (a run of its Migration finishing, the Migration changing); this only bounds how late
/// a timeout or a missed wake-up is seen.
const WAKE_FALLBACK: Duration = Duration::from_secs(60);

/// When to look at a waiting run again if nothing wakes it: when its wait times out, at the
/// latest after [`WAKE_FALLBACK`].
fn until_timeout(run: &MigrationRun, status: &MigrationRunStatus) -> Duration {
    let now = Timestamp::now();
    let waited = run.metadata.creation_timestamp.as_ref().map_or(0, |t| {
        now.duration_since(t.0).as_secs() - super::gate::suspended_seconds(status, now)
    });
    let left = u64::try_from(run.spec.wait_timeout_seconds - waited + 1).unwrap_or(1);
    Duration::from_secs(left.clamp(1, WAKE_FALLBACK.as_secs()))
}

/// One run being reconciled: its APIs and the status being built.
struct Reconcile {
    context: Arc<Context>,
    run: Arc<MigrationRun>,
    runs: Api<MigrationRun>,
    migrations: Api<Migration>,
    status: MigrationRunStatus,
    /// The Migration's `spec.runHistoryLimit`, once read.
    run_history_limit: Option<u32>,
    /// The run's resourceVersion this reconcile started from, until a write under it as a
    /// precondition proved it the newest ([`Reconcile::write_before_change`]).
    unconfirmed_version: Option<String>,
}

impl Reconcile {
    /// Writes the run's status in `phase` (conditions derived from it). A replica that lost
    /// its leadership writes nothing ([`Error::Deposed`]).
    async fn write(&mut self, phase: &Phase) -> Result<(), Error> {
        self.write_with(phase, false).await
    }

    /// Writes the run's status before a change to the systems: like [`Reconcile::write`], but
    /// sent even when nothing in it changed while this reconcile has not yet proven (by a
    /// write under the resourceVersion it read) that it decides from the run's newest
    /// version.
    async fn write_before_change(&mut self, phase: &Phase) -> Result<(), Error> {
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
        // A summary quoting its input (an error naming a 1 MiB value) is cut, so that the
        // status stays writable.
        for a in &mut status.actions {
            if let Some(summary) = a.summary.as_mut().filter(|s| s.len() > MAX_DETAIL_BYTES) {
                *summary = bounded(summary, MAX_DETAIL_BYTES);
            }
        }
        let key = format!("{}/{}", run.namespace().unwrap_or_default(), run.name_any());
        self.context.metrics.run_waiting(
            &key,
            matches!(
                phase,
                Phase::Waiting(_) | Phase::Suspended(_) | Phase::AwaitingApproval(_)
            ),
        );
        self.context.metrics.run_phase(
            &key,
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
            // Counted once written: a reconcile of an older copy is refused above.
            self.context
                .metrics
                .run_finished(&phase.reason().to_ascii_lowercase());
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

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        event(&self.context.recorder, &*self.run, type_, reason, note).await;
    }

    /// Ends the run in a stalled `phase`: writes the status, then a Warning Event with the
    /// same message.
    async fn end(&mut self, phase: Phase) -> Result<Requeue, Error> {
        self.write(&phase).await?;
        let message = phase.message().to_string();
        warn!(reason = phase.reason(), %message, "run stalled");
        self.event(EventType::Warning, phase.reason(), message)
            .await;
        Ok(Requeue::await_change())
    }
}

/// Reconciles one MigrationRun (within a `run` span: every log line carries the run).
pub async fn reconcile(run: Arc<MigrationRun>, context: Arc<Context>) -> Result<Requeue, Error> {
    let span = info_span!(
        "run",
        run = %run.name_any(),
        namespace = %run.namespace().unwrap_or_default(),
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

async fn pipeline(run: Arc<MigrationRun>, context: Arc<Context>) -> Result<Requeue, Error> {
    let namespace = run.namespace().unwrap_or_default();
    let mut r = Reconcile {
        runs: Api::namespaced(context.client.clone(), &namespace),
        migrations: Api::namespaced(context.client.clone(), &namespace),
        status: run.status.clone().unwrap_or_default(),
        run_history_limit: None,
        unconfirmed_version: run.metadata.resource_version.clone(),
        context,
        run,
    };
    if terminal(&r.status) {
        return Ok(Requeue::await_change());
    }

    // 1. gate
    let migration = read_migration(&r).await?;
    r.run_history_limit = migration.as_ref().and_then(|m| m.spec.run_history_limit);
    // A run that started is past the gate: its siblings are not needed. They come from the
    // run controller's store (no request): a change that unblocks a waiting run wakes it.
    let siblings = if r.status.start_time.is_none() {
        r.context
            .runs
            .of_migration(&namespace, &r.run.spec.migration_ref)
    } else {
        Vec::new()
    };
    let decision = gate(&r.run, migration.as_ref(), &siblings, Timestamp::now());
    track_suspension(&mut r.status, &decision, Timestamp::now());
    let migration = match (decision, migration) {
        (Gate::Go, Some(m)) => m,
        (Gate::TimedOut(message), _) => return r.end(Phase::Failed(message)).await,
        (Gate::Terminating(message), _) => return r.end(Phase::Terminating(message)).await,
        (Gate::MigrationDeleted(message), _) => {
            return r.end(Phase::DeclarationsChanged(message)).await;
        }
        (Gate::Suspended(message), _) => {
            r.write(&Phase::Suspended(message)).await?;
            return Ok(Requeue::requeue(WAKE_FALLBACK));
        }
        (Gate::Wait(message), _) => {
            r.write(&Phase::Waiting(message)).await?;
            return Ok(Requeue::requeue(until_timeout(&r.run, &r.status)));
        }
        // The gate goes only with a Migration.
        (Gate::Go, None) => return Ok(Requeue::requeue(WAKE_FALLBACK)),
    };
    // The gate's view may not show a run that another reconcile let start a moment ago: the
    // start is claimed under one lock, so one run of a Migration starts at a time.
    if r.status.start_time.is_none()
        && let Err(holder) =
            r.context
                .runs
                .claim(&namespace, &r.run.spec.migration_ref, &r.run.name_any())
    {
        r.write(&Phase::Waiting(format!(
            "MigrationRun {holder} of the same Migration is running"
        )))
        .await?;
        return Ok(Requeue::requeue(until_timeout(&r.run, &r.status)));
    }

    // 2. assess: the history first (the record of truth), then the declarations.
    let history = History::of(&r.context.client, &migration);
    let ledger = match history.ensure(migration.status.as_ref()).await {
        Ok(l) => l,
        Err(e) if e.is_unreadable() => return r.end(Phase::HistoryUnreadable(e.to_string())).await,
        Err(e) => return Err(e.into()),
    };
    let assessment = match assess(&migration, &ledger) {
        Ok(a) => a,
        Err(invalid) => {
            r.status.problems = bounded_problems(&invalid.problems);
            return r.end(Phase::Invalid(invalid.message())).await;
        }
    };

    // 3. plan: frozen into status before anything executes; later passes check it.
    let stage = r.run.spec.stage;
    let plan = plan_stage(&assessment.declarations, stage, &assessment.context);
    let fingerprint = assessment.declarations.fingerprint(stage);
    if r.status.start_time.is_none() {
        let (actions, frozen) = freeze(&plan, &fingerprint, migration.metadata.generation);
        r.status.start_time = Some(now());
        r.status.last_migrated_release = assessment
            .context
            .last_migrated
            .as_ref()
            .map(ToString::to_string);
        r.status.actions = actions;
        r.status.frozen_plan = Some(frozen);
        r.write(&Phase::Running("planned".into())).await?;
        report_skips(&r).await;
        info!(actions = r.status.actions.len(), "planned");
    } else if r.status.frozen_plan.is_none() {
        // Planned by a Stagehand that did not freeze plans: freeze what is declared now.
        let (actions, frozen) = freeze(&plan, &fingerprint, migration.metadata.generation);
        for (entry, planned) in r.status.actions.iter_mut().zip(actions) {
            if entry.index == planned.index {
                entry.digest = planned.digest;
            }
        }
        r.status.frozen_plan = Some(frozen);
    } else if let Some(message) =
        declarations_changed(&r.status, &fingerprint, migration.metadata.generation)
    {
        return r.end(Phase::DeclarationsChanged(message)).await;
    }
    let prepared = match prepare(&r.status, &plan) {
        Ok(p) => p,
        Err(message) => return r.end(Phase::Failed(message)).await,
    };

    // 4. preflight, before the first change; on resume, the credentials again.
    let files = migration.spec.secret_files.as_slice();
    let store = migration.spec.object_store.as_ref();
    let actions: Vec<&Prepared> = prepared.iter().map(|(_, p)| p).collect();
    let needed = needed_files(&actions, store.map(|s| s.secret_key_file.as_str()));
    let first_pass = r.status.actions.iter().all(|a| a.start_time.is_none());
    let mut ctx = ActionContext {
        client: r.context.client.clone(),
        namespace: r.run.namespace().unwrap_or_default(),
        secrets: Secrets::default(),
        object_store: store.cloned(),
        run: RunIdentity {
            release: migration.spec.release_version.clone(),
            name: r.run.metadata.name.clone(),
            uid: r.run.metadata.uid.clone(),
            apply_follows: false,
        },
        stop: r.context.steering.stop.clone(),
    };
    if !prepared.is_empty() {
        let mut problems = if first_pass {
            declared_problems(&actions, files, store.is_some(), &needed)
        } else {
            Vec::new()
        };
        let (secrets, missing) =
            load_secrets(&r.context.client, &ctx.namespace, files, &needed).await;
        ctx.secrets = secrets;
        problems.extend(missing);
        if first_pass {
            problems.extend(prove(&actions, &ctx).await);
        }
        if !problems.is_empty() {
            let message = super::preflight::message(&problems);
            return if first_pass {
                r.end(Phase::PreflightFailed(message)).await
            } else {
                r.end(Phase::Failed(message)).await
            };
        }
        if first_pass {
            info!(actions = prepared.len(), "preflight passed");
        }
    }

    // 4b. approval: a Manual run changes nothing until its frozen plan is approved.
    if first_pass {
        let digest = r
            .status
            .frozen_plan
            .as_ref()
            .map(|f| f.digest.clone())
            .unwrap_or_default();
        if let approval::Verdict::Awaiting(message) = approval::check(&r.run, &digest) {
            if r.status.conditions.iter().all(|c| c.message != message) {
                info!(%digest, "waiting for the plan's approval");
                r.event(EventType::Normal, "AwaitingApproval", message.clone())
                    .await;
            }
            r.write(&Phase::AwaitingApproval(message)).await?;
            return Ok(Requeue::await_change());
        }
    }

    // 5. execute, strictly in order; Succeeded actions are never repeated.
    for (n, (i, p)) in prepared.iter().enumerate() {
        if r.context.steering.is_deposed() {
            info!(next = %p.label, "no longer the leader: not starting the next action");
            return Err(Error::Deposed);
        }
        if *r.context.steering.stopping.borrow() {
            let message = format!(
                "the operator is stopping: {} and the rest start when it runs again",
                p.label
            );
            info!(%message, "not starting the next action");
            r.write(&Phase::Running(message)).await?;
            return Ok(Requeue::await_change());
        }
        // The first action goes on the run and the Migration this reconcile read and checked
        // above.
        if n > 0 {
            match stop_before(&r).await? {
                Some(Stop::Vanished) => {
                    info!(next = %p.label, "the run was deleted: no further action starts");
                    return Ok(Requeue::await_change());
                }
                Some(Stop::End(phase)) => return r.end(phase).await,
                None => {}
            }
        }
        let span =
            info_span!("action", index = r.status.actions[*i].index, id = %r.status.actions[*i].id);
        if let Some(requeue) = execute(&mut r, &history, &assessment, *i, p, &ctx)
            .instrument(span)
            .await?
        {
            return Ok(requeue);
        }
    }

    // 6. finish
    finish(&mut r, &history, &migration.spec.release_version).await
}

async fn read_migration(r: &Reconcile) -> Result<Option<Migration>, Error> {
    r.migrations
        .get_opt(&r.run.spec.migration_ref)
        .await
        .map_err(|source| Error::Read {
            context: format!("reading Migration {}", r.run.spec.migration_ref),
            source,
        })
}

/// Events and logs of the actions the plan skips.
async fn report_skips(r: &Reconcile) {
    for a in r
        .status
        .actions
        .iter()
        .filter(|a| a.decision == ActionDecision::Skipped)
    {
        info!(index = a.index, id = %a.id, reason = %a.reason, "action skipped");
        r.event(
            EventType::Normal,
            "Skipped",
            format!("{}: skipped ({})", label(a), a.reason),
        )
        .await;
        r.context.metrics.action_finished(&a.id, "skipped", 0.0);
    }
}

/// The actions still to run (decision `Run`), each built from the declaration the plan
/// selected, with its position in `status.actions`.
fn prepare(status: &MigrationRunStatus, plan: &Plan) -> Result<Vec<(usize, Prepared)>, String> {
    let mut out = Vec::new();
    for (i, a) in status.actions.iter().enumerate() {
        if a.decision != ActionDecision::Run {
            continue;
        }
        let planned = plan
            .actions
            .iter()
            .find(|p| p.index == a.index as usize && p.id == a.id)
            .ok_or_else(|| format!("{} is no longer declared", label(a)))?;
        let action = instantiate(&a.id, &planned.config)
            .map_err(|e| format!("{} cannot be built: {e}", label(a)))?;
        out.push((
            i,
            Prepared {
                label: label(a),
                action,
            },
        ));
    }
    Ok(out)
}

/// Why no further action of a run starts.
enum Stop {
    /// The run is gone (deleted without a finalizer): there is no status left to write.
    Vanished,
    /// The run ends in this phase.
    End(Phase),
}

/// Reads the run and its Migration again before the next action: the run being deleted
/// (`Terminating`), its Migration gone or its declarations for the stage no longer the
/// planned ones (`DeclarationsChanged`) stop it.
async fn stop_before(r: &Reconcile) -> Result<Option<Stop>, Error> {
    let run = r
        .runs
        .get_opt(&r.run.name_any())
        .await
        .map_err(|source| Error::Read {
            context: format!("reading MigrationRun {}", r.run.name_any()),
            source,
        })?;
    let Some(mut run) = run else {
        return Ok(Some(Stop::Vanished));
    };
    run.status = Some(r.status.clone());
    if let Some(message) = super::gate::terminating(&run) {
        return Ok(Some(Stop::End(Phase::Terminating(message))));
    }
    let Some(migration) = read_migration(r).await? else {
        return Ok(Some(Stop::End(Phase::DeclarationsChanged(
            super::gate::migration_deleted(&r.run),
        ))));
    };
    let spec = serde_json::to_value(&migration.spec).unwrap_or_default();
    let Ok(declarations) = Declarations::from_spec(&spec) else {
        return Ok(Some(Stop::End(Phase::DeclarationsChanged(
            "the Migration's spec can no longer be read; nothing more is applied".into(),
        ))));
    };
    Ok(declarations_changed(
        &r.status,
        &declarations.fingerprint(r.run.spec.stage),
        migration.metadata.generation,
    )
    .map(|message| Stop::End(Phase::DeclarationsChanged(message))))
}

/// The footprint an action of the run records, if it is tagged.
fn footprint(stage: Stage, a: &ActionStatus) -> Option<Footprint> {
    a.tag.as_ref().map(|tag| Footprint {
        stage,
        id: a.id.clone(),
        tag: Some(tag.clone()),
        run_mode: a.run_mode.clone(),
    })
}

/// Runs one planned action: ledger first (a footprint recorded before a crash is not applied
/// again), then the action, then its footprint in the ledger, then the status. `Some` ends
/// the reconcile.
async fn execute(
    r: &mut Reconcile,
    history: &History,
    assessment: &Assessment,
    i: usize,
    p: &Prepared,
    ctx: &ActionContext,
) -> Result<Option<Requeue>, Error> {
    let stage = r.run.spec.stage;
    let dry = r.run.spec.dry_run || p.action.dry_run();
    let print = footprint(stage, &r.status.actions[i]);
    if r.status.actions[i].start_time.is_some()
        && !dry
        && let Some(print) = &print
    {
        // Re-entering an action: the ledger (read by this reconcile's assess step) may hold
        // its footprint (the operator stopped after writing it and before writing the run's
        // status).
        if assessment.recorded(print) {
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Succeeded;
            a.reason = Reason::FootprintRecorded.as_str().into();
            a.completion_time.get_or_insert_with(now);
            a.summary = Some(
                "its footprint is in the history ledger: it succeeded before the operator stopped, and is not applied again".into(),
            );
            info!("footprint already recorded: not applied again");
            r.write(&Phase::Running(format!("{} already done", p.label)))
                .await?;
            return Ok(None);
        }
    }
    if r.status.actions[i].start_time.is_none() {
        r.status.actions[i].start_time = Some(now());
    }
    r.write_before_change(&Phase::Running(p.label.clone()))
        .await?;
    r.event(EventType::Normal, "Started", p.label.clone()).await;
    info!(dry_run = dry, "action started");
    let started = std::time::Instant::now();
    let result = {
        // Counted while it runs: a replica that lost its leadership waits for it to stop.
        let _in_flight = r.context.steering.action_started();
        run_action(p, ctx, dry).await
    };
    let id = r.status.actions[i].id.clone();
    if let Err(e) = &result
        && e.is_stop()
    {
        // Not a failure: the run stays resumable, and the next run of the action (by this
        // operator after a restart, or by the next leader) works out what is left.
        let message = format!("{}: {e}; it resumes when the operator runs again", p.label);
        warn!(error = %e, "action stopped at a safe point");
        r.write(&Phase::Running(message)).await?;
        return Ok(Some(Requeue::await_change()));
    }
    r.context.metrics.action_finished(
        &id,
        if result.is_ok() {
            "succeeded"
        } else {
            "failed"
        },
        started.elapsed().as_secs_f64(),
    );
    r.status.actions[i].completion_time = Some(now());
    match result {
        Ok(summary) => {
            info!(%summary, "action applied; writing its result");
            // The action's result is written whatever it takes (the API server may be away
            // for a while): lost, it would make the next pass apply the action again.
            if !dry && let Some(print) = &print {
                let a = &r.status.actions[i];
                let entry = HistoryEntry {
                    stage: Some(print.stage),
                    id: print.id.clone(),
                    tag: print.tag.clone(),
                    run_mode: print.run_mode.clone(),
                    release: Some(ctx.run.release.clone()),
                    run_name: ctx.run.name.clone(),
                    completed_at: a.completion_time.clone(),
                };
                let mut wait = FIRST_RETRY;
                loop {
                    if r.context.steering.is_deposed() {
                        return Err(Error::Deposed);
                    }
                    let written = async {
                        let ledger = history
                            .update(|l| {
                                l.record(entry.clone());
                            })
                            .await?;
                        mirror(&r.migrations, &r.run.spec.migration_ref, &ledger).await
                    }
                    .await;
                    match written {
                        Ok(()) => break,
                        Err(e) => retry_write(&r.context, e.into(), &mut wait).await?,
                    }
                }
            }
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Succeeded;
            if dry {
                a.reason = DRY_RUN.into();
            }
            a.summary = Some(summary.clone());
            let mut wait = FIRST_RETRY;
            while let Err(e) = r
                .write(&Phase::Running(format!("{} succeeded", p.label)))
                .await
            {
                retry_write(&r.context, e, &mut wait).await?;
            }
            r.event(
                EventType::Normal,
                "Succeeded",
                format!("{}: {summary}", p.label),
            )
            .await;
            info!(%summary, "action succeeded");
            Ok(None)
        }
        Err(e) => {
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Failed;
            a.reason = "Failed".into();
            a.summary = Some(e.to_string());
            warn!(error = %e, "action failed");
            let message = format!("{} failed: {e}", p.label);
            r.end(Phase::Failed(message)).await.map(Some)
        }
    }
}

/// The first pause before writing an action's result again.
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest pause between two tries.
const LAST_RETRY: Duration = Duration::from_secs(5);

/// Whether a write failed for a reason that passes — the API server or etcd away or
/// overloaded, others writing at the same time — and is worth trying again. A refusal (the
/// object gone, forbidden, invalid) is not: the reconcile ends with it as before.
fn transient(e: &Error) -> bool {
    let source = match e {
        Error::Status(StatusError::Contended(_))
        | Error::History(HistoryError::Contended { .. }) => {
            return true;
        }
        Error::Status(StatusError::Write { source, .. }) => source,
        Error::History(HistoryError::Api { source, .. }) => source.as_ref(),
        _ => return false,
    };
    match source {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429 || status.code == 409,
        _ => true,
    }
}

/// After a failed write of an action's result: pauses before the next try (doubling the
/// pause up to [`LAST_RETRY`]), or gives up when this replica lost its leadership or the
/// failure does not pass ([`transient`]).
async fn retry_write(context: &Context, e: Error, wait: &mut Duration) -> Result<(), Error> {
    if context.steering.is_deposed() {
        return Err(Error::Deposed);
    }
    if !transient(&e) {
        return Err(e);
    }
    warn!(error = %e, retry_in = ?*wait, "cannot write the action's result yet; trying again");
    tokio::time::sleep(*wait).await;
    *wait = (*wait * 2).min(LAST_RETRY);
    Ok(())
}

/// Plans (and unless dry, applies) one action; returns its summary.
async fn run_action(p: &Prepared, ctx: &ActionContext, dry: bool) -> Result<String, ActionError> {
    let mut ctx = ctx.clone();
    ctx.run.apply_follows = !dry;
    let ctx = &ctx;
    let planned = p.action.plan(ctx).await?;
    if dry {
        return Ok(format!("dry run: {}", planned.summary));
    }
    Ok(p.action.apply(ctx).await?.summary)
}

/// Whether any action of `status` ran as a dry run.
fn had_dry_run(status: &MigrationRunStatus) -> bool {
    status.actions.iter().any(|a| a.reason == DRY_RUN)
}

/// The last step: a post run records the release in the ledger (unless it, or the pre run it
/// followed, ran an action as a dry run: that work is still to do), then the run succeeds.
async fn finish(r: &mut Reconcile, history: &History, release: &str) -> Result<Requeue, Error> {
    let mut note = String::new();
    if r.run.spec.stage == Stage::Post && !r.run.spec.dry_run {
        let namespace = r.run.namespace().unwrap_or_default();
        let siblings = r
            .context
            .runs
            .of_migration(&namespace, &r.run.spec.migration_ref);
        // The store keeps a finished run without its actions: read the pre run's.
        let pre_dry = match pre_run_of(&r.run, &siblings) {
            Some(pre) => r
                .runs
                .get(&pre.name_any())
                .await
                .map_err(|source| Error::Read {
                    context: format!("reading the pre run {}", pre.name_any()),
                    source,
                })?
                .status
                .as_ref()
                .is_some_and(had_dry_run),
            None => false,
        };
        if pre_dry || had_dry_run(&r.status) {
            note = "; the release is not recorded as migrated: an action of this release ran as a dry run (config.dryRun), so its work is still to do".to_string();
        } else {
            let ledger = history
                .update(|l| l.last_migrated_release = Some(release.to_string()))
                .await?;
            mirror(&r.migrations, &r.run.spec.migration_ref, &ledger).await?;
        }
    }
    let count = |d: ActionDecision| r.status.actions.iter().filter(|a| a.decision == d).count();
    let dry = r
        .status
        .actions
        .iter()
        .filter(|a| a.reason == DRY_RUN)
        .count();
    let done = format!(
        "{} action(s) declared, {} run{}{note}",
        r.status.actions.len(),
        count(ActionDecision::Succeeded),
        if dry > 0 {
            format!(" ({dry} as dry runs, nothing changed)")
        } else {
            String::new()
        }
    );
    r.write(&Phase::Succeeded(done.clone())).await?;
    r.event(EventType::Normal, "Completed", done).await;
    info!("run succeeded");
    Ok(Requeue::await_change())
}
