//! Step 1, `gate`: may this run start now? Ordering (a post run after *its* pre run: the
//! newest pre run of its release created at or before it), exclusivity (one running run per
//! Migration, the earlier created first), `suspend`, and the wait timeout — decided by pure
//! functions from the run, its Migration and its sibling runs alone; `step` reads them and
//! claims the start.

use std::ops::ControlFlow;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use stagehand_config::{Release, Stage};
use stagehand_crds::unversioned::MigrationRunStatus;
use stagehand_crds::{Migration, MigrationRun};

use super::conditions::Phase;
use super::reconcile::{Reconcile, Step, WAKE_FALLBACK, until_timeout};

/// What the gate decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// The run may go on (it started already, or may start now).
    Go,
    /// It must wait; the message says for what.
    Wait(String),
    /// Its Migration is suspended and the run has not started: it waits, and the time does
    /// not count towards `waitTimeoutSeconds`.
    Suspended(String),
    /// It waited longer than `waitTimeoutSeconds` (suspended time not counted).
    TimedOut(String),
    /// It is being deleted (its namespace, or itself, while a finalizer keeps it): it starts
    /// nothing more.
    Terminating(String),
    /// It started, and its Migration is gone: it applies nothing more.
    MigrationDeleted(String),
    /// A post run whose pre run failed, was stopped or was a dry run: it ends without
    /// applying anything.
    PreRunFailed(String),
}

/// Why a run that is being deleted (`metadata.deletionTimestamp` set) starts nothing more, or
/// `None` when it is not being deleted. A run deleted outright is gone at once; one that a
/// finalizer keeps (a GitOps tool's, or its namespace being deleted around it) would
/// otherwise go on against a namespace whose Secrets and workloads are going away.
pub fn terminating(run: &MigrationRun) -> Option<String> {
    run.metadata.deletion_timestamp.as_ref()?;
    let started = run.status.as_ref().is_some_and(|s| s.start_time.is_some());
    Some(format!(
        "MigrationRun {} is being deleted (metadata.deletionTimestamp is set: the run or its namespace {} was deleted, and a finalizer keeps it for now): {}",
        run.name_any(),
        run.namespace().unwrap_or_default(),
        if started {
            "no further action starts"
        } else {
            "it never started, nothing was applied"
        }
    ))
}

/// Why a run that started goes no further once its Migration is gone.
pub fn migration_deleted(run: &MigrationRun) -> String {
    format!(
        "Migration {} was deleted while the run was going; nothing more is applied (the actions that succeeded are recorded in its history ledger, which outlives it). Recreate the Migration and create a new MigrationRun to finish the stage",
        run.spec.migration_ref
    )
}

/// Whether a run is over (its `Succeeded` condition is written).
pub fn terminal(status: &MigrationRunStatus) -> bool {
    status.conditions.iter().any(|c| c.type_ == "Succeeded")
}

/// Whether a run succeeded.
pub fn succeeded(status: &MigrationRunStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Succeeded" && c.status == "True")
}

