//! `provisioning_drop_subscriptions` against the Provisioning API simulator: planning proves
//! the credential, a dry run deletes nothing, apply drops the named subscriptions (404 counts
//! as gone), the consumer can then register its new topics (201 where it was refused with 409),
//! and faults (500, a hanging request) fail the action clearly and leave a rerun able to finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_actions::action::{ActionContext, SecretValue, Secrets};
use stagehand_actions::instantiate;
use stagehand_e2e::{offline_client, provisioning_deletes as deletes};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::provisioning::{self, ProvisioningConfig, ProvisioningSim};

const ADMIN_PASSWORD: &str = "pr0v-admin-S3cret";

/// The topics the OX Connector registered before v1.18, and the ones it registers from v1.18.
const OLD_TOPICS: &[(&str, &str)] = &[
    ("udm", "oxmail/oxcontext"),
    ("udm", "users/user"),
    ("udm", "groups/group"),
    ("udm", "oxmail/functional_account"),
];

fn new_topics() -> Value {
    json!([
        {"realm": "udm", "topic": "oxmail/oxcontext"},
        {"realm": "udm", "topic": "users/user"},
        {"realm": "udm", "topic": "groups/group"},
        {"realm": "udm", "topic": "oxmail/shared_account"},
        {"realm": "udm", "topic": "oxmail/shared_account_permission"},
    ])
}

async fn sim() -> ProvisioningSim {
    let sim = provisioning::start(ProvisioningConfig::new("admin", ADMIN_PASSWORD))
        .await
        .unwrap();
    sim.state()
        .add_subscription("ox-connector", OLD_TOPICS, true, "connector-pw");
    sim.state().add_subscription(
        "portal-consumer",
        &[("udm", "users/user")],
        false,
        "portal-pw",
    );
    sim
}

