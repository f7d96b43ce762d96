//! Step 3, `freeze`: the plan of the stage, frozen into the run's status with the
//! Migration's generation, a digest of every declaration and what the decisions were computed
//! from ([`Basis`]: `installedRelease`, the last migrated release, the recorded footprints),
//! and the check that the Migration still declares what the run planned before each action
//! starts (and on resume); for a post run, that the pre stage is still what its pre run
//! froze. Until its first action starts, a run whose basis changed (the ledger or
//! `installedRelease` edited) plans again: its plan gets a new digest, which a `Manual` run
//! needs approved anew. The decisions are pure; `step` writes the plan, and takes the run
//! finalizer ([`super::finalizer`]) before it.

use std::ops::ControlFlow;

use kube::ResourceExt;
use kube::runtime::events::EventType;
use stagehand_actions::instantiate;
use stagehand_config::fingerprint::{ActionDigest, Basis, plan_digest};
use stagehand_config::{Decision, Fingerprint, Footprint, Plan, Stage, plan_stage};
use stagehand_crds::Migration;
use stagehand_crds::unversioned::{
    ActionDecision, ActionStatus, FrozenPlan, HistoryEntry, MigrationRunStatus,
};
use tracing::info;

use super::assess::Assessed;
use super::conditions::Phase;
use super::context::Error;
use super::finalizer;
use super::gate::{PreRun, pre_run_of};
use super::preflight::Prepared;
use super::reconcile::{Reconcile, Step, label, now, run_ref};

/// The reason of an action the run planned to run.
pub const IN_WINDOW: &str = "InWindow";

/// The status entries of a new plan, and what it froze: the declarations (`fingerprint`) and
/// what the decisions were computed from (`basis`), under one digest.
pub fn freeze(
    plan: &Plan,
    fingerprint: &Fingerprint,
    basis: &Basis,
    generation: Option<i64>,
) -> (Vec<ActionStatus>, FrozenPlan) {
    let actions = plan
        .actions
        .iter()
        .map(|a| ActionStatus {
            index: u32::try_from(a.index).unwrap_or(u32::MAX),
            id: a.id.clone(),
            tag: a.tag.clone(),
            run_mode: a.run_mode.clone(),
            decision: if a.decision == Decision::Run {
                ActionDecision::Run
            } else {
                ActionDecision::Skipped
            },
            reason: a.reason.as_str().to_string(),
            start_time: None,
            completion_time: None,
            summary: None,
            digest: Some(a.digest.clone()),
            findings: None,
            progress: None,
        })
        .collect();
    let [release_version, secret_files, object_store, actions_skip] = fingerprint.fields.clone();
    let frozen = FrozenPlan {
        migration_generation: generation,
        digest: plan_digest(fingerprint, basis),
        declarations_digest: Some(fingerprint.digest()),
        installed_release: basis.installed_release.clone(),
        last_migrated_release: basis.last_migrated_release.clone(),
        footprints: basis
            .footprints
            .iter()
            .map(|f| HistoryEntry {
                stage: Some(f.stage),
                id: f.id.clone(),
                tag: f.tag.clone(),
                run_mode: f.run_mode.clone(),
                ..HistoryEntry::default()
            })
            .collect(),
        release_version,
        secret_files,
        object_store,
        actions_skip,
        approval_digest: None,
    };
    (actions, frozen)
}

/// The digest of the plan a run froze, `""` before it planned (what an approval must name).
pub fn frozen_digest(status: &MigrationRunStatus) -> String {
    status
        .frozen_plan
        .as_ref()
        .map(|f| f.digest.clone())
        .unwrap_or_default()
}