/// The same release, however it is written (`v1.18.0` and `1.18.0`).
pub fn same_release(a: &str, b: &str) -> bool {
    match (Release::parse(a), Release::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Decides for `run` at `now`. `siblings` are the other runs of the namespace (any
/// Migration; the gate picks those of the run's Migration).
pub fn gate(
    run: &MigrationRun,
    migration: Option<&Migration>,
    siblings: &[MigrationRun],
    now: Timestamp,
) -> Gate {
    let status = run.status.clone().unwrap_or_default();
    let namespace = run.namespace().unwrap_or_default();
    if let Some(message) = terminating(run) {
        return Gate::Terminating(message);
    }
    let Some(migration) = migration else {
        if status.start_time.is_some() {
            return Gate::MigrationDeleted(migration_deleted(run));
        }
        return timed(
            run,
            &status,
            now,
            format!(
                "waiting for Migration {} to be created in {namespace} (not found)",
                run.spec.migration_ref
            ),
        );
    };
    if status.start_time.is_some() {
        return Gate::Go;
    }
    if !same_release(&migration.spec.release_version, &run.spec.release) {
        return timed(
            run,
            &status,
            now,
            format!(
                "the run is for release {} but Migration {} declares {}: apply the Migration of this release first",
                run.spec.release, run.spec.migration_ref, migration.spec.release_version
            ),
        );
    }
    if migration.spec.suspend {
        return Gate::Suspended(format!(
            "Migration {} is suspended (spec.suspend: true): no new run starts until it is resumed",
            run.spec.migration_ref
        ));
    }
    if run.spec.stage == Stage::Post
        && let PreRun::Failed(pre) = pre_run_of(run, siblings)
    {
        return Gate::PreRunFailed(pre_run_failed(run, pre));
    }
    match blocked_by(run, siblings) {
        Some(message) => timed(run, &status, now, message),
        None => Gate::Go,
    }
}

/// `Wait`, or `TimedOut` once the run waited longer than its timeout (suspended time not
/// counted).
fn timed(run: &MigrationRun, status: &MigrationRunStatus, now: Timestamp, message: String) -> Gate {
    let waited = run
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| now.duration_since(t.0).as_secs() - suspended_seconds(status, now));
    if waited.is_some_and(|w| w > run.spec.wait_timeout_seconds) {
        return Gate::TimedOut(format!(
            "gave up after waitTimeoutSeconds={}: {message}",
            run.spec.wait_timeout_seconds
        ));
    }
    Gate::Wait(message)
}

/// Seconds spent suspended so far, including a suspension still going on.
pub fn suspended_seconds(status: &MigrationRunStatus, now: Timestamp) -> i64 {
    let ongoing = status
        .suspended_since
        .as_deref()
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map_or(0, |since| now.duration_since(since).as_secs().max(0));
    status.suspended_seconds.unwrap_or(0) + ongoing
}

/// The suspension bookkeeping after deciding `decision` at `now`: a suspension starts, goes
/// on, or ends (its time added to `suspendedSeconds`).
pub fn track_suspension(status: &mut MigrationRunStatus, decision: &Gate, now: Timestamp) {
    let suspended = matches!(decision, Gate::Suspended(_));
    match (&status.suspended_since, suspended) {
        (None, true) => status.suspended_since = Some(now.to_string()),
        (Some(_), false) => {
            status.suspended_seconds = Some(suspended_seconds(status, now));
            status.suspended_since = None;
        }
        _ => {}
    }
}

/// The sibling runs of the same Migration.
fn same_migration<'a>(run: &MigrationRun, siblings: &'a [MigrationRun]) -> Vec<&'a MigrationRun> {
    siblings
        .iter()
        .filter(|r| {
            r.spec.migration_ref == run.spec.migration_ref && r.name_any() != run.name_any()
        })
        .collect()
}

/// The pre run a post run follows, as [`pre_run_of`] finds it.
#[derive(Debug, Clone, Copy)]
pub enum PreRun<'a> {
    /// No pre run of the post run's release was created at or before it: the post run waits.
    Missing,
    /// Its pre run has not finished: the post run waits.
    Unfinished(&'a MigrationRun),
    /// Its pre run failed, was stopped, or was a dry run: the post run ends `PreRunFailed`.
    Failed(&'a MigrationRun),
    /// Its pre run succeeded: the post run may go.
    Succeeded(&'a MigrationRun),
}

/// The order in which runs of one Migration were created: by `creationTimestamp` (one-second
/// resolution), a pre run before a post run created in the same second (whatever the names),
/// then by name.
fn created_order(r: &MigrationRun) -> (Option<Timestamp>, u8, String) {
    (
        r.metadata.creation_timestamp.as_ref().map(|t| t.0),
        match r.spec.stage {
            Stage::Pre => 0,
            Stage::Post => 1,
        },
        r.name_any(),
    )
}

/// A post run's pre run: the newest pre run of the same Migration and release created at or
/// before it (on equal creation time a pre run counts as earlier). Among pre runs created in
/// the same second, one that has not started is the newest, then the one that started last.
pub fn pre_run_of<'a>(run: &MigrationRun, siblings: &'a [MigrationRun]) -> PreRun<'a> {
    let created = run.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let newest = same_migration(run, siblings)
        .into_iter()
        .filter(|r| {
            r.spec.stage == Stage::Pre
                && same_release(&r.spec.release, &run.spec.release)
                && r.metadata.creation_timestamp.as_ref().map(|t| t.0) <= created
        })
        .max_by_key(|r| {
            let start = r
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_deref())
                .map(|t| t.parse::<Timestamp>().ok());
            (
                r.metadata.creation_timestamp.as_ref().map(|t| t.0),
                start.is_none(),
                start,
                r.name_any(),
            )
        });
    let Some(pre) = newest else {
        return PreRun::Missing;
    };
    match pre.status.as_ref() {
        _ if pre.spec.dry_run => PreRun::Failed(pre),
        Some(s) if succeeded(s) => PreRun::Succeeded(pre),
        Some(s) if terminal(s) => PreRun::Failed(pre),
        _ => PreRun::Unfinished(pre),
    }
}

