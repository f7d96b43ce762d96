//! Config sections several actions declare (the UDM REST API, the LDAP base, the LDAP pod,
//! the handover, OX SOAP), with the reference's defaults, what such an action needs from its
//! run, and what each section knows of itself: what is wrong with it (checked without building
//! a client) and the client it describes.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::{ConfigIssue, Endpoint, Needs};

use crate::action::{ActionContext, ActionError, Warnings};
use crate::clients::http::HttpTls;
use crate::clients::ldap::Directory;
use crate::clients::ldap::direct::{DirectDirectory, DirectSettings, LdapTls};
use crate::clients::ldap::exec::{ExecDirectory, KubeExec, POD_LDAPI_URL};
use crate::clients::ox::OxClient;
use crate::clients::udm::UdmClient;

/// What an action that reads these secret files (and hands nothing over) needs from its run.
pub fn needs_secrets<S: Into<String>>(files: impl IntoIterator<Item = S>) -> Needs {
    Needs {
        secret_files: files.into_iter().map(Into::into).collect(),
        handover: None,
    }
}

/// The secret file with the password of `udm.username`.
pub const UDM_PASSWORD_FILE: &str = "udm-admin-password";

/// The UDM REST API of the IAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Udm {
    /// The API's base URL.
    #[serde(default = "Udm::default_url")]
    #[schemars(length(min = 1))]
    pub url: String,
    /// The user to authenticate as (HTTP basic); the password is the `udm-admin-password`
    /// secret file.
    #[serde(default = "Udm::default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "Udm::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// The most bytes read of one answer (16 MiB when left out); a larger answer fails the
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

impl Udm {
    fn default_url() -> String {
        "http://ums-udm-rest-api:9979/univention/udm/".into()
    }
    fn default_username() -> String {
        "cn=admin".into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Udm {
    /// The API's endpoint (`udm.url`).
    pub fn endpoints(&self) -> Vec<Endpoint> {
        Endpoint::from_url("udm.url", &self.url)
            .into_iter()
            .collect()
    }

    /// What is wrong with the section at `at`: a `url` the client would refuse
    /// ([`UdmClient::check_url`]).
    pub fn issues(&self, at: &str) -> Vec<ConfigIssue> {
        let mut issues = match UdmClient::check_url(&self.url) {
            Ok(_) => Vec::new(),
            Err(e) => vec![ConfigIssue {
                path: format!("{at}.url"),
                message: e.to_string(),
            }],
        };
        issues.extend(self.tls(&Warnings::default()).issues(at, &self.url));
        issues
    }

    /// How the client checks the API's certificate (`udm.caBundle`,
    /// `udm.insecureSkipTlsVerify`), recording a check turned off in `warnings`.
    pub fn tls(&self, warnings: &Warnings) -> HttpTls {
        HttpTls::new(
            "udm",
            self.ca_bundle.as_deref(),
            self.insecure_skip_tls_verify,
            warnings,
        )
    }

    /// The client of the API, with the password of `username` from [`UDM_PASSWORD_FILE`].
    pub fn client(&self, ctx: &ActionContext) -> Result<UdmClient, ActionError> {
        let password = ctx.secrets.get(UDM_PASSWORD_FILE)?;
        let client = UdmClient::new(
            &self.url,
            &self.username,
            password.clone(),
            Duration::from_secs(self.request_timeout_seconds.max(1)),
            &self.tls(&ctx.warnings),
        )
        .map_err(ActionError::from)?;
        Ok(match self.max_response_bytes {
            Some(bytes) => client.with_max_response_bytes(bytes),
            None => client,
        })
    }
}

impl Default for Udm {
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

/// The LDAP base of the IAM's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LdapBase {
    /// The directory's base DN.
    #[serde(default = "default_base_dn")]
    #[schemars(length(min = 1))]
    pub base_dn: String,
}

impl Default for LdapBase {
    fn default() -> Self {
        Self {
            base_dn: default_base_dn(),
        }
    }
}

/// The LDAP server's pod, where `ldapmodify`/`ldapsearch` are executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LdapPod {
    /// The pod running the primary LDAP server.
    #[serde(default = "LdapPod::default_pod")]
    #[schemars(length(min = 1))]
    pub pod: String,
    /// The container within the pod.
    #[serde(default = "LdapPod::default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// The directory's base DN.
    #[serde(default = "default_base_dn")]
    #[schemars(length(min = 1))]
    pub base_dn: String,
}

impl LdapPod {
    fn default_pod() -> String {
        "ums-ldap-server-primary-0".into()
    }
    fn default_container() -> String {
        "main".into()
    }
}

impl Default for LdapPod {
    fn default() -> Self {
        Self {
            pod: Self::default_pod(),
            container: Self::default_container(),
            base_dn: default_base_dn(),
        }
    }
}

fn default_base_dn() -> String {
    "dc=swp-ldap,dc=internal".into()
}

/// Where the two stages hand work over, in the Migration's object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Handover {
    /// The object key, the same in both declarations.
    #[serde(default = "Handover::default_object_key")]
    #[schemars(length(min = 1))]
    pub object_key: String,
}

