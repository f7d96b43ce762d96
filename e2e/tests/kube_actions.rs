//! The Kubernetes actions (`workload_scale`, `ox_connector_restart`,
//! `crd_storage_version_migrate`) planned and applied against the real control plane
//! (kube-apiserver, kube-controller-manager, kube-scheduler and kwok's fake node).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, ActionError, Secrets};
use stagehand_e2e::{
    Scene, TestNamespace, delete_crd, hold_pod, kubectl, kubectl_stdin, ok, release_pod,
    stored_versions, wait_established, wait_for,
};

const GADGETS: &str = "gadgets.kubeactions.stagehand.dev";

fn action(id: &str, config: Value) -> Box<dyn Action> {
    match stagehand_actions::instantiate(id, &config) {
        Ok(a) => a,
        Err(e) => panic!("instantiate {id}: {e}"),
    }
}

fn ctx(client: &Client, ns: &TestNamespace) -> ActionContext {
    ActionContext {
        client: client.clone(),
        namespace: ns.name.clone(),
        secrets: Secrets::default(),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

fn apply_yaml(ns: &str, yaml: &str) {
    ok(
        "kubectl apply",
        &kubectl_stdin(&["apply", "-n", ns, "-f", "-"], Some(yaml)),
    );
}

fn pod_template(app: &str) -> String {
    format!(
        r#"
    metadata:
      labels: {{app: {app}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: main
          image: example.com/fake:1"#
    )
}

fn statefulset(ns: &str, name: &str, replicas: u32) {
    apply_yaml(
        ns,
        &format!(
            r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  serviceName: {name}
  selector: {{matchLabels: {{app: {name}}}}}
  template:{}
"#,
            pod_template(name)
        ),
    );
}

fn deployment(ns: &str, name: &str, replicas: u32) {
    apply_yaml(
        ns,
        &format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:{}
"#,
            pod_template(name)
        ),
    );
}

/// Every pod with `app=<app>` (terminating ones included), sorted by name.
async fn pods(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut items = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    items
}

fn running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

async fn wait_running(client: &Client, ns: &str, app: &str, n: usize) -> Vec<Pod> {
    wait_for(
        &format!("{n} running pods of {app}"),
        Duration::from_secs(60),
        || async {
            let all = pods(client, ns, app).await;
            (all.len() == n && all.iter().all(running)).then_some(all)
        },
    )
    .await
}

async fn sts_replicas(client: &Client, ns: &str, name: &str) -> i32 {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    // The scale subresource omits replicas when they are 0.
    api.get_scale(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(0)
}

fn scale_config(kind: &str, name: &str, replicas: u32, timeout: u64) -> Value {
    json!({"workload": {"kind": kind, "name": name, "replicas": replicas, "timeoutSeconds": timeout}})
}

#[tokio::test]
async fn statefulset_scale_down_waits_for_its_pods_and_scale_up_does_not() {
    let ns = Scene::cluster_without_crds("ka-sts").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    statefulset(&ns.name, "web", 2);
    wait_running(&client, &ns.name, "web", 2).await;

    let down = action("workload_scale", scale_config("StatefulSet", "web", 0, 60));
    let planned = down.plan(&ctx).await.unwrap();
    assert!(
        planned.summary.contains("StatefulSet web: 2 -> 0 replicas"),
        "{planned:?}"
    );
    assert!(planned.summary.contains("60s"), "{planned:?}");
    // Planning changed nothing.
    assert_eq!(sts_replicas(&client, &ns.name, "web").await, 2);
    assert_eq!(pods(&client, &ns.name, "web").await.len(), 2);

    let applied = down.apply(&ctx).await.unwrap();
    // apply returned only once the pods were gone.
    let left = pods(&client, &ns.name, "web").await;
    assert!(
        left.is_empty(),
        "pods left after apply returned: {:?}",
        left.iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(sts_replicas(&client, &ns.name, "web").await, 0);
    assert!(applied.summary.contains("2 -> 0"), "{applied:?}");

    // A rerun (say after a crash) finds the target set, and still checks the pods are gone.
    let again = down.apply(&ctx).await.unwrap();
    assert!(again.summary.contains("already at 0"), "{again:?}");

    // Scaling up is not waited for: pods cannot be Running yet when apply returns, because
    // a template pinned to a node that does not exist keeps them Pending.
    ok(
        "pin to a missing node",
        &kubectl(&[
            "patch",
            "statefulset",
            "web",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"nodeSelector":{"no-such-node":"true"}}}}}"#,
        ]),
    );
    let up = action("workload_scale", scale_config("StatefulSet", "web", 2, 60));
    let planned = up.plan(&ctx).await.unwrap();
    assert!(planned.summary.contains("0 -> 2"), "{planned:?}");
    assert!(planned.summary.contains("not waited for"), "{planned:?}");
    let started = Instant::now();
    up.apply(&ctx).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "scale-up took {:?}",
        started.elapsed()
    );
    assert_eq!(sts_replicas(&client, &ns.name, "web").await, 2);
    assert!(
        !pods(&client, &ns.name, "web").await.iter().any(running),
        "pods of a node-pinned template cannot be running"
    );
}

