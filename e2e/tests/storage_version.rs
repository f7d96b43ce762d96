//! The storage-version lab (shared/reference/crd-storage-version-lab.md) replayed step by step
//! against the real API server, with Stagehand's `storage-status`/`storage-migrate` doing
//! steps 5, 7 and the check; then the same for Stagehand's own CRDs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, delete_crd, get, install_crds, kubectl, kubectl_stdin, ok, stagehand, stderr, stdout,
    stored_versions, wait_established, wait_for, wait_up_to,
};

/// Both tests replace cluster-scoped CRDs; they run one at a time.
static CLUSTER_SCOPED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const TUNNELS: &str = "tunnels.net.labhub.io";

/// Step 4 of the lab: v1alpha1 stops being, and v1beta1 becomes, the storage version.
fn flip_storage(crd: &str) {
    ok(
        "flip storage",
        &kubectl(&[
            "patch",
            "crd",
            crd,
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
        ]),
    );
}

const OWN_CRDS: [&str; 2] = ["migrations.stagehand.dev", "migrationruns.stagehand.dev"];

/// Replaces Stagehand's CRDs with those of its first release (v1alpha1 only, stored).
async fn install_v1alpha1_only_crds() {
    for crd in OWN_CRDS {
        delete_crd(crd).await;
    }
    let old = ok(
        "crds --v1alpha1-only",
        &stagehand(&["crds", "--v1alpha1-only"]),
    );
    ok(
        "apply v1alpha1 CRDs",
        &kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&old)),
    );
    for crd in OWN_CRDS {
        wait_established(crd);
    }
}

