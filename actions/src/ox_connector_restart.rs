//! `ox_connector_restart`: scales a StatefulSet to 0, waits, and scales it back up.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The StatefulSet to restart.
    #[serde(default)]
    pub statefulset: StatefulSet,
}

/// The StatefulSet and how to bring it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatefulSet {
    /// Its name in the Migration's namespace.
    #[serde(default = "StatefulSet::default_name")]
    #[schemars(length(min = 1))]
    pub name: String,
    /// The replica count to scale back up to.
    #[serde(default = "StatefulSet::default_replicas")]
    pub replicas: u32,
    /// How long to wait at zero before scaling back up.
    #[serde(default = "StatefulSet::default_wait_seconds")]
    pub wait_seconds: u64,
}

impl StatefulSet {
    fn default_name() -> String {
        "ox-connector".into()
    }
    fn default_replicas() -> u32 {
        1
    }
    fn default_wait_seconds() -> u64 {
        30
    }
}

impl Default for StatefulSet {
    fn default() -> Self {
        Self {
            name: Self::default_name(),
            replicas: Self::default_replicas(),
            wait_seconds: Self::default_wait_seconds(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_connector_restart";
}