#[tokio::test]
async fn deployment_scales_down_and_up() {
    let ns = Scene::cluster_without_crds("ka-deploy").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    deployment(&ns.name, "api", 2);
    wait_running(&client, &ns.name, "api", 2).await;

    let down = action("workload_scale", scale_config("Deployment", "api", 0, 60));
    let planned = down.plan(&ctx).await.unwrap();
    assert!(
        planned.summary.contains("Deployment api: 2 -> 0"),
        "{planned:?}"
    );
    down.apply(&ctx).await.unwrap();
    assert!(pods(&client, &ns.name, "api").await.is_empty());
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    assert_eq!(
        api.get("api").await.unwrap().spec.unwrap().replicas,
        Some(0)
    );

    let up = action("workload_scale", scale_config("Deployment", "api", 1, 60));
    up.apply(&ctx).await.unwrap();
    assert_eq!(
        api.get("api").await.unwrap().spec.unwrap().replicas,
        Some(1)
    );
    wait_running(&client, &ns.name, "api", 1).await;
}

#[tokio::test]
async fn a_pod_that_does_not_go_fails_the_scale_down_naming_it() {
    let ns = Scene::cluster_without_crds("ka-stuck").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    statefulset(&ns.name, "hold", 1);
    wait_running(&client, &ns.name, "hold", 1).await;
    hold_pod(&ns.name, "hold-0");

    let down = action("workload_scale", scale_config("StatefulSet", "hold", 0, 3));
    let started = Instant::now();
    let result = down.apply(&ctx).await;
    let took = started.elapsed();
    // Let the pod go before asserting, so that the namespace can be cleaned up either way.
    let _ = release_pod(&ns.name, "hold-0");

    let err = match result {
        Ok(o) => panic!("scale-down with a stuck pod succeeded: {o:?}"),
        Err(e) => e,
    };
    assert!(matches!(err, ActionError::Failed(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("hold-0"), "{msg}");
    assert!(msg.contains("3s"), "{msg}");
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(15),
        "failed after {took:?}"
    );

    // Re-entered (the run resumes after the failure is fixed): scale is already 0, so it
    // only waits, and now the pod goes.
    let again = action("workload_scale", scale_config("StatefulSet", "hold", 0, 30));
    let done = again.apply(&ctx).await.unwrap();
    assert!(done.summary.contains("already at 0"), "{done:?}");
    assert!(pods(&client, &ns.name, "hold").await.is_empty());
}

#[tokio::test]
async fn plan_fails_on_a_missing_workload_naming_it() {
    let ns = Scene::cluster_without_crds("ka-missing").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    for (id, config) in [
        (
            "workload_scale",
            scale_config("StatefulSet", "nowhere", 0, 5),
        ),
        (
            "ox_connector_restart",
            json!({"statefulset": {"name": "nowhere"}}),
        ),
    ] {
        let err = action(id, config).plan(&ctx).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("StatefulSet nowhere"), "{id}: {msg}");
        assert!(msg.contains(&ns.name), "{id}: {msg}");
        assert!(msg.contains("not found"), "{id}: {msg}");
    }
    let err = action(
        "workload_scale",
        scale_config("Deployment", "nowhere", 0, 5),
    )
    .plan(&ctx)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("Deployment nowhere"), "{err}");
}

