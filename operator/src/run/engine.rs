//! One reconcile of a MigrationRun: wait, validate, plan, execute in order, record.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use stagehand_actions::action::{ActionContext, ActionError, RunIdentity, SecretValue, Secrets};
use stagehand_actions::handover::StoreSettings;
use stagehand_actions::{Library, instantiate};
use stagehand_config::{
    Context, Decision, Declarations, Recorded, Release, Stage, plan_stage, validate,
};
use stagehand_crds::common::{
    ActionDecision, ActionStatus, HistoryEntry, MigrationRunStatus, SecretFile,
};
use stagehand_crds::{Migration, MigrationRun};
use tracing::{info, warn};

use super::conditions::{Phase, run_conditions};
use super::status::{StatusError, apply_run_status, update_migration_status};

/// What the controllers share.
#[derive(Clone)]
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Counts runs and actions for `/metrics`.
    pub metrics: crate::metrics::Metrics,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// Why a reconcile could not finish; the controller retries it.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A status write failed.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// Reading the cluster failed.
    #[error("{context}: {source}")]
    Read {
        /// What was read.
        context: String,
        /// The answer.
        source: kube::Error,
    },
    /// The Migration's spec could not be read as declarations at all.
    #[error("{0}")]
    Manifest(String),
}

fn now() -> String {
    Timestamp::now().to_string()
}

fn terminal(status: &MigrationRunStatus) -> bool {
    status.conditions.iter().any(|c| c.type_ == "Succeeded")
}

fn progress(actions: &[ActionStatus]) -> String {
    let done = actions
        .iter()
        .filter(|a| a.decision != ActionDecision::Run)
        .count();
    format!("{done}/{}", actions.len())
}

/// Publishes an Event on the run; a failure to publish is logged, never fatal.
///
/// Events of one action (`action 3 workload_scale: ...`) carry `action-3-workload_scale` as
/// their action, run-level ones `Run`: the recorder folds events with the same reason and
/// action into one series, and two actions' starts must stay two events.
async fn event(shared: &Shared, run: &MigrationRun, type_: EventType, reason: &str, note: String) {
    let action = match note.strip_prefix("action ") {
        Some(rest) => format!(
            "action-{}",
            rest.split(':')
                .next()
                .unwrap_or_default()
                .trim()
                .replace(' ', "-")
        ),
        None => "Run".to_string(),
    };
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.chars().take(128).collect(),
        secondary: None,
    };
    if let Err(e) = shared.recorder.publish(&ev, &run.object_ref(&())).await {
        warn!(run = %run.name_any(), error = %e, "cannot publish event");
    }
}

/// Writes the run's status in `phase` (conditions derived from it).
async fn write(
    shared: &Shared,
    api: &Api<MigrationRun>,
    run: &MigrationRun,
    status: &mut MigrationRunStatus,
    phase: &Phase,
) -> Result<(), EngineError> {
    status.conditions = run_conditions(phase, run.metadata.generation, &status.conditions);
    status.observed_generation = run.metadata.generation;
    status.progress = Some(progress(&status.actions));
    let key = format!("{}/{}", run.namespace().unwrap_or_default(), run.name_any());
    shared
        .metrics
        .run_waiting(&key, matches!(phase, Phase::Waiting(_)));
    if phase.is_terminal() && status.completion_time.is_none() {
        status.completion_time = Some(now());
        shared
            .metrics
            .run_finished(&phase.reason().to_ascii_lowercase());
    }
    apply_run_status(api, &run.name_any(), status).await?;
    Ok(())
}

/// Ends the run in `phase` (Failed or Invalid): writes the status, then a Warning Event with
/// the same message.
async fn end_stalled(
    shared: &Shared,
    api: &Api<MigrationRun>,
    run: &MigrationRun,
    status: &mut MigrationRunStatus,
    phase: Phase,
) -> Result<Requeue, EngineError> {
    write(shared, api, run, status, &phase).await?;
    let message = match &phase {
        Phase::Failed(m)
        | Phase::Invalid(m)
        | Phase::Waiting(m)
        | Phase::Running(m)
        | Phase::Succeeded(m) => m.clone(),
    };
    warn!(run = %run.name_any(), reason = phase.reason(), %message, "run stalled");
    event(shared, run, EventType::Warning, phase.reason(), message).await;
    Ok(Requeue::await_change())
}

/// The action library's view of the Migration's `spec.objectStore`.
fn store_settings(store: &stagehand_crds::common::ObjectStore) -> StoreSettings {
    StoreSettings {
        endpoint: store.endpoint.clone(),
        bucket: store.bucket.clone(),
        region: store.region.clone(),
        path_style: store.path_style,
        insecure_skip_tls_verify: store.insecure_skip_tls_verify,
        access_key_id: store.access_key_id.clone(),
        secret_key_file: store.secret_key_file.clone(),
        ca_bundle: store.ca_bundle.clone(),
    }
}

