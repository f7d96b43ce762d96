//! The deploy recipes of docs/gitops.md cannot drift from what the tests execute (issue 30).
//!
//! A recipe a user copies is a file under `deploy/gitops/<tool>/`; the end-to-end test of that
//! tool reads the file from the repository and executes it. docs/gitops.md shows it as a line
//! `<!-- recipe: deploy/gitops/<tool>/<file> -->` followed by a fenced code block, and:
//!
//! - the block is the file, byte for byte (trailing newlines aside);
//! - every deploy tool has a section (`## helmfile`, `## Helm 4`, `## Helm 3`, `## Flux`,
//!   `## Argo CD`) with at least one recipe and the sentence "Executed by `e2e/tests/<test>.rs`";
//! - each recipe of a section is read by one of the tests that section names (the test file
//!   mentions the recipe's path), so a recipe nobody executes fails here;
//! - every file under `deploy/gitops/` is shown in the docs or read by a test, and every recipe
//!   named in the docs is under `deploy/gitops/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const PAGE: &str = "docs/gitops.md";
const MARKER: &str = "<!-- recipe: ";

/// The tools whose recipes must be shown and executed: the start of their section's heading.
const TOOLS: [&str; 5] = ["helmfile", "Helm 4", "Helm 3", "Flux", "Argo CD"];

/// One recipe as the page shows it.
#[derive(Debug)]
struct Shown {
    path: String,
    block: String,
    /// The page's line number of the marker (1-based), for messages.
    line: usize,
    /// The `## ` heading the recipe is under.
    section: String,
}

/// A section of the page: its heading and the test files its "Executed by" sentences name.
#[derive(Debug, Default)]
struct Section {
    heading: String,
    tests: BTreeSet<String>,
}

/// Every `e2e/tests/*.rs` named in `text` right after "Executed by" (one sentence may name
/// several, joined by commas or "and").
fn executed_by(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("Executed by") {
        let rest = &text[i..];
        let end = rest
            .find(". ")
            .or_else(|| rest.find(".\n"))
            .unwrap_or(rest.len());
        for span in rest[..end].split('`').skip(1).step_by(2) {
            if span.starts_with("e2e/tests/") && span.ends_with(".rs") {
                out.insert(span.to_string());
            }
        }
    }
    out
}

/// Parses the page into its recipes and its `## ` sections; a malformed marker is an error.
fn parse(page: &str) -> Result<(Vec<Shown>, Vec<Section>), Vec<String>> {
    let lines: Vec<&str> = page.lines().collect();
    let mut shown = Vec::new();
    let mut sections: Vec<Section> = Vec::new();
    let mut section_text = String::new();
    let mut problems = Vec::new();
    let mut in_fence = false;
    let mut i = 0;
    let close = |sections: &mut Vec<Section>, text: &str| {
        if let Some(last) = sections.last_mut() {
            last.tests = executed_by(text);
        }
    };
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence && let Some(heading) = line.strip_prefix("## ") {
            close(&mut sections, &section_text);
            section_text.clear();
            sections.push(Section {
                heading: heading.trim().to_string(),
                ..Section::default()
            });
            i += 1;
            continue;
        }
        section_text.push_str(line);
        section_text.push('\n');
        let Some(rest) = line.trim().strip_prefix(MARKER) else {
            i += 1;
            continue;
        };
        let Some(path) = rest.strip_suffix("-->").map(str::trim) else {
            problems.push(format!(
                "{PAGE}:{}: a recipe marker must end with `-->`",
                i + 1
            ));
            i += 1;
            continue;
        };
        let fence = lines.get(i + 1).copied().unwrap_or_default();
        if !fence.starts_with("```") {
            problems.push(format!(
                "{PAGE}:{}: the recipe marker for {path} must be followed at once by a fenced code block",
                i + 1
            ));
            i += 1;
            continue;
        }
        let Some(len) = lines[i + 2..].iter().position(|l| l.starts_with("```")) else {
            problems.push(format!(
                "{PAGE}:{}: the code block of {path} is never closed",
                i + 2
            ));
            break;
        };
        shown.push(Shown {
            path: path.to_string(),
            block: lines[i + 2..i + 2 + len].join("\n"),
            line: i + 1,
            section: sections
                .last()
                .map(|s| s.heading.clone())
                .unwrap_or_default(),
        });
        for l in &lines[i + 1..i + 3 + len] {
            section_text.push_str(l);
            section_text.push('\n');
        }
        i += 3 + len;
    }
    close(&mut sections, &section_text);
    if problems.is_empty() {
        Ok((shown, sections))
    } else {
        Err(problems)
    }
}

/// The first line where `a` and `b` differ, for a message a reader can act on.
fn first_difference(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    for n in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(n), b.get(n));
        if x != y {
            return format!(
                "line {} of the recipe: the docs show {:?}, the file has {:?}",
                n + 1,
                x.unwrap_or(&"<nothing>"),
                y.unwrap_or(&"<nothing>")
            );
        }
    }
    "they differ only in whitespace at the end".to_string()
}

