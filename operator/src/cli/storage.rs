//! `stagehand storage-status` and `stagehand storage-migrate`: the storage-version lab's check
//! and procedure, against the cluster of the current kubeconfig.

use stagehand_actions::crd_storage_version_migrate::rewrite::{self, MigrateOptions};

use super::cluster::with_client;
use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE};

/// Prints the lab's check; exit 0 `MIGRATED`, 1 `PENDING`, 2 when it cannot tell.
pub fn status(crd: &str) -> u8 {
    with_client("storage-status", |client| async move {
        match rewrite::storage_state(&client, crd).await {
            Ok(state) => {
                print!("{}", state.render());
                if state.pending().is_empty() {
                    EXIT_OK
                } else {
                    EXIT_INVALID
                }
            }
            Err(e) => {
                eprintln!("stagehand storage-status: {e}");
                EXIT_USAGE
            }
        }
    })
}

/// Rewrites and prunes; prints a summary and the state after. Exit 0 when migrated.
pub fn migrate(crd: &str, options: &MigrateOptions) -> u8 {
    with_client("storage-migrate", |client| async move {
        match rewrite::migrate(&client, crd, options).await {
            Ok(report) => {
                eprintln!("{}", report.summary());
                print!("{}", report.after.render());
                EXIT_OK
            }
            Err(e) => {
                eprintln!("stagehand storage-migrate: {e}");
                EXIT_INVALID
            }
        }
    })
}
