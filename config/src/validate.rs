//! Validation of both stages, collecting every problem (docs/design.md#validation).

use crate::declarations::{Declarations, StageDeclarations};
use crate::deployment::Deployment;
use crate::plan::opted_out;
use crate::problems::{Problem, ProblemCode, Warning, WarningCode};
use crate::vocabulary::{ActionCatalog, HandoverRole, Needs, Stage};

/// Everything validation found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Problems: any of them fails the run before any action runs.
    pub problems: Vec<Problem>,
    /// Warnings: logged, nothing fails.
    pub warnings: Vec<Warning>,
}

impl Report {
    /// No problems (warnings allowed).
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Validates the declarations of both stages against the library and the deployment.
pub fn validate(
    declarations: &Declarations,
    context: &Deployment,
    catalog: &dyn ActionCatalog,
) -> Report {
    let mut report = Report {
        problems: declarations.problems.clone(),
        warnings: Vec::new(),
    };
    for stage in Stage::ALL {
        let decls = declarations.stage(stage);
        check_actions(stage, decls, context, catalog, &mut report.problems);
        check_skips(stage, declarations, &mut report);
        check_duplicate_footprints(stage, decls, &mut report.problems);
    }
    check_needs(declarations, catalog, &mut report.problems);
    report.problems.sort_by_key(document_order);
    report.warnings.sort_by_key(document_order);
    report
}

fn check_actions(
    stage: Stage,
    decls: &StageDeclarations,
    context: &Deployment,
    catalog: &dyn ActionCatalog,
    problems: &mut Vec<Problem>,
) {
    for d in &decls.actions {
        let id = d.id.as_deref();
        if let Some(id) = id {
            match catalog.config_issues(id, &d.config) {
                None => problems.push(Problem::at(
                    ProblemCode::UnknownAction,
                    stage,
                    d.index,
                    Some(id),
                    "id",
                    format!("{id:?} is not an action of Stagehand's library (see docs/actions.md)"),
                )),
                Some(issues) => problems.extend(issues.into_iter().map(|issue| {
                    let field = if issue.path.is_empty() {
                        "config".to_string()
                    } else {
                        format!("config.{}", issue.path)
                    };
                    Problem::at(
                        ProblemCode::InvalidConfig,
                        stage,
                        d.index,
                        Some(id),
                        field,
                        issue.message,
                    )
                })),
            }
        }
        if let (Some(minimum), Some(from)) = (d.minimum, d.from)
            && from.start() < minimum.start()
        {
            problems.push(Problem::at(
                ProblemCode::FromBelowMinimum,
                stage,
                d.index,
                id,
                "versions.from",
                format!(
                    "from {from} starts at {} which is below minimum {minimum} ({})",
                    from.start(),
                    minimum.start()
                ),
            ));
        }
        if let (Some(from), Some(to)) = (d.from, d.to)
            && to.ends_before(&from)
        {
            problems.push(Problem::at(
                ProblemCode::ToBeforeFrom,
                stage,
                d.index,
                id,
                "versions.to",
                format!(
                    "to {to} ends before from {from} begins ({}): the window is empty",
                    from.start()
                ),
            ));
        }
        if let (Some(minimum), Some(last)) = (d.minimum, context.last_migrated.as_ref())
            && *last < minimum.start()
        {
            problems.push(Problem::at(
                ProblemCode::BelowMinimum,
                stage,
                d.index,
                id,
                "versions.minimum",
                format!(
                    "the last migrated release {last} is older than this action's minimum {minimum}: upgrade through the releases in between first (mandatory upgrade path)"
                ),
            ));
        }
    }
}

fn check_skips(stage: Stage, declarations: &Declarations, report: &mut Report) {
    let decls = declarations.stage(stage);
    for skip in &decls.skips {
        let Some(id) = skip.id.as_deref() else {
            continue;
        };
        let same_id: Vec<_> = decls
            .actions
            .iter()
            .filter(|d| d.id.as_deref() == Some(id))
            .collect();
        let other = match stage {
            Stage::Pre => Stage::Post,
            Stage::Post => Stage::Pre,
        };
        let elsewhere = declarations
            .stage(other)
            .actions
            .iter()
            .find(|d| d.id.as_deref() == Some(id));
        if same_id.is_empty()
            && let Some(declared) = elsewhere
        {
            report.problems.push(Problem::at(
                ProblemCode::SkipInWrongStage,
                stage,
                skip.index,
                Some(id),
                "actionsSkip.id",
                format!(
                    "the {stage} stage declares no action {id:?}, the {other} stage does (actions.{other}[{}]): this opt-out skips nothing and {id} would run; move it to actionsSkip.{other}",
                    declared.index
                ),
            ));
        } else if same_id.is_empty() {
            report.warnings.push(Warning::at(
                WarningCode::SkipMatchesNothing,
                stage,
                skip.index,
                Some(id),
                "actionsSkip.id",
                format!("the {stage} stage declares no action {id:?}: this opt-out matches nothing (its release may be behind you)"),
            ));
        } else if !same_id.iter().any(|d| d.tag == skip.tag) {
            let declared: Vec<String> =
                same_id.iter().map(|d| tag_text(d.tag.as_deref())).collect();
            report.problems.push(Problem::at(
                ProblemCode::MistypedSkip,
                stage,
                skip.index,
                Some(id),
                "actionsSkip.tag",
                format!(
                    "the opt-out names {id:?} with {} but the {stage} stage declares it with {}: fix the tag, or the action you meant to skip would run",
                    tag_text(skip.tag.as_deref()),
                    declared.join(", ")
                ),
            ));
        }
    }
}

/// Two tagged declarations of one stage with the same footprint `(stage, id, tag, runMode)`
/// (untagged ones record none): each later one is reported, naming the first.
fn check_duplicate_footprints(
    stage: Stage,
    decls: &StageDeclarations,
    problems: &mut Vec<Problem>,
) {
    for (n, d) in decls.actions.iter().enumerate() {
        let (Some(id), Some(tag)) = (d.id.as_deref(), d.tag.as_deref()) else {
            continue;
        };
        let Some(first) = decls.actions[..n].iter().find(|e| {
            e.id.as_deref() == Some(id) && e.tag.as_deref() == Some(tag) && e.run_mode == d.run_mode
        }) else {
            continue;
        };
        let run_mode = d.run_mode.as_deref().map_or_else(
            || "runMode (none)".to_string(),
            |m| format!("runMode {m:?}"),
        );
        problems.push(Problem::at(
            ProblemCode::DuplicateFootprint,
            stage,
            d.index,
            Some(id),
            "tag",
            format!(
                "{id} has the same id, tag {tag:?} and {run_mode} as actions.{stage}[{}], so both record one footprint: after the first succeeded, this one would be marked FootprintRecorded without running; give each a distinct tag or runMode, or merge them into one declaration",
                first.index
            ),
        ));
    }
}

/// What every declared action that is not opted out needs from the run, checked against the
/// declarations: its secret files listed, an object store for a handover (and its secret key
/// listed), the same handover key on both sides, and no pair that belongs together (a
/// handover's two sides, the catalog's [`ActionCatalog::pairs`]) opted out by half.
fn check_needs(
    declarations: &Declarations,
    catalog: &dyn ActionCatalog,
    problems: &mut Vec<Problem>,
) {
    struct Side<'a> {
        stage: Stage,
        index: usize,
        id: &'a str,
        key: String,
        role: HandoverRole,
        opted_out: bool,
    }
    /// One half of a pair that belongs together: `pair` `None` is the handover (its writer is
    /// the `first` half), `Some(n)` the catalog's n-th pair.
    struct Half<'a> {
        stage: Stage,
        index: usize,
        id: &'a str,
        pair: Option<usize>,
        first: bool,
        opted_out: bool,
    }
    let mut sides: Vec<Side<'_>> = Vec::new();
    let mut halves: Vec<Half<'_>> = Vec::new();
    for stage in Stage::ALL {
        let decls = declarations.stage(stage);
        for d in &decls.actions {
            let Some(id) = d.id.as_deref() else { continue };
            if !catalog
                .config_issues(id, &d.config)
                .is_some_and(|i| i.is_empty())
            {
                continue;
            }
            let Needs {
                secret_files,
                handover,
            } = catalog.needs(id, &d.config);
            let skipped = opted_out(d, decls);
            let hands_over = handover.is_some();
            for (n, pair) in catalog.pairs().iter().enumerate() {
                if let Some(position) = pair.iter().position(|p| *p == id) {
                    halves.push(Half {
                        stage,
                        index: d.index,
                        id,
                        pair: Some(n),
                        first: position == 0,
                        opted_out: skipped,
                    });
                }
            }
            if let Some(h) = handover {
                halves.push(Half {
                    stage,
                    index: d.index,
                    id,
                    pair: None,
                    first: h.role == HandoverRole::Writes,
                    opted_out: skipped,
                });
                sides.push(Side {
                    stage,
                    index: d.index,
                    id,
                    key: h.object_key.clone(),
                    role: h.role,
                    opted_out: skipped,
                });
            }
            if skipped {
                continue;
            }
            for file in secret_files {
                if !declarations.secret_files.contains(&file) {
                    problems.push(Problem::at(
                        ProblemCode::MissingSecretFile,
                        stage,
                        d.index,
                        Some(id),
                        "secretFiles",
                        format!(
                            "{id} reads the secret file {file:?} but secretFiles does not list it: add {{name: {file}, secret: {{name: <Secret>, key: <key>}}}} to secretFiles"
                        ),
                    ));
                }
            }
            if hands_over {
                match &declarations.object_store {
                    None => problems.push(Problem::at(
                        ProblemCode::MissingObjectStore,
                        stage,
                        d.index,
                        Some(id),
                        "objectStore",
                        format!(
                            "{id} hands work over between the stages in the object store, but the Migration declares no objectStore: set spec.objectStore (endpoint, bucket, accessKeyId, secretKeyFile)"
                        ),
                    )),
                    Some(store) => {
                        if let Some(file) = &store.secret_key_file
                            && !declarations.secret_files.contains(file)
                        {
                            problems.push(Problem::at(
                                ProblemCode::MissingSecretFile,
                                stage,
                                d.index,
                                Some(id),
                                "objectStore.secretKeyFile",
                                format!(
                                    "{id} uses the object store, whose secretKeyFile {file:?} is not listed in secretFiles: add it there"
                                ),
                            ));
                        }
                    }
                }
            }
        }
    }
    for side in &sides {
        let others: Vec<&Side<'_>> = sides.iter().filter(|o| o.role != side.role).collect();
        if side.role == HandoverRole::Reads {
            for writer in others.iter().filter(|w| !w.opted_out && !side.opted_out) {
                if writer.key != side.key {
                    problems.push(Problem::at(
                        ProblemCode::HandoverKeyMismatch,
                        side.stage,
                        side.index,
                        Some(side.id),
                        "config.handover.objectKey",
                        format!(
                            "{} reads the handover object {:?} but {} (actions.{}[{}]) writes {:?}: use the same handover.objectKey in both",
                            side.id, side.key, writer.id, writer.stage, writer.index, writer.key
                        ),
                    ));
                }
            }
        }
    }
    for half in &halves {
        let Some(other) = halves
            .iter()
            .find(|o| o.pair == half.pair && o.first != half.first && !o.opted_out)
            .filter(|_| half.opted_out)
        else {
            continue;
        };
        let relation = if half.pair.is_none() {
            "the other half of its handover"
        } else {
            "which belongs together with it (applying one without the other leaves a state the release cannot work with)"
        };
        problems.push(Problem::at(
            ProblemCode::HalfOptOut,
            half.stage,
            half.index,
            Some(half.id),
            "actionsSkip",
            format!(
                "{} is opted out but {} (actions.{}[{}]), {relation}, is not: opt out of both or of neither, or the migration is half applied",
                half.id, other.id, other.stage, other.index
            ),
        ));
    }
}

/// Spec fields first, then per stage the actions and then the opt-outs, each by index.
fn document_order<C>(f: &crate::problems::Finding<C>) -> (Option<Stage>, bool, Option<usize>) {
    let skip = f
        .field
        .as_deref()
        .is_some_and(|x| x.starts_with("actionsSkip."));
    (f.stage, skip, f.index)
}

/// `tag "v1.18.0"` or `no tag`.
pub(crate) fn tag_text(tag: Option<&str>) -> String {
    tag.map_or_else(|| "no tag".to_string(), |t| format!("tag {t:?}"))
}
