//! Stagehand's action library (docs/architecture.md walks it).
//!
//! # The floor rule
//!
//! Each room imports only rooms below it (`actions/tests/floor.rs` reads every file's imports
//! and fails on one that breaks this):
//!
//! 1. The ground floor: [`action`], the contract every action implements (its typed config,
//!    planning and apply, what it runs against), and the helpers of the actions, [`batch`]
//!    (bounded concurrent requests), [`text`] (message wording), [`check`] (a config read
//!    against its schema) and [`progress`] (how far an action is inside its work). They
//!    import nothing but each other.
//! 2. [`clients`]: the protocol clients (HTTP, LDAP, OX SOAP, UDM REST, S3, Redis, TLS,
//!    Kubernetes workloads). A client imports the ground floor and other clients, never an
//!    action and never `shared_config`.
//! 3. [`shared_config`]: the config sections several actions declare; each checks itself
//!    without building a client and builds the client it describes.
//! 4. One room per action (`workload_scale`, ..., the two halves of [`functional_accounts`]),
//!    each read as config → plan → apply over the clients. An action imports the ground floor,
//!    `clients`, `shared_config` and its own folder, never another action: what two actions
//!    share belongs in a client or a config section.
//!
//! Above them, only this file (`lib`: the registry, the one list of action ids, from which
//! validation's [`Library`] and the engine's [`instantiate`] are generated) and `fuzzing`
//! (hidden: the entry points of the cargo-fuzz targets in `e2e/fuzzing`, which feed servers'
//! answers to the clients' and actions' readers) import actions.

pub mod action;
pub mod batch;
pub mod check;
pub mod clients;
pub mod configmap_create;
pub mod crd_storage_version_migrate;
pub mod flush_intercom_sessions;
pub mod functional_accounts;
#[doc(hidden)]
pub mod fuzzing;
pub mod ldap_entryuuid_to_object_identifier;
pub mod ox_connector_restart;
pub mod ox_names_to_object_identifier;
pub mod progress;
pub mod provisioning_drop_subscriptions;
pub mod shared_config;
pub mod synapse_deactivate_orphaned_users;
pub mod synapse_signing_key_export;
pub mod text;
pub mod udm_remove_legacy_hashes;
pub mod workload_scale;

use stagehand_config::{ActionCatalog, ConfigIssue};

use action::{Action, ActionConfig, ActionError};

/// Declares the library once: every action module whose `Config` is both the typed config
/// ([`ActionConfig`]) and the action ([`Action`]). An id listed here whose `Config` does not
/// implement [`Action`] does not compile.
macro_rules! library {
    ($($($module:ident)::+),* $(,)?) => {
        /// Every action id of the library, in the order docs/actions.md lists them.
        pub const ACTION_IDS: &[&str] = &[$($($module)::+::Config::ID),*];

        /// The JSON schema of every action's config, by id (for documentation and tooling).
        pub fn config_schemas() -> Vec<(&'static str, serde_json::Value)> {
            vec![$(($($module)::+::Config::ID, check::schema_of::<$($module)::+::Config>())),*]
        }

        fn config_issues_of(id: &str, config: &serde_json::Value) -> Option<Vec<ConfigIssue>> {
            match id {
                $($($module)::+::Config::ID => {
                    Some(check::issues::<$($module)::+::Config>(config))
                })*
                _ => None,
            }
        }

        /// Builds the action a declaration names from its config (validated before, so a
        /// config error here is a bug in the caller or a declaration that was never checked).
        pub fn instantiate(
            id: &str,
            config: &serde_json::Value,
        ) -> Result<Box<dyn Action>, ActionError> {
            match id {
                $($($module)::+::Config::ID => typed::<$($module)::+::Config>(config),)*
                other => Err(ActionError::Config(format!(
                    "{other:?} is not an action of the library"
                ))),
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
    functional_accounts::export,
    functional_accounts::import,
    crd_storage_version_migrate,
    synapse_deactivate_orphaned_users,
    configmap_create,
    synapse_signing_key_export,
    udm_remove_legacy_hashes,
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

    fn endpoints(
        &self,
        id: &str,
        config: &serde_json::Value,
        namespace: &str,
    ) -> Vec<stagehand_config::Endpoint> {
        instantiate(id, config)
            .map(|action| action.endpoints(namespace))
            .unwrap_or_default()
    }

    /// openDesk's identifier migrations: the LDAP's `entryUUID`s and OX's names become the
    /// object identifiers together (docs/declarations.md, "Opting out").
    fn pairs(&self) -> &'static [[&'static str; 2]] {
        &[[
            ldap_entryuuid_to_object_identifier::Config::ID,
            ox_names_to_object_identifier::Config::ID,
        ]]
    }
}

/// `config` read as `T`, boxed as the action it is.
fn typed<T: ActionConfig + Action + 'static>(
    config: &serde_json::Value,
) -> Result<Box<dyn Action>, ActionError> {
    let parsed = check::parse::<T>(config).map_err(|issue| {
        if issue.path.is_empty() {
            ActionError::Config(format!("{}: {}", T::ID, issue.message))
        } else {
            ActionError::Config(format!("{} at {}: {}", T::ID, issue.path, issue.message))
        }
    })?;
    Ok(Box::new(parsed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use serde_json::json;
    use stagehand_config::{ActionCatalog, Endpoint};

    use super::*;

    fn endpoints(id: &str, config: serde_json::Value) -> Vec<Endpoint> {
        assert_eq!(
            config_issues_of(id, &config),
            Some(Vec::new()),
            "{id}: the config is valid"
        );
        Library.endpoints(id, &config, "opendesk")
    }

    #[test]
    fn actions_name_the_endpoints_of_their_config_with_the_defaults_applied() {
        assert_eq!(
            endpoints(flush_intercom_sessions::Config::ID, json!({})),
            [Endpoint::new("redis.host", "redis-headless", Some(6379))]
        );
        assert_eq!(
            endpoints(
                provisioning_drop_subscriptions::Config::ID,
                json!({"provisioning": {"url": "https://prov.example.org:8443/v1"}, "subscriptions": ["a"]})
            ),
            [Endpoint::new(
                "provisioning.url",
                "prov.example.org",
                Some(8443)
            )]
        );
        // OX's default names the Migration's namespace; no ldap.url: the exec transport, no
        // network endpoint.
        assert_eq!(
            endpoints(ox_names_to_object_identifier::Config::ID, json!({})),
            [Endpoint::new(
                "oxAppSuite.soapUrl",
                "open-xchange-core-mw-admin.opendesk.svc.cluster.local",
                Some(80)
            )]
        );
        assert_eq!(
            endpoints(
                ldap_entryuuid_to_object_identifier::Config::ID,
                json!({"ldap": {"url": "ldaps://LDAP.example.org"}})
            ),
            [Endpoint::new("ldap.url", "LDAP.example.org", Some(636))]
        );
        assert_eq!(
            endpoints(ldap_entryuuid_to_object_identifier::Config::ID, json!({})),
            []
        );
        // Only the cluster: none.
        assert_eq!(
            endpoints(
                workload_scale::Config::ID,
                json!({"workload": {"kind": "StatefulSet", "name": "x", "replicas": 0}})
            ),
            []
        );
    }
}
