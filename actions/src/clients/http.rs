//! HTTP for every client that speaks it: [`client_builder`], the one place a
//! `reqwest::Client` is configured (a timeout per request and per connect, TLS as
//! [`crate::clients::tls`] sets it up for every client, Stagehand's user agent); [`read_capped`], the one place an answer's body is read
//! (never more than the API's [`AnswerLimit`]); [`transport_failure`], the one reading of a
//! request that got no answer; and [`HttpApi`], the REST helper with HTTP basic credentials
//! whose errors name the request but never the credential (the Provisioning API, UDM).

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};

use crate::action::{ActionError, SecretValue, Warnings};
use crate::clients::tls::{self, TlsError, Verify};

/// One mebibyte, the unit the answer limits are sized in.
pub const MIB: u64 = 1024 * 1024;

/// The most bytes a client reads of one answer of an API, and the config key that raises it
/// (named in the error of an answer that is larger). See docs/deploy.md, "Bounded answers".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimit {
    /// The limit in bytes.
    pub bytes: u64,
    /// What raises it, for the message: the action's config key, e.g. `udm.maxResponseBytes`.
    pub raise: &'static str,
}

impl AnswerLimit {
    /// `bytes` when the config sets it, else `default`; `raise` names the key either way.
    pub fn configured(configured: Option<u64>, default: u64, raise: &'static str) -> Self {
        Self {
            bytes: configured.unwrap_or(default).max(1),
            raise,
        }
    }
}

/// Why an answer's body was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The connection failed or timed out while the body was read.
    #[error("{0}")]
    Transport(reqwest::Error),
    /// The answer is larger than the limit: it was refused after at most `limit` bytes (at
    /// once when its `Content-Length` said so).
    #[error(
        "{request} answered more than {limit} bytes{declared}, more than Stagehand reads of one answer (the operator's memory is bounded): the answer was refused; if it is legitimate, raise {raise} (and the operator's memory limit with it, see docs/deploy.md, \"Bounded answers\")",
        declared = match declared { Some(n) => format!(" (Content-Length: {n})"), None => String::new() }
    )]
    TooLarge {
        /// The request, as the client names it: the API, the method and the URL (no
        /// credential, no signed query).
        request: String,
        /// The limit in bytes.
        limit: u64,
        /// The length the answer declared, when it declared one.
        declared: Option<u64>,
        /// What raises the limit.
        raise: &'static str,
    },
}

