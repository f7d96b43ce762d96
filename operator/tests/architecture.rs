//! docs/architecture.md against the tree: every path it names exists, every room of the
//! folders it maps is named in it at any depth (a room added or renamed without the page fails
//! here), its list of crate imports is the manifests', and its steps are `pipeline`'s.
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

/// The folders the page maps: every file and folder below them, at any depth, is a room.
const MAPPED: [&str; 6] = [
    "actions/src",
    "operator/src",
    "config/src",
    "crds/src",
    "e2e/src",
    "e2e/simulators/src",
];

/// Every file and folder below `folder` (relative to the root), at any depth, as
/// `(path, is_dir)`.
fn rooms_below(folder: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join(folder)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let path = format!("{folder}/{name}");
        let is_dir = entry.file_type().unwrap().is_dir();
        if is_dir {
            out.extend(rooms_below(&path));
        }
        out.push((path, is_dir));
    }
    out.sort();
    out
}

/// Whether the page names a room: by its whole path (a folder with its trailing `/`), or by
/// its path inside one of its folders (`exec/preflight.rs`, `preflight.rs`) in backticks.
/// The top-level files of `actions/src` are each named by their whole path; a `mod.rs`,
/// `lib.rs` or `main.rs` at least with its folder (`ldap/mod.rs`).
fn is_named(page: &str, path: &str, is_dir: bool) -> bool {
    let whole = if is_dir {
        format!("{path}/")
    } else {
        path.to_string()
    };
    if page.contains(&format!("`{whole}`")) {
        return true;
    }
    if path.matches('/').count() < 3 {
        // A folder, or a file straight in a mapped folder (`actions/src/x.rs`): whole path
        // only, except the operator's and config's top files may be named alone.
        return !is_dir
            && !path.starts_with("actions/src/")
            && page.contains(&format!("`{}`", path.rsplit('/').next().unwrap()));
    }
    let parts: Vec<&str> = path.split('/').collect();
    // Suffixes below the mapped folder (`<crate>/src/`): `a/b/c.rs`, `b/c.rs`, `c.rs` (a
    // folder with its trailing `/`: `ldap/exec/`, `exec/`).
    let generic = ["mod.rs", "lib.rs", "main.rs"].contains(parts.last().unwrap());
    let shortest = if generic { 2 } else { 1 };
    let slash = if is_dir { "/" } else { "" };
    (shortest..=parts.len() - 2).any(|n| {
        let suffix = parts[parts.len() - n..].join("/");
        page.contains(&format!("`{suffix}{slash}`"))
    })
}

#[test]
fn every_room_of_the_mapped_folders_is_named_at_every_depth() {
    let page = page();
    let mut unnamed = Vec::new();
    let mut deepest = 0;
    for folder in MAPPED {
        for (path, is_dir) in rooms_below(folder) {
            deepest = deepest.max(path.matches('/').count());
            if !is_named(&page, &path, is_dir) {
                unnamed.push(if is_dir { format!("{path}/") } else { path });
            }
        }
    }
    // The walk reaches the deepest rooms (actions/src/clients/ldap/exec/preflight.rs).
    assert!(
        deepest >= 5,
        "the deepest room seen is {deepest} folders down"
    );
    assert!(
        unnamed.is_empty(),
        "docs/architecture.md does not name these rooms: {unnamed:?}"
    );
}

#[test]
fn a_room_is_named_by_its_path_or_its_path_inside_a_folder() {
    let page = "`actions/src/clients/` ... `exec/preflight.rs`, `ldap/mod.rs`, `cli.rs`, `udm/`";
    let named = |p: &str, d: bool| is_named(page, p, d);
    assert!(named("actions/src/clients", true));
    assert!(named("actions/src/clients/ldap/exec/preflight.rs", false));
    assert!(named("actions/src/clients/ldap/mod.rs", false));
    // A generic name alone names nothing; a folder needs its whole path; an actions room too.
    assert!(!named("actions/src/clients/ox/mod.rs", false));
    assert!(!named("actions/src/clients/ldap", true));
    assert!(named("actions/src/clients/udm", true));
    assert!(!named("actions/src/run", true));
    assert!(!named("actions/src/cli.rs", false));
    assert!(named("operator/src/cli.rs", false));
    assert!(!named("actions/src/clients/udm/bulk.rs", false));
}

/// The crate imports the page lists: `- imports of `<crate>`: `a`, `b`` (or `none`).
fn documented_imports(page: &str) -> Vec<(String, Vec<String>)> {
    page.lines()
        .filter_map(|l| l.strip_prefix("- imports of `"))
        .map(|rest| {
            let (krate, deps) = rest.split_once("`:").unwrap();
            let mut deps: Vec<String> = deps
                .split(',')
                .map(|d| d.trim().trim_matches('`').to_string())
                .filter(|d| d != "none" && !d.is_empty())
                .collect();
            deps.sort();
            (krate.to_string(), deps)
        })
        .collect()
}

/// The workspace crates a crate's `Cargo.toml` depends on (dependencies and
/// dev-dependencies), without the `stagehand-` prefix.
fn declared_imports(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(manifest)).unwrap();
    let mut deps: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("stagehand-"))
        .filter_map(|l| l.split([' ', '=', '.']).next())
        .map(str::to_string)
        .collect();
    deps.sort();
    deps.dedup();
    deps
}

#[test]
fn the_crate_imports_the_page_lists_are_the_manifests() {
    let documented = documented_imports(&page());
    let manifests = [
        ("operator", "operator/Cargo.toml"),
        ("crds", "crds/Cargo.toml"),
        ("actions", "actions/Cargo.toml"),
        ("config", "config/Cargo.toml"),
        ("e2e", "e2e/Cargo.toml"),
        ("simulators", "e2e/simulators/Cargo.toml"),
        ("fuzzing", "e2e/fuzzing/Cargo.toml"),
    ];
    let declared: Vec<(String, Vec<String>)> = manifests
        .iter()
        .map(|(krate, manifest)| (krate.to_string(), declared_imports(manifest)))
        .collect();
    assert_eq!(documented, declared, "docs/architecture.md's crate imports");
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
