//! docs/architecture.md against the tree: every path it names exists, and every room of the
//! folders it maps is named in it (a room added or renamed without the page fails here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn page() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).unwrap()
}

/// The code spans of the page (`...`) that name a path of the repository: they start with one
/// of the workspace's top folders. A `<placeholder>` stands for a name to choose: the folder
/// before it must exist.
fn named_paths(page: &str) -> Vec<String> {
    const TOP: [&str; 6] = [
        "actions/",
        "config/",
        "crds/",
        "operator/",
        "e2e/",
        "deploy/",
    ];
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| TOP.iter().any(|top| span.starts_with(top)) && !span.contains(' '))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_path_the_page_names_exists() {
    let page = page();
    let paths = named_paths(&page);
    assert!(
        paths.len() >= 40,
        "docs/architecture.md names only {} paths",
        paths.len()
    );
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| {
            let existing = match p.find('<') {
                Some(i) => &p[..p[..i].rfind('/').map_or(0, |j| j + 1)],
                None => p.as_str(),
            };
            !root().join(existing).exists()
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn every_room_of_the_mapped_folders_is_named() {
    let page = page();
    let mut unnamed = Vec::new();
    for folder in [
        "actions/src",
        "operator/src",
        "operator/src/run",
        "operator/src/cli",
    ] {
        for entry in std::fs::read_dir(root().join(folder)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let is_dir = entry.file_type().unwrap().is_dir();
            let whole = if is_dir {
                format!("{folder}/{name}/")
            } else {
                format!("{folder}/{name}")
            };
            // A room is named by its whole path, or inside its folder's row or paragraph by
            // its file name in backticks.
            let named = page.contains(&format!("`{whole}`"))
                || (!is_dir && page.contains(&format!("`{name}`")) && folder != "actions/src");
            if !named {
                unnamed.push(whole);
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/architecture.md does not name these rooms: {unnamed:?}"
    );
}

#[test]
fn the_path_check_sees_a_missing_path() {
    let paths = named_paths("see `actions/src/nowhere.rs` and `actions/src/<id>.rs` and `x y`");
    assert_eq!(paths, ["actions/src/nowhere.rs", "actions/src/<id>.rs"]);
    assert!(!root().join(&paths[0]).exists());
}

/// The steps `pipeline` calls (`<step>::step(`), in order.
fn pipeline_steps() -> Vec<String> {
    let code = std::fs::read_to_string(root().join("operator/src/run/reconcile.rs")).unwrap();
    let body = code
        .split("async fn pipeline(")
        .nth(1)
        .expect("reconcile.rs has `async fn pipeline`");
    let body = &body[..body.find("\n}\n").expect("pipeline ends")];
    body.split("::step(")
        .map(|before| {
            before
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .take(body.matches("::step(").count())
        .collect()
}

/// The steps docs/architecture.md lists under "One MigrationRun through the code", in order
/// (`operator/src/run/<step>.rs` at the start of each numbered sub-item).
fn documented_steps(page: &str) -> Vec<String> {
    let section = page
        .split("## One MigrationRun through the code")
        .nth(1)
        .expect("the page has the section");
    section
        .lines()
        // The steps are the sub-items of item 2 (indented).
        .filter(|l| l.starts_with("   "))
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.split_once(". `operator/src/run/")?.1;
            l.split_once(". ")?.0.parse::<u32>().ok()?;
            Some(rest.split_once(".rs`")?.0.to_string())
        })
        .collect()
}

#[test]
fn the_page_draws_the_steps_in_the_order_pipeline_calls_them() {
    let called = pipeline_steps();
    assert_eq!(
        called,
        [
            "gate",
            "assess",
            "freeze",
            "preflight",
            "approval",
            "execute",
            "finish"
        ],
        "pipeline's step calls"
    );
    assert_eq!(documented_steps(&page()), called);
}
