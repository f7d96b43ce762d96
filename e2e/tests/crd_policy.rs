//! The start-up CRD check (docs/deploy.md#crd-policy) against a real kube-apiserver: a control
//! plane of the test's own ([`PrivateCluster`]), since the test makes Stagehand's CRDs stale and
//! the shared control plane's CRDs serve every other test.
//!
//! With `--crd-policy=check` (the default) stale CRDs — those of Stagehand's first release, with
//! no schema digest, and one annotated by an older Stagehand — are refused: `/readyz` answers 503
//! naming them, `/healthz` 200, an error line per CRD names both digests and the fix, a Warning
//! Event `Degraded` is on each CRD, and no controller starts. Applying this release's CRDs makes
//! the same process ready without a restart. With `--crd-policy=apply` the operator applies its
//! own CRDs (server-side, field manager `stagehand`) over a stale one, restoring the status field
//! the stale schema lacked, and gets ready.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use stagehand_crds::digest::{SCHEMA_DIGEST_ANNOTATION, VERSION_ANNOTATION, schema_digest};
use stagehand_crds::generate::{crds, to_yaml, v1alpha1_only_crds};
use stagehand_e2e::private_cluster::PrivateCluster;
use stagehand_e2e::{OperatorProcess, http_get, logged, ok, wait_for};

const MIGRATIONS: &str = "migrations.stagehand.dev";
const RUNS: &str = "migrationruns.stagehand.dev";

/// This operator's schema digest of the CRD `name`.
fn own_digest(name: &str) -> String {
    let crd = crds()
        .unwrap()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap();
    schema_digest(&crd)
}

/// The CRD `name`, with its managed fields.
fn crd(cluster: &PrivateCluster, name: &str) -> Value {
    let out = ok(
        "get crd",
        &cluster.kubectl(&["get", "crd", name, "--show-managed-fields", "-o", "json"]),
    );
    serde_json::from_str(&out).unwrap()
}

/// An operator on `ns` of `cluster`, with `args`, probing on a free port; and that port's
/// address once logged.
async fn operator(cluster: &PrivateCluster, ns: &str, args: &[&str]) -> (OperatorProcess, String) {
    let mut all = vec![
        "--probe-address",
        "127.0.0.1:0",
        "--metrics-address",
        "127.0.0.1:0",
        "--crd-check-interval-seconds",
        "2",
    ];
    all.extend_from_slice(args);
    let operator = OperatorProcess::start_with(ns, cluster.kubeconfig(), &all);
    let probe = wait_for(
        "the probe address in the log",
        Duration::from_secs(30),
        || {
            let logs = operator.logs();
            async move { logged(&logs, "probe_address") }
        },
    )
    .await;
    (operator, probe)
}

async fn ready(probe: &str, operator: &OperatorProcess) {
    wait_for("/readyz 200", Duration::from_secs(60), || {
        let probe = probe.to_string();
        async move { (http_get(&probe, "/readyz")?.0 == 200).then_some(()) }
    })
    .await;
    wait_for("the controllers started", Duration::from_secs(60), || {
        let logs = operator.logs();
        async move { logs.contains("starting controllers").then_some(()) }
    })
    .await;
}

