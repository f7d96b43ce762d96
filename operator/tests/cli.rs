//! The offline CLI's contracts (docs/design.md#the-command-line, docs/cli.md): exit codes, text and
//! JSON output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/examples/opendesk-v1.18.yaml"
);
const MISTAKES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/many-mistakes.yaml"
);
const ALPHA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/v1alpha1-with-status.yaml"
);

fn stagehand(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagehand"))
        .args(args)
        .output()
        .unwrap()
}

fn stagehand_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stagehand"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn example_is_valid() {
    let out = stagehand(&["validate", "-f", EXAMPLE]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(text(&out).contains("valid (0 warnings)"));
    let out = stagehand(&["validate", "-f", EXAMPLE, "-o", "json"]);
    assert_eq!(code(&out), 0);
    assert_eq!(
        json_of(&out),
        json!({"valid": true, "problems": [], "warnings": []})
    );
}

fn problem(
    code: &str,
    stage: &str,
    index: u64,
    id: Value,
    field: &str,
) -> (String, String, u64, Value, String) {
    (code.into(), stage.into(), index, id, field.into())
}

#[test]
fn every_mistake_is_reported_at_once_with_its_code() {
    let out = stagehand(&["validate", "-f", MISTAKES, "-o", "json"]);
    assert_eq!(code(&out), 1);
    let report = json_of(&out);
    assert_eq!(report["valid"], json!(false));
    let mut got: Vec<_> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            for key in ["code", "stage", "index", "id", "field", "message"] {
                assert!(p.get(key).is_some(), "problem lacks {key}: {p}");
            }
            assert_eq!(
                p.as_object().unwrap().len(),
                6,
                "exactly the contract's keys: {p}"
            );
            (
                p["code"].as_str().unwrap().to_string(),
                p["stage"].as_str().unwrap().to_string(),
                p["index"].as_u64().unwrap(),
                p["id"].clone(),
                p["field"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    let mut want = vec![
        problem("MissingId", "pre", 0, Value::Null, "id"),
        problem("UnknownAction", "pre", 1, json!("scale_everything"), "id"),
        problem(
            "UnknownVersionsKey",
            "pre",
            2,
            json!("workload_scale"),
            "versions.form",
        ),
        problem(
            "MissingVersionsKey",
            "pre",
            2,
            json!("workload_scale"),
            "versions.from",
        ),
        problem(
            "InvalidConfig",
            "pre",
            2,
            json!("workload_scale"),
            "config.workload.replicas",
        ),
        problem(
            "InvalidVersion",
            "pre",
            3,
            json!("provisioning_drop_subscriptions"),
            "versions.from",
        ),
        problem(
            "MistypedSkip",
            "pre",
            0,
            json!("provisioning_drop_subscriptions"),
            "actionsSkip.tag",
        ),
        problem(
            "FromBelowMinimum",
            "post",
            0,
            json!("ox_shared_accounts_import"),
            "versions.from",
        ),
        problem(
            "ToBeforeFrom",
            "post",
            1,
            json!("ox_connector_restart"),
            "versions.to",
        ),
        problem(
            "InvalidConfig",
            "post",
            2,
            json!("flush_intercom_sessions"),
            "config.redis.keyPatern",
        ),
        // What the actions need that the declarations lack, reported with the rest.
        problem(
            "MissingSecretFile",
            "pre",
            3,
            json!("provisioning_drop_subscriptions"),
            "secretFiles",
        ),
        problem(
            "MissingSecretFile",
            "post",
            0,
            json!("ox_shared_accounts_import"),
            "secretFiles",
        ),
        problem(
            "MissingObjectStore",
            "post",
            0,
            json!("ox_shared_accounts_import"),
            "objectStore",
        ),
    ];
    want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(got, want);
    let number = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["code"] == "InvalidVersion")
        .unwrap();
    assert!(
        number["message"].as_str().unwrap().contains("quote"),
        "the YAML-number hint: {number}"
    );
    assert_eq!(
        report["warnings"],
        json!([{"code": "SkipMatchesNothing", "stage": "post", "index": 0, "id": "ox_functional_accounts_export",
                "field": "actionsSkip.id", "message": report["warnings"][0]["message"]}])
    );
}

#[test]
fn below_minimum_is_reported_with_the_rest() {
    let out = stagehand(&[
        "validate",
        "-f",
        MISTAKES,
        "--last-migrated",
        "v1.14.2",
        "-o",
        "json",
    ]);
    assert_eq!(code(&out), 1);
    let report = json_of(&out);
    let below: Vec<(&str, u64)> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["code"] == "BelowMinimum")
        .map(|p| (p["stage"].as_str().unwrap(), p["index"].as_u64().unwrap()))
        .collect();
    // Every declaration whose minimum parsed, of both stages.
    assert_eq!(
        below,
        [
            ("pre", 0),
            ("pre", 1),
            ("pre", 2),
            ("pre", 3),
            ("post", 0),
            ("post", 1),
            ("post", 2)
        ]
    );
}

