//! The direct transport: Stagehand's own LDAP connections, plain, over `ldaps://` or upgraded
//! with StartTLS (`tls: none|starttls|ldaps`), TLS through rustls with the ring provider as
//! [`crate::clients::tls`] sets it up: the public web roots, the system's store and
//! `ldap.caBundle`; `ldap.insecureSkipTlsVerify` skips the check and warns.
//!
//! Binding and searching go through the `ldap3` crate; searches are paged (RFC 2696 simple
//! paged results), so a directory of any size is read without hitting the server's size
//! limit. Modifications go through `super::wire` on a second connection bound as the same
//! DN: pipelined (64 unanswered at a time) and batched into few writes, which is what makes
//! tens of thousands of changes fast. (Starting the changes while the search is still running
//! was measured slower against slapd: its search and its writes compete.)

use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use futures::future::BoxFuture;
use futures::stream;
use ldap3::adapters::{Adapter, EntriesOnly, PagedResults};
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapResult, Scope, SearchEntry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

use super::{Directory, Entry, LdapError, Refused, Replace, wire};
use crate::action::{Progress, SecretValue, Warnings};
use crate::clients::tls;
use crate::text::one_line;

/// How the direct transport secures its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LdapTls {
    /// Plain LDAP (`ldap://`, `ldapi://`).
    None,
    /// `ldap://`, upgraded to TLS with the StartTLS operation before the bind.
    Starttls,
    /// TLS from the start (`ldaps://`).
    Ldaps,
}

impl fmt::Display for LdapTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LdapTls::None => "none",
            LdapTls::Starttls => "starttls",
            LdapTls::Ldaps => "ldaps",
        })
    }
}

impl LdapTls {
    /// The mode of `url` given the configured `tls`: left out, the scheme's (`ldaps://` is
    /// `ldaps`, `ldap://` and `ldapi://` are `none`); a `tls` the scheme contradicts is an
    /// error saying what to write instead.
    pub fn resolve(url: &str, tls: Option<LdapTls>) -> Result<LdapTls, String> {
        let scheme = url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase())
            .unwrap_or_default();
        let implied = if scheme == "ldaps" {
            LdapTls::Ldaps
        } else {
            LdapTls::None
        };
        let Some(tls) = tls else {
            return Ok(implied);
        };
        let fits = match scheme.as_str() {
            "ldaps" => tls == LdapTls::Ldaps,
            "ldap" => tls != LdapTls::Ldaps,
            _ => tls == LdapTls::None,
        };
        if fits {
            Ok(tls)
        } else {
            Err(format!(
                "tls: {tls} contradicts the URL {url:?}: ldaps:// is tls: ldaps, ldap:// is tls: none or starttls, ldapi:// is tls: none"
            ))
        }
    }
}

/// How to reach and bind to the server.
#[derive(Debug, Clone)]
pub struct DirectSettings {
    /// `ldap://host:389`, `ldaps://host:636` or `ldapi://<url-encoded socket path>`.
    pub url: String,
    /// The DN to bind as (simple bind).
    pub bind_dn: String,
    /// Its password.
    pub password: SecretValue,
    /// Timeout of connecting and of each request (a search page, a modification).
    pub timeout: Duration,
    /// How many modifications are in flight on the connection at once.
    pub max_in_flight: usize,
    /// Entries per page of a search.
    pub page_size: i32,
    /// TLS; `None`: as the URL's scheme says ([`LdapTls::resolve`]).
    pub tls: Option<LdapTls>,
    /// `ldap.caBundle`: a PEM file path or inline PEM ([`tls`]).
    pub ca_bundle: Option<String>,
    /// Do not verify the server's certificate (recorded as a warning of the run).
    pub insecure_skip_tls_verify: bool,
    /// Where the warning of an unverified certificate goes.
    pub warnings: Warnings,
    /// Where the modifications the server answered are counted (the action's reporter).
    pub progress: Progress,
}

impl DirectSettings {
    /// Settings with the defaults: 30 s timeout, 64 modifications in flight, pages of 1,000.
    pub fn new(url: impl Into<String>, bind_dn: impl Into<String>, password: SecretValue) -> Self {
        Self {
            url: url.into(),
            bind_dn: bind_dn.into(),
            password,
            timeout: Duration::from_secs(30),
            max_in_flight: 64,
            page_size: 1000,
            tls: None,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
            warnings: Warnings::default(),
            progress: Progress::default(),
        }
    }

