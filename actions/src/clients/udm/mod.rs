//! A client of the UDM REST API (`/univention/udm/`), the IAM's object API: search, read,
//! create, modify and delete objects of a module such as `oxmail/functional_account`.
//!
//! It copes with what the real server does (`external-apis.md`, section 2 and the addendum):
//! it always sends `Accept: application/json` (without it the server answers HTML), reads a
//! search without results (no `_embedded["udm:object"]` key at all), takes property values as
//! they come (`oxContext` is a number), sends a search that always has a query string (without
//! one the server searches nothing), retries `503` answers after their `Retry-After` a bounded
//! number of times, and turns the server's error envelope into a [`UdmError`] that names the
//! request and quotes the server's messages and their locations, never the credential.
//!
//! Objects are addressed by URLs the client builds from its own base URL, the module and the
//! DN ([`UdmClient::object_url`]), not by the `uri` the server reports: that one is built from
//! the server's view of the host and path prefix, which behind a proxy need not be the base
//! the client was configured with.

pub mod bulk;
pub mod filter;

use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde_json::{Map, Value, json};

use crate::action::{ActionError, SecretValue};
use crate::clients::http::{
    AnswerLimit, FullResponse, HttpApi, HttpTls, MIB, QUOTED_BODY_CHARS, api_url, content_type,
    quoted_body, unquotable,
};

pub use filter::{Filter, escape_value};

/// What the API is called in messages.
const API_NAME: &str = "the UDM REST API";

/// How often a `503` is retried by default (as the official Python client).
pub const DEFAULT_MAX_RETRIES: u32 = 5;

/// The longest wait between two tries by default, whatever `Retry-After` says.
pub const DEFAULT_MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// The UDM module of the Functional Accounts.
pub const FUNCTIONAL_ACCOUNT: &str = "oxmail/functional_account";
/// The UDM module of the Shared Accounts.
pub const SHARED_ACCOUNT: &str = "oxmail/shared_account";
/// The UDM module of the Shared Account permissions.
pub const PERMISSION: &str = "oxmail/shared_account_permission";
/// The UDM module of the users.
pub const USER: &str = "users/user";
/// The UDM module of the groups.
pub const GROUP: &str = "groups/group";
/// How many values one `(|(...)(...))` search filter carries.
pub const SEARCH_CHUNK: usize = 100;

/// The most bytes read of one answer unless the action's `udm.maxResponseBytes` says
/// otherwise. The largest answers are the searches: every functional account with all its
/// properties, every shared account, [`SEARCH_CHUNK`] users a search; at a few KiB an object,
/// 16 MiB holds thousands of objects, and parsed it stays within the operator's memory limit.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 16 * MIB;

/// The config key that raises the limit, for the message of an answer that is larger.
pub const MAX_RESPONSE_BYTES_KEY: &str = "udm.maxResponseBytes";

/// One problem the server located in a request (an entry of `_embedded["udm:error"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdmErrorDetail {
    /// Where: such as `["body", "properties", "mailPrimaryAddress"]` (a JSON `null` in the
    /// server's location is `"null"` here).
    pub location: Vec<String>,
    /// The server's message.
    pub message: String,
}

/// What the server said about a failed request: the envelope's message and its located
/// details, or the start of the body when it is not the envelope (a proxy's page).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerMessage {
    /// `error.message` (trimmed), or the start of a body that is not the envelope.
    pub message: String,
    /// The located problems.
    pub details: Vec<UdmErrorDetail>,
}

