//! `stagehand approve migrationrun/NAME`: prints the plan a `Manual` run froze and, after a
//! confirmation, annotates the run `stagehand.dev/approve-plan=<the plan's digest>` — only
//! if the run is still the one that was read: the patch carries its `metadata.uid` and
//! `metadata.resourceVersion` as preconditions, so a run changed, or deleted and recreated
//! under the same name, since it was printed is never approved unseen.

use std::io::BufRead;

use clap::Args;
use kube::api::{Api, Patch, PatchParams};
use kube::{Error as KubeError, ResourceExt};
use stagehand_config::fingerprint::footprint_text;
use stagehand_crds::unversioned::FrozenPlan;
use stagehand_crds::{APPROVE_PLAN_ANNOTATION, Approval, MigrationRun};

use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE};
use super::output::{plan_rows, print_plan_rows};
use super::wait::{Named, parse_target};

/// `stagehand approve`.
#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The run whose plan to approve: `migrationrun/NAME`.
    pub target: String,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Approve without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Approve only if the run's plan has this digest (what a reviewer saw).
    #[arg(long)]
    pub digest: Option<String>,
}

/// Runs `stagehand approve`; the exit code: 0 approved (or already), 1 refused (not a
/// Manual run, not planned yet, finished, another digest, not confirmed), 2 usage or
/// unreadable.
pub fn run(args: ApproveArgs) -> u8 {
    let name = match parse_target(&args.target) {
        Ok(Named::Run(name)) => name,
        Ok(Named::Migration(_)) => {
            eprintln!("stagehand approve: a plan belongs to a run: name it as migrationrun/NAME");
            return EXIT_USAGE;
        }
        Err(e) => {
            eprintln!("stagehand approve: {e}");
            return EXIT_USAGE;
        }
    };
    super::cluster::with_client("approve", |client| async move {
        let ns = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let api: Api<MigrationRun> = Api::namespaced(client, &ns);
        let run = match api.get_opt(&name).await {
            Ok(Some(r)) => r,
            Ok(None) => {
                eprintln!("stagehand approve: migrationrun/{name} not found in namespace {ns}");
                return EXIT_USAGE;
            }
            Err(e) => {
                eprintln!("stagehand approve: reading migrationrun/{name}: {e}");
                return EXIT_USAGE;
            }
        };
        let digest = match approvable(&run) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("stagehand approve: migrationrun/{name}: {e}");
                return EXIT_INVALID;
            }
        };
        print_plan(&name, &run, &digest);
        let approved = run
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPROVE_PLAN_ANNOTATION));
        if approved == Some(&digest) {
            println!("migrationrun/{name}: plan {digest} is already approved");
            return EXIT_OK;
        }
        if let Some(expected) = &args.digest
            && *expected != digest
        {
            eprintln!(
                "stagehand approve: migrationrun/{name}: its plan is {digest}, not {expected}: nothing approved"
            );
            return EXIT_INVALID;
        }
        if !args.yes && !confirmed(&name, &digest) {
            eprintln!("stagehand approve: not confirmed: nothing approved");
            return EXIT_INVALID;
        }
        match annotate(&api, &run, &digest).await {
            Ok(()) => {
                println!("migrationrun/{name}: plan {digest} approved");
                EXIT_OK
            }
            Err(e @ (AnnotateError::Changed { .. } | AnnotateError::Gone { .. })) => {
                eprintln!("stagehand approve: {e}");
                EXIT_INVALID
            }
            Err(e) => {
                eprintln!("stagehand approve: {e}");
                EXIT_USAGE
            }
        }
    })
}

/// Why an approval was not written.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// The run's uid or resourceVersion is no longer the one read (409 Conflict).
    #[error(
        "migrationrun/{name} changed, or was deleted and recreated, since it was read: nothing approved. Review it again: run `stagehand approve migrationrun/{name}` once more"
    )]
    Changed {
        /// The run.
        name: String,
    },
    /// The run is gone (404).
    #[error("migrationrun/{name} was deleted since it was read: nothing approved")]
    Gone {
        /// The run.
        name: String,
    },
    /// The run as read carries no uid or resourceVersion to guard the patch with.
    #[error(
        "migrationrun/{name} as read has no metadata.uid or metadata.resourceVersion: nothing approved"
    )]
    Unidentified {
        /// The run.
        name: String,
    },
    /// Any other API error.
    #[error("annotating migrationrun/{name}: {source}")]
    Api {
        /// The run.
        name: String,
        /// The error.
        source: KubeError,
    },
}

