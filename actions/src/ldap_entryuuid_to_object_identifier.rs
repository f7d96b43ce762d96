//! `ldap_entryuuid_to_object_identifier`: sets `univentionObjectIdentifier` to `entryUUID`
//! wherever they differ, then reads the directory back.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;
use crate::common::LdapPod;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the directory is written.
    #[serde(default)]
    pub ldap: LdapPod,
}

impl ActionConfig for Config {
    const ID: &'static str = "ldap_entryuuid_to_object_identifier";
}
