//! The shared vocabulary of the declaration model: the stages, a footprint, and what
//! validation asks of the action library (`ActionCatalog`, `ConfigIssue`, `Needs`,
//! `Handover`). Every other module of the crate speaks in these terms; this one imports
//! none of them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A stage of a release's migration.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Runs before the rest of the release is deployed.
    #[default]
    Pre,
    /// Runs after the rest of the release is deployed.
    Post,
}

impl Stage {
    /// Both stages, in the order a deployment runs them.
    pub const ALL: [Stage; 2] = [Stage::Pre, Stage::Post];

    /// The stage's name as it is written in manifests (`pre`, `post`).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Pre => "pre",
            Stage::Post => "post",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Stage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pre" => Ok(Stage::Pre),
            "post" => Ok(Stage::Post),
            other => Err(format!("stage must be pre or post, not {other:?}")),
        }
    }
}

/// What records that a tagged action ran: `(stage, id, tag, runMode)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Footprint {
    /// The stage.
    pub stage: Stage,
    /// The action id.
    pub id: String,
    /// The tag (a footprint is only recorded for tagged actions, but history read from
    /// elsewhere may lack it).
    pub tag: Option<String>,
    /// The runMode; part of the footprint, so a new runMode runs the action once more.
    pub run_mode: Option<String>,
}

/// One thing wrong with an action's `config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The key path within `config`, e.g. `workload.kind` (empty: the config itself).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// The action library, as validation sees it.
pub trait ActionCatalog {
    /// `None` when `id` is not an action of the library; otherwise everything wrong with
    /// `config` for it (empty when valid).
    fn config_issues(&self, id: &str, config: &serde_json::Value) -> Option<Vec<ConfigIssue>>;

    /// What the action `id` with this (valid) `config` needs from its run; empty for an
    /// unknown id or an invalid config.
    fn needs(&self, _id: &str, _config: &serde_json::Value) -> Needs {
        Needs::default()
    }

    /// The network endpoints the action `id` with this (valid) `config` contacts, its
    /// defaults applied (`namespace`: the Migration's, for defaults that name it); empty for
    /// an unknown id or an invalid config.
    fn endpoints(
        &self,
        _id: &str,
        _config: &serde_json::Value,
        _namespace: &str,
    ) -> Vec<crate::endpoints::Endpoint> {
        Vec::new()
    }

    /// Pairs of action ids that belong together besides the handovers (which `needs` tells):
    /// applying one without the other leaves a state the release cannot work with, so opting
    /// out of one and not the other is `HalfOptOut`.
    fn pairs(&self) -> &'static [[&'static str; 2]] {
        &[]
    }
}

/// What a declared action needs from its run besides its config. Validation checks it
/// against the declarations (no cluster needed); the run's preflight checks it against the
/// cluster for the whole stage before the first change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The `secretFiles` names the action reads (for the config it was declared with).
    pub secret_files: Vec<String>,
    /// The handover object the action writes or reads in the Migration's `objectStore`, when
    /// it hands work over between the stages.
    pub handover: Option<Handover>,
}

/// One side of a handover between the stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// The object key in the store (`handover.objectKey`).
    pub object_key: String,
    /// Whether the action writes (export, pre) or reads (import, post) the object.
    pub role: HandoverRole,
}

/// Which side of a handover an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoverRole {
    /// Writes the handover object (the export in `pre`).
    Writes,
    /// Reads the handover object (the import in `post`).
    Reads,
}
