//! `ox_names_to_object_identifier`: renames OX users and groups from their IAM name to the
//! IAM's `univentionObjectIdentifier`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;
use crate::common::{LdapPod, OxSoap};

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the IAM objects are read.
    #[serde(default)]
    pub ldap: LdapPod,
    /// OX App Suite's SOAP API.
    #[serde(default)]
    pub ox_app_suite: OxSoap,
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_names_to_object_identifier";
}
