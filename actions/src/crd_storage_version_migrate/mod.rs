//! `crd_storage_version_migrate`: rewrites every object of a CRD through its storage version,
//! then prunes `status.storedVersions` (the storage-version lab, automated).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;

pub mod engine;

/// The action's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The CRD's name, e.g. `tunnels.net.labhub.io`.
    #[schemars(length(min = 1))]
    pub crd: String,
    /// Objects per list page.
    #[serde(default = "default_page_size")]
    #[schemars(range(min = 1))]
    pub page_size: u32,
    /// Rewrites in flight at once.
    #[serde(default = "default_concurrency")]
    #[schemars(range(min = 1))]
    pub concurrency: u32,
}

fn default_page_size() -> u32 {
    500
}

fn default_concurrency() -> u32 {
    32
}

impl ActionConfig for Config {
    const ID: &'static str = "crd_storage_version_migrate";
}
