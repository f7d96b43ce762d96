//! Stagehand's action library: one module per action with its typed config, and the
//! [`Library`] that validation asks whether an id exists and whether its config is right.
//!
//! Configs reject unknown keys (`deny_unknown_fields`) and carry the defaults the openDesk
//! reference shows. Behaviour (the planning and apply phases) arrives with the run engine.

pub mod action;
pub mod check;
pub mod common;
pub mod crd_storage_version_migrate;
pub mod flush_intercom_sessions;
pub mod functional_accounts;
pub mod handover;
pub mod http;
pub mod ldap;
pub mod ldap_entryuuid_to_object_identifier;
pub mod ox;
pub mod ox_connector_restart;
pub mod ox_functional_accounts_export;
pub mod ox_names_to_object_identifier;
pub mod ox_shared_accounts_import;
pub mod provisioning_drop_subscriptions;
pub mod udm;
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

/// Declares the library once: every action module with its typed `Config`.
macro_rules! library {
    ($($module:ident),* $(,)?) => {
        /// Every action id of the library, in the order docs/actions.md lists them.
        pub const ACTION_IDS: &[&str] = &[$($module::Config::ID),*];

        /// The JSON schema of every action's config, by id (for documentation and tooling).
        pub fn config_schemas() -> Vec<(&'static str, serde_json::Value)> {
            vec![$(($module::Config::ID, check::schema_of::<$module::Config>())),*]
        }

        fn config_issues_of(id: &str, config: &serde_json::Value) -> Option<Vec<ConfigIssue>> {
            match id {
                $($module::Config::ID => Some(check::issues::<$module::Config>(config)),)*
                _ => None,
            }
        }
    };
}

library!(
    workload_scale,
    ox_connector_restart,
    provisioning_drop_subscriptions,
    flush_intercom_sessions,
    ldap_entryuuid_to_object_identifier,
    ox_names_to_object_identifier,
    ox_functional_accounts_export,
    ox_shared_accounts_import,
    crd_storage_version_migrate,
);

/// The action library as validation sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Library;

impl ActionCatalog for Library {
    fn config_issues(&self, id: &str, config: &serde_json::Value) -> Option<Vec<ConfigIssue>> {
        config_issues_of(id, config)
    }

    fn needs(&self, id: &str, config: &serde_json::Value) -> stagehand_config::Needs {
        instantiate(id, config)
            .map(|action| action.needs())
            .unwrap_or_default()
    }
}

/// Builds the action a declaration names from its config (validated before, so a config
/// error here is a bug in the caller). Actions whose behaviour this build does not have yet
/// are `Unsupported`: a run that reaches one fails with that reason instead of skipping it.
pub fn instantiate(
    id: &str,
    config: &serde_json::Value,
) -> Result<Box<dyn action::Action>, action::ActionError> {
    use action::ActionError;
    fn typed<T: ActionConfig + action::Action + 'static>(
        config: &serde_json::Value,
    ) -> Result<Box<dyn action::Action>, ActionError> {
        let parsed = check::parse::<T>(config).map_err(|issue| {
            if issue.path.is_empty() {
                ActionError::Config(format!("{}: {}", T::ID, issue.message))
            } else {
                ActionError::Config(format!("{} at {}: {}", T::ID, issue.path, issue.message))
            }
        })?;
        Ok(Box::new(parsed))
    }
    match id {
        workload_scale::Config::ID => typed::<workload_scale::Config>(config),
        ox_connector_restart::Config::ID => typed::<ox_connector_restart::Config>(config),
        flush_intercom_sessions::Config::ID => typed::<flush_intercom_sessions::Config>(config),
        provisioning_drop_subscriptions::Config::ID => {
            typed::<provisioning_drop_subscriptions::Config>(config)
        }
        crd_storage_version_migrate::Config::ID => {
            typed::<crd_storage_version_migrate::Config>(config)
        }
        ldap_entryuuid_to_object_identifier::Config::ID => {
            typed::<ldap_entryuuid_to_object_identifier::Config>(config)
        }
        ox_names_to_object_identifier::Config::ID => {
            typed::<ox_names_to_object_identifier::Config>(config)
        }
        ox_functional_accounts_export::Config::ID => {
            typed::<ox_functional_accounts_export::Config>(config)
        }
        ox_shared_accounts_import::Config::ID => typed::<ox_shared_accounts_import::Config>(config),
        known if ACTION_IDS.contains(&known) => Err(ActionError::Unsupported(known.to_string())),
        other => Err(ActionError::Config(format!(
            "{other:?} is not an action of the library"
        ))),
    }
}
