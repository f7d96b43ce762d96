//! The Nubus Provisioning API simulator (`univention/provisioning-api`, `rest-api`): the
//! subscription endpoints under `/v1`, with HTTP Basic for the admin and for each subscriber.
//!
//! | request | who | answers |
//! | --- | --- | --- |
//! | `GET /v1/subscriptions` | admin | `200 [Subscription]` |
//! | `GET /v1/subscriptions/{name}` | the subscriber, admin (see [`ProvisioningConfig::admin_reads_single`]) | `200 Subscription`, `404 {"detail":"Subscription not found: '<name>'"}` |
//! | `DELETE /v1/subscriptions/{name}` | admin or the subscriber | `200 null`, then `404` as above |
//! | `POST /v1/subscriptions` | admin | `201 null` new, `200 null` identical, `409` different, `422` malformed |
//!
//! `Subscription` is `{"name", "realms_topics": [{"realm", "topic"}], "request_prefill",
//! "prefill_queue_status": "pending"|"running"|"failed"|"done"}`; passwords are never returned.
//! Authentication errors are `401` with `WWW-Authenticate: Basic` and
//! `{"detail":"Not authenticated"}` (no or a malformed `Authorization` header, as FastAPI's
//! `HTTPBasic`), `{"detail":"Incorrect username or password"}` (wrong credentials) or
//! `{"detail":"You do not have access to this data"}` (someone else's subscription).
//!
//! Seed JSON (`--seed FILE`, `POST /_sim/seed`):
//! `{"subscriptions": [{"name", "realms_topics": [{"realm", "topic"}], "request_prefill",
//! "password", "prefill_queue_status"?}]}`.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http::{
    Protocol, SimRequest, SimServer, basic_payload, json_response, percent_decode, text_response,
};

/// A running Provisioning API simulator.
pub type ProvisioningSim = SimServer<Provisioning>;

/// Starts a Provisioning API simulator on a free loopback port.
pub async fn start(config: ProvisioningConfig) -> std::io::Result<ProvisioningSim> {
    SimServer::start(Provisioning::new(config)).await
}

impl SimServer<Provisioning> {
    /// The API base, `http://127.0.0.1:PORT/v1`: what a client is configured with.
    pub fn api_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }
}

/// How the simulator authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisioningConfig {
    /// The admin user name (`admin` in openDesk).
    pub admin_user: String,
    /// The admin password.
    pub admin_password: String,
    /// Whether the admin may `GET /v1/subscriptions/{name}` (default `true`). The current real
    /// server lets only the subscriber itself read a single subscription and answers the admin
    /// `401 {"detail":"You do not have access to this data"}`; set `false` for that behaviour.
    pub admin_reads_single: bool,
}

impl ProvisioningConfig {
    /// Admin credentials, the admin allowed to read single subscriptions.
    pub fn new(admin_user: &str, admin_password: &str) -> Self {
        ProvisioningConfig {
            admin_user: admin_user.to_string(),
            admin_password: admin_password.to_string(),
            admin_reads_single: true,
        }
    }
}

/// The prefill state of a subscription's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillStatus {
    /// Requested, not started.
    Pending,
    /// Running.
    Running,
    /// Failed.
    Failed,
    /// Done (or none requested).
    Done,
}

/// One realm/topic pair a subscription receives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RealmTopic {
    /// The realm, such as `udm`.
    pub realm: String,
    /// The topic, such as `users/user`.
    pub topic: String,
}

/// A subscription as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// The subscriber's name (also its user name).
    pub name: String,
    /// What it receives.
    pub realms_topics: Vec<RealmTopic>,
    /// Whether it asked for a prefill.
    pub request_prefill: bool,
    /// The prefill state.
    pub prefill_queue_status: PrefillStatus,
}

#[derive(Debug, Clone)]
struct Stored {
    subscription: Subscription,
    password: String,
}