impl std::fmt::Display for ServerMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.details.is_empty() {
            let message = if self.message.is_empty() {
                "(no message)"
            } else {
                self.message.as_str()
            };
            return f.write_str(message);
        }
        let parts: Vec<String> = self
            .details
            .iter()
            .map(|d| format!("{}: {}", d.location.join("."), d.message.trim()))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl ServerMessage {
    /// The server's message in an answer: nothing of the body unless [`quoted_body`] allows it
    /// (an error status, a textual type).
    fn of(response: &FullResponse) -> Self {
        let content_type = content_type(&response.headers);
        if unquotable(response.status, content_type.as_deref()).is_some() {
            return ServerMessage {
                message: quoted_body(response.status, content_type.as_deref(), &response.body),
                details: Vec::new(),
            };
        }
        Self::parse(&response.body)
    }

    fn parse(body: &str) -> Self {
        let quote = |text: &str| crate::text::one_line(text, QUOTED_BODY_CHARS);
        let Ok(value) = serde_json::from_str::<Value>(body) else {
            return ServerMessage {
                message: quote(body),
                details: Vec::new(),
            };
        };
        let message = value["error"]["message"]
            .as_str()
            .map(|m| m.trim().to_string())
            .unwrap_or_else(|| quote(body));
        let details = value["_embedded"]["udm:error"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| UdmErrorDetail {
                        location: item["location"]
                            .as_array()
                            .map(|l| {
                                l.iter()
                                    .map(|part| match part {
                                        Value::String(s) => s.clone(),
                                        other => other.to_string(),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        message: match &item["message"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        ServerMessage { message, details }
    }
}

/// Why a UDM REST call failed. Every message names the request (method and URL, never the
/// credential) and quotes the server.
#[derive(Debug, thiserror::Error)]
pub enum UdmError {
    /// The configured or given URL cannot be used.
    #[error("the UDM REST API URL {url:?} cannot be used: {reason}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// No answer: connection refused, timeout, TLS, a dropped connection.
    #[error("{0}")]
    Transport(String),
    /// The client cannot be set up: its TLS (`udm.caBundle` missing or unreadable).
    #[error("{0}")]
    Setup(ActionError),
    /// The answer was larger than the client reads ([`UdmClient::with_max_response_bytes`]).
    #[error("{0}")]
    TooLarge(String),
    /// `401`: the user or its password is wrong.
    #[error(
        "the UDM REST API at {base} refused the credentials of user {user:?} (401 Unauthorized) while {what}: check the user name and its password"
    )]
    Unauthorized {
        /// The API base.
        base: String,
        /// The user.
        user: String,
        /// The request.
        what: String,
    },
    /// `403`: the user may not use the API.
    #[error(
        "the UDM REST API at {base} does not let user {user:?} use it (403 Forbidden) while {what}: {server}; use cn=admin or a user in a group of the UCR variables directory/manager/rest/authorized-groups/*"
    )]
    Forbidden {
        /// The API base.
        base: String,
        /// The user.
        user: String,
        /// The request.
        what: String,
        /// The server's message.
        server: ServerMessage,
    },
    /// `404`: the object (or the module) does not exist.
    #[error("the UDM REST API answered 404 Not Found while {what}: {server}")]
    NotFound {
        /// The request.
        what: String,
        /// The server's message.
        server: ServerMessage,
    },
    /// `412`: the object changed since its entity tag was read.
    #[error(
        "the object changed since it was read (412 Precondition Failed) while {what}: {server}; read it again and retry"
    )]
    PreconditionFailed {
        /// The request.
        what: String,
        /// The server's message.
        server: ServerMessage,
    },
    /// `400`/`422`: the server refused the request's content (a missing or invalid
    /// property, an address in use, an existing object, a permission still referenced).
    #[error("the UDM REST API refused {what} ({status}): {server}")]
    Rejected {
        /// The request.
        what: String,
        /// The status.
        status: u16,
        /// The server's message and located problems.
        server: ServerMessage,
    },
    /// `503` on every try.
    #[error(
        "the UDM REST API was unavailable (503) on all {attempts} tries while {what}: {server}; its LDAP server may be down"
    )]
    Unavailable {
        /// The request.
        what: String,
        /// How many tries were made.
        attempts: u32,
        /// The server's message.
        server: ServerMessage,
    },
    /// Any other status.
    #[error("the UDM REST API answered {status} while {what}: {server}")]
    Unexpected {
        /// The request.
        what: String,
        /// The status.
        status: u16,
        /// The server's message.
        server: ServerMessage,
    },
    /// A success answer that is not what the API answers (not JSON, fields missing).
    #[error("the UDM REST API answered {what} with something that is not {expected}: {detail}")]
    Malformed {
        /// The request.
        what: String,
        /// What was expected.
        expected: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl UdmError {
    /// The HTTP status of the answer, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            UdmError::Unauthorized { .. } => Some(401),
            UdmError::Forbidden { .. } => Some(403),
            UdmError::NotFound { .. } => Some(404),
            UdmError::PreconditionFailed { .. } => Some(412),
            UdmError::Rejected { status, .. } | UdmError::Unexpected { status, .. } => {
                Some(*status)
            }
            UdmError::Unavailable { .. } => Some(503),
            UdmError::InvalidUrl { .. }
            | UdmError::Setup(_)
            | UdmError::Transport(_)
            | UdmError::TooLarge(_)
            | UdmError::Malformed { .. } => None,
        }
    }

    /// The server's located problems (empty when it gave none).
    pub fn details(&self) -> &[UdmErrorDetail] {
        match self {
            UdmError::Forbidden { server, .. }
            | UdmError::NotFound { server, .. }
            | UdmError::PreconditionFailed { server, .. }
            | UdmError::Rejected { server, .. }
            | UdmError::Unavailable { server, .. }
            | UdmError::Unexpected { server, .. } => &server.details,
            _ => &[],
        }
    }

    /// Whether the server located a problem at a location ending with `suffix`, such as
    /// `["properties", "mailPrimaryAddress"]` (the address is in use) or `["dn"]` (the object
    /// exists).
    pub fn is_located_at(&self, suffix: &[&str]) -> bool {
        self.details()
            .iter()
            .any(|d| d.location.len() >= suffix.len() && d.location.ends_with_strs(suffix))
    }
}

