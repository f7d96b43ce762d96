//! Step 3, `plan` (pure): the plan of the stage, frozen into the run's status with the
//! Migration's generation and a digest of every declaration, and the check that the Migration
//! still declares what the run planned before each action starts (and on resume).

use stagehand_config::fingerprint::ActionDigest;
use stagehand_config::{Decision, Fingerprint, Plan};
use stagehand_crds::unversioned::{ActionDecision, ActionStatus, FrozenPlan, MigrationRunStatus};

/// The reason of an action the run planned to run.
pub const IN_WINDOW: &str = "InWindow";

/// The status entries of a new plan, and what it froze.
pub fn freeze(
    plan: &Plan,
    fingerprint: &Fingerprint,
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
        })
        .collect();
    let [release_version, secret_files, object_store, actions_skip] = fingerprint.fields.clone();
    let frozen = FrozenPlan {
        migration_generation: generation,
        digest: fingerprint.digest(),
        release_version,
        secret_files,
        object_store,
        actions_skip,
    };
    (actions, frozen)
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

/// `Some(message)` when the Migration's declarations for the run's stage are no longer the
/// ones the run planned.
pub fn declarations_changed(
    status: &MigrationRunStatus,
    current: &Fingerprint,
    generation: Option<i64>,
) -> Option<String> {
    let plan = status.frozen_plan.as_ref()?;
    if plan.digest == current.digest() {
        return None;
    }
    let then = frozen(status)?;
    let change = current
        .first_change(&then)
        .map_or_else(|| "the declarations changed".to_string(), |c| c.to_string());
    let generations = match (plan.migration_generation, generation) {
        (Some(a), Some(b)) => format!(" (Migration generation {a} when planned, now {b})"),
        _ => String::new(),
    };
    Some(format!(
        "the Migration's declarations for this stage changed since the run planned them{generations}: {change}. Nothing more is applied; completed actions keep their status and footprints. Create a new MigrationRun to run the current declarations"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stagehand_config::{Declarations, Deployment, Release, Stage, plan_stage};

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

    fn planned(d: &Declarations) -> MigrationRunStatus {
        let context = Deployment {
            last_migrated: Release::parse("v1.17.3").ok(),
            history: Vec::new(),
        };
        let plan = plan_stage(d, Stage::Pre, &context);
        let (actions, frozen_plan) = freeze(&plan, &d.fingerprint(Stage::Pre), Some(4));
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
}
