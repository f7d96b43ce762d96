//! The run engine (SPEC section 5) and the controllers of `Migration` and `MigrationRun`.
//!
//! A run validates both stages, writes its plan to status before executing anything, runs the
//! planned actions strictly in order (planning phase, then apply phase), records the
//! footprint of each tagged action in the Migration's history as soon as it succeeds, and
//! advances `lastMigratedRelease` when a post run succeeds. Everything it needs to resume is in
//! status: after a restart, actions already `Succeeded` are not repeated and the interrupted
//! one is re-entered.

pub mod assess;
pub mod conditions;
pub mod controller;
pub mod engine;
pub mod freeze;
pub mod gate;
pub mod history;
pub mod ledger;
pub mod preflight;
pub mod status;