/// The Provisioning API simulator's state and behaviour; reach it through
/// [`SimServer::state`].
#[derive(Debug)]
pub struct Provisioning {
    config: Mutex<ProvisioningConfig>,
    subscriptions: Mutex<BTreeMap<String, Stored>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Provisioning {
    /// An empty simulator.
    pub fn new(config: ProvisioningConfig) -> Self {
        Provisioning {
            config: Mutex::new(config),
            subscriptions: Mutex::new(BTreeMap::new()),
        }
    }

    /// Registers a subscription as `POST /v1/subscriptions` would (prefill status `pending`
    /// when a prefill is requested, else `done`), replacing one of the same name.
    pub fn add_subscription(
        &self,
        name: &str,
        realms_topics: &[(&str, &str)],
        request_prefill: bool,
        password: &str,
    ) {
        let realms_topics = realms_topics
            .iter()
            .map(|(realm, topic)| RealmTopic {
                realm: realm.to_string(),
                topic: topic.to_string(),
            })
            .collect();
        self.insert(
            Subscription {
                name: name.to_string(),
                realms_topics,
                request_prefill,
                prefill_queue_status: initial_status(request_prefill),
            },
            password,
        );
    }

    fn insert(&self, subscription: Subscription, password: &str) {
        lock(&self.subscriptions).insert(
            subscription.name.clone(),
            Stored {
                subscription,
                password: password.to_string(),
            },
        );
    }

    /// One subscription.
    pub fn subscription(&self, name: &str) -> Option<Subscription> {
        lock(&self.subscriptions)
            .get(name)
            .map(|s| s.subscription.clone())
    }

    /// All subscriptions, by name.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        lock(&self.subscriptions)
            .values()
            .map(|s| s.subscription.clone())
            .collect()
    }

    /// The subscription names, sorted.
    pub fn names(&self) -> Vec<String> {
        lock(&self.subscriptions).keys().cloned().collect()
    }

    /// Sets a subscription's prefill status; answers whether it exists.
    pub fn set_prefill_status(&self, name: &str, status: PrefillStatus) -> bool {
        match lock(&self.subscriptions).get_mut(name) {
            Some(s) => {
                s.subscription.prefill_queue_status = status;
                true
            }
            None => false,
        }
    }

    /// Removes a subscription; answers whether it existed.
    pub fn remove_subscription(&self, name: &str) -> bool {
        lock(&self.subscriptions).remove(name).is_some()
    }

    /// Changes whether the admin may read a single subscription.
    pub fn set_admin_reads_single(&self, allowed: bool) {
        lock(&self.config).admin_reads_single = allowed;
    }

    fn config(&self) -> ProvisioningConfig {
        lock(&self.config).clone()
    }

    fn principal(&self, request: &SimRequest) -> Result<Principal, Denied> {
        let Some((user, password)) = basic_credentials(request) else {
            return Err(Denied("Not authenticated"));
        };
        let config = self.config();
        if user == config.admin_user && password == config.admin_password {
            return Ok(Principal::Admin);
        }
        Ok(Principal::Other { user, password })
    }

    fn require_admin(&self, request: &SimRequest) -> Result<(), Denied> {
        match self.principal(request)? {
            Principal::Admin => Ok(()),
            Principal::Other { .. } => Err(Denied("Incorrect username or password")),
        }
    }

    /// The subscriber check of the real `SubscriptionService.authenticate_user`.
    fn require_subscriber(&self, user: &str, password: &str, name: &str) -> Result<(), Denied> {
        if user != name {
            return Err(Denied("You do not have access to this data"));
        }
        match lock(&self.subscriptions).get(name) {
            Some(stored) if stored.password == password => Ok(()),
            _ => Err(Denied("Incorrect username or password")),
        }
    }

    fn list(&self, request: &SimRequest) -> Response {
        if let Err(Denied(detail)) = self.require_admin(request) {
            return unauthorized(detail);
        }
        json_response(
            StatusCode::OK,
            &serde_json::to_value(self.subscriptions()).unwrap_or_default(),
        )
    }

    fn get_one(&self, request: &SimRequest, name: &str) -> Response {
        match self.principal(request) {
            Err(Denied(detail)) => return unauthorized(detail),
            Ok(Principal::Admin) => {
                if !self.config().admin_reads_single {
                    return unauthorized("You do not have access to this data");
                }
            }
            Ok(Principal::Other { user, password }) => {
                if let Err(Denied(detail)) = self.require_subscriber(&user, &password, name) {
                    return unauthorized(detail);
                }
            }
        }
        match self.subscription(name) {
            Some(s) => json_response(StatusCode::OK, &serde_json::to_value(s).unwrap_or_default()),
            None => not_found(name),
        }
    }