/// Reads the body of `response`, at most `limit.bytes` of it: an answer whose `Content-Length`
/// is larger is refused before a byte of its body is read, any other is read chunk by chunk
/// into one buffer and refused as soon as it grows past the limit. `request` names the request
/// in the error (the API, the method and the URL, never a credential or a signed query). This
/// is the one place any client of the actions reads an HTTP answer.
pub async fn read_capped(
    mut response: reqwest::Response,
    limit: AnswerLimit,
    request: &str,
) -> Result<Vec<u8>, ReadError> {
    let too_large = |declared: Option<u64>| ReadError::TooLarge {
        request: request.to_string(),
        limit: limit.bytes,
        declared,
        raise: limit.raise,
    };
    let declared = response.content_length();
    if let Some(length) = declared
        && length > limit.bytes
    {
        return Err(too_large(Some(length)));
    }
    let cap = usize::try_from(limit.bytes).unwrap_or(usize::MAX);
    // The declared length (within the limit) is what is allocated; an undeclared one grows.
    let mut body = Vec::with_capacity(
        declared
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(0)
            .min(cap),
    );
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Transport)? {
        if chunk.len() > cap - body.len() {
            return Err(too_large(declared));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `url` for a message: without a user or password it may carry.
pub fn without_credentials(url: &Url) -> Url {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown
}

/// `body` as text: UTF-8 (the JSON the APIs answer), invalid sequences replaced.
pub fn body_text(body: Vec<u8>) -> String {
    String::from_utf8(body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// An API endpoint with its credential.
#[derive(Debug, Clone)]
pub struct HttpApi {
    client: reqwest::Client,
    base: Url,
    username: String,
    password: SecretValue,
    /// What the API is, for messages: e.g. `the Provisioning API`.
    name: &'static str,
    /// The most bytes read of one answer.
    limit: AnswerLimit,
    /// The config key of the API's section (`provisioning`), for a refused certificate.
    tls_key: &'static str,
}

/// A response read whole: status, content type and body.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body as text.
    pub body: String,
}

/// The most characters of an answer's body an error quotes.
pub const QUOTED_BODY_CHARS: usize = 200;

/// What an error message may say of an answer's body (docs/deploy.md#tenancy-and-the-threat-model):
/// its start on one line, at most [`QUOTED_BODY_CHARS`], only for an error status (4xx, 5xx)
/// whose content type is text, JSON or XML; otherwise why it is not quoted. A redirect's or a
/// success's body, or a body of another type (a page a Migration's URL points at), never ends up
/// in a run's status.
pub fn quoted_body(status: StatusCode, content_type: Option<&str>, body: &str) -> String {
    match unquotable(status, content_type) {
        Some(why) => format!("(the body is not quoted: {why})"),
        None if body.trim().is_empty() => "(an empty body)".to_string(),
        None => crate::text::one_line(body, QUOTED_BODY_CHARS),
    }
}

/// Why an answer's body is not quoted ([`quoted_body`]), or `None` when it may be.
pub fn unquotable(status: StatusCode, content_type: Option<&str>) -> Option<String> {
    if status.is_redirection() {
        return Some(format!("a redirect ({status}), not followed"));
    }
    if !status.is_client_error() && !status.is_server_error() {
        return Some(format!("{status} is no error status"));
    }
    let Some(content_type) = content_type else {
        return Some("the answer has no content type".to_string());
    };
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let (kind, sub) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    let textual = kind == "text"
        || (kind == "application"
            && (matches!(sub, "json" | "xml" | "problem+json" | "problem+xml")
                || sub.ends_with("+json")
                || sub.ends_with("+xml")));
    if textual {
        None
    } else {
        Some(format!(
            "its content type is {}",
            crate::text::one_line(content_type, 60)
        ))
    }
}

/// The `Content-Type` of an answer's headers, if it is readable text.
pub fn content_type(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

impl HttpApi {
    /// An API at `base` (its path is kept: segments are appended to it), reading at most
    /// `limit` of each answer, checking the server's certificate as `tls` says.
    pub fn new(
        name: &'static str,
        base: &str,
        username: &str,
        password: SecretValue,
        timeout: Duration,
        limit: AnswerLimit,
        tls: &HttpTls,
    ) -> Result<Self, ActionError> {
        let base = api_url(name, base)?;
        let client = client_builder(timeout, tls, &base)?.build().map_err(|e| {
            ActionError::Failed(format!("{name}: cannot build an HTTP client: {e}"))
        })?;
        Ok(Self {
            client,
            base,
            username: username.to_string(),
            password,
            name,
            limit,
            tls_key: tls.key,
        })
    }

    /// The URL of `segments` below the base, each segment percent-encoded.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends one request with the credential and reads the answer. Transport failures and
    /// timeouts become errors naming the method and URL; any HTTP status is returned.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
    ) -> Result<Response, ActionError> {
        let full = self.send_with_headers(method, url, &[], body).await?;
        Ok(Response {
            status: full.status,
            content_type: content_type(&full.headers),
            body: full.body,
        })
    }

    /// The error for an answer the caller did not expect, naming the request and quoting the
    /// server's message as [`quoted_body`] allows; 401/403 say which user was refused and where
    /// its password comes from.
    pub fn unexpected(&self, what: &str, response: &Response, password_file: &str) -> ActionError {
        let detail = quoted_body(
            response.status,
            response.content_type.as_deref(),
            &response.body,
        );
        match response.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ActionError::Refused(format!(
                "{} at {} refused the credentials of user {:?} ({}) while {what}: check the secret file {password_file:?}",
                self.name, self.base, self.username, response.status
            )),
            status => ActionError::for_status(
                status.as_u16(),
                format!(
                    "{} at {} answered {status} while {what}: {detail}",
                    self.name, self.base
                ),
            ),
        }
    }
}

/// The base URL of the API `name` from its configured text: an absolute `http://` or
/// `https://` URL. The one check every HTTP API's URL gets, also where a config is validated
/// without building a client.
pub fn api_url(name: &str, base: &str) -> Result<Url, ActionError> {
    let url = Url::parse(base)
        .map_err(|e| ActionError::Failed(format!("{name}: the URL {base:?} is not valid: {e}")))?;
    if url.cannot_be_a_base() || !matches!(url.scheme(), "http" | "https") {
        return Err(ActionError::Failed(format!(
            "{name}: the URL {url} must be an http:// or https:// URL"
        )));
    }
    Ok(url)
}

/// A response read whole, with its headers (for APIs whose answers carry `ETag`, `Location`
/// or `Retry-After`).
#[derive(Debug)]
pub struct FullResponse {
    /// The HTTP status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as text.
    pub body: String,
}

impl HttpApi {
    /// The same API, reading at most `limit` of each answer.
    pub fn with_limit(mut self, limit: AnswerLimit) -> Self {
        self.limit = limit;
        self
    }

    /// The API's base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// The user the API is called as.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// Like [`HttpApi::send`] (credential, `Accept: application/json`, the timeout), plus
    /// extra request headers (such as `If-Match`), answering the response headers as well.
    pub async fn send_with_headers(
        &self,
        method: Method,
        url: Url,
        headers: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Result<FullResponse, ActionError> {
        let what = format!("{} {method} {}", self.name, without_credentials(&url));
        let mut request = self
            .client
            .request(method, url)
            .basic_auth(&self.username, Some(self.password.expose()))
            .header(reqwest::header::ACCEPT, "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport_error(&what, &e, self.tls_key))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = read_capped(response, self.limit, &what)
            .await
            .map_err(|e| match e {
                ReadError::Transport(e) => transport_error(&what, &e, self.tls_key),
                too_large => ActionError::InvalidAnswer(too_large.to_string()),
            })?;
        Ok(FullResponse {
            status,
            headers,
            body: body_text(body),
        })
    }
}

/// The operator replica this process is, once named ([`set_instance`]).
static INSTANCE: OnceLock<String> = OnceLock::new();

/// Names this process (the operator's Lease identity) in the user agent of every HTTP request
/// of the actions, `stagehand/0.1.0 (replica-a)`, so that a server's access log tells the
/// replicas apart. Characters other than ASCII letters, digits, `.`, `_` and `-` become `_`;
/// the first call wins.
pub fn set_instance(name: &str) {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let _ = INSTANCE.set(clean);
}

/// `stagehand/<version>`, with the instance when named.
pub fn user_agent() -> String {
    let product = concat!("stagehand/", env!("CARGO_PKG_VERSION"));
    match INSTANCE.get() {
        Some(instance) if !instance.is_empty() => format!("{product} ({instance})"),
        _ => product.to_string(),
    }
}

/// How an HTTP client checks its server's certificate (docs/deploy.md, "TLS"): the keys next
/// to the API's URL in its config section, and the run's warnings, where a check turned off is
/// recorded.
#[derive(Debug, Clone, Default)]
pub struct HttpTls {
    /// The config key of the API's section, named in messages: `udm`, `oxAppSuite`,
    /// `provisioning`, `synapse.connection`, `objectStore`.
    pub key: &'static str,
    /// CA certificates trusted besides the public web roots and the system's store: a PEM
    /// file path or the PEM text itself ([`tls::load_ca_bundle`]).
    pub ca_bundle: Option<String>,
    /// Do not check the server's certificate (recorded as a warning of the run).
    pub insecure_skip_tls_verify: bool,
    /// Where a check turned off is recorded ([`tls::insecure_warning`]).
    pub warnings: Warnings,
}

impl HttpTls {
    /// The settings of the section at `key`: `caBundle`, `insecureSkipTlsVerify` and the
    /// run's warnings.
    pub fn new(
        key: &'static str,
        ca_bundle: Option<&str>,
        insecure_skip_tls_verify: bool,
        warnings: &Warnings,
    ) -> Self {
        Self {
            key,
            ca_bundle: ca_bundle.map(str::to_string),
            insecure_skip_tls_verify,
            warnings: warnings.clone(),
        }
    }

    /// What is wrong with the TLS keys of the section at `at` whose URL is `url` (a URL that
    /// does not parse is the URL check's to name): a `caBundle` that is neither PEM nor an
    /// absolute path, and either key with an `http://` URL, which has no TLS to set up.
    pub fn issues(&self, at: &str, url: &str) -> Vec<stagehand_config::ConfigIssue> {
        let mut issues = Vec::new();
        let plain = url
            .trim()
            .get(..7)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"));
        let mut issue = |key: &str, message: String| {
            issues.push(stagehand_config::ConfigIssue {
                path: format!("{at}.{key}"),
                message,
            });
        };
        let unused = |key: &str| {
            format!(
                "{key} is only used over TLS, and the URL {url} is http://: make it an https:// URL or leave {key} out"
            )
        };
        if let Some(bundle) = &self.ca_bundle {
            if plain {
                issue("caBundle", unused("caBundle"));
            } else if let Some(problem) = tls::ca_bundle_issue(bundle) {
                issue("caBundle", problem);
            }
        }
        if self.insecure_skip_tls_verify && plain {
            issue("insecureSkipTlsVerify", unused("insecureSkipTlsVerify"));
        }
        issues
    }
}

/// A `reqwest` client builder with what every client of the actions sets: `timeout` bounds each
/// request and each connect, requests carry Stagehand's user agent ([`user_agent`]), and TLS
/// is [`tls::client_config`]'s (the public web roots, the system's store and `tls.caBundle`,
/// read now), so that every HTTP client trusts the same roots as LDAP, Redis and PostgreSQL.
/// With `tls.insecureSkipTlsVerify` and an `https://` `server` nothing is checked and the
/// warning is recorded in `tls.warnings`. Callers add what their protocol needs (no
/// redirects) and build it.
pub fn client_builder(
    timeout: Duration,
    tls: &HttpTls,
    server: &Url,
) -> Result<reqwest::ClientBuilder, TlsError> {
    let https = server.scheme() == "https";
    let skip = https && tls.insecure_skip_tls_verify;
    let verify = if skip { Verify::Nothing } else { Verify::Full };
    let bundle = tls.ca_bundle.as_deref().filter(|_| https);
    let config = tls::client_config(tls.key, bundle, verify)?;
    if skip {
        tls.warnings.warn(tls::insecure_warning(
            &format!("{}.insecureSkipTlsVerify", tls.key),
            without_credentials(server).as_str(),
        ));
    }
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(user_agent()))
}

/// How a request that got no answer failed: `kind` is `timed out`, `could not connect` or
/// `failed`; `cause` the innermost reason (reqwest's own message names the URL, never
/// credentials), when there is one, followed by what to do about a refused certificate
/// ([`tls::certificate_hint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    /// `timed out`, `could not connect` or `failed`.
    pub kind: &'static str,
    /// The innermost error of the chain.
    pub cause: Option<String>,
}

/// Reads a transport error of `reqwest` as a [`TransportFailure`]; `key` is the config key of
/// the API's section (`udm`), named in what to do about a refused certificate.
pub fn transport_failure(e: &reqwest::Error, key: &str) -> TransportFailure {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    let mut cause = None;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = Some(s.to_string());
        source = s.source();
    }
    let cause = cause.map(|cause| match tls::certificate_hint(key, &cause) {
        Some(hint) => format!("{cause}: {hint}"),
        None => cause,
    });
    TransportFailure { kind, cause }
}

fn transport_error(what: &str, e: &reqwest::Error, key: &str) -> ActionError {
    match transport_failure(e, key) {
        TransportFailure { kind, cause: None } => {
            ActionError::Unavailable(format!("{what}: {kind}"))
        }
        TransportFailure {
            kind,
            cause: Some(cause),
        } => ActionError::Unavailable(format!("{what}: {kind}: {cause}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn api(base: &str) -> HttpApi {
        HttpApi::new(
            "the Provisioning API",
            base,
            "admin",
            SecretValue::new("pw"),
            Duration::from_secs(5),
            AnswerLimit {
                bytes: 4 * MIB,
                raise: "provisioning.maxResponseBytes",
            },
            &HttpTls::default(),
        )
        .unwrap()
    }

    #[test]
    fn unexpected_answers_become_the_action_error_that_says_what_happened() {
        let api = api("http://provisioning.example/");
        let answered = |status: u16| {
            let response = Response {
                status: StatusCode::from_u16(status).unwrap(),
                content_type: Some("application/json".into()),
                body: "{\"detail\": \"m\"}".into(),
            };
            api.unexpected(
                "listing subscriptions",
                &response,
                "provisioning-api-password",
            )
        };
        let refused = answered(401);
        assert!(matches!(refused, ActionError::Refused(_)), "{refused:?}");
        assert!(
            refused
                .to_string()
                .contains("refused the credentials of user \"admin\"")
        );
        assert!(matches!(answered(403), ActionError::Refused(_)));
        assert!(matches!(answered(404), ActionError::NotFound(_)));
        assert!(matches!(answered(409), ActionError::Conflict(_)));
        assert!(matches!(answered(502), ActionError::Unavailable(_)));
        let other = answered(500);
        assert!(matches!(other, ActionError::Failed(_)), "{other:?}");
        assert_eq!(
            other.to_string(),
            "the Provisioning API at http://provisioning.example/ answered 500 Internal Server Error while listing subscriptions: {\"detail\": \"m\"}"
        );
    }

    #[test]
    fn a_body_is_quoted_only_for_an_error_status_of_a_textual_type_and_at_most_200_characters() {
        let status = |n: u16| StatusCode::from_u16(n).unwrap();
        let long = "x".repeat(500);
        let quoted = quoted_body(status(500), Some("text/plain; charset=utf-8"), &long);
        assert_eq!(quoted, format!("{}...", "x".repeat(QUOTED_BODY_CHARS)));
        assert_eq!(QUOTED_BODY_CHARS, 200);
        for ct in [
            "application/json",
            "application/problem+json",
            "text/html",
            "text/xml;charset=UTF-8",
            "application/soap+xml",
            "Application/XML",
        ] {
            assert_eq!(quoted_body(status(404), Some(ct), " a\n b "), "a b", "{ct}");
        }
        assert_eq!(
            quoted_body(status(302), Some("text/html"), "secret page"),
            "(the body is not quoted: a redirect (302 Found), not followed)"
        );
        assert_eq!(
            quoted_body(status(200), Some("application/json"), "secret"),
            "(the body is not quoted: 200 OK is no error status)"
        );
        assert_eq!(
            quoted_body(status(500), Some("application/octet-stream"), "secret"),
            "(the body is not quoted: its content type is application/octet-stream)"
        );
        assert_eq!(
            quoted_body(status(500), None, "secret"),
            "(the body is not quoted: the answer has no content type)"
        );
        assert_eq!(
            quoted_body(status(503), Some("text/plain"), "  "),
            "(an empty body)"
        );
    }

    proptest::proptest! {
        /// Whatever the answer, what is quoted is at most 200 characters (and the ellipsis),
        /// and nothing of the body is quoted outside 4xx/5xx.
        #[test]
        fn a_quote_is_bounded_and_only_of_errors(code in 100u16..600, body in ".{0,400}", json in proptest::bool::ANY) {
            let status = StatusCode::from_u16(code).unwrap();
            let ct = if json { Some("application/json") } else { Some("image/png") };
            let quoted = quoted_body(status, ct, &body);
            proptest::prop_assert!(quoted.chars().count() <= QUOTED_BODY_CHARS + 3 || quoted.starts_with("(the body is not quoted"));
            if !(status.is_client_error() || status.is_server_error()) || !json {
                proptest::prop_assert!(quoted.starts_with("(the body is not quoted: "), "{}", quoted);
            }
        }
    }

    #[test]
    fn tls_keys_fit_the_url_and_a_skipped_check_warns_once() {
        let tls = |bundle: Option<&str>, skip: bool| {
            HttpTls::new("udm", bundle, skip, &Warnings::default())
        };
        let paths = |t: &HttpTls, url: &str| -> Vec<String> {
            t.issues("udm", url).into_iter().map(|i| i.path).collect()
        };
        let file = "/etc/opendesk/trust/ca-certificates.crt";
        assert!(paths(&tls(Some(file), true), "https://udm/univention/udm/").is_empty());
        assert_eq!(
            paths(&tls(Some(file), true), "HTTP://udm/univention/udm/"),
            ["udm.caBundle", "udm.insecureSkipTlsVerify"]
        );
        assert_eq!(
            paths(&tls(Some("ca.crt"), false), "https://udm/"),
            ["udm.caBundle"]
        );

        let warnings = Warnings::default();
        let skip = HttpTls::new("udm", Some("/absent/ca.crt"), true, &warnings);
        let https = Url::parse("https://udm.example/univention/udm/").unwrap();
        // No bundle is read when nothing is checked; the warning names key and server.
        client_builder(Duration::from_secs(1), &skip, &https)
            .unwrap()
            .build()
            .unwrap();
        client_builder(Duration::from_secs(1), &skip, &https)
            .unwrap()
            .build()
            .unwrap();
        let list = warnings.list();
        assert_eq!(list.len(), 1, "{list:?}");
        assert!(
            list[0].starts_with("udm.insecureSkipTlsVerify is set"),
            "{list:?}"
        );
        assert!(
            list[0].contains("https://udm.example/univention/udm/"),
            "{list:?}"
        );
        // Over http:// nothing is verified or skipped.
        let plain = HttpTls::new("udm", None, true, &Warnings::default());
        client_builder(
            Duration::from_secs(1),
            &plain,
            &Url::parse("http://u/").unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        assert!(plain.warnings.list().is_empty());

        let missing = HttpTls::new("udm", Some("/absent/ca.crt"), false, &Warnings::default());
        let e = client_builder(Duration::from_secs(1), &missing, &https)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("udm.caBundle") && e.contains("/absent/ca.crt"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_request_nobody_answers_is_unavailable() {
        // A port just freed: nothing listens on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let api = api(&format!("http://127.0.0.1:{port}/"));
        let e = api
            .send(Method::GET, api.url(&["x"]), None)
            .await
            .unwrap_err();
        assert!(matches!(e, ActionError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("could not connect"), "{e}");
    }

    /// A one-shot HTTP server on loopback: answers the first request with `head` (status line
    /// and headers, without the blank line) and then the chunks of `body`, written as they
    /// are (the caller frames them); answers the port.
    async fn serve_once(head: &'static str, body: Vec<Vec<u8>>) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                request.extend_from_slice(&buf[..n]);
            }
            conn.write_all(head.as_bytes()).await.unwrap();
            conn.write_all(b"\r\n\r\n").await.unwrap();
            for chunk in body {
                // The client may hang up once it has read enough.
                if conn.write_all(&chunk).await.is_err() {
                    return;
                }
                conn.flush().await.unwrap();
            }
        });
        port
    }

    const LIMIT: AnswerLimit = AnswerLimit {
        bytes: 1000,
        raise: "provisioning.maxResponseBytes",
    };

    async fn get(port: u16) -> reqwest::Response {
        let url = Url::parse(&format!("http://127.0.0.1:{port}/v1/subscriptions")).unwrap();
        client_builder(Duration::from_secs(5), &HttpTls::default(), &url)
            .unwrap()
            .build()
            .unwrap()
            .get(format!("http://127.0.0.1:{port}/v1/subscriptions"))
            .send()
            .await
            .unwrap()
    }

    /// One chunk of chunked transfer encoding.
    fn chunk(data: &[u8]) -> Vec<u8> {
        let mut out = format!("{:x}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    }

    #[tokio::test]
    async fn an_answer_declaring_more_than_the_limit_is_refused_before_its_body() {
        // Declares a gibibyte and sends none of it: only the Content-Length can refuse it.
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1073741824",
            Vec::new(),
        )
        .await;
        let e = read_capped(
            get(port).await,
            LIMIT,
            "the Provisioning API GET http://x/v1/subscriptions",
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    declared: Some(1_073_741_824),
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "the Provisioning API GET http://x/v1/subscriptions answered more than 1000 bytes (Content-Length: 1073741824), more than Stagehand reads of one answer (the operator's memory is bounded): the answer was refused; if it is legitimate, raise provisioning.maxResponseBytes (and the operator's memory limit with it, see docs/deploy.md, \"Bounded answers\")"
        );
    }

    #[tokio::test]
    async fn a_chunked_answer_is_refused_as_soon_as_it_grows_past_the_limit() {
        // 600 bytes, then 600 more, then a chunk that would never end: the reader must stop
        // at the second chunk without waiting for the rest.
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
            vec![
                chunk(&[b'a'; 600]),
                chunk(&[b'b'; 600]),
                b"fffffff\r\n".to_vec(),
            ],
        )
        .await;
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            read_capped(get(port).await, LIMIT, "the Provisioning API GET http://x/"),
        )
        .await
        .expect("the reader stops at the limit without waiting for the rest");
        let e = read.unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    declared: None,
                    limit: 1000,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("answered more than 1000 bytes, more than"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_answer_of_exactly_the_limit_is_read_whole() {
        let mut body = vec![chunk(&[b'x'; 999]), chunk(b"y"), b"0\r\n\r\n".to_vec()];
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked",
            std::mem::take(&mut body),
        )
        .await;
        let read = read_capped(get(port).await, LIMIT, "r").await.unwrap();
        assert_eq!(read.len(), 1000);
        assert_eq!(read.last(), Some(&b'y'));

        // Declared at exactly the limit.
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Length: 1000",
            vec![vec![b'z'; 1000]],
        )
        .await;
        let read = read_capped(get(port).await, LIMIT, "r").await.unwrap();
        assert_eq!(read, vec![b'z'; 1000]);
    }

    #[tokio::test]
    async fn an_api_answering_too_much_fails_with_an_invalid_answer_naming_the_request() {
        let port = serve_once(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked",
            vec![chunk(&[b' '; 5 * 1024 * 1024])],
        )
        .await;
        let api = api(&format!("http://127.0.0.1:{port}/v1"));
        let e = api
            .send(Method::GET, api.url(&["subscriptions"]), None)
            .await
            .unwrap_err();
        assert!(matches!(e, ActionError::InvalidAnswer(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "the Provisioning API GET http://127.0.0.1:{port}/v1/subscriptions answered more than 4194304 bytes"
            )),
            "{text}"
        );
        assert!(
            text.contains("raise provisioning.maxResponseBytes"),
            "{text}"
        );
    }

    #[test]
    fn urls_in_messages_carry_no_credential() {
        let url = Url::parse("http://admin:s3cret@udm.example/univention/udm/?filter=x").unwrap();
        assert_eq!(
            without_credentials(&url).as_str(),
            "http://udm.example/univention/udm/?filter=x"
        );
    }
}