/// Why a post run ends because of its pre run ([`PreRun::Failed`]).
pub fn pre_run_failed(run: &MigrationRun, pre: &MigrationRun) -> String {
    let how = if pre.spec.dry_run {
        "was a dry run (spec.dryRun: true): it changed nothing".to_string()
    } else {
        let reason = pre
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Succeeded"))
            .map(|c| c.reason.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "Failed".into());
        format!("did not succeed (reason {reason})")
    };
    format!(
        "pre run {} of release {} {how}; this post run applies nothing. Find out why in `kubectl describe migrationrun {}`, then create a new pre run and a new post run of the release",
        pre.name_any(),
        run.spec.release,
        pre.name_any()
    )
}

/// The runs among `runs` (the runs of one Migration, as they stand now) that have not started
/// and that nothing blocks any more: whom to wake after a run of the Migration finished, so
/// that no waiting run has to poll. At most one of them starts (the gate decides again).
pub fn unblocked(runs: &[MigrationRun]) -> Vec<&MigrationRun> {
    runs.iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| !terminal(s) && s.start_time.is_none())
        })
        .filter(|r| blocked_by(r, runs).is_none())
        .collect()
}

/// Why this run may not start yet: another run of the Migration is running or was created
/// first, or (post) its pre run has not finished. A post run whose pre run failed is not
/// blocked: it is woken to end ([`Gate::PreRunFailed`]).
fn blocked_by(run: &MigrationRun, all: &[MigrationRun]) -> Option<String> {
    if run.spec.stage == Stage::Post {
        match pre_run_of(run, all) {
            PreRun::Missing => {
                return Some(format!(
                    "waiting for the pre run of release {} to succeed",
                    run.spec.release
                ));
            }
            PreRun::Unfinished(pre) => {
                return Some(format!(
                    "waiting for pre run {} of release {} to succeed",
                    pre.name_any(),
                    run.spec.release
                ));
            }
            PreRun::Failed(_) => return None,
            PreRun::Succeeded(_) => {}
        }
    }
    let siblings = same_migration(run, all);
    let unfinished = |r: &&&MigrationRun| !r.status.as_ref().is_some_and(terminal);
    if let Some(other) = siblings
        .iter()
        .filter(unfinished)
        .find(|r| r.status.as_ref().is_some_and(|s| s.start_time.is_some()))
    {
        return Some(format!(
            "MigrationRun {} of the same Migration is running",
            other.name_any()
        ));
    }
    // A post run waits for its release's pre run, so it never goes before that pre run
    // (whatever the creation order): otherwise each would wait for the other.
    let waits_for_run = |r: &&&MigrationRun| {
        !(run.spec.stage == Stage::Pre
            && r.spec.stage == Stage::Post
            && same_release(&r.spec.release, &run.spec.release))
    };
    if let Some(earlier) = siblings
        .iter()
        .filter(unfinished)
        .filter(waits_for_run)
        .find(|r| created_order(r) < created_order(run))
    {
        return Some(format!(
            "MigrationRun {} of the same Migration was created first",
            earlier.name_any()
        ));
    }
    None
}

