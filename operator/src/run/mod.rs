//! The run engine (docs/design.md#the-run-engine) and the controllers of `Migration` and
//! `MigrationRun`.
//!
//! A run is a pipeline of named steps, each in its own module: [`gate`] (may it start now),
//! [`assess`] (history readable and complete, declarations valid), [`freeze`] (the plan frozen
//! into status, and the check that the Migration still declares it), [`preflight`]
//! (everything the planned actions need, before the first change), [`approval`], [`execute`]
//! and [`finish`]; [`reconcile`] runs them in order, [`finalizer`] keeps a started run until
//! its action stopped. The history's record of truth is a ledger ConfigMap ([`ledger`] is its format, [`history`] reads
//! and writes it), mirrored into the Migration's status. [`context`] holds what both
//! controllers share, [`controller`] wires them to the API server, [`own_crds`] migrates
//! Stagehand's own CRDs at start-up.

pub mod approval;
pub mod assess;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod execute;
pub mod finalizer;
pub mod findings;
pub mod finish;
pub mod freeze;
pub mod gate;
pub mod history;
pub mod ledger;
pub mod own_crds;
pub mod preflight;
pub mod progress;
pub mod reconcile;
pub mod retention;
pub mod status;
pub mod view;
