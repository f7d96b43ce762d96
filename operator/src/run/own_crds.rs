//! Stagehand's own CRDs at start-up (docs/design.md#storage-versions): objects still stored in an
//! old version are rewritten through the storage version and `storedVersions` is pruned, before the
//! controllers start.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
use stagehand_actions::crd_storage_version_migrate::rewrite::{MigrateOptions, migrate};
use tracing::{info, warn};

/// Stagehand's own CRDs, checked at start-up.
pub const OWN_CRDS: [&str; 2] = ["migrations.stagehand.dev", "migrationruns.stagehand.dev"];

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