/// The gate as a pipeline step: reads the Migration and (for a run that has not started) the
/// sibling runs from the controller's view, decides, and claims the start. Goes on with the
/// Migration.
pub(super) async fn step(r: &mut Reconcile) -> Step<Migration> {
    let namespace = r.run.namespace().unwrap_or_default();
    let migration = r.read_migration().await?;
    r.run_history_limit = migration.as_ref().and_then(|m| m.spec.run_history_limit);
    // A run that started is past the gate: its siblings are not needed. They come from the
    // run controller's store (no request): a change that unblocks a waiting run wakes it.
    if r.status.start_time.is_none() {
        r.siblings = r
            .context
            .runs
            .of_migration(&namespace, &r.run.spec.migration_ref);
    }
    let decision = gate(&r.run, migration.as_ref(), &r.siblings, Timestamp::now());
    track_suspension(&mut r.status, &decision, Timestamp::now());
    let migration = match (decision, migration) {
        (Gate::Go, Some(m)) => m,
        (Gate::TimedOut(message), _) => return r.stop(Phase::Failed(message)).await,
        (Gate::Terminating(message), _) => return r.stop(Phase::Terminating(message)).await,
        (Gate::PreRunFailed(message), _) => return r.stop(Phase::PreRunFailed(message)).await,
        (Gate::MigrationDeleted(message), _) => {
            return r.stop(Phase::DeclarationsChanged(message)).await;
        }
        (Gate::Suspended(message), _) => {
            r.write(&Phase::Suspended(message)).await?;
            return Ok(ControlFlow::Break(Requeue::requeue(WAKE_FALLBACK)));
        }
        (Gate::Wait(message), _) => {
            r.write(&Phase::Waiting(message)).await?;
            return Ok(ControlFlow::Break(Requeue::requeue(until_timeout(
                &r.run, &r.status,
            ))));
        }
        // The gate goes only with a Migration.
        (Gate::Go, None) => return Ok(ControlFlow::Break(Requeue::requeue(WAKE_FALLBACK))),
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
        return Ok(ControlFlow::Break(Requeue::requeue(until_timeout(
            &r.run, &r.status,
        ))));
    }
    Ok(ControlFlow::Continue(migration))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use stagehand_crds::MigrationSpec;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn migration(suspend: bool) -> Migration {
        let mut m = Migration::new(
            "opendesk",
            MigrationSpec {
                release_version: "v1.18.0".into(),
                suspend,
                ..MigrationSpec::default()
            },
        );
        m.metadata.namespace = Some("ns".into());
        m
    }

    fn run(name: &str, stage: Stage, created: i64) -> MigrationRun {
        let mut r = crate::testing::migration_run(name, stage, "1.18.0");
        r.spec.wait_timeout_seconds = 60;
        r.metadata.namespace = Some("ns".into());
        r.metadata.creation_timestamp = Some(Time(at(created)));
        r
    }

    fn finished(mut r: MigrationRun, ok: bool) -> MigrationRun {
        let status = r.status.get_or_insert_with(Default::default);
        status.start_time = Some(at(1).to_string());
        status.completion_time = Some(at(2).to_string());
        status.conditions = vec![Condition {
            type_: "Succeeded".into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: "x".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(at(2)),
        }];
        r
    }

    fn started(mut r: MigrationRun) -> MigrationRun {
        r.status.get_or_insert_with(Default::default).start_time = Some(at(1).to_string());
        r
    }

    fn names(runs: Vec<&MigrationRun>) -> Vec<String> {
        runs.into_iter().map(ResourceExt::name_any).collect()
    }

    #[test]
    fn a_finish_wakes_only_the_run_it_unblocks() {
        // a finished; b and c wait in creation order: only b may go now.
        let runs = vec![
            finished(run("a", Stage::Pre, 0), true),
            run("b", Stage::Pre, 5),
            run("c", Stage::Pre, 6),
        ];
        assert_eq!(names(unblocked(&runs)), ["b"]);
        // While a runs, nobody is unblocked.
        let runs = vec![started(run("a", Stage::Pre, 0)), run("b", Stage::Pre, 5)];
        assert!(unblocked(&runs).is_empty());
        // The pre run succeeded: its post run, created in the same second, goes.
        let runs = vec![
            run("post", Stage::Post, 1),
            finished(run("pre", Stage::Pre, 1), true),
        ];
        assert_eq!(names(unblocked(&runs)), ["post"]);
        // It failed: the post run is woken, to end (PreRunFailed) at once.
        let runs = vec![
            run("post", Stage::Post, 1),
            finished(run("pre", Stage::Pre, 1), false),
        ];
        assert_eq!(names(unblocked(&runs)), ["post"]);
        // Neither started, created in the same second: the pre run goes first, whatever the
        // names.
        let runs = vec![run("x-post", Stage::Post, 3), run("x-pre", Stage::Pre, 3)];
        assert_eq!(names(unblocked(&runs)), ["x-pre"]);
    }

    fn dry(mut r: MigrationRun) -> MigrationRun {
        r.spec.dry_run = true;
        r
    }

    fn reason(g: &Gate) -> String {
        match g {
            Gate::PreRunFailed(m) => format!("PreRunFailed: {m}"),
            Gate::Wait(m) => format!("Wait: {m}"),
            Gate::Go => "Go".into(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_redeploy_whose_new_pre_run_failed_is_not_released_by_last_weeks() {
        let m = migration(false);
        let last_week = finished(run("opendesk-v1.18.0-pre-1", Stage::Pre, 0), true);
        let failed = finished(run("opendesk-v1.18.0-pre-2", Stage::Pre, 600_000), false);
        let post = run("opendesk-v1.18.0-post-2", Stage::Post, 600_000);
        let g = gate(&post, Some(&m), &[last_week.clone(), failed], at(600_001));
        assert!(
            reason(&g).starts_with(
                "PreRunFailed: pre run opendesk-v1.18.0-pre-2 of release 1.18.0 did not succeed"
            ),
            "{}",
            reason(&g)
        );
        // The new pre run still running: the post run waits for it, not for last week's.
        let running = started(run("opendesk-v1.18.0-pre-2", Stage::Pre, 600_000));
        let g = gate(&post, Some(&m), &[last_week.clone(), running], at(600_001));
        assert_eq!(
            reason(&g),
            "Wait: waiting for pre run opendesk-v1.18.0-pre-2 of release 1.18.0 to succeed"
        );
        let waiting = run("opendesk-v1.18.0-pre-2", Stage::Pre, 600_000);
        let g = gate(&post, Some(&m), &[last_week, waiting], at(600_001));
        assert_eq!(
            reason(&g),
            "Wait: waiting for pre run opendesk-v1.18.0-pre-2 of release 1.18.0 to succeed"
        );
    }

    #[test]
    fn a_pre_run_created_after_the_post_run_is_not_its_pre_run() {
        let m = migration(false);
        let post = run("post", Stage::Post, 10);
        let later = finished(run("pre", Stage::Pre, 11), true);
        assert!(matches!(
            gate(&post, Some(&m), &[later], at(12)),
            Gate::Wait(w) if w == "waiting for the pre run of release 1.18.0 to succeed"
        ));
    }

    #[test]
    fn a_stopped_or_dry_pre_run_ends_the_post_run_naming_it() {
        let m = migration(false);
        let post = run("post", Stage::Post, 5);
        let g = gate(&post, Some(&m), &[dry(run("review", Stage::Pre, 5))], at(6));
        assert!(
            reason(&g).starts_with("PreRunFailed: pre run review of release 1.18.0 was a dry run"),
            "{}",
            reason(&g)
        );
        let mut stopped = finished(run("pre", Stage::Pre, 4), false);
        if let Some(s) = stopped.status.as_mut() {
            s.conditions[0].reason = "Terminating".into();
        }
        let g = gate(&post, Some(&m), &[stopped], at(6));
        assert!(
            reason(&g)
                .contains("pre run pre of release 1.18.0 did not succeed (reason Terminating)"),
            "{}",
            reason(&g)
        );
        // A dry review before the real pre run: the real one is the newest.
        let real = finished(run("real", Stage::Pre, 4), true);
        let review = finished(dry(run("review", Stage::Pre, 3)), true);
        assert_eq!(gate(&post, Some(&m), &[review, real], at(6)), Gate::Go);
    }

    #[test]
    fn a_lone_pre_run_goes() {
        let pre = run("pre", Stage::Pre, 0);
        assert_eq!(gate(&pre, Some(&migration(false)), &[], at(1)), Gate::Go);
    }

    #[test]
    fn waits_for_the_migration_and_the_release() {
        let pre = run("pre", Stage::Pre, 0);
        assert!(matches!(gate(&pre, None, &[], at(1)), Gate::Wait(m) if m.contains("not found")));
        let mut other = migration(false);
        other.spec.release_version = "v1.19.0".into();
        assert!(
            matches!(gate(&pre, Some(&other), &[], at(1)), Gate::Wait(m) if m.contains("declares v1.19.0"))
        );
    }

    #[test]
    fn a_started_run_whose_migration_is_gone_goes_no_further() {
        let pre = started(run("pre", Stage::Pre, 0));
        assert!(
            matches!(gate(&pre, None, &[], at(1)), Gate::MigrationDeleted(m) if m.contains("Migration opendesk was deleted while the run was going")),
            "not a wait of up to waitTimeoutSeconds"
        );
    }

    #[test]
    fn a_run_being_deleted_starts_nothing() {
        let mut pre = run("pre", Stage::Pre, 0);
        pre.metadata.deletion_timestamp = Some(Time(at(1)));
        assert!(
            matches!(gate(&pre, Some(&migration(false)), &[], at(1)), Gate::Terminating(m) if m.contains("MigrationRun pre is being deleted") && m.contains("never started"))
        );
        let going = started(pre);
        assert!(
            matches!(gate(&going, None, &[], at(2)), Gate::Terminating(m) if m.contains("no further action starts"))
        );
    }

    #[test]
    fn one_running_run_per_migration_and_the_earlier_first() {
        let a = run("a", Stage::Pre, 0);
        let b = run("b", Stage::Pre, 5);
        let m = migration(false);
        assert!(
            matches!(gate(&b, Some(&m), std::slice::from_ref(&a), at(6)), Gate::Wait(w) if w.contains("a of the same Migration was created first"))
        );
        assert_eq!(
            gate(&a, Some(&m), std::slice::from_ref(&b), at(6)),
            Gate::Go
        );
        let running = started(run("c", Stage::Pre, 10));
        assert!(
            matches!(gate(&a, Some(&m), &[running], at(11)), Gate::Wait(w) if w.contains("c of the same Migration is running"))
        );
        assert_eq!(
            gate(&b, Some(&m), &[finished(a, false)], at(6)),
            Gate::Go,
            "a finished run blocks nothing"
        );
        let mut elsewhere = run("x", Stage::Pre, 0);
        elsewhere.spec.migration_ref = "other".into();
        assert_eq!(
            gate(&b, Some(&m), &[started(elsewhere)], at(6)),
            Gate::Go,
            "another Migration's run runs in parallel"
        );
    }

    #[test]
    fn post_waits_for_its_pre_run_and_pre_never_for_post() {
        let m = migration(false);
        let post = run("a-post", Stage::Post, 0);
        let pre = run("b-pre", Stage::Pre, 0);
        assert!(matches!(
            gate(&post, Some(&m), std::slice::from_ref(&pre), at(1)),
            Gate::Wait(_)
        ));
        assert_eq!(
            gate(&pre, Some(&m), std::slice::from_ref(&post), at(1)),
            Gate::Go
        );
        let mut dry = finished(pre.clone(), true);
        dry.spec.dry_run = true;
        assert!(
            matches!(gate(&post, Some(&m), &[dry], at(3)), Gate::PreRunFailed(w) if w.contains("was a dry run")),
            "a dry pre run does not release it"
        );
        assert!(
            matches!(
                gate(&post, Some(&m), &[finished(pre.clone(), false)], at(3)),
                Gate::PreRunFailed(_)
            ),
            "a failed pre run does not release it"
        );
        assert_eq!(
            gate(&post, Some(&m), &[finished(pre, true)], at(3)),
            Gate::Go
        );
    }

    #[test]
    fn another_migrations_pre_run_does_not_release_a_post_run() {
        let m = migration(false);
        let post = run("post", Stage::Post, 0);
        let mut other = finished(run("other-pre", Stage::Pre, 0), true);
        other.spec.migration_ref = "other".into();
        assert!(matches!(
            gate(&post, Some(&m), &[other], at(3)),
            Gate::Wait(_)
        ));
    }

    #[test]
    fn suspend_holds_a_new_run_but_not_a_running_one() {
        let m = migration(true);
        let pre = run("pre", Stage::Pre, 0);
        assert!(
            matches!(gate(&pre, Some(&m), &[], at(1)), Gate::Suspended(s) if s.contains("suspend"))
        );
        assert_eq!(gate(&started(pre), Some(&m), &[], at(1)), Gate::Go);
    }

    #[test]
    fn the_timeout_counts_waiting_but_not_suspended_time() {
        let m = migration(false);
        let post = run("post", Stage::Post, 0);
        assert!(matches!(gate(&post, Some(&m), &[], at(60)), Gate::Wait(_)));
        assert!(
            matches!(gate(&post, Some(&m), &[], at(61)), Gate::TimedOut(t) if t.starts_with("gave up after waitTimeoutSeconds=60: waiting for the pre run"))
        );
        // 50 s suspended: the timeout moves by 50 s.
        let mut held = post.clone();
        let status = held.status.get_or_insert_with(Default::default);
        track_suspension(status, &Gate::Suspended(String::new()), at(10));
        assert_eq!(status.suspended_since, Some(at(10).to_string()));
        track_suspension(status, &Gate::Suspended(String::new()), at(30));
        assert_eq!(
            status.suspended_since,
            Some(at(10).to_string()),
            "still the start"
        );
        track_suspension(status, &Gate::Wait(String::new()), at(60));
        assert_eq!(
            (status.suspended_seconds, status.suspended_since.clone()),
            (Some(50), None)
        );
        assert!(matches!(gate(&held, Some(&m), &[], at(110)), Gate::Wait(_)));
        assert!(matches!(
            gate(&held, Some(&m), &[], at(111)),
            Gate::TimedOut(_)
        ));
        // A suspended run never times out.
        let long = migration(true);
        assert!(matches!(
            gate(&post, Some(&long), &[], at(10_000)),
            Gate::Suspended(_)
        ));
    }
}