/// A client that authenticates as `serviceaccount` of `ns` (a token from TokenRequest),
/// against the test control plane's server and CA.
async fn client_as(ns: &str, serviceaccount: &str) -> Client {
    let token = ok(
        "create token",
        &kubectl(&["create", "token", serviceaccount, "-n", ns]),
    );
    let mut config = kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info = serde_json::from_value(json!({"token": token.trim()})).unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn plan_proves_it_may_scale() {
    let ns = Scene::cluster_without_crds("ka-rbac").await;
    let client = ns.client().clone();
    statefulset(&ns.name, "locked", 1);
    wait_running(&client, &ns.name, "locked", 1).await;
    // May read the StatefulSet and its scale, and list pods, but not change the scale.
    apply_yaml(
        &ns.name,
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader}
rules:
  - apiGroups: [apps]
    resources: [statefulsets, statefulsets/scale]
    verbs: [get]
  - apiGroups: [""]
    resources: [pods]
    verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects:
  - {kind: ServiceAccount, name: reader}
"#,
    );
    let limited = ActionContext {
        client: client_as(&ns.name, "reader").await,
        namespace: ns.name.clone(),
        secrets: Secrets::default(),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    for (id, config) in [
        (
            "workload_scale",
            scale_config("StatefulSet", "locked", 0, 5),
        ),
        (
            "ox_connector_restart",
            json!({"statefulset": {"name": "locked", "replicas": 1, "waitSeconds": 0}}),
        ),
    ] {
        let err = action(id, config).plan(&limited).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("forbidden"), "{id}: {msg}");
        assert!(msg.contains("patch statefulsets.apps/scale"), "{id}: {msg}");
        assert!(msg.contains("StatefulSet locked"), "{id}: {msg}");
    }
    // Nothing changed.
    assert_eq!(sts_replicas(&client, &ns.name, "locked").await, 1);

    // With only `get` on statefulsets (no scale at all) it says so as well.
    ok(
        "narrow the role",
        &kubectl(&[
            "patch",
            "role",
            "reader",
            "-n",
            &ns.name,
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/rules/0/resources","value":["statefulsets"]}]"#,
        ]),
    );
    let msg = wait_for(
        "the narrowed role to apply",
        Duration::from_secs(10),
        || {
            let limited = limited.clone();
            async move {
                let err = action(
                    "workload_scale",
                    scale_config("StatefulSet", "locked", 0, 5),
                )
                .plan(&limited)
                .await
                .unwrap_err()
                .to_string();
                err.contains("get statefulsets.apps/scale").then_some(err)
            }
        },
    )
    .await;
    assert!(msg.contains("forbidden"), "{msg}");
}

#[tokio::test]
async fn ox_connector_restart_brings_the_pods_back() {
    let ns = Scene::cluster_without_crds("ka-restart").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    statefulset(&ns.name, "ox-connector", 1);
    let before = wait_running(&client, &ns.name, "ox-connector", 1).await;
    let old_uid = before[0].metadata.uid.clone().unwrap();

    let restart = action(
        "ox_connector_restart",
        json!({"statefulset": {"replicas": 2, "waitSeconds": 1}}),
    );
    let planned = restart.plan(&ctx).await.unwrap();
    assert!(planned.summary.contains("ox-connector"), "{planned:?}");
    assert_eq!(sts_replicas(&client, &ns.name, "ox-connector").await, 1);

    let started = Instant::now();
    let applied = restart.apply(&ctx).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waitSeconds not waited: {:?}",
        started.elapsed()
    );
    assert!(applied.summary.contains("-> 2 replicas"), "{applied:?}");
    assert_eq!(sts_replicas(&client, &ns.name, "ox-connector").await, 2);
    let after = wait_running(&client, &ns.name, "ox-connector", 2).await;
    let new_uid = after[0].metadata.uid.clone().unwrap();
    assert_ne!(old_uid, new_uid, "ox-connector-0 was not restarted");
}

