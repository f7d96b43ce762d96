//! `stagehand import-opendesk` offline (docs/design.md#fresh-installations-and-adoption):
//! openDesk's v1.18 values become the Migration of `deploy/examples/opendesk-v1.18.yaml` (same
//! plan), a `migrations-status` ConfigMap becomes the ledger (the plan skips exactly its
//! footprints, `FootprintRecorded`), and every refusal path exits non-zero naming what to do.
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

/// Runs `import-opendesk` of the v1.18 values with the status ConfigMap at `status`.
fn import_opendesk(status: &str, extra: &[&str]) -> Output {
    let values = fixture("values-v1.18.yaml");
    let mut args = vec![
        "import-opendesk",
        "--values",
        &values,
        "--status-configmap",
        status,
    ];
    args.extend_from_slice(extra);
    stagehand(&args)
}

/// Runs the import; asserts exit 0; returns the `-o json` report.
fn report(args: &[&str]) -> Value {
    let mut all = vec!["import-opendesk", "-o", "json"];
    all.extend_from_slice(args);
    let out = stagehand(&all);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The objects of a report: the ledger (when there is one), then the Migration.
fn objects(report: &Value) -> Vec<Value> {
    [&report["ledger"], &report["migration"]]
        .into_iter()
        .filter(|o| !o.is_null())
        .cloned()
        .collect()
}

/// Runs the import; asserts exit 0; returns the objects printed (`-o json`).
fn import(args: &[&str]) -> Vec<Value> {
    objects(&report(args))
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

/// `(id, reason)` of every action of a plan's list of actions, in order.
fn id_reasons(actions: &Value) -> Vec<(String, String)> {
    actions
        .as_array()
        .unwrap_or_else(|| panic!("not a list of actions: {actions}"))
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The reason of every action `stagehand plan` decides for `stage` of the manifest `file`.
fn planned_reasons(file: &str, stage: &str) -> Vec<String> {
    id_reasons(&plan(file, stage, &[])["actions"])
        .into_iter()
        .map(|(_, reason)| reason)
        .collect()
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
    let example: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
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
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "each once: {ids:?}");
    let mut library = stagehand_actions::ACTION_IDS.to_vec();
    library.sort_unstable();
    assert_eq!(unique, library, "every action of the library");
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
    assert_eq!(
        id_reasons(&post["actions"]),
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
    let out = import_opendesk(&fixture("status-document.yaml"), &["-o", "json"]);
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
    let items = objects(&serde_json::from_slice(&out.stdout).unwrap());
    let file = tmp(
        "document.json",
        &with_ledger_as_status(&items[1], &items[0]).to_string(),
    );
    let reasons = planned_reasons(&file, "pre");
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
    assert!(
        ledger["metadata"]["annotations"]
            .get("stagehand.dev/imported-migrations-status")
            .is_none(),
        "no ConfigMap, no raw data"
    );
    let file = tmp(
        "by-hand.json",
        &with_ledger_as_status(of_kind(&items, "Migration").unwrap(), ledger).to_string(),
    );
    let reasons = planned_reasons(&file, "pre");
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
    let out = import_opendesk(&fixture(status), &[]);
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
    let out = import_opendesk(&not_cm, &[]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("not a ConfigMap"));
}

#[test]
fn an_interrupted_upgrade_is_refused_unless_accepted() {
    // v1.18.0's pre stage ran and its post stage never did. Under the v1.18.0 values that is
    // the pre stage of the release imported, run alone: the import goes on (the post stage is
    // Stagehand's to run). Under the v1.19.0 values it is an interrupted upgrade.
    let out = import_opendesk(&fixture("status-interrupted.yaml"), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the pre stage of release v1.18.0 being imported, run alone"),
        "{}",
        stderr(&out)
    );
    let out = stagehand(&[
        "import-opendesk",
        "--values",
        &fixture("values-v1.19.yaml"),
        "--status-configmap",
        &fixture("status-interrupted.yaml"),
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "nothing printed");
    for w in ["interrupted", "migrations-post", "--accept-interrupted"] {
        assert!(stderr(&out).contains(w), "{w}: {}", stderr(&out));
    }
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
    let bad = bad.replace("caBundle: \"\"", "caBundle: \"etc/opendesk/ca.crt\"");
    let file = tmp("bad-values.yaml", &bad);
    let out = stagehand(&["import-opendesk", "--values", &file]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "nothing printed: {}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("UnknownVersionsKey: migrations.actions.pre[3].versions.form (ox_names_to_object_identifier)"),
        "{err}"
    );
    // A caBundle that is no absolute path names no file the operator could read.
    assert!(
        err.contains("error Untranslatable: migrations.objectStore.caBundle: caBundle \"etc/opendesk/ca.crt\" is neither the absolute path"),
        "{err}"
    );
    assert!(err.contains("--ca-bundle FILE"), "{err}");

    // openDesk's caBundle path (trust.secret.mount) is carried over as the path, with a warning
    // that the operator's pod must mount it.
    let path = "/etc/opendesk/trust/ca-certificates.crt";
    let mounted = tmp(
        "mounted-ca-values.yaml",
        &text.replace("caBundle: \"\"", &format!("caBundle: \"{path}\"")),
    );
    let out = stagehand(&["import-opendesk", "--values", &mounted]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let warning = err
        .lines()
        .find(|l| l.contains("warning MountRequired: migrations.objectStore.caBundle: "))
        .unwrap_or_else(|| panic!("no MountRequired warning: {err}"));
    for part in [
        path,
        "operator's pod",
        "extraVolumeMounts",
        "docs/deploy.md#tls",
    ] {
        assert!(warning.contains(part), "{warning}");
    }
    let items = import(&["--values", &mounted]);
    assert_eq!(items[0]["spec"]["objectStore"]["caBundle"], path);

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

    // verifySSL: false becomes insecureSkipTlsVerify: true, with a warning.
    let unverified = tmp(
        "verify-values.yaml",
        &text.replace("verifySSL: true", "verifySSL: false"),
    );
    let out = stagehand(&["import-opendesk", "--values", &unverified]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning NotCarriedOver: migrations.objectStore.verifySSL: verifySSL: false becomes insecureSkipTlsVerify: true"),
        "{}",
        stderr(&out)
    );
    let items = import(&["--values", &unverified]);
    assert_eq!(
        items[0]["spec"]["objectStore"]["insecureSkipTlsVerify"],
        true
    );
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
    let out = import_opendesk(&fixture("status-key-per-fact.yaml"), &[]);
    assert_eq!(code(&out), 0);
    let docs = yaml_docs(&stdout(&out));
    assert_eq!(
        docs.iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ConfigMap", "Migration"]
    );
    // Without -n the manifests name no namespace (kubectl's -n decides).
    assert!(docs[1]["metadata"].get("namespace").is_none());
}

/// A `migrations-status` ConfigMap of v1.17.3 with the given history (YAML list lines).
fn status_file(name: &str, release: &str, last_stage: &str, history: &[&str]) -> String {
    let lines: String = history.iter().map(|h| format!("    - {h}\n")).collect();
    tmp(
        name,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: migrations-status}}\ndata:\n  lastMigratedRelease: \"{release}\"\n  lastStage: \"{last_stage}\"\n  history: |\n{lines}"
        ),
    )
}

/// Every v1.18.0 pre footprint as the values declare it, but `ldap_entryuuid_to_object_identifier`
/// recorded with runMode `default` (declared `apply`).
const LDAP_DEFAULT: [&str; 5] = [
    r#"{id: workload_scale, stage: pre, tag: "v1.18.0"}"#,
    r#"{id: ox_functional_accounts_export, stage: pre, tag: "v1.18.0", runMode: apply}"#,
    r#"{id: ldap_entryuuid_to_object_identifier, stage: pre, tag: "v1.18.0", runMode: default}"#,
    r#"{id: ox_names_to_object_identifier, stage: pre, tag: "v1.18.0", runMode: apply}"#,
    r#"{id: provisioning_drop_subscriptions, stage: pre, tag: "v1.18.0"}"#,
];

fn decisions(report: &Value, stage: &str) -> Vec<(String, String)> {
    id_reasons(&report["plan"][stage])
}

#[test]
fn an_entry_with_a_run_mode_the_values_do_not_declare_is_listed_and_refused() {
    let status = status_file("ldap-default.yaml", "v1.17.3", "post", &LDAP_DEFAULT);
    let values = fixture("values-v1.18.yaml");
    let base = [
        "--values",
        values.as_str(),
        "--status-configmap",
        status.as_str(),
    ];
    let r = report(&base);
    assert_eq!(
        r["unmatched"],
        json!([{
            "source": "history[2]",
            "id": "ldap_entryuuid_to_object_identifier",
            "stage": "pre",
            "tag": "v1.18.0",
            "runMode": "default",
            "reason": "pre ldap_entryuuid_to_object_identifier is declared with tag v1.18.0 and runMode apply (the history says runMode default)"
        }])
    );
    // The plan shows what the history makes skip — and that ldap_entryuuid_to_object_identifier
    // would run again.
    assert_eq!(
        decisions(&r, "pre"),
        [
            ("workload_scale", "FootprintRecorded"),
            ("ox_functional_accounts_export", "FootprintRecorded"),
            ("ldap_entryuuid_to_object_identifier", "InWindow"),
            ("ox_names_to_object_identifier", "FootprintRecorded"),
            ("provisioning_drop_subscriptions", "FootprintRecorded"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );

    // The preview of --apply refuses, listing the entry and what to do; printed anyway.
    let mut args = vec!["import-opendesk", "--dry-run"];
    args.extend_from_slice(&base);
    let out = stagehand(&args);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning Unmatched: history[2] (id ldap_entryuuid_to_object_identifier, stage pre, tag v1.18.0, runMode default) matches no declared action: pre ldap_entryuuid_to_object_identifier is declared with tag v1.18.0 and runMode apply"),
        "{err}"
    );
    assert!(err.contains("--apply would refuse"), "{err}");
    assert!(err.contains("--allow-unmatched"), "{err}");
    assert!(err.contains("--footprint"), "{err}");
    assert!(stdout(&out).contains("kind: Migration"));
    args.push("--allow-unmatched");
    let out = stagehand(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("allowed by --allow-unmatched"));

    // A --footprint given by hand is matched alike.
    let out = stagehand(&[
        "import-opendesk",
        "-o",
        "json",
        "--values",
        &values,
        "--installed-release",
        "v1.17.3",
        "--footprint",
        "ldap_entryuuid_to_object_identifier:v1.18.0:default",
        "--dry-run",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        r["unmatched"][0]["source"],
        "--footprint ldap_entryuuid_to_object_identifier:v1.18.0:default"
    );
}

/// The post footprints of the ledger a status imports into.
fn post_footprints(status: &str, extra: &[&str]) -> (Vec<String>, Value) {
    let values = fixture("values-v1.18.yaml");
    let mut args = vec!["--values", values.as_str(), "--status-configmap", status];
    args.extend_from_slice(extra);
    let r = report(&args);
    let keys = r["ledger"]["data"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("footprint.post."))
        .cloned()
        .collect();
    (keys, r)
}

#[test]
fn entries_without_a_stage_stand_for_post_declarations_only_once_that_post_stage_completed() {
    let history = [
        r#"{tag: "v1.18.0", runMode: apply}"#,
        r#"{id: ox_shared_accounts_import, tag: "v1.18.0", runMode: apply}"#,
    ];
    // v1.18.0's post stage did not complete (last migrated release v1.17.3): the pair stands
    // for the pre declarations only; the entry that can only be post is unmatched.
    let (post, r) = post_footprints(
        &status_file("stageless-117.yaml", "v1.17.3", "post", &history),
        &[],
    );
    assert!(post.is_empty(), "{post:?}");
    assert_eq!(
        r["ledger"]["data"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with("footprint.pre."))
            .count(),
        3,
        "the three pre actions declared v1.18.0/apply"
    );
    let unmatched = r["unmatched"].as_array().unwrap();
    assert_eq!(unmatched.len(), 1, "{unmatched:?}");
    assert_eq!(unmatched[0]["source"], "history[1]");
    assert!(
        unmatched[0]["reason"]
            .as_str()
            .unwrap()
            .contains("does not say the post stage of release v1.18.0 completed"),
        "{unmatched:?}"
    );
    assert_eq!(
        decisions(&r, "post")[0],
        ("ox_shared_accounts_import".into(), "InWindow".into())
    );

    // The ConfigMap says v1.18.0 was migrated (its post stage completed): both stand for it.
    let (post, r) = post_footprints(
        &status_file("stageless-118.yaml", "v1.18.0", "post", &history),
        &[],
    );
    assert_eq!(
        post,
        ["footprint.post.ox_shared_accounts_import.v1.18.0.apply"]
    );
    assert_eq!(r["unmatched"], json!([]));

    // An interrupted upgrade accepted: no post declaration is assumed done.
    let (post, r) = post_footprints(
        &status_file("stageless-interrupted.yaml", "v1.18.0", "pre", &history),
        &["--accept-interrupted"],
    );
    assert!(post.is_empty(), "{post:?}");
    assert!(
        r["unmatched"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("--accept-interrupted"),
        "{r}"
    );
}

#[test]
fn a_dry_run_from_files_needs_no_cluster_and_prints_what_the_history_makes_skip() {
    // KUBECONFIG points at nothing (see `stagehand`).
    let out = import_opendesk(
        &fixture("status-key-per-fact.yaml"),
        &["-n", "opendesk", "--dry-run", "--allow-unmatched"],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("dry run offline"), "{err}");
    // The plan with the imported history, per stage.
    let rows: Vec<Vec<&str>> = err
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for (id, decision, reason) in [
        (
            "ldap_entryuuid_to_object_identifier",
            "skip",
            "FootprintRecorded",
        ),
        ("ox_shared_accounts_import", "skip", "FootprintRecorded"),
        ("flush_intercom_sessions", "run", "InWindow"),
    ] {
        assert!(
            rows.iter()
                .any(|r| r.get(1) == Some(&id) && r[r.len() - 2..] == [decision, reason]),
            "{id} {decision} {reason} in\n{err}"
        );
    }
    assert!(err.contains("plan of stage pre"), "{err}");
    // The unmatched entry of an earlier release is listed, allowed.
    assert!(
        err.contains("warning Unmatched: history[0] (id ox_connector_restart, stage post, tag v1.17.0, runMode default) matches no declared action: the values declare no action ox_connector_restart in stage post"),
        "{err}"
    );
    assert!(stdout(&out).contains("kind: Migration"), "{}", stdout(&out));
    assert!(stdout(&out).contains("name: opendesk-history"));
}

const GITOPS: [(&str, &str); 3] = [
    ("argocd.argoproj.io/compare-options", "IgnoreExtraneous"),
    ("argocd.argoproj.io/sync-options", "Prune=false"),
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
];

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(d).unwrap();
            serde_json::to_value(v).unwrap()
        })
        .collect()
}

#[test]
fn the_ledger_carries_the_gitops_annotations_and_is_printed_apart_from_the_migration() {
    let values = fixture("values-v1.18.yaml");
    let status = fixture("status-key-per-fact.yaml");
    let assert_annotated = |ledger: &Value| {
        assert_eq!(ledger["kind"], "ConfigMap");
        for (k, v) in GITOPS {
            assert_eq!(ledger["metadata"]["annotations"][k], v, "{k} in {ledger}");
        }
    };
    // YAML: the ledger is its own document, headed by why it never goes into git.
    let out = import_opendesk(&status, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let docs = yaml_docs(&text);
    assert_eq!(docs.len(), 2);
    assert_annotated(&docs[0]);
    assert_eq!(docs[1]["kind"], "Migration");
    assert!(
        text.starts_with("---\n# The history ledger") && text.contains("Never keep it in git"),
        "{text}"
    );
    // --ledger-file: the ledger goes there, standard output is the Migration alone.
    let file = std::env::temp_dir()
        .join(format!("stagehand-import-{}", std::process::id()))
        .join("ledger.yaml");
    let out = import_opendesk(&status, &["--ledger-file", file.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let docs = yaml_docs(&stdout(&out));
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["kind"], "Migration");
    let ledger = yaml_docs(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(ledger.len(), 1);
    assert_annotated(&ledger[0]);
    // JSON: apart, under their own keys.
    let r = report(&["--values", &values, "--status-configmap", &status]);
    assert_annotated(&r["ledger"]);
    assert_eq!(r["migration"]["kind"], "Migration");
}

const EXAMPLE_V1_19: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/examples/opendesk-v1.19.yaml"
);

/// Runs the import of `args` with `-o json`, any exit code: the report (when printed) and stderr.
fn report_any(args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["import-opendesk", "-o", "json"];
    all.extend_from_slice(args);
    let out = stagehand(&all);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (code(&out), report, stderr(&out))
}

#[test]
fn the_v1_19_values_become_the_shipped_v1_19_example() {
    let (exit, r, err) = report_any(&["--values", &fixture("values-v1.19.yaml"), "-n", "opendesk"]);
    assert_eq!(exit, 0, "{err}");
    let migration = &r["migration"];
    let example: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(EXAMPLE_V1_19).unwrap()).unwrap();
    let example: Value = serde_json::to_value(example).unwrap();
    assert_eq!(migration["spec"], example["spec"]);
    assert_eq!(migration["metadata"], example["metadata"]);
    // What openDesk renders for its Job and its per-deployment options is not carried over,
    // each said once; the object store no v1.19 action reads is dropped, its CA path included.
    for path in [
        "migrations.namespace",
        "migrations.loglevel",
        "migrations.cleanup",
        "migrations.actionOptions.synapseDeactivateOrphanedUsers",
        "migrations.objectStore",
    ] {
        assert!(
            err.contains(&format!("warning NotCarriedOver: {path}: ")),
            "{path}: {err}"
        );
    }
    assert!(!err.contains("error"), "{err}");
    assert!(migration["spec"].get("objectStore").is_none());
    let file = tmp("v1.19.json", &migration.to_string());
    let out = stagehand(&["validate", "-f", &file]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[test]
fn v1_19_action_options_that_disagree_with_the_declaration_are_refused() {
    let text = std::fs::read_to_string(fixture("values-v1.19.yaml")).unwrap();
    let edited = text.replacen(
        "      dryRun: true\n      maxOrphanPercent: 25",
        "      dryRun: false\n      maxOrphanPercent: 50",
        1,
    );
    assert_ne!(edited, text, "the fixture's actionOptions moved");
    let (exit, _, err) = report_any(&["--values", &tmp("v1.19-edited.yaml", &edited)]);
    assert_eq!(exit, 1, "{err}");
    for expected in [
        "error Untranslatable: migrations.actionOptions.synapseDeactivateOrphanedUsers.dryRun (synapse_deactivate_orphaned_users): dryRun false renders runMode \"apply\" and config.synapse.dryRun false, but migrations.actions.pre[0] declares runMode \"dry-run\" and config.synapse.dryRun true",
        "error Untranslatable: migrations.actionOptions.synapseDeactivateOrphanedUsers.maxOrphanPercent (synapse_deactivate_orphaned_users): maxOrphanPercent 50 differs from migrations.actions.pre[0].config.safety.maxOrphanPercent (25)",
    ] {
        assert!(err.contains(expected), "{expected}\n{err}");
    }
}

/// openDesk's review: migrations-pre of v1.19.0 deployed alone on v1.18.2. Its recorded work
/// carries v1.19.0's tag: the import goes on (no --accept-interrupted), records that work as
/// v1.19.0's, and plans the post stage still to run. The same ConfigMap with an older
/// release's pre stage (v1.18.0 on v1.17.3) stays an interrupted upgrade.
#[test]
fn a_pre_stage_of_the_release_imported_run_alone_is_no_interrupted_upgrade() {
    let (exit, r, err) = report_any(&[
        "--values",
        &fixture("values-v1.19.yaml"),
        "--status-configmap",
        &fixture("status-v1.19-review.yaml"),
        "--allow-unmatched",
    ]);
    assert_eq!(exit, 0, "{err}");
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("the pre stage of release v1.19.0 being imported, run alone (openDesk's review, history[2], history[3], history[4]): not an interrupted upgrade"),
        "{notes}"
    );
    let data = r["ledger"]["data"].as_object().unwrap();
    assert_eq!(data["lastMigratedRelease"], "v1.18.2");
    let entry = |key: &str| -> Value {
        serde_json::from_str(
            data[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {data:?}")),
        )
        .unwrap()
    };
    let review = entry("footprint.pre.configmap_create.v1.19.0.apply");
    assert_eq!(review["release"], "v1.19.0", "{review}");
    let older = entry("footprint.pre.ldap_entryuuid_to_object_identifier.v1.18.0.apply");
    assert!(older["release"].is_null(), "{older}");
    // What the review did is skipped; the post stage is still to run.
    let plan: Vec<(String, String)> = r["plan"]["pre"]
        .as_array()
        .unwrap()
        .iter()
        .chain(r["plan"]["post"].as_array().unwrap())
        .map(|a| {
            (
                a["id"].as_str().unwrap().into(),
                a["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("synapse_deactivate_orphaned_users", "FootprintRecorded"),
            ("configmap_create", "FootprintRecorded"),
            ("synapse_signing_key_export", "FootprintRecorded"),
            ("udm_remove_legacy_hashes", "InWindow"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string())),
        "{}",
        r["plan"]
    );

    // An older release's pre stage under the v1.19 values: refused, naming the entry.
    let (exit, _, err) = report_any(&[
        "--values",
        &fixture("values-v1.19.yaml"),
        "--status-configmap",
        &fixture("status-interrupted.yaml"),
    ]);
    assert_eq!(exit, 1, "{err}");
    assert!(
        err.contains("history[0] (workload_scale) carries tag v1.18.0, not the release being imported (v1.19.0)")
            && err.contains("--accept-interrupted"),
        "{err}"
    );
}
