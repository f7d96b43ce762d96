//! Step 6, `execute`: the planned actions, strictly in order, one at a time — ledger first
//! (a footprint recorded before a crash is not applied again), then the action, then its
//! footprint, then the status. Before each action after the first, the run and its
//! Migration are read again; while an action runs, the run's deletion stops it at its next
//! safe point (the run's finalizer keeps the object until then, [`super::finalizer`]).

use std::ops::ControlFlow;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_actions::action::{ActionContext, ActionError, Outcome, Progress, Warnings};
use stagehand_config::{Declarations, Footprint, Reason, Stage};
use stagehand_crds::unversioned::{ActionDecision, ActionStatus, HistoryEntry};
use tracing::{Instrument, info, info_span, warn};

use super::assess::{Assessed, Assessment};
use super::conditions::Phase;
use super::context::{Context, Error};
use super::findings::{self, Keeper};
use super::freeze::{Planned, declarations_changed};
use super::history::{History, HistoryError};
use super::preflight::Prepared;
use super::progress;
use super::reconcile::{DRY_RUN, Reconcile, Step, label, now, run_ref};
use super::status::StatusError;
use crate::metrics::ActionRunning;

/// The reason of an action stopped at a safe point because its run was deleted.
pub const STOPPED: &str = "Stopped";

/// The reason of the Warning Event of an insecure setting an action used (a TLS certificate
/// not verified: `insecureSkipTlsVerify`), one per warning; the action's summary carries the
/// same text on a `Warning:` line.
pub const INSECURE_SETTING: &str = "InsecureSetting";

