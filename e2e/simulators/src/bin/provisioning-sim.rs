//! `provisioning-sim`: the Provisioning API simulator as a process, for the demo and manual
//! tests. Prints `listening on http://ADDR` first, serves until SIGTERM or Ctrl-C.

use clap::Parser;
use stagehand_simulators::cli::{self, CommonArgs};
use stagehand_simulators::provisioning::{Provisioning, ProvisioningConfig};

/// Runs the Nubus Provisioning API simulator (subscriptions under /v1, HTTP Basic).
#[derive(Debug, Parser)]
#[command(name = "provisioning-sim", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Answer the admin's GET /v1/subscriptions/{name} with 401, as the current real server does.
    #[arg(long)]
    admin_cannot_read_single: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("provisioning-sim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), cli::CliError> {
    let mut config =
        ProvisioningConfig::new(&args.common.admin_user, &args.common.admin_password()?);
    config.admin_reads_single = !args.admin_cannot_read_single;
    let sim = Provisioning::new(config);
    if let Some(seed) = &args.common.seed {
        cli::apply_seed(&sim, seed)?;
    }
    cli::serve(sim, args.common.listen).await
}
