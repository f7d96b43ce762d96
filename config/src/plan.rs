//! The planning decision per declared action (docs/design.md#planning).

use serde::Serialize;

use crate::declarations::{Declaration, Declarations, StageDeclarations};
use crate::deployment::Deployment;
use crate::series::Window;
use crate::vocabulary::{Footprint, Stage};

/// Whether a declared action runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// It runs.
    Run,
    /// It does not; the reason says why.
    Skip,
}

/// Why an action runs or is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Reason {
    /// The last migrated release is inside the window (and no footprint stops it).
    InWindow,
    /// An `actionsSkip` entry matches stage, id and tag.
    OptedOut,
    /// The last migrated release is outside `[from, to]`.
    OutsideWindow,
    /// The action is tagged and its footprint is already recorded.
    FootprintRecorded,
    /// No release was ever migrated: a fresh installation runs no action.
    FreshInstallation,
}

impl Reason {
    /// The reason's name as status and JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InWindow => "InWindow",
            Reason::OptedOut => "OptedOut",
            Reason::OutsideWindow => "OutsideWindow",
            Reason::FootprintRecorded => "FootprintRecorded",
            Reason::FreshInstallation => "FreshInstallation",
        }
    }
}

/// The decision for one declared action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedAction {
    /// Its position in the stage.
    pub index: usize,
    /// The action id.
    pub id: String,
    /// The tag.
    pub tag: Option<String>,
    /// The runMode.
    pub run_mode: Option<String>,
    /// run or skip.
    pub decision: Decision,
    /// Why.
    pub reason: Reason,
    /// The declaration's config, which execution hands to the action.
    #[serde(skip)]
    pub config: serde_json::Value,
    /// The digest of the declaration as written, which the run freezes.
    #[serde(skip)]
    pub digest: String,
}

impl PlannedAction {
    /// The footprint the action records when it succeeds, if it is tagged.
    pub fn footprint(&self, stage: Stage) -> Option<Footprint> {
        self.tag.as_ref().map(|tag| Footprint {
            stage,
            id: self.id.clone(),
            tag: Some(tag.clone()),
            run_mode: self.run_mode.clone(),
        })
    }
}

/// The plan of one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The stage.
    pub stage: Stage,
    /// One decision per declared action, in order.
    pub actions: Vec<PlannedAction>,
}

/// Decides, in order, for each declared action of `stage`. Call it only on declarations that
/// validated: an action without id or window cannot be planned and is left out.
pub fn plan_stage(declarations: &Declarations, stage: Stage, context: &Deployment) -> Plan {
    let decls = declarations.stage(stage);
    let actions = decls
        .actions
        .iter()
        .filter_map(|d| {
            let id = d.id.clone()?;
            let window = Window {
                minimum: d.minimum?,
                from: d.from?,
                to: d.to?,
            };
            let (decision, reason) = decide(stage, d, &window, decls, context);
            Some(PlannedAction {
                index: d.index,
                id,
                tag: d.tag.clone(),
                run_mode: d.run_mode.clone(),
                decision,
                reason,
                config: d.config.clone(),
                digest: d.digest.clone(),
            })
        })
        .collect();
    Plan { stage, actions }
}

fn decide(
    stage: Stage,
    d: &Declaration,
    window: &Window,
    decls: &StageDeclarations,
    context: &Deployment,
) -> (Decision, Reason) {
    if opted_out(d, decls) {
        return (Decision::Skip, Reason::OptedOut);
    }
    let Some(last) = &context.last_migrated else {
        return (Decision::Skip, Reason::FreshInstallation);
    };
    if !window.includes(last) {
        return (Decision::Skip, Reason::OutsideWindow);
    }
    if let Some(footprint) = declared_footprint(stage, d)
        && context.history.contains(&footprint)
    {
        return (Decision::Skip, Reason::FootprintRecorded);
    }
    (Decision::Run, Reason::InWindow)
}

/// The footprint whose presence in the history skips the declaration `d` of `stage`
/// (`FootprintRecorded`): `(stage, id, tag, runMode)` exactly as declared. `None` for an
/// untagged declaration (its runMode gates nothing) or one without an id. This is the one
/// matcher of history to declarations: the planner and `stagehand import-opendesk` (which
/// lists the history entries it matches nowhere) both ask it.
pub fn declared_footprint(stage: Stage, d: &Declaration) -> Option<Footprint> {
    d.tag.as_ref()?;
    Some(Footprint {
        stage,
        id: d.id.clone()?,
        tag: d.tag.clone(),
        run_mode: d.run_mode.clone(),
    })
}

/// A skip entry matches stage, id and tag exactly, including the absence of a tag.
pub(crate) fn opted_out(d: &Declaration, decls: &StageDeclarations) -> bool {
    decls
        .skips
        .iter()
        .any(|s| s.id.is_some() && s.id == d.id && s.tag == d.tag)
}
