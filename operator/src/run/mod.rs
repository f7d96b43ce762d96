//! The run engine (SPEC section 5) and the controllers of `Migration` and `MigrationRun`.
//!
//! A run is a pipeline of named steps, each in its own module: [`gate`] (may it start now),
//! [`assess`] (history readable, declarations valid), [`freeze`] (the plan frozen into status,
//! and the check that the Migration still declares it), [`preflight`] (everything the planned
//! actions need, before the first change), then execution and the finish in [`engine`]. The
//! history's record of truth is a ledger ConfigMap ([`ledger`] is its format, [`history`] reads
//! and writes it), mirrored into the Migration's status.

pub mod approval;
pub mod assess;
pub mod conditions;
pub mod controller;
pub mod engine;
pub mod freeze;
pub mod gate;
pub mod history;
pub mod ledger;
pub mod preflight;
pub mod retention;
pub mod status;
pub mod view;
