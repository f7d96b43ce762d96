//! The operator running the actions that talk to systems outside Kubernetes, with their
//! credentials read from Secrets: `provisioning_drop_subscriptions` (pre) against the
//! Provisioning API simulator and `flush_intercom_sessions` (post) against a real
//! redis-server. A dry run first reaches both servers and changes nothing; the real runs drop
//! and flush; the secret values appear nowhere in status, events or logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::redis::{RedisOptions, RedisServer, session_commands};
use stagehand_e2e::{Scene, apply, assert_no_secret_leak, create_secret, get, wait};
use stagehand_simulators::provisioning::{self, ProvisioningConfig};

fn run(ns: &str, name: &str, stage: &str, dry_run: bool) -> String {
    MigrationRun::new(ns, name, stage)
        .dry_run(dry_run)
        .to_yaml()
}

fn migration(ns: &str, provisioning_url: &str, redis_port: u16) -> String {
    Migration::new(ns)
        .installed("v1.17.3")
        .secret_file(
            "provisioning-api-password",
            "ums-provisioning-api-admin",
            "password",
        )
        .secret_file(
            "redis-password",
            "cache-intercom-service-password",
            "password",
        )
        .pre(
            Action::new("provisioning_drop_subscriptions")
                .tag("v1.18.0")
                .config(json!({
                    "provisioning": {"url": provisioning_url, "username": "admin", "requestTimeoutSeconds": 5},
                    "subscriptions": ["ox-connector"],
                })),
        )
        .post(
            Action::new("flush_intercom_sessions")
                .tag("v1.18.0")
                .config(json!({"redis": {
                    "host": "127.0.0.1", "port": redis_port, "username": "default", "database": 0,
                    "keyPattern": "sess:*", "requestTimeoutSeconds": 5,
                }})),
        )
        .to_yaml()
}

// Multi-threaded: the simulator serves from this process while the test blocks on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_drops_the_subscription_and_post_flushes_the_sessions_with_secrets_from_the_cluster() {
    let ns = Scene::cluster("op-ext").await;
    let provisioning_password = format!("prov-{}-S3cret", std::process::id());
    let redis_password = format!("redis-{}-S3cret", std::process::id());

    let sim = provisioning::start(ProvisioningConfig::new("admin", &provisioning_password))
        .await
        .unwrap();
    sim.state()
        .add_subscription("ox-connector", &[("udm", "users/user")], true, "c");
    sim.state()
        .add_subscription("portal", &[("udm", "users/user")], false, "p");
    let redis = RedisServer::start(RedisOptions {
        default_password: Some(redis_password.clone()),
        ..RedisOptions::default()
    });
    redis.pipe(0, session_commands(500, 3600, "op"));
    redis.pipe(
        0,
        [
            vec!["SET", "ox:session:1", "keep"],
            vec!["SET", "sess", "keep"],
        ],
    );
    assert_eq!(redis.dbsize(0), 502);

    create_secret(
        &ns.name,
        "ums-provisioning-api-admin",
        "password",
        &provisioning_password,
    );
    create_secret(
        &ns.name,
        "cache-intercom-service-password",
        "password",
        &redis_password,
    );
    let operator = ns.start_operator();
    apply(&migration(&ns.name, &sim.api_url(), redis.port()));

    // A dry run reaches the Provisioning API (credential proven) and deletes nothing.
    apply(&run(&ns.name, "pre-dry", "pre", true));
    wait(&ns.name, "migrationrun/pre-dry", "Ready");
    let summary = get(&ns.name, "migrationrun/pre-dry")["status"]["actions"][0]["summary"].clone();
    assert!(
        summary
            .as_str()
            .unwrap()
            .contains("would drop ox-connector"),
        "{summary}"
    );
    assert_eq!(sim.state().names(), ["ox-connector", "portal"]);
    assert!(
        sim.requests().iter().all(|r| r.method == "GET"),
        "{:?}",
        sim.requests()
    );

    apply(&run(&ns.name, "pre", "pre", false));
    wait(&ns.name, "migrationrun/pre", "Ready");
    assert_eq!(sim.state().names(), ["portal"]);
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "{pre}"
    );

    // A post dry run (it waits for the real pre run) reaches Redis and deletes nothing.
    apply(&run(&ns.name, "post-dry", "post", true));
    wait(&ns.name, "migrationrun/post-dry", "Ready");
    let summary = get(&ns.name, "migrationrun/post-dry")["status"]["actions"][0]["summary"].clone();
    assert!(summary.as_str().unwrap().contains("500"), "{summary}");
    assert_eq!(redis.dbsize(0), 502, "a dry run deletes nothing");

    apply(&run(&ns.name, "post", "post", false));
    wait(&ns.name, "migrationrun/post", "Ready");
    let post = get(&ns.name, "migrationrun/post");
    assert_eq!(
        post["status"]["actions"][0]["decision"], "Succeeded",
        "{post}"
    );
    assert_eq!(redis.count_matching(0, "sess:*"), 0);
    assert_eq!(redis.dbsize(0), 2, "only the sessions went: {post}");
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["lastMigratedRelease"],
        "v1.18.0"
    );

    // The secret values are nowhere: not in status, events, the ledger or the operator's log.
    assert_no_secret_leak(
        &ns.name,
        &[&provisioning_password, &redis_password],
        &[("the operator's log", &operator.logs())],
    );
}
