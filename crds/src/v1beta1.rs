//! `stagehand.dev/v1beta1`: the current API and the storage version. The fields of `v1alpha1`,
//! with schema defaults for the ones it added (`Migration.spec.suspend`,
//! `MigrationRun.spec.waitTimeoutSeconds`, `approval`).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::unversioned::{
    MigrationRunStatus, MigrationStatus, ObjectStore, SecretFile, Stage, StageActions, StageSkips,
};

/// The declarations of one release's migration for one deployment.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "stagehand.dev",
    version = "v1beta1",
    kind = "Migration",
    namespaced,
    status = "MigrationStatus",
    shortname = "mig",
    category = "stagehand",
    served = true,
    storage = true,
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
    /// When true, no new run of this Migration starts; a running one finishes.
    #[serde(default)]
    #[schemars(default = "default_false")]
    pub suspend: bool,
    /// The ConfigMap (same namespace) that holds the deployment's history: the record of
    /// truth of every footprint and the last migrated release, which outlives this Migration
    /// (no owner reference). Default `<metadata.name>-history`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub history_config_map: Option<String>,
    /// Finished MigrationRuns kept per stage (default 10, at least 1): when a run finishes,
    /// older finished runs of the same stage beyond this many are deleted, newest kept. A
    /// deployment creates a new run each time, so this keeps them from piling up. Runs that
    /// have not finished are never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_history_limit: Option<u32>,
}

fn default_false() -> bool {
    false
}

// Immutability is one `self == oldSelf` transition rule per field, not one on `spec`: a rule
// on `spec` would also refuse the storage-version rewrite, which fills in the defaults a newer
// version adds (oldSelf, read from the old storage version, lacks them). A per-field rule only
// runs when the field exists in both, so a newly defaulted field passes and every change fails.
/// One execution of one stage of a Migration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "stagehand.dev",
    version = "v1beta1",
    kind = "MigrationRun",
    namespaced,
    status = "MigrationRunStatus",
    shortname = "migrun",
    category = "stagehand",
    served = true,
    storage = true,
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
    /// How long the run may wait to start (for another run of the Migration, or for a post
    /// run, for the release's pre run to succeed) before it fails with reason `Failed`.
    #[serde(default = "default_wait_timeout_seconds")]
    #[schemars(default = "default_wait_timeout_seconds", range(min = 1))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("waitTimeoutSeconds is immutable: create a new MigrationRun instead"))]
    pub wait_timeout_seconds: i64,
    /// `Automatic` (default): the run executes its plan. `Manual`: it plans and runs the
    /// preflight, writes the frozen plan and its digest (`status.frozenPlan.digest`), then
    /// waits with reason `AwaitingApproval` until it is annotated
    /// `stagehand.dev/approve-plan=<that digest>` (`stagehand approve migrationrun/NAME`).
    #[serde(default)]
    #[schemars(default = "default_approval")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("approval is immutable: create a new MigrationRun instead"))]
    pub approval: Approval,
}

/// Whether a run needs a person's approval of its plan before it changes anything.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum Approval {
    /// The run executes its plan as soon as the preflight passed.
    #[default]
    Automatic,
    /// The run waits for the annotation `stagehand.dev/approve-plan` naming its plan's digest.
    Manual,
}

fn default_approval() -> Approval {
    Approval::Automatic
}

/// The annotation that approves a `Manual` run's plan; its value is the plan's digest
/// (`status.frozenPlan.digest`).
pub const APPROVE_PLAN_ANNOTATION: &str = "stagehand.dev/approve-plan";

/// The annotation on a pre run that accepts an interrupted upgrade: its value names the
/// release whose pre stage ran and whose post stage never did. The run then plans against the
/// last migrated release, as if that release's pre stage had not run (docs/runbook.md,
/// `InterruptedUpgrade`).
pub const ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION: &str = "stagehand.dev/accept-interrupted-upgrade";

/// One hour: enough for a deployment between the pre and the post stage.
pub const DEFAULT_WAIT_TIMEOUT_SECONDS: i64 = 3600;

fn default_wait_timeout_seconds() -> i64 {
    DEFAULT_WAIT_TIMEOUT_SECONDS
}

impl Default for MigrationRunSpec {
    fn default() -> Self {
        Self {
            migration_ref: String::new(),
            stage: Stage::Pre,
            release: String::new(),
            dry_run: false,
            wait_timeout_seconds: DEFAULT_WAIT_TIMEOUT_SECONDS,
            approval: Approval::Automatic,
        }
    }
}