fn context(password: &str) -> ActionContext {
    ActionContext {
        client: offline_client(),
        namespace: "default".into(),
        secrets: Secrets::new([(
            "provisioning-api-password".to_string(),
            SecretValue::new(password),
        )]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

fn action(
    sim: &ProvisioningSim,
    subscriptions: &[&str],
    timeout: u64,
) -> Box<dyn stagehand_actions::action::Action> {
    instantiate(
        "provisioning_drop_subscriptions",
        &json!({
            "provisioning": {"url": sim.api_url(), "username": "admin", "requestTimeoutSeconds": timeout},
            "subscriptions": subscriptions,
        }),
    )
    .unwrap()
}

/// Registers the OX Connector with the v1.18 topics, as its registration job does.
async fn register_connector(sim: &ProvisioningSim) -> reqwest::StatusCode {
    reqwest::Client::new()
        .post(format!("{}/subscriptions", sim.api_url()))
        .basic_auth("admin", Some(ADMIN_PASSWORD))
        .json(&json!({
            "name": "ox-connector",
            "realms_topics": new_topics(),
            "request_prefill": true,
            "password": "connector-pw",
        }))
        .send()
        .await
        .unwrap()
        .status()
}

/// The error of a refused admin password: names the user and the secret file, never the value.
fn assert_refused(err: &str, password: &str) {
    assert!(
        err.contains("refused the credentials of user \"admin\""),
        "{err}"
    );
    assert!(
        err.contains("provisioning-api-password"),
        "names the secret file: {err}"
    );
    assert!(!err.contains(password), "never the value: {err}");
}

#[tokio::test]
async fn wrong_password_fails_planning_and_deletes_nothing() {
    let sim = sim().await;
    let action = action(&sim, &["ox-connector"], 5);
    let err = action
        .plan(&context("not-the-password"))
        .await
        .unwrap_err()
        .to_string();
    assert_refused(&err, "not-the-password");
    assert_eq!(deletes(&sim), 0);
    assert_eq!(sim.state().names(), ["ox-connector", "portal-consumer"]);
}

#[tokio::test]
async fn a_missing_secret_file_fails_naming_it() {
    let sim = sim().await;
    let ctx = ActionContext {
        secrets: Secrets::default(),
        ..context("")
    };
    let err = action(&sim, &["ox-connector"], 5)
        .plan(&ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"provisioning-api-password\""), "{err}");
    assert!(
        sim.requests().is_empty(),
        "nothing was sent: {:?}",
        sim.requests()
    );
}

#[tokio::test]
async fn dry_run_reports_and_apply_drops_so_the_new_topics_can_register() {
    let sim = sim().await;
    let ctx = context(ADMIN_PASSWORD);
    let action = action(&sim, &["ox-connector", "never-registered"], 5);

    // Before the drop the release's registration is refused: the topics differ.
    assert_eq!(
        register_connector(&sim).await,
        reqwest::StatusCode::CONFLICT
    );

    let planned = action.plan(&ctx).await.unwrap().summary;
    assert!(planned.contains("would drop ox-connector"), "{planned}");
    assert!(
        planned.contains("already gone: never-registered"),
        "{planned}"
    );
    assert_eq!(deletes(&sim), 0, "planning deletes nothing");
    assert_eq!(sim.state().names(), ["ox-connector", "portal-consumer"]);

    let applied = action.apply(&ctx).await.unwrap().summary;
    assert!(applied.contains("dropped ox-connector"), "{applied}");
    assert!(
        applied.contains("already gone: never-registered"),
        "{applied}"
    );
    assert_eq!(
        sim.state().names(),
        ["portal-consumer"],
        "only the named one went"
    );

    // The component's registration now creates the subscription with the new topics.
    assert_eq!(register_connector(&sim).await, reqwest::StatusCode::CREATED);
    let registered = sim.state().subscription("ox-connector").unwrap();
    assert!(
        registered
            .realms_topics
            .iter()
            .any(|rt| rt.topic == "oxmail/shared_account"),
        "{registered:?}"
    );
}

#[tokio::test]
async fn a_second_run_finds_everything_gone() {
    let sim = sim().await;
    let ctx = context(ADMIN_PASSWORD);
    let action = action(&sim, &["ox-connector"], 5);
    action.apply(&ctx).await.unwrap();
    let again = action.apply(&ctx).await.unwrap().summary;
    assert!(again.contains("already gone: ox-connector"), "{again}");
    assert!(!again.contains("dropped"), "{again}");
    assert_eq!(
        deletes(&sim),
        1,
        "a second run sends no DELETE for a subscription already dropped"
    );
}

#[tokio::test]
async fn a_server_error_fails_naming_the_subscription_and_a_rerun_finishes() {
    let sim = sim().await;
    let ctx = context(ADMIN_PASSWORD);
    let action = action(&sim, &["ox-connector", "portal-consumer"], 5);
    // The second DELETE answers 500.
    sim.faults().add(
        FaultRule::prefix("/v1/subscriptions/")
            .method("DELETE")
            .nth(2)
            .status(500),
    );
    let err = action.apply(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("500"), "{err}");
    assert!(
        err.contains("\"portal-consumer\""),
        "names the subscription: {err}"
    );
    assert!(
        err.contains("already dropped: ox-connector"),
        "says what was done: {err}"
    );
    assert_eq!(sim.state().names(), ["portal-consumer"]);

    let rerun = action.apply(&ctx).await.unwrap().summary;
    assert!(rerun.contains("dropped portal-consumer"), "{rerun}");
    assert!(rerun.contains("already gone: ox-connector"), "{rerun}");
    assert!(sim.state().names().is_empty());
}

#[tokio::test]
async fn an_unauthorized_delete_and_a_hanging_api_fail_clearly() {
    let sim = sim().await;
    let ctx = context(ADMIN_PASSWORD);
    let action = action(&sim, &["ox-connector"], 1);

    sim.faults().add(
        FaultRule::prefix("/v1/subscriptions/")
            .method("DELETE")
            .status(401),
    );
    let err = action.apply(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("refused the credentials"), "{err}");
    assert_eq!(sim.state().names(), ["ox-connector", "portal-consumer"]);
    sim.faults().clear();

    sim.faults()
        .add(FaultRule::path("/v1/subscriptions").method("GET").hang());
    let started = std::time::Instant::now();
    let err = action.plan(&ctx).await.unwrap_err().to_string();
    assert!(err.contains("timed out"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(deletes(&sim), 1, "only the refused DELETE was sent");
    assert_eq!(sim.state().names(), ["ox-connector", "portal-consumer"]);
}

#[tokio::test]
async fn preflight_proves_url_and_credential_as_the_admin_and_changes_nothing() {
    let sim = sim().await;
    let action = action(&sim, &["ox-connector"], 5);

    let err = action
        .preflight(&context("not-the-password"))
        .await
        .unwrap_err()
        .to_string();
    assert_refused(&err, "not-the-password");
    assert!(err.contains(sim.api_url().trim_end_matches('/')), "{err}");

    action.preflight(&context(ADMIN_PASSWORD)).await.unwrap();

    // Two authenticated GETs of the list (one refused, one answered), nothing else.
    let requests: Vec<(String, String, Option<u16>)> = sim
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.status))
        .collect();
    assert_eq!(
        requests,
        vec![
            ("GET".into(), "/v1/subscriptions".into(), Some(401)),
            ("GET".into(), "/v1/subscriptions".into(), Some(200)),
        ]
    );
    assert_eq!(sim.state().names(), ["ox-connector", "portal-consumer"]);
}
