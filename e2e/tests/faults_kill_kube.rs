//! The kill matrix of the Kubernetes actions (`workload_scale`, `ox_connector_restart`,
//! `crd_storage_version_migrate`) on the real control plane: the operator reaches the API
//! server through a recording proxy that SIGKILLs it at each kill point (see
//! `stagehand_e2e::kill_matrix`); a new operator finishes the run; the API server's own request
//! log (as the proxy saw it) and its objects are checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::kill_matrix::{KubeTrip, Target, case, points, report};
use stagehand_e2e::kube_proxy::{KubeProxy, Seen};
use stagehand_e2e::manifests::{Action, Migration};
use stagehand_e2e::{
    client, delete_crd, get, install_crds, kubectl, kubectl_stdin, ok, replicas, running_pods,
    statefulset, stored_versions, wait_established,
};

/// A tagged pre action of the Migration `opendesk` adopting v1.17.3.
fn migration(ns: &str, action: Action) -> String {
    Migration::new(ns)
        .installed("v1.17.3")
        .pre(action.tag("v1.18.0").run_mode("apply"))
        .to_yaml()
}

/// A PATCH of the StatefulSet or its scale that changes it: not the plan's dry run
/// (`dryRun=All`), which proves the right to scale and changes nothing.
fn is_scale_patch(s: &Seen, ns: &str, sts: &str) -> bool {
    let path = format!("/namespaces/{ns}/statefulsets/{sts}");
    s.method == "PATCH"
        && !s.path.contains("dryRun=")
        && s.path
            .split('?')
            .next()
            .is_some_and(|p| p.ends_with(&path) || p.ends_with(&format!("{path}/scale")))
}

fn scale_patches(log: &[Seen], ns: &str, sts: &str) -> Vec<String> {
    log.iter()
        .filter(|s| (200..300).contains(&s.status) && is_scale_patch(s, ns, sts))
        .map(|s| format!("{sts} -> {}", s.json()["spec"]["replicas"]))
        .collect()
}

fn scale_trip(ns: &str, sts: &str) -> KubeTrip {
    let (ns, sts) = (ns.to_string(), sts.to_string());
    KubeTrip {
        matches: Box::new(move |s: &Seen| is_scale_patch(s, &ns, &sts)),
    }
}

/// `workload_scale`: ox-connector from 2 to 0 (one destructive request: the scale).
struct Scale;

impl Target for Scale {
    fn id(&self) -> &'static str {
        "workload_scale"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        1
    }
    async fn prepare(&mut self, ns: &str) -> String {
        ok(
            "statefulset",
            &kubectl_stdin(
                &["apply", "-f", "-"],
                Some(&statefulset(ns, "ox-connector", 2)),
            ),
        );
        running_pods(ns, "ox-connector", 2).await;
        migration(ns, Action::scale("ox-connector", 0))
    }
    async fn hold_after(&mut self, ns: &str, _k: usize) -> Option<KubeTrip> {
        Some(scale_trip(ns, "ox-connector"))
    }
    async fn served(&self, ns: &str, log: &[Seen]) -> Vec<String> {
        scale_patches(log, ns, "ox-connector")
    }
    async fn check_end_state(&self, ns: &str) -> Result<(), String> {
        let n = replicas(ns, "ox-connector");
        let pods = stagehand_e2e::stdout(&kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            "app=ox-connector",
            "-o",
            "name",
        ]));
        (n == 0 && pods.trim().is_empty())
            .then_some(())
            .ok_or_else(|| format!("replicas {n}, pods left: {pods:?}"))
    }
}

/// `ox_connector_restart`: ox-connector scaled to 0, then back to 1 (two destructive requests).
struct Restart;

impl Target for Restart {
    fn id(&self) -> &'static str {
        "ox_connector_restart"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        2
    }
    async fn prepare(&mut self, ns: &str) -> String {
        ok(
            "statefulset",
            &kubectl_stdin(
                &["apply", "-f", "-"],
                Some(&statefulset(ns, "ox-connector", 1)),
            ),
        );
        running_pods(ns, "ox-connector", 1).await;
        migration(
            ns,
            Action::new("ox_connector_restart").config(
                json!({"statefulset": {"name": "ox-connector", "replicas": 1, "waitSeconds": 1}}),
            ),
        )
    }
    async fn hold_after(&mut self, ns: &str, _k: usize) -> Option<KubeTrip> {
        Some(scale_trip(ns, "ox-connector"))
    }
    async fn served(&self, ns: &str, log: &[Seen]) -> Vec<String> {
        scale_patches(log, ns, "ox-connector")
    }
    async fn check_end_state(&self, ns: &str) -> Result<(), String> {
        let n = replicas(ns, "ox-connector");
        (n == 1)
            .then_some(())
            .ok_or_else(|| format!("replicas {n}, want 1"))
    }
}

