//! What every subcommand prints with: the output formats, the exit codes (SPEC 6a: 0 success
//! or valid, 1 invalid or `PENDING`, 2 usage error or unreadable input) and the printers the
//! commands share (JSON, validation findings, the plan table).

use clap::ValueEnum;
use serde::Serialize;
use stagehand_config::Report;

/// Exit code: success, valid declarations.
pub const EXIT_OK: u8 = 0;
/// Exit code: the declarations are invalid (every problem printed).
pub const EXIT_INVALID: u8 = 1;
/// Exit code: usage error or unreadable input.
pub const EXIT_USAGE: u8 = 2;

/// Output formats of the offline commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// The machine-readable contract of SPEC 6a.
    Json,
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

/// One row of the plan table; `decision` is printed as it serializes (`run`, `Skipped`...).
pub fn plan_row(
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

/// The plan table's rows of planned actions.
pub fn plan_rows(actions: &[stagehand_config::PlannedAction]) -> Vec<[String; 6]> {
    actions
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
        .collect()
}

/// Prints plan rows (index, id, tag, runMode, decision, reason) under the plan table's header,
/// columns aligned: the offline `plan` and `approve` print plans alike.
pub fn print_plan_rows(rows: &[[String; 6]]) {
    for line in plan_lines(rows) {
        println!("{line}");
    }
}

/// The lines [`print_plan_rows`] prints (header first), for a caller printing elsewhere.
pub fn plan_lines(rows: &[[String; 6]]) -> Vec<String> {
    let header = ["INDEX", "ID", "TAG", "RUNMODE", "DECISION", "REASON"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    std::iter::once(&header)
        .chain(rows)
        .map(|row| {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            line.join("  ").trim_end().to_string()
        })
        .collect()
}
