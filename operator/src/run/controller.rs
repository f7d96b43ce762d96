//! The controllers: `MigrationRun` (the run engine) and `Migration` (validation on every
//! change, problems in its conditions before any run).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action as Requeue, Config, Controller, Error as ControllerError};
use kube::runtime::events::EventType;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use stagehand_config::Warning;
use stagehand_crds::{Migration, MigrationRun};
use tracing::{debug, info, warn};

use super::assess::assess;
use super::conditions::migration_conditions;
use super::context::{Context, Error, Steering, event};
use super::history::History;
use super::own_crds::migrate_own_crds;
use super::reconcile::reconcile;
use super::status::update_migration_status;
use super::view::RunsView;
use crate::metrics::{MIGRATION_CONTROLLER, Metrics, RUN_CONTROLLER, RunRef};

/// A Migration's reconcile: its history ledger (written from its status when a Migration of
/// an older Stagehand has none yet) mirrored into its status, and its declarations assessed
/// into its conditions and problems. Warnings are logged and published as Events on it.
async fn reconcile_migration(
    migration: Arc<Migration>,
    context: Arc<Context>,
) -> Result<Requeue, Error> {
    let namespace = migration.namespace().unwrap_or_default();
    let name = migration.name_any();
    let api: Api<Migration> = Api::namespaced(context.client.clone(), &namespace);
    let history = History::of(&context.client, &migration);
    let (reason, lines, problems, ledger) = match history.ensure(migration.status.as_ref()).await {
        Ok(ledger) => match assess(&migration, &ledger, context.tenancy.allowed_endpoints()) {
            Ok(a) => {
                publish_warnings(&context, &migration, &a.warnings).await;
                ("Valid", Vec::new(), Vec::new(), Some(ledger))
            }
            Err(invalid) => {
                publish_warnings(&context, &migration, &invalid.warnings).await;
                ("Invalid", invalid.lines, invalid.problems, Some(ledger))
            }
        },
        Err(e) if e.is_unreadable() => {
            warn!(migration = %name, error = %e, "history ledger unreadable");
            ("HistoryUnreadable", vec![e.to_string()], Vec::new(), None)
        }
        Err(e) => return Err(e.into()),
    };
    let generation = migration.metadata.generation;
    // A new or changed spec (a new release, `suspend` lifted) may unblock its waiting runs.
    let changed = migration
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        != generation;
    update_migration_status(&api, &name, |s| {
        s.conditions = migration_conditions(reason, &lines, generation, &s.conditions);
        s.problems = super::conditions::bounded_problems(&problems);
        s.observed_generation = generation;
        if let Some(ledger) = &ledger {
            ledger.mirror_into(s);
        }
    })
    .await?;
    if changed {
        let waiting: Vec<String> = context
            .runs
            .of_migration(&namespace, &name)
            .into_iter()
            .filter(|r| !r.status.as_ref().is_some_and(super::gate::terminal))
            .map(|r| r.name_any())
            .collect();
        context
            .runs
            .wake(&namespace, waiting.iter().map(String::as_str));
    }
    Ok(Requeue::await_change())
}

/// Logs every warning and, once per generation of the Migration, publishes it as a Warning
/// Event on it.
async fn publish_warnings(context: &Context, migration: &Migration, warnings: &[Warning]) {
    let new_generation = migration
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        != migration.metadata.generation;
    for w in warnings {
        let line = format!("{} {}: {}", w.code, w.location(), w.message);
        warn!(migration = %migration.name_any(), code = %w.code, "{line}");
        if new_generation {
            event(
                &context.recorder,
                migration,
                EventType::Warning,
                &w.code.to_string(),
                line,
            )
            .await;
        }
    }
}

/// A reconcile's error: logged (and counted by [`decoded`]), retried after 5 s.
fn retry(_object: Arc<DynamicObject>, error: &Error, _context: Arc<Context>) -> Requeue {
    warn!(%error, "reconcile failed; retrying");
    Requeue::requeue(Duration::from_secs(5))
}

/// `namespace/name` of an object, as the work-queue metrics key it.
fn queue_key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// Counts an object reaching `controller`'s scheduler (a watch event, a wake-up).
fn triggered<K: kube::Resource>(metrics: &Metrics, controller: &'static str, object: &K) {
    let meta = object.meta();
    metrics.triggered(
        controller,
        &queue_key(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        ),
    );
}

