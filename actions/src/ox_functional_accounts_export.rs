//! `ox_functional_accounts_export`: part 1 of the Functional Accounts to Shared Accounts
//! migration. Records the accounts in the handover, then removes them from OX and the IAM.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;
use crate::common::{Handover, LdapBase, OxSoap, Udm};

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The UDM REST API.
    #[serde(default)]
    pub udm: Udm,
    /// The directory base.
    #[serde(default)]
    pub ldap: LdapBase,
    /// Where the accounts are written down for part 2.
    #[serde(default)]
    pub handover: Handover,
    /// OX App Suite's SOAP API and the context to work in.
    #[serde(default)]
    pub ox_app_suite: OxContextSoap,
}

/// OX App Suite's SOAP API, with the context the secondary accounts live in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OxContextSoap {
    /// The OX context id.
    #[serde(default = "default_context")]
    pub context: u32,
    /// The SOAP API's base URL; left out, it is
    /// `http://open-xchange-core-mw-admin.<namespace>.svc.cluster.local` of the Migration's
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soap_url: Option<String>,
    /// The master admin to authenticate as; the password is the `ox-master-password` secret file.
    #[serde(default = "default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl OxContextSoap {
    /// The SOAP API part of the block.
    pub fn soap(&self) -> OxSoap {
        OxSoap {
            soap_url: self.soap_url.clone(),
            username: self.username.clone(),
            request_timeout_seconds: self.request_timeout_seconds,
        }
    }
}

fn default_context() -> u32 {
    1
}

fn default_username() -> String {
    OxSoap::default().username
}

fn default_timeout() -> u64 {
    OxSoap::default().request_timeout_seconds
}

impl Default for OxContextSoap {
    fn default() -> Self {
        let soap = OxSoap::default();
        Self {
            context: default_context(),
            soap_url: soap.soap_url,
            username: soap.username,
            request_timeout_seconds: soap.request_timeout_seconds,
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_functional_accounts_export";
}
