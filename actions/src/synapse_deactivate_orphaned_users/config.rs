//! The action's config: openDesk v1.19's keys unchanged (`ldap.pod`, `ldap.container`,
//! `synapse.connection.url`, `synapse.dryRun`, `synapse.erase`, `synapse.postgres.*`,
//! `safety.maxOrphanPercent`) with the rendered defaults, plus optional keys of Stagehand's own
//! (where the Synapse pod's configuration is, the LDAP base and socket, a CA bundle, timeouts).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::ConfigIssue;

use crate::action::ActionConfig;
use crate::action::Warnings;
use crate::clients::http::{HttpTls, api_url};
use crate::clients::ldap::exec::POD_LDAPI_URL;
use crate::clients::postgres::{PgSettings, SslMode};
use crate::clients::tls::ca_bundle_issue;

/// The secret file with the password of `synapse.postgres.user`.
pub const DB_PASSWORD_FILE: &str = "synapse-db-password";

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The IAM's directory, read through `ldapsearch` in its pod.
    #[serde(default)]
    pub ldap: LdapSide,
    /// The previous Synapse and its database.
    #[serde(default)]
    pub synapse: Synapse,
    /// The bound on what an apply deactivates.
    #[serde(default)]
    pub safety: Safety,
}

impl ActionConfig for Config {
    const ID: &'static str = "synapse_deactivate_orphaned_users";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut issue = |path: &str, message: String| {
            issues.push(ConfigIssue {
                path: path.into(),
                message,
            })
        };
        if let Err(e) = api_url("Synapse", &self.synapse.connection.url) {
            issue("synapse.connection.url", e.to_string());
        }
        for tls in self
            .synapse
            .connection
            .tls(&Warnings::default())
            .issues("synapse.connection", &self.synapse.connection.url)
        {
            issue(&tls.path, tls.message);
        }
        let percent = self.safety.max_orphan_percent;
        if !(0.0..=100.0).contains(&percent) || percent.is_nan() {
            issue(
                "safety.maxOrphanPercent",
                format!("{percent} is not a percentage: give a number from 0 to 100"),
            );
        }
        if !self.ldap.ldapi_url.starts_with("ldapi://") {
            issue(
                "ldap.ldapiUrl",
                format!(
                    "{:?} is not an ldapi:// URL: ldapsearch binds with SASL EXTERNAL over the server's local socket",
                    self.ldap.ldapi_url
                ),
            );
        }
        if let Some(pem) = &self.synapse.postgres.ca_bundle {
            if matches!(
                self.synapse.postgres.ssl_mode,
                SslMode::Disable | SslMode::Prefer | SslMode::Require
            ) {
                issue(
                    "synapse.postgres.caBundle",
                    format!(
                        "a CA bundle is only used to verify the server: set synapse.postgres.sslMode to verify-ca or verify-full (it is {}) or remove the bundle",
                        self.synapse.postgres.ssl_mode
                    ),
                );
            } else if let Some(problem) = ca_bundle_issue(pem) {
                issue("synapse.postgres.caBundle", problem);
            }
        }
        issues
    }
}

