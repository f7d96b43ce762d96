//! What every subcommand prints with: the output formats, the exit codes
//! (docs/design.md#the-command-line: 0 success or valid, 1 invalid or `PENDING`, 2 usage error or
//! unreadable input) and the printers the commands share (JSON, validation findings, the plan
//! table).

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
    /// The machine-readable contract of docs/cli.md.
    Json,
}

/// The exit code of a validation: 0 valid, 1 invalid.
pub fn exit_code(report: &Report) -> u8 {
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

/// The plan table's rows: per action its index, id, tag, runMode, decision and reason as its
/// JSON spells them (`-` for no tag or runMode), so that a plan made offline
/// ([`stagehand_config::PlannedAction`]: `run`, `skip`) and a run's status
/// ([`stagehand_crds::unversioned::ActionStatus`]: `Run`, `Skipped`...) print alike.
pub fn plan_rows<A: Serialize>(actions: &[A]) -> Vec<[String; 6]> {
    actions
        .iter()
        .map(|a| {
            let fields = serde_json::to_value(a).unwrap_or_default();
            ["index", "id", "tag", "runMode", "decision", "reason"].map(|k| match &fields[k] {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => "-".to_string(),
                other => other.to_string(),
            })
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagehand_config::{Decision, PlannedAction, Reason};
    use stagehand_crds::unversioned::ActionStatus;

    #[test]
    fn planned_and_recorded_actions_make_the_same_rows_but_for_the_decision() {
        let planned = PlannedAction {
            index: 3,
            id: "workload_scale".into(),
            tag: Some("v1.18.0".into()),
            run_mode: None,
            decision: Decision::Skip,
            reason: Reason::OptedOut,
            config: serde_json::Value::Null,
            digest: "sha256:x".into(),
        };
        let recorded: ActionStatus = serde_json::from_value(serde_json::json!({
            "index": 3, "id": "workload_scale", "tag": "v1.18.0", "decision": "Skipped",
            "reason": "OptedOut", "digest": "sha256:x"
        }))
        .unwrap();
        let row = |decision: &str| {
            ["3", "workload_scale", "v1.18.0", "-", decision, "OptedOut"].map(String::from)
        };
        assert_eq!(plan_rows(&[planned]), [row("skip")]);
        assert_eq!(plan_rows(&[recorded]), [row("Skipped")]);
        assert_eq!(
            plan_lines(&[row("skip")]),
            [
                "INDEX  ID              TAG      RUNMODE  DECISION  REASON",
                "3      workload_scale  v1.18.0  -        skip      OptedOut",
            ]
        );
    }
}