    fn delete(&self, request: &SimRequest, name: &str) -> Response {
        match self.principal(request) {
            Err(Denied(detail)) => return unauthorized(detail),
            Ok(Principal::Admin) => {}
            Ok(Principal::Other { user, password }) => {
                if let Err(Denied(detail)) = self.require_subscriber(&user, &password, name) {
                    return unauthorized(detail);
                }
            }
        }
        if self.remove_subscription(name) {
            json_response(StatusCode::OK, &Value::Null)
        } else {
            not_found(name)
        }
    }

    fn create(&self, request: &SimRequest) -> Response {
        if let Err(Denied(detail)) = self.require_admin(request) {
            return unauthorized(detail);
        }
        let new = match validate_new_subscription(&request.body) {
            Ok(new) => new,
            Err(errors) => {
                return json_response(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &json!({ "detail": errors }),
                );
            }
        };
        let mut subscriptions = lock(&self.subscriptions);
        if let Some(existing) = subscriptions.get(&new.name) {
            let same = existing.subscription.request_prefill == new.request_prefill
                && topic_set(&existing.subscription.realms_topics) == topic_set(&new.realms_topics)
                && existing.password == new.password;
            return if same {
                json_response(StatusCode::OK, &Value::Null)
            } else {
                json_response(
                    StatusCode::CONFLICT,
                    &json!({ "detail": "Subscription with the given name already registered but with different parameters." }),
                )
            };
        }
        subscriptions.insert(
            new.name.clone(),
            Stored {
                subscription: Subscription {
                    name: new.name.clone(),
                    realms_topics: new.realms_topics,
                    request_prefill: new.request_prefill,
                    prefill_queue_status: initial_status(new.request_prefill),
                },
                password: new.password,
            },
        );
        json_response(StatusCode::CREATED, &Value::Null)
    }
}

/// An authentication failure: the `detail` of the 401.
struct Denied(&'static str);

enum Principal {
    Admin,
    Other { user: String, password: String },
}

fn initial_status(request_prefill: bool) -> PrefillStatus {
    if request_prefill {
        PrefillStatus::Pending
    } else {
        PrefillStatus::Done
    }
}

fn topic_set(topics: &[RealmTopic]) -> std::collections::BTreeSet<&RealmTopic> {
    topics.iter().collect()
}

fn unauthorized(detail: &str) -> Response {
    let mut r = json_response(StatusCode::UNAUTHORIZED, &json!({ "detail": detail }));
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
    r
}

fn not_found(name: &str) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({ "detail": format!("Subscription not found: '{name}'") }),
    )
}