/// The execute step: every action still to run, in order; goes on to the finish once all
/// succeeded.
pub(super) async fn step(
    r: &mut Reconcile,
    assessed: &Assessed,
    planned: &Planned,
    ctx: &ActionContext,
    keeper: &Keeper,
) -> Step<()> {
    for (n, (i, p)) in planned.prepared.iter().enumerate() {
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
            return Ok(ControlFlow::Break(Requeue::await_change()));
        }
        // The first action goes on the run and the Migration this reconcile read and checked
        // above.
        if n > 0 {
            match stop_before(r).await? {
                Some(Stop::Vanished) => {
                    info!(next = %p.label, "the run was deleted: no further action starts");
                    return Ok(ControlFlow::Break(Requeue::await_change()));
                }
                Some(Stop::End(phase)) => return r.stop(phase).await,
                None => {}
            }
        }
        let span =
            info_span!("action", index = r.status.actions[*i].index, id = %r.status.actions[*i].id);
        if let Some(requeue) = one(
            r,
            &assessed.history,
            &assessed.assessment,
            *i,
            p,
            ctx,
            keeper,
        )
        .instrument(span)
        .await?
        {
            return Ok(ControlFlow::Break(requeue));
        }
    }
    Ok(ControlFlow::Continue(()))
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
    let Some(migration) = r.read_migration().await? else {
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
async fn one(
    r: &mut Reconcile,
    history: &History,
    assessment: &Assessment,
    i: usize,
    p: &Prepared,
    ctx: &ActionContext,
    keeper: &Keeper,
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
    // The findings a person approved with the plan (a `Manual` run): the action compares
    // what it finds with them before its first change.
    let approved = match approved_findings(r, i, p, keeper).await {
        Ok(approved) => approved,
        Err(message) => return r.end(Phase::Failed(message)).await.map(Some),
    };
    if r.status.actions[i].start_time.is_none() {
        r.status.actions[i].start_time = Some(now());
    }
    r.write_before_change(&Phase::Running(p.label.clone()))
        .await?;
    r.event(EventType::Normal, "Started", p.label.clone()).await;
    info!(dry_run = dry, "action started");
    let started = std::time::Instant::now();
    // Registered while it runs: the run deleted meanwhile stops it at its next safe point.
    let namespace = r.run.namespace().unwrap_or_default();
    let (executing, deleted) = r.context.runs.executing(&namespace, &r.run.name_any());
    // The action's own warnings (each logged as it is recorded).
    let warnings = Warnings::default();
    // How far it is inside its work: written to the status every few seconds while it runs.
    let reporter = Progress::default();
    let result = {
        // Counted while it runs: a replica that lost its leadership waits for it to stop.
        let _in_flight = r.context.steering.action_started();
        // Shown while it runs (`stagehand_actions_running`).
        let running = r
            .context
            .metrics
            .action_running(&run_ref(&r.run), &r.status.actions[i].id);
        let mut ctx = ctx.clone();
        ctx.stop = ctx.stop.or(deleted.clone());
        ctx.approved_findings = approved;
        ctx.warnings = warnings.clone();
        ctx.progress = reporter.clone();
        report_while(
            r,
            i,
            &p.label,
            (&reporter, &running),
            run_action(p, &ctx, dry),
            |result| {
                // Logged the moment the action returns, before a progress write still under way
                // has finished: with the API server away that write can outlast this replica,
                // and the log is then the only record of what the action did
                // (docs/reliability.md#the-api-server-and-etcd-lost).
                if let Ok(outcome) = result {
                    info!(summary = %outcome.summary, "action applied; writing its result");
                }
            },
        )
        .await
    };
    drop(executing);
    // The last figure goes out with the action's result, whatever the throttle.
    if let Some(last) = reporter.snapshot() {
        r.status.actions[i].progress = Some(progress::status_of(&last));
    }
    for warning in warnings.list() {
        r.event(
            EventType::Warning,
            INSECURE_SETTING,
            format!("{}: {warning}", p.label),
        )
        .await;
    }
    let id = r.status.actions[i].id.clone();
    if let Err(e) = &result
        && e.is_stop()
        && let Some(why) = deleted.reason()
        && r.context.steering.stop.reason().is_none()
    {
        // The run was deleted while its action ran: the action stopped at a safe point; the
        // run ends, recording what completed, and then lets the object go (its finalizer).
        let a = &mut r.status.actions[i];
        a.decision = ActionDecision::Failed;
        a.reason = STOPPED.into();
        a.completion_time = Some(now());
        a.summary = Some(warnings.summary_with(&e.to_string()));
        warn!(error = %e, "the run was deleted: its action stopped at a safe point");
        r.context.metrics.action_finished(
            &run_ref(&r.run),
            &id,
            "stopped",
            started.elapsed().as_secs_f64(),
        );
        let done: Vec<String> = r
            .status
            .actions
            .iter()
            .filter(|a| a.decision == ActionDecision::Succeeded)
            .map(label)
            .collect();
        let message = format!(
            "{why} while {} ran: it stopped at a safe point ({e}); {}; nothing more starts, and the next run of the Migration starts after this one is gone",
            p.label,
            if done.is_empty() {
                "no action of this run had completed".to_string()
            } else {
                format!("completed before: {}", done.join(", "))
            }
        );
        r.event(EventType::Warning, STOPPED, message.clone()).await;
        return r.end(Phase::Terminating(message)).await.map(Some);
    }
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
        &run_ref(&r.run),
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
        Ok(outcome) => {
            let summary = outcome.summary;
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
                    match r
                        .record(history, |l| {
                            l.record(entry.clone());
                        })
                        .await
                    {
                        Ok(()) => break,
                        Err(e) => retry_write(&r.context, e, &mut wait).await?,
                    }
                }
            }
            if let Some(found) = &outcome.findings {
                keep_findings(r, keeper, i, p, found).await;
            }
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Succeeded;
            if dry {
                a.reason = DRY_RUN.into();
            }
            a.summary = Some(warnings.summary_with(&summary));
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
        Err(ActionError::FindingsChanged(difference)) => {
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Failed;
            a.reason = FINDINGS_CHANGED.into();
            a.summary = Some(warnings.summary_with(&difference));
            warn!(%difference, "the findings at execution are not the approved ones");
            let message = format!(
                "{} found other objects than the approved ones, and changed nothing: {difference}",
                p.label
            );
            r.end(Phase::FindingsChanged(message)).await.map(Some)
        }
        Err(e) => {
            let a = &mut r.status.actions[i];
            a.decision = ActionDecision::Failed;
            a.reason = "Failed".into();
            a.summary = Some(warnings.summary_with(&e.to_string()));
            warn!(error = %e, "action failed");
            let message = format!("{} failed: {e}", p.label);
            r.end(Phase::Failed(message)).await.map(Some)
        }
    }
}

/// The reason of a run (and its action) stopped because what the action found at execution
/// is not what was approved (docs/design.md#findings).
pub const FINDINGS_CHANGED: &str = "FindingsChanged";

