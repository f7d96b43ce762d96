//! The floor rule of `actions/src` (written at the top of `actions/src/lib.rs`), read from the
//! imports of every file below it: an action imports only the ground floor (the contract and
//! the helpers), `shared_config` and `clients/`; a client imports only the ground floor and
//! other clients; the ground floor imports only itself. Only the registry (`lib.rs`) and the
//! fuzzing facade (`fuzzing.rs`) may import actions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The ground floor: the contract every action implements and the helpers of the actions.
const FLOOR: [&str; 5] = ["action", "batch", "check", "progress", "text"];
/// The rooms every action may import besides the floor.
const SHARED: [&str; 2] = ["shared_config", "clients"];
/// The rooms that may import anything: the registry and the fuzzing facade.
const TOP: [&str; 2] = ["lib", "fuzzing"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file below `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The room a file is in: its first path component below `src`, without `.rs`
/// (`clients/ldap/dn.rs` → `clients`, `workload_scale.rs` → `workload_scale`).
fn room_of(relative: &Path) -> String {
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// The rooms `code` names through `crate::<room>` (comments left out: a doc comment may point
/// anywhere).
fn imported_rooms(code: &str) -> BTreeSet<String> {
    let mut rooms = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let line = line.split(" //").next().unwrap_or_default();
        for after in line.split("crate::").skip(1) {
            let room: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !room.is_empty() {
                rooms.insert(room);
            }
        }
    }
    rooms
}

/// What room `room` may import, or `None` for every room.
fn allowed(room: &str) -> Option<BTreeSet<String>> {
    if TOP.contains(&room) {
        return None;
    }
    let mut allowed: BTreeSet<String> = FLOOR.iter().map(|r| r.to_string()).collect();
    if FLOOR.contains(&room) {
        return Some(allowed);
    }
    allowed.insert("clients".into());
    if room == "clients" {
        return Some(allowed);
    }
    allowed.insert("shared_config".into());
    if room == "shared_config" {
        return Some(allowed);
    }
    // An action: besides the shared rooms, its own folder.
    allowed.insert(room.to_string());
    Some(allowed)
}

/// The imports that break the rule, as `file imports room` lines.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (relative, code) in files {
        let room = room_of(Path::new(relative));
        let Some(allowed) = allowed(&room) else {
            continue;
        };
        for imported in imported_rooms(code) {
            if !allowed.contains(&imported) {
                out.push(format!("{relative} imports crate::{imported}"));
            }
        }
    }
    out
}

fn tree() -> Vec<(String, String)> {
    let src = src();
    rust_files(&src)
        .into_iter()
        .map(|path| {
            let relative = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .to_string();
            (relative, std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn every_file_of_actions_src_keeps_the_floor_rule() {
    let files = tree();
    assert!(
        files.len() >= 35,
        "only {} files read below actions/src",
        files.len()
    );
    // The check reaches into nested folders (clients/ldap/exec/preflight.rs).
    assert!(
        files
            .iter()
            .any(|(f, _)| f == "clients/ldap/exec/preflight.rs")
    );
    let broken = violations(&files);
    assert!(
        broken.is_empty(),
        "the floor rule of actions/src/lib.rs is broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_rule_is_written_where_the_crate_starts() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let head: String = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    for room in FLOOR.iter().chain(&SHARED).chain(&TOP) {
        assert!(
            head.contains(&format!("`{room}`")) || head.contains(&format!("[`{room}`]")),
            "actions/src/lib.rs's opening comment does not name `{room}` in its floor rule"
        );
    }
}

#[test]
fn the_check_sees_each_kind_of_broken_import() {
    let files = [
        // A client that knows an action.
        (
            "clients/ldap/x.rs",
            "use crate::workload_scale::Target;\nuse crate::text::plural;",
        ),
        // An action that imports another action.
        (
            "ox_connector_restart.rs",
            "use crate::workload_scale::{Target};",
        ),
        // The floor reaching up into the clients.
        ("batch.rs", "let c = crate::clients::http::api_url(a, b);"),
        // Allowed: an action's own folder, the shared rooms, a comment, the registry.
        (
            "functional_accounts/export.rs",
            "use crate::functional_accounts::name;\nuse crate::clients::s3;\n// crate::workload_scale",
        ),
        ("lib.rs", "use crate::workload_scale;"),
    ]
    .map(|(f, c)| (f.to_string(), c.to_string()));
    assert_eq!(
        violations(&files),
        [
            "clients/ldap/x.rs imports crate::workload_scale",
            "ox_connector_restart.rs imports crate::workload_scale",
            "batch.rs imports crate::clients",
        ]
    );
}
