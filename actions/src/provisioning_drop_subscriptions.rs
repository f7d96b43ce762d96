//! `provisioning_drop_subscriptions`: deletes the named Provisioning API subscriptions so that
//! their components register them again with the release's topics.

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::{Method, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::{ConfigIssue, Endpoint, Needs};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome, Warnings};
use crate::clients::http::{AnswerLimit, HttpApi, HttpTls, MIB, Response};
use crate::shared_config::needs_secrets;

/// The `secretFiles` name of the Provisioning API admin's password.
pub const PASSWORD_FILE: &str = "provisioning-api-password";

/// The action's config. `subscriptions` is required: a default would drop a subscription the
/// declaration did not name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Provisioning API.
    #[serde(default)]
    pub provisioning: Provisioning,
    /// The names of the subscriptions to drop (e.g. `ox-connector`).
    #[schemars(length(min = 1), inner(length(min = 1)))]
    pub subscriptions: Vec<SubscriptionName>,
}

/// A subscription name.
pub type SubscriptionName = String;

/// The Provisioning API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provisioning {
    /// The API's base URL.
    #[serde(default = "Provisioning::default_url")]
    #[schemars(length(min = 1))]
    pub url: String,
    /// The admin user (HTTP basic).
    #[serde(default = "Provisioning::default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "Provisioning::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// The most bytes read of one answer (4 MiB when left out); a larger answer fails the
    /// action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_response_bytes: Option<u64>,
    /// CA certificates trusted for an `https://` URL besides the public web roots and the
    /// system's store: a PEM file path (openDesk's `/etc/opendesk/trust/ca-certificates.crt`)
    /// or the PEM text itself (starting with `-----BEGIN`); read when the client is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Do not verify the server's certificate: the run records a warning (log, Event,
    /// `Warning:` line of the action's summary).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
}

/// The most bytes read of one answer unless `provisioning.maxResponseBytes` says otherwise.
/// The largest answer is the list of subscriptions (`GET /v1/subscriptions`): a few hundred
/// bytes a subscription, a handful of subscriptions in a deployment; 4 MiB leaves room for
/// thousands.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 * MIB;

impl Provisioning {
    fn default_url() -> String {
        "http://ums-provisioning-api/v1".into()
    }
    fn default_username() -> String {
        "admin".into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Provisioning {
    /// The most bytes read of one answer.
    pub fn answer_limit(&self) -> AnswerLimit {
        AnswerLimit::configured(
            self.max_response_bytes,
            DEFAULT_MAX_RESPONSE_BYTES,
            "provisioning.maxResponseBytes",
        )
    }

    /// How the client checks the API's certificate (`provisioning.caBundle`,
    /// `provisioning.insecureSkipTlsVerify`), recording a check turned off in `warnings`.
    pub fn tls(&self, warnings: &Warnings) -> HttpTls {
        HttpTls::new(
            "provisioning",
            self.ca_bundle.as_deref(),
            self.insecure_skip_tls_verify,
            warnings,
        )
    }
}

impl Default for Provisioning {
    fn default() -> Self {
        Self {
            url: Self::default_url(),
            username: Self::default_username(),
            request_timeout_seconds: Self::default_timeout(),
            max_response_bytes: None,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "provisioning_drop_subscriptions";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        self.provisioning
            .tls(&Warnings::default())
            .issues("provisioning", &self.provisioning.url)
    }
}

impl Config {
    fn api(&self, ctx: &ActionContext) -> Result<HttpApi, ActionError> {
        HttpApi::new(
            "the Provisioning API",
            &self.provisioning.url,
            &self.provisioning.username,
            ctx.secrets.get(PASSWORD_FILE)?.clone(),
            Duration::from_secs(self.provisioning.request_timeout_seconds),
            self.provisioning.answer_limit(),
            &self.provisioning.tls(&ctx.warnings),
        )
    }

    /// The names of the subscriptions that exist, read as the admin: this is what proves the
    /// URL and the credential (a subscriber-only read of one subscription would not).
    async fn existing(&self, api: &HttpApi) -> Result<Vec<String>, ActionError> {
        let response = api
            .send(Method::GET, api.url(&["subscriptions"]), None)
            .await?;
        self.read_listing(api, &response)
    }

    /// The answer to `GET /subscriptions`: the names of the subscriptions.
    pub(crate) fn read_listing(
        &self,
        api: &HttpApi,
        response: &Response,
    ) -> Result<Vec<String>, ActionError> {
        let what = "listing the subscriptions";
        if response.status != StatusCode::OK {
            return Err(api.unexpected(what, response, PASSWORD_FILE));
        }
        let listed: Vec<Listed> = serde_json::from_str(&response.body).map_err(|e| {
            ActionError::InvalidAnswer(format!(
                "the Provisioning API at {} answered {what} with something that is not a list of subscriptions: {e}",
                self.provisioning.url
            ))
        })?;
        Ok(listed.into_iter().map(|s| s.name).collect())
    }
}

/// A subscription as `GET /subscriptions` lists it (only the name matters here).
#[derive(Deserialize)]
struct Listed {
    name: String,
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let api = self.api(ctx)?;
            let existing = self.existing(&api).await?;
            let (present, absent): (Vec<&str>, Vec<&str>) = self
                .subscriptions
                .iter()
                .map(String::as_str)
                .partition(|name| existing.iter().any(|e| e == name));
            Ok(Outcome::new(summary(
                "would drop",
                &present,
                &absent,
                &self.provisioning.url,
            )))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let api = self.api(ctx)?;
            // Re-entrant: only what is still there is deleted, so a run resumed after a crash
            // sends no DELETE for a subscription it already dropped.
            let existing = self.existing(&api).await?;
            let mut dropped = Vec::new();
            let mut gone = Vec::new();
            ctx.progress.phase(
                "dropping subscriptions",
                Some(self.subscriptions.len() as u64),
                "subscriptions",
            );
            for name in &self.subscriptions {
                if !existing.iter().any(|e| e == name) {
                    tracing::info!(subscription = %name, "subscription already gone");
                    gone.push(name.as_str());
                    ctx.progress.add(1);
                    continue;
                }
                // The safe point: the request before this one was answered.
                if let Err(stopped) = ctx.stop.check() {
                    return Err(stopped.after(stopped_progress(&dropped, &gone)));
                }
                let response = api
                    .send(Method::DELETE, api.url(&["subscriptions", name]), None)
                    .await
                    .map_err(|e| progress_error(e, &dropped))?;
                if read_drop(&api, name, &response).map_err(|e| progress_error(e, &dropped))? {
                    tracing::info!(subscription = %name, "subscription dropped");
                    dropped.push(name.as_str());
                } else {
                    tracing::info!(subscription = %name, "subscription already gone");
                    gone.push(name.as_str());
                }
                ctx.progress.add(1);
            }
            Ok(Outcome::new(summary(
                "dropped",
                &dropped,
                &gone,
                &self.provisioning.url,
            )))
        })
    }

