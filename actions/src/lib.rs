//! Stagehand's action library: one module per action with its typed config, and the
//! [`Library`] that validation asks whether an id exists and whether its config is right.
//!
//! Configs reject unknown keys (`deny_unknown_fields`) and carry the defaults the openDesk
//! reference shows. Behaviour (the planning and apply phases) arrives with the run engine.

pub mod check;
pub mod common;
pub mod crd_storage_version_migrate;
pub mod flush_intercom_sessions;
pub mod ldap_entryuuid_to_object_identifier;
pub mod ox_connector_restart;
pub mod ox_functional_accounts_export;
pub mod ox_names_to_object_identifier;
pub mod ox_shared_accounts_import;
pub mod provisioning_drop_subscriptions;
pub mod workload_scale;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use stagehand_config::{ActionCatalog, ConfigIssue};

/// A typed action config.
pub trait ActionConfig: DeserializeOwned + JsonSchema {
    /// The action id the config belongs to.
    const ID: &'static str;

    /// Rules the schema cannot state (e.g. a Redis pattern needs a literal prefix).
    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        Vec::new()
    }
}

/// Every action id of the library, in the order docs/actions.md lists them.
pub const ACTION_IDS: [&str; 9] = [
    workload_scale::Config::ID,
    ox_connector_restart::Config::ID,
    provisioning_drop_subscriptions::Config::ID,
    flush_intercom_sessions::Config::ID,
    ldap_entryuuid_to_object_identifier::Config::ID,
    ox_names_to_object_identifier::Config::ID,
    ox_functional_accounts_export::Config::ID,
    ox_shared_accounts_import::Config::ID,
    crd_storage_version_migrate::Config::ID,
];

/// The JSON schema of every action's config, by id (for documentation and tooling).
pub fn config_schemas() -> Vec<(&'static str, serde_json::Value)> {
    use check::schema_of;
    vec![
        (
            workload_scale::Config::ID,
            schema_of::<workload_scale::Config>(),
        ),
        (
            ox_connector_restart::Config::ID,
            schema_of::<ox_connector_restart::Config>(),
        ),
        (
            provisioning_drop_subscriptions::Config::ID,
            schema_of::<provisioning_drop_subscriptions::Config>(),
        ),
        (
            flush_intercom_sessions::Config::ID,
            schema_of::<flush_intercom_sessions::Config>(),
        ),
        (
            ldap_entryuuid_to_object_identifier::Config::ID,
            schema_of::<ldap_entryuuid_to_object_identifier::Config>(),
        ),
        (
            ox_names_to_object_identifier::Config::ID,
            schema_of::<ox_names_to_object_identifier::Config>(),
        ),
        (
            ox_functional_accounts_export::Config::ID,
            schema_of::<ox_functional_accounts_export::Config>(),
        ),
        (
            ox_shared_accounts_import::Config::ID,
            schema_of::<ox_shared_accounts_import::Config>(),
        ),
        (
            crd_storage_version_migrate::Config::ID,
            schema_of::<crd_storage_version_migrate::Config>(),
        ),
    ]
}

/// The action library as validation sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Library;

impl ActionCatalog for Library {
    fn config_issues(&self, id: &str, config: &serde_json::Value) -> Option<Vec<ConfigIssue>> {
        use check::issues;
        Some(match id {
            workload_scale::Config::ID => issues::<workload_scale::Config>(config),
            ox_connector_restart::Config::ID => issues::<ox_connector_restart::Config>(config),
            provisioning_drop_subscriptions::Config::ID => {
                issues::<provisioning_drop_subscriptions::Config>(config)
            }
            flush_intercom_sessions::Config::ID => {
                issues::<flush_intercom_sessions::Config>(config)
            }
            ldap_entryuuid_to_object_identifier::Config::ID => {
                issues::<ldap_entryuuid_to_object_identifier::Config>(config)
            }
            ox_names_to_object_identifier::Config::ID => {
                issues::<ox_names_to_object_identifier::Config>(config)
            }
            ox_functional_accounts_export::Config::ID => {
                issues::<ox_functional_accounts_export::Config>(config)
            }
            ox_shared_accounts_import::Config::ID => {
                issues::<ox_shared_accounts_import::Config>(config)
            }
            crd_storage_version_migrate::Config::ID => {
                issues::<crd_storage_version_migrate::Config>(config)
            }
            _ => return None,
        })
    }
}