/// The fingerprint a run froze, rebuilt from its status; `None` for a run planned before
/// plans were frozen.
pub fn frozen(status: &MigrationRunStatus) -> Option<Fingerprint> {
    let plan = status.frozen_plan.as_ref()?;
    let actions = status
        .actions
        .iter()
        .map(|a| {
            Some(ActionDigest {
                index: a.index as usize,
                id: Some(a.id.clone()),
                digest: a.digest.clone()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Fingerprint {
        fields: [
            plan.release_version.clone(),
            plan.secret_files.clone(),
            plan.object_store.clone(),
            plan.actions_skip.clone(),
        ],
        actions,
    })
}

/// The basis a run froze into `status`; `None` for a plan frozen before plans froze their
/// basis (its digest covered the declarations only).
pub fn frozen_basis(status: &MigrationRunStatus) -> Option<Basis> {
    let plan = status.frozen_plan.as_ref()?;
    plan.declarations_digest.as_ref()?;
    Some(Basis {
        installed_release: plan.installed_release.clone(),
        last_migrated_release: plan.last_migrated_release.clone(),
        footprints: plan
            .footprints
            .iter()
            .filter_map(|e| {
                Some(Footprint {
                    stage: e.stage?,
                    id: e.id.clone(),
                    tag: e.tag.clone(),
                    run_mode: e.run_mode.clone(),
                })
            })
            .collect(),
    })
}

/// `Some(why)` when the run has not started an action and what its plan was decided from is no
/// longer `current` (pure): the ledger's last migrated release or footprints, or
/// `installedRelease`, changed since it planned, or it was planned by a Stagehand whose digest
/// did not cover them. Such a run plans again; the declarations are
/// [`declarations_changed`]'s business.
pub fn basis_changed(
    status: &MigrationRunStatus,
    declarations: &Fingerprint,
    current: &Basis,
) -> Option<String> {
    let plan = status.frozen_plan.as_ref()?;
    if status.actions.iter().any(|a| a.start_time.is_some())
        || plan.digest == plan_digest(declarations, current)
    {
        return None;
    }
    Some(match frozen_basis(status) {
        None => "it was planned by an earlier Stagehand, whose plan digest did not cover the history and installedRelease the decisions were computed from".into(),
        Some(then) => current
            .first_change(&then)
            .unwrap_or_else(|| "what the plan was computed from changed".into()),
    })
}

/// How `current` differs from the fingerprint a run froze into `status` (its first change),
/// or `None` when it does not, or the run planned before plans were frozen.
fn difference(status: &MigrationRunStatus, current: &Fingerprint) -> Option<String> {
    let then = frozen(status)?;
    if then.digest() == current.digest() {
        return None;
    }
    Some(
        current
            .first_change(&then)
            .map_or_else(|| "the declarations changed".to_string(), |c| c.to_string()),
    )
}

/// `Some(message)` when the Migration's declarations for the run's stage are no longer the
/// ones the run planned.
pub fn declarations_changed(
    status: &MigrationRunStatus,
    current: &Fingerprint,
    generation: Option<i64>,
) -> Option<String> {
    let change = difference(status, current)?;
    let planned = status
        .frozen_plan
        .as_ref()
        .and_then(|p| p.migration_generation);
    let generations = match (planned, generation) {
        (Some(a), Some(b)) => format!(" (Migration generation {a} when planned, now {b})"),
        _ => String::new(),
    };
    Some(format!(
        "the Migration's declarations for this stage changed since the run planned them{generations}: {change}. Nothing more is applied; completed actions keep their status and footprints. Create a new MigrationRun to run the current declarations"
    ))
}

/// `Some(message)` when the Migration's pre-stage declarations (`current`) are no longer what
/// pre run `pre` froze (`status`, the pre run's): the post run would record the release with
/// a pre action outside every window for ever (pure). `None` for a pre run planned before
/// plans were frozen.
pub fn pre_run_outdated(
    pre: &str,
    status: &MigrationRunStatus,
    current: &Fingerprint,
) -> Option<String> {
    let change = difference(status, current)?;
    Some(format!(
        "the Migration's pre-stage declarations changed since pre run {pre} planned them: {change}. This post run applies nothing: create a new pre run (it plans the current pre stage) and a new post run of the release"
    ))
}

/// What the freeze step produced: the stage's plan and the actions still to run.
#[derive(Debug)]
pub struct Planned {
    /// The plan of the run's stage, from the current declarations.
    pub plan: Plan,
    /// The actions still to run (decision `Run`), each with its position in
    /// `status.actions`.
    pub prepared: Vec<(usize, Prepared)>,
}

/// The freeze step: on the first pass, a post run's pre stage checked against its pre run,
/// the finalizer taken, the plan frozen and written; on later passes, the plan checked
/// against the current declarations.
pub(super) async fn step(
    r: &mut Reconcile,
    migration: &Migration,
    assessed: &Assessed,
) -> Step<Planned> {
    let stage = r.run.spec.stage;
    let declarations = &assessed.assessment.declarations;
    let context = &assessed.assessment.context;
    let plan = plan_stage(declarations, stage, context);
    let fingerprint = declarations.fingerprint(stage);
    let basis = Basis::of(declarations, stage, context);
    let first_pass = r.status.start_time.is_none();
    if first_pass
        && stage == Stage::Post
        && let Some(message) = outdated_pre_run(r, &declarations.fingerprint(Stage::Pre)).await?
    {
        return r.stop(Phase::PreRunOutdated(message)).await;
    }
    // A started run holds its deletion back until its action stopped; taken under the version
    // this reconcile read, it also proves that version the newest.
    if let Some(version) = finalizer::hold(
        &r.runs,
        &r.run.name_any(),
        r.run.metadata.finalizers.as_deref(),
        r.unconfirmed_version.as_deref(),
    )
    .await?
    {
        r.holds_finalizer = true;
        r.unconfirmed_version = Some(version);
    }
    if first_pass {
        let (actions, frozen) = freeze(&plan, &fingerprint, &basis, migration.metadata.generation);
        r.status.start_time = Some(now());
        r.status.last_migrated_release = basis.last_migrated_release.clone();
        r.status.actions = actions;
        r.status.frozen_plan = Some(frozen);
        r.write(&Phase::Running("planned".into())).await?;
        report_skips(r).await;
        info!(actions = r.status.actions.len(), "planned");
    } else if r.status.frozen_plan.is_none() {
        // Planned by a Stagehand that did not freeze plans: freeze what is declared now.
        let (actions, frozen) = freeze(&plan, &fingerprint, &basis, migration.metadata.generation);
        for (entry, planned) in r.status.actions.iter_mut().zip(actions) {
            if entry.index == planned.index {
                entry.digest = planned.digest;
            }
        }
        r.status.frozen_plan = Some(frozen);
    } else if let Some(message) =
        declarations_changed(&r.status, &fingerprint, migration.metadata.generation)
    {
        return r.stop(Phase::DeclarationsChanged(message)).await;
    } else if let Some(why) = basis_changed(&r.status, &fingerprint, &basis) {
        // Nothing applied yet: the plan is decided again from what is recorded now, under a
        // new digest (an approval of the old one approves nothing).
        let was = frozen_digest(&r.status);
        let (actions, frozen) = freeze(&plan, &fingerprint, &basis, migration.metadata.generation);
        let message = format!(
            "planned again before its first action: {why}; its plan is now {} (was {was})",
            frozen.digest
        );
        r.status.last_migrated_release = basis.last_migrated_release.clone();
        r.status.actions = actions;
        r.status.frozen_plan = Some(frozen);
        r.write(&Phase::Running(message.clone())).await?;
        r.event(EventType::Normal, "Replanned", message.clone())
            .await;
        info!(%message, "planned again");
    }
    match prepare(&r.status, &plan) {
        Ok(prepared) => Ok(ControlFlow::Continue(Planned { plan, prepared })),
        Err(message) => r.stop(Phase::Failed(message)).await,
    }
}

/// A post run's pre run, read whole (the view keeps a finished run without its plan), checked
/// against the current pre-stage declarations.
async fn outdated_pre_run(r: &Reconcile, current: &Fingerprint) -> Result<Option<String>, Error> {
    let PreRun::Succeeded(pre) = pre_run_of(&r.run, &r.siblings) else {
        return Ok(None);
    };
    let name = pre.name_any();
    let pre = r.runs.get_opt(&name).await.map_err(|source| Error::Read {
        context: format!("reading the pre run {name}"),
        source,
    })?;
    Ok(pre
        .and_then(|p| p.status)
        .and_then(|status| pre_run_outdated(&name, &status, current)))
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
        r.context
            .metrics
            .action_finished(&run_ref(&r.run), &a.id, "skipped", 0.0);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stagehand_config::{Declarations, Deployment, Footprint, Release, Stage, plan_stage};

    fn declarations(ldap_dry_run: bool, skip_post: bool) -> Declarations {
        let spec = json!({
            "releaseVersion": "v1.18.0",
            "actions": {
                "pre": [
                    {"id": "workload_scale", "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"},
                     "config": {"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0}}},
                    {"id": "ldap_entryuuid_to_object_identifier", "tag": "v1.18.0", "runMode": "apply",
                     "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"},
                     "config": {"dryRun": ldap_dry_run}}
                ],
                "post": []
            },
            "actionsSkip": {"pre": [], "post": if skip_post { json!([{"id": "x"}]) } else { json!([]) }},
            "suspend": skip_post,
        });
        Declarations::from_spec(&spec).unwrap_or_default()
    }

    fn deployment(last: &str, history: Vec<Footprint>) -> Deployment {
        Deployment {
            last_migrated: Release::parse(last).ok(),
            history,
        }
    }

    fn planned(d: &Declarations) -> MigrationRunStatus {
        planned_in(d, &deployment("v1.17.3", Vec::new()))
    }

    fn planned_in(d: &Declarations, context: &Deployment) -> MigrationRunStatus {
        let plan = plan_stage(d, Stage::Pre, context);
        let basis = Basis::of(d, Stage::Pre, context);
        let (actions, frozen_plan) = freeze(&plan, &d.fingerprint(Stage::Pre), &basis, Some(4));
        MigrationRunStatus {
            actions,
            frozen_plan: Some(frozen_plan),
            ..MigrationRunStatus::default()
        }
    }

    #[test]
    fn the_plan_records_generation_and_digests() {
        let d = declarations(false, false);
        let status = planned(&d);
        assert_eq!(status.actions.len(), 2);
        assert!(status.actions.iter().all(|a| {
            a.digest
                .as_deref()
                .is_some_and(|x| x.starts_with("sha256:"))
        }));
        assert_eq!(
            status
                .frozen_plan
                .as_ref()
                .and_then(|p| p.migration_generation),
            Some(4)
        );
        assert_eq!(frozen(&status), Some(d.fingerprint(Stage::Pre)));
        assert_eq!(
            declarations_changed(&status, &d.fingerprint(Stage::Pre), Some(4)),
            None
        );
    }

    #[test]
    fn a_changed_config_is_named_and_other_stage_changes_are_not() {
        let status = planned(&declarations(false, false));
        let changed = declarations(true, false);
        let message = declarations_changed(&status, &changed.fingerprint(Stage::Pre), Some(5));
        assert!(
            message.as_deref().is_some_and(|m| m.contains("(Migration generation 4 when planned, now 5): action 1 ldap_entryuuid_to_object_identifier was changed")),
            "{message:?}"
        );
        // The post stage's opt-outs and suspend are not part of the pre stage's plan.
        let other = declarations(false, true);
        assert_eq!(
            declarations_changed(&status, &other.fingerprint(Stage::Pre), Some(6)),
            None
        );
        assert!(declarations_changed(&status, &other.fingerprint(Stage::Post), Some(6)).is_some());
    }

    /// The ledger's footprint of the `ldap_entryuuid_to_object_identifier` declaration.
    fn ldap_print() -> Footprint {
        Footprint {
            stage: Stage::Pre,
            id: "ldap_entryuuid_to_object_identifier".into(),
            tag: Some("v1.18.0".into()),
            run_mode: Some("apply".into()),
        }
    }

    #[test]
    fn a_plan_whose_history_changed_before_its_first_action_plans_again() {
        let d = declarations(false, false);
        let status = planned(&d);
        let print = d.fingerprint(Stage::Pre);
        let basis = |c: &Deployment| Basis::of(&d, Stage::Pre, c);
        let same = deployment("v1.17.3", Vec::new());
        assert_eq!(basis_changed(&status, &print, &basis(&same)), None);
        // The footprint recorded since: the action it decides would now be skipped.
        let recorded = deployment("v1.17.3", vec![ldap_print()]);
        assert_eq!(
            basis_changed(&status, &print, &basis(&recorded)).as_deref(),
            Some(
                "the footprint pre ldap_entryuuid_to_object_identifier v1.18.0 apply is now recorded in the history"
            )
        );
        // The ledger's release edited.
        assert_eq!(
            basis_changed(&status, &print, &basis(&deployment("v1.16.2", Vec::new()))).as_deref(),
            Some("the last migrated release changed from v1.17.3 to v1.16.2")
        );
        // Planned with the footprint, then it is gone.
        let with = planned_in(&d, &recorded);
        assert_eq!(with.actions[1].reason, "FootprintRecorded");
        assert_ne!(
            with.frozen_plan.as_ref().map(|f| &f.digest),
            status.frozen_plan.as_ref().map(|f| &f.digest)
        );
        assert!(
            basis_changed(&with, &print, &basis(&same))
                .is_some_and(|m| m.contains("is no longer recorded")),
        );
        // A footprint of another action, or of the other stage, decides nothing here.
        let unrelated = deployment(
            "v1.17.3",
            vec![Footprint {
                stage: Stage::Post,
                ..ldap_print()
            }],
        );
        assert_eq!(basis_changed(&status, &print, &basis(&unrelated)), None);
        // Once an action started, its own footprints change the history: not judged.
        let mut started = status.clone();
        started.actions[0].start_time = Some("2026-12-01T10:00:00Z".into());
        assert_eq!(basis_changed(&started, &print, &basis(&recorded)), None);
        // A plan frozen by an earlier Stagehand (its digest over the declarations only).
        let mut old = status.clone();
        if let Some(f) = old.frozen_plan.as_mut() {
            f.digest = print.digest();
            f.declarations_digest = None;
        }
        assert!(
            basis_changed(&old, &print, &basis(&same))
                .is_some_and(|m| m.contains("planned by an earlier Stagehand"))
        );
        // ... whose declarations are still judged as before.
        assert_eq!(declarations_changed(&old, &print, Some(4)), None);
    }

    #[test]
    fn a_run_planned_before_freezing_is_not_judged() {
        let mut status = planned(&declarations(false, false));
        status.frozen_plan = None;
        assert_eq!(frozen(&status), None);
        assert_eq!(
            declarations_changed(
                &status,
                &declarations(true, false).fingerprint(Stage::Pre),
                None
            ),
            None
        );
    }
    #[test]
    fn a_post_run_names_how_the_pre_stage_changed_since_its_pre_run() {
        let pre = planned(&declarations(false, false));
        let same = declarations(false, false);
        assert_eq!(
            pre_run_outdated("opendesk-pre", &pre, &same.fingerprint(Stage::Pre)),
            None
        );
        let changed = declarations(true, false);
        let message = pre_run_outdated("opendesk-pre", &pre, &changed.fingerprint(Stage::Pre))
            .unwrap_or_default();
        assert!(
            message.starts_with("the Migration's pre-stage declarations changed since pre run opendesk-pre planned them: action 1 ldap_entryuuid_to_object_identifier was changed"),
            "{message}"
        );
        // An opt-out of the post stage is not the pre stage's business.
        let post_skip = declarations(false, true);
        assert_eq!(
            pre_run_outdated("opendesk-pre", &pre, &post_skip.fingerprint(Stage::Pre)),
            None
        );
    }
}