#[tokio::test]
async fn the_lab_replayed_against_the_api_server() {
    let _serial = CLUSTER_SCOPED.lock().await;
    let ns = Scene::cluster_without_crds("crd-version").await;
    delete_crd(TUNNELS).await;

    // 1. Two versions, v1alpha1 stored.
    let crd_yaml = include_str!("fixtures/tunnels-crd.yaml");
    ok(
        "apply CRD",
        &kubectl_stdin(&["apply", "-f", "-"], Some(crd_yaml)),
    );
    wait_established(TUNNELS);
    let status = stagehand(&["storage-status", TUNNELS]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    assert_eq!(
        stdout(&status),
        "served=v1alpha1,v1beta1\nstorage=v1alpha1\nstored=v1alpha1\nMIGRATED\n"
    );

    // 2. Two Tunnels through v1alpha1: the deprecation warning arrives on stderr.
    for (name, endpoint) in [("t-east", "10.30.0.11"), ("t-west", "10.30.0.12")] {
        let manifest = format!(
            "apiVersion: net.labhub.io/v1alpha1\nkind: Tunnel\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n  endpoint: {endpoint}\n  port: 4789\n",
            ns.name
        );
        let out = kubectl_stdin(&["apply", "-f", "-"], Some(&manifest));
        ok("create tunnel", &out);
        assert!(
            stderr(&out).contains("Warning: net.labhub.io/v1alpha1 Tunnel is deprecated"),
            "stderr: {}",
            stderr(&out)
        );
        assert!(
            !stdout(&out).contains("deprecated"),
            "the warning is on stderr only"
        );
    }
    assert_eq!(stored_versions(TUNNELS), ["v1alpha1"]);

    // 3. Read through v1beta1: new apiVersion, no mtu (defaults apply when written).
    let east = get(&ns.name, "tunnels.v1beta1.net.labhub.io/t-east");
    assert_eq!(east["apiVersion"], "net.labhub.io/v1beta1");
    assert_eq!(
        east["spec"].get("mtu"),
        None,
        "mtu is not there before a rewrite: {east}"
    );

    // 4. Flip storage: storedVersions grows.
    flip_storage(TUNNELS);
    assert_eq!(stored_versions(TUNNELS), ["v1alpha1", "v1beta1"]);
    let status = stagehand(&["storage-status", TUNNELS]);
    assert_eq!(status.status.code(), Some(1), "PENDING exits non-zero");
    assert_eq!(
        stdout(&status),
        "served=v1alpha1,v1beta1\nstorage=v1beta1\nstored=v1alpha1,v1beta1\nPENDING v1alpha1\n"
    );

    // 6 (before the prune): removing v1alpha1 from spec.versions is refused, naming storedVersions.
    let refused = kubectl(&[
        "patch",
        "crd",
        TUNNELS,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/versions/0"}]"#,
    ]);
    assert!(
        !refused.status.success(),
        "the API server must refuse to drop a stored version"
    );
    assert!(
        stderr(&refused).contains("status.storedVersions"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(stored_versions(TUNNELS), ["v1alpha1", "v1beta1"]);

    // 5 + 7. storage-migrate rewrites every Tunnel (mtu appears) and then prunes.
    let migrated = stagehand(&["storage-migrate", TUNNELS]);
    assert_eq!(migrated.status.code(), Some(0), "{}", stderr(&migrated));
    assert!(
        stderr(&migrated).contains("rewrote 2 objects through v1beta1"),
        "{}",
        stderr(&migrated)
    );
    assert!(
        stdout(&migrated).ends_with("stored=v1beta1\nMIGRATED\n"),
        "{}",
        stdout(&migrated)
    );
    for name in ["t-east", "t-west"] {
        let t = get(&ns.name, &format!("tunnels.v1beta1.net.labhub.io/{name}"));
        assert_eq!(
            t["spec"]["mtu"], 1400,
            "{name} was rewritten through v1beta1: {t}"
        );
        assert_eq!(t["spec"]["port"], 4789);
    }
    assert_eq!(stored_versions(TUNNELS), ["v1beta1"]);

    // 8. Retire: v1alpha1 served=false; a v1alpha1 GET fails as not found, v1beta1 still reads.
    ok(
        "stop serving v1alpha1",
        &kubectl(&[
            "patch",
            "crd",
            TUNNELS,
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/versions/0/served","value":false}]"#,
        ]),
    );
    let gone = wait_for(
        "v1alpha1 to stop being served",
        Duration::from_secs(30),
        || async {
            let out = kubectl(&[
                "get",
                "tunnels.v1alpha1.net.labhub.io",
                "t-east",
                "-n",
                &ns.name,
            ]);
            (!out.status.success()).then_some(out)
        },
    )
    .await;
    let message = stderr(&gone);
    assert!(
        message.contains("the server could not find the requested resource")
            || message.contains("NotFound"),
        "{message}"
    );
    let east = get(&ns.name, "tunnels.v1beta1.net.labhub.io/t-east");
    assert_eq!(east["spec"]["endpoint"], "10.30.0.11");

    // The check: MIGRATED, exit 0, the same answer however often it runs.
    let first = stagehand(&["storage-status", TUNNELS]);
    let second = stagehand(&["storage-status", TUNNELS]);
    assert_eq!(first.status.code(), Some(0));
    assert_eq!(
        stdout(&first),
        "served=v1beta1\nstorage=v1beta1\nstored=v1beta1\nMIGRATED\n"
    );
    assert_eq!(stdout(&first), stdout(&second));
    let again = stagehand(&["storage-migrate", TUNNELS]);
    assert_eq!(again.status.code(), Some(0));
    assert!(
        stderr(&again).contains("nothing to rewrite"),
        "{}",
        stderr(&again)
    );

    // With every object rewritten and the record pruned, removing v1alpha1 is now safe.
    ok(
        "remove v1alpha1",
        &kubectl(&[
            "patch",
            "crd",
            TUNNELS,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/versions/0"}]"#,
        ]),
    );
    let east = get(&ns.name, "tunnels.v1beta1.net.labhub.io/t-east");
    assert_eq!(east["spec"]["mtu"], 1400);
    drop(ns);
    delete_crd(TUNNELS).await;
}

/// A rewrite that fails part way leaves storedVersions as it was: the guard stays on.
#[tokio::test]
async fn a_failed_rewrite_never_prunes() {
    let _serial = CLUSTER_SCOPED.lock().await;
    let ns = Scene::cluster_without_crds("crd-fail").await;
    delete_crd(TUNNELS).await;
    ok(
        "apply CRD",
        &kubectl_stdin(
            &["apply", "-f", "-"],
            Some(include_str!("fixtures/tunnels-crd.yaml")),
        ),
    );
    wait_established(TUNNELS);
    for name in ["t-ok-1", "t-stuck", "t-ok-2"] {
        let manifest = format!(
            "apiVersion: net.labhub.io/v1alpha1\nkind: Tunnel\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n  endpoint: 10.0.0.1\n  port: 1\n",
            ns.name
        );
        ok(
            "create",
            &kubectl_stdin(&["apply", "-f", "-"], Some(&manifest)),
        );
    }
    flip_storage(TUNNELS);
    // A real admission policy refuses every update of t-stuck.
    let policy = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: deny-t-stuck}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["net.labhub.io"]
        apiVersions: ["*"]
        operations: ["UPDATE"]
        resources: ["tunnels"]
  validations:
    - expression: "object.metadata.name != 't-stuck'"
      message: "t-stuck is frozen by the test"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: deny-t-stuck}}
spec:
  policyName: deny-t-stuck
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {}}}
"#,
        ns.name
    );
    ok(
        "apply policy",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&policy)),
    );
    // The policy takes effect asynchronously: wait until an update of t-stuck is refused.
    wait_for(
        "the admission policy to deny t-stuck",
        Duration::from_secs(60),
        || async {
            let out = kubectl(&[
                "label",
                "tunnels.v1beta1.net.labhub.io",
                "t-stuck",
                "-n",
                &ns.name,
                "probe=1",
                "--overwrite",
            ]);
            (!out.status.success() && stderr(&out).contains("frozen")).then_some(())
        },
    )
    .await;

    let failed = stagehand(&["storage-migrate", TUNNELS]);
    assert_eq!(
        failed.status.code(),
        Some(1),
        "stdout {} stderr {}",
        stdout(&failed),
        stderr(&failed)
    );
    assert!(
        stderr(&failed).contains("t-stuck"),
        "the error names the object: {}",
        stderr(&failed)
    );
    assert_eq!(
        stored_versions(TUNNELS),
        ["v1alpha1", "v1beta1"],
        "nothing pruned after a failed rewrite"
    );
    let status = stagehand(&["storage-status", TUNNELS]);
    assert_eq!(status.status.code(), Some(1));
    assert!(stdout(&status).contains("PENDING v1alpha1"));

    // Once the obstacle is gone, a rerun finishes the job.
    ok(
        "delete policy",
        &kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "deny-t-stuck",
        ]),
    );
    let rerun = wait_for(
        "storage-migrate to succeed after the policy is gone",
        Duration::from_secs(60),
        || async {
            let out = stagehand(&["storage-migrate", TUNNELS]);
            out.status.success().then_some(out)
        },
    )
    .await;
    assert!(stdout(&rerun).ends_with("MIGRATED\n"));
    assert_eq!(stored_versions(TUNNELS), ["v1beta1"]);
    drop(ns);
    delete_crd(TUNNELS).await;
}