trait EndsWithStrs {
    fn ends_with_strs(&self, suffix: &[&str]) -> bool;
}

impl EndsWithStrs for Vec<String> {
    fn ends_with_strs(&self, suffix: &[&str]) -> bool {
        self[self.len() - suffix.len()..]
            .iter()
            .zip(suffix)
            .all(|(a, b)| a == b)
    }
}

impl From<UdmError> for ActionError {
    /// By what happened: no answer or `503` on every try is [`ActionError::Unavailable`],
    /// `401`/`403` and a refused content (`400`/`422`) [`ActionError::Refused`], `404`
    /// [`ActionError::NotFound`], `412` [`ActionError::Conflict`], an unreadable success
    /// answer [`ActionError::InvalidAnswer`]; the message is the UDM error's.
    fn from(e: UdmError) -> Self {
        let message = e.to_string();
        match e {
            UdmError::Transport(_) | UdmError::Unavailable { .. } => {
                ActionError::Unavailable(message)
            }
            UdmError::Unauthorized { .. }
            | UdmError::Forbidden { .. }
            | UdmError::Rejected { .. } => ActionError::Refused(message),
            UdmError::NotFound { .. } => ActionError::NotFound(message),
            UdmError::PreconditionFailed { .. } => ActionError::Conflict(message),
            UdmError::Malformed { .. } | UdmError::TooLarge(_) => {
                ActionError::InvalidAnswer(message)
            }
            UdmError::Unexpected { status, .. } => ActionError::for_status(status, message),
            UdmError::InvalidUrl { .. } => ActionError::Failed(message),
            UdmError::Setup(e) => e,
        }
    }
}

/// An object as the API returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct UdmObject {
    /// The DN.
    pub dn: String,
    /// The module, such as `users/user`.
    pub object_type: String,
    /// The identifying value (`id`), such as the user name.
    pub id: Option<String>,
    /// The parent container.
    pub position: Option<String>,
    /// The entryUUID.
    pub uuid: Option<String>,
    /// The properties as the server sent them (numbers stay numbers).
    pub properties: Map<String, Value>,
    /// The URL the client addresses the object at (its base, the module, the DN).
    pub uri: Url,
    /// The `uri` the server reported, if any.
    pub server_uri: Option<String>,
    /// The entity tag (only from [`UdmClient::get`]; a search gives none).
    pub etag: Option<String>,
}

impl UdmObject {
    /// A property's raw value.
    pub fn property(&self, name: &str) -> Option<&Value> {
        self.properties.get(name)
    }

    /// A scalar property as text (numbers and booleans written out); `None` when absent,
    /// null, empty or not a scalar.
    pub fn property_str(&self, name: &str) -> Option<String> {
        match self.properties.get(name)? {
            Value::String(s) if s.is_empty() => None,
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    /// An integer property given as a number or a numeric string (`oxContext`).
    pub fn property_i64(&self, name: &str) -> Option<i64> {
        match self.properties.get(name)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A multivalue property's values; a single scalar is one value, null or absent none.
    pub fn property_list(&self, name: &str) -> Vec<Value> {
        match self.properties.get(name) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(other) => vec![other.clone()],
        }
    }

    /// A multivalue property's scalar values as text (empty strings left out).
    pub fn property_strings(&self, name: &str) -> Vec<String> {
        self.property_list(name)
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) if !s.is_empty() => Some(s),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect()
    }

    /// Whether a flag such as `isOxUser` is on: `"OK"`, `true`, `"1"`, `"TRUE"` (ox-connector
    /// tests `value in {"OK", True}`); `"Not"`, false, absent are off.
    pub fn flag(&self, name: &str) -> bool {
        match self.properties.get(name) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => {
                matches!(s.to_ascii_lowercase().as_str(), "ok" | "1" | "true" | "yes")
            }
            Some(Value::Number(n)) => n.as_i64() == Some(1),
            _ => false,
        }
    }