impl Handover {
    fn default_object_key() -> String {
        "ox-functional-accounts.yaml".into()
    }
}

impl Default for Handover {
    fn default() -> Self {
        Self {
            object_key: Self::default_object_key(),
        }
    }
}

/// The secret file with the password of `oxAppSuite.username`.
pub const OX_PASSWORD_FILE: &str = "ox-master-password";

/// OX App Suite's SOAP provisioning API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OxSoap {
    /// The SOAP API's base URL; left out, it is
    /// `http://open-xchange-core-mw-admin.<namespace>.svc.cluster.local` of the Migration's
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soap_url: Option<String>,
    /// The master admin to authenticate as; the password is the `ox-master-password` secret file.
    #[serde(default = "OxSoap::default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "OxSoap::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// The most bytes read of one answer (16 MiB when left out); a larger answer fails the
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

impl OxSoap {
    fn default_username() -> String {
        "admin".into()
    }
    fn default_timeout() -> u64 {
        60
    }
}

impl OxSoap {
    /// The client of the API at `soap_url`, with the password from [`OX_PASSWORD_FILE`].
    pub fn client(&self, ctx: &ActionContext, soap_url: &str) -> Result<OxClient, ActionError> {
        let password = ctx.secrets.get(OX_PASSWORD_FILE)?;
        let client = OxClient::new(
            soap_url,
            &self.username,
            password.clone(),
            Duration::from_secs(self.request_timeout_seconds.max(1)),
            &self.tls(&ctx.warnings),
        )
        .map_err(ActionError::from)?;
        Ok(match self.max_response_bytes {
            Some(bytes) => client.with_max_response_bytes(bytes),
            None => client,
        })
    }

    /// How the client checks the API's certificate (`oxAppSuite.caBundle`,
    /// `oxAppSuite.insecureSkipTlsVerify`), recording a check turned off in `warnings`.
    pub fn tls(&self, warnings: &Warnings) -> HttpTls {
        HttpTls::new(
            "oxAppSuite",
            self.ca_bundle.as_deref(),
            self.insecure_skip_tls_verify,
            warnings,
        )
    }

    /// What is wrong with the section at `at`: see [`soap_url_issues`], and TLS keys that
    /// cannot be used with its URL ([`HttpTls::issues`]; left out, the URL is `http://`).
    pub fn issues(&self, at: &str) -> Vec<ConfigIssue> {
        let mut issues = soap_url_issues(at, self.soap_url.as_deref());
        let url = self
            .soap_url
            .as_deref()
            .unwrap_or(DEFAULT_SOAP_URL_IN_MESSAGES);
        issues.extend(self.tls(&Warnings::default()).issues(at, url));
        issues
    }
}

/// The default `soapUrl`, as messages name it.
const DEFAULT_SOAP_URL_IN_MESSAGES: &str =
    "http://open-xchange-core-mw-admin.<namespace>.svc.cluster.local";

/// What is wrong with a `soapUrl` of the section at `at`: a URL the OX client would refuse
/// ([`OxClient::check_url`]); none when it is left out (the namespace's default).
pub fn soap_url_issues(at: &str, soap_url: Option<&str>) -> Vec<ConfigIssue> {
    match soap_url.map(OxClient::check_url) {
        Some(Err(e)) => vec![ConfigIssue {
            path: format!("{at}.soapUrl"),
            message: e.to_string(),
        }],
        _ => Vec::new(),
    }
}

impl Default for OxSoap {
    fn default() -> Self {
        Self {
            soap_url: None,
            username: Self::default_username(),
            request_timeout_seconds: Self::default_timeout(),
            max_response_bytes: None,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
        }
    }
}

/// The secret file with the password of `ldap.bindDn` (direct transport).
pub const LDAP_PASSWORD_FILE: &str = "ldap-admin-password";