/// The user and password of an `Authorization: Basic` header.
fn basic_credentials(request: &SimRequest) -> Option<(String, String)> {
    let value = request.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let decoded = String::from_utf8(basic_payload(value)?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

struct NewSubscription {
    name: String,
    realms_topics: Vec<RealmTopic>,
    request_prefill: bool,
    password: String,
}

/// Validates a `POST /v1/subscriptions` body the way FastAPI/pydantic does, answering the
/// `detail` list of a 422 on failure.
fn validate_new_subscription(body: &[u8]) -> Result<NewSubscription, Vec<Value>> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Err(vec![json!({
                "type": "json_invalid",
                "loc": ["body", e.column()],
                "msg": "JSON decode error",
                "input": {},
                "ctx": { "error": e.to_string() },
            })]);
        }
    };
    let Some(object) = value.as_object() else {
        return Err(vec![json!({
            "type": "model_attributes_type",
            "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": value,
        })]);
    };
    let mut errors = Vec::new();
    let string_field = |field: &str, errors: &mut Vec<Value>| -> String {
        match object.get(field) {
            None => {
                errors.push(missing(field, &value));
                String::new()
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                errors.push(json!({
                    "type": "string_type",
                    "loc": ["body", field],
                    "msg": "Input should be a valid string",
                    "input": other,
                }));
                String::new()
            }
        }
    };
    let name = string_field("name", &mut errors);
    let password = string_field("password", &mut errors);
    let request_prefill = match object.get("request_prefill") {
        None => {
            errors.push(missing("request_prefill", &value));
            false
        }
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            errors.push(json!({
                "type": "bool_type",
                "loc": ["body", "request_prefill"],
                "msg": "Input should be a valid boolean",
                "input": other,
            }));
            false
        }
    };
    let mut realms_topics = Vec::new();
    match object.get("realms_topics") {
        None => errors.push(missing("realms_topics", &value)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let realm = item.get("realm").and_then(Value::as_str);
                let topic = item.get("topic").and_then(Value::as_str);
                match (realm, topic) {
                    (Some(realm), Some(topic)) => realms_topics.push(RealmTopic {
                        realm: realm.to_string(),
                        topic: topic.to_string(),
                    }),
                    _ => errors.push(json!({
                        "type": "model_type",
                        "loc": ["body", "realms_topics", i],
                        "msg": "Input should be an object with string fields realm and topic",
                        "input": item,
                    })),
                }
            }
        }
        Some(other) => errors.push(json!({
            "type": "list_type",
            "loc": ["body", "realms_topics"],
            "msg": "Input should be a valid list",
            "input": other,
        })),
    }
    if errors.is_empty() {
        Ok(NewSubscription {
            name,
            realms_topics,
            request_prefill,
            password,
        })
    } else {
        Err(errors)
    }
}

fn missing(field: &str, input: &Value) -> Value {
    json!({ "type": "missing", "loc": ["body", field], "msg": "Field required", "input": input })
}

impl Protocol for Provisioning {
    fn handle(&self, request: &SimRequest) -> Response {
        const BASE: &str = "/v1/subscriptions";
        let path = request.path.as_str();
        if path == BASE {
            return match request.method {
                Method::GET => self.list(request),
                Method::POST => self.create(request),
                _ => method_not_allowed(),
            };
        }
        if let Some(rest) = path.strip_prefix("/v1/subscriptions/")
            && !rest.is_empty()
            && !rest.contains('/')
        {
            let name = percent_decode(rest);
            return match request.method {
                Method::GET => self.get_one(request, &name),
                Method::DELETE => self.delete(request, &name),
                _ => method_not_allowed(),
            };
        }
        json_response(StatusCode::NOT_FOUND, &json!({ "detail": "Not Found" }))
    }

    fn fault_response(&self, status: StatusCode, _request: &SimRequest) -> Response {
        match status {
            StatusCode::UNAUTHORIZED => unauthorized("Incorrect username or password"),
            // Starlette's own answer to an unhandled exception.
            StatusCode::INTERNAL_SERVER_ERROR => text_response(status, "Internal Server Error"),
            _ => json_response(
                status,
                &json!({ "detail": status.canonical_reason().unwrap_or("Error") }),
            ),
        }
    }

    fn state_json(&self) -> Value {
        json!({ "subscriptions": self.subscriptions() })
    }

    fn seed_json(&self, seed: &Value) -> Result<(), String> {
        #[derive(Deserialize)]
        struct Seed {
            #[serde(default)]
            subscriptions: Vec<SeedSubscription>,
        }
        #[derive(Deserialize)]
        struct SeedSubscription {
            name: String,
            #[serde(default)]
            realms_topics: Vec<RealmTopic>,
            #[serde(default)]
            request_prefill: bool,
            password: String,
            #[serde(default)]
            prefill_queue_status: Option<PrefillStatus>,
        }
        let seed: Seed = serde_json::from_value(seed.clone())
            .map_err(|e| format!("not a Provisioning seed: {e}"))?;
        for s in seed.subscriptions {
            self.insert(
                Subscription {
                    prefill_queue_status: s
                        .prefill_queue_status
                        .unwrap_or(initial_status(s.request_prefill)),
                    name: s.name,
                    realms_topics: s.realms_topics,
                    request_prefill: s.request_prefill,
                },
                &s.password,
            );
        }
        Ok(())
    }
}

fn method_not_allowed() -> Response {
    json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &json!({ "detail": "Method Not Allowed" }),
    )
}
