//! The command line (docs/design.md#the-command-line, docs/cli.md). Exit codes: 0 success/valid, 1
//! invalid (or `PENDING`), 2 usage error or unreadable input.

pub mod approve;
pub mod cluster;
pub mod crds;
pub mod import;
pub mod manifest;
pub mod operator;
pub mod output;
pub mod plan;
pub mod report;
pub mod storage;
pub mod validate;
pub mod wait;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use output::Output;
use stagehand_config::Stage;

/// Stagehand carries an application deployment from one release to the next.
#[derive(Debug, Parser)]
// `stagehand --version`: the crate version and the commit it was built from (build.rs).
#[command(
    name = "stagehand",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("STAGEHAND_GIT_COMMIT"), ")"),
    about,
    long_about = None
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers against the cluster of the current kubeconfig (or in-cluster).
    #[command(after_help = operator::SUPPORTED_HELP)]
    Operator(operator::OperatorArgs),
    /// Print the CRD manifests (every served version).
    Crds {
        /// Print the first release's CRDs instead: v1alpha1 only, served and stored (for
        /// reproducing an old cluster in tests).
        #[arg(long, hide = true)]
        v1alpha1_only: bool,
    },
    /// A Migration from openDesk's migrations values, and its history ledger from the
    /// `migrations-status` ConfigMap; printed, checked (--dry-run) or applied (--apply).
    ImportOpendesk(import::ImportArgs),
    /// Validate a Migration manifest offline, both stages.
    Validate {
        /// The Migration manifest (`-` for standard input).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The last migrated release (overrides the manifest's status and installedRelease).
        #[arg(long)]
        last_migrated: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Validate, then print the decision for every declared action of a stage.
    Plan {
        /// The Migration manifest (`-` for standard input).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The stage to plan.
        #[arg(long, value_parser = parse_stage)]
        stage: Stage,
        /// The last migrated release (overrides the manifest's status and installedRelease).
        #[arg(long)]
        last_migrated: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Follow a MigrationRun (or both stages of a release) until it is done: one line per
    /// action as it starts and ends; exit 0 succeeded, 1 stalled or failed, 2 timeout or
    /// usage error.
    Wait(wait::WaitArgs),
    /// Print the plan a `Manual` MigrationRun froze and, once confirmed, approve it (the
    /// annotation `stagehand.dev/approve-plan=<digest>`).
    Approve(approve::ApproveArgs),
    /// Print each action's decision, summary and findings (the objects it found, kept in
    /// ConfigMaps after the run): the review of a dry run or of a `Manual` run's plan.
    Report(report::ReportArgs),
    /// Print a CRD's served, storage and stored versions, then `PENDING <version>` (exit 1)
    /// or `MIGRATED` (exit 0). Read-only.
    StorageStatus {
        /// The CRD's name, e.g. `migrations.stagehand.dev`.
        crd: String,
    },
    /// Rewrite every object of a CRD through its storage version, then prune
    /// `status.storedVersions` to the storage version.
    StorageMigrate {
        /// The CRD's name, e.g. `migrations.stagehand.dev`.
        crd: String,
        /// Objects per list page.
        #[arg(long, default_value_t = 500)]
        page_size: u32,
        /// Rewrites in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Upper bound on writes per second (0: bounded by --concurrency only).
        #[arg(long, default_value_t = 2000)]
        max_writes_per_second: u32,
    },
}

fn parse_stage(s: &str) -> Result<Stage, String> {
    s.parse()
}

/// Runs a parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Operator(args) => operator::run(args),
        Command::Crds { v1alpha1_only } => crds::run(v1alpha1_only),
        Command::ImportOpendesk(args) => import::run(args),
        Command::Validate {
            file,
            last_migrated,
            output,
        } => validate::run(&file, last_migrated.as_deref(), output),
        Command::Plan {
            file,
            stage,
            last_migrated,
            output,
        } => plan::run(&file, stage, last_migrated.as_deref(), output),
        Command::Wait(args) => wait::run(args),
        Command::Approve(args) => approve::run(args),
        Command::Report(args) => report::run(args),
        Command::StorageStatus { crd } => storage::status(&crd),
        Command::StorageMigrate {
            crd,
            page_size,
            concurrency,
            max_writes_per_second,
        } => storage::migrate(
            &crd,
            &stagehand_actions::crd_storage_version_migrate::rewrite::MigrateOptions {
                page_size,
                concurrency,
                max_writes_per_second: Some(max_writes_per_second).filter(|r| *r > 0),
                ..Default::default()
            },
        ),
    }
}
