//! The controllers: `MigrationRun` (the run engine) and `Migration` (validation on every
//! change, problems in its conditions before any run).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use stagehand_actions::Library;
use stagehand_config::{Context, Declarations, Recorded, validate};
use stagehand_crds::{Migration, MigrationRun};
use tracing::{info, warn};

use super::conditions::migration_conditions;
use super::engine::{EngineError, Shared, reconcile};
use super::status::update_migration_status;

/// Validates a Migration and writes its conditions and problems.
async fn reconcile_migration(
    migration: Arc<Migration>,
    shared: Arc<Shared>,
) -> Result<Requeue, EngineError> {
    let namespace = migration.namespace().unwrap_or_default();
    let api: Api<Migration> = Api::namespaced(shared.client.clone(), &namespace);
    let spec =
        serde_json::to_value(&migration.spec).map_err(|e| EngineError::Manifest(e.to_string()))?;
    let status = serde_json::to_value(&migration.status)
        .map_err(|e| EngineError::Manifest(e.to_string()))?;
    let (problems, lines) = match (
        Declarations::from_spec(&spec),
        Recorded::from_status(Some(&status)),
    ) {
        (Ok(declarations), Ok(recorded)) => {
            let report = validate(
                &declarations,
                &Context::new(&declarations, &recorded, None),
                &Library,
            );
            let lines = report
                .problems
                .iter()
                .map(|p| format!("{} {}: {}", p.code, p.location(), p.message))
                .collect();
            (report.problems, lines)
        }
        (Err(e), _) | (_, Err(e)) => (Vec::new(), vec![e.to_string()]),
    };
    let generation = migration.metadata.generation;
    update_migration_status(&api, &migration.name_any(), |s| {
        s.conditions = migration_conditions(&lines, generation, &s.conditions);
        s.problems = problems.clone();
        s.observed_generation = generation;
    })
    .await?;
    Ok(Requeue::await_change())
}

fn retry<K: kube::Resource<DynamicType = ()>>(
    _: Arc<K>,
    error: &EngineError,
    shared: Arc<Shared>,
) -> Requeue {
    warn!(%error, "reconcile failed; retrying");
    shared.metrics.reconcile_error(&K::kind(&()));
    Requeue::requeue(Duration::from_secs(5))
}

/// Stagehand's own CRDs, checked at start-up.
pub const OWN_CRDS: [&str; 2] = ["migrations.stagehand.dev", "migrationruns.stagehand.dev"];

/// At start-up: when a CRD of Stagehand's still lists a version other than its storage version
/// in `storedVersions`, rewrites its objects through the storage version and prunes the list
/// (SPEC section 3). Logs and records an Event of what it did; a failure is logged and leaves
/// `storedVersions` as it was (the controllers still start: the old objects stay readable).
pub async fn migrate_own_crds(client: &Client, recorder: &Recorder) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Resource;
    use kube::runtime::events::{Event, EventType};
    use stagehand_actions::crd_storage_version_migrate::engine::{MigrateOptions, migrate};

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

/// Runs both controllers until the process is asked to stop. `namespace` limits them to one
/// namespace.
pub async fn run(client: Client, namespace: Option<String>, metrics: crate::metrics::Metrics) {
    let reporter = Reporter {
        controller: "stagehand".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let shared = Arc::new(Shared {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics,
    });
    migrate_own_crds(&client, &shared.recorder).await;
    let (runs, migrations): (Api<MigrationRun>, Api<Migration>) = match &namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "starting controllers"
    );
    let run_controller = Controller::new(runs, watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile, retry, shared.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(error = %e, "MigrationRun reconcile error");
            }
        });
    let migration_controller = Controller::new(migrations, watcher::Config::default())
        .shutdown_on_signal()
        .run(reconcile_migration, retry, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(error = %e, "Migration reconcile error");
            }
        });
    futures::join!(run_controller, migration_controller);
}
