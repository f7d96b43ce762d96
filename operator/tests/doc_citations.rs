//! Docs that cannot drift: the rules the code cites are in the repository. Every citation of a
//! page of `docs/` — in the Rust sources of every crate (`docs/design.md#planning`), in the chart,
//! and every link between the Markdown pages (`[api.md](api.md#the-history-ledger)`) — names a
//! page that exists and, after `#`, a heading of that page (GitHub's anchor for it). And no source
//! cites "SPEC", a file the repository does not hold (docs/design.md states those rules).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files under `dir` (recursively; `target` and hidden folders left out) whose name ends
/// with one of `extensions`, as paths relative to the repository.
fn files(dir: &str, extensions: &[&str], out: &mut Vec<String>) {
    let full = root().join(dir);
    let Ok(entries) = std::fs::read_dir(&full) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = format!("{dir}/{name}");
        if entry.file_type().unwrap().is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(&path, extensions, out);
            }
        } else if extensions.iter().any(|ext| name.ends_with(ext)) {
            out.push(path);
        }
    }
}

/// The Rust sources of every crate, and the chart's templates.
fn sources() -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["actions", "config", "crds", "operator", "e2e"] {
        files(dir, &[".rs"], &mut out);
    }
    files("deploy", &[".yaml", ".tpl"], &mut out);
    assert!(out.len() > 100, "found only {} source files", out.len());
    out
}

/// The Markdown pages: README.md and everything under docs/.
fn pages() -> Vec<String> {
    let mut out = vec!["README.md".to_string()];
    files("docs", &[".md"], &mut out);
    out
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// GitHub's anchors of a page's headings (fenced code left out): lower case, every character
/// but letters, digits, `-`, `_` and spaces dropped, spaces become `-`; a repeated heading gets
/// `-1`, `-2`, ...
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let repeats = seen.iter().filter(|s| **s == slug).count();
        out.insert(if repeats == 0 {
            slug.clone()
        } else {
            format!("{slug}-{repeats}")
        });
        seen.push(slug);
    }
    out
}

/// Whether `page` (relative to the repository) exists and, when `anchor` is given, has a
/// heading with that anchor; `None` when it does, else what is wrong.
fn check(page: &str, anchor: Option<&str>) -> Option<String> {
    if !root().join(page).is_file() {
        return Some(format!("{page} does not exist"));
    }
    let anchor = anchor?;
    if anchors(&read(page)).contains(anchor) {
        None
    } else {
        Some(format!("{page} has no heading whose anchor is #{anchor}"))
    }
}

/// The citations `docs/<page>.md` and `docs/<page>.md#<anchor>` in `text`.
fn citations(text: &str) -> Vec<(String, Option<String>)> {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '.');
    let mut out = Vec::new();
    for (start, _) in text.match_indices("docs/") {
        if text[..start].ends_with(|c: char| word(c)) {
            continue;
        }
        let rest = &text[start..];
        let Some(end) = rest.find(".md") else {
            continue;
        };
        let page = &rest[..end + 3];
        if !page[5..end]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            continue;
        }
        let anchor = rest[end + 3..].strip_prefix('#').map(|after| {
            after
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
                .collect::<String>()
        });
        out.push((page.to_string(), anchor));
    }
    out
}

/// `path` with its `.` and `..` parts resolved, relative to the repository.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// The Markdown links to a page in `text` (a page of `dir`): `[..](page.md)`,
/// `[..](page.md#anchor)`, `[..](#anchor)`, as (page relative to the repository, anchor).
fn links(text: &str, dir: &str, this: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for (start, _) in text.match_indices("](") {
        let target = &text[start + 2..];
        let Some(end) = target.find(')') else {
            continue;
        };
        let target = &target[..end];
        if target.contains("://") || target.contains(' ') {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor.to_string())),
            None => (target, None),
        };
        if file.is_empty() {
            out.push((this.to_string(), anchor));
        } else if file.ends_with(".md") {
            out.push((normalize(&format!("{dir}/{file}")), anchor));
        }
    }
    out
}

