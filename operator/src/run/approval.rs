//! Step 4b, `approval` (pure): may a run that passed its preflight change anything? An
//! `Automatic` run may. A `Manual` run may once it is annotated
//! `stagehand.dev/approve-plan=<digest>` with the digest of the plan it froze
//! (`status.frozenPlan.digest`): a person approved exactly this plan. An annotation with
//! another digest approved another plan (the declarations, or what the plan was computed from,
//! changed since) and is refused.

use stagehand_crds::{APPROVE_PLAN_ANNOTATION, Approval, MigrationRun};

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
            "the approval names plan {other}, but this run's plan is {digest} (it is not the plan that was approved): {how}"
        )),
        None => Verdict::Awaiting(format!(
            "waiting for approval of plan {digest}; nothing was changed: {how}"
        )),
    }
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
