//! `stagehand validate`: validates both stages offline.

use std::path::Path;

use serde::Serialize;
use stagehand_actions::Library;
use stagehand_config::{Problem, Warning, validate};

use super::manifest::load;
use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE, Output, print_json, print_text};

/// The JSON contract of `validate -o json`.
#[derive(Debug, Serialize)]
pub struct ValidateJson<'a> {
    /// No problems.
    pub valid: bool,
    /// Every problem.
    pub problems: &'a [Problem],
    /// Every warning.
    pub warnings: &'a [Warning],
}

/// Runs `validate` and returns the exit code.
pub fn run(path: &Path, last_migrated: Option<&str>, output: Output) -> u8 {
    let loaded = match load(path, last_migrated) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("stagehand validate: {e}");
            return EXIT_USAGE;
        }
    };
    let report = validate(&loaded.declarations, &loaded.context, &Library);
    match output {
        Output::Json => print_json(&ValidateJson {
            valid: report.is_valid(),
            problems: &report.problems,
            warnings: &report.warnings,
        }),
        Output::Text => print_text(&loaded.file, &report),
    }
    if report.is_valid() {
        EXIT_OK
    } else {
        EXIT_INVALID
    }
}