/// The directory side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LdapSide {
    /// The pod running the primary LDAP server.
    #[serde(default = "LdapSide::default_pod")]
    #[schemars(length(min = 1))]
    pub pod: String,
    /// The container within the pod.
    #[serde(default = "LdapSide::default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// The base DN the users are searched below; left out, the server's root DSE names it
    /// (`namingContexts`, every one searched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub base_dn: Option<String>,
    /// The socket `ldapsearch` connects to inside the container.
    #[serde(default = "LdapSide::default_ldapi_url")]
    #[schemars(length(min = 1))]
    pub ldapi_url: String,
    /// Timeout of the preflight's read-only search.
    #[serde(default = "LdapSide::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl LdapSide {
    fn default_pod() -> String {
        "ums-ldap-server-primary-0".into()
    }
    fn default_container() -> String {
        "main".into()
    }
    fn default_ldapi_url() -> String {
        POD_LDAPI_URL.into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Default for LdapSide {
    fn default() -> Self {
        Self {
            pod: Self::default_pod(),
            container: Self::default_container(),
            base_dn: None,
            ldapi_url: Self::default_ldapi_url(),
            request_timeout_seconds: Self::default_timeout(),
        }
    }
}

/// The previous Synapse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Synapse {
    /// Its HTTP API.
    #[serde(default)]
    pub connection: Connection,
    /// Report what would be deactivated and deactivate nothing.
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// Erase the accounts deactivated (display name, avatar, marked erased).
    #[serde(default = "yes")]
    pub erase: bool,
    /// Its database.
    #[serde(default)]
    pub postgres: Postgres,
    /// The pod whose configuration holds the registration shared secret.
    #[serde(default = "Synapse::default_pod")]
    #[schemars(length(min = 1))]
    pub pod: String,
    /// The container within that pod.
    #[serde(default = "Synapse::default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// Synapse's configuration file in that container.
    #[serde(default = "Synapse::default_config_path")]
    #[schemars(length(min = 1))]
    pub config_path: String,
}

fn yes() -> bool {
    true
}

impl Synapse {
    fn default_pod() -> String {
        "opendesk-synapse-0".into()
    }
    fn default_container() -> String {
        "synapse".into()
    }
    fn default_config_path() -> String {
        "/config/homeserver.yaml".into()
    }
}

impl Default for Synapse {
    fn default() -> Self {
        Self {
            connection: Connection::default(),
            dry_run: true,
            erase: true,
            postgres: Postgres::default(),
            pod: Self::default_pod(),
            container: Self::default_container(),
            config_path: Self::default_config_path(),
        }
    }
}

/// Synapse's HTTP API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connection {
    /// The API's base URL.
    #[serde(default = "Connection::default_url")]
    #[schemars(length(min = 1))]
    pub url: String,
    /// Timeout of one request (a deactivation with erase can take seconds).
    #[serde(default = "Connection::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// Deactivations in flight at once.
    #[serde(default = "Connection::default_concurrency")]
    #[schemars(range(min = 1, max = 64))]
    pub concurrency: usize,
    /// The most bytes read of one answer (1 MiB when left out); a larger answer fails the
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

impl Connection {
    /// How the admin API's client checks its certificate (`synapse.connection.caBundle`,
    /// `synapse.connection.insecureSkipTlsVerify`), recording a check turned off in
    /// `warnings`.
    pub fn tls(&self, warnings: &Warnings) -> HttpTls {
        HttpTls::new(
            "synapse.connection",
            self.ca_bundle.as_deref(),
            self.insecure_skip_tls_verify,
            warnings,
        )
    }
}

impl Connection {
    fn default_url() -> String {
        "http://opendesk-synapse:8008".into()
    }
    fn default_timeout() -> u64 {
        120
    }
    fn default_concurrency() -> usize {
        4
    }
}

impl Default for Connection {
    fn default() -> Self {
        Self {
            url: Self::default_url(),
            request_timeout_seconds: Self::default_timeout(),
            concurrency: Self::default_concurrency(),
            max_response_bytes: None,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
        }
    }
}

