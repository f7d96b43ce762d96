//! `ox_shared_accounts_import`: part 2 of the Functional Accounts to Shared Accounts
//! migration. Creates the Shared Accounts from the handover and links their users.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;
use crate::common::{Handover, LdapBase, Udm};

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
    /// Where part 1 wrote the accounts down.
    #[serde(default)]
    pub handover: Handover,
    /// How the Shared Accounts are created.
    #[serde(default)]
    pub shared_accounts: SharedAccounts,
}

/// How the Shared Accounts are created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedAccounts {
    /// The UDM name (not the display name) of the permission users are linked with.
    #[serde(default = "SharedAccounts::default_permission")]
    #[schemars(length(min = 1))]
    pub permission: String,
    /// How long to wait for the permission to appear (the stackdata Job loads it).
    #[serde(default = "SharedAccounts::default_wait")]
    pub permission_wait_seconds: u64,
}

impl SharedAccounts {
    fn default_permission() -> String {
        "opendesk_mail_author_calendar_author".into()
    }
    fn default_wait() -> u64 {
        900
    }
}

impl Default for SharedAccounts {
    fn default() -> Self {
        Self {
            permission: Self::default_permission(),
            permission_wait_seconds: Self::default_wait(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_shared_accounts_import";
}
