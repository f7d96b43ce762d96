//! `stagehand`: the operator and its command line.

use std::process::ExitCode;

use clap::Parser;
use stagehand::cli::{Cli, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(run(cli))
}