    /// The `univentionObjectIdentifier`, if set.
    pub fn object_identifier(&self) -> Option<String> {
        self.property_str("univentionObjectIdentifier")
    }
}

/// The LDAP search scope below `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// The whole subtree (the server's default).
    #[default]
    Sub,
    /// The direct children.
    One,
    /// The position itself.
    Base,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Sub => "sub",
            Scope::One => "one",
            Scope::Base => "base",
        }
    }
}

/// A search: filter, base, scope and the properties to return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    /// The filter; `None` searches every object of the module.
    pub filter: Option<Filter>,
    /// The search base; `None` is the LDAP base.
    pub position: Option<String>,
    /// The scope below the base.
    pub scope: Scope,
    /// The properties to return; empty returns all.
    pub properties: Vec<String>,
}

/// What a create answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedObject {
    /// The new object's DN.
    pub dn: String,
    /// Its entryUUID (the server reads it back from LDAP; `None` if it did not say).
    pub uuid: Option<String>,
    /// The URL the client addresses it at.
    pub uri: Url,
    /// The `Location` the server answered, if any.
    pub location: Option<String>,
    /// The entity tag, if any.
    pub etag: Option<String>,
}

/// A UDM REST API client: HTTP Basic, a timeout per request, `Accept: application/json`,
/// bounded retries of `503`.
#[derive(Debug, Clone)]
pub struct UdmClient {
    api: HttpApi,
    max_retries: u32,
    max_retry_delay: Duration,
}

impl UdmClient {
    /// A client of the API at `base_url` (such as
    /// `http://ums-udm-rest-api:9979/univention/udm/`), as `username` with `password`, each
    /// request limited to `timeout`, the server's certificate checked as `tls` says. A `503` is
    /// retried [`DEFAULT_MAX_RETRIES`] times, waiting what `Retry-After` says (at most
    /// [`DEFAULT_MAX_RETRY_DELAY`], 1 s when absent).
    pub fn new(
        base_url: &str,
        username: &str,
        password: SecretValue,
        timeout: Duration,
        tls: &HttpTls,
    ) -> Result<Self, UdmError> {
        let normalized = Self::check_url(base_url)?;
        let api = HttpApi::new(
            API_NAME,
            &normalized,
            username,
            password,
            timeout,
            AnswerLimit::configured(None, DEFAULT_MAX_RESPONSE_BYTES, MAX_RESPONSE_BYTES_KEY),
            tls,
        )
        // The URL is checked above: what is left is the client's set-up.
        .map_err(UdmError::Setup)?;
        Ok(UdmClient {
            api,
            max_retries: DEFAULT_MAX_RETRIES,
            max_retry_delay: DEFAULT_MAX_RETRY_DELAY,
        })
    }

    /// The base URL a client of `base_url` uses (with a trailing slash: without it, the last
    /// segment would be lost in joins), or why it cannot be used. Validating a config calls it
    /// without building a client.
    pub fn check_url(base_url: &str) -> Result<String, UdmError> {
        let normalized = if base_url.ends_with('/') {
            base_url.to_string()
        } else {
            format!("{base_url}/")
        };
        api_url(API_NAME, &normalized).map_err(|e| UdmError::InvalidUrl {
            url: base_url.to_string(),
            reason: e.to_string(),
        })?;
        Ok(normalized)
    }

