//! The `stagehand` binary's library: the command line (and, with later issues, the
//! controllers, run engine and storage-version migration).

pub mod adopt;
pub mod cli;
pub mod leader;
pub mod metrics;
pub mod run;
pub mod serve;
pub mod supported;
#[cfg(test)]
mod testing;
