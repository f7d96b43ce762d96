//! The local control plane is what the e2e tests need: Kubernetes v1.37, and a fake node on
//! which StatefulSet pods are scheduled, reach Running, and disappear when scaled down.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use stagehand_e2e::{Scene, client, wait_for};

#[tokio::test]
async fn the_server_is_kubernetes_1_37() {
    let client = client().await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    assert_eq!(info.minor, "37");
    assert!(
        info.git_version.starts_with("v1.37."),
        "{}",
        info.git_version
    );
}

#[tokio::test]
async fn statefulset_pods_run_on_the_fake_node_and_go_away_on_scale_down() {
    let ns = Scene::cluster_without_crds("kwok").await;
    let client = ns.client().clone();
    let sts: StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ox-connector"},
        "spec": {
            "replicas": 2,
            "serviceName": "ox-connector",
            "selector": {"matchLabels": {"app": "ox-connector"}},
            "template": {
                "metadata": {"labels": {"app": "ox-connector"}},
                "spec": {"containers": [{"name": "main", "image": "example.invalid/ox-connector:1"}]}
            }
        }
    }))
    .unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns.name);
    sets.create(&PostParams::default(), &sts).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let selector = ListParams::default().labels("app=ox-connector");
    let running = wait_for(
        "2 pods Running on kwok-node-0",
        Duration::from_secs(90),
        || async {
            let list = pods.list(&selector).await.ok()?;
            let running: Vec<_> = list
                .items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .collect();
            (running.len() == 2).then_some(running)
        },
    )
    .await;
    for pod in &running {
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("kwok-node-0")
        );
    }
    wait_for("readyReplicas 2", Duration::from_secs(60), || async {
        let s = sets.get("ox-connector").await.ok()?;
        (s.status?.ready_replicas? == 2).then_some(())
    })
    .await;

    sets.patch(
        "ox-connector",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    wait_for("the pods to be gone", Duration::from_secs(90), || async {
        let list = pods.list(&selector).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    drop(ns);
}
