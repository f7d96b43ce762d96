//! `stagehand plan`: validates, then prints the decision for every declared action of a stage.

use std::path::Path;

use serde::Serialize;
use stagehand_config::{PlannedAction, Problem, Stage, Warning, plan_stage};

use super::manifest::load_validated;
use super::output::{Output, exit_code, plan_rows, print_json, print_plan_rows, print_text};

/// The JSON contract of `plan -o json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanJson<'a> {
    /// The stage planned.
    pub stage: Stage,
    /// The last migrated release the plan is for (null: fresh installation).
    pub last_migrated_release: Option<String>,
    /// No release recorded and no installedRelease.
    pub fresh_installation: bool,
    /// Every problem (the plan is empty when there is one).
    pub problems: &'a [Problem],
    /// Every warning.
    pub warnings: &'a [Warning],
    /// The decision per declared action, in order.
    pub actions: &'a [PlannedAction],
}

/// Runs `plan` and returns the exit code.
pub fn run(path: &Path, stage: Stage, last_migrated: Option<&str>, output: Output) -> u8 {
    let (loaded, report) = match load_validated("plan", path, last_migrated) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let actions = if report.is_valid() {
        plan_stage(&loaded.declarations, stage, &loaded.context).actions
    } else {
        Vec::new()
    };
    let last = loaded
        .context
        .last_migrated
        .as_ref()
        .map(ToString::to_string);
    match output {
        Output::Json => print_json(&PlanJson {
            stage,
            last_migrated_release: last,
            fresh_installation: loaded.context.is_fresh_installation(),
            problems: &report.problems,
            warnings: &report.warnings,
            actions: &actions,
        }),
        Output::Text => {
            if !report.is_valid() || !report.warnings.is_empty() {
                print_text(&loaded.file, &report);
            }
            if report.is_valid() {
                let release = loaded
                    .declarations
                    .release_version
                    .as_ref()
                    .map_or_else(|| "?".into(), ToString::to_string);
                let last = last.unwrap_or_else(|| "none (fresh installation)".into());
                println!("stage {stage} of release {release}, last migrated release {last}");
                print_table(&actions);
            }
        }
    }
    exit_code(&report)
}

fn print_table(actions: &[PlannedAction]) {
    print_plan_rows(&plan_rows(actions));
}
