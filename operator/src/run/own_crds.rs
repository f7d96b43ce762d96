//! Stagehand's own CRDs at start-up: first that the installed CRDs hold this operator's schema
//! (docs/deploy.md#crd-policy: [`ensure_current_crds`]), then that objects still stored in an
//! old version are rewritten through the storage version and `storedVersions` is pruned
//! (docs/design.md#storage-versions: [`migrate_own_crds`]), before the controllers start.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use stagehand_actions::crd_storage_version_migrate::rewrite::{MigrateOptions, migrate};
use stagehand_crds::digest::{OWN_VERSION, SCHEMA_DIGEST_ANNOTATION, Verdict, compare};
use tracing::{error, info, warn};

use crate::serve::Readiness;

/// Stagehand's own CRDs, checked at start-up.
pub const OWN_CRDS: [&str; 2] = ["migrations.stagehand.dev", "migrationruns.stagehand.dev"];

/// The field manager of the CRDs the operator applies (`--crd-policy=apply`).
pub const CRD_FIELD_MANAGER: &str = "stagehand";

/// How often a replica that refused stale CRDs checks them again, by default.
pub const CRD_CHECK_INTERVAL_SECONDS: u64 = 30;

/// What to do at start-up about installed CRDs that do not hold this operator's schema
/// (docs/deploy.md#crd-policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CrdPolicy {
    /// Refuse them: an error log line and a `Degraded` Event naming the CRD, `/readyz` 503 with
    /// the reason, no controllers; checked again periodically until they are current.
    Check,
    /// Apply this operator's CRDs (server-side apply, field manager `stagehand`), then go on.
    /// A CRD written by a newer Stagehand is left as it is.
    Apply,
    /// UNSAFE: only log a warning and run the controllers on whatever is installed. On a stale
    /// CRD the API server silently drops the status fields the safety rules depend on.
    Ignore,
}

/// What the fix of a stale CRD is, in the log line, the Event and `/readyz`.
pub const STALE_CRD_FIX: &str = "apply this release's CRDs with `kubectl apply --server-side -f deploy/crds/stagehand-crds.yaml` (or `stagehand crds | kubectl apply --server-side -f -`; with Helm: crds.install=true), or run the operator with --crd-policy=apply";

/// One installed CRD of Stagehand's compared with this operator's.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The CRD's name.
    pub name: String,
    /// What the comparison says.
    pub verdict: Verdict,
    /// This operator's schema digest of it.
    pub own_digest: String,
    /// The installed object, if any (the Event goes on it).
    pub installed: Option<CustomResourceDefinition>,
}

/// Why [`inspect`] or [`apply_own_crds`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CrdCheckError {
    /// This operator's CRDs could not be generated (a bug).
    #[error("cannot generate this operator's CRDs: {0}")]
    Generate(#[from] stagehand_crds::generate::GenerateError),
    /// The API server did not answer a read.
    #[error(
        "cannot read CRD {name}: {source} (the operator needs `get` on it: the chart's ClusterRole <release>-stagehand-crds grants it)"
    )]
    Read {
        /// The CRD.
        name: String,
        /// What kube reported.
        source: kube::Error,
    },
    /// The API server refused the apply.
    #[error(
        "cannot apply CRD {name}: {source} (--crd-policy=apply needs `get` and `patch` on it, which the chart grants with crdPolicy=apply, and `create` on customresourcedefinitions when it is not installed at all, which the chart does not grant)"
    )]
    Apply {
        /// The CRD.
        name: String,
        /// What kube reported.
        source: kube::Error,
    },
}

/// Compares every installed CRD of Stagehand's with this operator's (`own`: the generated,
/// annotated ones).
pub async fn inspect(
    client: &Client,
    own: &[CustomResourceDefinition],
) -> Result<Vec<Inspection>, CrdCheckError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::with_capacity(own.len());
    for crd in own {
        let name = crd.name_any();
        let installed = api
            .get_opt(&name)
            .await
            .map_err(|source| CrdCheckError::Read {
                name: name.clone(),
                source,
            })?;
        let own_digest = own_digest(crd);
        let verdict = compare(
            installed.as_ref().map(|c| c.annotations()),
            &own_digest,
            OWN_VERSION,
        );
        out.push(Inspection {
            name,
            verdict,
            own_digest,
            installed,
        });
    }
    Ok(out)
}

