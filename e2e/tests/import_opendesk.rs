//! `stagehand import-opendesk --from-cluster --apply` on the real control plane (issue 14): a
//! deployment whose `migrations-status` ConfigMap records every v1.18.0 footprint but
//! `workload_scale`'s is imported, and its runs execute exactly that one action — nothing the
//! ConfigMap recorded runs again. `--dry-run` writes nothing; a second `--apply` changes
//! nothing; an import over a ledger that has moved on is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::{
    Scene, apply, assert_no_secret_leak, create_secret, footprints, get, kubectl, kubectl_stdin,
    ok, stagehand, statefulset, stderr, stdout, wait,
};

const VALUES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../operator/tests/fixtures/opendesk/values-v1.18.yaml"
);

fn status_configmap(ns: &str) -> String {
    let entry = |id: &str, stage: &str, mode: Option<&str>| {
        let mode = mode.map(|m| format!(", runMode: {m}")).unwrap_or_default();
        format!("    - {{id: {id}, stage: {stage}, tag: \"v1.18.0\"{mode}}}\n")
    };
    let history: String = [
        entry("ox_functional_accounts_export", "pre", Some("apply")),
        entry("ldap_entryuuid_to_object_identifier", "pre", Some("apply")),
        entry("ox_names_to_object_identifier", "pre", Some("apply")),
        entry("provisioning_drop_subscriptions", "pre", None),
        entry("ox_shared_accounts_import", "post", Some("apply")),
        entry("flush_intercom_sessions", "post", None),
    ]
    .concat();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: migrations-status, namespace: {ns}}}\ndata:\n  lastMigratedRelease: \"v1.17.3\"\n  lastStage: \"post\"\n  history: |\n{history}"
    )
}

fn exists(ns: &str, what: &str) -> bool {
    kubectl(&["get", what, "-n", ns]).status.success()
}

fn import(ns: &str, extra: &str) -> std::process::Output {
    stagehand(&[
        "import-opendesk",
        "--values",
        VALUES,
        "--from-cluster",
        "-n",
        ns,
        extra,
    ])
}

fn run(ns: &str, stage: &str) -> String {
    MigrationRun::new(ns, &format!("opendesk-v1.18.0-{stage}"), stage).to_yaml()
}

