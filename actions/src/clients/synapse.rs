//! Synapse's admin API, as far as the actions use it: shared-secret registration of an admin
//! (`GET`/`POST /_synapse/admin/v1/register`, the MAC an HMAC-SHA1 keyed with the registration
//! shared secret over nonce, user name, password and `admin`, NUL-separated) and the
//! deactivation of an account (`POST /_synapse/admin/v1/deactivate/<user_id>`). The shared
//! secret, the password and the access token are [`SecretValue`]s: no message, log line or
//! `Debug` shows them.

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::{StatusCode, Url};
use sha1::Sha1;

use crate::action::{ActionError, SecretValue};
use crate::clients::http::{
    AnswerLimit, HttpTls, MIB, QUOTED_BODY_CHARS, ReadError, api_url, body_text, client_builder,
    quoted_body, read_capped, transport_failure, unquotable, without_credentials,
};
use crate::text::one_line;

/// The registration endpoint (nonce and registration).
pub const REGISTER_PATH: [&str; 4] = ["_synapse", "admin", "v1", "register"];

/// The most bytes read of one answer unless the action's
/// `synapse.connection.maxResponseBytes` says otherwise. The admin API's answers the actions
/// read are a nonce, a registration (a user id and a token) and a deactivation's result, each
/// a few hundred bytes: 1 MiB leaves room for any error page in front of it.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = MIB;

/// The config key that raises the limit, for the message of an answer that is larger.
pub const MAX_RESPONSE_BYTES_KEY: &str = "synapse.connection.maxResponseBytes";

/// What Synapse answers (400) to a shared-secret registration when it has no shared secret.
pub const REGISTRATION_OFF: &str = "Shared secret registration is not enabled";