    /// The TLS set-up of a connection in `mode`: `None` for plain LDAP; the bundle is read and
    /// an unverified certificate recorded as a warning here.
    fn wire_tls(&self, mode: LdapTls) -> Result<Option<wire::WireTls>, LdapError> {
        if mode == LdapTls::None {
            return Ok(None);
        }
        let verify = if self.insecure_skip_tls_verify {
            self.warnings.warn(tls::insecure_warning(
                "ldap.insecureSkipTlsVerify",
                &self.url,
            ));
            tls::Verify::Nothing
        } else {
            tls::Verify::Full
        };
        let config = tls::client_config("ldap", self.ca_bundle.as_deref(), verify)
            .map_err(|e| LdapError::Config(e.to_string()))?;
        Ok(Some(wire::WireTls {
            config: Arc::new(config),
            starttls: mode == LdapTls::Starttls,
        }))
    }
}

/// `message` and, when it names a certificate problem, what to do about it.
fn with_certificate_hint(message: String) -> String {
    match tls::certificate_hint("ldap", &message) {
        Some(hint) => format!("{message}: {hint}"),
        None => message,
    }
}

/// A bound connection to an LDAP server. The connection closes when this is dropped.
pub struct DirectDirectory {
    ldap: Ldap,
    driver: JoinHandle<()>,
    url: String,
    bind_dn: String,
    password: SecretValue,
    timeout: Duration,
    max_in_flight: usize,
    page_size: i32,
    tls: Option<wire::WireTls>,
    progress: Progress,
}

impl fmt::Debug for DirectDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectDirectory")
            .field("url", &self.url)
            .field("bind_dn", &self.bind_dn)
            .finish()
    }
}

impl Drop for DirectDirectory {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl DirectDirectory {
    /// Connects and binds; fails naming the server (and the bind DN when the bind is refused).
    pub async fn connect(settings: &DirectSettings) -> Result<Self, LdapError> {
        let url = settings.url.clone();
        if !["ldap://", "ldaps://", "ldapi://"]
            .iter()
            .any(|scheme| url.starts_with(scheme))
        {
            return Err(LdapError::Config(format!(
                "ldap.url {url:?} is not an LDAP URL: use ldap://host:389, ldaps://host:636 or ldapi://<socket>"
            )));
        }
        let mode = LdapTls::resolve(&url, settings.tls)
            .map_err(|e| LdapError::Config(format!("ldap.{e}")))?;
        let tls = settings.wire_tls(mode)?;
        let mut conn_settings = LdapConnSettings::new().set_conn_timeout(settings.timeout);
        if let Some(tls) = &tls {
            conn_settings = conn_settings
                .set_config(tls.config.clone())
                .set_starttls(tls.starttls);
        }
        let connect = LdapConnAsync::with_settings(conn_settings, &url);
        let (conn, mut ldap) = match tokio::time::timeout(settings.timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                let message = match mode {
                    LdapTls::Starttls => format!("StartTLS: {e}"),
                    LdapTls::Ldaps => format!("TLS: {e}"),
                    LdapTls::None => e.to_string(),
                };
                return Err(LdapError::Connect {
                    url,
                    message: with_certificate_hint(message),
                });
            }
            Err(_) => {
                return Err(LdapError::Connect {
                    url,
                    message: format!("no connection after {}s", settings.timeout.as_secs()),
                });
            }
        };
        let driver_url = url.clone();
        // In the action's span: its line carries the run and the action.
        let driver = tokio::spawn(
            async move {
                if let Err(e) = conn.drive().await {
                    tracing::warn!(url = %driver_url, error = %e, "LDAP connection ended");
                }
            }
            .in_current_span(),
        );
        let directory = Self {
            ldap: ldap.clone(),
            driver,
            url: url.clone(),
            bind_dn: settings.bind_dn.clone(),
            password: settings.password.clone(),
            timeout: settings.timeout,
            max_in_flight: settings.max_in_flight.max(1),
            page_size: settings.page_size.max(1),
            tls,
            progress: settings.progress.clone(),
        };
        let bound = ldap
            .with_timeout(settings.timeout)
            .simple_bind(&settings.bind_dn, settings.password.expose())
            .await;
        match bound {
            Ok(result) if result.rc == 0 => Ok(directory),
            Ok(result) => Err(LdapError::Bind {
                url,
                bind_dn: settings.bind_dn.clone(),
                message: result_message(&result),
            }),
            Err(e) => Err(LdapError::Connect {
                url,
                message: format!("binding as {}: {e}", settings.bind_dn),
            }),
        }
    }