    /// Reads at most `bytes` of one answer ([`DEFAULT_MAX_RESPONSE_BYTES`] unless changed).
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.api = self.api.with_limit(AnswerLimit::configured(
            Some(bytes),
            DEFAULT_MAX_RESPONSE_BYTES,
            MAX_RESPONSE_BYTES_KEY,
        ));
        self
    }

    /// Changes how often a `503` is retried and the longest wait between tries.
    pub fn with_retries(mut self, max_retries: u32, max_retry_delay: Duration) -> Self {
        self.max_retries = max_retries;
        self.max_retry_delay = max_retry_delay;
        self
    }

    /// The API base URL.
    pub fn base_url(&self) -> &Url {
        self.api.base()
    }

    /// The collection URL of a module: `<base>users/user/`.
    pub fn module_url(&self, module: &str) -> Url {
        let mut segments: Vec<&str> = module.split('/').collect();
        segments.push("");
        self.api.url(&segments)
    }

    /// The URL of the object `dn` of `module`: `<base>users/user/<percent-encoded DN>`, the
    /// DN encoded as the server's own `quote_dn` does (`uid%3Dalice%2Ccn%3Dusers%2C…`) except
    /// that `/` is encoded too.
    pub fn object_url(&self, module: &str, dn: &str) -> Url {
        let mut url = self.module_url(module);
        let path = format!("{}{}", url.path(), quote_dn(dn));
        url.set_path(&path);
        url
    }

    /// Proves the URL and the credential: reads the API's root (the module list).
    pub async fn check_access(&self) -> Result<(), UdmError> {
        let url = self.api.url(&[""]);
        let what = format!("checking access (GET {url})");
        let response = self.call(Method::GET, url, &[], None, &what).await?;
        self.read_access(&what, &response)
    }

    /// The answer to [`UdmClient::check_access`]'s request `what`.
    pub(crate) fn read_access(&self, what: &str, response: &FullResponse) -> Result<(), UdmError> {
        match response.status {
            StatusCode::OK => {
                serde_json::from_str::<Value>(&response.body).map_err(|e| UdmError::Malformed {
                    what: what.to_string(),
                    expected: "JSON",
                    detail: format!("{e}; the answer: {}", start(response)),
                })?;
                Ok(())
            }
            _ => Err(self.failure(what, response)),
        }
    }

    /// Searches `module` with `filter`, returning `properties` (all when empty).
    pub async fn search(
        &self,
        module: &str,
        filter: &Filter,
        properties: &[&str],
    ) -> Result<Vec<UdmObject>, UdmError> {
        self.search_with(
            module,
            &Search {
                filter: Some(filter.clone()),
                properties: properties.iter().map(|p| p.to_string()).collect(),
                ..Search::default()
            },
        )
        .await
    }

    /// Searches `module` as `search` says.
    pub async fn search_with(
        &self,
        module: &str,
        search: &Search,
    ) -> Result<Vec<UdmObject>, UdmError> {
        let mut url = self.module_url(module);
        {
            let mut query = url.query_pairs_mut();
            // Always a query string: without one the server searches nothing.
            let filter = search.filter.clone().unwrap_or_else(Filter::all);
            query.append_pair("filter", filter.as_str());
            if let Some(position) = &search.position {
                query.append_pair("position", position);
            }
            if search.scope != Scope::Sub {
                query.append_pair("scope", search.scope.as_str());
            }
            for property in &search.properties {
                query.append_pair("properties", property);
            }
        }
        let what = format!("searching {module} (GET {url})");
        let response = self.call(Method::GET, url, &[], None, &what).await?;
        self.read_search(module, &what, &response)
    }

    /// The answer to a search of `module` (the request `what`).
    pub(crate) fn read_search(
        &self,
        module: &str,
        what: &str,
        response: &FullResponse,
    ) -> Result<Vec<UdmObject>, UdmError> {
        if response.status != StatusCode::OK {
            return Err(self.failure(what, response));
        }
        let value: Value =
            serde_json::from_str(&response.body).map_err(|e| UdmError::Malformed {
                what: what.to_string(),
                expected: "a JSON search result",
                detail: format!("{e}; the answer: {}", start(response)),
            })?;
        // No `_embedded["udm:object"]` at all when nothing matched.
        let Some(entries) = value.get("_embedded").and_then(|e| e.get("udm:object")) else {
            return Ok(Vec::new());
        };
        let entries = entries.as_array().ok_or_else(|| UdmError::Malformed {
            what: what.to_string(),
            expected: "a list of objects in _embedded[\"udm:object\"]",
            detail: format!(
                "found {} instead (a success's body is not quoted)",
                json_kind(entries)
            ),
        })?;
        entries
            .iter()
            .map(|entry| self.object_from(entry, module, None, what))
            .collect()
    }

    /// Reads one object by its URL; `None` when it does not exist (404).
    pub async fn get(&self, uri: &str) -> Result<Option<UdmObject>, UdmError> {
        let url = self.checked_url(uri)?;
        let what = format!("reading GET {url}");
        let response = self.call(Method::GET, url, &[], None, &what).await?;
        self.read_object(&what, &response)
    }

    /// The answer to a read of one object (the request `what`).
    pub(crate) fn read_object(
        &self,
        what: &str,
        response: &FullResponse,
    ) -> Result<Option<UdmObject>, UdmError> {
        match response.status {
            StatusCode::OK => {
                let value: Value =
                    serde_json::from_str(&response.body).map_err(|e| UdmError::Malformed {
                        what: what.to_string(),
                        expected: "a JSON object",
                        detail: format!("{e}; the answer: {}", start(response)),
                    })?;
                let etag = header(response, "etag");
                self.object_from(&value, "", etag, what).map(Some)
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.failure(what, response)),
        }
    }

    /// Reads the object `dn` of `module`; `None` when it does not exist.
    pub async fn get_dn(&self, module: &str, dn: &str) -> Result<Option<UdmObject>, UdmError> {
        self.get(self.object_url(module, dn).as_str()).await
    }

    /// Creates an object of `module` below `position` (the module's default container when
    /// `None`) with `properties`.
    pub async fn create(
        &self,
        module: &str,
        position: Option<&str>,
        properties: &Map<String, Value>,
    ) -> Result<CreatedObject, UdmError> {
        let url = self.module_url(module);
        let mut body = json!({ "properties": properties });
        if let Some(position) = position {
            body["position"] = json!(position);
        }
        let what = format!("creating a {module} object (POST {url})");
        let response = self
            .call(Method::POST, url, &[], Some(&body), &what)
            .await?;
        self.read_created(module, &what, &response)
    }

    /// The answer to a create of a `module` object (the request `what`).
    pub(crate) fn read_created(
        &self,
        module: &str,
        what: &str,
        response: &FullResponse,
    ) -> Result<CreatedObject, UdmError> {
        if response.status != StatusCode::CREATED {
            return Err(self.failure(what, response));
        }
        let value: Value =
            serde_json::from_str(&response.body).map_err(|e| UdmError::Malformed {
                what: what.to_string(),
                expected: "JSON with the new object's dn",
                detail: format!("{e}; the answer: {}", start(response)),
            })?;
        let dn = value["dn"]
            .as_str()
            .ok_or_else(|| UdmError::Malformed {
                what: what.to_string(),
                expected: "JSON with the new object's dn",
                detail: start(response),
            })?
            .to_string();
        Ok(CreatedObject {
            uri: self.object_url(module, &dn),
            uuid: value["uuid"].as_str().map(str::to_string),
            location: header(response, "location"),
            etag: header(response, "etag"),
            dn,
        })
    }

    /// Changes `properties` of the object at `uri` (PATCH; the others stay), only if it still
    /// has the entity tag `etag` when one is given. Answers the new entity tag, if the server
    /// sent one.
    pub async fn modify(
        &self,
        uri: &str,
        properties: &Map<String, Value>,
        etag: Option<&str>,
    ) -> Result<Option<String>, UdmError> {
        let url = self.checked_url(uri)?;
        let what = format!("modifying PATCH {url}");
        let headers: Vec<(&str, &str)> = etag.map(|t| ("If-Match", t)).into_iter().collect();
        let body = json!({ "properties": properties });
        let response = self
            .call(Method::PATCH, url, &headers, Some(&body), &what)
            .await?;
        self.read_modified(&what, &response)
    }

    /// The answer to a modify (the request `what`): the new entity tag, if any.
    pub(crate) fn read_modified(
        &self,
        what: &str,
        response: &FullResponse,
    ) -> Result<Option<String>, UdmError> {
        match response.status {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(header(response, "etag")),
            _ => Err(self.failure(what, response)),
        }
    }

    /// Deletes the object at `uri`, only if it still has the entity tag `etag` when one is
    /// given. Answers `true` when it was deleted, `false` when it did not exist (404), so a
    /// repeated delete is not an error.
    pub async fn delete(&self, uri: &str, etag: Option<&str>) -> Result<bool, UdmError> {
        let url = self.checked_url(uri)?;
        let what = format!("deleting DELETE {url}");
        let headers: Vec<(&str, &str)> = etag.map(|t| ("If-Match", t)).into_iter().collect();
        let response = self
            .call(Method::DELETE, url, &headers, None, &what)
            .await?;
        self.read_deleted(&what, &response)
    }

    /// The answer to a delete (the request `what`): whether the object was there.
    pub(crate) fn read_deleted(
        &self,
        what: &str,
        response: &FullResponse,
    ) -> Result<bool, UdmError> {
        match response.status {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(self.failure(what, response)),
        }
    }

    /// Parses `uri` and makes sure it is on the API's host, so the credential goes nowhere
    /// else.
    fn checked_url(&self, uri: &str) -> Result<Url, UdmError> {
        let url = Url::parse(uri).map_err(|e| UdmError::InvalidUrl {
            url: uri.to_string(),
            reason: e.to_string(),
        })?;
        let base = self.api.base();
        if url.origin() != base.origin() {
            return Err(UdmError::InvalidUrl {
                url: uri.to_string(),
                reason: format!(
                    "it is not on the UDM REST API's host {}; the credential is only sent there",
                    base.origin().ascii_serialization()
                ),
            });
        }
        Ok(url)
    }

    /// One request, retried while it answers `503` (at most `max_retries` more times).
    async fn call(
        &self,
        method: Method,
        url: Url,
        headers: &[(&str, &str)],
        body: Option<&Value>,
        what: &str,
    ) -> Result<FullResponse, UdmError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let response = self
                .api
                .send_with_headers(method.clone(), url.clone(), headers, body)
                .await
                .map_err(|e| match e {
                    ActionError::InvalidAnswer(too_large) => UdmError::TooLarge(too_large),
                    other => UdmError::Transport(other.to_string()),
                })?;
            if response.status != StatusCode::SERVICE_UNAVAILABLE {
                return Ok(response);
            }
            let wait = self.retry_wait(what, attempts, &response)?;
            tracing::warn!(
                request = what,
                attempt = attempts,
                wait_ms = wait.as_millis() as u64,
                "the UDM REST API answered 503 Service Unavailable; retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// How long to wait before trying again after the `attempts`-th answer `503` to the
    /// request `what`; the error once the retries are used up.
    pub(crate) fn retry_wait(
        &self,
        what: &str,
        attempts: u32,
        response: &FullResponse,
    ) -> Result<Duration, UdmError> {
        if attempts > self.max_retries {
            return Err(UdmError::Unavailable {
                what: what.to_string(),
                attempts,
                server: ServerMessage::of(response),
            });
        }
        Ok(retry_after(response)
            .unwrap_or(Duration::from_secs(1))
            .min(self.max_retry_delay))
    }

    /// The error for an answer the caller did not expect.
    fn failure(&self, what: &str, response: &FullResponse) -> UdmError {
        let what = what.to_string();
        let server = ServerMessage::of(response);
        let base = self.api.base().to_string();
        let user = self.api.username().to_string();
        match response.status {
            StatusCode::UNAUTHORIZED => UdmError::Unauthorized { base, user, what },
            StatusCode::FORBIDDEN => UdmError::Forbidden {
                base,
                user,
                what,
                server,
            },
            StatusCode::NOT_FOUND => UdmError::NotFound { what, server },
            StatusCode::PRECONDITION_FAILED => UdmError::PreconditionFailed { what, server },
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => UdmError::Rejected {
                what,
                status: response.status.as_u16(),
                server,
            },
            status => UdmError::Unexpected {
                what,
                status: status.as_u16(),
                server,
            },
        }
    }

    /// An object from its JSON representation.
    fn object_from(
        &self,
        value: &Value,
        module: &str,
        etag: Option<String>,
        what: &str,
    ) -> Result<UdmObject, UdmError> {
        let dn = value["dn"].as_str().ok_or_else(|| UdmError::Malformed {
            what: what.to_string(),
            expected: "an object with a dn",
            detail: format!(
                "found {} without a dn (a success's body is not quoted)",
                json_kind(value)
            ),
        })?;
        let object_type = value["objectType"]
            .as_str()
            .filter(|t| !t.is_empty())
            .unwrap_or(module)
            .to_string();
        let text = |key: &str| value[key].as_str().map(str::to_string);
        Ok(UdmObject {
            uri: self.object_url(&object_type, dn),
            dn: dn.to_string(),
            id: text("id"),
            position: text("position"),
            uuid: text("uuid"),
            properties: value["properties"].as_object().cloned().unwrap_or_default(),
            server_uri: text("uri"),
            etag,
            object_type,
        })
    }
}

