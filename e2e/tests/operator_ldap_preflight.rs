//! The LDAP exec transport proven by the stage's preflight (issue 26): the openDesk example's
//! pre stage (deploy/examples/opendesk-v1.18.yaml), run by the operator as a process against
//! the UDM, OX and Provisioning simulators and a real MinIO, with `ldap.pod` naming a pod that
//! does not exist. Everything else the preflight checks is right, so the only problem is the
//! pod: the run ends `PreflightFailed` naming it, the StatefulSet `workload_scale` would scale
//! is untouched (same replicas, same resourceVersion) and no Functional Account is exported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use stagehand_e2e::functional_accounts::{World, small_fixture};
use stagehand_e2e::manifests::{MigrationRun, yaml};
use stagehand_e2e::minio::BUCKET;
use stagehand_e2e::{
    Scene, apply, condition, create_secret, get, provisioning_deletes, provisioning_sim,
    running_pods, statefulset, wait, wait_for,
};

/// The example's Migration in `ns`, every endpoint pointed at this test's servers, the
/// installed release v1.17.3 (so that the v1.18.0 actions are due) and both LDAP actions'
/// `ldap.pod` set to `pod`.
fn example(ns: &str, world: &World, provisioning_url: &str, pod: &str) -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/examples/opendesk-v1.18.yaml"
    ))
    .unwrap();
    let mut m: Value = serde_norway::from_str(&text).unwrap();
    m["metadata"]["namespace"] = json!(ns);
    m["spec"]["installedRelease"] = json!("v1.17.3");
    let store = world.ctx.object_store.clone().unwrap();
    m["spec"]["objectStore"] = json!({
        "endpoint": store.endpoint,
        "bucket": BUCKET,
        "pathStyle": true,
        "accessKeyId": store.access_key_id,
        "secretKeyFile": "objectstore-migrations-secret-key",
    });
    for file in m["spec"]["secretFiles"].as_array_mut().unwrap() {
        if file["name"] == "provisioning-api-password" {
            file["secret"]["name"] = json!("provisioning");
        }
    }
    let mut ldap_actions = 0;
    for action in m["spec"]["actions"]["pre"].as_array_mut().unwrap() {
        let id = action["id"].as_str().unwrap().to_string();
        let config = &mut action["config"];
        match id.as_str() {
            "ox_functional_accounts_export" => {
                config["udm"]["url"] = json!(world.udm.api_url());
                config["oxAppSuite"]["soapUrl"] = json!(world.ox.soap_url());
            }
            "ldap_entryuuid_to_object_identifier" | "ox_names_to_object_identifier" => {
                assert_eq!(
                    config["ldap"]["pod"], "ums-ldap-server-primary-0",
                    "the example uses the exec transport in openDesk's pod"
                );
                assert!(config["ldap"].get("url").is_none());
                config["ldap"]["pod"] = json!(pod);
                if config.get("oxAppSuite").is_some() {
                    config["oxAppSuite"]["soapUrl"] = json!(world.ox.soap_url());
                }
                ldap_actions += 1;
            }
            "provisioning_drop_subscriptions" => {
                config["provisioning"]["url"] = json!(provisioning_url);
            }
            _ => {}
        }
    }
    assert_eq!(ldap_actions, 2, "{m}");
    yaml(&m)
}

// Multi-threaded: the simulators serve from this process while the test blocks on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ldap_pod_fails_the_preflight_before_the_connector_is_scaled() {
    let ns = Scene::cluster("op-ldap-pf").await;
    let world = World::start().await;
    let (users, accounts) = small_fixture();
    world.seed(&users, &accounts, true);
    let accounts_before = world.functional_accounts().len();
    assert!(accounts_before > 0);
    world.create_secrets(&ns.name);
    let sim = provisioning_sim(&ns.name, &["ox-connector"]).await;
    create_secret(
        &ns.name,
        "cache-intercom-service-password",
        "password",
        "redis-not-read-by-pre",
    );
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    // Settled: the controller has written its status, so the object changes no more by itself.
    let before = wait_for(
        "ox-connector's status settled",
        Duration::from_secs(60),
        || async {
            let s = get(&ns.name, "statefulset/ox-connector");
            let settled = s["status"]["availableReplicas"] == 1
                && s["status"]["observedGeneration"] == s["metadata"]["generation"];
            settled.then_some(s)
        },
    )
    .await;

    let wrong = "ums-ldap-server-primary-7";
    let _operator = ns.start_operator();
    apply(&example(&ns.name, &world, &sim.api_url(), wrong));
    wait(&ns.name, "migration/opendesk", "Ready");
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre", "Stalled");

    let pre = get(&ns.name, "migrationrun/pre");
    let stalled = condition(&pre, "Stalled");
    assert_eq!(stalled["reason"], "PreflightFailed", "{pre}");
    let message = stalled["message"].as_str().unwrap();
    eprintln!("PreflightFailed: {message}");
    let not_found = format!(
        "pod {}/{wrong} not found: set ldap.pod to the pod running the primary LDAP server",
        ns.name
    );
    assert!(
        message.starts_with("preflight: 2 problem(s) found before the first change")
            && message.matches(&not_found).count() == 2
            && message.contains("ldap_entryuuid_to_object_identifier: ")
            && message.contains("ox_names_to_object_identifier: "),
        "both LDAP actions name the pod, and nothing else is wrong: {message}"
    );
    assert!(
        pre["status"]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["startTime"].is_null()),
        "no action started: {pre}"
    );
    let after = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(after["spec"]["replicas"], 1, "{after}");
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "workload_scale did not touch the StatefulSet"
    );
    assert_eq!(
        world.functional_accounts().len(),
        accounts_before,
        "the export deleted nothing"
    );
    assert!(world.handover().is_none(), "and wrote no handover");
    assert_eq!(provisioning_deletes(&sim), 0, "no subscription dropped");
}