/// Every problem of the page against the tree, all at once.
fn problems(page: &str) -> Vec<String> {
    let (shown, sections) = match parse(page) {
        Ok(parsed) => parsed,
        Err(problems) => return problems,
    };
    let root = root();
    let mut problems = Vec::new();
    for recipe in &shown {
        if !recipe.path.starts_with("deploy/gitops/") {
            problems.push(format!(
                "{PAGE}:{}: recipe {} is not under deploy/gitops/",
                recipe.line, recipe.path
            ));
        }
        let Ok(file) = std::fs::read_to_string(root.join(&recipe.path)) else {
            problems.push(format!(
                "{PAGE}:{}: recipe {} does not exist",
                recipe.line, recipe.path
            ));
            continue;
        };
        if file.trim_end() != recipe.block.trim_end() {
            problems.push(format!(
                "{PAGE}:{}: the block shown differs from {}: {}",
                recipe.line,
                recipe.path,
                first_difference(&recipe.block, &file)
            ));
        }
        let Some(section) = sections.iter().find(|s| s.heading == recipe.section) else {
            problems.push(format!(
                "{PAGE}:{}: recipe {} is not under a `## ` section",
                recipe.line, recipe.path
            ));
            continue;
        };
        let executed = section.tests.iter().any(|test| {
            std::fs::read_to_string(root.join(test)).is_ok_and(|src| src.contains(&recipe.path))
        });
        if !executed {
            problems.push(format!(
                "{PAGE}:{}: recipe {} is read by none of the tests its section \"{}\" names as executing it ({:?})",
                recipe.line, recipe.path, section.heading, section.tests
            ));
        }
    }
    for section in &sections {
        for test in &section.tests {
            if !root.join(test).is_file() {
                problems.push(format!(
                    "{PAGE}: section \"{}\" says it is executed by {test}, which does not exist",
                    section.heading
                ));
            }
        }
    }
    for tool in TOOLS {
        // "## Flux" holds the recipe; "## Flux health checks" only the checks it uses.
        let candidates: Vec<&Section> = sections
            .iter()
            .filter(|s| s.heading.starts_with(tool))
            .collect();
        if candidates.is_empty() {
            problems.push(format!("{PAGE}: no section `## {tool}` with its recipe"));
        } else if !candidates.iter().any(|section| {
            shown.iter().any(|r| r.section == section.heading) && !section.tests.is_empty()
        }) {
            problems.push(format!(
                "{PAGE}: no section `## {tool}...` shows a recipe (`{MARKER}deploy/gitops/... -->` before a code block) and says which test executes it (\"Executed by `e2e/tests/<test>.rs`\")"
            ));
        }
    }
    problems
}

/// The files under `dir`, relative to the repository.
fn files(dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_recipe_shown_is_the_file_a_test_executes() {
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap();
    let problems = problems(&page);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_file_under_deploy_gitops_is_shown_or_read_by_a_test() {
    let page = std::fs::read_to_string(root().join(PAGE)).unwrap();
    let mut tests = Vec::new();
    files("e2e/tests", &mut tests);
    let sources: Vec<String> = tests
        .iter()
        .filter(|t| t.ends_with(".rs"))
        .map(|t| std::fs::read_to_string(root().join(t)).unwrap())
        .collect();
    let mut recipes = Vec::new();
    files("deploy/gitops", &mut recipes);
    assert!(!recipes.is_empty(), "deploy/gitops/ holds no recipe");
    let orphans: Vec<&String> = recipes
        .iter()
        .filter(|path| {
            // A file inside a chart or a folder the recipe names is read through that folder.
            let named = |s: &str| {
                Path::new(path.as_str())
                    .ancestors()
                    .take_while(|a| a.as_os_str() != "deploy/gitops")
                    .any(|a| s.contains(&*a.to_string_lossy()))
            };
            !named(&page) && !sources.iter().any(|src| named(src))
        })
        .collect();
    assert!(
        orphans.is_empty(),
        "files under deploy/gitops/ that neither docs/gitops.md shows nor a test reads: {orphans:?}"
    );
}

/// The checker itself: a block that differs, a recipe no test names, a missing section, a
/// marker without its block — each is reported, all at once.
#[test]
fn the_checker_reports_every_kind_of_drift() {
    let page = "## helmfile\n\nExecuted by `e2e/tests/no_such_test.rs`.\n\n\
        <!-- recipe: deploy/gitops/none.yaml -->\n```yaml\na: 1\n```\n\n\
        ## Helm 4\n\n<!-- recipe: deploy/gitops/other.yaml -->\ntext\n";
    let found = problems(page);
    assert!(
        found
            .iter()
            .any(|p| p.contains("must be followed at once by a fenced code block")),
        "{found:?}"
    );
    let page = "## helmfile\n\nExecuted by `e2e/tests/no_such_test.rs`.\n\n\
        <!-- recipe: deploy/gitops/none.yaml -->\n```yaml\na: 1\n```\n";
    let found = problems(page);
    let mut expected = vec![
        "recipe deploy/gitops/none.yaml does not exist".to_string(),
        "executed by e2e/tests/no_such_test.rs, which does not exist".to_string(),
    ];
    expected.extend(
        TOOLS
            .iter()
            .filter(|t| !t.starts_with("helmfile"))
            .map(|t| format!("no section `## {t}`")),
    );
    for expected in expected {
        assert!(
            found.iter().any(|p| p.contains(&expected)),
            "expected {expected:?} in {found:?}"
        );
    }
    assert_eq!(
        first_difference("a\nb\nc", "a\nx\nc"),
        "line 2 of the recipe: the docs show \"b\", the file has \"x\""
    );
    assert_eq!(
        executed_by("Executed by `e2e/tests/a.rs` and `e2e/tests/b.rs`. Not `e2e/tests/c.rs`."),
        BTreeSet::from(["e2e/tests/a.rs".to_string(), "e2e/tests/b.rs".to_string()])
    );
}