/// A Migration whose pre stage scales two workloads down with `workload_scale`, both tagged
/// `v1.18.0`, the second with the runMode `second_run_mode` (`""`: none); its post stage scales
/// one back up with the same id and tag (the same footprint in another stage).
fn two_workload_scales(second_run_mode: &str) -> String {
    let scale = |run_mode: &str, kind: &str, name: &str, replicas: u8| {
        let run_mode = if run_mode.is_empty() {
            String::new()
        } else {
            format!("        runMode: \"{run_mode}\"\n")
        };
        format!(
            r#"      - id: "workload_scale"
        tag: "v1.18.0"
{run_mode}        versions: {{minimum: "v1.15", from: "v1.15", to: "v1.17"}}
        config:
          workload: {{kind: "{kind}", name: "{name}", replicas: {replicas}}}
"#
        )
    };
    format!(
        r#"apiVersion: stagehand.dev/v1beta1
kind: Migration
metadata:
  name: opendesk
spec:
  releaseVersion: "v1.18.0"
  installedRelease: "v1.17.3"
  actions:
    pre:
{}{}    post:
{}"#,
        scale("", "StatefulSet", "ox-connector", 0),
        scale(second_run_mode, "Deployment", "open-xchange", 0),
        scale("", "StatefulSet", "ox-connector", 1),
    )
}

#[test]
fn a_duplicate_footprint_is_invalid_and_names_both_entries() {
    let manifest = two_workload_scales("");
    let out = stagehand_stdin(&["validate", "-f", "-", "-o", "json"], &manifest);
    assert_eq!(code(&out), 1, "{}", text(&out));
    let report = json_of(&out);
    assert_eq!(report["valid"], json!(false));
    let problems = report["problems"].as_array().unwrap();
    // Reported once, on the later entry; the same footprint in post is not a duplicate.
    assert_eq!(problems.len(), 1, "{report}");
    let p = &problems[0];
    assert_eq!(
        (&p["code"], &p["stage"], &p["index"], &p["id"], &p["field"]),
        (
            &json!("DuplicateFootprint"),
            &json!("pre"),
            &json!(1),
            &json!("workload_scale"),
            &json!("tag")
        ),
        "{p}"
    );
    let message = p["message"].as_str().unwrap();
    for words in [
        "actions.pre[0]",
        "tag \"v1.18.0\"",
        "FootprintRecorded",
        "distinct tag or runMode",
    ] {
        assert!(
            message.contains(words),
            "{words:?} missing from {message:?}"
        );
    }
    assert_eq!(report["warnings"], json!([]));

    let out = stagehand_stdin(&["validate", "-f", "-"], &manifest);
    assert_eq!(code(&out), 1);
    let t = text(&out);
    assert!(
        t.contains("-: error DuplicateFootprint: actions.pre[1] (workload_scale) tag: workload_scale has the same id, tag \"v1.18.0\" and runMode (none) as actions.pre[0]"),
        "{t}"
    );
    assert!(
        t.trim_end().ends_with("invalid (1 problem, 0 warnings)"),
        "{t}"
    );

    // A distinct runMode makes a distinct footprint: valid.
    let out = stagehand_stdin(&["validate", "-f", "-"], &two_workload_scales("apply"));
    assert_eq!(code(&out), 0, "{}", text(&out));
}