fn decisions(obj: &Value) -> Vec<(String, String, String)> {
    obj["status"]["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("no actions in {obj}"))
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap_or_default().to_string(),
                a["decision"].as_str().unwrap_or_default().to_string(),
                a["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_imported_history_is_not_run_again() {
    let scene = Scene::cluster("import-od").await;
    let ns = scene.name.clone();
    apply(&statefulset(&ns, "ox-connector", 1));
    ok(
        "create migrations-status",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&status_configmap(&ns))),
    );
    // The Secrets the imported Migration names, there from the start as in openDesk: the
    // secret-leak search at the end looks for their values in everything the import and the
    // runs wrote. The preflight checks every secret file the Migration lists that is not
    // optional.
    let secrets = [
        (
            "ums-provisioning-api-admin",
            format!("prov-{}-S3cret", std::process::id()),
        ),
        (
            "cache-intercom-service-password",
            format!("redis-{}-S3cret", std::process::id()),
        ),
    ];
    for (name, value) in &secrets {
        create_secret(&ns, name, "password", value);
    }
    let mut said = Vec::new();

    // --dry-run: checked against the API server, nothing written.
    let out = import(&ns, "--dry-run");
    said.push(("import --dry-run", stdout(&out) + &stderr(&out)));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("kind: Migration"), "{}", stdout(&out));
    assert!(stderr(&out).contains("dry run"), "{}", stderr(&out));
    assert!(!exists(&ns, "configmap/opendesk-history"));
    assert!(!exists(&ns, "migration/opendesk"));

    // --apply: the ledger, then the Migration.
    let out = import(&ns, "--apply");
    said.push(("import --apply", stdout(&out) + &stderr(&out)));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("configmap/opendesk-history created"),
        "{}",
        stdout(&out)
    );
    let ledger = get(&ns, "configmap/opendesk-history");
    let with_fields: Value = serde_json::from_str(&ok(
        "kubectl get",
        &kubectl(&[
            "get",
            "configmap/opendesk-history",
            "-n",
            &ns,
            "-o",
            "json",
            "--show-managed-fields",
        ]),
    ))
    .unwrap();
    let managers: Vec<&str> = with_fields["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["stagehand-import"]);
    assert_eq!(ledger["data"]["lastMigratedRelease"], "v1.17.3");
    let count = |l: &Value| footprints(l, "").len();
    assert_eq!(count(&ledger), 6);
    assert!(
        ledger["metadata"]["annotations"]["stagehand.dev/imported-migrations-status"]
            .as_str()
            .unwrap()
            .contains("ox_names_to_object_identifier")
    );
    let migration = get(&ns, "migration/opendesk");
    assert_eq!(migration["spec"]["installedRelease"], "v1.17.3");

    // Again: nothing changes.
    let out = import(&ns, "--apply");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("unchanged"), "{}", stdout(&out));

    // The runs execute only what the ConfigMap did not record.
    let operator = scene.start_operator();
    apply(&run(&ns, "pre"));
    wait(&ns, "migrationrun/opendesk-v1.18.0-pre", "Ready");
    let pre = get(&ns, "migrationrun/opendesk-v1.18.0-pre");
    let skipped = |id: &str| {
        (
            id.to_string(),
            "Skipped".to_string(),
            "FootprintRecorded".to_string(),
        )
    };
    let pre_decisions = decisions(&pre);
    assert_eq!(pre_decisions[0].0, "workload_scale");
    assert_eq!(pre_decisions[0].1, "Succeeded", "{pre_decisions:?}");
    assert_eq!(
        pre_decisions[1..],
        [
            skipped("ox_functional_accounts_export"),
            skipped("ldap_entryuuid_to_object_identifier"),
            skipped("ox_names_to_object_identifier"),
            skipped("provisioning_drop_subscriptions"),
        ]
    );
    assert_eq!(
        get(&ns, "statefulset/ox-connector")["spec"]["replicas"],
        0,
        "workload_scale ran"
    );
    apply(&run(&ns, "post"));
    wait(&ns, "migrationrun/opendesk-v1.18.0-post", "Ready");
    let post = get(&ns, "migrationrun/opendesk-v1.18.0-post");
    assert_eq!(
        decisions(&post),
        [
            skipped("ox_shared_accounts_import"),
            skipped("flush_intercom_sessions")
        ]
    );
    let ledger = get(&ns, "configmap/opendesk-history");
    assert_eq!(count(&ledger), 7, "workload_scale's footprint added");
    assert_eq!(ledger["data"]["lastMigratedRelease"], "v1.18.0");

    // The ledger moved on: a new import is refused and leaves it alone.
    let out = import(&ns, "--apply");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("exists and differs"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        get(&ns, "configmap/opendesk-history")["data"],
        ledger["data"]
    );
    said.push(("the refused import", stdout(&out) + &stderr(&out)));
    let logs = operator.logs();
    assert!(
        logs.contains("run succeeded"),
        "the operator's log was captured"
    );
    said.push(("the operator's log", logs));
    let texts: Vec<(&str, &str)> = said.iter().map(|(w, t)| (*w, t.as_str())).collect();
    let values: Vec<&str> = secrets.iter().map(|(_, v)| v.as_str()).collect();
    assert_no_secret_leak(&ns, &values, &texts);
}

/// A history the values disagree with (`ldap_entryuuid_to_object_identifier` recorded with
/// runMode `default`, declared `apply`) is listed and `--apply` writes nothing, unless
/// `--allow-unmatched`; the ledger written carries the GitOps annotations.
#[tokio::test]
async fn an_unmatched_history_is_refused_and_nothing_is_written() {
    let scene = Scene::cluster("import-unm").await;
    let ns = scene.name.clone();
    let status = status_configmap(&ns).replace(
        "{id: ldap_entryuuid_to_object_identifier, stage: pre, tag: \"v1.18.0\", runMode: apply}",
        "{id: ldap_entryuuid_to_object_identifier, stage: pre, tag: \"v1.18.0\", runMode: default}",
    );
    assert!(status.contains("runMode: default"), "{status}");
    ok(
        "create migrations-status",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&status)),
    );

    let out = import(&ns, "--apply");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning Unmatched: history[1] (id ldap_entryuuid_to_object_identifier, stage pre, tag v1.18.0, runMode default) matches no declared action: pre ldap_entryuuid_to_object_identifier is declared with tag v1.18.0 and runMode apply"),
        "{err}"
    );
    assert!(err.contains("nothing was written"), "{err}");
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    assert!(!exists(&ns, "configmap/opendesk-history"));
    assert!(!exists(&ns, "migration/opendesk"));

    let out = stagehand(&[
        "import-opendesk",
        "--values",
        VALUES,
        "--from-cluster",
        "-n",
        &ns,
        "--apply",
        "--allow-unmatched",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ledger = get(&ns, "configmap/opendesk-history");
    for (key, value) in [
        ("argocd.argoproj.io/compare-options", "IgnoreExtraneous"),
        ("argocd.argoproj.io/sync-options", "Prune=false"),
        ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
    ] {
        assert_eq!(ledger["metadata"]["annotations"][key], value, "{key}");
    }
    assert!(
        footprints(&ledger, "")
            .iter()
            .any(|k| k.contains("ldap_entryuuid_to_object_identifier.v1.18.0.default")),
        "the entry is kept as recorded: {ledger}"
    );
    assert!(exists(&ns, "migration/opendesk"));
}