/// Percent-encodes a DN for a URL path: everything but `A-Z a-z 0-9 _ . - ~`.
pub fn quote_dn(dn: &str) -> String {
    let mut out = String::with_capacity(dn.len() * 3);
    for b in dn.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn header(response: &FullResponse, name: &str) -> Option<String> {
    response
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `Retry-After` in seconds (an HTTP date is not used by the server and counts as absent).
fn retry_after(response: &FullResponse) -> Option<Duration> {
    header(response, "retry-after")?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// What kind of JSON value `v` is, for a message that must not quote it.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// What a message may say of an answer's body ([`quoted_body`]).
fn start(response: &FullResponse) -> String {
    let content_type = content_type(&response.headers);
    quoted_body(response.status, content_type.as_deref(), &response.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> UdmClient {
        UdmClient::new(
            "http://udm.example:9979/univention/udm",
            "cn=admin",
            SecretValue::new("pw"),
            Duration::from_secs(5),
            &HttpTls::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn urls_are_built_from_the_base() {
        let c = client();
        assert_eq!(
            c.module_url("oxmail/functional_account").as_str(),
            "http://udm.example:9979/univention/udm/oxmail/functional_account/"
        );
        assert_eq!(
            c.object_url("users/user", "uid=a/b,cn=users,dc=x").as_str(),
            "http://udm.example:9979/univention/udm/users/user/uid%3Da%2Fb%2Ccn%3Dusers%2Cdc%3Dx"
        );
        assert!(
            c.checked_url("http://elsewhere:9979/univention/udm/x")
                .is_err()
        );
        assert!(
            c.checked_url("http://udm.example:9979/univention/udm/users/user/x")
                .is_ok()
        );
    }

    #[test]
    fn envelopes_become_messages() {
        let body = r#"{"error": {"code": 422, "title": "Unprocessable Entity", "message": "m:\nRequest argument \"x\" m\n", "error": {}},
                      "_embedded": {"udm:error": [{"location": ["body", "properties", null], "message": " A user must not be repeated", "type": "value_error"}]}}"#;
        let parsed = ServerMessage::parse(body);
        assert_eq!(
            parsed.details[0].location,
            vec!["body", "properties", "null"]
        );
        assert_eq!(
            parsed.to_string(),
            "body.properties.null: A user must not be repeated"
        );
        let html = ServerMessage::parse("<html>proxy error</html>");
        assert_eq!(html.to_string(), "<html>proxy error</html>");
        let error = UdmError::Rejected {
            what: "x".into(),
            status: 422,
            server: ServerMessage::parse(body),
        };
        assert!(error.is_located_at(&["properties", "null"]));
        assert!(!error.is_located_at(&["properties", "mailPrimaryAddress"]));
        assert!(!error.is_located_at(&["a", "b", "c", "d"]));
    }

    fn answer(status: u16, body: &str) -> FullResponse {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        FullResponse {
            status: StatusCode::from_u16(status).unwrap_or_else(|e| panic!("{e}")),
            headers,
            body: body.to_string(),
        }
    }

    #[test]
    fn udm_answers_become_the_action_error_that_says_what_happened() {
        let c = client();
        let what = "checking access (GET x)";
        let error = |status: u16, body: &str| {
            let e = c
                .read_access(what, &answer(status, body))
                .err()
                .unwrap_or_else(|| panic!("{status} is an error answer"));
            let text = e.to_string();
            let action = ActionError::from(e);
            assert_eq!(action.to_string(), text, "the message is kept");
            action
        };
        let envelope = r#"{"error": {"message": "no"}}"#;
        assert!(matches!(error(401, ""), ActionError::Refused(_)));
        assert!(matches!(error(403, envelope), ActionError::Refused(_)));
        assert!(matches!(error(422, envelope), ActionError::Refused(_)));
        assert!(matches!(error(404, envelope), ActionError::NotFound(_)));
        assert!(matches!(error(412, envelope), ActionError::Conflict(_)));
        assert!(matches!(error(409, envelope), ActionError::Conflict(_)));
        assert!(matches!(
            error(502, "bad gateway"),
            ActionError::Unavailable(_)
        ));
        assert!(matches!(error(500, envelope), ActionError::Failed(_)));
        assert!(matches!(
            error(200, "<html>not json</html>"),
            ActionError::InvalidAnswer(_)
        ));
        assert!(matches!(
            ActionError::from(UdmError::Transport("GET x: could not connect".into())),
            ActionError::Unavailable(_)
        ));
    }

    #[test]
    fn object_helpers() {
        let c = client();
        let value = json!({"dn": "uid=a,dc=x", "objectType": "users/user", "id": "a",
            "properties": {"oxContext": 1, "isOxUser": "OK", "off": "Not", "s": "", "l": ["x", ""], "n": "7"}});
        let o = c
            .object_from(&value, "users/user", None, "t")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.property_str("oxContext").as_deref(), Some("1"));
        assert_eq!(o.property_i64("oxContext"), Some(1));
        assert_eq!(o.property_i64("n"), Some(7));
        assert!(o.flag("isOxUser"));
        assert!(!o.flag("off"));
        assert!(!o.flag("missing"));
        assert_eq!(o.property_str("s"), None);
        assert_eq!(o.property_strings("l"), vec!["x"]);
        assert_eq!(
            o.uri.as_str(),
            "http://udm.example:9979/univention/udm/users/user/uid%3Da%2Cdc%3Dx"
        );
    }
}