#[test]
fn text_errors_name_file_stage_index_id_and_field() {
    let out = stagehand(&["validate", "-f", MISTAKES]);
    assert_eq!(code(&out), 1);
    let t = text(&out);
    assert!(
        t.contains(&format!(
            "{MISTAKES}: error ToBeforeFrom: actions.post[1] (ox_connector_restart) versions.to: "
        )),
        "{t}"
    );
    assert!(t.contains(&format!("{MISTAKES}: error MistypedSkip: actionsSkip.pre[0] (provisioning_drop_subscriptions) tag: ")), "{t}");
    assert!(t.contains(&format!("{MISTAKES}: warning SkipMatchesNothing: actionsSkip.post[0] (ox_functional_accounts_export) id: ")), "{t}");
    assert!(
        t.trim_end().ends_with("invalid (13 problems, 1 warning)"),
        "{t}"
    );
}

/// `stagehand plan` of the example's `stage` (for the `last` migrated release), with `extra`.
fn plan_example(stage: &str, last: Option<&str>, extra: &[&str]) -> Output {
    let mut args = vec!["plan", "-f", EXAMPLE, "--stage", stage];
    if let Some(l) = last {
        args.extend(["--last-migrated", l]);
    }
    args.extend_from_slice(extra);
    stagehand(&args)
}

fn plan(stage: &str, last: Option<&str>) -> (i32, Value) {
    let out = plan_example(stage, last, &["-o", "json"]);
    (code(&out), json_of(&out))
}