/// The directory and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ldap {
    /// The pod running the primary LDAP server (exec transport).
    #[serde(default = "Ldap::default_pod")]
    #[schemars(length(min = 1))]
    pub pod: String,
    /// The container within the pod (exec transport).
    #[serde(default = "Ldap::default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// The directory's base DN: every object below it is looked at.
    #[serde(default = "Ldap::default_base_dn")]
    #[schemars(length(min = 1))]
    pub base_dn: String,
    /// The primary LDAP server's URL (`ldap://ums-ldap-server-primary:389`, `ldaps://...`).
    /// Set, Stagehand connects to it itself (direct transport) instead of executing
    /// `ldapmodify` in the pod; the password is the `ldap-admin-password` secret file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The DN to bind as with `url`; left out, `cn=admin,<baseDn>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_dn: Option<String>,
    /// Timeout of connecting and of each request of the direct transport, and of the exec
    /// transport's read-only search in its preflight.
    #[serde(default = "Ldap::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// TLS of the direct transport: `none`, `starttls` (on `ldap://`) or `ldaps`; left out,
    /// as the URL's scheme says (`ldaps://` is `ldaps`, `ldap://` is `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<LdapTls>,
    /// CA certificates trusted besides the public web roots and the system's store: a PEM
    /// file path (openDesk's `/etc/opendesk/trust/ca-certificates.crt`) or the PEM text itself
    /// (starting with `-----BEGIN`); read at the action's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Do not verify the server's certificate: the run records a warning (log, Event,
    /// `Warning:` line of the action's summary).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
}

impl Ldap {
    fn default_pod() -> String {
        "ums-ldap-server-primary-0".into()
    }
    fn default_container() -> String {
        "main".into()
    }
    fn default_base_dn() -> String {
        "dc=swp-ldap,dc=internal".into()
    }
    fn default_timeout() -> u64 {
        30
    }

    /// The endpoint of the direct transport (`ldap.url`); none for the exec transport or an
    /// `ldapi://` socket.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.url
            .as_deref()
            .and_then(|url| Endpoint::from_url("ldap.url", url))
            .into_iter()
            .collect()
    }

    /// The secret files the transport reads: [`LDAP_PASSWORD_FILE`] for the direct one, none for
    /// exec (SASL EXTERNAL in the pod).
    pub fn secret_files(&self) -> Vec<String> {
        match self.url {
            Some(_) => vec![LDAP_PASSWORD_FILE.to_string()],
            None => Vec::new(),
        }
    }

    /// What is wrong with the section at `at` (its key in the action's config): a `url` that is
    /// not an LDAP URL, a `bindDn` without `url`.
    pub fn issues(&self, at: &str) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if let Some(url) = &self.url
            && !["ldap://", "ldaps://", "ldapi://"]
                .iter()
                .any(|s| url.starts_with(s))
        {
            issues.push(ConfigIssue {
                path: format!("{at}.url"),
                message: format!(
                    "{url:?} is not an LDAP URL: use ldap://host:389, ldaps://host:636 or ldapi://<socket>"
                ),
            });
        }
        if self.bind_dn.is_some() && self.url.is_none() {
            issues.push(ConfigIssue {
                path: format!("{at}.bindDn"),
                message: "bindDn is only used with ldap.url (the exec transport binds as the pod's local root over ldapi:///): set ldap.url or leave bindDn out".into(),
            });
        }
        issues.extend(self.tls_issues(at));
        issues
    }

    /// What is wrong with the TLS keys at `at`: a `tls` the URL's scheme contradicts, a
    /// `caBundle` that is neither an absolute path nor PEM, TLS keys without a TLS connection.
    fn tls_issues(&self, at: &str) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut issue = |key: &str, message: String| {
            issues.push(ConfigIssue {
                path: format!("{at}.{key}"),
                message,
            });
        };
        let mode = match &self.url {
            Some(url) => match LdapTls::resolve(url, self.tls) {
                Ok(mode) => Some(mode),
                Err(e) => {
                    issue("tls", e);
                    None
                }
            },
            None => {
                if self.tls.is_some() {
                    issue(
                        "tls",
                        "tls is only used with ldap.url (the exec transport talks to the server over its local socket): set ldap.url or leave tls out".into(),
                    );
                }
                Some(LdapTls::None)
            }
        };
        let unused = |key: &str| {
            format!(
                "{key} is only used over TLS: set ldap.url to an ldaps:// URL or ldap.tls to starttls, or leave {key} out"
            )
        };
        if let Some(bundle) = &self.ca_bundle {
            if mode == Some(LdapTls::None) {
                issue("caBundle", unused("caBundle"));
            } else if let Some(problem) = crate::clients::tls::ca_bundle_issue(bundle) {
                issue("caBundle", problem);
            }
        }
        if self.insecure_skip_tls_verify && mode == Some(LdapTls::None) {
            issue("insecureSkipTlsVerify", unused("insecureSkipTlsVerify"));
        }
        issues
    }

    /// Builds the transport the section selects: direct when `ldap.url` is set, else exec in
    /// the pod. The direct transport connects and binds here.
    pub async fn directory(&self, ctx: &ActionContext) -> Result<Box<dyn Directory>, ActionError> {
        match &self.url {
            Some(url) => {
                let password = ctx.secrets.get(LDAP_PASSWORD_FILE)?;
                let mut settings =
                    DirectSettings::new(url.clone(), self.effective_bind_dn(), password.clone());
                settings.timeout = Duration::from_secs(self.request_timeout_seconds.max(1));
                settings.tls = self.tls;
                settings.ca_bundle = self.ca_bundle.clone();
                settings.insecure_skip_tls_verify = self.insecure_skip_tls_verify;
                settings.warnings = ctx.warnings.clone();
                settings.progress = ctx.progress.clone();
                let dir = DirectDirectory::connect(&settings)
                    .await
                    .map_err(ActionError::from)?;
                Ok(Box::new(dir))
            }
            None => Ok(Box::new(self.exec_directory(ctx))),
        }
    }

    /// The exec transport in `ldap.pod`/`ldap.container` of the run's namespace.
    fn exec_directory(&self, ctx: &ActionContext) -> ExecDirectory<KubeExec> {
        ExecDirectory::new(
            KubeExec::new(
                ctx.client.clone(),
                &ctx.namespace,
                &self.pod,
                &self.container,
            ),
            POD_LDAPI_URL,
        )
    }

    /// The transport's proof before the first change of a stage, changing nothing (every
    /// action with an `ldap` of [`Ldap`] uses it, so a stage's LDAP actions prove one transport
    /// the same way): the direct transport connects and binds; the
    /// exec transport proves that the pod exists and runs, has the container, that the operator
    /// may `create pods/exec` on it, and that a read-only `ldapsearch` of the base DN succeeds
    /// in it ([`ExecDirectory::preflight`]).
    pub async fn prove_transport(&self, ctx: &ActionContext) -> Result<(), ActionError> {
        match &self.url {
            Some(_) => self.directory(ctx).await.map(drop),
            None => self
                .exec_directory(ctx)
                .preflight(
                    &self.base_dn,
                    Duration::from_secs(self.request_timeout_seconds.max(1)),
                )
                .await
                .map_err(ActionError::from),
        }
    }

    /// The DN the direct transport binds as.
    pub fn effective_bind_dn(&self) -> String {
        match &self.bind_dn {
            Some(dn) => dn.clone(),
            None => format!("cn=admin,{}", self.base_dn),
        }
    }
}