fn own_digest(crd: &CustomResourceDefinition) -> String {
    crd.annotations()
        .get(SCHEMA_DIGEST_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| stagehand_crds::digest::schema_digest(crd))
}

/// Server-side applies `crds` (field manager [`CRD_FIELD_MANAGER`], forcing conflicts: the
/// operator's schema wins over whoever wrote the stale one).
pub async fn apply_own_crds(
    client: &Client,
    crds: &[&CustomResourceDefinition],
) -> Result<(), CrdCheckError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(CRD_FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| CrdCheckError::Apply {
                name: name.clone(),
                source,
            })?;
        info!(crd = %name, version = OWN_VERSION, digest = %own_digest(crd), "applied this operator's CRD (--crd-policy=apply)");
    }
    Ok(())
}

/// The `/readyz` reason of CRDs refused: each named with its verdict, and the fix.
pub fn refusal(refused: &[&Inspection]) -> String {
    let crds: Vec<String> = refused
        .iter()
        .map(|i| format!("CRD {} is {}", i.name, i.verdict))
        .collect();
    format!(
        "{}; the controllers do not start until this operator's CRDs are installed (Stagehand {OWN_VERSION}): {STALE_CRD_FIX}",
        crds.join("; ")
    )
}

/// At start-up, before the controllers (and before `/readyz` can answer 200): makes sure the
/// installed CRDs of Stagehand's hold this operator's schema, as `policy` says
/// (docs/deploy.md#crd-policy). A CRD written by a newer Stagehand is accepted with a warning.
/// Under [`CrdPolicy::Check`] (and [`CrdPolicy::Apply`] when the apply fails) stale or missing
/// CRDs are refused: an error log line per CRD naming both digests and the fix, a Warning Event
/// `Degraded` on the CRD, `/readyz` 503 with the reason; they are checked again every
/// `interval` until they are current. Returns `true` to go on, `false` when `stop` resolved
/// first.
pub async fn ensure_current_crds<S>(
    client: &Client,
    policy: CrdPolicy,
    interval: Duration,
    readiness: &Readiness,
    stop: S,
) -> bool
where
    S: Future<Output = ()>,
{
    let own = match stagehand_crds::generate::crds() {
        Ok(own) => own,
        Err(e) => {
            error!(error = %e, "cannot generate this operator's CRDs");
            readiness.block(Some(e.to_string()));
            stop.await;
            return false;
        }
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "stagehand".into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    tokio::pin!(stop);
    let mut applied = false;
    let mut last_reason: Option<String> = None;
    loop {
        let reason = match inspect(client, &own).await {
            Err(e) if policy == CrdPolicy::Ignore => {
                warn!(error = %e, "--crd-policy=ignore: starting without knowing whether the CRDs are current (UNSAFE)");
                return true;
            }
            Err(e) => {
                error!(error = %e, "cannot check the CRDs; the controllers do not start");
                e.to_string()
            }
            Ok(inspections) => {
                for i in &inspections {
                    if let Verdict::Newer { .. } = i.verdict {
                        warn!(crd = %i.name, "CRD {} is {}: accepted (a newer schema only adds fields); this operator is older than its CRDs", i.name, i.verdict);
                    }
                }
                let refused: Vec<&Inspection> = inspections
                    .iter()
                    .filter(|i| !i.verdict.acceptable())
                    .collect();
                if refused.is_empty() {
                    if last_reason.is_some() {
                        info!("the CRDs are current now: starting");
                    }
                    readiness.block(None);
                    return true;
                }
                match policy {
                    CrdPolicy::Ignore => {
                        for i in &refused {
                            warn!(crd = %i.name, own_digest = %i.own_digest, "CRD {} is {}; --crd-policy=ignore: starting anyway (UNSAFE: the API server drops the status fields it does not know)", i.name, i.verdict);
                        }
                        return true;
                    }
                    CrdPolicy::Apply if !applied => {
                        applied = true;
                        let stale: Vec<&CustomResourceDefinition> = own
                            .iter()
                            .filter(|c| refused.iter().any(|i| i.name == c.name_any()))
                            .collect();
                        match apply_own_crds(client, &stale).await {
                            // Checked again at once: the next round sees what was applied.
                            Ok(()) => continue,
                            Err(e) => {
                                error!(error = %e, "cannot apply the CRDs; the controllers do not start");
                                e.to_string()
                            }
                        }
                    }
                    CrdPolicy::Check | CrdPolicy::Apply => {
                        for i in &refused {
                            let installed = i.installed.as_ref().map(|c| c.annotations());
                            error!(
                                crd = %i.name,
                                installed_digest = installed.and_then(|a| a.get(SCHEMA_DIGEST_ANNOTATION)).map_or("none", String::as_str),
                                installed_version = installed.and_then(|a| a.get(stagehand_crds::digest::VERSION_ANNOTATION)).map_or("none", String::as_str),
                                own_digest = %i.own_digest,
                                own_version = OWN_VERSION,
                                "CRD {} is {}: refusing to start the controllers (the API server would drop, without an error, the status fields the safety rules depend on); fix: {STALE_CRD_FIX}",
                                i.name,
                                i.verdict
                            );
                        }
                        let reason = refusal(&refused);
                        if last_reason.as_deref() != Some(reason.as_str()) {
                            publish_degraded(&recorder, &refused).await;
                        }
                        reason
                    }
                }
            }
        };
        readiness.block(Some(reason.clone()));
        last_reason = Some(reason);
        applied = false;
        info!(
            interval_seconds = interval.as_secs(),
            "checking the CRDs again later"
        );
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = &mut stop => return false,
        }
    }
}

