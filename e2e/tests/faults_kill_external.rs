//! The kill matrix of the actions that change systems outside Kubernetes, through the operator
//! on the local control plane: `provisioning_drop_subscriptions` against the Provisioning API
//! simulator (its fault rules hold the next DELETE once `k` were served) and
//! `flush_intercom_sessions` against a real redis-server behind a counting proxy (it holds the
//! next UNLINK once `k` were forwarded). See `stagehand_e2e::kill_matrix` for the kill points
//! and what a case must show.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::kill_matrix::{KubeTrip, Target, case, points, report};
use stagehand_e2e::kube_proxy::{KubeProxy, Seen};
use stagehand_e2e::manifests::{Action, Migration};
use stagehand_e2e::redis::{RedisOptions, RedisServer, session_commands};
use stagehand_e2e::wire_proxy::{Wire, WireProxy};
use stagehand_e2e::{client, create_secret, install_crds};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::provisioning::{self, ProvisioningConfig, ProvisioningSim};

fn migration(ns: &str, secret: (&str, &str), action: Action) -> String {
    Migration::new(ns)
        .installed("v1.17.3")
        .secret_file(secret.0, secret.1, "password")
        .pre(action.tag("v1.18.0").run_mode("apply"))
        .to_yaml()
}

const SUBSCRIPTIONS: [&str; 4] = ["ox-connector", "nubus-a", "nubus-b", "nubus-c"];
const PROVISIONING_PASSWORD: &str = "prov-kill-S3cret";

/// `provisioning_drop_subscriptions`: four subscriptions dropped (four DELETEs), a fifth kept.
struct DropSubscriptions {
    sim: ProvisioningSim,
}

impl Target for DropSubscriptions {
    fn id(&self) -> &'static str {
        "provisioning_drop_subscriptions"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        SUBSCRIPTIONS.len()
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.sim.faults().clear();
        self.sim.clear_requests();
        for name in SUBSCRIPTIONS.iter().chain(&["portal"]) {
            self.sim
                .state()
                .add_subscription(name, &[("udm", "users/user")], false, "p");
        }
        create_secret(
            ns,
            "ums-provisioning-api-admin",
            "password",
            PROVISIONING_PASSWORD,
        );
        migration(
            ns,
            ("provisioning-api-password", "ums-provisioning-api-admin"),
            Action::new("provisioning_drop_subscriptions").config(json!({
                "provisioning": {"url": self.sim.api_url(), "username": "admin", "requestTimeoutSeconds": 30},
                "subscriptions": SUBSCRIPTIONS,
            })),
        )
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        // The (k+1)-th DELETE is held unanswered and not carried out: exactly k were served.
        self.sim.faults().add(
            FaultRule::prefix("/v1/subscriptions/")
                .method("DELETE")
                .from_nth(k as u64 + 1)
                .hang(),
        );
        None
    }
    async fn holding(&self) -> bool {
        self.sim.faults().rules().iter().any(|r| r.fired > 0)
    }
    async fn release(&mut self) {
        self.sim.faults().clear();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.method == "DELETE" && r.status.is_some())
            .map(|r| r.path)
            .collect()
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let names = self.sim.state().names();
        (names == ["portal"])
            .then_some(())
            .ok_or_else(|| format!("subscriptions left: {names:?}"))
    }
}

const SESSIONS: u64 = 6_000;
const REDIS_PASSWORD: &str = "redis-kill-S3cret";

/// `flush_intercom_sessions`: 6,000 `sess:*` keys among 2 others, deleted in UNLINK batches
/// (500 keys each, four parts of the keyspace at once).
struct Flush {
    redis: RedisServer,
    proxy: WireProxy,
    total: usize,
}

impl Flush {
    fn seed(&self) {
        self.redis.cli(0, &["FLUSHDB"]);
        self.redis.pipe(0, session_commands(SESSIONS, 3600, "k"));
        self.redis.pipe(
            0,
            [
                vec!["SET", "ox:session:1", "keep"],
                vec!["SET", "sess", "keep"],
            ],
        );
        self.proxy.release();
        self.proxy.clear();
    }

