//! `workload_scale`: scales a StatefulSet or Deployment; scaling down waits until its pods are
//! gone.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ActionConfig;

/// The action's config. `kind`, `name` and `replicas` are required: a default for any of them
/// would scale something the declaration did not ask for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The workload to scale.
    pub workload: Workload,
}

/// A workload and its target replica count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// `StatefulSet` or `Deployment`.
    pub kind: WorkloadKind,
    /// The workload's name in the Migration's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The replica count to scale to.
    pub replicas: u32,
    /// How long a scale-down may take before the action fails naming the pods left.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
}

/// The kinds of workload the action scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WorkloadKind {
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 Deployment.
    Deployment,
}

fn default_timeout_seconds() -> u64 {
    300
}

impl ActionConfig for Config {
    const ID: &'static str = "workload_scale";
}