/// Reads the credentials named in `secretFiles` from their Secrets. Missing optional ones are
/// left out; a missing required one is an error naming the secret file (never a value).
pub async fn load_secrets(
    client: &Client,
    namespace: &str,
    files: &[SecretFile],
) -> Result<Secrets, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut values = Vec::new();
    for file in files {
        let optional = file.secret.optional.unwrap_or(false);
        let secret = api.get_opt(&file.secret.name).await.map_err(|e| {
            format!(
                "secret file {:?}: reading Secret {}: {e}",
                file.name, file.secret.name
            )
        })?;
        let value = secret
            .and_then(|s| s.data)
            .and_then(|d| d.get(&file.secret.key).cloned())
            .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned());
        match value {
            Some(v) => values.push((file.name.clone(), SecretValue::new(v))),
            None if optional => {}
            None => {
                return Err(format!(
                    "secret file {:?}: Secret {}/{} has no key {:?} (and it is not optional)",
                    file.name, namespace, file.secret.name, file.secret.key
                ));
            }
        }
    }
    Ok(Secrets::new(values))
}

/// Reconciles one MigrationRun.
pub async fn reconcile(
    run: Arc<MigrationRun>,
    shared: Arc<Shared>,
) -> Result<Requeue, EngineError> {
    let namespace = run.namespace().unwrap_or_default();
    let name = run.name_any();
    let runs: Api<MigrationRun> = Api::namespaced(shared.client.clone(), &namespace);
    let migrations: Api<Migration> = Api::namespaced(shared.client.clone(), &namespace);
    let mut status = run.status.clone().unwrap_or_default();
    if terminal(&status) {
        return Ok(Requeue::await_change());
    }

    // Waiting: for the Migration, for the right release, for other runs, for the pre run.
    let read = |context: String| move |source| EngineError::Read { context, source };
    let migration = migrations
        .get_opt(&run.spec.migration_ref)
        .await
        .map_err(read(format!(
            "reading Migration {}",
            run.spec.migration_ref
        )))?;
    let waiting = match &migration {
        None => Some(format!(
            "Migration {} not found in {namespace}",
            run.spec.migration_ref
        )),
        Some(m) if !same_release(&m.spec.release_version, &run.spec.release) => Some(format!(
            "the run is for release {} but Migration {} declares {}: apply the Migration of this release first",
            run.spec.release, run.spec.migration_ref, m.spec.release_version
        )),
        Some(_) if status.start_time.is_none() => blocked_by_others(&runs, &run).await?,
        Some(_) => None,
    };
    if let Some(message) = waiting {
        let waited = run
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| Timestamp::now().duration_since(t.0).as_secs());
        if waited.is_some_and(|w| w > run.spec.wait_timeout_seconds) {
            let message = format!(
                "gave up after waitTimeoutSeconds={}: {message}",
                run.spec.wait_timeout_seconds
            );
            return end_stalled(&shared, &runs, &run, &mut status, Phase::Failed(message)).await;
        }
        write(&shared, &runs, &run, &mut status, &Phase::Waiting(message)).await?;
        return Ok(Requeue::requeue(Duration::from_secs(3)));
    }
    let Some(migration) = migration else {
        return Ok(Requeue::requeue(Duration::from_secs(3)));
    };

    // Validate both stages before anything runs.
    let spec =
        serde_json::to_value(&migration.spec).map_err(|e| EngineError::Manifest(e.to_string()))?;
    let declarations =
        Declarations::from_spec(&spec).map_err(|e| EngineError::Manifest(e.to_string()))?;
    let status_json = serde_json::to_value(&migration.status)
        .map_err(|e| EngineError::Manifest(e.to_string()))?;
    let recorded = Recorded::from_status(Some(&status_json))
        .map_err(|e| EngineError::Manifest(e.to_string()))?;
    let context = Context::new(&declarations, &recorded, None);
    let report = validate(&declarations, &context, &Library);
    if !report.is_valid() {
        let lines: Vec<String> = report
            .problems
            .iter()
            .map(|p| format!("{} {}: {}", p.code, p.location(), p.message))
            .collect();
        status.problems = report.problems.clone();
        let message = format!(
            "{} problem(s) in the declarations, nothing was executed: {}",
            lines.len(),
            lines.join("; ")
        );
        return end_stalled(&shared, &runs, &run, &mut status, Phase::Invalid(message)).await;
    }

    // The plan, with decisions and reasons, goes to status before anything executes.
    if status.start_time.is_none() {
        let plan = plan_stage(&declarations, run.spec.stage, &context);
        status.start_time = Some(now());
        status.last_migrated_release = context.last_migrated.as_ref().map(ToString::to_string);
        status.actions = plan
            .actions
            .iter()
            .map(|a| ActionStatus {
                index: u32::try_from(a.index).unwrap_or(u32::MAX),
                id: a.id.clone(),
                tag: a.tag.clone(),
                run_mode: a.run_mode.clone(),
                decision: if a.decision == Decision::Run {
                    ActionDecision::Run
                } else {
                    ActionDecision::Skipped
                },
                reason: a.reason.as_str().to_string(),
                start_time: None,
                completion_time: None,
                summary: None,
            })
            .collect();
        write(
            &shared,
            &runs,
            &run,
            &mut status,
            &Phase::Running("planned".into()),
        )
        .await?;
        for a in status
            .actions
            .iter()
            .filter(|a| a.decision == ActionDecision::Skipped)
        {
            event(
                &shared,
                &run,
                EventType::Normal,
                "Skipped",
                format!("action {} {}: skipped ({})", a.index, a.id, a.reason),
            )
            .await;
            shared.metrics.action_finished(&a.id, "skipped", 0.0);
        }
        info!(run = %name, stage = %run.spec.stage, actions = status.actions.len(), "planned");
    }

    // Execute, strictly in order; Succeeded actions are never repeated.
    // Credentials are read only when an action is going to run (a fresh installation, whose
    // Secrets may not exist yet, reads none).
    let pending = status
        .actions
        .iter()
        .any(|a| a.decision == ActionDecision::Run);
    let files = if pending {
        migration.spec.secret_files.as_slice()
    } else {
        &[]
    };
    let secrets = match load_secrets(&shared.client, &namespace, files).await {
        Ok(s) => s,
        Err(message) => {
            return end_stalled(&shared, &runs, &run, &mut status, Phase::Failed(message)).await;
        }
    };
    let action_context = ActionContext {
        client: shared.client.clone(),
        namespace: namespace.clone(),
        secrets,
        object_store: migration.spec.object_store.as_ref().map(store_settings),
        run: RunIdentity {
            release: migration.spec.release_version.clone(),
            name: run.metadata.name.clone(),
        },
    };
    let declared = declarations.stage(run.spec.stage);
    for i in 0..status.actions.len() {
        if status.actions[i].decision != ActionDecision::Run {
            continue;
        }
        let (index, id) = (status.actions[i].index, status.actions[i].id.clone());
        let config = declared
            .actions
            .get(index as usize)
            .map(|d| d.config.clone())
            .unwrap_or_default();
        if status.actions[i].start_time.is_none() {
            status.actions[i].start_time = Some(now());
        }
        write(
            &shared,
            &runs,
            &run,
            &mut status,
            &Phase::Running(format!("action {index} {id}")),
        )
        .await?;
        event(
            &shared,
            &run,
            EventType::Normal,
            "Started",
            format!("action {index} {id}"),
        )
        .await;
        info!(run = %name, action = %id, index, dry_run = run.spec.dry_run, "action started");
        let started = std::time::Instant::now();
        let result = run_action(&id, &config, &action_context, run.spec.dry_run).await;
        let outcome = if result.is_ok() {
            "succeeded"
        } else {
            "failed"
        };
        shared
            .metrics
            .action_finished(&id, outcome, started.elapsed().as_secs_f64());
        status.actions[i].completion_time = Some(now());
        match result {
            Ok(summary) => {
                status.actions[i].decision = ActionDecision::Succeeded;
                status.actions[i].summary = Some(summary.clone());
                if !run.spec.dry_run
                    && let Some(tag) = status.actions[i].tag.clone()
                {
                    let entry = HistoryEntry {
                        stage: Some(run.spec.stage),
                        id: id.clone(),
                        tag: Some(tag),
                        run_mode: status.actions[i].run_mode.clone(),
                        release: Some(migration.spec.release_version.clone()),
                        run_name: Some(name.clone()),
                        completed_at: status.actions[i].completion_time.clone(),
                    };
                    record_footprint(&migrations, &run.spec.migration_ref, entry).await?;
                }
                write(
                    &shared,
                    &runs,
                    &run,
                    &mut status,
                    &Phase::Running(format!("action {index} {id} succeeded")),
                )
                .await?;
                event(
                    &shared,
                    &run,
                    EventType::Normal,
                    "Succeeded",
                    format!("action {index} {id}: {summary}"),
                )
                .await;
                info!(run = %name, action = %id, index, %summary, "action succeeded");
            }
            Err(e) => {
                status.actions[i].decision = ActionDecision::Failed;
                status.actions[i].reason = "Failed".into();
                status.actions[i].summary = Some(e.to_string());
                let message = format!("action {index} {id} failed: {e}");
                warn!(run = %name, action = %id, index, error = %e, "action failed");
                return end_stalled(&shared, &runs, &run, &mut status, Phase::Failed(message))
                    .await;
            }
        }
    }

    if run.spec.stage == Stage::Post && !run.spec.dry_run {
        let release = migration.spec.release_version.clone();
        update_migration_status(&migrations, &run.spec.migration_ref, |s| {
            s.last_migrated_release = Some(release.clone())
        })
        .await?;
    }
    let done = format!(
        "{} action(s) declared, {} run",
        status.actions.len(),
        status
            .actions
            .iter()
            .filter(|a| a.decision == ActionDecision::Succeeded)
            .count()
    );
    write(
        &shared,
        &runs,
        &run,
        &mut status,
        &Phase::Succeeded(done.clone()),
    )
    .await?;
    event(&shared, &run, EventType::Normal, "Completed", done).await;
    info!(run = %name, "run succeeded");
    Ok(Requeue::await_change())
}