/// Annotates `read` (the run as it was read and printed) `stagehand.dev/approve-plan=<digest>`
/// with a JSON merge patch that carries its `metadata.uid` and `metadata.resourceVersion`:
/// the API server refuses it (409 Conflict) if the run changed or was recreated since.
pub async fn annotate(
    api: &Api<MigrationRun>,
    read: &MigrationRun,
    digest: &str,
) -> Result<(), AnnotateError> {
    let name = read.name_any();
    let (Some(uid), Some(version)) = (read.uid(), read.resource_version()) else {
        return Err(AnnotateError::Unidentified { name });
    };
    let patch = serde_json::json!({
        "metadata": {
            "uid": uid,
            "resourceVersion": version,
            "annotations": {APPROVE_PLAN_ANNOTATION: digest},
        }
    });
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(KubeError::Api(e)) if e.code == 409 => Err(AnnotateError::Changed { name }),
        Err(KubeError::Api(e)) if e.code == 404 => Err(AnnotateError::Gone { name }),
        Err(source) => Err(AnnotateError::Api { name, source }),
    }
}

/// The digest of the plan `run` waits to have approved, or why there is nothing to approve.
pub fn approvable(run: &MigrationRun) -> Result<String, String> {
    if run.spec.approval != Approval::Manual {
        return Err("its approval is Automatic: it needs none".into());
    }
    let status = run.status.as_ref();
    if status.is_some_and(crate::run::gate::terminal) {
        return Err("it has finished: there is nothing left to approve".into());
    }
    if status.is_some_and(|s| s.actions.iter().any(|a| a.start_time.is_some())) {
        return Err("it has started executing its plan: it was approved already".into());
    }
    let Some(status) = status.filter(|s| s.frozen_plan.is_some()) else {
        return Err(
            "it has not planned yet: approve it once its reason is AwaitingApproval".to_string(),
        );
    };
    // The findings of its review are planned after the plan is frozen: until the run waits
    // for approval, the digest to approve may not be complete.
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str());
    if reason.is_some_and(|r| r != "AwaitingApproval") {
        return Err(format!(
            "it is not waiting for approval yet (reason {}): approve it once its reason is AwaitingApproval",
            reason.unwrap_or_default()
        ));
    }
    Ok(crate::run::approval::approval_digest(status))
}

fn print_plan(name: &str, run: &MigrationRun, digest: &str) {
    let status = run.status.clone().unwrap_or_default();
    println!(
        "migrationrun/{name}: stage {} of release {}, last migrated release {}, plan {digest}",
        run.spec.stage,
        run.spec.release,
        status.last_migrated_release.as_deref().unwrap_or("none")
    );
    if let Some(frozen) = &status.frozen_plan {
        println!("{}", covered(frozen));
    }
    print_plan_rows(&plan_rows(&status.actions));
    for a in &status.actions {
        if let Some(f) = &a.findings {
            println!(
                "the digest also covers the findings of action {} {}: {} object(s), {} ({}); print them with `stagehand report migrationrun/{name}`",
                a.index,
                a.id,
                f.rows,
                f.digest,
                f.config_maps.join(", ")
            );
        }
    }
}

/// What a plan's digest covers, in one line.
pub fn covered(frozen: &FrozenPlan) -> String {
    if frozen.declarations_digest.is_none() {
        return "the digest covers the declarations only (planned by an earlier Stagehand): the operator plans the run again, under a new digest, before it can run".into();
    }
    let prints: Vec<String> = frozen
        .footprints
        .iter()
        .filter_map(crate::run::ledger::footprint_of)
        .map(|print| footprint_text(&print))
        .collect();
    format!(
        "the digest covers the stage's declarations, installedRelease {}, the last migrated release {} and the recorded footprints of its tagged actions ({})",
        frozen.installed_release.as_deref().unwrap_or("(none)"),
        frozen.last_migrated_release.as_deref().unwrap_or("none"),
        if prints.is_empty() {
            "none".to_string()
        } else {
            prints.join(", ")
        }
    )
}

fn confirmed(name: &str, digest: &str) -> bool {
    eprint!("approve plan {digest} of migrationrun/{name}? [y/N] ");
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(_) => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        Err(_) => false,
    }
}
