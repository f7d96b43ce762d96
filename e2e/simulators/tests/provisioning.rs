//! The Provisioning API simulator over real HTTP: every status of the subscription endpoints,
//! authentication, each fault kind and the `/_sim/` control API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::provisioning::{
    self, PrefillStatus, ProvisioningConfig, ProvisioningSim,
};

const ADMIN: &str = "admin";
const ADMIN_PW: &str = "admin-secret";

async fn sim() -> ProvisioningSim {
    let sim = provisioning::start(ProvisioningConfig::new(ADMIN, ADMIN_PW))
        .await
        .unwrap();
    sim.state().add_subscription(
        "ox-connector",
        &[("udm", "users/user"), ("udm", "groups/group")],
        true,
        "ox-pw",
    );
    sim.state()
        .add_subscription("portal", &[("udm", "users/user")], false, "portal-pw");
    sim
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn json_of(response: reqwest::Response) -> Value {
    response.json().await.unwrap()
}

#[tokio::test]
async fn list_needs_the_admin() {
    let sim = sim().await;
    let url = format!("{}/subscriptions", sim.api_url());
    let c = client();

    let none = c.get(&url).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(none.headers()["www-authenticate"], "Basic");
    assert_eq!(json_of(none).await, json!({"detail": "Not authenticated"}));

    let wrong = c
        .get(&url)
        .basic_auth(ADMIN, Some("nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.headers()["www-authenticate"], "Basic");
    assert_eq!(
        json_of(wrong).await,
        json!({"detail": "Incorrect username or password"})
    );

    // A subscriber is not the admin.
    let subscriber = c
        .get(&url)
        .basic_auth("portal", Some("portal-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(subscriber.status(), StatusCode::UNAUTHORIZED);

    let ok = c
        .get(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    let body = json_of(ok).await;
    assert_eq!(
        body,
        json!([
            {"name": "ox-connector",
             "realms_topics": [{"realm": "udm", "topic": "users/user"}, {"realm": "udm", "topic": "groups/group"}],
             "request_prefill": true, "prefill_queue_status": "pending"},
            {"name": "portal",
             "realms_topics": [{"realm": "udm", "topic": "users/user"}],
             "request_prefill": false, "prefill_queue_status": "done"}
        ])
    );
    assert!(!body.to_string().contains("pw"), "passwords never leave");
}

#[tokio::test]
async fn get_one_as_subscriber_admin_and_stranger() {
    let sim = sim().await;
    let url = format!("{}/subscriptions/portal", sim.api_url());
    let c = client();

    let own = c
        .get(&url)
        .basic_auth("portal", Some("portal-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    assert_eq!(json_of(own).await["name"], "portal");

    let admin = c
        .get(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::OK);

    let other = c
        .get(&url)
        .basic_auth("ox-connector", Some("ox-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        json_of(other).await,
        json!({"detail": "You do not have access to this data"})
    );

    let bad_pw = c
        .get(&url)
        .basic_auth("portal", Some("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_pw.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        json_of(bad_pw).await,
        json!({"detail": "Incorrect username or password"})
    );

    let missing = c
        .get(format!("{}/subscriptions/nobody", sim.api_url()))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        json_of(missing).await,
        json!({"detail": "Subscription not found: 'nobody'"})
    );

    // The current real server's behaviour, on request.
    sim.state().set_admin_reads_single(false);
    let admin = c
        .get(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        json_of(admin).await,
        json!({"detail": "You do not have access to this data"})
    );
}

#[tokio::test]
async fn delete_then_404_for_admin_and_subscriber() {
    let sim = sim().await;
    let c = client();
    let url = format!("{}/subscriptions/ox-connector", sim.api_url());

    let unauth = c.delete(&url).send().await.unwrap();
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);
    let stranger = c
        .delete(&url)
        .basic_auth("portal", Some("portal-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), StatusCode::UNAUTHORIZED);
    assert!(sim.state().subscription("ox-connector").is_some());

    let first = c
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.text().await.unwrap(), "null");
    assert!(sim.state().subscription("ox-connector").is_none());

    let again = c
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        json_of(again).await,
        json!({"detail": "Subscription not found: 'ox-connector'"})
    );

    // The subscriber may drop its own subscription.
    let own = c
        .delete(format!("{}/subscriptions/portal", sim.api_url()))
        .basic_auth("portal", Some("portal-pw"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);
    assert!(sim.state().names().is_empty());
}

#[tokio::test]
async fn create_is_201_then_200_identical_409_different() {
    let sim = sim().await;
    let c = client();
    let url = format!("{}/subscriptions", sim.api_url());
    let body = json!({
        "name": "new-consumer",
        "realms_topics": [{"realm": "udm", "topic": "users/user"}, {"realm": "udm", "topic": "oxmail/shared_account"}],
        "request_prefill": true,
        "password": "np",
    });

    let not_admin = c
        .post(&url)
        .basic_auth("portal", Some("portal-pw"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(not_admin.status(), StatusCode::UNAUTHORIZED);

    let created = c
        .post(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(created.text().await.unwrap(), "null");
    let stored = sim.state().subscription("new-consumer").unwrap();
    assert_eq!(stored.prefill_queue_status, PrefillStatus::Pending);
    assert_eq!(stored.realms_topics.len(), 2);

    // Identical, topics in another order: idempotent.
    let mut same = body.clone();
    same["realms_topics"] = json!([{"realm": "udm", "topic": "oxmail/shared_account"}, {"realm": "udm", "topic": "users/user"}]);
    let again = c
        .post(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .json(&same)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);

    // The subscriber can now authenticate with its password.
    let own = c
        .get(format!("{url}/new-consumer"))
        .basic_auth("new-consumer", Some("np"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), StatusCode::OK);

    let conflict = json!({"detail": "Subscription with the given name already registered but with different parameters."});
    for (field, value) in [
        (
            "realms_topics",
            json!([{"realm": "udm", "topic": "users/user"}]),
        ),
        ("request_prefill", json!(false)),
        ("password", json!("other")),
    ] {
        let mut different = body.clone();
        different[field] = value;
        let r = c
            .post(&url)
            .basic_auth(ADMIN, Some(ADMIN_PW))
            .json(&different)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CONFLICT, "different {field}");
        assert_eq!(json_of(r).await, conflict);
    }

    let no_prefill =
        json!({"name": "quiet", "realms_topics": [], "request_prefill": false, "password": "q"});
    let r = c
        .post(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .json(&no_prefill)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(
        sim.state()
            .subscription("quiet")
            .unwrap()
            .prefill_queue_status,
        PrefillStatus::Done
    );
}

#[tokio::test]
async fn create_rejects_malformed_bodies_with_422() {
    let sim = sim().await;
    let c = client();
    let url = format!("{}/subscriptions", sim.api_url());

    let missing = c
        .post(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .json(&json!({"name": "x", "request_prefill": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let detail = json_of(missing).await["detail"].clone();
    let locs: Vec<Value> = detail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["loc"].clone())
        .collect();
    assert!(locs.contains(&json!(["body", "password"])), "{detail}");
    assert!(locs.contains(&json!(["body", "realms_topics"])), "{detail}");
    assert!(
        locs.contains(&json!(["body", "request_prefill"])),
        "{detail}"
    );

    let not_json = c
        .post(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json_of(not_json).await["detail"][0]["type"], "json_invalid");

    // Authentication comes before validation, as in FastAPI.
    let unauth = c.post(&url).body("{not json").send().await.unwrap();
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(sim.state().names(), vec!["ox-connector", "portal"]);
}

#[tokio::test]
async fn unknown_paths_and_methods() {
    let sim = sim().await;
    let c = client();
    let r = c
        .get(format!("{}/other", sim.api_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = c
        .put(format!("{}/subscriptions/portal", sim.api_url()))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn injected_statuses_hit_the_chosen_request_with_the_api_error_body() {
    let sim = sim().await;
    let c = client();
    let url = format!("{}/subscriptions", sim.api_url());

    // The 2nd GET of the list answers 401 with the API's body.
    sim.faults().add(
        FaultRule::path("/v1/subscriptions")
            .method("GET")
            .nth(2)
            .status(401),
    );
    let statuses = {
        let mut s = Vec::new();
        for _ in 0..3 {
            s.push(
                c.get(&url)
                    .basic_auth(ADMIN, Some(ADMIN_PW))
                    .send()
                    .await
                    .unwrap(),
            );
        }
        s
    };
    assert_eq!(statuses[0].status(), StatusCode::OK);
    assert_eq!(statuses[1].status(), StatusCode::UNAUTHORIZED);
    assert_eq!(statuses[1].headers()["www-authenticate"], "Basic");
    assert_eq!(statuses[2].status(), StatusCode::OK);
    let second: Value =
        serde_json::from_str(&statuses.into_iter().nth(1).unwrap().text().await.unwrap()).unwrap();
    assert_eq!(second, json!({"detail": "Incorrect username or password"}));
    sim.faults().clear();

    // Every DELETE from the 2nd on: 500 (Starlette's plain body); nothing deleted by them.
    sim.faults().add(
        FaultRule::prefix("/v1/subscriptions/")
            .method("DELETE")
            .from_nth(2)
            .status(500),
    );
    let d1 = c
        .delete(format!("{url}/nobody"))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(d1.status(), StatusCode::NOT_FOUND);
    for name in ["portal", "ox-connector"] {
        let r = c
            .delete(format!("{url}/{name}"))
            .basic_auth(ADMIN, Some(ADMIN_PW))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.text().await.unwrap(), "Internal Server Error");
    }
    assert_eq!(sim.state().names().len(), 2, "a 500 changes nothing");
    sim.faults().clear();

    // 503 with Retry-After.
    sim.faults()
        .add(FaultRule::any().status_retry_after(503, 7));
    let r = c
        .get(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(json_of(r).await, json!({"detail": "Service Unavailable"}));

    let rules = sim.faults().rules();
    assert_eq!(rules.len(), 1);
    assert_eq!((rules[0].matched, rules[0].fired), (1, 1));
}

#[tokio::test]
async fn a_hang_makes_the_client_time_out_and_stop_releases_it() {
    let sim = sim().await;
    let url = format!("{}/subscriptions/portal", sim.api_url());
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/portal")
            .method("DELETE")
            .nth(1)
            .hang(),
    );

    let impatient = Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = impatient
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(
        sim.state().subscription("portal").is_some(),
        "a hang changes nothing"
    );

    // The rule fired once; the next DELETE goes through.
    let r = client()
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // A request hanging when the server stops gets its connection closed, not a long wait.
    sim.faults().add(FaultRule::any().hang());
    let patient = client();
    let list = format!("{}/subscriptions", sim.api_url());
    let pending = tokio::spawn(async move {
        let started = Instant::now();
        let r = patient
            .get(&list)
            .basic_auth(ADMIN, Some(ADMIN_PW))
            .send()
            .await;
        (r.is_err(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = sim.requests();
    assert_eq!(log.last().unwrap().fault.as_deref(), Some("hang"));
    assert_eq!(log.last().unwrap().status, None);
    sim.stop().await;
    let (failed, waited) = pending.await.unwrap();
    assert!(failed);
    assert!(waited < Duration::from_secs(5), "released after {waited:?}");
}

#[tokio::test]
async fn a_dropped_connection_gets_no_answer() {
    let sim = sim().await;
    let c = client();
    let url = format!("{}/subscriptions/portal", sim.api_url());

    sim.faults().add(
        FaultRule::path("/v1/subscriptions/portal")
            .nth(1)
            .drop_connection(),
    );
    let err = c
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap_err();
    assert!(!err.is_timeout(), "closed, not timed out: {err}");
    assert!(err.status().is_none());
    assert!(sim.state().subscription("portal").is_some());

    // After apply: the change happens, its answer is lost.
    sim.faults().add(
        FaultRule::path("/v1/subscriptions/portal")
            .nth(1)
            .after_apply()
            .drop_connection(),
    );
    let err = c
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap_err();
    assert!(err.status().is_none());
    assert!(
        sim.state().subscription("portal").is_none(),
        "applied before the drop"
    );
    let r = c
        .delete(&url)
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_delay_answers_late() {
    let sim = sim().await;
    sim.faults().add(FaultRule::any().delay_ms(300));
    let started = Instant::now();
    let r = client()
        .get(format!("{}/subscriptions", sim.api_url()))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(sim.requests()[0].fault.as_deref(), Some("delay"));
}

#[tokio::test]
async fn control_api_steers_faults_and_shows_requests_and_state() {
    let sim = sim().await;
    let c = client();
    let base = sim.base_url();

    let added = c
        .post(format!("{base}/_sim/faults"))
        .json(&json!({"method": "DELETE", "path": {"prefix": "/v1/subscriptions/"}, "when": {"nth": 1},
                      "fault": {"kind": "status", "status": 503, "retry_after": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(added.status(), StatusCode::CREATED);
    let id = json_of(added).await["id"].as_u64().unwrap();
    assert_eq!(sim.faults().rules()[0].id, id);

    let bad = c
        .post(format!("{base}/_sim/faults"))
        .body("{\"fault\": 1}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    let r = c
        .delete(format!("{}/subscriptions/portal", sim.api_url()))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");

    let rules = json_of(c.get(format!("{base}/_sim/faults")).send().await.unwrap()).await;
    assert_eq!(rules[0]["fired"], 1);
    let cleared = json_of(
        c.delete(format!("{base}/_sim/faults"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(cleared, json!({"cleared": 1}));
    assert!(sim.faults().rules().is_empty());

    c.get(format!("{}/subscriptions", sim.api_url()))
        .basic_auth(ADMIN, Some(ADMIN_PW))
        .send()
        .await
        .unwrap();
    let mut log = json_of(c.get(format!("{base}/_sim/requests")).send().await.unwrap()).await;
    // Each entry says when it arrived (wall clock, ms), in order.
    let mut arrived = Vec::new();
    for entry in log.as_array_mut().unwrap() {
        let at = entry
            .as_object_mut()
            .unwrap()
            .remove("received_unix_ms")
            .and_then(|v| v.as_u64())
            .unwrap();
        assert!(at > 1_700_000_000_000, "{at}");
        arrived.push(at);
    }
    assert!(arrived.is_sorted(), "{arrived:?}");
    assert_eq!(
        log,
        json!([
            {"seq": 1, "method": "DELETE", "path": "/v1/subscriptions/portal", "op": null, "status": 503, "fault": "status"},
            {"seq": 2, "method": "GET", "path": "/v1/subscriptions", "op": null, "status": 200, "fault": null}
        ])
    );
    // "No DELETE went through" is one filter away.
    assert!(
        !sim.requests()
            .iter()
            .any(|r| r.method == "DELETE" && r.status == Some(200))
    );

    let seeded = c
        .post(format!("{base}/_sim/seed"))
        .json(&json!({"subscriptions": [{"name": "seeded", "realms_topics": [{"realm": "udm", "topic": "groups/group"}], "request_prefill": false, "password": "sp"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), StatusCode::OK);
    let bad_seed = c
        .post(format!("{base}/_sim/seed"))
        .json(&json!({"subscriptions": [{"name": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_seed.status(), StatusCode::BAD_REQUEST);

    let state = json_of(c.get(format!("{base}/_sim/state")).send().await.unwrap()).await;
    let names: Vec<&str> = state["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["ox-connector", "portal", "seeded"]);
    assert!(!state.to_string().contains("portal-pw") && !state.to_string().contains("\"sp\""));

    let cleared = json_of(
        c.delete(format!("{base}/_sim/requests"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(cleared, json!({"cleared": 2}));
    assert!(sim.requests().is_empty(), "control calls are not logged");
}
