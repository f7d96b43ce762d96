//! The direct transport: Stagehand's own LDAP connections (TLS through rustls with the ring
//! provider, verified against the system's CA certificates).
//!
//! Binding and searching go through the `ldap3` crate; searches are paged (RFC 2696 simple
//! paged results), so a directory of any size is read without hitting the server's size
//! limit. Modifications go through `super::wire` on a second connection bound as the same
//! DN: pipelined (64 unanswered at a time) and batched into few writes, which is what makes
//! tens of thousands of changes fast. (Starting the changes while the search is still running
//! was measured slower against slapd: its search and its writes compete.)

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream;
use ldap3::adapters::{Adapter, EntriesOnly, PagedResults};
use ldap3::{Ldap, LdapConnAsync, LdapConnSettings, LdapResult, Scope, SearchEntry};
use tokio::task::JoinHandle;

use super::{Directory, Entry, LdapError, Refused, Replace, wire};
use crate::action::SecretValue;
use crate::text::one_line;

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
        }
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
        let conn_settings = LdapConnSettings::new().set_conn_timeout(settings.timeout);
        let connect = LdapConnAsync::with_settings(conn_settings, &url);
        let (conn, mut ldap) = match tokio::time::timeout(settings.timeout, connect).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => {
                return Err(LdapError::Connect {
                    url,
                    message: e.to_string(),
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
        let driver = tokio::spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::warn!(url = %driver_url, error = %e, "LDAP connection ended");
            }
        });
        let directory = Self {
            ldap: ldap.clone(),
            driver,
            url: url.clone(),
            bind_dn: settings.bind_dn.clone(),
            password: settings.password.clone(),
            timeout: settings.timeout,
            max_in_flight: settings.max_in_flight.max(1),
            page_size: settings.page_size.max(1),
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
    /// few writes (see [`super::wire`]); returns the refused ones.
    async fn pipeline(
        &self,
        changes: impl futures::Stream<Item = Replace> + Send,
    ) -> Result<Vec<Refused>, LdapError> {
        let io = wire::connect(&self.url, self.timeout)
            .await
            .map_err(|e| LdapError::Connect {
                url: self.url.clone(),
                message: e.to_string(),
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
            .modify_all(changes, self.max_in_flight, self.timeout)
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
