//! `ox-soap-sim`: the OX App Suite SOAP simulator as a process, for the demo and manual tests.
//! Prints `listening on http://ADDR` first, serves until SIGTERM or Ctrl-C.

use clap::Parser;
use stagehand_simulators::cli::{self, CommonArgs};
use stagehand_simulators::ox::{OxConfig, OxSoap};

/// Runs the OX App Suite SOAP provisioning API simulator (/webservices/OX*Service).
#[derive(Debug, Parser)]
#[command(name = "ox-soap-sim", version)]
struct Args {
    /// --admin-user/--admin-password-file are the master admin's; oxadmin gets the same
    /// password unless the seed gives a context its own.
    #[command(flatten)]
    common: CommonArgs,
    /// USERNAME_CHANGEABLE=false: renaming a user fails with "Changing username is disabled!".
    #[arg(long)]
    username_not_changeable: bool,
    /// Refuse the master admin on the per-context services (MASTER_ACCOUNT_OVERRIDE=false).
    #[arg(long)]
    no_master_override: bool,
    /// Answer a void change with an empty SOAP Body instead of a changeResponse element.
    #[arg(long)]
    empty_change_response: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::main("ox-soap-sim", &args.common, |password| {
        let mut config = OxConfig::new(&args.common.admin_user, &password);
        config.username_changeable = !args.username_not_changeable;
        config.master_account_override = !args.no_master_override;
        config.empty_change_response = args.empty_change_response;
        OxSoap::new(config)
    })
    .await
}
