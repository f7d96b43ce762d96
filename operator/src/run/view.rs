//! What the run controller knows of every MigrationRun without asking the API server: its
//! reflector store of the runs that have not finished, an index of the finished ones, and the
//! runs this process started.
//!
//! The gate decides from this view instead of listing the namespace's runs on every
//! reconcile, so a waiting run costs no API request, and a finished run costs nothing: the
//! controller wakes the run a change unblocks ([`super::gate::unblocked`]) instead of every
//! waiting run polling. A finished run is neither in the store nor reconciled: the index keeps
//! of it only what the gate, the retention and the finish step read (`Ended`, a few hundred
//! bytes), so memory grows with what runs, not with what exists (measured with
//! `e2e/bench/operator-scale`, docs/benchmarks.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use serde::Deserialize;
use stagehand_actions::action::{StopSender, StopSignal};
use stagehand_config::Stage;
use stagehand_crds::unversioned::MigrationRunStatus;
use stagehand_crds::{MigrationRun, MigrationRunSpec};
use tokio::sync::mpsc::UnboundedSender;
use tracing::debug;

use super::gate::terminal;

/// Drops what no controller reads from a stored run: `managedFields` (often the largest part
/// of an object).
pub fn slim(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
}

/// Whether a watched run is over (its `Succeeded` condition written) and settled (it no
/// longer carries the run finalizer, which the reconciler still has to take off), without
/// decoding it.
fn finished(obj: &DynamicObject) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Succeeded"))
        && !super::finalizer::held(obj.metadata.finalizers.as_deref())
}

/// A stored run as the typed MigrationRun, or `None` when it does not decode (the
/// reconciler reports such a run on itself).
pub fn decode(obj: &DynamicObject) -> Option<MigrationRun> {
    let spec = MigrationRunSpec::deserialize(obj.data.get("spec")?).ok()?;
    let status = match obj.data.get("status") {
        Some(s) => Some(MigrationRunStatus::deserialize(s).ok()?),
        None => None,
    };
    Some(MigrationRun {
        metadata: obj.metadata.clone(),
        spec,
        status,
    })
}

/// A finished run as the index keeps it: what the gate (a post run's pre run, the order of
/// creation), the retention (which to delete, by uid) and the finish step (the pre run to
/// read) need of it. Its Migration, namespace and name are the index's keys.
#[derive(Debug, Clone, PartialEq)]
struct Ended {
    uid: Option<Box<str>>,
    created: Option<Time>,
    deleting: Option<Time>,
    stage: Stage,
    release: Box<str>,
    dry_run: bool,
    succeeded: bool,
    start_time: Option<Box<str>>,
    completion_time: Option<Box<str>>,
}

impl Ended {
    /// What the index keeps of a finished run, or `None` when its spec does not decode (the
    /// view leaves such a run out, as [`decode`] does).
    fn of(obj: &DynamicObject) -> Option<Self> {
        let spec = MigrationRunSpec::deserialize(obj.data.get("spec")?).ok()?;
        let text = |field: &str| {
            obj.data
                .pointer(&format!("/status/{field}"))
                .and_then(|v| v.as_str())
                .map(Box::from)
        };
        let succeeded = obj
            .data
            .pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
            });
        Some(Self {
            uid: obj.metadata.uid.as_deref().map(Box::from),
            created: obj.metadata.creation_timestamp.clone(),
            deleting: obj.metadata.deletion_timestamp.clone(),
            stage: spec.stage,
            release: spec.release.into(),
            dry_run: spec.dry_run,
            succeeded,
            start_time: text("startTime"),
            completion_time: text("completionTime"),
        })
    }

    /// The run as the gate and the retention read it: its `Succeeded` condition, when it
    /// started and ended; no plan, no per-action status (read with a GET when needed).
    fn run(&self, namespace: &str, migration: &str, name: &str) -> MigrationRun {
        let ended_at = self
            .completion_time
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let (status, reason) = if self.succeeded {
            ("True", "Succeeded")
        } else {
            ("False", "Failed")
        };
        MigrationRun {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: self.uid.as_deref().map(String::from),
                creation_timestamp: self.created.clone(),
                deletion_timestamp: self.deleting.clone(),
                ..ObjectMeta::default()
            },
            spec: MigrationRunSpec {
                migration_ref: migration.to_string(),
                stage: self.stage,
                release: self.release.to_string(),
                dry_run: self.dry_run,
                ..MigrationRunSpec::default()
            },
            status: Some(MigrationRunStatus {
                conditions: vec![Condition {
                    type_: "Succeeded".into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(ended_at),
                }],
                start_time: self.start_time.as_deref().map(String::from),
                completion_time: self.completion_time.as_deref().map(String::from),
                ..MigrationRunStatus::default()
            }),
        }
    }
}