fn decisions(plan: &Value) -> Vec<(String, String, String)> {
    plan["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().into(),
                a["decision"].as_str().unwrap().into(),
                a["reason"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn d(id: &str, decision: &str, reason: &str) -> (String, String, String) {
    (id.into(), decision.into(), reason.into())
}

#[test]
fn plan_json_follows_the_contract() {
    let (rc, p) = plan("pre", Some("v1.17.3"));
    assert_eq!(rc, 0);
    let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "actions",
            "freshInstallation",
            "lastMigratedRelease",
            "problems",
            "stage",
            "warnings"
        ]
    );
    assert_eq!(p["stage"], "pre");
    assert_eq!(p["lastMigratedRelease"], "v1.17.3");
    assert_eq!(p["freshInstallation"], false);
    assert_eq!(
        p["actions"][1],
        json!({"index": 1, "id": "ox_functional_accounts_export", "tag": "v1.18.0", "runMode": "apply", "decision": "run", "reason": "InWindow"})
    );
    assert_eq!(
        p["actions"][0],
        json!({"index": 0, "id": "workload_scale", "tag": "v1.18.0", "runMode": null, "decision": "run", "reason": "InWindow"})
    );
}

/// Asserts that the example plans every action of both stages with `decision` and `reason`,
/// in the order declared.
fn assert_example_decides(pre_last: &str, post_last: &str, decision: &str, reason: &str) {
    let pre_ids = [
        "workload_scale",
        "ox_functional_accounts_export",
        "ldap_entryuuid_to_object_identifier",
        "ox_names_to_object_identifier",
        "provisioning_drop_subscriptions",
    ];
    let post_ids = ["ox_shared_accounts_import", "flush_intercom_sessions"];
    for (stage, last, ids) in [
        ("pre", pre_last, &pre_ids[..]),
        ("post", post_last, &post_ids),
    ] {
        let (rc, p) = plan(stage, Some(last));
        assert_eq!(rc, 0, "{stage} {last}");
        let expected: Vec<_> = ids.iter().map(|id| d(id, decision, reason)).collect();
        assert_eq!(decisions(&p), expected, "{stage} {last}");
    }
}

#[test]
fn example_decisions_for_v1_17_3_in_window() {
    assert_example_decides("v1.17.3", "1.17.3", "run", "InWindow");
}

#[test]
fn example_decisions_after_the_upgrade() {
    assert_example_decides("v1.18.0", "v1.18.0", "skip", "OutsideWindow");
}

#[test]
fn example_below_minimum_fails_the_plan() {
    for last in ["v1.14.0", "v1.14.9", "1.14.3-rc.1"] {
        let (rc, p) = plan("pre", Some(last));
        assert_eq!(rc, 1, "{last}");
        assert_eq!(
            p["actions"],
            json!([]),
            "nothing is planned when the declarations are invalid"
        );
        let problems = p["problems"].as_array().unwrap();
        assert_eq!(
            problems.len(),
            7,
            "every action of both stages has minimum v1.15: {p}"
        );
        assert!(problems.iter().all(|x| x["code"] == "BelowMinimum"));
    }
    // The window edge: v1.15.0 is in.
    let (rc, p) = plan("pre", Some("v1.15.0"));
    assert_eq!(rc, 0);
    assert!(decisions(&p).iter().all(|(_, dec, _)| dec == "run"));
}

#[test]
fn fresh_installation_runs_nothing() {
    let (rc, p) = plan("post", None);
    assert_eq!(rc, 0);
    assert_eq!(p["freshInstallation"], true);
    assert_eq!(p["lastMigratedRelease"], Value::Null);
    assert!(
        decisions(&p)
            .iter()
            .all(|(_, dec, reason)| dec == "skip" && reason == "FreshInstallation")
    );
}

#[test]
fn status_history_counts_and_last_migrated_overrides() {
    let out = stagehand(&["plan", "-f", ALPHA, "--stage", "pre", "-o", "json"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let p = json_of(&out);
    assert_eq!(p["lastMigratedRelease"], "v1.17.2");
    assert_eq!(
        decisions(&p),
        [
            d(
                "ldap_entryuuid_to_object_identifier",
                "skip",
                "FootprintRecorded"
            ),
            // recorded with runMode verify, declared with apply: runs once more
            d("ox_names_to_object_identifier", "run", "InWindow"),
            // untagged with a runMode: not run-once, its history entry gates nothing
            d("workload_scale", "run", "InWindow"),
            d("provisioning_drop_subscriptions", "skip", "OptedOut"),
        ]
    );
    let out = stagehand(&[
        "plan",
        "-f",
        ALPHA,
        "--stage",
        "pre",
        "-o",
        "json",
        "--last-migrated",
        "v1.18.0",
    ]);
    let p = json_of(&out);
    assert_eq!(p["lastMigratedRelease"], "v1.18.0");
    assert_eq!(
        decisions(&p)[0],
        d(
            "ldap_entryuuid_to_object_identifier",
            "skip",
            "OutsideWindow"
        )
    );
}

#[test]
fn plan_text_is_a_table() {
    let out = plan_example("post", Some("v1.18.0"), &[]);
    assert_eq!(code(&out), 0);
    let t = text(&out);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[0],
        "stage post of release v1.18.0, last migrated release v1.18.0"
    );
    assert!(lines[1].starts_with("INDEX  ID"), "{t}");
    assert!(
        lines[2].contains("ox_shared_accounts_import")
            && lines[2].contains("skip")
            && lines[2].ends_with("OutsideWindow"),
        "{t}"
    );
}

/// The openDesk example with `actionsSkip` replaced by `skips` (YAML flow mappings).
fn example_skipping(pre: &str, post: &str) -> String {
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let written = "  actionsSkip:\n    pre: []\n    post: []\n";
    assert!(
        example.contains(written),
        "the example's actionsSkip changed"
    );
    example.replace(
        written,
        &format!("  actionsSkip:\n    pre: [{pre}]\n    post: [{post}]\n"),
    )
}

#[test]
fn the_identifier_migrations_are_opted_out_of_together_and_in_their_own_stage() {
    let ldap = r#"{id: "ldap_entryuuid_to_object_identifier", tag: "v1.18.0"}"#;
    let ox = r#"{id: "ox_names_to_object_identifier", tag: "v1.18.0"}"#;
    // One of the pair: HalfOptOut on the opted-out one, naming the other.
    let out = stagehand_stdin(
        &["validate", "-f", "-", "-o", "json"],
        &example_skipping(ldap, ""),
    );
    assert_eq!(code(&out), 1, "{}", text(&out));
    let problems = json_of(&out)["problems"].clone();
    assert_eq!(problems.as_array().map(Vec::len), Some(1), "{problems}");
    assert_eq!(problems[0]["code"], "HalfOptOut");
    assert_eq!(problems[0]["id"], "ldap_entryuuid_to_object_identifier");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains("but ox_names_to_object_identifier (actions.pre["),
        "{problems}"
    );
    // Both: valid.
    let out = stagehand_stdin(
        &["validate", "-f", "-"],
        &example_skipping(&format!("{ldap}, {ox}"), ""),
    );
    assert_eq!(code(&out), 0, "{}", text(&out));
    // Both, in the post stage, which declares neither: a mistake naming the pre stage, not
    // a stale opt-out.
    let out = stagehand_stdin(
        &["validate", "-f", "-", "-o", "json"],
        &example_skipping("", &format!("{ldap}, {ox}")),
    );
    assert_eq!(code(&out), 1, "{}", text(&out));
    let report = json_of(&out);
    let codes: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["SkipInWrongStage", "SkipInWrongStage"], "{report}");
    assert!(
        report["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the pre stage does (actions.pre[")
            && report["problems"][0]["message"]
                .as_str()
                .unwrap()
                .ends_with("move it to actionsSkip.pre"),
        "{report}"
    );
    assert_eq!(report["warnings"], json!([]));
}

