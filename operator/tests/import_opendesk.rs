//! `stagehand import-opendesk` offline (SPEC 6a, 4.5): openDesk's v1.18 values become the
//! Migration of `deploy/examples/opendesk-v1.18.yaml` (same plan), a `migrations-status`
//! ConfigMap becomes the ledger (the plan skips exactly its footprints, `FootprintRecorded`),
//! and every refusal path exits non-zero naming what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use serde_json::{Value, json};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/examples/opendesk-v1.18.yaml"
);
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/opendesk");

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

fn stagehand(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagehand"))
        .args(args)
        // Offline: no cluster may be reached by accident.
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("stagehand-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Runs the import; asserts exit 0; returns the objects printed (`-o json`).
fn import(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["import-opendesk", "-o", "json"];
    all.extend_from_slice(args);
    let out = stagehand(&all);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    list["items"].as_array().unwrap().clone()
}

fn of_kind<'a>(items: &'a [Value], kind: &str) -> Option<&'a Value> {
    items.iter().find(|i| i["kind"] == kind)
}

/// `stagehand plan -o json` of a manifest.
fn plan(file: &str, stage: &str, extra: &[&str]) -> Value {
    let mut args = vec!["plan", "-f", file, "--stage", stage, "-o", "json"];
    args.extend_from_slice(extra);
    let out = stagehand(&args);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The Migration as the operator shows it once it mirrored the ledger into its status
/// (`kubectl get migration -o yaml`): what `stagehand plan` reads a history from.
fn with_ledger_as_status(migration: &Value, ledger: &Value) -> Value {
    let data = ledger["data"].as_object().unwrap();
    let history: Vec<Value> = data
        .iter()
        .filter(|(k, _)| k.starts_with("footprint."))
        .map(|(_, v)| serde_json::from_str(v.as_str().unwrap()).unwrap())
        .collect();
    let mut m = migration.clone();
    m["status"] = json!({
        "lastMigratedRelease": data.get("lastMigratedRelease").cloned().unwrap_or(Value::Null),
        "history": history,
    });
    m
}

#[test]
fn the_v1_18_values_become_the_shipped_example_with_the_same_plan() {
    let items = import(&["--values", &fixture("values-v1.18.yaml"), "-n", "opendesk"]);
    assert_eq!(items.len(), 1, "no history, no ledger: {items:?}");
    let migration = &items[0];
    let file = tmp("v1.18.json", &migration.to_string());
    for stage in ["pre", "post"] {
        for last in [
            &["--last-migrated", "v1.17.3"][..],
            &["--last-migrated", "v1.16.0"],
            &[],
        ] {
            assert_eq!(
                plan(&file, stage, last),
                plan(EXAMPLE, stage, last),
                "stage {stage} {last:?}"
            );
        }
    }
    // Not only the same plan: the same spec, field for field.
    let example: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    let example: Value = serde_json::to_value(example).unwrap();
    assert_eq!(migration["spec"], example["spec"]);
    assert_eq!(migration["metadata"], example["metadata"]);
    // `stagehand validate` agrees.
    let out = stagehand(&["validate", "-f", &file]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[test]
fn every_action_of_the_library_converts_and_validates() {
    let items = import(&["--values", &fixture("values-all-actions.yaml")]);
    let spec = &items[0]["spec"];
    let ids: Vec<&str> = ["pre", "post"]
        .iter()
        .flat_map(|s| spec["actions"][s].as_array().unwrap())
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 9, "{ids:?}");
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 9, "{ids:?}");
    let out = stagehand(&["validate", "-f", &tmp("all.json", &items[0].to_string())]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[test]
fn a_status_configmap_becomes_the_ledger_and_the_plan_skips_exactly_its_footprints() {
    let items = import(&[
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture("status-key-per-fact.yaml"),
        "-n",
        "opendesk",
    ]);
    assert_eq!(items[0]["kind"], "ConfigMap", "the ledger comes first");
    let ledger = of_kind(&items, "ConfigMap").unwrap();
    let migration = of_kind(&items, "Migration").unwrap();
    assert_eq!(ledger["metadata"]["name"], "opendesk-history");
    assert_eq!(ledger["metadata"]["namespace"], "opendesk");
    assert_eq!(
        ledger["metadata"]["labels"]["stagehand.dev/migration"],
        "opendesk"
    );
    assert_eq!(ledger["data"]["format"], "stagehand.dev/history/v1");
    assert_eq!(ledger["data"]["lastMigratedRelease"], "v1.17.3");
    assert_eq!(migration["spec"]["installedRelease"], "v1.17.3");
    // The raw data is kept.
    let raw: Value = serde_json::from_str(
        ledger["metadata"]["annotations"]["stagehand.dev/imported-migrations-status"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(raw["lastStage"], "post");
    // All seven recorded footprints, including v1.17.0's ox_connector_restart.
    let keys: Vec<&String> = ledger["data"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("footprint."))
        .collect();
    assert_eq!(keys.len(), 7, "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| *k == "footprint.post.ox_connector_restart.v1.17.0.default")
    );

    let file = tmp(
        "with-status.json",
        &with_ledger_as_status(migration, ledger).to_string(),
    );
    let pre = plan(&file, "pre", &[]);
    assert_eq!(pre["lastMigratedRelease"], "v1.17.3");
    for a in pre["actions"].as_array().unwrap() {
        assert_eq!(
            (&a["decision"], &a["reason"]),
            (&json!("skip"), &json!("FootprintRecorded")),
            "{a}"
        );
    }
    let post = plan(&file, "post", &[]);
    let decisions: Vec<(String, String)> = post["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().into(),
                a["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            (
                "ox_shared_accounts_import".into(),
                "FootprintRecorded".into()
            ),
            ("flush_intercom_sessions".into(), "InWindow".into()),
        ]
    );
}

#[test]
fn a_document_layout_with_footprint_pairs_is_placed_on_the_declarations() {
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture("status-document.yaml"),
        "-o",
        "json",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("one document layout"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("note: history[1]"),
        "{}",
        stderr(&out)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = list["items"].as_array().unwrap();
    let file = tmp(
        "document.json",
        &with_ledger_as_status(&items[1], &items[0]).to_string(),
    );
    let reasons: Vec<String> = plan(&file, "pre", &[])["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["reason"].as_str().unwrap().to_string())
        .collect();
    // The pre actions tagged v1.18.0 with runMode apply are recorded; the two without a
    // runMode are not.
    assert_eq!(
        reasons,
        [
            "InWindow",
            "FootprintRecorded",
            "FootprintRecorded",
            "FootprintRecorded",
            "InWindow"
        ]
    );
}

#[test]
fn adoption_by_hand_with_footprint_flags() {
    let items = import(&[
        "--values",
        &fixture("values-v1.18.yaml"),
        "--installed-release",
        "v1.17.3",
        "--footprint",
        "ldap_entryuuid_to_object_identifier:v1.18.0:apply",
        "--footprint",
        "pre:workload_scale:v1.18.0:",
    ]);
    let ledger = of_kind(&items, "ConfigMap").unwrap();
    assert!(ledger["metadata"].get("annotations").is_none());
    let file = tmp(
        "by-hand.json",
        &with_ledger_as_status(of_kind(&items, "Migration").unwrap(), ledger).to_string(),
    );
    let reasons: Vec<String> = plan(&file, "pre", &[])["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        reasons,
        [
            "FootprintRecorded",
            "InWindow",
            "FootprintRecorded",
            "InWindow",
            "InWindow"
        ]
    );
    for bad in [
        &["--footprint", "workload_scale:v1.18.0:"][..],
        &[
            "--installed-release",
            "v1.17.3",
            "--footprint",
            "nope:v1.18.0:apply",
        ],
        &["--installed-release", "latest"],
    ] {
        let values = fixture("values-v1.18.yaml");
        let mut all = vec!["import-opendesk", "--values", values.as_str()];
        all.extend_from_slice(bad);
        let out = stagehand(&all);
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
}

fn refused(status: &str, want_code: i32, want: &[&str]) -> String {
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture(status),
    ]);
    assert_eq!(code(&out), want_code, "{status}: {}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{status}: nothing printed");
    for w in want {
        assert!(
            stderr(&out).contains(w),
            "{status}: {w:?} in {}",
            stderr(&out)
        );
    }
    stderr(&out)
}

#[test]
fn what_is_not_understood_is_refused_naming_the_key_and_the_way_by_hand() {
    let by_hand = ["--installed-release", "--footprint"];
    refused(
        "status-unknown-layout.yaml",
        2,
        &[&["\"migrations_run_ids\""][..], &by_hand].concat(),
    );
    refused(
        "status-unknown-entry-key.yaml",
        2,
        &[&["\"history[0].attempts\""][..], &by_hand].concat(),
    );
    refused(
        "status-no-release.yaml",
        2,
        &["no last migrated release", "--installed-release"],
    );
    // With the release given, the same ConfigMap imports.
    let items = import(&[
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture("status-no-release.yaml"),
        "--installed-release",
        "v1.17.3",
    ]);
    assert_eq!(items[0]["data"]["lastMigratedRelease"], "v1.17.3");
    let not_cm = tmp(
        "not-a-cm.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
    );
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &not_cm,
    ]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("not a ConfigMap"));
}

#[test]
fn an_interrupted_upgrade_is_refused_unless_accepted() {
    refused(
        "status-interrupted.yaml",
        1,
        &["interrupted", "migrations-post", "--accept-interrupted"],
    );
    let items = import(&[
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture("status-interrupted.yaml"),
        "--accept-interrupted",
    ]);
    assert_eq!(
        of_kind(&items, "ConfigMap").unwrap()["data"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("footprint."))
            .count(),
        2
    );
}

#[test]
fn values_problems_are_printed_with_the_values_paths_and_nothing_else() {
    let text = std::fs::read_to_string(fixture("values-v1.18.yaml")).unwrap();
    // actions.pre[3] is ox_names_to_object_identifier; a misspelled versions key there.
    let nth = text
        .match_indices("          from: \"v1.15\"")
        .nth(3)
        .unwrap()
        .0;
    let mut bad = text.clone();
    bad.replace_range(nth..nth + "          from".len(), "          form");
    let bad = bad.replace(
        "caBundle: \"\"",
        "caBundle: \"/etc/ssl/certs/objectstore-ca.pem\"",
    );
    let file = tmp("bad-values.yaml", &bad);
    let out = stagehand(&["import-opendesk", "--values", &file]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "nothing printed: {}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("UnknownVersionsKey: migrations.actions.pre[3].versions.form (ox_names_to_object_identifier)"),
        "{err}"
    );
    assert!(
        err.contains("error Untranslatable: migrations.objectStore.caBundle: caBundle \"/etc/ssl/certs/objectstore-ca.pem\""),
        "{err}"
    );
    assert!(err.contains("--ca-bundle FILE"), "{err}");
    // Given the CA, the caBundle is carried over as PEM.
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let ca = tmp("ca.pem", pem);
    let fixed = tmp(
        "ca-values.yaml",
        &text.replace(
            "caBundle: \"\"",
            "caBundle: \"/etc/ssl/certs/objectstore-ca.pem\"",
        ),
    );
    let items = import(&["--values", &fixed, "--ca-bundle", &ca]);
    assert_eq!(items[0]["spec"]["objectStore"]["caBundle"], pem);
    // An unknown key of the block is a problem too; the whole values file is unreadable as
    // a migrations block without one.
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &tmp(
            "extra.yaml",
            &text.replace(
                "  releaseVersion: \"v1.18.0\"\n  actions:",
                "  releaseVersion: \"v1.18.0\"\n  image: {tag: x}\n  actions:",
            ),
        ),
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("UnknownKey: migrations.image"),
        "{}",
        stderr(&out)
    );
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &tmp("none.yaml", "global: {}\n"),
    ]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no migrations block"));
}

#[test]
fn the_yaml_output_is_a_stream_kubectl_applies() {
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &fixture("values-v1.18.yaml"),
        "--status-configmap",
        &fixture("status-key-per-fact.yaml"),
    ]);
    assert_eq!(code(&out), 0);
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&stdout(&out))
        .map(|d| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .collect();
    assert_eq!(
        docs.iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ConfigMap", "Migration"]
    );
    // Without -n the manifests name no namespace (kubectl's -n decides).
    assert!(docs[1]["metadata"].get("namespace").is_none());
}