/// The finished runs by (namespace, Migration), then by name.
type Index = HashMap<(String, String), BTreeMap<String, Ended>>;

/// The index of the finished runs, with the one being listed: like the reflector store, a
/// (re)list replaces the index only once it is complete.
#[derive(Debug, Default)]
struct FinishedRuns {
    index: Index,
    listing: Option<Index>,
}

/// (namespace, Migration) and name of a watched run.
fn keys(obj: &DynamicObject) -> Option<((String, String), String)> {
    let migration = obj.data.pointer("/spec/migrationRef")?.as_str()?;
    Some((
        (obj.namespace().unwrap_or_default(), migration.to_string()),
        obj.name_any(),
    ))
}

fn insert(index: &mut Index, obj: &DynamicObject) {
    if let (Some((group, name)), Some(ended)) = (keys(obj), Ended::of(obj)) {
        index.entry(group).or_default().insert(name, ended);
    }
}

fn remove(index: &mut Index, obj: &DynamicObject) {
    let Some((group, name)) = keys(obj) else {
        return;
    };
    if let Some(runs) = index.get_mut(&group) {
        runs.remove(&name);
        if runs.is_empty() {
            index.remove(&group);
        }
    }
}

/// The run controller's view of the runs, shared by every reconcile (clones share it).
#[derive(Clone)]
pub struct RunsView {
    /// The runs that have not finished (the run controller's store: what it reconciles).
    store: Store<DynamicObject>,
    finished: Arc<Mutex<FinishedRuns>>,
    resource: ApiResource,
    wake: UnboundedSender<ObjectRef<DynamicObject>>,
    /// What this process wrote that the view may not have seen yet, by (namespace, name):
    /// a run it let start counts as running before the store has its `startTime` (a run
    /// created in the same second with a smaller name must not start next to it), and a run
    /// it finished counts as finished before the index has it (the run it wakes must not
    /// find it still running).
    overlay: Arc<Mutex<HashMap<(String, String), Overlay>>>,
    /// The runs whose action executes in this process, by (namespace, name), with the
    /// sender that stops it: a run deleted meanwhile stops its action at the next safe point.
    executing: Arc<Mutex<HashMap<(String, String), StopSender>>>,
}

/// A run registered as executing ([`RunsView::executing`]); dropped, it is no longer.
#[derive(Debug)]
pub struct Executing {
    executing: Arc<Mutex<HashMap<(String, String), StopSender>>>,
    key: (String, String),
}

impl Drop for Executing {
    fn drop(&mut self) {
        if let Ok(mut e) = self.executing.lock() {
            e.remove(&self.key);
        }
    }
}

/// Why a deleted run's action is asked to stop.
pub fn deleted_reason(name: &str) -> String {
    format!("MigrationRun {name} was deleted")
}

/// See [`RunsView::overlay`](RunsView).
#[derive(Debug, Clone)]
enum Overlay {
    Started,
    Finished(Box<MigrationRunStatus>),
}