/// Stagehand's own CRDs: objects written through v1alpha1 while v1alpha1 was stored are
/// rewritten through v1beta1 (its new defaults filled in) and storedVersions pruned.
#[tokio::test]
async fn own_crds_migrate_from_v1alpha1_storage() {
    let _serial = CLUSTER_SCOPED.lock().await;
    let ns = Scene::cluster_without_crds("own-crds").await;
    let client = ns.client().clone();
    let crds = OWN_CRDS;
    install_v1alpha1_only_crds().await;
    for crd in crds {
        assert_eq!(stored_versions(crd), ["v1alpha1"]);
    }
    let objects = [
        Migration::new(&ns.name)
            .api_version("v1alpha1")
            .pre(Action::scale_without_timeout("ox-connector", 0))
            .to_yaml(),
        MigrationRun::new(&ns.name, "opendesk-pre", "pre")
            .api_version("v1alpha1")
            .to_yaml(),
    ]
    .join("---\n");
    let created = kubectl_stdin(&["apply", "-f", "-"], Some(&objects));
    ok("create v1alpha1 objects", &created);

    // Upgrade to the current CRDs: v1beta1 becomes the storage version.
    install_crds();
    for crd in crds {
        assert_eq!(stored_versions(crd), ["v1alpha1", "v1beta1"]);
        let status = stagehand(&["storage-status", crd]);
        assert_eq!(status.status.code(), Some(1));
        assert!(stdout(&status).ends_with("PENDING v1alpha1\n"));
    }
    // Before the rewrite, the new defaults are not stored.
    let run = get(&ns.name, "migrationruns.v1beta1.stagehand.dev/opendesk-pre");
    assert_eq!(run["spec"].get("waitTimeoutSeconds"), None, "{run}");

    for crd in crds {
        let out = stagehand(&["storage-migrate", crd]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("rewrote 1 object through v1beta1"),
            "{}",
            stderr(&out)
        );
        assert_eq!(stored_versions(crd), ["v1beta1"]);
    }
    let run = get(&ns.name, "migrationruns.v1beta1.stagehand.dev/opendesk-pre");
    assert_eq!(run["apiVersion"], "stagehand.dev/v1beta1");
    assert_eq!(run["spec"]["waitTimeoutSeconds"], 3600, "{run}");
    let mig = get(&ns.name, "migrations.v1beta1.stagehand.dev/opendesk");
    assert_eq!(mig["spec"]["suspend"], false, "{mig}");
    assert_eq!(mig["spec"]["actions"]["pre"][0]["id"], "workload_scale");
    // The spec stays immutable (the rewrite above was allowed to add the new default).
    for patch in [
        r#"{"spec":{"stage":"post"}}"#,
        r#"{"spec":{"waitTimeoutSeconds":60}}"#,
        r#"{"spec":{"dryRun":true}}"#,
    ] {
        let refused = kubectl(&[
            "patch",
            "migrationruns.v1beta1.stagehand.dev",
            "opendesk-pre",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            patch,
        ]);
        assert!(!refused.status.success(), "{patch} must be refused");
        assert!(
            stderr(&refused).contains("is immutable: create a new MigrationRun instead"),
            "{}",
            stderr(&refused)
        );
    }
    // Read with the typed v1beta1 API as well.
    let api: kube::Api<stagehand_crds::MigrationRun> =
        kube::Api::namespaced(client.clone(), &ns.name);
    let typed = api.get("opendesk-pre").await.unwrap();
    assert_eq!(typed.spec.wait_timeout_seconds, 3600);
    drop(ns);
}