/// Plans (and unless dry, applies) one action; returns its summary.
async fn run_action(
    id: &str,
    config: &serde_json::Value,
    ctx: &ActionContext,
    dry_run: bool,
) -> Result<String, ActionError> {
    let action = instantiate(id, config)?;
    let planned = action.plan(ctx).await?;
    if dry_run {
        return Ok(format!("dry run: {}", planned.summary));
    }
    Ok(action.apply(ctx).await?.summary)
}

/// Adds a footprint to the Migration's history (once).
async fn record_footprint(
    migrations: &Api<Migration>,
    name: &str,
    entry: HistoryEntry,
) -> Result<(), EngineError> {
    update_migration_status(migrations, name, |s| {
        let known = s.history.iter().any(|h| {
            h.stage == entry.stage
                && h.id == entry.id
                && h.tag == entry.tag
                && h.run_mode == entry.run_mode
        });
        if !known {
            s.history.push(entry.clone());
        }
    })
    .await?;
    Ok(())
}

fn same_release(a: &str, b: &str) -> bool {
    match (Release::parse(a), Release::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Why this run may not start yet: another run of the Migration is running or was created
/// first, or (post) the release's pre run has not succeeded.
async fn blocked_by_others(
    runs: &Api<MigrationRun>,
    run: &MigrationRun,
) -> Result<Option<String>, EngineError> {
    // Listed untyped and decoded one by one: a malformed run is not a sibling that blocks.
    let namespace = run.namespace().unwrap_or_default();
    let untyped: Api<kube::api::DynamicObject> = Api::namespaced_with(
        runs.clone().into_client(),
        &namespace,
        &kube::api::ApiResource::erase::<MigrationRun>(&()),
    );
    let all = untyped
        .list(&ListParams::default())
        .await
        .map_err(|source| EngineError::Read {
            context: "listing MigrationRuns".into(),
            source,
        })?;
    let decoded: Vec<MigrationRun> = all
        .items
        .iter()
        .filter_map(|o| {
            serde_json::to_value(o)
                .and_then(serde_json::from_value)
                .ok()
        })
        .collect();
    let siblings: Vec<&MigrationRun> = decoded
        .iter()
        .filter(|r| {
            r.spec.migration_ref == run.spec.migration_ref && r.name_any() != run.name_any()
        })
        .collect();
    let unfinished = |r: &&&MigrationRun| !r.status.as_ref().is_some_and(terminal);
    if let Some(other) = siblings
        .iter()
        .filter(unfinished)
        .find(|r| r.status.as_ref().is_some_and(|s| s.start_time.is_some()))
    {
        return Ok(Some(format!(
            "MigrationRun {} of the same Migration is running",
            other.name_any()
        )));
    }
    let key = |r: &MigrationRun| {
        (
            r.metadata.creation_timestamp.clone().map(|t| t.0),
            r.name_any(),
        )
    };
    // A post run waits for its release's pre run, so it never goes before that pre run
    // (whatever the creation order): otherwise each would wait for the other.
    let waits_for_run = |r: &&&MigrationRun| {
        !(run.spec.stage == Stage::Pre
            && r.spec.stage == Stage::Post
            && same_release(&r.spec.release, &run.spec.release))
    };
    if let Some(earlier) = siblings
        .iter()
        .filter(unfinished)
        .filter(waits_for_run)
        .find(|r| key(r) < key(run))
    {
        return Ok(Some(format!(
            "MigrationRun {} of the same Migration was created first",
            earlier.name_any()
        )));
    }
    if run.spec.stage == Stage::Post {
        let pre_done = siblings.iter().any(|r| {
            r.spec.stage == Stage::Pre
                && !r.spec.dry_run
                && same_release(&r.spec.release, &run.spec.release)
                && r.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Succeeded" && c.status == "True")
                })
        });
        if !pre_done {
            return Ok(Some(format!(
                "waiting for the pre run of release {} to succeed",
                run.spec.release
            )));
        }
    }
    Ok(None)
}
