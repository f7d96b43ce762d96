//! The operator's metrics as docs/operator.md#metrics documents them, and the series a PromQL
//! expression reads: what the metrics, alert and dashboard tests compare.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The series of the table in docs/operator.md's `## Metrics` section, by the name PromQL
/// reads (a counter's with `_total`): name → (type, label names).
pub fn documented_series() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/operator.md");
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let Some(section) = doc.split("\n## Metrics\n").nth(1) else {
        panic!("docs/operator.md has no ## Metrics section");
    };
    let mut series = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `stagehand_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        let kind = cells[2].to_string();
        let labels = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        series.insert(name, (kind, labels));
    }
    assert!(
        series.len() >= 10,
        "the table of docs/operator.md#metrics was not found: {series:?}"
    );
    series
}

/// The `stagehand_` series a PromQL expression reads, a histogram's `_bucket`, `_sum` and
/// `_count` named by the histogram when `histograms` lists it.
pub fn promql_series(expr: &str, histograms: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("stagehand_") {
        let before = &rest[..at];
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let word = &tail[..end];
        // Part of a longer identifier (`my_stagehand_x`) or a label value: not a series.
        if !before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '"') {
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    word.strip_suffix(suffix)
                        .filter(|base| histograms.contains(*base))
                })
                .unwrap_or(word);
            out.insert(name.to_string());
        }
        rest = &tail[end..];
    }
    out
}
