//! The UDM REST client (`stagehand_actions::udm`) against the UDM REST simulator: search
//! (with and without results, escaped filters), get with entity tags, create, modify and
//! delete with their refusals, `503` retries, timeouts, and errors that never carry the
//! password.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use stagehand_actions::action::SecretValue;
use stagehand_actions::clients::udm::{Filter, Scope, Search, UdmClient, UdmError};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::udm::{self, UdmConfig, UdmSim};

const ADMIN: &str = "cn=admin";
const PW: &str = "s3cr3t-udm-password";
const BASE: &str = "dc=swp-ldap,dc=internal";
const FA: &str = "oxmail/functional_account";
const SA: &str = "oxmail/shared_account";
const PERM: &str = "oxmail/shared_account_permission";

async fn sim() -> UdmSim {
    let sim = udm::start(UdmConfig::new(ADMIN, PW)).await.unwrap();
    let state = sim.state();
    state
        .add_user("alice", "alice@example.org", Some(1))
        .unwrap();
    state.add_user("bob", "bob@example.org", None).unwrap();
    state
        .add_functional_account(
            "Sales (EU)*",
            "sales@example.org",
            &[&format!("uid=alice,cn=users,{BASE}")],
            Some(1),
        )
        .unwrap();
    state
        .add_functional_account("Sales", "sales-de@example.org", &[], Some(1))
        .unwrap();
    state
        .add_permission("opendesk_mail_author_calendar_author", "Full access")
        .unwrap();
    sim
}

