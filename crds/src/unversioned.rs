//! Types every served version shares unchanged (both `v1alpha1` and `v1beta1` use them).
//!
//! Field doc comments become `kubectl explain` output, so they are written for users.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use stagehand_config::ObjectStore;

pub use stagehand_config::{Problem, Stage};

/// The window of last-migrated releases an action applies to. Each bound is a release
/// series (`v1`, `v1.17`, `v1.17.2`; the `v` is optional). Quote them in YAML: an unquoted
/// `1.10` is the number 1.1.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionWindow {
    /// The oldest release series the action supports. A deployment whose last migrated
    /// release is older fails validation (the mandatory upgrade path) instead of skipping.
    #[schemars(regex(pattern = r"^v?[0-9]+(\.[0-9]+){0,2}$"))]
    pub minimum: String,
    /// The first release series of the window; it starts at the beginning of its series
    /// (`v1.15` means `v1.15.0`).
    #[schemars(regex(pattern = r"^v?[0-9]+(\.[0-9]+){0,2}$"))]
    pub from: String,
    /// The last release series of the window; it includes all of its series (`v1.17`
    /// covers `v1.17.3`).
    #[schemars(regex(pattern = r"^v?[0-9]+(\.[0-9]+){0,2}$"))]
    pub to: String,
}

/// One migration action declared by a release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionDeclaration {
    /// The action to run, one of the ids of Stagehand's action library
    /// (for example `workload_scale`).
    #[schemars(length(min = 1))]
    pub id: String,
    /// The release's statement of which piece of work this is (usually the release that
    /// added it, e.g. `v1.18.0`). A tagged action runs once: its footprint
    /// (stage, id, tag, runMode) is recorded and it is skipped once recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub tag: Option<String>,
    /// The mode the work is performed in (`apply` for every action that changes data). Part
    /// of a tagged action's footprint; on an untagged action it is recorded but gates nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub run_mode: Option<String>,
    /// Which last-migrated releases the action supports and runs for.
    pub versions: VersionWindow,
    /// The action's non-secret parameters; each action has its own typed keys (see
    /// docs/actions.md). Unknown keys are rejected by validation.
    #[serde(default)]
    #[schemars(schema_with = "free_form_object")]
    pub config: serde_json::Map<String, serde_json::Value>,
}

/// A per-deployment opt-out: skips the declared action of this stage with exactly this id
/// and tag (including the absence of a tag).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkipEntry {
    /// The id of the action to skip.
    #[schemars(length(min = 1))]
    pub id: String,
    /// The tag of the declaration to skip; leave it out to skip an untagged declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// Actions per stage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageActions {
    /// The actions run before the rest of the release is deployed, in this order.
    #[serde(default)]
    pub pre: Vec<ActionDeclaration>,
    /// The actions run after the rest of the release is deployed, in this order.
    #[serde(default)]
    pub post: Vec<ActionDeclaration>,
}

/// Opt-outs per stage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageSkips {
    /// Declarations of the `pre` stage to skip.
    #[serde(default)]
    pub pre: Vec<SkipEntry>,
    /// Declarations of the `post` stage to skip.
    #[serde(default)]
    pub post: Vec<SkipEntry>,
}

/// A credential the actions read by name, taken from an existing Secret. Its value is never
/// copied into status, events, logs or environment variables.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretFile {
    /// The name actions refer to the credential by (e.g. `redis-password`).
    #[schemars(length(min = 1))]
    pub name: String,
    /// Where the value lives.
    pub secret: SecretKeyRef,
}

/// A key of a Secret in the Migration's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The key within the Secret.
    #[schemars(length(min = 1))]
    pub key: String,
    /// When true, a missing Secret or key is not an error until an action reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
}

/// One recorded footprint: a tagged action that succeeded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The stage the action ran in.
    pub stage: Option<Stage>,
    /// The action id.
    pub id: String,
    /// The declaration's tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The declaration's runMode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<String>,
    /// The release whose migration ran the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The MigrationRun that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_name: Option<String>,
    /// When the action succeeded (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

/// What happens to a declared action in a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ActionDecision {
    /// The action is planned to run or is running.
    Run,
    /// The action is not run; the reason says why.
    Skipped,
    /// The action ran and succeeded.
    Succeeded,
    /// The action ran and failed.
    Failed,
}

/// The state of one declared action within a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionStatus {
    /// The position of the declaration in its stage.
    pub index: u32,
    /// The action id.
    pub id: String,
    /// The declaration's tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The declaration's runMode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<String>,
    /// Run, Skipped, Succeeded or Failed.
    pub decision: ActionDecision,
    /// Why: InWindow, OptedOut, OutsideWindow, FootprintRecorded, FreshInstallation, or the
    /// failure's reason.
    pub reason: String,
    /// When the action started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the action finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// A short human summary of what the action did or would do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The digest of the declaration the run planned (`sha256:...` of its id, tag, runMode,
    /// versions and config as written): the run executes exactly this declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where the objects the action found are kept, for an action that reports them (the
    /// list a person reviews: `stagehand report migrationrun/NAME` prints it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<FindingsStatus>,
    /// How far the action is inside its work, as it last reported (written every few seconds
    /// while it runs, and once when it ends). Absent for an action that reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ActionProgress>,
}