#[tokio::test]
async fn crd_storage_version_migrate_plans_then_prunes() {
    let ns = Scene::cluster_without_crds("ka-crd").await;
    let client = ns.client().clone();
    let ctx = ctx(&client, &ns);
    delete_crd(GADGETS).await;

    let missing = action("crd_storage_version_migrate", json!({"crd": GADGETS}));
    let err = missing.plan(&ctx).await.unwrap_err().to_string();
    assert!(err.contains(GADGETS) && err.contains("not found"), "{err}");

    ok(
        "apply CRD",
        &kubectl_stdin(
            &["apply", "-f", "-"],
            Some(include_str!("fixtures/kube-actions-gadgets-crd.yaml")),
        ),
    );
    wait_established(GADGETS);
    for name in ["one", "two"] {
        apply_yaml(
            &ns.name,
            &format!(
                "apiVersion: kubeactions.stagehand.dev/v1alpha1\nkind: Gadget\nmetadata: {{name: {name}}}\nspec: {{size: 1}}\n"
            ),
        );
    }
    ok(
        "flip storage",
        &kubectl(&[
            "patch",
            "crd",
            GADGETS,
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
        ]),
    );
    assert_eq!(stored_versions(GADGETS), ["v1alpha1", "v1beta1"]);

    // page size 1: the count pages through the list.
    let migrate = action(
        "crd_storage_version_migrate",
        json!({"crd": GADGETS, "pageSize": 1, "concurrency": 2}),
    );
    let planned = migrate.plan(&ctx).await.unwrap();
    assert!(planned.summary.contains("PENDING v1alpha1"), "{planned:?}");
    assert!(planned.summary.contains("2 objects"), "{planned:?}");
    assert_eq!(stored_versions(GADGETS), ["v1alpha1", "v1beta1"]);

    let applied = migrate.apply(&ctx).await.unwrap();
    assert!(applied.summary.contains("rewrote 2 objects"), "{applied:?}");
    assert_eq!(stored_versions(GADGETS), ["v1beta1"]);

    let replanned = migrate.plan(&ctx).await.unwrap();
    assert!(replanned.summary.contains("MIGRATED"), "{replanned:?}");
    let again = migrate.apply(&ctx).await.unwrap();
    assert!(again.summary.contains("nothing to rewrite"), "{again:?}");

    delete_crd(GADGETS).await;
}

#[test]
fn instantiate_builds_every_action_of_the_library() {
    for id in stagehand_actions::ACTION_IDS {
        let config = match *id {
            "workload_scale" => scale_config("StatefulSet", "x", 0, 1),
            "crd_storage_version_migrate" => json!({"crd": "a.b"}),
            "provisioning_drop_subscriptions" => json!({"subscriptions": ["ox-connector"]}),
            "configmap_create" => json!({"configmap": {"name": "element-markers"}}),
            _ => json!({}),
        };
        assert!(
            stagehand_actions::instantiate(id, &config).is_ok(),
            "{id}: {:?}",
            stagehand_actions::instantiate(id, &config).err()
        );
    }
    let err = stagehand_actions::instantiate(
        "workload_scale",
        &json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0, "bogus": 1}}),
    )
    .unwrap_err();
    assert!(matches!(err, ActionError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("bogus"), "{err}");
    let err = stagehand_actions::instantiate("nope", &json!({})).unwrap_err();
    assert!(matches!(err, ActionError::Config(_)), "{err:?}");
}
