//! The CRDs on the real API server: structural rules reject bad Migrations and MigrationRuns
//! on apply, v1alpha1 warns, printer columns and the category work.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use stagehand_e2e::{TestNamespace, client, kubectl, kubectl_stdin, ok, stagehand, stderr, stdout};

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
    ok(
        "apply CRDs",
        &kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&current),
        ),
    );
    for crd in ["migrations.stagehand.dev", "migrationruns.stagehand.dev"] {
        ok(
            "wait",
            &kubectl(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{crd}"),
            ]),
        );
    }
}

fn migration(ns: &str, name: &str, version: &str, versions: &str) -> String {
    format!(
        r#"apiVersion: stagehand.dev/{version}
kind: Migration
metadata: {{name: {name}, namespace: {ns}}}
spec:
  releaseVersion: "v1.18.0"
  actions:
    pre:
      - id: workload_scale
        versions: {versions}
        config: {{workload: {{kind: StatefulSet, name: ox-connector, replicas: 0}}}}
"#
    )
}

#[tokio::test]
async fn the_api_server_enforces_the_schema_rules() {
    let client = client().await;
    install_current_crds();
    let ns = TestNamespace::new(&client, "schema").await;
    let good = r#"{minimum: "v1.15", from: "v1.15", to: "v1.17"}"#;

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
            r#"{minimum: "v1.15", form: "v1.15", to: "v1.17"}"#,
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
            r#"{minimum: "v1.15", to: "v1.17"}"#,
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
            r#"{minimum: "v1.15", from: "v1.15-rc1", to: "v1.17"}"#,
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
    let run = |stage: &str| {
        format!(
            "apiVersion: stagehand.dev/v1beta1\nkind: MigrationRun\nmetadata: {{name: run-{stage}, namespace: {}}}\nspec: {{migrationRef: opendesk, stage: {stage}, release: v1.18.0}}\n",
            ns.name
        )
    };
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