/// The hex HMAC-SHA1 Synapse checks on a shared-secret registration: keyed with the shared
/// secret, over `nonce`, `user`, `password` and `admin`/`notadmin`, NUL-separated.
pub fn registration_mac(
    secret: &SecretValue,
    nonce: &str,
    user: &str,
    password: &SecretValue,
    admin: bool,
) -> String {
    // HMAC accepts keys of any length.
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(secret.expose().as_bytes()) else {
        return String::new();
    };
    mac.update(nonce.as_bytes());
    mac.update(b"\x00");
    mac.update(user.as_bytes());
    mac.update(b"\x00");
    mac.update(password.expose().as_bytes());
    mac.update(b"\x00");
    mac.update(if admin { b"admin" } else { b"notadmin" });
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An admin registered by the action: its Matrix ID and access token.
#[derive(Debug, Clone)]
pub struct Admin {
    /// `@odmigs-...:server`.
    pub user_id: String,
    /// Its access token (never shown).
    pub token: SecretValue,
}

/// Synapse's admin API at one base URL.
#[derive(Debug, Clone)]
pub struct SynapseAdmin {
    client: reqwest::Client,
    base: Url,
    limit: AnswerLimit,
    /// The config key of the section (`synapse.connection`), for a refused certificate.
    tls_key: &'static str,
}

/// What answered a request, read whole.
struct Answer {
    status: StatusCode,
    /// The `Content-Type` header, for what a message may quote ([`quoted_body`]).
    content_type: Option<String>,
    body: String,
}

impl SynapseAdmin {
    /// The API at `base` (`http://opendesk-synapse.<ns>.svc.cluster.local:8008`), each request
    /// bounded by `timeout`, the server's certificate checked as `tls` says.
    pub fn new(base: &str, timeout: Duration, tls: &HttpTls) -> Result<Self, ActionError> {
        let base = api_url("Synapse", base)?;
        let client = client_builder(timeout, tls, &base)?
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                ActionError::Failed(format!("Synapse: cannot build an HTTP client: {e}"))
            })?;
        Ok(Self {
            client,
            base,
            tls_key: tls.key,
            limit: AnswerLimit::configured(
                None,
                DEFAULT_MAX_RESPONSE_BYTES,
                MAX_RESPONSE_BYTES_KEY,
            ),
        })
    }

    /// Reads at most `bytes` of one answer ([`DEFAULT_MAX_RESPONSE_BYTES`] unless changed).
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.limit = AnswerLimit::configured(
            Some(bytes),
            DEFAULT_MAX_RESPONSE_BYTES,
            MAX_RESPONSE_BYTES_KEY,
        );
        self
    }

    /// The base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        token: Option<&SecretValue>,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, ActionError> {
        let what = format!("Synapse {method} {}", without_credentials(&url));
        let mut request = self
            .client
            .request(method, url)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = token {
            request = request.bearer_auth(token.expose());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let unavailable = |e: &reqwest::Error| {
            let f = transport_failure(e, self.tls_key);
            ActionError::Unavailable(match f.cause {
                Some(cause) => format!("{what}: {}: {cause}", f.kind),
                None => format!("{what}: {}", f.kind),
            })
        };
        let response = request.send().await.map_err(|e| unavailable(&e))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = read_capped(response, self.limit, &what)
            .await
            .map_err(|e| match e {
                ReadError::Transport(e) => unavailable(&e),
                too_large => ActionError::InvalidAnswer(too_large.to_string()),
            })?;
        Ok(Answer {
            status,
            content_type,
            body: body_text(body),
        })
    }

    /// The server's `error` (or the body) of an answer that is not a success, for a message:
    /// only of an error answer of a textual type, at most [`QUOTED_BODY_CHARS`] (the rule of
    /// [`quoted_body`]); otherwise why it is not quoted.
    fn detail(answer: &Answer) -> String {
        if let Some(why) = unquotable(answer.status, answer.content_type.as_deref()) {
            return format!("(the body is not quoted: {why})");
        }
        let error = serde_json::from_str::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| {
                let code = v
                    .get("errcode")
                    .and_then(|c| c.as_str())
                    .map(str::to_string);
                let text = v.get("error").and_then(|c| c.as_str()).map(str::to_string);
                match (code, text) {
                    (Some(c), Some(t)) => Some(format!("{c}: {t}")),
                    (c, t) => c.or(t),
                }
            });
        one_line(
            &error.unwrap_or_else(|| answer.body.clone()),
            QUOTED_BODY_CHARS,
        )
    }

    /// A registration nonce. Any answer but a nonce means the endpoint is off (authentication
    /// delegated: MSC3861 / the Matrix Authentication Service); [`ActionError::Refused`]. A
    /// Synapse without a shared secret still hands out nonces (1.163, proven in
    /// e2e/tests/synapse_orphans.rs) and refuses only the registration: see
    /// [`SynapseAdmin::register_admin`].
    pub async fn nonce(&self) -> Result<String, ActionError> {
        let url = self.url(&REGISTER_PATH);
        let answer = self
            .send(reqwest::Method::GET, url.clone(), None, None)
            .await?;
        if answer.status != StatusCode::OK {
            return Err(ActionError::Refused(format!(
                "Synapse at {} refuses shared-secret registration (GET {url} answered {}: {}): the endpoint is off, as when it delegates authentication to the Matrix Authentication Service (MSC3861), where its admin API must not be used; nothing was changed",
                self.base,
                answer.status,
                Self::detail(&answer)
            )));
        }
        serde_json::from_str::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v.get("nonce").and_then(|n| n.as_str()).map(str::to_string))
            .ok_or_else(|| {
                ActionError::InvalidAnswer(format!(
                    "Synapse at {}: GET {url} answered no nonce: {}",
                    self.base,
                    quoted_body(answer.status, answer.content_type.as_deref(), &answer.body)
                ))
            })
    }

    /// Registers `user` (a localpart) as an admin with `password`, through the shared secret.
    pub async fn register_admin(
        &self,
        secret: &SecretValue,
        user: &str,
        password: &SecretValue,
    ) -> Result<Admin, ActionError> {
        let nonce = self.nonce().await?;
        let url = self.url(&REGISTER_PATH);
        let body = serde_json::json!({
            "nonce": nonce,
            "username": user,
            "password": password.expose(),
            "admin": true,
            "mac": registration_mac(secret, &nonce, user, password, true),
        });
        let answer = self
            .send(reqwest::Method::POST, url.clone(), None, Some(&body))
            .await?;
        if answer.status != StatusCode::OK {
            let message = format!(
                "Synapse at {} refused to register the temporary admin {user} (POST {url} answered {}: {})",
                self.base,
                answer.status,
                Self::detail(&answer)
            );
            return Err(match answer.status.as_u16() {
                // A wrong MAC: the shared secret read is not the one Synapse runs with.
                403 => ActionError::Refused(format!(
                    "{message}: the registration shared secret read from homeserver.yaml is not the one Synapse uses (was it changed without a restart?)"
                )),
                // Synapse hands out a nonce either way; without a shared secret of its own it
                // refuses the registration with 400 "Shared secret registration is not enabled".
                400 if answer.body.contains(REGISTRATION_OFF) => ActionError::Refused(format!(
                    "{message}: Synapse runs without a registration shared secret although homeserver.yaml names one (was it changed without a restart?); nothing was changed"
                )),
                status => ActionError::for_status(status, message),
            });
        }
        let read: serde_json::Value = serde_json::from_str(&answer.body).map_err(|_| {
            ActionError::InvalidAnswer(format!(
                "Synapse at {}: the registration of {user} answered something that is not JSON",
                self.base
            ))
        })?;
        let field = |name: &str| read.get(name).and_then(|v| v.as_str()).map(str::to_string);
        match (field("user_id"), field("access_token")) {
            (Some(user_id), Some(token)) => Ok(Admin {
                user_id,
                token: SecretValue::new(token),
            }),
            _ => Err(ActionError::InvalidAnswer(format!(
                "Synapse at {}: the registration of {user} answered no user_id or access_token",
                self.base
            ))),
        }
    }

    /// Deactivates `user_id` as `admin`, erasing it when `erase`.
    pub async fn deactivate(
        &self,
        admin: &Admin,
        user_id: &str,
        erase: bool,
    ) -> Result<(), ActionError> {
        let url = self.url(&["_synapse", "admin", "v1", "deactivate", user_id]);
        let body = serde_json::json!({ "erase": erase });
        let answer = self
            .send(reqwest::Method::POST, url, Some(&admin.token), Some(&body))
            .await?;
        if answer.status == StatusCode::OK {
            return Ok(());
        }
        Err(ActionError::for_status(
            answer.status.as_u16(),
            format!(
                "Synapse at {} answered {} to the deactivation of {user_id}: {}",
                self.base,
                answer.status,
                Self::detail(&answer)
            ),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_an_error_answer_of_a_textual_type_is_quoted_and_at_most_200_characters() {
        let answer = |status: u16, content_type: &str, body: &str| Answer {
            status: StatusCode::from_u16(status).unwrap(),
            content_type: Some(content_type.into()),
            body: body.into(),
        };
        assert_eq!(
            SynapseAdmin::detail(&answer(
                500,
                "application/json",
                r#"{"errcode":"M_UNKNOWN","error":"boom"}"#
            )),
            "M_UNKNOWN: boom"
        );
        let long = SynapseAdmin::detail(&answer(502, "text/plain", &"y".repeat(500)));
        assert_eq!(long, format!("{}...", "y".repeat(200)));
        let redirect = SynapseAdmin::detail(&answer(302, "text/html", "secret login page"));
        assert!(!redirect.contains("secret"), "{redirect}");
        assert!(redirect.contains("not quoted"), "{redirect}");
        let binary = SynapseAdmin::detail(&answer(500, "application/octet-stream", "secret"));
        assert!(!binary.contains("secret"), "{binary}");
    }

    #[test]
    fn the_mac_is_hmac_sha1_over_the_nul_separated_fields() {
        // RFC 2202 test case 2: HMAC-SHA1(key "Jefe", "what do ya want for nothing?").
        // Split at the NULs Synapse inserts, the same bytes are MAC'ed.
        let mac = registration_mac(
            &SecretValue::new("Jefe"),
            "what",
            "do",
            &SecretValue::new("ya"),
            true,
        );
        assert_eq!(mac.len(), 40);
        // The message is "what\0do\0ya\0admin": computed independently with Python's hmac.
        assert_eq!(mac, hmac_reference("Jefe", b"what\x00do\x00ya\x00admin"));
        assert_ne!(
            mac,
            registration_mac(
                &SecretValue::new("Jefe"),
                "what",
                "do",
                &SecretValue::new("ya"),
                false
            ),
            "admin is part of the MAC"
        );
        assert_eq!(
            hmac_reference("Jefe", b"what do ya want for nothing?"),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
            "the reference is RFC 2202's HMAC-SHA1"
        );
    }

    /// HMAC-SHA1 written out from RFC 2104 over `sha1`, to check the MAC against.
    fn hmac_reference(key: &str, message: &[u8]) -> String {
        use sha1::Digest;
        let mut k = [0u8; 64];
        k[..key.len()].copy_from_slice(key.as_bytes());
        let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
        let inner = Sha1::new()
            .chain_update(&ipad)
            .chain_update(message)
            .finalize();
        let outer = Sha1::new()
            .chain_update(&opad)
            .chain_update(inner)
            .finalize();
        outer.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_token_never_shows() {
        let admin = Admin {
            user_id: "@odmigs-1-ab:example.org".into(),
            token: SecretValue::new("syt_secret_token"),
        };
        assert!(!format!("{admin:?}").contains("syt_secret_token"));
    }

    #[tokio::test]
    async fn a_synapse_nobody_runs_is_unavailable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let api = SynapseAdmin::new(
            &format!("http://127.0.0.1:{port}"),
            Duration::from_secs(2),
            &HttpTls::default(),
        )
        .unwrap();
        let e = api.nonce().await.unwrap_err();
        assert!(matches!(e, ActionError::Unavailable(_)), "{e:?}");
        assert!(e.to_string().contains("/_synapse/admin/v1/register"), "{e}");
    }
}