impl Default for Ldap {
    fn default() -> Self {
        Self {
            pod: Self::default_pod(),
            container: Self::default_container(),
            base_dn: Self::default_base_dn(),
            url: None,
            bind_dn: None,
            request_timeout_seconds: Self::default_timeout(),
            tls: None,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ldap(config: serde_json::Value) -> Ldap {
        serde_json::from_value(config).unwrap()
    }

    fn paths(section: &Ldap) -> Vec<String> {
        section.issues("ldap").into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn ldap_tls_keys_fit_the_url_or_are_named() {
        for fine in [
            serde_json::json!({"url": "ldaps://ldap:636", "caBundle": "/etc/opendesk/trust/ca-certificates.crt"}),
            serde_json::json!({"url": "ldap://ldap:389", "tls": "starttls", "insecureSkipTlsVerify": true}),
            serde_json::json!({"url": "ldap://ldap:389", "tls": "none"}),
        ] {
            assert_eq!(paths(&ldap(fine.clone())), Vec::<String>::new(), "{fine}");
        }
        assert_eq!(
            paths(&ldap(
                serde_json::json!({"url": "ldaps://ldap:636", "tls": "starttls"})
            )),
            ["ldap.tls"]
        );
        assert_eq!(
            paths(&ldap(
                serde_json::json!({"url": "ldap://ldap:389", "caBundle": "/ca.crt", "insecureSkipTlsVerify": true})
            )),
            ["ldap.caBundle", "ldap.insecureSkipTlsVerify"]
        );
        assert_eq!(
            paths(&ldap(
                serde_json::json!({"url": "ldaps://ldap", "caBundle": "ca.crt"})
            )),
            ["ldap.caBundle"]
        );
        assert_eq!(
            paths(&ldap(serde_json::json!({"tls": "ldaps"}))),
            ["ldap.tls"]
        );
        assert!(serde_json::from_value::<Ldap>(serde_json::json!({"tls": "ssl"})).is_err());
    }
}