impl std::fmt::Debug for RunsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunsView").finish_non_exhaustive()
    }
}

impl RunsView {
    /// A view of `store` (the run controller's, written through [`RunsView::reflect`]) that
    /// wakes runs through `wake`.
    pub fn new(
        store: Store<DynamicObject>,
        resource: ApiResource,
        wake: UnboundedSender<ObjectRef<DynamicObject>>,
    ) -> Self {
        Self {
            store,
            finished: Arc::new(Mutex::new(FinishedRuns::default())),
            resource,
            wake,
            overlay: Arc::new(Mutex::new(HashMap::new())),
            executing: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Registers run `name` as executing an action: the signal is set when the view sees
    /// the run deleted (`metadata.deletionTimestamp`), at once if it already does.
    pub fn executing(&self, namespace: &str, name: &str) -> (Executing, StopSignal) {
        let (sender, signal) = StopSignal::channel();
        let key = ObjectRef::new_with(name, self.resource.clone()).within(namespace);
        if self
            .store
            .get(&key)
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
        {
            sender.stop(deleted_reason(name));
        }
        let key = (namespace.to_string(), name.to_string());
        if let Ok(mut e) = self.executing.lock() {
            e.insert(key.clone(), sender);
        }
        (
            Executing {
                executing: self.executing.clone(),
                key,
            },
            signal,
        )
    }

    /// Stops the action of a run this process executes once the run is being deleted.
    fn stop_if_deleted(&self, obj: &DynamicObject) {
        if obj.metadata.deletion_timestamp.is_none() {
            return;
        }
        let key = (obj.namespace().unwrap_or_default(), obj.name_any());
        if let Ok(e) = self.executing.lock()
            && let Some(sender) = e.get(&key)
        {
            sender.stop(deleted_reason(&key.1));
        }
    }

    /// Keeps the view up to date from the runs' watch events: a run that has not finished
    /// goes into the store (`writer`, [`slim`]med) and comes out of the stream (to be
    /// reconciled); a finished one goes into the index only, and out of the store. A deleted
    /// run leaves both, and what this process recorded of it.
    pub fn reflect<S>(
        &self,
        mut writer: Writer<DynamicObject>,
        events: S,
    ) -> impl Stream<Item = Result<DynamicObject, watcher::Error>> + use<S>
    where
        S: Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
    {
        let view = self.clone();
        events.filter_map(move |event| {
            let applied = event.map(|e| view.apply(&mut writer, e)).transpose();
            std::future::ready(applied)
        })
    }

    /// One watch event into the view; the run to reconcile, if any.
    fn apply(
        &self,
        writer: &mut Writer<DynamicObject>,
        event: watcher::Event<DynamicObject>,
    ) -> Option<DynamicObject> {
        use watcher::Event;
        let Ok(mut finished_runs) = self.finished.lock() else {
            return None;
        };
        match event {
            Event::Apply(mut obj) if finished(&obj) => {
                insert(&mut finished_runs.index, &obj);
                drop(finished_runs);
                obj.data = serde_json::Value::Null;
                writer.apply_watcher_event(&Event::Delete(obj));
                None
            }
            Event::Apply(mut obj) => {
                remove(&mut finished_runs.index, &obj);
                drop(finished_runs);
                self.stop_if_deleted(&obj);
                slim(&mut obj);
                writer.apply_watcher_event(&Event::Apply(obj.clone()));
                Some(obj)
            }
            Event::Delete(obj) => {
                remove(&mut finished_runs.index, &obj);
                drop(finished_runs);
                if let Ok(mut o) = self.overlay.lock() {
                    o.remove(&(obj.namespace().unwrap_or_default(), obj.name_any()));
                }
                writer.apply_watcher_event(&Event::Delete(obj));
                None
            }
            Event::Init => {
                finished_runs.listing = Some(Index::new());
                drop(finished_runs);
                writer.apply_watcher_event(&Event::Init);
                None
            }
            Event::InitApply(obj) if finished(&obj) => {
                insert(finished_runs.listing.get_or_insert_default(), &obj);
                None
            }
            // Not reconciled yet: the store shows a list only once it is complete, and a
            // run decided from a partial list could start next to a sibling the list has
            // not reached (two runs of one Migration at once). The list's runs are woken
            // when it is done.
            Event::InitApply(mut obj) => {
                drop(finished_runs);
                slim(&mut obj);
                writer.apply_watcher_event(&Event::InitApply(obj));
                None
            }
            Event::InitDone => {
                if let Some(listed) = finished_runs.listing.take() {
                    finished_runs.index = listed;
                }
                drop(finished_runs);
                writer.apply_watcher_event(&Event::InitDone);
                self.forget_gone();
                for obj in self.store.state() {
                    let _ = self
                        .wake
                        .send(ObjectRef::from_obj_with(&*obj, self.resource.clone()));
                }
                None
            }
        }
    }

    /// Drops what this process recorded of runs the view no longer holds (deleted while the
    /// watch was down: no delete event comes for them).
    fn forget_gone(&self) {
        let (Ok(finished_runs), Ok(mut overlay)) = (self.finished.lock(), self.overlay.lock())
        else {
            return;
        };
        overlay.retain(|(namespace, name), _| {
            let key = ObjectRef::new_with(name, self.resource.clone()).within(namespace);
            self.store.get(&key).is_some()
                || finished_runs
                    .index
                    .iter()
                    .any(|((ns, _), runs)| ns == namespace && runs.contains_key(name))
        });
    }

    /// The stored (unfinished) runs of Migration `migration` in `namespace`, undecoded.
    fn stored(&self, namespace: &str, migration: &str) -> Vec<Arc<DynamicObject>> {
        self.store.state_filter(|o| {
            o.metadata.namespace.as_deref() == Some(namespace)
                && o.data
                    .pointer("/spec/migrationRef")
                    .and_then(|v| v.as_str())
                    == Some(migration)
        })
    }

    /// The finished runs of Migration `migration` in `namespace`, as the gate reads them.
    fn ended(&self, namespace: &str, migration: &str) -> Vec<MigrationRun> {
        let Ok(finished_runs) = self.finished.lock() else {
            return Vec::new();
        };
        finished_runs
            .index
            .get(&(namespace.to_string(), migration.to_string()))
            .map(|runs| {
                runs.iter()
                    .map(|(name, e)| e.run(namespace, migration, name))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The runs of Migration `migration` in `namespace`, as this process knows them.
    pub fn of_migration(&self, namespace: &str, migration: &str) -> Vec<MigrationRun> {
        let mut runs: Vec<MigrationRun> = self
            .stored(namespace, migration)
            .iter()
            .filter_map(|o| decode(o))
            .collect();
        runs.extend(self.ended(namespace, migration));
        let Ok(mut overlay) = self.overlay.lock() else {
            return Vec::new();
        };
        for r in &mut runs {
            let key = (namespace.to_string(), r.name_any());
            let seen_end = r.status.as_ref().is_some_and(terminal);
            match overlay.get(&key) {
                Some(Overlay::Started) => {
                    let status = r.status.get_or_insert_with(Default::default);
                    if status.start_time.is_none() {
                        status.start_time = Some("started by this operator".into());
                    }
                }
                // The view caught up: the overlay is no longer needed.
                Some(Overlay::Finished(_)) if seen_end => {
                    overlay.remove(&key);
                }
                Some(Overlay::Finished(status)) => r.status = Some((**status).clone()),
                None => {}
            }
        }
        runs
    }

    /// Lets `name` start as the one running run of Migration `migration`, unless another run
    /// of it that this process let start is still running (then its name). The check and the
    /// record are one step under one lock, so two runs the same finish unblocked (the post run
    /// and the next pre run) never both start; a recorded run the store no longer holds (it
    /// finished, or is gone) no longer counts.
    pub fn claim(&self, namespace: &str, migration: &str, name: &str) -> Result<(), String> {
        let running: Vec<String> = self
            .stored(namespace, migration)
            .iter()
            .map(|o| o.name_any())
            .collect();
        let Ok(mut o) = self.overlay.lock() else {
            return Err("the operator's view of the runs".into());
        };
        if let Some(((_, holder), _)) = o.iter().find(|((ns, other), v)| {
            ns == namespace
                && other != name
                && matches!(v, Overlay::Started)
                && running.contains(other)
        }) {
            return Err(holder.clone());
        }
        o.insert((namespace.to_string(), name.to_string()), Overlay::Started);
        Ok(())
    }

    /// Records that `name` ended with `status` (what was just written).
    pub fn mark_finished(&self, namespace: &str, name: &str, status: &MigrationRunStatus) {
        let end = MigrationRunStatus {
            conditions: status.conditions.clone(),
            start_time: status.start_time.clone(),
            completion_time: status.completion_time.clone(),
            observed_generation: status.observed_generation,
            ..Default::default()
        };
        if let Ok(mut o) = self.overlay.lock() {
            o.insert(
                (namespace.to_string(), name.to_string()),
                Overlay::Finished(Box::new(end)),
            );
        }
    }

    /// Asks the controller to reconcile these runs of `namespace` now.
    pub fn wake<'a>(&self, namespace: &str, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            debug!(run = name, "waking");
            let _ = self
                .wake
                .send(ObjectRef::new_with(name, self.resource.clone()).within(namespace));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn object(name: &str, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "stagehand.dev/v1beta1",
            "kind": "MigrationRun",
            "metadata": {
                "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                "creationTimestamp": "2026-12-02T00:00:00Z",
                "annotations": {"stagehand.dev/approve-plan": "sha256:a"},
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {"migrationRef": "opendesk", "stage": "pre", "release": "v1.18.0"},
            "status": status
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": "Succeeded", "message": "",
               "lastTransitionTime": "2026-12-02T00:01:00Z"})
    }

    /// A run's status at its end: the whole of it, plan and actions included.
    fn done(ok: bool) -> serde_json::Value {
        json!({
            "conditions": [condition("Ready", if ok { "True" } else { "False" }),
                           condition("Succeeded", if ok { "True" } else { "False" })],
            "actions": [{"index": 0, "id": "workload_scale", "decision": "Skipped", "reason": "FreshInstallation"}],
            "frozenPlan": {"digest": "sha256:x", "releaseVersion": "", "secretFiles": "", "objectStore": "", "actionsSkip": ""},
            "startTime": "2026-12-02T00:00:01Z",
            "completionTime": "2026-12-02T00:01:00Z",
            "progress": "1/1"
        })
    }

    fn running() -> serde_json::Value {
        json!({
            "conditions": [condition("Ready", "False")],
            "actions": [{"index": 0, "id": "workload_scale", "decision": "Run", "reason": "InWindow"}],
            "startTime": "2026-12-02T00:00:01Z"
        })
    }

    struct Fixture {
        view: RunsView,
        writer: Writer<DynamicObject>,
        woken: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<DynamicObject>>,
    }

    fn fixture() -> Fixture {
        let resource = ApiResource::erase::<MigrationRun>(&());
        let writer = Writer::<DynamicObject>::new(resource.clone());
        let (wake, woken) = tokio::sync::mpsc::unbounded_channel();
        let view = RunsView::new(writer.as_reader(), resource, wake);
        Fixture {
            view,
            writer,
            woken,
        }
    }

    impl Fixture {
        fn apply(&mut self, event: Event<DynamicObject>) -> Option<DynamicObject> {
            self.view.apply(&mut self.writer, event)
        }
        fn stored(&self) -> Vec<String> {
            let mut names: Vec<String> = self
                .view
                .store
                .state()
                .iter()
                .map(|o| o.name_any())
                .collect();
            names.sort();
            names
        }
        fn indexed(&self) -> Vec<String> {
            self.view
                .ended("ns", "opendesk")
                .iter()
                .map(ResourceExt::name_any)
                .collect()
        }
        fn status(&self, name: &str) -> MigrationRunStatus {
            self.view
                .of_migration("ns", "opendesk")
                .into_iter()
                .find(|r| r.name_any() == name)
                .unwrap()
                .status
                .unwrap_or_default()
        }
    }

    #[test]
    fn a_stored_run_keeps_all_but_its_managed_fields() {
        let mut f = fixture();
        let reconciled = f.apply(Event::Apply(object("r", running()))).unwrap();
        assert!(reconciled.metadata.managed_fields.is_none());
        assert_eq!(reconciled.data["status"], running());
        assert_eq!(f.view.store.state()[0].data["status"], running());
        assert!(f.view.store.state()[0].metadata.managed_fields.is_none());
    }

    fn with_finalizer(mut obj: DynamicObject, deleting: bool) -> DynamicObject {
        obj.metadata.finalizers = Some(vec![super::super::finalizer::RUN_FINALIZER.into()]);
        if deleting {
            obj.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        obj
    }

    #[test]
    fn a_finished_run_still_holding_its_finalizer_is_reconciled_to_let_it_go() {
        let mut f = fixture();
        let held = with_finalizer(object("r", done(true)), false);
        assert!(f.apply(Event::Apply(held)).is_some());
        assert_eq!(f.stored(), ["r"]);
        assert!(f.indexed().is_empty());
        // Let go: indexed as finished.
        assert!(f.apply(Event::Apply(object("r", done(true)))).is_none());
        assert_eq!(f.indexed(), ["r"]);
    }

    #[tokio::test]
    async fn a_run_deleted_while_its_action_executes_is_asked_to_stop() {
        let mut f = fixture();
        f.apply(Event::Apply(with_finalizer(object("r", running()), false)));
        let (executing, signal) = f.view.executing("ns", "r");
        f.apply(Event::Apply(with_finalizer(
            object("other", running()),
            true,
        )));
        assert_eq!(
            signal.reason(),
            None,
            "another run's deletion is not this one's"
        );
        f.apply(Event::Apply(with_finalizer(object("r", running()), true)));
        signal.requested().await;
        assert_eq!(
            signal.reason().as_deref(),
            Some("MigrationRun r was deleted")
        );
        drop(executing);
        assert!(f.view.executing.lock().unwrap().is_empty());
        // Registered after the view saw the deletion: stopped at once.
        let (_again, signal) = f.view.executing("ns", "r");
        assert!(signal.check().is_err());
    }

    #[test]
    fn a_finished_run_is_indexed_not_stored_nor_reconciled() {
        let mut f = fixture();
        assert!(f.apply(Event::Apply(object("r", running()))).is_some());
        assert_eq!(f.stored(), ["r"]);
        assert!(f.indexed().is_empty());

        // It finishes: out of the store (nothing left to reconcile), into the index.
        assert!(f.apply(Event::Apply(object("r", done(true)))).is_none());
        assert!(f.stored().is_empty());
        assert_eq!(f.indexed(), ["r"]);
        // Its status changed back (written by hand): stored and reconciled again.
        assert!(f.apply(Event::Apply(object("r", running()))).is_some());
        assert_eq!(f.stored(), ["r"]);
        assert!(f.indexed().is_empty());

        assert!(f.apply(Event::Apply(object("r", done(false)))).is_none());
        assert!(f.apply(Event::Delete(object("r", done(false)))).is_none());
        assert!(f.stored().is_empty());
        assert!(f.indexed().is_empty());
        assert!(f.view.finished.lock().unwrap().index.is_empty());
    }

    #[test]
    fn a_finished_run_reads_as_the_gate_and_the_retention_need_it() {
        let mut f = fixture();
        let mut post = object("post", done(true));
        post.data["spec"] = json!({"migrationRef": "opendesk", "stage": "post", "release": "1.18.0", "dryRun": true});
        post.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        f.apply(Event::Apply(post));
        f.apply(Event::Apply(object("pre", done(true))));
        f.apply(Event::Apply(object("failed", done(false))));
        let runs = f.view.of_migration("ns", "opendesk");
        let get = |name: &str| runs.iter().find(|r| r.name_any() == name).unwrap();

        let pre = get("pre");
        assert_eq!(pre.metadata.uid.as_deref(), Some("uid-pre"));
        assert_eq!(
            pre.metadata.creation_timestamp,
            object("pre", json!({})).metadata.creation_timestamp
        );
        assert_eq!(pre.spec.migration_ref, "opendesk");
        assert_eq!(pre.spec.stage, Stage::Pre);
        assert_eq!(pre.spec.release, "v1.18.0");
        let status = pre.status.as_ref().unwrap();
        assert!(super::super::gate::succeeded(status));
        assert_eq!(status.start_time.as_deref(), Some("2026-12-02T00:00:01Z"));
        assert_eq!(
            status.completion_time.as_deref(),
            Some("2026-12-02T00:01:00Z")
        );
        assert!(status.actions.is_empty() && status.frozen_plan.is_none());

        let failed = get("failed").status.as_ref().unwrap();
        assert!(terminal(failed) && !super::super::gate::succeeded(failed));

        let post = get("post");
        assert_eq!((post.spec.stage, post.spec.dry_run), (Stage::Post, true));
        assert!(post.metadata.deletion_timestamp.is_some());

        // A post run of the release finds its pre run; the retention deletes by uid.
        let mut next = object("next-post", json!({}));
        next.data["spec"]["stage"] = json!("post");
        let next = decode(&next).unwrap();
        assert!(matches!(
            super::super::gate::pre_run_of(&next, &runs),
            super::super::gate::PreRun::Succeeded(p) if p.name_any() == "pre"
        ));
        let expired = super::super::retention::expired(&runs, "opendesk", Stage::Pre, 1, "x");
        assert_eq!(
            expired.iter().map(|r| r.name_any()).collect::<Vec<_>>(),
            ["failed"],
            "the newest (pre, ended at the same time, by name) is kept"
        );
        assert!(
            super::super::retention::expired(&runs, "opendesk", Stage::Post, 0, "x").is_empty(),
            "a run being deleted is not deleted again"
        );
    }

    #[test]
    fn a_list_replaces_the_index_once_complete() {
        let mut f = fixture();
        f.apply(Event::Apply(object("gone", done(true))));
        f.apply(Event::Init);
        assert!(
            f.apply(Event::InitApply(object("old", done(true))))
                .is_none()
        );
        assert!(
            f.apply(Event::InitApply(object("waiting", json!({}))))
                .is_none(),
            "not reconciled before the list is complete"
        );
        assert_eq!(f.indexed(), ["gone"], "until the list is complete");
        assert!(f.stored().is_empty());
        assert!(f.woken.try_recv().is_err());
        f.apply(Event::InitDone);
        assert_eq!(f.indexed(), ["old"]);
        assert_eq!(f.stored(), ["waiting"]);
        assert_eq!(
            f.woken.try_recv().unwrap().name,
            "waiting",
            "woken once listed"
        );
        assert!(f.woken.try_recv().is_err());
    }

    #[test]
    fn the_stream_yields_the_runs_to_reconcile() {
        let mut f = fixture();
        let events = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(object("a", done(true)))),
            Ok(Event::InitApply(object("b", json!({})))),
            Ok(Event::InitDone),
            Ok(Event::Apply(object("c", running()))),
            Ok(Event::Apply(object("c", done(true)))),
            Ok(Event::Delete(object("b", json!({})))),
        ]);
        let writer = std::mem::replace(
            &mut f.writer,
            Writer::new(ApiResource::erase::<MigrationRun>(&())),
        );
        let out: Vec<String> = futures::executor::block_on(
            f.view
                .reflect(writer, events)
                .map(|r| r.unwrap().name_any())
                .collect(),
        );
        assert_eq!(out, ["c"], "a listed run is woken, not yielded");
        assert_eq!(f.woken.try_recv().unwrap().name, "b");
        let mut ended: Vec<String> = f
            .view
            .ended("ns", "opendesk")
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        ended.sort();
        assert_eq!(ended, ["a", "c"]);
        assert!(f.view.store.state().is_empty());
    }

    #[test]
    fn what_this_process_wrote_counts_before_the_view_has_seen_it() {
        let mut f = fixture();
        f.apply(Event::Apply(object("r", json!({}))));
        assert!(f.status("r").start_time.is_none());
        assert!(f.view.of_migration("other", "opendesk").is_empty());
        assert!(f.view.of_migration("ns", "other").is_empty());

        assert_eq!(f.view.claim("ns", "opendesk", "r"), Ok(()));
        assert!(
            f.status("r").start_time.is_some(),
            "started, store not caught up"
        );
        f.apply(Event::Apply(object("s", json!({}))));
        assert_eq!(
            f.view.claim("ns", "opendesk", "s"),
            Err("r".to_string()),
            "one run of a Migration at a time, even before the store saw the first start"
        );
        assert_eq!(
            f.view.claim("ns", "opendesk", "r"),
            Ok(()),
            "a run may claim again"
        );

        let ended = MigrationRunStatus {
            conditions: vec![serde_json::from_value(condition("Succeeded", "True")).unwrap()],
            ..Default::default()
        };
        f.view.mark_finished("ns", "r", &ended);
        assert!(terminal(&f.status("r")), "finished, view not caught up");

        // The view catches up (the run is in the index now); the overlay is dropped.
        f.apply(Event::Apply(object("r", done(false))));
        assert!(terminal(&f.status("r")));
        assert!(
            !super::super::gate::succeeded(&f.status("r")),
            "the index's copy counts"
        );
        assert!(f.view.overlay.lock().unwrap().is_empty());
        assert_eq!(
            f.view.claim("ns", "opendesk", "s"),
            Ok(()),
            "a finished run holds nothing"
        );

        f.view.wake("ns", ["r"]);
        assert_eq!(f.woken.try_recv().unwrap().name, "r");
    }

    #[test]
    fn what_this_process_wrote_of_a_deleted_run_is_forgotten() {
        let mut f = fixture();
        f.apply(Event::Apply(object("r", json!({}))));
        f.apply(Event::Apply(object("gone", json!({}))));
        f.view.claim("ns", "opendesk", "r").unwrap();
        f.view.claim("ns", "other", "gone").unwrap();
        f.apply(Event::Delete(object("r", json!({}))));
        assert_eq!(f.view.overlay.lock().unwrap().len(), 1);
        // Deleted while the watch was down: the next list forgets it.
        f.apply(Event::Init);
        f.apply(Event::InitDone);
        assert!(f.view.overlay.lock().unwrap().is_empty());
    }

    #[test]
    fn a_run_that_does_not_decode_is_left_out() {
        let mut f = fixture();
        let mut o = object("r", json!({}));
        o.data["spec"]["stage"] = json!("sideways");
        assert!(decode(&o).is_none());
        assert!(
            f.apply(Event::Apply(o.clone())).is_some(),
            "reconciled, to report it"
        );
        assert!(f.view.of_migration("ns", "opendesk").is_empty());
        o.data["status"] = done(false);
        assert!(f.apply(Event::Apply(o)).is_none());
        assert!(f.view.of_migration("ns", "opendesk").is_empty());
        assert!(f.stored().is_empty());
    }
}
