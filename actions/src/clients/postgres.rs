//! A PostgreSQL connection for the actions that read or change an application's database
//! (Synapse's). TLS follows libpq's `sslmode`s over rustls: `disable` (plain), `prefer` (TLS
//! when the server offers it, else plain), `require` (TLS, the certificate not checked: libpq's
//! meaning), `verify-ca` (TLS, the chain checked against the public web roots and the
//! configured CA bundle, not the host name) and `verify-full` (chain and host name). Errors
//! name the server, database and user, never the password.

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::action::{ActionError, SecretValue};
use crate::clients::tls;
use crate::text::one_line;

/// libpq's `sslmode`s Stagehand speaks (`allow` is not one: it is `prefer` in reverse).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it (its certificate not checked), else plain.
    #[default]
    Prefer,
    /// TLS, the certificate not checked.
    Require,
    /// TLS, the certificate chain checked (public web roots and the CA bundle), not the name.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Where and how to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSettings {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Database name.
    pub dbname: String,
    /// User name.
    pub user: String,
    /// TLS.
    pub ssl_mode: SslMode,
    /// CAs trusted besides the public web roots and the system's store with
    /// `verify-ca`/`verify-full`: a PEM file path or inline PEM ([`tls`]).
    pub ca_bundle: Option<String>,
    /// Bound on connecting and on each statement.
    pub timeout: Duration,
    /// The config key the settings come from, for messages (`synapse.postgres`).
    pub key: String,
    /// The secret file the password comes from, for messages.
    pub password_file: String,
}

impl PgSettings {
    /// `postgresql://user@host:port/db (sslMode prefer)`: what messages name.
    pub fn describe(&self) -> String {
        format!(
            "PostgreSQL {}@{}:{}/{} (sslMode {})",
            self.user, self.host, self.port, self.dbname, self.ssl_mode
        )
    }
}

/// A connected client; the connection's task ends when it is dropped.
pub struct PgClient {
    client: tokio_postgres::Client,
    target: String,
    timeout: Duration,
}

impl fmt::Debug for PgClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.target)
    }
}

/// The rustls client config of a TLS `mode` (not `disable`): [`tls::client_config`], the
/// check libpq's mode asks for.
fn tls_config(settings: &PgSettings) -> Result<rustls::ClientConfig, ActionError> {
    let verify = match settings.ssl_mode {
        SslMode::Disable | SslMode::Prefer | SslMode::Require => tls::Verify::Nothing,
        SslMode::VerifyCa => tls::Verify::ChainOnly,
        SslMode::VerifyFull => tls::Verify::Full,
    };
    tls::client_config(&settings.key, settings.ca_bundle.as_deref(), verify)
        .map_err(|e| ActionError::from(e).map_message(|m| format!("{}: {m}", settings.describe())))
}

/// The action error of a failed statement or connection: a refused password or a missing
/// grant `Refused` (naming the secret file), a missing table `NotFound`, a server that is not
/// there or went away `Unavailable`, anything else `Failed`. `what` says what was being done.
pub fn pg_error(settings: &PgSettings, what: &str, e: &tokio_postgres::Error) -> ActionError {
    let target = settings.describe();
    let text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    };
    let message = format!("{target}, {what}: {}", one_line(&text, 400));
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            ActionError::Refused(format!(
                "{message} (check {}.user and the secret file {:?})",
                settings.key, settings.password_file
            ))
        }
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => ActionError::Refused(message),
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            ActionError::NotFound(format!("{message} (check {}.name)", settings.key))
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::UNDEFINED_COLUMN => {
            ActionError::NotFound(message)
        }
        Some(_) => ActionError::Failed(message),
        // No server error: the connection failed, broke or timed out.
        None => ActionError::Unavailable(message),
    }
}

