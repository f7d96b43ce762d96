//! Step 5, `approval`: may a run that passed its preflight change anything? An
//! `Automatic` run may. A `Manual` run may once it is annotated
//! `stagehand.dev/approve-plan=<digest>` with the digest of the plan it froze
//! (`status.frozenPlan.digest`): a person approved exactly this plan. The digest covers the
//! declarations and everything the decisions were computed from (`installedRelease`, the last
//! migrated release, the recorded footprints: [`super::freeze`]); a run whose history changed
//! before its first action plans again under a new digest. An annotation with another digest
//! approved another plan and is refused.
//!
//! Findings (docs/design.md#findings): before a `Manual` run waits, the actions that report
//! findings are planned, their findings kept ([`super::findings`]) and named in their status,
//! and the digest to approve becomes one over the plan's digest and those findings
//! (`status.frozenPlan.approvalDigest`): a person approves the plan and the objects listed.

use std::ops::ControlFlow;

use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use stagehand_crds::{APPROVE_PLAN_ANNOTATION, Approval, MigrationRun};
use tracing::info;

use super::conditions::Phase;
use super::findings::{self, Keeper};
use super::freeze::Planned;
use super::reconcile::{Reconcile, Step};
use stagehand_actions::action::ActionContext;

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
        "review status.actions (and the findings: `stagehand report migrationrun/{name}`), then approve with `stagehand approve migrationrun/{name}` or annotate {APPROVE_PLAN_ANNOTATION}={digest}"
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

/// The digest a `Manual` run's approval names: the plan's, or, once actions reported findings
/// for its review, `status.frozenPlan.approvalDigest` ([`findings::approval_digest`]).
pub fn approval_digest(status: &stagehand_crds::unversioned::MigrationRunStatus) -> String {
    status
        .frozen_plan
        .as_ref()
        .and_then(|f| f.approval_digest.clone())
        .unwrap_or_else(|| super::freeze::frozen_digest(status))
}

/// Plans the actions of a `Manual` run that report findings, keeps their findings, names them
/// in their status and sets the digest to approve; once per plan (a run that plans again
/// gets a new plan without it). `Err(message)`: an action's planning failed, nothing was
/// changed.
async fn review(
    r: &mut Reconcile,
    planned: &Planned,
    ctx: &ActionContext,
    keeper: &Keeper,
) -> Result<(), String> {
    let reviewed: Vec<_> = planned
        .prepared
        .iter()
        .filter(|(_, p)| p.action.reports_findings())
        .collect();
    let Some(plan) = r.status.frozen_plan.as_ref() else {
        return Ok(());
    };
    if reviewed.is_empty() || plan.approval_digest.is_some() {
        return Ok(());
    }
    let plan_digest = plan.digest.clone();
    let mut digests = Vec::new();
    for (i, p) in reviewed {
        let mut c = ctx.clone();
        c.run.apply_follows = !(r.run.spec.dry_run || p.action.dry_run());
        let outcome = match p.action.plan(&c).await {
            Ok(o) => o,
            Err(e) => {
                return Err(format!(
                    "planning {} for the review of its findings: {e}; nothing was changed",
                    p.label
                ));
            }
        };
        let index = r.status.actions[*i].index;
        r.status.actions[*i].summary = Some(outcome.summary.clone());
        if let Some(found) = &outcome.findings {
            let status = keeper
                .keep(index, findings::PLAN, found)
                .await
                .map_err(|e| {
                    format!(
                        "keeping the findings of {} for their review: {e}; nothing was changed",
                        p.label
                    )
                })?;
            digests.push((index, status.digest.clone()));
            r.status.actions[*i].findings = Some(status);
        }
    }
    let digest =
        findings::approval_digest(&plan_digest, digests.iter().map(|(i, d)| (*i, d.as_str())));
    if let Some(plan) = r.status.frozen_plan.as_mut() {
        plan.approval_digest = Some(digest);
    }
    Ok(())
}

/// The approval step: before the first action starts, a `Manual` run plans the actions that
/// report findings and keeps them ([`review`]), then waits (Event `AwaitingApproval` once)
/// until its frozen plan and those findings are approved ([`check`], pure).
pub(super) async fn step(
    r: &mut Reconcile,
    planned: &Planned,
    ctx: &ActionContext,
    keeper: &Keeper,
) -> Step<()> {
    if r.status.actions.iter().any(|a| a.start_time.is_some()) {
        return Ok(ControlFlow::Continue(()));
    }
    if r.run.spec.approval == Approval::Manual
        && let Err(message) = review(r, planned, ctx, keeper).await
    {
        return r.stop(Phase::PreflightFailed(message)).await;
    }
    let digest = approval_digest(&r.status);
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