fn client(sim: &UdmSim) -> UdmClient {
    UdmClient::new(
        &sim.api_url(),
        ADMIN,
        SecretValue::new(PW),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap()
    .with_retries(3, Duration::from_millis(200))
}

fn props(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn assert_no_secret(e: &UdmError) {
    let text = format!("{e} {e:?}");
    assert!(!text.contains(PW), "the password leaked: {text}");
}

#[tokio::test]
async fn access_and_credentials() {
    let sim = sim().await;
    client(&sim).check_access().await.unwrap();

    // The base URL works without its trailing slash too.
    let trimmed = sim.api_url().trim_end_matches('/').to_string();
    UdmClient::new(
        &trimmed,
        ADMIN,
        SecretValue::new(PW),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap()
    .check_access()
    .await
    .unwrap();

    let wrong = UdmClient::new(
        &sim.api_url(),
        ADMIN,
        SecretValue::new("wrong-password"),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    let e = wrong.check_access().await.unwrap_err();
    assert!(matches!(e, UdmError::Unauthorized { .. }), "{e}");
    assert_eq!(e.status(), Some(401));
    assert!(e.to_string().contains("\"cn=admin\""));
    assert!(!e.to_string().contains("wrong-password"));

    sim.state().add_login("helpdesk", "helpdesk-pw", false);
    let forbidden = UdmClient::new(
        &sim.api_url(),
        "helpdesk",
        SecretValue::new("helpdesk-pw"),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    let e = forbidden.search(FA, &Filter::all(), &[]).await.unwrap_err();
    assert!(matches!(e, UdmError::Forbidden { .. }), "{e}");
    assert!(e.to_string().contains("authorized-groups"));

    assert!(matches!(
        UdmClient::new(
            "not a url",
            ADMIN,
            SecretValue::new(PW),
            Duration::from_secs(1),
            &Default::default()
        ),
        Err(UdmError::InvalidUrl { .. })
    ));
    let refused = UdmClient::new(
        "http://127.0.0.1:9/univention/udm/",
        ADMIN,
        SecretValue::new(PW),
        Duration::from_secs(2),
        &Default::default(),
    )
    .unwrap();
    let e = refused.check_access().await.unwrap_err();
    assert!(matches!(e, UdmError::Transport(_)), "{e}");
    assert_no_secret(&e);
}

#[tokio::test]
async fn search_with_and_without_results() {
    let sim = sim().await;
    let c = client(&sim);

    let all = c.search(FA, &Filter::all(), &[]).await.unwrap();
    assert_eq!(all.len(), 2);

    // Filter values are escaped: `Sales (EU)*` matches itself, not `Sales`.
    let exact = c
        .search(FA, &Filter::eq("name", "Sales (EU)*"), &[])
        .await
        .unwrap();
    assert_eq!(exact.len(), 1);
    let fa = &exact[0];
    assert_eq!(
        fa.dn,
        format!(r"cn=Sales (EU)*,cn=functional_accounts,cn=open-xchange,{BASE}")
    );
    assert_eq!(fa.object_type, FA);
    assert_eq!(fa.id.as_deref(), Some("Sales (EU)*"));
    assert_eq!(fa.property_i64("oxContext"), Some(1));
    assert_eq!(
        fa.property_str("mailPrimaryAddress").as_deref(),
        Some("sales@example.org")
    );
    assert_eq!(
        fa.property_strings("users"),
        vec![format!("uid=alice,cn=users,{BASE}")]
    );
    assert_eq!(fa.object_identifier(), None);
    assert_eq!(fa.uuid.as_deref().map(str::len), Some(36));
    assert_eq!(fa.server_uri.as_deref(), Some(fa.uri.as_str()));

    // No match: the answer has no `udm:object` key; the client answers an empty list.
    let none = c
        .search(FA, &Filter::eq("name", "Sales*"), &[])
        .await
        .unwrap();
    assert!(none.is_empty());

    let users = c
        .search(
            "users/user",
            &Filter::and([Filter::eq("isOxUser", "OK"), Filter::present("oxContext")]),
            &["username", "oxContext"],
        )
        .await
        .unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].property_str("username").as_deref(), Some("alice"));
    assert_eq!(users[0].properties.len(), 2, "{:?}", users[0].properties);

    let scoped = c
        .search_with(
            "users/user",
            &Search {
                position: Some(format!("cn=users,{BASE}")),
                scope: Scope::One,
                ..Search::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(scoped.len(), 2);

    let e = c
        .search_with(
            "users/user",
            &Search {
                position: Some(format!("cn=nowhere,{BASE}")),
                ..Search::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, UdmError::Rejected { status: 422, .. }), "{e}");
    assert!(e.is_located_at(&["query", "position"]));
    assert!(e.to_string().contains("GET http://"), "{e}");
}

#[tokio::test]
async fn get_create_modify_delete() {
    let sim = sim().await;
    let c = client(&sim);
    let alice = c
        .get_dn("users/user", &format!("uid=alice,cn=users,{BASE}"))
        .await
        .unwrap()
        .unwrap();
    assert!(alice.etag.is_some());
    assert!(alice.flag("isOxUser"));
    assert!(
        c.get_dn("users/user", &format!("uid=nobody,cn=users,{BASE}"))
            .await
            .unwrap()
            .is_none()
    );
    let permission = c
        .search(
            PERM,
            &Filter::eq("name", "opendesk_mail_author_calendar_author"),
            &[],
        )
        .await
        .unwrap()
        .remove(0);

    // Create a shared account with a chosen identifier, linking alice with the permission.
    let fa_uuid = "0f0e0d0c-0b0a-4909-8807-060504030201";
    let created = c
        .create(
            SA,
            None,
            &props(json!({
                "name": "Team-Sales",
                "displayName": "Team Sales",
                "oxContext": 1,
                "mailPrimaryAddress": "team@example.org",
                "univentionObjectIdentifier": fa_uuid,
                "users": [[alice.object_identifier().unwrap(), permission.object_identifier().unwrap()]],
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        created.dn,
        format!("cn=Team-Sales,cn=shared_accounts,cn=open-xchange,{BASE}")
    );
    assert!(created.uuid.is_some());
    assert!(created.etag.is_some());
    assert_eq!(created.location.as_deref(), Some(created.uri.as_str()));
    let sa = c.get(created.uri.as_str()).await.unwrap().unwrap();
    assert_eq!(sa.object_identifier().as_deref(), Some(fa_uuid));
    assert_eq!(sa.uuid, created.uuid);

    // Refusals carry the server's located messages.
    let e = c
        .create(
            SA,
            None,
            &props(json!({"name": "Other", "displayName": "O", "oxContext": 1,
                          "mailPrimaryAddress": "TEAM@example.org"})),
        )
        .await
        .unwrap_err();
    assert!(
        e.is_located_at(&["properties", "mailPrimaryAddress"]),
        "{e}"
    );
    assert!(
        e.to_string().contains("The mail address is already in use"),
        "{e}"
    );
    assert!(e.to_string().contains("POST http://"), "{e}");
    assert_no_secret(&e);
    let e = c
        .create(
            SA,
            None,
            &props(
                json!({"name": "Team-Sales", "displayName": "again", "oxContext": 1,
                          "mailPrimaryAddress": "again@example.org"}),
            ),
        )
        .await
        .unwrap_err();
    assert!(e.is_located_at(&["dn"]), "{e}");
    let e = c
        .create(SA, None, &props(json!({"name": "Incomplete"})))
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(422));
    assert!(e.is_located_at(&["properties", "oxContext"]), "{e}");
    assert!(
        e.to_string()
            .contains("The property \"oxContext\" is required."),
        "{e}"
    );

    // Modify with and without a current entity tag; a may-not-change property.
    let new_tag = c
        .modify(
            sa.uri.as_str(),
            &props(json!({"displayName": "Team Sales EU"})),
            sa.etag.as_deref(),
        )
        .await
        .unwrap();
    assert!(new_tag.is_some());
    assert_ne!(new_tag, sa.etag);
    let e = c
        .modify(
            sa.uri.as_str(),
            &props(json!({"displayName": "stale"})),
            sa.etag.as_deref(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, UdmError::PreconditionFailed { .. }), "{e}");
    let e = c
        .modify(sa.uri.as_str(), &props(json!({"oxContext": 2})), None)
        .await
        .unwrap_err();
    assert!(e.is_located_at(&["body", "oxContext"]), "{e}");
    assert!(e.to_string().contains("Value may not change"), "{e}");
    let e = c
        .modify(
            c.object_url(SA, &format!("cn=gone,{BASE}")).as_str(),
            &Map::new(),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, UdmError::NotFound { .. }), "{e}");

    // Delete: the referenced permission is refused; the account goes, then is gone.
    let e = c.delete(permission.uri.as_str(), None).await.unwrap_err();
    assert!(matches!(e, UdmError::Rejected { status: 400, .. }), "{e}");
    assert!(e.to_string().contains("references it"), "{e}");
    let e = c
        .delete(sa.uri.as_str(), Some("\"stale\""))
        .await
        .unwrap_err();
    assert!(matches!(e, UdmError::PreconditionFailed { .. }), "{e}");
    assert!(c.delete(sa.uri.as_str(), None).await.unwrap());
    assert!(!c.delete(sa.uri.as_str(), None).await.unwrap());
    assert!(c.delete(permission.uri.as_str(), None).await.unwrap());

    // URIs on other hosts are refused (the credential only goes to the API's host).
    let e = c
        .get("http://elsewhere.example/univention/udm/users/user/x")
        .await
        .unwrap_err();
    assert!(matches!(e, UdmError::InvalidUrl { .. }), "{e}");
}

#[tokio::test]
async fn unavailable_is_retried_a_bounded_number_of_times() {
    let sim = sim().await;
    let c = client(&sim);

    sim.faults().add(
        FaultRule::prefix("/univention/udm/")
            .nth(1)
            .status_retry_after(503, 0),
    );
    sim.faults().add(
        FaultRule::prefix("/univention/udm/")
            .nth(2)
            .status_retry_after(503, 0),
    );
    sim.clear_requests();
    let found = c
        .search(FA, &Filter::eq("name", "Sales"), &[])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(sim.requests().len(), 3, "two 503s, then the answer");
    sim.faults().clear();

    // The create is retried too and happens once.
    sim.faults().add(
        FaultRule::prefix("/univention/udm/")
            .nth(1)
            .status_retry_after(503, 0),
    );
    c.create(
        PERM,
        None,
        &props(json!({"name": "p-retry", "displayName": "P"})),
    )
    .await
    .unwrap();
    assert!(sim.state().find(PERM, "name", "p-retry").is_some());
    sim.faults().clear();

    // Always 503: 1 + 3 retries, waiting Retry-After (capped at 200 ms here), then an error.
    sim.faults()
        .add(FaultRule::prefix("/univention/udm/").status_retry_after(503, 60));
    sim.clear_requests();
    let started = Instant::now();
    let e = c.search(FA, &Filter::all(), &[]).await.unwrap_err();
    assert!(
        matches!(e, UdmError::Unavailable { attempts: 4, .. }),
        "{e}"
    );
    assert_eq!(sim.requests().len(), 4);
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(e.to_string().contains("LDAP"), "{e}");
    assert_no_secret(&e);
}

#[tokio::test]
async fn a_hanging_server_times_out() {
    let sim = sim().await;
    let c = UdmClient::new(
        &sim.api_url(),
        ADMIN,
        SecretValue::new(PW),
        Duration::from_millis(300),
        &Default::default(),
    )
    .unwrap();
    sim.faults().add(FaultRule::any().hang());
    let started = Instant::now();
    let e = c.search(FA, &Filter::all(), &[]).await.unwrap_err();
    assert!(matches!(e, UdmError::Transport(_)), "{e}");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_no_secret(&e);
}

#[tokio::test]
async fn waiting_for_a_permission_that_appears_late() {
    let sim = sim().await;
    let c = client(&sim);
    sim.state()
        .add_delayed(
            PERM,
            json!({"name": "opendesk_mail_admin_calendar_author", "displayName": "Admin",
                   "univentionObjectIdentifier": "perm-late"}),
            Duration::from_millis(700),
        )
        .unwrap();
    let filter = Filter::eq("name", "opendesk_mail_admin_calendar_author");
    let started = Instant::now();
    let mut polls = 0;
    let found = loop {
        polls += 1;
        let found = c.search(PERM, &filter, &[]).await.unwrap();
        if let Some(p) = found.into_iter().next() {
            break p;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(polls > 1, "it should not be there at first");
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(found.object_identifier().as_deref(), Some("perm-late"));
}
