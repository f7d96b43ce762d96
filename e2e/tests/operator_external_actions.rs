//! The operator running the actions that talk to systems outside Kubernetes, with their
//! credentials read from Secrets: `provisioning_drop_subscriptions` (pre) against the
//! Provisioning API simulator and `flush_intercom_sessions` (post) against a real
//! redis-server. A dry run first reaches both servers and changes nothing; the real runs drop
//! and flush; the secret values appear nowhere in status, events or logs. And an action told
//! to skip the TLS check (`insecureSkipTlsVerify`) against the simulator served over HTTPS: the
//! run succeeds, and the operator says so in its log, a Warning Event and the summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::local_server::TestPki;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::redis::{RedisOptions, RedisServer, session_commands};
use stagehand_e2e::{Scene, apply, assert_no_secret_leak, create_secret, get, kubectl, ok, wait};
use stagehand_simulators::http::SimServer;
use stagehand_simulators::provisioning::{self, Provisioning, ProvisioningConfig};

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

/// issue 29 item 1: `insecureSkipTlsVerify` is no silent switch. The Provisioning API simulator
/// serves HTTPS with a certificate of a CA the operator does not trust; the action skips the
/// check, so the run succeeds, and the operator reports the skipped check three times, each
/// naming the key: its log, a Warning Event `InsecureSetting` on the run, and a `Warning:` line
/// in the action's summary in the run's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_tls_check_succeeds_and_warns_in_the_log_an_event_and_the_summary() {
    const KEY: &str = "provisioning.insecureSkipTlsVerify";
    let ns = Scene::cluster("op-insecure").await;
    let password = format!("prov-{}-S3cret", std::process::id());
    let pki = TestPki::new("Stagehand Operator Insecure Test CA");
    let sim = SimServer::start_tls(
        Provisioning::new(ProvisioningConfig::new("admin", &password)),
        &pki.cert_pem(),
        &pki.key_pem(),
    )
    .await
    .unwrap();
    sim.state()
        .add_subscription("ox-connector", &[("udm", "users/user")], false, "c");
    let url = sim.api_url();
    assert!(url.starts_with("https://"), "{url}");
    create_secret(
        &ns.name,
        "ums-provisioning-api-admin",
        "password",
        &password,
    );
    let operator = ns.start_operator();
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file(
                "provisioning-api-password",
                "ums-provisioning-api-admin",
                "password",
            )
            .pre(
                Action::new("provisioning_drop_subscriptions")
                    .tag("v1.18.0")
                    .config(json!({
                        "provisioning": {
                            "url": url, "username": "admin", "requestTimeoutSeconds": 5,
                            "insecureSkipTlsVerify": true,
                        },
                        "subscriptions": ["ox-connector"],
                    })),
            )
            .to_yaml(),
    );

    apply(&run(&ns.name, "pre", "pre", false));
    wait(&ns.name, "migrationrun/pre", "Ready");
    // (a) The run succeeded: the check was skipped, the subscription dropped.
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "{pre}"
    );
    assert!(sim.state().names().is_empty(), "{:?}", sim.state().names());

    // (b) A Warning Event InsecureSetting on the MigrationRun naming the key and the server:
    // one from the action as it ran (the preflight's planning also reports its own).
    let events: serde_json::Value = serde_json::from_str(&ok(
        "events",
        &kubectl(&["get", "events", "-n", &ns.name, "-o", "json"]),
    ))
    .unwrap();
    let from_action: Vec<&serde_json::Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"] == "InsecureSetting"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("action 0 provisioning_drop_subscriptions: "))
        })
        .collect();
    assert_eq!(from_action.len(), 1, "{events}");
    let event = from_action[0];
    assert_eq!(event["type"], "Warning", "{event}");
    assert_eq!(event["involvedObject"]["kind"], "MigrationRun", "{event}");
    assert_eq!(event["involvedObject"]["name"], "pre", "{event}");
    let note = event["message"].as_str().unwrap();
    assert!(note.contains(KEY), "{note}");
    assert!(note.contains(&url), "{note}");

    // (c) The action's summary in the run's status carries a Warning: line naming the key.
    let summary = pre["status"]["actions"][0]["summary"].as_str().unwrap();
    assert!(
        summary
            .lines()
            .any(|l| l.starts_with("Warning: ") && l.contains(KEY)),
        "{summary}"
    );

    // (d) The operator's log has the warning line.
    let logs = operator.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("insecure setting in use") && l.contains(KEY)),
        "{logs}"
    );
    assert_no_secret_leak(&ns.name, &[&password], &[("the operator's log", &logs)]);
}