    fn config(&self) -> serde_json::Value {
        json!({"redis": {
            "host": "127.0.0.1", "port": self.proxy.port(), "username": "default", "database": 0,
            "keyPattern": "sess:*", "requestTimeoutSeconds": 30,
        }})
    }
}

impl Target for Flush {
    fn id(&self) -> &'static str {
        "flush_intercom_sessions"
    }
    fn stage(&self) -> &'static str {
        "pre"
    }
    fn destructive_total(&self) -> usize {
        self.total
    }
    async fn prepare(&mut self, ns: &str) -> String {
        self.seed();
        create_secret(
            ns,
            "cache-intercom-service-password",
            "password",
            REDIS_PASSWORD,
        );
        migration(
            ns,
            ("redis-password", "cache-intercom-service-password"),
            Action::new("flush_intercom_sessions").config(self.config()),
        )
    }
    async fn hold_after(&mut self, _ns: &str, k: usize) -> Option<KubeTrip> {
        self.proxy.hold_after(k);
        None
    }
    async fn holding(&self) -> bool {
        self.proxy.holding()
    }
    async fn release(&mut self) {
        // What the killed operator sent after the k-th UNLINK never reaches the server.
        self.proxy.drop_held();
    }
    async fn served(&self, _ns: &str, _log: &[Seen]) -> Vec<String> {
        // One entry per key an UNLINK named: a key named twice was sent for deletion again.
        self.proxy
            .forwarded()
            .into_iter()
            .flat_map(|d| d.targets)
            .collect()
    }
    fn repeats_are_no_ops(&self) -> Option<&'static str> {
        Some(
            "SCAN returns a key more than once when the table is resized during the walk (the deletes shrink it; Redis promises every key at least once), so an UNLINK may name a key already deleted, which deletes nothing",
        )
    }
    async fn check_end_state(&self, _ns: &str) -> Result<(), String> {
        let left = self.redis.count_matching(0, "sess:*");
        let size = self.redis.dbsize(0);
        (left == 0 && size == 2)
            .then_some(())
            .ok_or_else(|| format!("{left} sessions left, {size} keys"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_drop_subscriptions_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;
    let sim = provisioning::start(ProvisioningConfig::new("admin", PROVISIONING_PASSWORD))
        .await
        .unwrap();
    let mut target = DropSubscriptions { sim };
    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_intercom_sessions_survives_a_kill_at_every_point() {
    let client = client().await;
    install_crds();
    let proxy = KubeProxy::start().await;
    let redis = RedisServer::start(RedisOptions {
        default_password: Some(REDIS_PASSWORD.into()),
        ..RedisOptions::default()
    });
    let wire = WireProxy::start(Wire::Resp, redis.port()).await;
    wire.ignore_containing("stagehand-probe-");
    let mut target = Flush {
        redis,
        proxy: wire,
        total: 0,
    };

    // How many UNLINKs an uninterrupted flush sends: the action applied once, directly.
    target.seed();
    let action =
        stagehand_actions::instantiate("flush_intercom_sessions", &target.config()).unwrap();
    let ctx = stagehand_actions::action::ActionContext {
        client: client.clone(),
        namespace: "unused".into(),
        secrets: stagehand_actions::action::Secrets::new([(
            "redis-password".to_string(),
            stagehand_actions::action::SecretValue::new(REDIS_PASSWORD),
        )]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    };
    action.plan(&ctx).await.unwrap();
    action.apply(&ctx).await.unwrap();
    target.total = target.proxy.forwarded().len();
    assert!(
        target.total >= 4,
        "an uninterrupted flush sent {} UNLINKs",
        target.total
    );
    target.check_end_state("").await.unwrap();

    let mut rows = Vec::new();
    for point in points(target.destructive_total()) {
        rows.push(case(&mut target, &client, &proxy, point).await);
    }
    report(env!("CARGO_TARGET_TMPDIR"), &rows);
}
