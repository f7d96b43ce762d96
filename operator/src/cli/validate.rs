//! `stagehand validate`: validates both stages offline.

use std::path::Path;

use serde::Serialize;
use stagehand_actions::Library;
use stagehand_config::{Problem, Report, Warning, validate};

use super::manifest::load;
use super::{EXIT_INVALID, EXIT_OK, EXIT_USAGE, Output};

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

/// Prints a value as one line of JSON.
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string(value) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("stagehand: cannot render JSON: {e}"),
    }
}

/// Prints findings as `FILE: error CODE: LOCATION: MESSAGE` lines and a summary.
pub fn print_text(file: &str, report: &Report) {
    for p in &report.problems {
        println!("{file}: error {}: {}: {}", p.code, p.location(), p.message);
    }
    for w in &report.warnings {
        println!(
            "{file}: warning {}: {}: {}",
            w.code,
            w.location(),
            w.message
        );
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if report.is_valid() {
        println!(
            "{file}: valid ({})",
            count(report.warnings.len(), "warning")
        );
    } else {
        println!(
            "{file}: invalid ({}, {})",
            count(report.problems.len(), "problem"),
            count(report.warnings.len(), "warning")
        );
    }
}