/// The Warning Events `Degraded` on CRD `name` (cluster-scoped: in namespace `default`).
fn degraded_events(cluster: &PrivateCluster, name: &str) -> Vec<Value> {
    let out = ok(
        "get events",
        &cluster.kubectl(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("reason=Degraded,involvedObject.name={name}"),
            "-o",
            "json",
        ]),
    );
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn stale_crds_are_refused_until_current_and_applied_with_the_apply_policy() {
    let cluster = PrivateCluster::up();
    let ns = "crd-policy";
    cluster.create_namespace(ns);

    // Stale: Stagehand's first CRDs (v1alpha1 only, no annotations) ...
    let first = to_yaml(&v1alpha1_only_crds().unwrap()).unwrap();
    ok(
        "apply the first release's CRDs",
        &cluster.kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&first)),
    );
    // ... and one annotated by an older Stagehand with another schema.
    ok(
        "annotate as older",
        &cluster.kubectl(&[
            "annotate",
            "crd",
            RUNS,
            &format!("{SCHEMA_DIGEST_ANNOTATION}=sha256:0123"),
            &format!("{VERSION_ANNOTATION}=0.0.9"),
        ]),
    );

    let (mut checking, probe) = operator(&cluster, ns, &[]).await;
    let (status, body) = wait_for("/readyz refusing", Duration::from_secs(60), || {
        let probe = probe.clone();
        async move {
            let (status, body) = http_get(&probe, "/readyz")?;
            body.contains("CRD").then_some((status, body))
        }
    })
    .await;
    assert_eq!(status, 503, "{body}");
    for wanted in [
        MIGRATIONS,
        RUNS,
        "no stagehand.dev/schema-digest annotation",
        "sha256:0123 (Stagehand 0.0.9)",
        "kubectl apply --server-side -f deploy/crds/stagehand-crds.yaml",
        "--crd-policy=apply",
    ] {
        assert!(body.contains(wanted), "/readyz names {wanted:?}: {body}");
    }
    assert_eq!(http_get(&probe, "/healthz").unwrap().0, 200, "alive");
    let logs = checking.logs();
    let refusals: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["level"] == "ERROR"
                && v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("refusing to start the controllers"))
        })
        .collect();
    let runs_line = refusals
        .iter()
        .find(|v| v["fields"]["crd"] == RUNS)
        .unwrap_or_else(|| panic!("an error line names {RUNS}: {logs}"));
    assert_eq!(runs_line["fields"]["installed_digest"], "sha256:0123");
    assert_eq!(runs_line["fields"]["installed_version"], "0.0.9");
    assert_eq!(runs_line["fields"]["own_digest"], own_digest(RUNS));
    assert!(
        runs_line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("--crd-policy=apply"),
        "{runs_line}"
    );
    let migrations_line = refusals
        .iter()
        .find(|v| v["fields"]["crd"] == MIGRATIONS)
        .unwrap_or_else(|| panic!("an error line names {MIGRATIONS}: {logs}"));
    assert_eq!(migrations_line["fields"]["installed_digest"], "none");
    assert!(
        !logs.contains("starting controllers"),
        "no controller on stale CRDs: {logs}"
    );
    for name in [MIGRATIONS, RUNS] {
        let events = wait_for(
            &format!("a Degraded Event on {name}"),
            Duration::from_secs(30),
            || {
                let events = degraded_events(&cluster, name);
                async move { (!events.is_empty()).then_some(events) }
            },
        )
        .await;
        assert_eq!(events[0]["type"], "Warning", "{events:?}");
        let note = events[0]["message"].as_str().unwrap_or_default();
        assert!(
            note.contains(&own_digest(name)) && note.contains("--crd-policy=apply"),
            "{note}"
        );
    }

    // The fix the message gives, by hand: the same process gets ready, without a restart.
    let current = to_yaml(&crds().unwrap()).unwrap();
    ok(
        "apply this release's CRDs",
        &cluster.kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&current),
        ),
    );
    ready(&probe, &checking).await;
    assert!(!checking.exited(), "the same process");
    checking.terminate();

    // Stale again: an older Stagehand's schema without status.frozenPlan, with its annotations.
    ok(
        "drop frozenPlan",
        &cluster.kubectl(&[
            "patch",
            "crd",
            RUNS,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/frozenPlan"}]"#,
        ]),
    );
    ok(
        "annotate as older",
        &cluster.kubectl(&[
            "annotate",
            "--overwrite",
            "crd",
            RUNS,
            &format!("{SCHEMA_DIGEST_ANNOTATION}=sha256:4567"),
            &format!("{VERSION_ANNOTATION}=0.0.9"),
        ]),
    );
    let stale = crd(&cluster, RUNS);
    assert!(
        stale["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]
            .get("frozenPlan")
            .is_none(),
        "the stale schema lacks frozenPlan"
    );

    let (applying, probe) = operator(&cluster, ns, &["--crd-policy", "apply"]).await;
    ready(&probe, &applying).await;
    let applied = crd(&cluster, RUNS);
    assert_eq!(
        applied["metadata"]["annotations"][SCHEMA_DIGEST_ANNOTATION],
        own_digest(RUNS),
        "{}",
        applying.logs()
    );
    assert!(
        applied["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]
            .get("frozenPlan")
            .is_some(),
        "the operator's schema is back"
    );
    let managers: Vec<(String, String)> = applied["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().to_string(),
                m["operation"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("stagehand".to_string(), "Apply".to_string())),
        "{managers:?}"
    );
    assert!(
        applying.logs().contains("applied this operator's CRD"),
        "{}",
        applying.logs()
    );
    // Not applied where it was current.
    let migrations = crd(&cluster, MIGRATIONS);
    assert!(
        !migrations["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "stagehand"),
        "{migrations}"
    );
}