impl PgClient {
    /// Connects and authenticates with `password`.
    pub async fn connect(
        settings: &PgSettings,
        password: &SecretValue,
    ) -> Result<Self, ActionError> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&settings.host)
            .port(settings.port)
            .dbname(&settings.dbname)
            .user(&settings.user)
            .password(password.expose())
            .application_name("stagehand")
            .connect_timeout(settings.timeout)
            .ssl_mode(match settings.ssl_mode {
                SslMode::Disable => tokio_postgres::config::SslMode::Disable,
                SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                _ => tokio_postgres::config::SslMode::Require,
            });
        let connecting = "connecting";
        let timed_out = || {
            ActionError::Unavailable(format!(
                "{}: no connection within {} s",
                settings.describe(),
                settings.timeout.as_secs()
            ))
        };
        let client = if settings.ssl_mode == SslMode::Disable {
            let (client, connection) =
                tokio::time::timeout(settings.timeout, config.connect(NoTls))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| pg_error(settings, connecting, &e))?;
            tokio::spawn(connection);
            client
        } else {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(settings)?);
            let (client, connection) = tokio::time::timeout(settings.timeout, config.connect(tls))
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| pg_error(settings, connecting, &e))?;
            tokio::spawn(connection);
            client
        };
        Ok(Self {
            client,
            target: settings.describe(),
            timeout: settings.timeout,
        })
    }

    /// What the client is connected to.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Runs a query (bounded by the timeout); `what` names it in errors.
    pub async fn query(
        &self,
        settings: &PgSettings,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, ActionError> {
        tokio::time::timeout(self.timeout, self.client.query(sql, params))
            .await
            .map_err(|_| self.timed_out(what))?
            .map_err(|e| pg_error(settings, what, &e))
    }

    /// Runs a statement and answers the rows it affected.
    pub async fn execute(
        &self,
        settings: &PgSettings,
        what: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, ActionError> {
        tokio::time::timeout(self.timeout, self.client.execute(sql, params))
            .await
            .map_err(|_| self.timed_out(what))?
            .map_err(|e| pg_error(settings, what, &e))
    }

    fn timed_out(&self, what: &str) -> ActionError {
        ActionError::Unavailable(format!(
            "{}, {what}: no answer within {} s",
            self.target,
            self.timeout.as_secs()
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn settings(mode: SslMode, bundle: Option<&str>) -> PgSettings {
        PgSettings {
            host: "postgresql".into(),
            port: 5432,
            dbname: "matrix".into(),
            user: "matrix_user".into(),
            ssl_mode: mode,
            ca_bundle: bundle.map(str::to_string),
            timeout: Duration::from_secs(5),
            key: "synapse.postgres".into(),
            password_file: "synapse-db-password".into(),
        }
    }

    #[test]
    fn ssl_modes_read_and_print_as_libpq_names_them() {
        for (text, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            let read: SslMode = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(read, mode);
            assert_eq!(mode.to_string(), text);
        }
        assert!(serde_json::from_value::<SslMode>(serde_json::json!("allow")).is_err());
    }

    #[test]
    fn every_tls_mode_builds_and_a_bad_bundle_names_its_key() {
        for mode in [
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert!(tls_config(&settings(mode, None)).is_ok(), "{mode}");
        }
        let bad = "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
        let e = tls_config(&settings(SslMode::VerifyFull, Some(bad))).unwrap_err();
        assert!(
            e.to_string()
                .contains("synapse.postgres.caBundle (inline PEM) is not a readable PEM"),
            "{e}"
        );
        // A path is read when the client is built; a missing file is named with its key.
        let e = tls_config(&settings(SslMode::VerifyCa, Some("/nonexistent/ca.crt"))).unwrap_err();
        assert!(matches!(e, ActionError::NotFound(_)), "{e:?}");
        assert!(
            e.to_string()
                .contains("synapse.postgres.caBundle \"/nonexistent/ca.crt\": no such file"),
            "{e}"
        );
        // The unverified modes read no bundle.
        assert!(tls_config(&settings(SslMode::Require, Some("/nonexistent/ca.crt"))).is_ok());
        assert_eq!(
            settings(SslMode::Prefer, None).describe(),
            "PostgreSQL matrix_user@postgresql:5432/matrix (sslMode prefer)"
        );
    }

    #[tokio::test]
    async fn a_server_nobody_runs_is_unavailable_and_the_password_is_never_named() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = settings(SslMode::Disable, None);
        s.host = "127.0.0.1".into();
        s.port = port;
        let e = PgClient::connect(&s, &SecretValue::new("hunter2-secret"))
            .await
            .unwrap_err();
        assert!(matches!(e, ActionError::Unavailable(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("matrix_user@127.0.0.1"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
