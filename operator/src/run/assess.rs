//! Step 2, `assess`: is the deployment's history readable and complete, are the Migration's
//! declarations valid given it, and did no earlier upgrade stop between its stages? The
//! decisions are pure functions ([`assess`], the one both controllers use, so that a spec
//! that cannot be read at all is handled one way; [`history_incomplete`];
//! [`interrupted_upgrade`]); `step` reads the ledger around them.

use std::ops::ControlFlow;

use kube::ResourceExt;
use stagehand_actions::Library;
use stagehand_config::{
    AllowedEndpoints, Declarations, Deployment, Footprint, Problem, Recorded, Release, Stage,
    Warning, endpoint_problems, validate,
};
use stagehand_crds::unversioned::HistoryEntry;
use stagehand_crds::{ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION, Migration, MigrationRun};

use super::conditions::{Phase, bounded_problems};
use super::gate::{same_release, succeeded};
use super::history::History;
use super::ledger::Ledger;
use super::reconcile::{Reconcile, Step};

/// The declarations of a Migration that validated, with what the planner knows.
#[derive(Debug, Clone)]
pub struct Assessment {
    /// The declarations of both stages.
    pub declarations: Declarations,
    /// The last migrated release and the footprints.
    pub context: Deployment,
    /// Warnings (they fail nothing).
    pub warnings: Vec<Warning>,
}

/// Why the declarations cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Every problem found (empty when the spec could not be read at all).
    pub problems: Vec<Problem>,
    /// One line per problem, `<code> <location>: <message>`, for conditions and events.
    pub lines: Vec<String>,
    /// Warnings found alongside.
    pub warnings: Vec<Warning>,
}

impl Invalid {
    /// `N problem(s) in the declarations, nothing was executed: ...`.
    pub fn message(&self) -> String {
        format!(
            "{} problem(s) in the declarations, nothing was executed: {}",
            self.lines.len(),
            self.lines.join("; ")
        )
    }
}

/// What the ledger recorded, as the planner reads it.
pub fn recorded(ledger: &Ledger) -> Recorded {
    Recorded {
        last_migrated: ledger
            .last_migrated_release
            .as_deref()
            .and_then(|r| Release::parse(r).ok()),
        history: ledger.prints(),
        problems: Vec::new(),
    }
}

/// One line of a problem, as conditions and events show it.
pub fn problem_line(p: &Problem) -> String {
    format!("{} {}: {}", p.code, p.location(), p.message)
}

/// Validates the Migration's declarations of both stages against the library and the
/// recorded history, and the endpoints they name against the operator's `allowed` ones.
pub fn assess(
    migration: &Migration,
    ledger: &Ledger,
    allowed: &AllowedEndpoints,
) -> Result<Assessment, Invalid> {
    let unreadable = |message: String| Invalid {
        problems: Vec::new(),
        lines: vec![message],
        warnings: Vec::new(),
    };
    let spec = serde_json::to_value(&migration.spec)
        .map_err(|e| unreadable(format!("the spec cannot be read: {e}")))?;
    let declarations = Declarations::from_spec(&spec).map_err(|e| unreadable(e.to_string()))?;
    let recorded = recorded(ledger);
    let context = Deployment::new(&declarations, &recorded, None);
    let mut report = validate(&declarations, &context, &Library);
    report.problems.extend(endpoint_problems(
        &declarations,
        migration
            .spec
            .object_store
            .as_ref()
            .map(|store| store.endpoint.as_str()),
        &Library,
        &migration.namespace().unwrap_or_default(),
        allowed,
    ));
    if !report.is_valid() {
        return Err(Invalid {
            lines: report.problems.iter().map(problem_line).collect(),
            problems: report.problems,
            warnings: report.warnings,
        });
    }
    Ok(Assessment {
        declarations,
        context,
        warnings: report.warnings,
    })
}