/// A Warning Event `Degraded` on each refused CRD that exists.
async fn publish_degraded(recorder: &Recorder, refused: &[&Inspection]) {
    for i in refused {
        let Some(crd) = &i.installed else { continue };
        let event = Event {
            type_: EventType::Warning,
            reason: "Degraded".into(),
            note: Some(format!(
                "CRD {} is {}; this operator's schema digest is {} (Stagehand {OWN_VERSION}); its controllers do not start: {STALE_CRD_FIX}",
                i.name, i.verdict, i.own_digest
            )),
            action: "CRDCheck".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &crd.object_ref(&())).await {
            warn!(crd = %i.name, error = %e, "cannot publish event");
        }
    }
}

/// At start-up: when a CRD of Stagehand's still lists a version other than its storage version in
/// `storedVersions`, rewrites its objects through the storage version and prunes the list
/// (docs/design.md#storage-versions). Logs and records an Event of what it did; a failure is logged
/// and leaves `storedVersions` as it was (the controllers still start: the old objects stay
/// readable).
pub async fn migrate_own_crds(client: &Client, recorder: &Recorder) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in OWN_CRDS {
        let (type_, reason, note) = match migrate(client, name, &MigrateOptions::default()).await {
            Ok(report) if report.before.pending().is_empty() => {
                info!(crd = name, stored = ?report.before.stored, "storage version check: nothing to migrate");
                continue;
            }
            Ok(report) => {
                info!(
                    crd = name,
                    rewritten = report.rewritten,
                    "storage version check: {}",
                    report.summary()
                );
                (
                    EventType::Normal,
                    "StorageVersionMigrated",
                    report.summary(),
                )
            }
            Err(e) => {
                warn!(crd = name, error = %e, "storage version check failed; storedVersions left as they were");
                (
                    EventType::Warning,
                    "StorageVersionMigrationFailed",
                    e.to_string(),
                )
            }
        };
        if let Ok(Some(crd)) = crds.get_opt(name).await {
            let event = Event {
                type_,
                reason: reason.into(),
                note: Some(note),
                action: "StorageVersionMigration".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &crd.object_ref(&())).await {
                warn!(crd = name, error = %e, "cannot publish event");
            }
        }
    }
}
