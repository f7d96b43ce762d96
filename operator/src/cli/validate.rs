//! `stagehand validate`: validates both stages offline.

use std::path::Path;

use serde::Serialize;
use stagehand_config::{Problem, Warning};

use super::manifest::load_validated;
use super::output::{Output, exit_code, print_json, print_text};

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
    let (loaded, report) = match load_validated("validate", path, last_migrated) {
        Ok(v) => v,
        Err(code) => return code,
    };
    match output {
        Output::Json => print_json(&ValidateJson {
            valid: report.is_valid(),
            problems: &report.problems,
            warnings: &report.warnings,
        }),
        Output::Text => print_text(&loaded.file, &report),
    }
    exit_code(&report)
}
