//! The Helm chart in `deploy/chart`: it lints, its rendering is the committed
//! `deploy/manifests/stagehand.yaml`, its CRDs are `stagehand crds`, and its RBAC is sufficient
//! (the operator runs under the chart's ServiceAccount, with a token from `kubectl create
//! token`, and a `workload_scale` run goes Ready) and necessary in a clear way (without the
//! scale permission the run ends Stalled naming the missing permission).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    OperatorProcess, TestNamespace, apply, client, create_secret, get, install_crds, kubectl,
    kubectl_stdin, ok, running_pods, stagehand, statefulset, wait,
};

/// The three comment lines on top of `deploy/manifests/stagehand.yaml`.
const MANIFEST_HEADER: &str = "# GENERATED from deploy/chart: do not edit. Regenerate with\n\
#   \"$(e2e/cluster/build-helm | tail -n1)\" template stagehand deploy/chart --namespace stagehand-system --include-crds\n\
# (keeping these three comment lines); e2e/tests/rbac.rs fails when it is stale.\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The helm binary, built by `e2e/cluster/build-helm` if needed (last line of its stdout).
fn helm_bin() -> PathBuf {
    let out = Command::new(root().join("e2e/cluster/build-helm"))
        .output()
        .expect("running e2e/cluster/build-helm");
    let text = ok("e2e/cluster/build-helm", &out);
    PathBuf::from(
        text.lines()
            .last()
            .expect("build-helm printed no path")
            .trim(),
    )
}

fn helm(args: &[&str]) -> String {
    let out = Command::new(helm_bin())
        .current_dir(root())
        .args(args)
        .output()
        .expect("running helm");
    ok(&format!("helm {}", args.join(" ")), &out)
}

/// Text without its comment lines (those starting with `#`).
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_chart_lints_and_the_committed_manifests_are_its_rendering() {
    helm(&["lint", "--strict", "deploy/chart"]);
    helm(&[
        "lint",
        "--strict",
        "deploy/chart",
        "--set",
        "watchNamespace=*",
        "--set",
        "rbac.secretNames={a,b}",
    ]);
    let rendered = helm(&[
        "template",
        "stagehand",
        "deploy/chart",
        "--namespace",
        "stagehand-system",
        "--include-crds",
    ]);
    let committed = std::fs::read_to_string(root().join("deploy/manifests/stagehand.yaml"))
        .expect("reading deploy/manifests/stagehand.yaml");
    assert!(
        committed == format!("{MANIFEST_HEADER}{rendered}"),
        "deploy/manifests/stagehand.yaml is stale: regenerate it as its first lines say"
    );
}

#[test]
fn the_chart_s_crds_are_the_generated_ones() {
    let generated = ok("stagehand crds", &stagehand(&["crds"]));
    let chart = std::fs::read_to_string(root().join("deploy/chart/crds/stagehand-crds.yaml"))
        .expect("reading the chart's CRDs");
    let committed = std::fs::read_to_string(root().join("deploy/crds/stagehand-crds.yaml"))
        .expect("reading deploy/crds/stagehand-crds.yaml");
    assert!(
        without_comments(&chart) == without_comments(&generated),
        "deploy/chart/crds/stagehand-crds.yaml differs from `stagehand crds`: regenerate it as its first lines say"
    );
    assert!(
        committed == generated,
        "deploy/crds/stagehand-crds.yaml differs from `stagehand crds`"
    );
}