const GROUP: &str = "faults.stagehand.dev";
const OBJECTS: usize = 10;

/// `crd_storage_version_migrate`: 10 objects of a CRD stored in v1alpha1 rewritten through
/// v1beta1 one at a time, then storedVersions pruned. Every case has its own CRD.
struct StorageMigrate {
    case: usize,
}

impl StorageMigrate {
    fn plural(&self) -> String {
        format!("kill{}s", self.case)
    }
    fn crd(&self) -> String {
        format!("{}.{GROUP}", self.plural())
    }
}

impl Target for StorageMigrate {
    fn id(&self) -> &'static str {
        "crd_storage_version_migrate"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        OBJECTS
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.case += 1;
        let plural = self.plural();
        let kind = format!("Kill{}", self.case);
        delete_crd(&self.crd()).await;
        let version = |name: &str, storage: bool| {
            json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}})
        };
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": self.crd()},
            "spec": {"group": GROUP, "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": format!("kill{}", self.case)},
                "versions": [version("v1alpha1", true), version("v1beta1", false)]},
        });
        ok(
            "crd",
            &kubectl_stdin(&["apply", "-f", "-"], Some(&crd.to_string())),
        );
        wait_established(&self.crd());
        let objects: Vec<_> = (0..OBJECTS)
            .map(|i| {
                json!({"apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind,
                "metadata": {"name": format!("o{i}"), "namespace": ns}, "spec": {"size": i}})
            })
            .collect();
        ok(
            "objects",
            &kubectl_stdin(
                &["apply", "-f", "-"],
                Some(&json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()),
            ),
        );
        let flipped = json!([
            {"op": "replace", "path": "/spec/versions/0/storage", "value": false},
            {"op": "replace", "path": "/spec/versions/1/storage", "value": true},
        ]);
        ok(
            "flip",
            &kubectl(&[
                "patch",
                "crd",
                &self.crd(),
                "--type=json",
                "-p",
                &flipped.to_string(),
            ]),
        );
        migration(
            ns,
            Action::new("crd_storage_version_migrate")
                .config(json!({"crd": self.crd(), "concurrency": 1, "pageSize": 100})),
        )
    }
    async fn hold_after(&mut self, _ns: &str, _k: usize) -> Option<KubeTrip> {
        let plural = self.plural();
        Some(KubeTrip {
            matches: Box::new(move |s: &Seen| {
                s.method == "PUT" && s.path.contains(&format!("/{plural}/"))
            }),
        })
    }
    async fn served(&self, _ns: &str, log: &[Seen]) -> Vec<String> {
        let plural = self.plural();
        log.iter()
            .filter(|s| {
                s.method == "PUT"
                    && (200..300).contains(&s.status)
                    && s.path.contains(&format!("/{plural}/"))
            })
            .map(|s| {
                s.path
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }
    fn repeats_are_no_ops(&self) -> Option<&'static str> {
        Some(
            "a rewrite changes nothing but the storage version, which the API does not show: a re-entered action cannot tell which objects are done and rewrites them again",
        )
    }
    async fn check_end_state(&self, ns: &str) -> Result<(), String> {
        let stored = stored_versions(&self.crd());
        let objects = get(ns, &self.plural());
        let n = objects["items"].as_array().map(Vec::len).unwrap_or(0);
        (stored == ["v1beta1"] && n == OBJECTS)
            .then_some(())
            .ok_or_else(|| format!("storedVersions {stored:?}, {n} objects"))
    }
}

async fn matrix<T: Target>(target: &mut T) {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;
    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(target, &client, &proxy, point).await);
    }
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_scale_survives_a_kill_at_every_point() {
    matrix(&mut Scale).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ox_connector_restart_survives_a_kill_at_every_point() {
    matrix(&mut Restart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_storage_version_migrate_survives_a_kill_at_every_point() {
    let mut target = StorageMigrate { case: 0 };
    matrix(&mut target).await;
    for i in 1..=target.case {
        delete_crd(&format!("kill{i}s.{GROUP}")).await;
    }
}
