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
    cli::main("provisioning-sim", &args.common, |password| {
        let mut config = ProvisioningConfig::new(&args.common.admin_user, &password);
        config.admin_reads_single = !args.admin_cannot_read_single;
        Provisioning::new(config)
    })
    .await
}
