//! `stagehand.dev/v1alpha1`: the first API. Served and deprecated in favour of `v1beta1`;
//! not the storage version.
//!
//! **Same fields.** The conversion strategy is `None`: the API server serves one stored object
//! in both versions by changing `apiVersion` only. So this version declares every field
//! `v1beta1` has, without `v1beta1`'s defaults (the defaults are what tells a rewritten
//! object apart, docs/storage-versions.md). A field only `v1beta1` declared made an object
//! that a `v1alpha1` client once wrote (its `managedFields` entry is in `v1alpha1`) impossible
//! to server-side apply on Kubernetes 1.37: the API server converts the object to `v1alpha1`
//! to update that entry, meets the undeclared field and answers 500 ".spec.approval: field not
//! declared in schema" — the operator's every status write failed. 1.36 dropped such entries
//! on the next update instead.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::unversioned::{
    MigrationRunStatus, MigrationStatus, ObjectStore, SecretFile, Stage, StageActions, StageSkips,
};
use crate::v1beta1::Approval;

/// The declarations of one release's migration for one deployment.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "stagehand.dev",
    version = "v1alpha1",
    kind = "Migration",
    namespaced,
    status = "MigrationStatus",
    shortname = "mig",
    category = "stagehand",
    served = true,
    storage = false,
    deprecated = "stagehand.dev/v1alpha1 Migration is deprecated; use stagehand.dev/v1beta1 Migration",
    doc = "The migration declarations of one release for one deployment.",
    printcolumn(name = "Release", type_ = "string", json_path = ".spec.releaseVersion"),
    printcolumn(
        name = "Migrated",
        type_ = "string",
        json_path = ".status.lastMigratedRelease"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The release being deployed, e.g. `v1.18.0` (the `v` is optional).
    #[schemars(regex(
        pattern = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
    ))]
    pub release_version: String,
    /// The actions of each stage, in order.
    #[serde(default)]
    pub actions: StageActions,
    /// Per-deployment opt-outs of declared actions.
    #[serde(default)]
    pub actions_skip: StageSkips,
    /// Credentials the actions read by name, taken from existing Secrets.
    #[serde(default)]
    pub secret_files: Vec<SecretFile>,
    /// The S3-compatible store the stages hand work over in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStore>,
    /// Adopt a deployment that already runs this release but has no recorded history: it
    /// counts as the last migrated release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
    ))]
    pub installed_release: Option<String>,
    /// The ServiceAccount (same namespace) whose rights the runs of this Migration use for
    /// every Kubernetes call their actions and preflight make (Secrets, exec, workloads,
    /// ConfigMaps): the operator impersonates it. Unset: the operator's
    /// `--default-service-account`, or without that flag the operator's own rights
    /// (single-tenant mode, docs/deploy.md#tenancy-and-the-threat-model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub service_account_name: Option<String>,
    /// When true, no new run of this Migration starts; a running one finishes. (As in
    /// `v1beta1`, without its default `false`: the module's "Same fields".)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// The ConfigMap (same namespace) that holds the deployment's history. Default
    /// `<metadata.name>-history`. (As in `v1beta1`: the module's "Same fields".)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub history_config_map: Option<String>,
    /// Finished MigrationRuns kept per stage (default 10, at least 1). (As in `v1beta1`: the
    /// module's "Same fields".)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_history_limit: Option<u32>,
}

// Immutability is one `self == oldSelf` transition rule per field, not one on `spec`: a rule
// on `spec` would also refuse the storage-version rewrite, which fills in the defaults a newer
// version adds (oldSelf, read from the old storage version, lacks them). A per-field rule only
// runs when the field exists in both, so a newly defaulted field passes and every change fails.
/// One execution of one stage of a Migration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "stagehand.dev",
    version = "v1alpha1",
    kind = "MigrationRun",
    namespaced,
    status = "MigrationRunStatus",
    shortname = "migrun",
    category = "stagehand",
    served = true,
    storage = false,
    deprecated = "stagehand.dev/v1alpha1 MigrationRun is deprecated; use stagehand.dev/v1beta1 MigrationRun",
    doc = "One execution of one stage (pre or post) of a Migration.",
    printcolumn(name = "Stage", type_ = "string", json_path = ".spec.stage"),
    printcolumn(name = "Release", type_ = "string", json_path = ".spec.release"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Progress", type_ = "string", json_path = ".status.progress"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        priority = 1,
        json_path = ".status.currentPhase"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MigrationRunSpec {
    /// The name of the Migration (same namespace) whose stage this run executes.
    #[schemars(length(min = 1))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("migrationRef is immutable: create a new MigrationRun instead"))]
    pub migration_ref: String,
    /// The stage to run: `pre` or `post`.
    #[x_kube(validation = Rule::new("self == oldSelf").message("stage is immutable: create a new MigrationRun instead"))]
    pub stage: Stage,
    /// The release this run is for; must equal the Migration's `releaseVersion`, so that a
    /// stale definition never runs.
    #[schemars(regex(
        pattern = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
    ))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("release is immutable: create a new MigrationRun instead"))]
    pub release: String,
    /// Plan only: every action proves it can reach what it would change and reports what it
    /// would do; nothing is changed and no footprint is recorded.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == oldSelf").message("dryRun is immutable: create a new MigrationRun instead"))]
    pub dry_run: bool,
    /// How long the run may wait to start before it fails with reason `Failed`. (As in
    /// `v1beta1`, without its default 3600: the module's "Same fields".)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("waitTimeoutSeconds is immutable: create a new MigrationRun instead"))]
    pub wait_timeout_seconds: Option<i64>,
    /// `Automatic` or `Manual` (the run waits for its plan's approval). (As in `v1beta1`,
    /// without its default `Automatic`: the module's "Same fields".)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("approval is immutable: create a new MigrationRun instead"))]
    pub approval: Option<Approval>,
}