/// What the run controller's watch lists of a finished run: its Migration's last result
/// (`stagehand_last_run_result`), so that an operator started after a run failed still
/// reports it. Every run seen makes its Migration's run series exist.
fn observe_run(metrics: &Metrics, event: &watcher::Event<DynamicObject>) {
    let (watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) = event else {
        return;
    };
    let text = |pointer: &str| obj.data.pointer(pointer).and_then(|v| v.as_str());
    let (Some(migration), Some(stage)) = (text("/spec/migrationRef"), text("/spec/stage")) else {
        return;
    };
    let reference = RunRef {
        namespace: obj.namespace().unwrap_or_default(),
        migration: migration.to_string(),
        stage: stage.to_string(),
        name: obj.name_any(),
    };
    metrics.run_seen(&reference);
    // A finished run has a `Succeeded` condition; its `Ready` reason is how it ended.
    let conditions = obj
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let of = |type_: &str| conditions.iter().find(|c| c["type"] == type_);
    if of("Succeeded").is_some()
        && let Some(reason) = of("Ready").and_then(|c| c["reason"].as_str())
    {
        let created = obj
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        metrics.last_run(&reference, created, &reason.to_ascii_lowercase());
    }
}

/// Decodes an untyped object into its kind and reconciles it; an object that does not decode
/// gets `Stalled=True` (reason `Malformed`, the decode error as message) and is left alone
/// until it changes.
///
/// Each reconcile is counted and timed for `controller` (`stagehand_reconcile_*`); a malformed
/// object counts as an error.
async fn decoded<K, F, Fut>(
    object: Arc<DynamicObject>,
    context: Arc<Context>,
    resource: ApiResource,
    controller: &'static str,
    reconcile: F,
) -> Result<Requeue, Error>
where
    K: serde::de::DeserializeOwned,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Requeue, Error>>,
{
    let reconciling = context.metrics.reconcile_started(
        controller,
        &queue_key(object.metadata.namespace.as_deref(), &object.name_any()),
    );
    let typed = serde_json::to_value(&*object).and_then(serde_json::from_value::<K>);
    match typed {
        Ok(k) => {
            let result = reconcile(Arc::new(k), context).await;
            reconciling.finished(result.is_ok());
            result
        }
        Err(e) => {
            let name = object.name_any();
            let message = format!("cannot read this object: {e}");
            warn!(object = %name, error = %e, "malformed object; skipping it");
            let api: Api<DynamicObject> = match object.namespace() {
                Some(ns) => Api::namespaced_with(context.client.clone(), &ns, &resource),
                None => Api::all_with(context.client.clone(), &resource),
            };
            let conditions = super::conditions::run_conditions(
                &super::conditions::Phase::Failed(message.clone()),
                object.metadata.generation,
                &[],
            )
            .into_iter()
            .map(|mut c| {
                c.reason = "Malformed".into();
                if c.type_ == "Stalled" {
                    c.message = super::conditions::stalled_message("Malformed", &message);
                }
                c
            })
            .collect::<Vec<_>>();
            let patch = serde_json::json!({"status": {"conditions": conditions}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                warn!(object = %name, error = %e, "cannot report the malformed object");
            }
            reconciling.finished(false);
            Ok(Requeue::await_change())
        }
    }
}

/// Runs reconciled at the same time, at most, unless `--max-concurrent-runs` says otherwise.
/// A burst of new runs (a thousand created at once) is then worked through a bounded queue
/// instead of a thousand reconciles in flight, each holding its view of the siblings and its
/// requests (measured with `e2e/bench/operator-scale`: 1,000 runs of one Migration Ready in
/// 108 s with a peak RSS of 58 MiB at 8, 110 s and 108 MiB at 32). A run executing an action
/// holds its slot for as long as that takes, so this is also how many runs of different
/// Migrations execute actions at once.
pub const DEFAULT_MAX_CONCURRENT_RUNS: u16 = 8;

/// Runs listed per page when the run controller's watch starts (or lists again). A page is
/// held whole while its runs go into the view, and an allocator keeps what that peak took:
/// with 10,000 finished runs, the RSS after the initial list was 41–43 MiB at the default of
/// 500 and 34 MiB at 100 (`e2e/bench/operator-scale`), for 80 more list requests at the start.
pub const RUN_LIST_PAGE_SIZE: u32 = 100;

/// How the run controller watches the runs.
fn run_watch() -> watcher::Config {
    watcher::Config::default().page_size(RUN_LIST_PAGE_SIZE)
}

/// Runs both controllers until the process is asked to stop. `namespace` limits them to one
/// namespace; `steering` stops the engine (SIGTERM, or the leadership lost): no run starts a
/// new action, and the action in flight stops at its next safe point.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    metrics: Metrics,
    steering: Steering,
    max_concurrent_runs: u16,
    tenancy: super::context::Tenancy,
) {
    let reporter = Reporter {
        controller: "stagehand".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let run_resource = ApiResource::erase::<MigrationRun>(&());
    // The run controller's store (the runs that have not finished) and the index of the
    // finished ones are the view the gate decides from; `wake` reconciles the runs a change
    // unblocks.
    let run_writer = Writer::<DynamicObject>::new(run_resource.clone());
    let run_store = run_writer.as_reader();
    let (wake, woken) = tokio::sync::mpsc::unbounded_channel();
    let context = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        metrics,
        steering,
        runs: RunsView::new(run_store.clone(), run_resource.clone(), wake),
        tenancy,
    });
    migrate_own_crds(&client, &context.recorder).await;
    // Both kinds are watched as untyped objects and decoded one by one in the reconciler, so
    // an object that does not decode is reported on itself and never stalls the others (a
    // typed watch would fail the whole list).
    let migration_resource = ApiResource::erase::<Migration>(&());
    let (runs, migrations): (Api<DynamicObject>, Api<DynamicObject>) = match &namespace {
        Some(ns) => (
            Api::namespaced_with(client.clone(), ns, &run_resource),
            Api::namespaced_with(client.clone(), ns, &migration_resource),
        ),
        None => (
            Api::all_with(client.clone(), &run_resource),
            Api::all_with(client.clone(), &migration_resource),
        ),
    };
    info!(
        namespace = namespace.as_deref().unwrap_or("<all>"),
        "starting controllers"
    );
    // Only runs that have not finished are stored and reconciled: a finished run has nothing
    // left to do, and the view keeps of it only what its siblings' gate needs.
    let metrics = context.metrics.clone();
    let watched = watcher::watcher(runs, run_watch()).inspect(move |event| {
        if let Ok(event) = event {
            observe_run(&metrics, event);
        }
    });
    let metrics = context.metrics.clone();
    let run_events = context
        .runs
        .reflect(run_writer, watched)
        .inspect(move |run| {
            if let Ok(run) = run {
                triggered(&metrics, RUN_CONTROLLER, run);
            }
        });
    let metrics = context.metrics.clone();
    let wakes = futures::stream::unfold(
        woken,
        |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
    )
    .inspect(
        move |r: &kube::runtime::reflector::ObjectRef<DynamicObject>| {
            metrics.triggered(RUN_CONTROLLER, &queue_key(r.namespace.as_deref(), &r.name));
        },
    );
    let run_metrics = context.metrics.clone();
    let migration_metrics = context.metrics.clone();
    let run_controller = Controller::for_stream_with(run_events, run_store, run_resource.clone())
        .with_config(Config::default().concurrency(max_concurrent_runs))
        .reconcile_on(wakes)
        .shutdown_on_signal()
        .run(
            move |obj, context| {
                decoded(
                    obj,
                    context,
                    run_resource.clone(),
                    RUN_CONTROLLER,
                    reconcile,
                )
            },
            retry,
            context.clone(),
        )
        .for_each(move |result| {
            // Woken after it finished (the store holds only unfinished runs) or was
            // deleted: nothing to do.
            if let Err(ControllerError::ObjectNotFound(run)) = &result {
                run_metrics.dropped(
                    RUN_CONTROLLER,
                    &queue_key(run.namespace.as_deref(), &run.name),
                );
            }
            async move {
                match result {
                    Err(ControllerError::ObjectNotFound(run)) => {
                        debug!(run = %run.name, "woken run no longer to reconcile");
                    }
                    Err(e) => warn!(error = %e, "MigrationRun reconcile error"),
                    Ok(_) => {}
                }
            }
        });
    // As `Controller::new_with` builds it, with the triggers counted.
    let migration_writer = Writer::<DynamicObject>::new(migration_resource.clone());
    let migration_store = migration_writer.as_reader();
    let metrics = context.metrics.clone();
    let migration_events = kube::runtime::reflector(
        migration_writer,
        watcher::watcher(migrations, watcher::Config::default()),
    )
    .applied_objects()
    .inspect(move |m| {
        if let Ok(m) = m {
            triggered(&metrics, MIGRATION_CONTROLLER, m);
        }
    });
    let migration_controller = Controller::for_stream_with(
        migration_events,
        migration_store,
        migration_resource.clone(),
    )
    .shutdown_on_signal()
    .run(
        move |obj, context| {
            decoded(
                obj,
                context,
                migration_resource.clone(),
                MIGRATION_CONTROLLER,
                reconcile_migration,
            )
        },
        retry,
        context,
    )
    .for_each(move |result| {
        if let Err(ControllerError::ObjectNotFound(m)) = &result {
            migration_metrics.dropped(
                MIGRATION_CONTROLLER,
                &queue_key(m.namespace.as_deref(), &m.name),
            );
        }
        async move {
            if let Err(e) = result {
                warn!(error = %e, "Migration reconcile error");
            }
        }
    });
    futures::join!(run_controller, migration_controller);
}
