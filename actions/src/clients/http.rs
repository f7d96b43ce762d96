//! HTTP for every client that speaks it: [`client_builder`], the one place a
//! `reqwest::Client` is configured (a timeout per request and per connect, TLS verified with
//! rustls, Stagehand's user agent); [`transport_failure`], the one reading of a request that
//! got no answer; and [`HttpApi`], the REST helper with HTTP basic credentials whose errors
//! name the request but never the credential (the Provisioning API, UDM).

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};

use crate::action::{ActionError, SecretValue};

/// An API endpoint with its credential.
#[derive(Debug, Clone)]
pub struct HttpApi {
    client: reqwest::Client,
    base: Url,
    username: String,
    password: SecretValue,
    /// What the API is, for messages: e.g. `the Provisioning API`.
    name: &'static str,
}

/// A response read whole: status and body.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body as text.
    pub body: String,
}

impl HttpApi {
    /// An API at `base` (its path is kept: segments are appended to it).
    pub fn new(
        name: &'static str,
        base: &str,
        username: &str,
        password: SecretValue,
        timeout: Duration,
    ) -> Result<Self, ActionError> {
        let base = api_url(name, base)?;
        let client = client_builder(timeout).build().map_err(|e| {
            ActionError::Failed(format!("{name}: cannot build an HTTP client: {e}"))
        })?;
        Ok(Self {
            client,
            base,
            username: username.to_string(),
            password,
            name,
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
            body: full.body,
        })
    }

    /// The error for an answer the caller did not expect, naming the request and quoting the
    /// server's message; 401/403 say which user was refused and where its password comes from.
    pub fn unexpected(&self, what: &str, response: &Response, password_file: &str) -> ActionError {
        let detail = response.body.chars().take(300).collect::<String>();
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
        let what = format!("{} {method} {url}", self.name);
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
            .map_err(|e| transport_error(&what, &e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .text()
            .await
            .map_err(|e| transport_error(&what, &e))?;
        Ok(FullResponse {
            status,
            headers,
            body,
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

/// A `reqwest` client builder with what every client of the actions sets: `timeout` bounds each
/// request and each connect, and requests carry Stagehand's user agent ([`user_agent`]).
/// Callers add what their protocol needs (a CA bundle, no redirects) and build it.
pub fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(user_agent())
}

/// How a request that got no answer failed: `kind` is `timed out`, `could not connect` or
/// `failed`; `cause` the innermost reason (reqwest's own message names the URL, never
/// credentials), when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFailure {
    /// `timed out`, `could not connect` or `failed`.
    pub kind: &'static str,
    /// The innermost error of the chain.
    pub cause: Option<String>,
}

/// Reads a transport error of `reqwest` as a [`TransportFailure`].
pub fn transport_failure(e: &reqwest::Error) -> TransportFailure {
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
    TransportFailure { kind, cause }
}

fn transport_error(what: &str, e: &reqwest::Error) -> ActionError {
    match transport_failure(e) {
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
        )
        .unwrap()
    }

    #[test]
    fn unexpected_answers_become_the_action_error_that_says_what_happened() {
        let api = api("http://provisioning.example/");
        let answered = |status: u16| {
            let response = Response {
                status: StatusCode::from_u16(status).unwrap(),
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
}