    /// A paged subtree search; hands each entry to `each` as it arrives.
    async fn search_paged_each(
        &self,
        base: &str,
        filter: &str,
        attrs: &[&str],
        mut each: impl FnMut(Entry) + Send,
    ) -> Result<(), LdapError> {
        let fail = |message: String, code: Option<u32>| LdapError::Search {
            server: self.describe(),
            base: base.to_string(),
            filter: filter.to_string(),
            message,
            code,
        };
        let mut ldap = self.ldap.clone();
        ldap.with_timeout(self.timeout);
        let adapters: Vec<Box<dyn Adapter<'_, &str, Vec<&str>>>> = vec![
            Box::new(EntriesOnly::new()),
            Box::new(PagedResults::new(self.page_size)),
        ];
        let mut search = ldap
            .streaming_search_with(adapters, base, Scope::Subtree, filter, attrs.to_vec())
            .await
            .map_err(|e| fail(e.to_string(), None))?;
        loop {
            match search.next().await {
                Ok(Some(raw)) => each(entry_of(SearchEntry::construct(raw))),
                Ok(None) => break,
                Err(e) => {
                    let _ = search.finish().await;
                    return Err(fail(e.to_string(), None));
                }
            }
        }
        let result = search.finish().await;
        if result.rc != 0 {
            return Err(fail(result_message(&result), Some(result.rc)));
        }
        Ok(())
    }

    /// Sends every change of `changes` as a modify/replace on a connection of its own
    /// (bound as the same DN), `max_in_flight` unanswered at a time, requests batched into
    /// few writes (see [`super::wire`]), each answer counted in the settings' `progress`;
    /// returns the refused ones.
    async fn pipeline(
        &self,
        changes: impl futures::Stream<Item = Replace> + Send,
    ) -> Result<Vec<Refused>, LdapError> {
        let io = wire::connect(&self.url, self.timeout, self.tls.as_ref())
            .await
            .map_err(|e| LdapError::Connect {
                url: self.url.clone(),
                message: with_certificate_hint(e.to_string()),
            })?;
        let bound = wire::bind(io, &self.bind_dn, self.password.expose(), self.timeout)
            .await
            .map_err(|failure| match failure {
                wire::BindFailure::Refused(code, text) => LdapError::Bind {
                    url: self.url.clone(),
                    bind_dn: self.bind_dn.clone(),
                    message: code_message(code, &text),
                },
                wire::BindFailure::Broken(message) => LdapError::Connect {
                    url: self.url.clone(),
                    message: format!("binding as {}: {message}", self.bind_dn),
                },
            })?;
        let (_answered, outcomes) = bound
            .modify_all(changes, self.max_in_flight, self.timeout, &self.progress)
            .await
            .map_err(|e| LdapError::Modify {
                server: self.describe(),
                message: e.to_string(),
            })?;
        let mut refused = wire::refused(outcomes, code_message);
        refused.sort_by(|a, b| a.dn.cmp(&b.dn));
        Ok(refused)
    }
}

fn entry_of(found: SearchEntry) -> Entry {
    let mut entry = Entry::new(found.dn);
    for (attr, values) in found.attrs {
        for value in values {
            entry.push(&attr, value);
        }
    }
    for (attr, values) in found.bin_attrs {
        for value in values {
            entry.push(&attr, String::from_utf8_lossy(&value).into_owned());
        }
    }
    entry
}

