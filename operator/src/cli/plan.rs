//! `stagehand plan`: validates, then prints the decision for every declared action of a stage.

use std::path::Path;

use serde::Serialize;
use stagehand_actions::Library;
use stagehand_config::{PlannedAction, Problem, Stage, Warning, plan_stage, validate};

use super::manifest::load;
use super::validate::{print_json, print_text};
use super::{EXIT_INVALID, EXIT_OK, EXIT_USAGE, Output};

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
    let loaded = match load(path, last_migrated) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("stagehand plan: {e}");
            return EXIT_USAGE;
        }
    };
    let report = validate(&loaded.declarations, &loaded.context, &Library);
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
    if report.is_valid() {
        EXIT_OK
    } else {
        EXIT_INVALID
    }
}

fn print_table(actions: &[PlannedAction]) {
    let rows: Vec<[String; 6]> = actions
        .iter()
        .map(|a| {
            plan_row(
                a.index,
                &a.id,
                a.tag.as_deref(),
                a.run_mode.as_deref(),
                a.decision,
                a.reason.as_str(),
            )
        })
        .collect();
    print_plan_rows(&rows);
}

/// One row of the plan table; `decision` is printed as it serializes (`run`, `Skipped`...).
pub(crate) fn plan_row(
    index: impl ToString,
    id: &str,
    tag: Option<&str>,
    run_mode: Option<&str>,
    decision: impl serde::Serialize,
    reason: &str,
) -> [String; 6] {
    [
        index.to_string(),
        id.to_string(),
        tag.unwrap_or("-").to_string(),
        run_mode.unwrap_or("-").to_string(),
        serde_json::to_value(decision)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        reason.to_string(),
    ]
}

/// Prints plan rows (index, id, tag, runMode, decision, reason) under the plan table's header,
/// columns aligned: the offline `plan` and `approve` print plans alike.
pub(crate) fn print_plan_rows(rows: &[[String; 6]]) {
    let header = ["INDEX", "ID", "TAG", "RUNMODE", "DECISION", "REASON"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