#[test]
fn no_source_or_page_cites_the_spec_file() {
    let mut found = Vec::new();
    // This file names the word it looks for.
    let this = "operator/tests/doc_citations.rs";
    for path in sources().into_iter().chain(pages()).filter(|p| p != this) {
        for (n, line) in read(&path).lines().enumerate() {
            let cites = line.match_indices("SPEC").any(|(i, _)| {
                let before = line[..i].chars().next_back();
                let after = line[i + 4..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if cites {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "these lines cite SPEC, which is not in the repository; cite the page of docs/ that \
         holds the rule instead (docs/design.md states the design rules):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_docs_citation_in_the_sources_names_a_page_and_heading_that_exist() {
    let mut broken = Vec::new();
    let mut cited = 0;
    for path in sources() {
        for (page, anchor) in citations(&read(&path)) {
            cited += 1;
            if let Some(wrong) = check(&page, anchor.as_deref()) {
                broken.push(format!("{path}: {wrong}"));
            }
        }
    }
    assert!(
        cited >= 30,
        "found only {cited} citations of docs/ in the sources"
    );
    assert!(
        broken.is_empty(),
        "citations of docs/ that point nowhere (rename the heading back, or fix the citation):\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_link_between_the_pages_names_a_page_and_heading_that_exist() {
    let mut broken = Vec::new();
    let mut linked = 0;
    for path in pages() {
        let dir = Path::new(&path)
            .parent()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for (page, anchor) in links(&read(&path), &dir, &path) {
            linked += 1;
            if let Some(wrong) = check(&page, anchor.as_deref()) {
                broken.push(format!("{path}: {wrong}"));
            }
        }
    }
    assert!(linked >= 50, "found only {linked} links between the pages");
    assert!(
        broken.is_empty(),
        "links between the pages that point nowhere:\n{}",
        broken.join("\n")
    );
}

#[test]
fn anchors_are_githubs() {
    let page = "# Design rules\n## The API\n### A run executes what it planned\n\
                #### The Functional Accounts handover (`ox_functional_accounts_export`)\n\
                ```\n# not a heading\n```\n## Versions\n## Versions\n";
    let expected: BTreeSet<String> = [
        "design-rules",
        "the-api",
        "a-run-executes-what-it-planned",
        "the-functional-accounts-handover-ox_functional_accounts_export",
        "versions",
        "versions-1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(anchors(page), expected);
}

/// Every reason a run's or Migration's conditions carry has its page in docs/runbook.md, under
/// the anchor its `Stalled` message ends with.
#[test]
fn every_reason_has_its_runbook_page() {
    let runbook = anchors(&read("docs/runbook.md"));
    let missing: Vec<&str> = stagehand::run::conditions::REASONS
        .into_iter()
        .filter(|reason| {
            let page = stagehand::run::conditions::runbook_page(reason);
            let anchor = page.split_once('#').map(|(_, a)| a).unwrap_or_default();
            !runbook.contains(anchor)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "reasons without a page (a heading ### `Reason`) in docs/runbook.md: {missing:?}"
    );
}

/// Each alert of the chart's PrometheusRule links its own page of docs/runbook.md: its
/// `runbook_url` is `runbookUrl` with the anchor of the alert's name, a heading there.
#[test]
fn every_alert_links_its_own_runbook_page() {
    let template = read("deploy/charts/stagehand/templates/prometheusrule.yaml");
    let runbook = anchors(&read("docs/runbook.md"));
    let mut alerts = Vec::new();
    let mut current: Option<String> = None;
    for line in template.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(current.is_none(), "{current:?} has no runbook_url");
            current = Some(name.trim().to_string());
        } else if line.trim().starts_with("runbook_url:") {
            let alert = current.take().expect("a runbook_url outside an alert");
            let anchor = alert.to_ascii_lowercase();
            assert!(
                line.contains(&format!("\"%s#{anchor}\" $p.runbookUrl")),
                "{alert}: its runbook_url is not runbookUrl#{anchor}: {line}"
            );
            assert!(
                runbook.contains(&anchor),
                "{alert}: docs/runbook.md has no heading whose anchor is #{anchor}"
            );
            alerts.push(alert);
        }
    }
    assert!(current.is_none(), "{current:?} has no runbook_url");
    assert_eq!(alerts.len(), 5, "{alerts:?}");
}