/// How far an action is inside its work (docs/operator.md#progress).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionProgress {
    /// What the action is doing, e.g. `deleting Functional Accounts`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Objects done in this phase.
    pub done: u64,
    /// Objects the phase has in all, when the action knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// What is counted (plural), e.g. `accounts`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit: String,
}

/// Where an action's findings are kept and what they count (docs/design.md#findings).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FindingsStatus {
    /// The ConfigMaps in the run's namespace that hold them (`<run>-findings`, then
    /// `<run>-findings-2`, ... for long lists), owned by the Migration: they outlive the run.
    pub config_maps: Vec<String>,
    /// Named counts (e.g. `carrying`, `differs`).
    #[serde(default)]
    pub counts: std::collections::BTreeMap<String, u64>,
    /// `sha256:` over the objects found (group and identifying value of each row).
    pub digest: String,
    /// How many objects (rows) were found.
    #[serde(default)]
    pub rows: u64,
    /// `Plan` when they were found planning a `Manual` run before its approval (the ones a
    /// person approves), `Execution` when found by the action as it ran (dry runs included).
    pub phase: String,
}

/// The status of a Migration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationStatus {
    /// The release whose post stage last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migrated_release: Option<String>,
    /// Every recorded footprint of a tagged action.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Every problem found in the declarations (empty when valid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// Ready and Stalled, in the metav1.Condition shape.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generation these conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The status of a MigrationRun.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationRunStatus {
    /// Finished declared actions over all declared actions, e.g. `3/7`; while an action
    /// reports progress, followed by its figure: `3/7 2,100/5,000 accounts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// What the run is doing now, in one line: the running action and its phase, e.g.
    /// `action 3 ox_functional_accounts_export: deleting Functional Accounts: 2,100/5,000
    /// accounts`. Absent once the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_phase: Option<String>,
    /// The Migration's last migrated release when the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migrated_release: Option<String>,
    /// One entry per declared action of the stage, with its decision and reason.
    #[serde(default)]
    pub actions: Vec<ActionStatus>,
    /// Every problem found in the declarations when the run was refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// Ready, Reconciling, Stalled and Succeeded, in the metav1.Condition shape (kstatus).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generation these conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the run started executing (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the run finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// What the run froze when it planned; it applies nothing more once the Migration's
    /// declarations for its stage differ (reason `DeclarationsChanged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_plan: Option<FrozenPlan>,
    /// Seconds the run waited while its Migration was suspended (not counted towards
    /// `waitTimeoutSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_seconds: Option<i64>,
    /// Since when the run waits on a suspended Migration (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_since: Option<String>,
}

/// What a run froze when it planned: the Migration's generation, the digests of the stage's
/// declarations (`sha256:` of the canonical JSON as written) and what its decisions were
/// computed from (`installedRelease`, the last migrated release, the recorded footprints of
/// the stage's tagged actions). Each planned action's own digest is in its entry of
/// `actions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FrozenPlan {
    /// The Migration's `metadata.generation` when the run planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_generation: Option<i64>,
    /// The plan's digest, the one `stagehand.dev/approve-plan` names: one digest over the
    /// declarations (`declarationsDigest`) and `installedRelease`, `lastMigratedRelease` and
    /// `footprints` below.
    pub digest: String,
    /// One digest over the stage's declarations (the fields below and each action's digest).
    /// Absent in a plan frozen by an earlier Stagehand, whose `digest` covered the
    /// declarations only: such a run plans again before its first action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declarations_digest: Option<String>,
    /// The Migration's `spec.installedRelease` when the run planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_release: Option<String>,
    /// The last migrated release the windows were judged from (the ledger's, else
    /// `installedRelease`); absent for a fresh installation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_migrated_release: Option<String>,
    /// The footprints (`stage`, `id`, `tag`, `runMode`) of the stage's tagged actions that the
    /// history recorded when the run planned: each made its action skip as
    /// `FootprintRecorded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub footprints: Vec<HistoryEntry>,
    /// The digest of `releaseVersion`.
    pub release_version: String,
    /// The digest of `secretFiles`.
    pub secret_files: String,
    /// The digest of `objectStore`.
    pub object_store: String,
    /// The digest of the stage's `actionsSkip`.
    pub actions_skip: String,
    /// What a `Manual` run's approval names when actions reported findings before it: one
    /// digest over `digest` and each such action's findings digest. Absent otherwise (the
    /// approval names `digest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_digest: Option<String>,
}

/// The schema of an action's `config`: any object, kept as written.
pub fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": "The action's non-secret parameters; each action has its own typed keys (see docs/actions.md). Unknown keys are rejected by validation.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
