//! The CRDs on the real API server: structural rules reject bad Migrations and MigrationRuns
//! on apply, v1alpha1 warns, printer columns and the category work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, client, get, install_crds, kubectl, kubectl_stdin, ok, stagehand, stderr, stdout,
};

fn install_current_crds() {
    let current = ok("crds", &stagehand(&["crds"]));
    // What the README tells users to run is accepted as it is.
    ok(
        "client dry run",
        &kubectl_stdin(&["apply", "--dry-run=client", "-f", "-"], Some(&current)),
    );
    ok(
        "server dry run",
        &kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], Some(&current)),
    );
    install_crds();
}

fn migration(ns: &str, name: &str, version: &str, versions: Value) -> String {
    Migration::new(ns)
        .name(name)
        .api_version(version)
        .pre(Action::scale_without_timeout("ox-connector", 0).versions(versions))
        .to_yaml()
}

#[tokio::test]
async fn the_api_server_enforces_the_schema_rules() {
    let ns = Scene::cluster_without_crds("schema").await;
    install_current_crds();
    let good = json!({"minimum": "v1.15", "from": "v1.15", "to": "v1.17"});

    // The example of the repository applies as it is.
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/opendesk-v1.18.yaml"
    ))
    .unwrap()
    .replace("namespace: opendesk", &format!("namespace: {}", ns.name));
    ok(
        "apply example",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&example)),
    );

    // A misspelled versions key is rejected (kubectl's strict field validation).
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&migration(
            &ns.name,
            "typo",
            "v1beta1",
            json!({"minimum": "v1.15", "form": "v1.15", "to": "v1.17"}),
        )),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("form"), "{}", stderr(&out));
    // A missing key, and a value that is not a release series.
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&migration(
            &ns.name,
            "missing",
            "v1beta1",
            json!({"minimum": "v1.15", "to": "v1.17"}),
        )),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("from"), "{}", stderr(&out));
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&migration(
            &ns.name,
            "notaversion",
            "v1beta1",
            json!({"minimum": "v1.15", "from": "v1.15-rc1", "to": "v1.17"}),
        )),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("versions.from"), "{}", stderr(&out));

    // v1alpha1 still works, with the deprecation warning naming v1beta1 on stderr.
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&migration(&ns.name, "old", "v1alpha1", good)),
    );
    ok("apply v1alpha1", &out);
    assert!(
        stderr(&out).contains("Warning:") && stderr(&out).contains("v1beta1"),
        "{}",
        stderr(&out)
    );
    let read = ok(
        "get",
        &kubectl(&[
            "get",
            "migrations.v1beta1.stagehand.dev",
            "old",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.spec.suspend}",
        ]),
    );
    // Written through v1alpha1, stored as v1beta1 (the storage version): its default is there.
    assert_eq!(read, "false");

    // MigrationRun: the stage enum, and the category/short names/columns.
    let run = |stage: &str| MigrationRun::new(&ns.name, &format!("run-{stage}"), stage).to_yaml();
    let out = kubectl_stdin(&["apply", "-f", "-"], Some(&run("middle")));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("supported values") && stderr(&out).contains("pre"),
        "{}",
        stderr(&out)
    );
    ok(
        "create run",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&run("pre"))),
    );
    let columns = ok("get migrun", &kubectl(&["get", "migrun", "-n", &ns.name]));
    let header = columns.lines().next().unwrap();
    for col in [
        "NAME", "STAGE", "RELEASE", "READY", "REASON", "PROGRESS", "AGE",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let all = ok(
        "get stagehand",
        &kubectl(&["get", "stagehand", "-n", &ns.name, "-o", "name"]),
    );
    assert!(
        all.contains("migration.stagehand.dev/opendesk")
            && all.contains("migrationrun.stagehand.dev/run-pre"),
        "{all}"
    );
    let explain = kubectl(&["explain", "migrationrun.spec.waitTimeoutSeconds"]);
    assert!(
        stdout(&explain).contains("How long the run may wait"),
        "{}",
        stdout(&explain)
    );
    drop(ns);
}

#[tokio::test]
async fn applying_the_crds_prints_no_warning() {
    let _client = client().await;
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/crds/stagehand-crds.yaml"
    ))
    .unwrap();
    // Both ways the docs install them; the API server's warnings (e.g. `unrecognized format
    // "uint"`) come back on stderr as `Warning: ...`.
    for args in [
        &["apply", "--server-side", "--force-conflicts", "-f", "-"][..],
        &["apply", "-f", "-"][..],
    ] {
        let out = kubectl_stdin(args, Some(&committed));
        let err = stderr(&out);
        assert!(out.status.success(), "kubectl {args:?}: {err}");
        // kubectl's own note when a client-side apply follows the server-side one of other
        // tests is not the API server's; every other warning is.
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.to_ascii_lowercase().contains("warning"))
            .filter(|l| !l.contains("kubectl.kubernetes.io/last-applied-configuration"))
            .collect();
        assert!(
            warnings.is_empty(),
            "kubectl {args:?} printed warnings: {warnings:#?}"
        );
    }
}

#[tokio::test]
async fn an_object_no_operator_has_seen_reads_back_as_not_observed() {
    let ns = Scene::cluster_without_crds("unobserved").await;
    install_current_crds();
    let good = json!({"minimum": "v1.15", "from": "v1.15", "to": "v1.17"});
    ok(
        "apply Migration",
        &kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&migration(&ns.name, "opendesk", "v1beta1", good)),
        ),
    );
    let run = MigrationRun::new(&ns.name, "r", "pre").to_yaml();
    // The status a client sends on create is dropped; the default fills it in on read.
    let with_status = format!("{run}status: {{observedGeneration: 1}}\n");
    ok(
        "create run",
        &kubectl_stdin(&["create", "-f", "-"], Some(&with_status)),
    );
    for (kind, version) in [
        ("migrationrun.v1beta1.stagehand.dev/r", "v1beta1"),
        ("migrationrun.v1alpha1.stagehand.dev/r", "v1alpha1"),
        ("migration.v1beta1.stagehand.dev/opendesk", "v1beta1"),
        ("migration.v1alpha1.stagehand.dev/opendesk", "v1alpha1"),
    ] {
        let got = get(&ns.name, kind);
        assert_eq!(got["metadata"]["generation"], 1, "{kind}");
        assert_eq!(
            got["status"]["observedGeneration"], -1,
            "{kind} ({version}) read back before any operator saw it: {got}"
        );
    }
}