/// Synapse's PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Postgres {
    /// Host.
    #[serde(default = "Postgres::default_host")]
    #[schemars(length(min = 1))]
    pub host: String,
    /// Port.
    #[serde(default = "Postgres::default_port")]
    #[schemars(range(min = 1))]
    pub port: u16,
    /// Database name.
    #[serde(default = "Postgres::default_name")]
    #[schemars(length(min = 1))]
    pub name: String,
    /// User; the password is the `synapse-db-password` secret file.
    #[serde(default = "Postgres::default_user")]
    #[schemars(length(min = 1))]
    pub user: String,
    /// libpq's sslmode.
    #[serde(default)]
    pub ssl_mode: SslMode,
    /// Extra CAs for `verify-ca`/`verify-full`: a PEM file path (openDesk's
    /// `/etc/opendesk/trust/ca-certificates.crt`) or the PEM text itself (starting with
    /// `-----BEGIN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Timeout of connecting and of each statement.
    #[serde(default = "Postgres::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl Postgres {
    fn default_host() -> String {
        "postgresql".into()
    }
    fn default_port() -> u16 {
        5432
    }
    fn default_name() -> String {
        "matrix".into()
    }
    fn default_user() -> String {
        "matrix_user".into()
    }
    fn default_timeout() -> u64 {
        60
    }

    /// The client's settings.
    pub fn settings(&self) -> PgSettings {
        PgSettings {
            host: self.host.clone(),
            port: self.port,
            dbname: self.name.clone(),
            user: self.user.clone(),
            ssl_mode: self.ssl_mode,
            ca_bundle: self.ca_bundle.clone(),
            timeout: Duration::from_secs(self.request_timeout_seconds.max(1)),
            key: "synapse.postgres".into(),
            password_file: DB_PASSWORD_FILE.into(),
        }
    }
}

impl Default for Postgres {
    fn default() -> Self {
        Self {
            host: Self::default_host(),
            port: Self::default_port(),
            name: Self::default_name(),
            user: Self::default_user(),
            ssl_mode: SslMode::default(),
            ca_bundle: None,
            request_timeout_seconds: Self::default_timeout(),
        }
    }
}

/// The bound on what an apply deactivates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Safety {
    /// An apply refuses when the orphaned accounts are more than this share (percent) of the
    /// active OIDC-bound accounts.
    #[serde(default = "Safety::default_max")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub max_orphan_percent: f64,
}

impl Safety {
    fn default_max() -> f64 {
        25.0
    }
}

impl Default for Safety {
    fn default() -> Self {
        Self {
            max_orphan_percent: Self::default_max(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn opendesks_rendered_block_reads_with_its_values_and_the_defaults() {
        let c: Config = serde_json::from_value(serde_json::json!({
            "ldap": {"pod": "ums-ldap-server-primary-0", "container": "main"},
            "synapse": {
                "connection": {"url": "http://opendesk-synapse.opendesk.svc.cluster.local:8008"},
                "dryRun": true, "erase": true,
                "postgres": {"host": "postgresql", "port": 5432, "name": "matrix",
                             "user": "matrix_user", "sslMode": "prefer"}
            },
            "safety": {"maxOrphanPercent": 25}
        }))
        .unwrap();
        assert!(c.semantic_issues().is_empty(), "{:?}", c.semantic_issues());
        assert_eq!(c.synapse.pod, "opendesk-synapse-0");
        assert_eq!(c.synapse.container, "synapse");
        assert_eq!(c.synapse.config_path, "/config/homeserver.yaml");
        assert_eq!(c.ldap.ldapi_url, "ldapi:///");
        assert_eq!(c.ldap.base_dn, None);
        assert!((c.safety.max_orphan_percent - 25.0).abs() < f64::EPSILON);
        let d = Config::default();
        assert!(d.synapse.dry_run && d.synapse.erase, "safe defaults");
    }

    #[test]
    fn bad_values_are_named_by_key() {
        let c: Config = serde_json::from_value(serde_json::json!({
            "ldap": {"ldapiUrl": "ldap://x"},
            "synapse": {"connection": {"url": "opendesk-synapse:8008"},
                        "postgres": {"caBundle": "x"}},
            "safety": {"maxOrphanPercent": 150}
        }))
        .unwrap();
        let paths: Vec<String> = c.semantic_issues().into_iter().map(|i| i.path).collect();
        assert_eq!(
            paths,
            [
                "synapse.connection.url",
                "safety.maxOrphanPercent",
                "ldap.ldapiUrl",
                "synapse.postgres.caBundle"
            ]
        );
        assert!(
            serde_json::from_value::<Config>(serde_json::json!({"synapse": {"token": 1}})).is_err()
        );
    }
}
