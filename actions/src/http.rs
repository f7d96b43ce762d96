//! The one HTTP client the REST and SOAP actions share: HTTP basic credentials, a timeout per
//! request, TLS verified (rustls), and errors that name the request but never the credential.

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
        let base = Url::parse(base).map_err(|e| {
            ActionError::Failed(format!("{name}: the URL {base:?} is not valid: {e}"))
        })?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ActionError::Failed(format!(
                "{name}: the URL {base} must be an http:// or https:// URL"
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| {
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
        let what = format!("{} {method} {url}", self.name);
        let mut request = self
            .client
            .request(method, url)
            .basic_auth(&self.username, Some(self.password.expose()))
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| transport_error(&what, &e))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|e| transport_error(&what, &e))?;
        Ok(Response { status, body })
    }

    /// The error for an answer the caller did not expect, naming the request and quoting the
    /// server's message; 401/403 say which user was refused and where its password comes from.
    pub fn unexpected(&self, what: &str, response: &Response, password_file: &str) -> ActionError {
        let detail = response.body.chars().take(300).collect::<String>();
        match response.status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ActionError::Failed(format!(
                "{} at {} refused the credentials of user {:?} ({}) while {what}: check the secret file {password_file:?}",
                self.name, self.base, self.username, response.status
            )),
            status => ActionError::Failed(format!(
                "{} at {} answered {status} while {what}: {detail}",
                self.name, self.base
            )),
        }
    }
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

fn transport_error(what: &str, e: &reqwest::Error) -> ActionError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    // reqwest's Display includes the URL (never credentials); the source chain says why.
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        ActionError::Failed(format!("{what}: {kind}"))
    } else {
        ActionError::Failed(format!("{what}: {kind}: {cause}"))
    }
}