/// Cluster-scoped objects of one test's release, deleted when dropped.
struct ClusterObjects(Vec<String>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for what in &self.0 {
            let _ = kubectl(&["delete", what, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// The chart's RBAC documents (ServiceAccount, roles, bindings) rendered for a release named
/// after the namespace, installed into it; `edit` may change them first. Returns the
/// ServiceAccount's name and a guard of the cluster-scoped objects.
fn install_rbac(ns: &str, edit: impl Fn(&mut Value)) -> (String, ClusterObjects) {
    let rendered = helm(&["template", ns, "deploy/chart", "--namespace", ns]);
    let mut docs = Vec::new();
    let mut cluster = Vec::new();
    let mut account = None;
    for doc in serde_yaml::Deserializer::from_str(&rendered) {
        let mut v: Value = match serde::Deserialize::deserialize(doc) {
            Ok(v) => v,
            Err(e) => panic!("rendered chart is not YAML: {e}"),
        };
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "ServiceAccount" => account = Some(name),
            "Role" | "RoleBinding" => {}
            "ClusterRole" | "ClusterRoleBinding" => {
                cluster.push(format!("{}/{name}", kind.to_lowercase()));
            }
            _ => continue,
        }
        edit(&mut v);
        docs.push(serde_json::to_string(&v).unwrap());
    }
    let guard = ClusterObjects(cluster);
    let list = format!(
        "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{}]}}",
        docs.join(",")
    );
    ok(
        "apply the chart's RBAC",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&list)),
    );
    (account.expect("the chart renders a ServiceAccount"), guard)
}

/// A kubeconfig for the test control plane that authenticates as the ServiceAccount with a
/// token from `kubectl create token`; returns its path.
fn service_account_kubeconfig(ns: &str, account: &str) -> String {
    let token = ok(
        "create token",
        &kubectl(&["create", "token", account, "-n", ns, "--duration=1h"]),
    );
    let admin: Value = serde_json::from_str(&ok(
        "config view",
        &kubectl(&[
            "config",
            "view",
            "--raw",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ]),
    ))
    .unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster["server"],
            "certificate-authority-data": cluster["certificate-authority-data"],
        }}],
        "users": [{"name": account, "user": {"token": token.trim()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account, "namespace": ns}}],
        "current-context": "sa",
    });
    let path = std::env::temp_dir().join(format!("stagehand-rbac-{ns}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

/// A StatefulSet of `replicas` pods on the kwok node, and a Migration whose pre stage scales
/// it to 0 (reading a Secret through secretFiles), and its pre run.
async fn workload_and_migration(ns: &str) {
    create_secret(
        ns,
        "cache-intercom-service-password",
        "password",
        "rbac-test",
    );
    apply(&statefulset(ns, "ox-connector", 2));
    running_pods(ns, "ox-connector", 2).await;
    apply(
        &Migration::new(ns)
            .installed("v1.17.3")
            .secret_file(
                "redis-password",
                "cache-intercom-service-password",
                "password",
            )
            .pre(
                Action::scale("ox-connector", 0)
                    .tag("v1.18.0")
                    .run_mode("apply"),
            )
            .to_yaml(),
    );
    apply(&MigrationRun::new(ns, "pre", "pre").dry_run(false).to_yaml());
}

#[tokio::test]
async fn the_operator_under_the_chart_s_service_account_runs_a_workload_scale() {
    let client = client().await;
    install_crds();
    let ns = TestNamespace::new(&client, "rbac-ok").await;
    let (account, _cluster) = install_rbac(&ns.name, |_| {});
    let config = service_account_kubeconfig(&ns.name, &account);
    let _operator = OperatorProcess::start_with(&ns.name, &config, &[]);
    workload_and_migration(&ns.name).await;
    wait(&ns.name, "migrationrun/pre", "Ready");
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 0, "{sts}");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn without_the_scale_permission_the_run_stalls_naming_it() {
    let client = client().await;
    install_crds();
    let ns = TestNamespace::new(&client, "rbac-denied").await;
    let (account, _cluster) = install_rbac(&ns.name, |doc| {
        if doc["kind"] == "Role"
            && let Some(rules) = doc["rules"].as_array_mut()
        {
            rules.retain(|r| {
                !r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "statefulsets/scale"))
            });
        }
    });
    let config = service_account_kubeconfig(&ns.name, &account);
    let _operator = OperatorProcess::start_with(&ns.name, &config, &[]);
    workload_and_migration(&ns.name).await;
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let run = get(&ns.name, "migrationrun/pre");
    let stalled = run["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .unwrap();
    let message = stalled["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("forbidden") && message.contains("statefulsets.apps/scale"),
        "the Stalled message should name the missing permission: {message}"
    );
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 2, "{sts}");
    let _ = std::fs::remove_file(&config);
}