/// The name of an LDAP result code (RFC 4511 appendix A), for messages.
fn result_name(rc: u32) -> &'static str {
    match rc {
        0 => "success",
        1 => "operationsError",
        2 => "protocolError",
        3 => "timeLimitExceeded",
        4 => "sizeLimitExceeded",
        7 => "authMethodNotSupported",
        8 => "strongerAuthRequired",
        10 => "referral",
        11 => "adminLimitExceeded",
        12 => "unavailableCriticalExtension",
        13 => "confidentialityRequired",
        16 => "noSuchAttribute",
        17 => "undefinedAttributeType",
        18 => "inappropriateMatching",
        19 => "constraintViolation",
        20 => "attributeOrValueExists",
        21 => "invalidAttributeSyntax",
        32 => "noSuchObject",
        34 => "invalidDNSyntax",
        48 => "inappropriateAuthentication",
        49 => "invalidCredentials",
        50 => "insufficientAccessRights",
        51 => "busy",
        52 => "unavailable",
        53 => "unwillingToPerform",
        64 => "namingViolation",
        65 => "objectClassViolation",
        66 => "notAllowedOnNonLeaf",
        67 => "notAllowedOnRDN",
        69 => "objectClassModsProhibited",
        80 => "other",
        _ => "unknown result code",
    }
}

/// `insufficientAccessRights (50): <the server's text>`.
fn code_message(rc: u32, text: &str) -> String {
    let text = one_line(text, 300);
    if text.is_empty() {
        format!("{} ({rc})", result_name(rc))
    } else {
        format!("{} ({rc}): {text}", result_name(rc))
    }
}

fn result_message(result: &LdapResult) -> String {
    code_message(result.rc, &result.text)
}

impl Directory for DirectDirectory {
    fn describe(&self) -> String {
        format!("{} as {}", self.url, self.bind_dn)
    }

    fn search<'a>(
        &'a self,
        base: &'a str,
        filter: &'a str,
        attrs: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Entry>, LdapError>> {
        Box::pin(async move {
            let mut found = Vec::new();
            self.search_paged_each(base, filter, attrs, |e| found.push(e))
                .await?;
            Ok(found)
        })
    }

    fn replace<'a>(
        &'a self,
        changes: &'a [Replace],
    ) -> BoxFuture<'a, Result<Vec<Refused>, LdapError>> {
        Box::pin(self.pipeline(stream::iter(changes.to_vec())))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn result_messages_name_the_code() {
        let result = LdapResult {
            rc: 50,
            matched: String::new(),
            text: "no write access\nto entry".into(),
            refs: vec![],
            ctrls: vec![],
        };
        assert_eq!(
            result_message(&result),
            "insufficientAccessRights (50): no write access to entry"
        );
        let bare = LdapResult {
            rc: 49,
            text: String::new(),
            ..result
        };
        assert_eq!(result_message(&bare), "invalidCredentials (49)");
    }

    #[test]
    fn the_tls_mode_follows_the_scheme_and_a_contradiction_is_refused() {
        use LdapTls::{Ldaps, None as Plain, Starttls};
        assert_eq!(LdapTls::resolve("ldaps://h:636", None), Ok(Ldaps));
        assert_eq!(LdapTls::resolve("ldap://h:389", None), Ok(Plain));
        assert_eq!(LdapTls::resolve("ldapi:///", None), Ok(Plain));
        assert_eq!(LdapTls::resolve("ldap://h", Some(Starttls)), Ok(Starttls));
        assert_eq!(LdapTls::resolve("LDAPS://h", Some(Ldaps)), Ok(Ldaps));
        for (url, tls) in [
            ("ldaps://h", Plain),
            ("ldaps://h", Starttls),
            ("ldap://h", Ldaps),
            ("ldapi:///", Starttls),
        ] {
            let e = LdapTls::resolve(url, Some(tls)).unwrap_err();
            assert!(e.contains(&format!("tls: {tls} contradicts")), "{e}");
        }
        let mode: LdapTls = serde_json::from_value(serde_json::json!("starttls")).unwrap();
        assert_eq!(mode, Starttls);
    }

    #[tokio::test]
    async fn refuses_urls_that_are_not_ldap() {
        let settings = DirectSettings::new("http://x", "cn=admin", SecretValue::new("pw"));
        let err = DirectDirectory::connect(&settings).await.unwrap_err();
        assert!(err.to_string().contains("not an LDAP URL"), "{err}");
    }

    #[tokio::test]
    async fn connection_refused_names_the_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("ldap://127.0.0.1:{port}");
        let settings = DirectSettings::new(url.clone(), "cn=admin", SecretValue::new("pw"));
        let err = DirectDirectory::connect(&settings).await.unwrap_err();
        assert!(err.to_string().contains(&url), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }
}
