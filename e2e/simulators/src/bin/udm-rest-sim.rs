//! `udm-rest-sim`: the UDM REST API simulator as a process, for the demo and manual tests.
//! Prints `listening on http://ADDR` first, serves until SIGTERM or Ctrl-C. The API is below
//! `/univention/udm/`; pass `--admin-user cn=admin` for openDesk's admin.

use clap::Parser;
use stagehand_simulators::cli::{self, CommonArgs};
use stagehand_simulators::udm::{DEFAULT_BASE_DN, Udm, UdmConfig};

/// Runs the UDM REST API simulator (/univention/udm/: users/user, groups/group and the
/// oxmail functional accounts, shared accounts and shared account permissions).
#[derive(Debug, Parser)]
#[command(name = "udm-rest-sim", version)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// The LDAP base.
    #[arg(long, env = "SIM_BASE_DN", default_value = DEFAULT_BASE_DN)]
    base_dn: String,
    /// Answer requests without `Accept: application/json` with 406 instead of HTML
    /// (directory/manager/rest/html-view-enabled=false).
    #[arg(long)]
    no_html_view: bool,
    /// Do not give created objects a univentionObjectIdentifier of their own.
    #[arg(long)]
    no_object_identifier: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    cli::main("udm-rest-sim", &args.common, |password| {
        let mut config = UdmConfig::new(&args.common.admin_user, &password);
        config.base_dn = args.base_dn.clone();
        config.html_view_enabled = !args.no_html_view;
        config.assign_object_identifier = !args.no_object_identifier;
        Udm::new(config)
    })
    .await
}