/// The operator, started on CRDs whose objects are stored in v1alpha1, rewrites them and
/// prunes storedVersions before it runs anything.
#[tokio::test]
async fn the_operator_migrates_its_own_crds_at_start_up() {
    let _serial = CLUSTER_SCOPED.lock().await;
    let ns = Scene::cluster_without_crds("startup").await;
    let crds = OWN_CRDS;
    install_v1alpha1_only_crds().await;
    let objects = [
        Migration::new(&ns.name).api_version("v1alpha1").to_yaml(),
        MigrationRun::new(&ns.name, "pre", "pre")
            .api_version("v1alpha1")
            .to_yaml(),
    ]
    .join("---\n");
    ok(
        "create v1alpha1 objects",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&objects)),
    );
    install_crds();
    for crd in crds {
        assert_eq!(stored_versions(crd), ["v1alpha1", "v1beta1"]);
    }
    let operator = ns.start_operator();
    for crd in crds {
        wait_for(
            &format!("{crd} storedVersions pruned"),
            Duration::from_secs(60),
            || async { (stored_versions(crd) == ["v1beta1"]).then_some(()) },
        )
        .await;
    }
    let run = get(&ns.name, "migrationruns.v1beta1.stagehand.dev/pre");
    assert_eq!(
        run["spec"]["waitTimeoutSeconds"], 3600,
        "rewritten through v1beta1: {run}"
    );
    // ... and then it ran the (fresh installation) pre run.
    wait_up_to(
        &ns.name,
        "migrationrun/pre",
        "Ready",
        Duration::from_secs(60),
    );
    let logs = operator.logs();
    assert!(
        logs.contains("storage version check") && logs.contains("rewrote 1 object through"),
        "{logs}"
    );
    // The server's version, logged at start-up inside the supported range (e2e/cluster, and
    // e2e/cluster/smoke-oldest at the oldest): no warning.
    assert!(
        logs.contains("Kubernetes version") && !logs.contains("outside the supported range"),
        "{logs}"
    );
    let events = ok(
        "events",
        &kubectl(&["get", "events", "-n", "default", "-o", "json"]),
    );
    assert!(
        events.contains("StorageVersionMigrated"),
        "an Event records it"
    );
}