    fn needs(&self) -> Needs {
        needs_secrets([PASSWORD_FILE])
    }

    fn endpoints(&self, _namespace: &str) -> Vec<Endpoint> {
        Endpoint::from_url("provisioning.url", &self.provisioning.url)
            .into_iter()
            .collect()
    }

    /// The planning phase's listing as the admin: proves the URL and the credential, and
    /// depends on nothing an earlier action changes.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let api = self.api(ctx)?;
            self.existing(&api).await.map(drop)
        })
    }
}

/// What an action stopped by the operator had done: `None` when nothing.
fn stopped_progress(dropped: &[&str], gone: &[&str]) -> Option<String> {
    if dropped.is_empty() && gone.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !dropped.is_empty() {
        parts.push(format!("dropped before stopping: {}", dropped.join(", ")));
    }
    if !gone.is_empty() {
        parts.push(format!("already gone: {}", gone.join(", ")));
    }
    Some(format!("{}; a rerun drops the rest", parts.join("; ")))
}

/// The answer to `DELETE /subscriptions/<name>`: `true` dropped, `false` already gone.
pub(crate) fn read_drop(
    api: &HttpApi,
    name: &str,
    response: &Response,
) -> Result<bool, ActionError> {
    match response.status {
        StatusCode::OK | StatusCode::NO_CONTENT => Ok(true),
        StatusCode::NOT_FOUND => Ok(false),
        _ => {
            let what = format!("dropping the subscription {name:?}");
            Err(api.unexpected(&what, response, PASSWORD_FILE))
        }
    }
}

/// Adds what was already dropped to an error, so a rerun's report is not a surprise.
fn progress_error(error: ActionError, dropped: &[&str]) -> ActionError {
    if dropped.is_empty() {
        error
    } else {
        error.map_message(|error| format!("{error} (already dropped: {})", dropped.join(", ")))
    }
}

fn summary(verb: &str, acted: &[&str], absent: &[&str], url: &str) -> String {
    let mut parts = Vec::new();
    if !acted.is_empty() {
        parts.push(format!("{verb} {}", acted.join(", ")));
    }
    if !absent.is_empty() {
        parts.push(format!("already gone: {}", absent.join(", ")));
    }
    format!("Provisioning API {url}: {}", parts.join("; "))
}