/// The findings approved with a `Manual` run's plan for action `i`, read back from where they
/// were kept; `None` when nothing was approved with findings. `Err(message)`: they were
/// approved but can no longer be read, so the action cannot be checked against them.
async fn approved_findings(
    r: &Reconcile,
    i: usize,
    p: &Prepared,
    keeper: &Keeper,
) -> Result<Option<stagehand_actions::action::Findings>, String> {
    let approved_with_findings = r
        .status
        .frozen_plan
        .as_ref()
        .is_some_and(|f| f.approval_digest.is_some());
    if r.run.spec.approval != stagehand_crds::Approval::Manual
        || !approved_with_findings
        || !p.action.reports_findings()
    {
        return Ok(None);
    }
    let index = r.status.actions[i].index;
    let unreadable = |e: String| {
        format!(
            "{}: the findings approved with the plan cannot be read ({e}); nothing was changed. Create a new run and approve its findings",
            p.label
        )
    };
    let entries = findings::read(&keeper.api, &keeper.namespace, &keeper.run)
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    match findings::parse(
        &entries,
        &keeper.namespace,
        &keeper.run,
        index,
        findings::PLAN,
    ) {
        Ok(Some(f)) => Ok(Some(f)),
        Ok(None) => Err(unreadable(format!(
            "ConfigMap {}/{} has no key {}",
            keeper.namespace,
            findings::config_map_name(&keeper.run, 1),
            findings::key(index, findings::PLAN)
        ))),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// Keeps the findings of action `i` as it ran and names them in its status; a failure to
/// keep them is a Warning Event, never the action's failure (it has run).
async fn keep_findings(
    r: &mut Reconcile,
    keeper: &Keeper,
    i: usize,
    p: &Prepared,
    found: &stagehand_actions::action::Findings,
) {
    let index = r.status.actions[i].index;
    match keeper.keep(index, findings::EXECUTION, found).await {
        Ok(status) => r.status.actions[i].findings = Some(status),
        Err(e) => {
            let message = format!(
                "{}: its findings ({} object(s)) could not be kept: {e}",
                p.label,
                found.rows.len()
            );
            warn!(%message, "findings not kept");
            r.event(EventType::Warning, "FindingsNotKept", message)
                .await;
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

/// Awaits `action`, meanwhile sampling its reporter every [`progress::SAMPLE_EVERY`], showing
/// each sample in the metrics (`stagehand_action_progress_*`, through `shown`) and writing
/// the run's status (`status.actions[i].progress`, the Reconciling message) when the
/// figure changed and the [`progress::Throttle`] allows. A write is never cut short: when the
/// action ends during one, the write finishes first, so that it cannot land after the
/// action's result; `ended` sees the action's result at once, without waiting for that write.
/// A failed progress write is logged and the action goes on.
async fn report_while<T>(
    r: &mut Reconcile,
    i: usize,
    label: &str,
    (reporter, shown): (&Progress, &ActionRunning),
    action: impl std::future::Future<Output = T>,
    ended: impl FnOnce(&T),
) -> T {
    let (ended_tx, mut ended_rx) = tokio::sync::oneshot::channel::<()>();
    let action = async move {
        let out = action.await;
        ended(&out);
        let _ = ended_tx.send(());
        out
    };
    let sampler = async {
        let mut throttle = progress::Throttle::new(progress::WRITE_EVERY);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + progress::SAMPLE_EVERY,
            progress::SAMPLE_EVERY,
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut ended_rx => return,
                _ = tick.tick() => {}
            }
            let Some(seen) = reporter.snapshot() else {
                continue;
            };
            shown.progress(seen.done, seen.total);
            if !throttle.due(std::time::Instant::now(), &seen) {
                continue;
            }
            let figure = progress::status_of(&seen);
            let line = progress::phase_line(label, Some(&figure));
            r.status.actions[i].progress = Some(figure);
            match r.write(&Phase::Running(line)).await {
                Ok(()) => {}
                Err(Error::Deposed) => return,
                Err(e) => warn!(error = %e, "cannot write the action's progress; it goes on"),
            }
        }
    };
    let (out, ()) = tokio::join!(action, sampler);
    out
}

/// Plans (and unless dry, applies) one action; returns its outcome (a dry run's: the plan's,
/// its summary marked).
async fn run_action(p: &Prepared, ctx: &ActionContext, dry: bool) -> Result<Outcome, ActionError> {
    let mut ctx = ctx.clone();
    ctx.run.apply_follows = !dry;
    let ctx = &ctx;
    let planned = p.action.plan(ctx).await?;
    if dry {
        return Ok(Outcome {
            summary: format!("dry run: {}", planned.summary),
            findings: planned.findings,
        });
    }
    p.action.apply(ctx).await
}