impl Assessment {
    /// Whether `print` is recorded.
    pub fn recorded(&self, print: &Footprint) -> bool {
        self.context.history.contains(print)
    }
}

/// Footprints without a release: the history shows that actions ran, but neither the ledger's
/// `lastMigratedRelease` nor the Migration's `installedRelease` says from which release, so
/// the deployment is not a fresh installation and no window can be judged (pure). Fresh
/// means no footprint, no recorded release and no `installedRelease`.
pub fn history_incomplete(context: &Deployment, migration: &str) -> Option<String> {
    if context.last_migrated.is_some() || context.history.is_empty() {
        return None;
    }
    let first = &context.history[0];
    Some(format!(
        "the history of Migration {migration} holds {} footprint(s) (e.g. {} {} {}) but no release: neither the ledger's lastMigratedRelease nor spec.installedRelease is set, so this deployment is not a fresh installation and no action's window can be judged. Nothing was changed. Set spec.installedRelease on the Migration to the release the deployment runs now (`stagehand import-opendesk --installed-release`, docs/adopting-opendesk.md), then create a new MigrationRun",
        context.history.len(),
        first.stage,
        first.id,
        first.tag.as_deref().unwrap_or("(untagged)"),
    ))
}

/// An earlier upgrade that stopped between its stages, seen from a pre run of another
/// release (pure): a release N other than the run's, newer than the last migrated one `last`,
/// whose pre stage ran — a succeeded, non-dry pre run of N among `siblings`, or (the runs
/// gone: retention, an adopted deployment) a pre-stage footprint of N in `history` — and
/// whose post stage never recorded it. A footprint belongs to the release whose run recorded
/// it (its `release`), else (an entry that names none) to its tag: a pre-only run of the
/// release being deployed (openDesk's review: `migrations-pre` alone, dry run, then the
/// whole upgrade) records footprints of that release even when they carry an older tag, and
/// is no interruption. Judging the run's windows from the release before N would skip what
/// N's pre stage started. `None` when there is none, when the run is not a pre run, or when
/// the run accepts it ([`ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION`] naming N).
pub fn interrupted_upgrade(
    run: &MigrationRun,
    siblings: &[MigrationRun],
    last: Option<&Release>,
    history: &[HistoryEntry],
) -> Option<String> {
    if run.spec.stage != Stage::Pre {
        return None;
    }
    let last = last?;
    let current = Release::parse(&run.spec.release).ok()?;
    let unfinished = |n: &Release| n != &current && n > last;
    let from_runs = siblings
        .iter()
        .filter(|r| {
            r.spec.migration_ref == run.spec.migration_ref
                && r.spec.stage == Stage::Pre
                && !r.spec.dry_run
                && r.status.as_ref().is_some_and(succeeded)
        })
        .filter_map(|r| {
            Release::parse(&r.spec.release)
                .ok()
                .map(|n| (n, format!("pre run {} succeeded", r.name_any())))
        });
    let from_history = history
        .iter()
        .filter(|f| f.stage == Some(Stage::Pre))
        .filter_map(|f| {
            let n = Release::parse(f.release.as_deref().or(f.tag.as_deref())?).ok()?;
            Some((
                n,
                format!("the history records its pre-stage action {}", f.id),
            ))
        });
    let (n, evidence) = from_runs
        .chain(from_history)
        .filter(|(n, _)| unfinished(n))
        .min_by(|a, b| a.0.cmp(&b.0))?;
    let accepted = run
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION))
        .is_some_and(|v| same_release(v.trim(), &n.to_string()));
    if accepted {
        return None;
    }
    Some(format!(
        "the upgrade to release {n} is unfinished: its pre stage ran ({evidence}) but no post run of {n} recorded it (the last migrated release is {last}). Planning release {} now would judge its windows from {last} and skip what {n}'s pre stage started. Nothing was changed. Either finish {n}: apply the Migration of {n} and run its post stage (a new post run of {n}), or accept skipping it: annotate this run {ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION}={n} (docs/runbook.md, InterruptedUpgrade)",
        run.spec.release
    ))
}