#[test]
fn stdin_is_read_with_dash() {
    let manifest = std::fs::read_to_string(EXAMPLE).unwrap();
    let out = stagehand_stdin(&["validate", "-f", "-"], &manifest);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

#[test]
fn usage_errors_and_unreadable_input_exit_2() {
    assert_eq!(code(&stagehand(&["validate"])), 2, "missing -f");
    assert_eq!(
        code(&stagehand(&["plan", "-f", EXAMPLE])),
        2,
        "missing --stage"
    );
    assert_eq!(
        code(&stagehand(&["plan", "-f", EXAMPLE, "--stage", "middle"])),
        2
    );
    assert_eq!(
        code(&stagehand(&["validate", "-f", EXAMPLE, "-o", "xml"])),
        2
    );
    let missing = stagehand(&["validate", "-f", "/nonexistent/m.yaml"]);
    assert_eq!(code(&missing), 2);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/m.yaml"));
    let bad = stagehand(&["validate", "-f", EXAMPLE, "--last-migrated", "latest"]);
    assert_eq!(code(&bad), 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--last-migrated"));
    for (input, why) in [
        ("a: [", "not YAML"),
        ("apiVersion: v1\nkind: ConfigMap\n", "no Migration"),
        (
            "apiVersion: apps/v1\nkind: Migration\nspec: {}\n",
            "not a stagehand.dev Migration",
        ),
        (
            "apiVersion: stagehand.dev/v1beta1\nkind: Migration\nspec: {releaseVersion: v1.18.0, actions: {pre: 3}}\n",
            "actions.pre not a list",
        ),
    ] {
        let out = stagehand_stdin(&["validate", "-f", "-"], input);
        assert_eq!(code(&out), 2, "{why}: {}", text(&out));
        assert!(!out.stderr.is_empty(), "{why}: says why on stderr");
    }
}

#[test]
fn crds_prints_both_kinds() {
    let out = stagehand(&["crds"]);
    assert_eq!(code(&out), 0);
    let t = text(&out);
    assert!(
        t.contains("name: migrations.stagehand.dev")
            && t.contains("name: migrationruns.stagehand.dev")
    );
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/crds/stagehand-crds.yaml"
    ))
    .unwrap();
    assert_eq!(
        t, committed,
        "deploy/crds is stale: cargo run -p stagehand -- crds > deploy/crds/stagehand-crds.yaml"
    );
}

#[test]
fn demo_migration_is_valid_and_plans_its_actions() {
    let demo = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/demo-migration.yaml"
    );
    let out = stagehand(&["validate", "-f", demo]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let out = stagehand(&["plan", "-f", demo, "--stage", "pre", "-o", "json"]);
    let p = json_of(&out);
    assert_eq!(
        p["lastMigratedRelease"], "v1.17.3",
        "installedRelease counts"
    );
    assert_eq!(decisions(&p), [d("workload_scale", "run", "InWindow")]);
}

const EXAMPLE_V1_19: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/examples/opendesk-v1.19.yaml"
);

/// The v1.19 example as JSON.
fn example_v1_19() -> Value {
    let yaml: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(EXAMPLE_V1_19).unwrap()).unwrap();
    serde_json::to_value(yaml).unwrap()
}

/// `stagehand plan -o json` of the Migration `m` (its status carries a history) for `stage`.
fn plan_of(m: &Value, stage: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["plan", "-f", "-", "--stage", stage, "-o", "json"];
    args.extend_from_slice(extra);
    let out = stagehand_stdin(&args, &m.to_string());
    (code(&out), json_of(&out))
}

const V1_19_PRE: [&str; 3] = [
    "synapse_deactivate_orphaned_users",
    "configmap_create",
    "synapse_signing_key_export",
];

