//! Stagehand's declaration model: release series and windows, validation that collects every
//! problem of both stages, skip-list matching, footprints and the per-action planning decision
//! (docs/design.md#declarations, codes: docs/design.md#problem-codes-and-reasons).
//!
//! Pure: no I/O, no async, no clock. Callers read files and clusters; this crate decides.
//!
//! This file is the crate's front door only: `pub mod` and `pub use`. The shared vocabulary
//! (`Stage`, `Footprint`, `ActionCatalog`, ...) is in [`vocabulary`], what the planner knows
//! about a deployment in [`deployment`]; the other modules import them from there.

pub mod declarations;
pub mod deployment;
pub mod endpoints;
pub mod fingerprint;
pub mod object_store;
pub mod plan;
pub mod problems;
pub mod series;
pub mod validate;
pub mod vocabulary;

pub use declarations::{
    Declaration, Declarations, ManifestError, ObjectStoreRef, Recorded, SkipEntry, read_manifest,
};
pub use deployment::Deployment;
pub use endpoints::{
    AllowedEndpoints, Endpoint, EndpointPattern, EndpointPatternError, endpoint_problems,
};
pub use fingerprint::{Change, Fingerprint};
pub use object_store::ObjectStore;
pub use plan::{Decision, Plan, PlannedAction, Reason, declared_footprint, plan_stage};
pub use problems::{Finding, Problem, ProblemCode, Warning, WarningCode};
pub use series::{Release, Series, VersionError, Window};
pub use validate::{Report, validate};
pub use vocabulary::{ActionCatalog, ConfigIssue, Footprint, Handover, HandoverRole, Needs, Stage};