/// What the assess step found: the ledger and the assessment of the declarations.
#[derive(Debug)]
pub struct Assessed {
    /// The Migration's history ledger.
    pub history: History,
    /// The valid declarations and what the planner knows.
    pub assessment: Assessment,
}

/// The assess step: the history first (the record of truth), then the declarations; on the
/// first pass, the history's completeness and (a pre run) no interrupted upgrade.
pub(super) async fn step(r: &mut Reconcile, migration: &Migration) -> Step<Assessed> {
    let history = History::of(&r.context.client, migration);
    let ledger = match history.ensure(migration.status.as_ref()).await {
        Ok(l) => l,
        Err(e) if e.is_unreadable() => {
            return r.stop(Phase::HistoryUnreadable(e.to_string())).await;
        }
        Err(e) => return Err(e.into()),
    };
    let assessment = match assess(migration, &ledger, r.context.tenancy.allowed_endpoints()) {
        Ok(a) => a,
        Err(invalid) => {
            r.status.problems = bounded_problems(&invalid.problems);
            return r.stop(Phase::Invalid(invalid.message())).await;
        }
    };
    let mut seed = migration.status.clone().unwrap_or_default();
    ledger.mirror_into(&mut seed);
    r.history_seed = Some(seed);
    if r.status.start_time.is_none() {
        if let Some(message) = history_incomplete(&assessment.context, &migration.name_any()) {
            return r.stop(Phase::HistoryIncomplete(message)).await;
        }
        if let Some(message) = interrupted_upgrade(
            &r.run,
            &r.siblings,
            assessment.context.last_migrated.as_ref(),
            &ledger.history(),
        ) {
            return r.stop(Phase::InterruptedUpgrade(message)).await;
        }
    }
    Ok(ControlFlow::Continue(Assessed {
        history,
        assessment,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagehand_crds::MigrationSpec;
    use stagehand_crds::unversioned::{ActionDeclaration, StageActions, VersionWindow};

    fn migration(actions: Vec<ActionDeclaration>) -> Migration {
        Migration::new(
            "opendesk",
            MigrationSpec {
                release_version: "v1.18.0".into(),
                installed_release: Some("v1.17.3".into()),
                actions: StageActions {
                    pre: actions,
                    post: Vec::new(),
                },
                ..MigrationSpec::default()
            },
        )
    }

    fn declaration(id: &str, config: serde_json::Value) -> ActionDeclaration {
        ActionDeclaration {
            id: id.into(),
            tag: Some("v1.18.0".into()),
            run_mode: None,
            versions: VersionWindow {
                minimum: "v1.15".into(),
                from: "v1.15".into(),
                to: "v1.17".into(),
            },
            config: config.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn valid_declarations_carry_the_ledger_release() {
        let m = migration(vec![declaration(
            "workload_scale",
            serde_json::json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0}}),
        )]);
        let ledger = Ledger {
            last_migrated_release: Some("v1.16.2".into()),
            ..Ledger::default()
        };
        let a = assess(&m, &ledger, &AllowedEndpoints::everything()).map_err(|e| e.message());
        assert_eq!(
            a.map(|a| a.context.last_migrated.map(|r| r.to_string())),
            Ok(Some("v1.16.2".into())),
            "the ledger's release wins over installedRelease"
        );
        let a = assess(&m, &Ledger::default(), &AllowedEndpoints::everything())
            .map_err(|e| e.message());
        assert_eq!(
            a.map(|a| a.context.last_migrated.map(|r| r.to_string())),
            Ok(Some("v1.17.3".into())),
            "installedRelease while the ledger holds no release"
        );
    }

    #[test]
    fn problems_are_all_listed() {
        let m = migration(vec![
            declaration("scale_everything", serde_json::json!({})),
            declaration(
                "provisioning_drop_subscriptions",
                serde_json::json!({"subscriptions": ["ox-connector"]}),
            ),
        ]);
        let Err(invalid) = assess(&m, &Ledger::default(), &AllowedEndpoints::everything()) else {
            panic!("must be invalid")
        };
        let codes: Vec<String> = invalid
            .problems
            .iter()
            .map(|p| p.code.to_string())
            .collect();
        assert_eq!(
            codes,
            ["UnknownAction", "MissingSecretFile"],
            "{}",
            invalid.message()
        );
        assert!(invalid.message().starts_with(
            "2 problem(s) in the declarations, nothing was executed: UnknownAction actions.pre[0]"
        ));
    }
    fn deployment(last: Option<&str>, prints: &[(Stage, &str, &str)]) -> Deployment {
        Deployment {
            last_migrated: last.and_then(|l| Release::parse(l).ok()),
            history: prints
                .iter()
                .map(|(stage, id, tag)| Footprint {
                    stage: *stage,
                    id: (*id).into(),
                    tag: Some((*tag).into()),
                    run_mode: None,
                })
                .collect(),
        }
    }

    fn pre_run(name: &str, release: &str, ok: Option<bool>) -> MigrationRun {
        let mut r = crate::testing::migration_run(name, Stage::Pre, release);
        if let Some(ok) = ok {
            r.status = Some(stagehand_crds::unversioned::MigrationRunStatus {
                conditions: vec![crate::testing::condition("Succeeded", ok, "x", "")],
                ..Default::default()
            });
        }
        r
    }

    #[test]
    fn footprints_without_a_release_are_not_a_fresh_installation() {
        let fresh = deployment(None, &[]);
        assert_eq!(history_incomplete(&fresh, "opendesk"), None);
        let adopted = deployment(
            None,
            &[(Stage::Pre, "functional_accounts_export", "v1.18.0")],
        );
        let message = history_incomplete(&adopted, "opendesk").unwrap_or_default();
        assert!(
            message.contains(
                "holds 1 footprint(s) (e.g. pre functional_accounts_export v1.18.0) but no release"
            ) && message.contains("Set spec.installedRelease"),
            "{message}"
        );
        let known = deployment(
            Some("v1.17.3"),
            &[(Stage::Pre, "functional_accounts_export", "v1.18.0")],
        );
        assert_eq!(history_incomplete(&known, "opendesk"), None);
    }

    fn v(release: &str) -> Option<Release> {
        Release::parse(release).ok()
    }

    /// History entries `(stage, id, tag, release of the run that recorded it)`.
    fn entries(prints: &[(Stage, &str, &str, Option<&str>)]) -> Vec<HistoryEntry> {
        prints
            .iter()
            .map(|(stage, id, tag, release)| HistoryEntry {
                stage: Some(*stage),
                id: (*id).into(),
                tag: Some((*tag).into()),
                release: release.map(Into::into),
                ..HistoryEntry::default()
            })
            .collect()
    }

    #[test]
    fn a_pre_run_after_an_unfinished_upgrade_is_stopped_unless_accepted() {
        let last = v("v1.17.3");
        let last = last.as_ref();
        let next = pre_run("opendesk-v1.19.0-pre", "v1.19.0", None);
        // v1.18.0's pre run succeeded, no post run of it recorded v1.18.0.
        let siblings = vec![pre_run("opendesk-v1.18.0-pre", "v1.18.0", Some(true))];
        let message = interrupted_upgrade(&next, &siblings, last, &[]).unwrap_or_default();
        assert!(
            message.starts_with("the upgrade to release v1.18.0 is unfinished: its pre stage ran (pre run opendesk-v1.18.0-pre succeeded)")
                && message.contains("accept-interrupted-upgrade=v1.18.0"),
            "{message}"
        );
        // Its runs gone: the history tells the same (an adopted entry names no release: its tag).
        let from_history = entries(&[(Stage::Pre, "functional_accounts_export", "v1.18.0", None)]);
        let message = interrupted_upgrade(&next, &[], last, &from_history).unwrap_or_default();
        assert!(
            message.contains("the history records its pre-stage action functional_accounts_export"),
            "{message}"
        );
        // Accepted, naming the release.
        let mut accepted = next.clone();
        accepted.metadata.annotations = Some(
            [(
                ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION.to_string(),
                "v1.18.0".to_string(),
            )]
            .into_iter()
            .collect(),
        );
        assert_eq!(interrupted_upgrade(&accepted, &siblings, last, &[]), None);
        // A pre run of the same release (openDesk's dry-run review) is no interruption.
        let again = pre_run("opendesk-v1.18.0-pre-2", "v1.18.0", None);
        assert_eq!(
            interrupted_upgrade(&again, &siblings, last, &from_history),
            None
        );
        // v1.18.0 recorded (its post stage ran): nothing unfinished.
        let done = v("v1.18.0");
        assert_eq!(
            interrupted_upgrade(&next, &siblings, done.as_ref(), &from_history),
            None
        );
        // A failed or dry pre run of v1.18.0 changed nothing to resume; a post-stage footprint
        // is not a pre stage.
        let mut dry = pre_run("review", "v1.18.0", Some(true));
        dry.spec.dry_run = true;
        assert_eq!(
            interrupted_upgrade(
                &next,
                &[pre_run("x", "v1.18.0", Some(false)), dry],
                last,
                &[]
            ),
            None
        );
        let post_only = entries(&[(Stage::Post, "ox_shared_accounts_import", "v1.18.0", None)]);
        assert_eq!(interrupted_upgrade(&next, &[], last, &post_only), None);
    }

    /// openDesk's review of v1.19.1 (its pre stage alone, the synapse action tagged v1.19.0 as a
    /// dry run; then, the option flipped, again; then the whole upgrade): the footprints carry
    /// the older tag v1.19.0 but were recorded by runs of v1.19.1, the release being deployed.
    /// A pre stage left by an older release's pre run stays an interrupted upgrade.
    #[test]
    fn a_pre_only_deployment_of_the_release_deployed_is_no_interrupted_upgrade() {
        let last = v("v1.18.2");
        let last = last.as_ref();
        let review = entries(&[
            (
                Stage::Pre,
                "synapse_deactivate_orphaned_users",
                "v1.19.0",
                Some("v1.19.1"),
            ),
            (Stage::Pre, "configmap_create", "v1.19.0", Some("v1.19.1")),
        ]);
        let flipped = pre_run("opendesk-v1.19.1-pre-apply", "v1.19.1", None);
        assert_eq!(
            interrupted_upgrade(&flipped, &[], last, &review),
            None,
            "a new pre run of the release whose pre stage ran alone"
        );
        let siblings = vec![pre_run("opendesk-v1.19.1-pre", "v1.19.1", Some(true))];
        assert_eq!(
            interrupted_upgrade(&flipped, &siblings, last, &review),
            None
        );
        let mut post = pre_run("opendesk-v1.19.1-post", "v1.19.1", None);
        post.spec.stage = Stage::Post;
        assert_eq!(interrupted_upgrade(&post, &siblings, last, &review), None);
        // The pre stage of v1.19.0 ran alone and the deployment now goes to v1.19.1.
        let older = entries(&[(
            Stage::Pre,
            "synapse_deactivate_orphaned_users",
            "v1.19.0",
            Some("v1.19.0"),
        )]);
        let message = interrupted_upgrade(&flipped, &[], last, &older).unwrap_or_default();
        assert!(
            message.starts_with("the upgrade to release v1.19.0 is unfinished")
                && message.contains("synapse_deactivate_orphaned_users"),
            "{message}"
        );
    }
}
