//! Step 7, `finish`: a post run records the release in the ledger (unless it, or the pre
//! run it followed, ran an action as a dry run), then the run succeeds. A run that ended and
//! still carries the run finalizer ([`super::finalizer`]) lets it go (`settled`).

use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_config::Stage;
use stagehand_crds::unversioned::{ActionDecision, MigrationRunStatus};
use tracing::info;

use super::conditions::Phase;
use super::context::Error;
use super::finalizer;
use super::gate::{PreRun, pre_run_of};
use super::history::History;
use super::reconcile::{DRY_RUN, Reconcile};

/// A run that ended: nothing more to do, but take the run finalizer off if it still carries
/// it (the operator stopped between writing the end and taking it off).
pub(super) async fn settled(r: &mut Reconcile) -> Result<Requeue, Error> {
    if r.holds_finalizer {
        finalizer::release(&r.runs, &r.run.name_any()).await?;
        r.holds_finalizer = false;
    }
    Ok(Requeue::await_change())
}

/// Whether any action of `status` ran as a dry run.
fn had_dry_run(status: &MigrationRunStatus) -> bool {
    status.actions.iter().any(|a| a.reason == DRY_RUN)
}

/// The last step: a post run records the release in the ledger (unless it, or the pre run it
/// followed, ran an action as a dry run: that work is still to do), then the run succeeds.
pub(super) async fn step(
    r: &mut Reconcile,
    history: &History,
    release: &str,
) -> Result<Requeue, Error> {
    let mut note = String::new();
    if r.run.spec.stage == Stage::Post && !r.run.spec.dry_run {
        let namespace = r.run.namespace().unwrap_or_default();
        let siblings = r
            .context
            .runs
            .of_migration(&namespace, &r.run.spec.migration_ref);
        // The store keeps a finished run without its actions: read the pre run's.
        let pre_dry = match pre_run_of(&r.run, &siblings) {
            PreRun::Succeeded(pre) => r
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
            _ => false,
        };
        if pre_dry || had_dry_run(&r.status) {
            note = "; the release is not recorded as migrated: an action of this release ran as a dry run (config.dryRun), so its work is still to do".to_string();
        } else {
            r.record(history, |l| {
                l.last_migrated_release = Some(release.to_string());
            })
            .await?;
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
