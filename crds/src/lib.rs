//! Stagehand's API: the `Migration` and `MigrationRun` kinds of group `stagehand.dev`.
//!
//! Every served version has its own module ([`v1alpha1`], [`v1beta1`]); the types both versions
//! share unchanged live in [`unversioned`]. [`generate`] merges the versions into the CRD manifests
//! that `stagehand crds` prints and `deploy/crds/` holds.
//!
//! The versions use conversion strategy `None`, so both declare the same fields: a field is
//! added to both (with its schema default in `v1beta1` only), never renamed or removed
//! ([`v1alpha1`]'s "Same fields" says why).

pub mod digest;
pub mod generate;
pub mod unversioned;
// Several `printcolumn(...)` groups repeat `type_ = "string"`, which clippy mistakes for a
// duplicated attribute.
#[allow(clippy::duplicated_attributes)]
pub mod v1alpha1;
#[allow(clippy::duplicated_attributes)]
pub mod v1beta1;

/// The API group of every Stagehand kind.
pub const GROUP: &str = "stagehand.dev";
/// The version objects are stored in.
pub const STORAGE_VERSION: &str = "v1beta1";
/// The deprecated first version.
pub const DEPRECATED_VERSION: &str = "v1alpha1";
/// The category `kubectl get stagehand` lists.
pub const CATEGORY: &str = "stagehand";

// The current version's types, for the operator and CLI.
pub use v1beta1::{
    ACCEPT_INTERRUPTED_UPGRADE_ANNOTATION, APPROVE_PLAN_ANNOTATION, Approval, Migration,
    MigrationRun, MigrationRunSpec, MigrationSpec,
};
