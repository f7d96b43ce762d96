//! The UDM REST API simulator over real HTTP: authentication, content negotiation, the HAL
//! shapes of search and get, every status of create/modify/delete, the error envelope, faults
//! and objects that appear late.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};
use stagehand_simulators::http::FaultRule;
use stagehand_simulators::udm::{self, UdmConfig, UdmSim};

const ADMIN: &str = "cn=admin";
const PW: &str = "udm-secret";
const BASE: &str = "dc=swp-ldap,dc=internal";

struct Api {
    sim: UdmSim,
    client: Client,
}

impl Api {
    async fn new() -> Self {
        let sim = udm::start(UdmConfig::new(ADMIN, PW)).await.unwrap();
        let client = Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Api { sim, client }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.sim.api_url())
    }

    /// A request with the admin credentials and `Accept: application/json`.
    fn req(&self, method: Method, url: &str) -> RequestBuilder {
        self.client
            .request(method, url)
            .basic_auth(ADMIN, Some(PW))
            .header("Accept", "application/json")
    }

    async fn get(&self, url: &str) -> Response {
        self.req(Method::GET, url).send().await.unwrap()
    }

    async fn search(&self, module: &str, query: &[(&str, &str)]) -> Value {
        let response = self
            .req(Method::GET, &self.url(&format!("{module}/")))
            .query(query)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    async fn post(&self, module: &str, body: Value) -> Response {
        self.req(Method::POST, &self.url(&format!("{module}/")))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    fn seed(&self) {
        let state = self.sim.state();
        state
            .add_user("alice", "alice@example.org", Some(1))
            .unwrap();
        state.add_user("bob", "bob@example.org", None).unwrap();
        state
            .add_functional_account(
                "Team Sales",
                "sales@example.org",
                &[&format!("uid=alice,cn=users,{BASE}")],
                Some(1),
            )
            .unwrap();
        state
            .add_functional_account("Support", "support@example.org", &[], None)
            .unwrap();
        state
            .add_permission(
                "opendesk_mail_author_calendar_author",
                "Mail: Full access, Calendar: Full access",
            )
            .unwrap();
    }
}

fn objects(result: &Value) -> Vec<Value> {
    result["_embedded"]["udm:object"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn udm_errors(body: &Value) -> Vec<(Value, String)> {
    body["_embedded"]["udm:error"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "value_error");
            (
                e["location"].clone(),
                e["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn authentication() {
    let api = Api::new().await;
    let url = api.url("users/user/?filter=(username=*)");

    let none = api.client.get(&url).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        none.headers()["www-authenticate"],
        "Basic realm=\"Univention Management Console\""
    );
    assert!(none.text().await.unwrap().is_empty());

    let wrong = api
        .client
        .get(&url)
        .basic_auth(ADMIN, Some("nope"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    for malformed in ["Basic !!!", "Bearer abc", "Basic Y24yYWRtaW4="] {
        let bad = api
            .client
            .get(&url)
            .header("Authorization", malformed)
            .header("Accept", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST, "{malformed}");
        let body: Value = bad.json().await.unwrap();
        assert_eq!(body["error"]["code"], 400);
        assert_eq!(body["error"]["title"], "");
        assert_eq!(
            body["error"]["message"],
            "HTTP 400: Bad Request (The basic auth credentials are malformed.)"
        );
    }

    api.sim.state().add_login("helpdesk", "h-pw", false);
    api.sim.state().add_login("operator", "o-pw", true);
    let forbidden = api
        .client
        .get(&url)
        .basic_auth("helpdesk", Some("h-pw"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
    let ok = api
        .client
        .get(&url)
        .basic_auth("operator", Some("o-pw"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(api.get(&url).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn content_negotiation() {
    let api = Api::new().await;
    api.seed();
    let url = api.url("users/user/?filter=(username=alice)");
    let auth = |r: RequestBuilder| r.basic_auth(ADMIN, Some(PW));

    // No Accept header and */* get HTML: a client must ask for JSON.
    for accept in [None, Some("*/*"), Some("text/html")] {
        let mut request = auth(api.client.get(&url));
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(serde_json::from_str::<Value>(&response.text().await.unwrap()).is_err());
    }
    let json = api.get(&url).await;
    assert_eq!(json.headers()["content-type"], "application/json");
    let hal = auth(api.client.get(&url))
        .header("Accept", "application/hal+json")
        .send()
        .await
        .unwrap();
    assert_eq!(hal.headers()["content-type"], "application/hal+json");
    let body: Value = hal.json().await.unwrap();
    assert_eq!(body["results"], 1);

    let unknown = auth(api.client.get(&url))
        .header("Accept", "image/png")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_ACCEPTABLE);

    api.sim.state().set_html_view_enabled(false);
    let disabled = auth(api.client.get(&url)).send().await.unwrap();
    assert_eq!(disabled.status(), StatusCode::NOT_ACCEPTABLE);
    assert!(disabled.text().await.unwrap().contains("html-view-enabled"));
}

#[tokio::test]
async fn search_hal_shape_and_filters() {
    let api = Api::new().await;
    api.seed();

    // No query string: no search at all.
    let listing: Value = api
        .get(&api.url("oxmail/functional_account/"))
        .await
        .json()
        .await
        .unwrap();
    assert!(listing.get("results").is_none());
    assert!(listing["_embedded"].get("udm:object").is_none());
    assert!(listing["_links"]["search"].is_array());

    let all = api
        .search("oxmail/functional_account", &[("filter", "(name=*)")])
        .await;
    assert_eq!(all["results"], 2);
    let found = objects(&all);
    assert_eq!(found.len(), 2);
    let sales = found
        .iter()
        .find(|o| o["properties"]["name"] == "Team Sales")
        .unwrap();
    let dn = format!("cn=Team Sales,cn=functional_accounts,cn=open-xchange,{BASE}");
    assert_eq!(sales["dn"], dn);
    assert_eq!(sales["objectType"], "oxmail/functional_account");
    assert_eq!(sales["id"], "Team Sales");
    assert_eq!(
        sales["position"],
        format!("cn=functional_accounts,cn=open-xchange,{BASE}")
    );
    assert_eq!(
        sales["properties"]["mailPrimaryAddress"],
        "sales@example.org"
    );
    assert_eq!(
        sales["properties"]["oxContext"], 1,
        "oxContext is an integer"
    );
    assert_eq!(sales["properties"]["objectFlag"], json!([]));
    assert!(
        sales["properties"]
            .get("univentionObjectIdentifier")
            .is_none()
    );
    assert_eq!(sales["options"], json!({"default": true}));
    assert!(sales["policies"].is_object());
    let uuid = sales["uuid"].as_str().unwrap();
    assert_eq!(uuid.len(), 36);
    let uri = sales["uri"].as_str().unwrap();
    assert_eq!(
        uri,
        api.sim
            .object_uri("oxmail/functional_account", &dn)
            .as_str()
    );
    assert!(uri.contains("cn%3DTeam%20Sales%2Ccn%3Dfunctional_accounts"));
    assert_eq!(sales["_links"]["self"][0]["href"], uri);
    assert_eq!(sales["_links"]["self"][0]["name"], dn);

    // Nothing matches: results 0 and no udm:object key at all.
    let none = api
        .search(
            "oxmail/functional_account",
            &[("filter", "(name=nothing*)")],
        )
        .await;
    assert_eq!(none["results"], 0);
    assert!(none["_embedded"].get("udm:object").is_none());

    // (&…), (|…), (!…), wildcards, LDAP aliases, escapes, query[], scope, properties.
    let and = api
        .search(
            "users/user",
            &[("filter", "(&(isOxUser=OK)(oxContext=1)(username=al*))")],
        )
        .await;
    assert_eq!(objects(&and).len(), 1);
    let or = api
        .search(
            "users/user",
            &[(
                "filter",
                "(|(username=bob)(mailPrimaryAddress=ALICE@example.org))",
            )],
        )
        .await;
    assert_eq!(objects(&or).len(), 2);
    let not = api
        .search("users/user", &[("filter", "(!(uid=bob))")])
        .await;
    assert_eq!(objects(&not).len(), 1);
    assert_eq!(objects(&not)[0]["id"], "alice");
    let escaped = api
        .search(
            "oxmail/functional_account",
            &[("filter", r"(name=Team\20Sales)")],
        )
        .await;
    assert_eq!(objects(&escaped).len(), 1);
    let query = api
        .search(
            "oxmail/functional_account",
            &[("query[mailPrimaryAddress]", "supp*")],
        )
        .await;
    assert_eq!(objects(&query).len(), 1);
    assert_eq!(objects(&query)[0]["id"], "Support");
    let one_level = api
        .search(
            "users/user",
            &[("position", &format!("cn=users,{BASE}")), ("scope", "one")],
        )
        .await;
    assert_eq!(objects(&one_level).len(), 2);
    let base_scope = api
        .search(
            "users/user",
            &[("position", &format!("cn=users,{BASE}")), ("scope", "base")],
        )
        .await;
    assert_eq!(base_scope["results"], 0);
    let narrow = api
        .search(
            "users/user",
            &[
                ("filter", "(username=alice)"),
                ("properties", "username"),
                ("properties", "mailPrimaryAddress"),
            ],
        )
        .await;
    let props = objects(&narrow)[0]["properties"].clone();
    assert_eq!(
        props,
        json!({"username": "alice", "mailPrimaryAddress": "alice@example.org"})
    );
    let light = api
        .search(
            "users/user",
            &[("filter", "(username=*)"), ("properties", "dn")],
        )
        .await;
    assert_eq!(objects(&light)[0]["properties"], json!({}));

    // Search errors.
    let bad = api
        .req(Method::GET, &api.url("users/user/"))
        .query(&[("filter", "(username=alice")])
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(udm_errors(&body)[0].0, json!(["query", "filter"]));
    let nowhere = api
        .req(Method::GET, &api.url("users/user/"))
        .query(&[("position", &format!("cn=nowhere,{BASE}"))])
        .send()
        .await
        .unwrap();
    assert_eq!(nowhere.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = nowhere.json().await.unwrap();
    assert_eq!(udm_errors(&body)[0].0, json!(["query", "position"]));
    assert_eq!(body["error"]["title"], "Unprocessable Entity");
    let outside = api
        .req(Method::GET, &api.url("users/user/"))
        .query(&[("position", "dc=elsewhere")])
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), StatusCode::UNPROCESSABLE_ENTITY);

    let unknown = api.get(&api.url("no/such/")).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn get_object_etag_and_404() {
    let api = Api::new().await;
    api.seed();
    let dn = format!("uid=alice,cn=users,{BASE}");
    let uri = api.sim.object_uri("users/user", &dn);
    let response = api.get(&uri).await;
    assert_eq!(response.status(), StatusCode::OK);
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert!(response.headers().contains_key("last-modified"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["dn"], dn);
    assert_eq!(body["uri"], uri);
    assert_eq!(body["properties"]["oxContext"], 1);
    assert_eq!(body["properties"]["isOxUser"], "OK");
    assert_eq!(body["_links"]["udm:object/remove"][0]["method"], "DELETE");
    assert_eq!(
        body["properties"]["univentionObjectIdentifier"], body["uuid"],
        "add_user sets the identifier to the entryUUID"
    );

    let not_modified = api
        .req(Method::GET, &uri)
        .header("If-None-Match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);

    let missing_dn = format!("uid=nobody,cn=users,{BASE}");
    let missing = api
        .get(&api.sim.object_uri("users/user", &missing_dn))
        .await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], 404);
    assert_eq!(body["error"]["title"], "");
    assert_eq!(
        body["error"]["message"],
        format!("HTTP 404: Not Found ('users/user' '{missing_dn}')")
    );
    assert_eq!(body["_links"]["self"][0]["title"], "HTTP-Error 404: ");

    // The object under another module is not found either.
    let wrong_module = api.get(&api.sim.object_uri("groups/group", &dn)).await;
    assert_eq!(wrong_module.status(), StatusCode::NOT_FOUND);

    // get-by-dn and get-by-uuid redirect.
    let by_dn = api
        .get(&api.url(&format!("object/{}", udm::quote_dn(&dn))))
        .await;
    assert_eq!(by_dn.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(by_dn.headers()["location"], uri.as_str());
    let uuid = api.sim.state().object(&dn).unwrap().uuid;
    let by_uuid = api.get(&api.url(&format!("object/{uuid}"))).await;
    assert_eq!(by_uuid.headers()["location"], uri.as_str());
}

#[tokio::test]
async fn create_rules() {
    let api = Api::new().await;
    api.seed();
    let alice = api
        .sim
        .state()
        .object(&format!("uid=alice,cn=users,{BASE}"))
        .unwrap();
    let permission = api
        .sim
        .state()
        .find(
            "oxmail/shared_account_permission",
            "name",
            "opendesk_mail_author_calendar_author",
        )
        .unwrap();
    let alice_uoid = alice.property_str("univentionObjectIdentifier").unwrap();
    let perm_uoid = permission
        .property_str("univentionObjectIdentifier")
        .unwrap();

    // Created in the default position, with the identifier the caller chose.
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {
                "name": "Team-Sales",
                "displayName": "Team Sales",
                "oxContext": "1",
                "mailPrimaryAddress": "Team@Example.org",
                "univentionObjectIdentifier": "11111111-2222-4333-8444-555555555555",
                "users": [[alice_uoid, perm_uoid]],
            }}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    assert!(response.headers().contains_key("etag"));
    let created: Value = response.json().await.unwrap();
    let dn = format!("cn=Team-Sales,cn=shared_accounts,cn=open-xchange,{BASE}");
    assert_eq!(created["dn"], dn);
    assert_eq!(created["uuid"].as_str().unwrap().len(), 36);
    assert_eq!(location, api.sim.object_uri("oxmail/shared_account", &dn));
    let fetched: Value = api.get(&location).await.json().await.unwrap();
    assert_eq!(fetched["uuid"], created["uuid"]);
    assert_eq!(fetched["properties"]["oxContext"], 1);
    assert_eq!(
        fetched["properties"]["mailPrimaryAddress"],
        "team@example.org"
    );
    assert_eq!(
        fetched["properties"]["univentionObjectIdentifier"],
        "11111111-2222-4333-8444-555555555555"
    );
    assert_eq!(
        fetched["properties"]["users"],
        json!([[alice_uoid, perm_uoid]])
    );

    // Without an identifier one is assigned.
    let response = api
        .post(
            "oxmail/shared_account_permission",
            json!({"properties": {"name": "p2", "displayName": "P2"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let p2 = api
        .sim
        .state()
        .find("oxmail/shared_account_permission", "name", "p2")
        .unwrap();
    assert!(p2.property_str("univentionObjectIdentifier").is_some());

    // Required properties: every missing one located at body.properties.<name>.
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "x"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    let mut locations: Vec<Value> = udm_errors(&body).into_iter().map(|(l, _)| l).collect();
    locations.sort_by_key(|l| l.to_string());
    assert_eq!(
        locations,
        vec![
            json!(["body", "properties", "displayName"]),
            json!(["body", "properties", "mailPrimaryAddress"]),
            json!(["body", "properties", "oxContext"]),
        ]
    );
    assert_eq!(
        body["error"]["error"]["displayName"],
        "The property \"displayName\" is required."
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Request argument \"oxContext\" The property \"oxContext\" is required.\n")
    );

    // The primary address is unique across modules (case-insensitively).
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "Other", "displayName": "O", "oxContext": 1,
                                  "mailPrimaryAddress": "ALICE@example.org"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    let errors = udm_errors(&body);
    assert_eq!(
        errors[0].0,
        json!(["body", "properties", "mailPrimaryAddress"])
    );
    assert!(
        errors[0]
            .1
            .starts_with("The mail address is already in use.")
    );

    // The RDN is unique.
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "Team-Sales", "displayName": "again", "oxContext": 1,
                                  "mailPrimaryAddress": "again@example.org"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    let errors = udm_errors(&body);
    assert_eq!(errors[0].0, json!(["body", "dn"]));
    assert!(errors[0].1.starts_with("Object exists: dn: "));

    // A user twice in one shared account.
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "Dup", "displayName": "Dup", "oxContext": 1,
                                  "mailPrimaryAddress": "dup@example.org",
                                  "users": [[alice_uoid, perm_uoid], [alice_uoid, "other"]]}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    let errors = udm_errors(&body);
    assert_eq!(errors[0].0, json!(["body", "properties", null]));
    assert!(
        errors[0]
            .1
            .contains("A user must not be repeated in the Shared Account")
    );

    // Unknown properties, wrong types, no properties, a position outside the base.
    let response = api
        .post(
            "oxmail/functional_account",
            json!({"properties": {"name": "n", "mailPrimaryAddress": "n@example.org", "colour": "red"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        udm_errors(&body)[0].0,
        json!(["body", "properties", "colour"])
    );
    let response = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "n", "displayName": "n", "oxContext": "one",
                                  "mailPrimaryAddress": "n@example.org"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = api.post("oxmail/shared_account", json!({})).await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(udm_errors(&body)[0].0, json!(["body", "properties"]));
    let response = api
        .post(
            "oxmail/shared_account_permission",
            json!({"position": "dc=elsewhere", "properties": {"name": "p", "displayName": "p"}}),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Not JSON.
    let response = api
        .req(Method::POST, &api.url("oxmail/shared_account/"))
        .header("Content-Type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn modify_rules_and_preconditions() {
    let api = Api::new().await;
    api.seed();
    let fa_dn = format!("cn=Team Sales,cn=functional_accounts,cn=open-xchange,{BASE}");
    let fa_uri = api.sim.object_uri("oxmail/functional_account", &fa_dn);
    let etag = |r: &Response| r.headers()["etag"].to_str().unwrap().to_string();

    let patch = |uri: &str, properties: Value| {
        api.req(Method::PATCH, uri)
            .json(&json!({"properties": properties}))
    };

    // May-not-change properties.
    for (name, value) in [
        ("name", json!("Renamed")),
        ("mailPrimaryAddress", json!("new@example.org")),
        ("univentionObjectIdentifier", json!("0000")),
    ] {
        let response = patch(&fa_uri, json!({name: value})).send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{name}"
        );
        let body: Value = response.json().await.unwrap();
        let errors = udm_errors(&body);
        assert_eq!(errors[0].0, json!(["body", name]));
        assert_eq!(
            errors[0].1,
            format!("The property {name} has an invalid value: Value may not change.")
        );
    }
    // The same value is no change.
    let same = patch(&fa_uri, json!({"name": "Team Sales"}))
        .send()
        .await
        .unwrap();
    assert_eq!(same.status(), StatusCode::NO_CONTENT);

    // If-Match.
    let current = api.get(&fa_uri).await;
    let tag = etag(&current);
    let stale = patch(&fa_uri, json!({"personal": "x"}))
        .header("If-Match", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::PRECONDITION_FAILED);
    let body: Value = stale.json().await.unwrap();
    assert_eq!(body["error"]["code"], 412);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not match entity tag")
    );
    let fresh = patch(&fa_uri, json!({"personal": "x"}))
        .header("If-Match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), StatusCode::NO_CONTENT);
    let new_tag = etag(&fresh);
    assert_ne!(new_tag, tag);
    assert_eq!(etag(&api.get(&fa_uri).await), new_tag);
    let object = api.sim.state().object(&fa_dn).unwrap();
    assert_eq!(object.property_str("personal").as_deref(), Some("x"));

    // PATCH of a missing object.
    let gone = patch(
        &api.sim
            .object_uri("oxmail/functional_account", &format!("cn=x,{BASE}")),
        json!({}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);

    // Shared accounts: oxContext may not change, the name may (the DN follows).
    let created = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "Box", "displayName": "Box", "oxContext": 1,
                                  "mailPrimaryAddress": "box@example.org"}}),
        )
        .await;
    let sa_uri = created.headers()["location"].to_str().unwrap().to_string();
    let ctx = patch(&sa_uri, json!({"oxContext": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(ctx.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let renamed = patch(&sa_uri, json!({"name": "Box2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(renamed.status(), StatusCode::NO_CONTENT);
    let new_uri = renamed.headers()["location"].to_str().unwrap().to_string();
    assert!(new_uri.contains("cn%3DBox2%2C"));
    assert_eq!(api.get(&sa_uri).await.status(), StatusCode::NOT_FOUND);

    // PUT: modify in place, create at an unknown DN, move with another position.
    let put = api
        .req(Method::PUT, &new_uri)
        .json(
            &json!({"position": format!("cn=shared_accounts,cn=open-xchange,{BASE}"),
                       "properties": {"displayName": "Box Two"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::NO_CONTENT);
    let no_position = api
        .req(Method::PUT, &new_uri)
        .json(&json!({"properties": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(no_position.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let perm_dn = format!("cn=p9,cn=shared_account_permissions,cn=open-xchange,{BASE}");
    let put_new = api
        .req(
            Method::PUT,
            &api.sim
                .object_uri("oxmail/shared_account_permission", &perm_dn),
        )
        .json(
            &json!({"position": format!("cn=shared_account_permissions,cn=open-xchange,{BASE}"),
                       "properties": {"name": "p9", "displayName": "P9"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(put_new.status(), StatusCode::CREATED);
    assert!(api.sim.state().object(&perm_dn).is_some());
    let moved = api
        .req(Method::PUT, &fa_uri)
        .json(&json!({"position": format!("cn=open-xchange,{BASE}"), "properties": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::CREATED);
    assert!(
        api.sim
            .state()
            .object(&format!("cn=Team Sales,cn=open-xchange,{BASE}"))
            .is_some()
    );
}

#[tokio::test]
async fn delete_rules() {
    let api = Api::new().await;
    api.seed();
    let state = api.sim.state();
    let fa_dn = format!("cn=Support,cn=functional_accounts,cn=open-xchange,{BASE}");
    let fa_uri = api.sim.object_uri("oxmail/functional_account", &fa_dn);

    let stale = api
        .req(Method::DELETE, &fa_uri)
        .header("If-Match", "\"stale\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::PRECONDITION_FAILED);
    assert!(state.object(&fa_dn).is_some());

    let deleted = api.req(Method::DELETE, &fa_uri).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert!(deleted.bytes().await.unwrap().is_empty());
    assert!(state.object(&fa_dn).is_none());
    let again = api.req(Method::DELETE, &fa_uri).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);

    // A permission a shared account links to cannot be deleted.
    let permission = state
        .find(
            "oxmail/shared_account_permission",
            "name",
            "opendesk_mail_author_calendar_author",
        )
        .unwrap();
    let perm_uoid = permission
        .property_str("univentionObjectIdentifier")
        .unwrap();
    let perm_uri = api
        .sim
        .object_uri("oxmail/shared_account_permission", &permission.dn);
    let sa = api
        .post(
            "oxmail/shared_account",
            json!({"properties": {"name": "Linked", "displayName": "Linked", "oxContext": 1,
                                  "mailPrimaryAddress": "linked@example.org",
                                  "users": [["some-user", perm_uoid]]}}),
        )
        .await;
    assert_eq!(sa.status(), StatusCode::CREATED);
    let sa_uri = sa.headers()["location"].to_str().unwrap().to_string();
    let refused = api.req(Method::DELETE, &perm_uri).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not allowed as long as any Shared Account references it")
    );
    assert!(state.object(&permission.dn).is_some());
    assert_eq!(
        api.req(Method::DELETE, &sa_uri)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        api.req(Method::DELETE, &perm_uri)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NO_CONTENT
    );

    // A body on DELETE is refused.
    let with_body = api
        .req(
            Method::DELETE,
            &api.sim
                .object_uri("users/user", &format!("uid=bob,cn=users,{BASE}")),
        )
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(with_body.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn faults_and_late_objects() {
    let api = Api::new().await;
    api.seed();
    let url = api.url("users/user/?filter=(username=alice)");

    api.sim.faults().add(
        FaultRule::prefix("/univention/udm/users/")
            .nth(1)
            .status_retry_after(503, 2),
    );
    let unavailable = api.get(&url).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(unavailable.headers()["retry-after"], "2");
    let body: Value = unavailable.json().await.unwrap();
    assert_eq!(body["error"]["code"], 503);
    assert_eq!(body["error"]["title"], "Service Unavailable");
    assert_eq!(api.get(&url).await.status(), StatusCode::OK);

    // A 503 without an explicit Retry-After carries the server's 15 seconds.
    api.sim.faults().clear();
    api.sim.faults().add(FaultRule::any().nth(1).status(503));
    assert_eq!(api.get(&url).await.headers()["retry-after"], "15");

    // A hanging answer: the client times out.
    api.sim.faults().clear();
    api.sim.faults().add(FaultRule::any().nth(1).hang());
    let started = Instant::now();
    let hung = api
        .req(Method::GET, &url)
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(hung.unwrap_err().is_timeout());
    assert!(started.elapsed() < Duration::from_secs(5));
    api.sim.faults().clear();

    // A permission that appears only later.
    api.sim
        .state()
        .add_delayed(
            "oxmail/shared_account_permission",
            json!({"name": "late", "displayName": "Late", "univentionObjectIdentifier": "late-uoid"}),
            Duration::from_millis(400),
        )
        .unwrap();
    let early = api
        .search(
            "oxmail/shared_account_permission",
            &[("filter", "(name=late)")],
        )
        .await;
    assert_eq!(early["results"], 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = api
        .search(
            "oxmail/shared_account_permission",
            &[("filter", "(name=late)")],
        )
        .await;
    assert_eq!(later["results"], 1);
}

#[tokio::test]
async fn seed_and_state_over_the_control_api() {
    let api = Api::new().await;
    let seed = json!({
        "objects": [
            {"module": "users/user", "properties": {"username": "carol", "lastname": "C",
                "mailPrimaryAddress": "carol@example.org", "oxContext": "3", "isOxUser": "OK"}},
            {"module": "oxmail/shared_account_permission", "after_seconds": 30,
             "properties": {"name": "later", "displayName": "Later"}}
        ],
        "logins": [{"username": "ops", "password": "ops-pw"}]
    });
    let seeded = api
        .client
        .post(format!("{}/_sim/seed", api.sim.base_url()))
        .json(&seed)
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), StatusCode::OK);
    let state: Value = api
        .client
        .get(format!("{}/_sim/state", api.sim.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["base_dn"], BASE);
    assert_eq!(
        state["objects"][0]["dn"],
        format!("uid=carol,cn=users,{BASE}")
    );
    assert_eq!(state["objects"][0]["properties"]["oxContext"], 3);
    assert_eq!(
        state["pending"][0]["module"],
        "oxmail/shared_account_permission"
    );
    let bad = api
        .client
        .post(format!("{}/_sim/seed", api.sim.base_url()))
        .json(&json!({"objects": [{"module": "no/such", "properties": {}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let ops = api
        .client
        .get(api.url("users/user/?filter=(uid=carol)"))
        .basic_auth("ops", Some("ops-pw"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap();
    let body: Value = ops.json().await.unwrap();
    assert_eq!(body["results"], 1);
}

/// The `udm-rest-sim` process: killed by its PID when dropped.
struct SimProcess {
    child: std::process::Child,
    dir: std::path::PathBuf,
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn the_binary_serves_its_seed_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = std::env::temp_dir().join(format!(
        "stagehand-udm-sim-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "file-secret\n").unwrap();
    let seed = json!({"objects": [{"module": "oxmail/functional_account",
        "properties": {"name": "Team", "mailPrimaryAddress": "team@example.org", "oxContext": 1}}]});
    std::fs::write(dir.join("seed.json"), seed.to_string()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_udm-rest-sim"))
        .args(["--listen", "127.0.0.1:0", "--admin-user", "cn=admin"])
        .arg("--admin-password-file")
        .arg(dir.join("pw"))
        .arg("--seed")
        .arg(dir.join("seed.json"))
        .args(["--base-dn", "dc=example,dc=org"])
        .env_remove("SIM_ADMIN_PASSWORD")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start udm-rest-sim: {e}"));
    let mut process = SimProcess { child, dir };
    let mut first = String::new();
    BufReader::new(process.child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();

    let client = Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let found: Value = client
        .get(format!(
            "{url}/univention/udm/oxmail/functional_account/?filter=(name=Team)"
        ))
        .basic_auth("cn=admin", Some("file-secret"))
        .header("Accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(found["results"], 1);
    assert_eq!(
        objects(&found)[0]["dn"],
        "cn=Team,cn=functional_accounts,cn=open-xchange,dc=example,dc=org"
    );

    let status = Command::new("kill")
        .args(["-TERM", &process.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = process.child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "udm-rest-sim ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
}
