//! Step 5, `approval`: may a run that passed its preflight change anything? An
//! `Automatic` run may. A `Manual` run may once it is annotated
//! `stagehand.dev/approve-plan=<digest>` with the digest of the plan it froze
//! (`status.frozenPlan.digest`): a person approved exactly this plan. The digest covers the
//! declarations and everything the decisions were computed from (`installedRelease`, the last
//! migrated release, the recorded footprints: [`super::freeze`]); a run whose history changed
//! before its first action plans again under a new digest. An annotation with another digest
//! approved another plan and is refused.

use std::ops::ControlFlow;

use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_crds::{APPROVE_PLAN_ANNOTATION, Approval, MigrationRun};
use tracing::info;

use super::conditions::Phase;
use super::reconcile::{Reconcile, Step};

/// What the approval step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The run may execute its plan.
    Approved,
    /// The run waits; the message says what to approve and how.
    Awaiting(String),
}

/// Whether `run`, whose frozen plan has digest `digest`, may execute it.
pub fn check(run: &MigrationRun, digest: &str) -> Verdict {
    if run.spec.approval == Approval::Automatic {
        return Verdict::Approved;
    }
    let name = run.metadata.name.as_deref().unwrap_or_default();
    let how = format!(
        "review status.actions, then approve with `stagehand approve migrationrun/{name}` or annotate {APPROVE_PLAN_ANNOTATION}={digest}"
    );
    match run
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPROVE_PLAN_ANNOTATION))
        .map(|v| v.trim())
    {
        Some(approved) if approved == digest => Verdict::Approved,
        Some(other) => Verdict::Awaiting(format!(
            "the approval names plan {other}, but this run's plan is {digest} (it is not the plan that was approved: the declarations, or the history ledger or installedRelease it was computed from, changed since; the run's Replanned event says what): {how}"
        )),
        None => Verdict::Awaiting(format!(
            "waiting for approval of plan {digest}; nothing was changed: {how}"
        )),
    }
}

/// The approval step: before the first action starts, a `Manual` run waits (Event
/// `AwaitingApproval` once) until its frozen plan is approved ([`check`], pure).
pub(super) async fn step(r: &mut Reconcile) -> Step<()> {
    if r.status.actions.iter().any(|a| a.start_time.is_some()) {
        return Ok(ControlFlow::Continue(()));
    }
    let digest = super::freeze::frozen_digest(&r.status);
    let Verdict::Awaiting(message) = check(&r.run, &digest) else {
        return Ok(ControlFlow::Continue(()));
    };
    if r.status.conditions.iter().all(|c| c.message != message) {
        info!(%digest, "waiting for the plan's approval");
        r.event(EventType::Normal, "AwaitingApproval", message.clone())
            .await;
    }
    r.write(&Phase::AwaitingApproval(message)).await?;
    Ok(ControlFlow::Break(Requeue::await_change()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagehand_crds::MigrationRunSpec;

    fn run(approval: Approval, annotation: Option<&str>) -> MigrationRun {
        let mut r = MigrationRun::new(
            "pre",
            MigrationRunSpec {
                approval,
                ..Default::default()
            },
        );
        if let Some(a) = annotation {
            r.metadata.annotations = Some(
                [(APPROVE_PLAN_ANNOTATION.to_string(), a.to_string())]
                    .into_iter()
                    .collect(),
            );
        }
        r
    }

    #[test]
    fn automatic_runs_need_nothing() {
        assert_eq!(
            check(&run(Approval::Automatic, None), "sha256:a"),
            Verdict::Approved
        );
    }

    #[test]
    fn a_manual_run_goes_only_with_its_own_digest() {
        assert!(matches!(
            check(&run(Approval::Manual, None), "sha256:a"),
            Verdict::Awaiting(m) if m.contains("sha256:a") && m.contains("stagehand approve migrationrun/pre")
        ));
        assert_eq!(
            check(&run(Approval::Manual, Some("sha256:a")), "sha256:a"),
            Verdict::Approved
        );
        assert!(matches!(
            check(&run(Approval::Manual, Some("sha256:old")), "sha256:a"),
            Verdict::Awaiting(m) if m.contains("the approval names plan sha256:old, but this run's plan is sha256:a")
        ));
        assert!(matches!(
            check(&run(Approval::Manual, Some("")), "sha256:a"),
            Verdict::Awaiting(_)
        ));
    }
}