#[test]
fn v1_19_example_is_valid_and_plans_from_v1_18_only() {
    for extra in [&[][..], &["--last-migrated", "v1.18.2"]] {
        let mut args = vec!["validate", "-f", EXAMPLE_V1_19];
        args.extend_from_slice(extra);
        let out = stagehand(&args);
        assert_eq!(code(&out), 0, "{extra:?}: {}", text(&out));
        assert!(text(&out).contains("valid (0 warnings)"), "{}", text(&out));
    }
    let m = example_v1_19();
    // At v1.18.x every action runs, in V4's order.
    for last in ["v1.18.0", "v1.18.2"] {
        let (rc, p) = plan_of(&m, "pre", &["--last-migrated", last]);
        assert_eq!(rc, 0, "{p}");
        let run: Vec<_> = V1_19_PRE
            .iter()
            .map(|id| d(id, "run", "InWindow"))
            .collect();
        assert_eq!(decisions(&p), run, "{last}");
        let (rc, p) = plan_of(&m, "post", &["--last-migrated", last]);
        assert_eq!(rc, 0, "{p}");
        assert_eq!(
            decisions(&p),
            [d("udm_remove_legacy_hashes", "run", "InWindow")]
        );
    }
    // Below v1.18 nothing is planned: every action has minimum v1.18.
    for last in ["v1.17.3", "v1.16.0"] {
        for stage in ["pre", "post"] {
            let (rc, p) = plan_of(&m, stage, &["--last-migrated", last]);
            assert_eq!(rc, 1, "{stage} {last}: {p}");
            assert_eq!(p["actions"], json!([]));
            let problems = p["problems"].as_array().unwrap();
            assert_eq!(problems.len(), 4, "{p}");
            assert!(problems.iter().all(|x| x["code"] == "BelowMinimum"), "{p}");
        }
    }
    // After v1.19.0 is migrated: the pre windows are closed, the post one stays open to v1.
    let (_, p) = plan_of(&m, "pre", &["--last-migrated", "v1.19.0"]);
    let closed: Vec<_> = V1_19_PRE
        .iter()
        .map(|id| d(id, "skip", "OutsideWindow"))
        .collect();
    assert_eq!(decisions(&p), closed);
    let (_, p) = plan_of(&m, "post", &["--last-migrated", "v1.19.0"]);
    assert_eq!(
        decisions(&p),
        [d("udm_remove_legacy_hashes", "run", "InWindow")]
    );
}

/// openDesk's review recorded by openDesk's own Jobs (`(v1.19.0, dry-run)` of the synapse
/// action, the two other pre actions applied), then imported: the dry-run declaration is
/// skipped, and flipping the option (runMode `apply`, config.synapse.dryRun false) runs the
/// apply once more, once.
#[test]
fn v1_19_example_flipping_the_synapse_dry_run_runs_the_apply_once_more() {
    let entry = |id: &str, run_mode: &str| json!({"stage": "pre", "id": id, "tag": "v1.19.0", "runMode": run_mode});
    let mut m = example_v1_19();
    m["status"] = json!({
        "lastMigratedRelease": "v1.18.2",
        "history": [
            entry("synapse_deactivate_orphaned_users", "dry-run"),
            entry("configmap_create", "apply"),
            entry("synapse_signing_key_export", "apply"),
        ],
    });
    let recorded: Vec<_> = V1_19_PRE
        .iter()
        .map(|id| d(id, "skip", "FootprintRecorded"))
        .collect();
    let (rc, p) = plan_of(&m, "pre", &[]);
    assert_eq!(rc, 0, "{p}");
    assert_eq!(decisions(&p), recorded, "the review's dry run is recorded");
    let synapse = &mut m["spec"]["actions"]["pre"][0];
    assert_eq!(synapse["id"], "synapse_deactivate_orphaned_users");
    synapse["runMode"] = json!("apply");
    synapse["config"]["synapse"]["dryRun"] = json!(false);
    let (rc, p) = plan_of(&m, "pre", &[]);
    assert_eq!(rc, 0, "{p}");
    assert_eq!(
        decisions(&p),
        [
            d("synapse_deactivate_orphaned_users", "run", "InWindow"),
            d("configmap_create", "skip", "FootprintRecorded"),
            d("synapse_signing_key_export", "skip", "FootprintRecorded"),
        ]
    );
    m["status"]["history"]
        .as_array_mut()
        .unwrap()
        .push(entry("synapse_deactivate_orphaned_users", "apply"));
    let (_, p) = plan_of(&m, "pre", &[]);
    assert_eq!(decisions(&p), recorded, "the apply ran once");
}
