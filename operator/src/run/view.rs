//! What the run controller knows of every MigrationRun without asking the API server: its
//! reflector store, kept small, and the runs this process started.
//!
//! The gate decides from this view instead of listing the namespace's runs on every
//! reconcile, so a waiting run costs no API request, and a finished run costs nothing: the
//! controller wakes the run a change unblocks ([`super::gate::unblocked`]) instead of every
//! waiting run polling. The store holds a finished run [`slim`]med to what the gate and the
//! retention need, so memory grows with what runs, not with what exists.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Deserialize;
use stagehand_crds::unversioned::MigrationRunStatus;
use stagehand_crds::{MigrationRun, MigrationRunSpec};
use tokio::sync::mpsc::UnboundedSender;
use tracing::debug;

use super::gate::terminal;

/// The annotation `kubectl apply` writes: a whole copy of the object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The status fields a finished run keeps in the store: whether and when it ended.
const FINISHED_KEEPS: [&str; 5] = [
    "conditions",
    "startTime",
    "completionTime",
    "observedGeneration",
    "progress",
];

/// Drops what no controller reads from a stored run: `managedFields` always; for a finished
/// run (its `Succeeded` condition written) also kubectl's last-applied copy and every status
/// field but [`FINISHED_KEEPS`] (the plan and per-action status are read with a GET when
/// needed).
pub fn slim(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    if !finished(obj) {
        return;
    }
    if let Some(a) = obj.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    if let Some(status) = obj.data.get_mut("status").and_then(|s| s.as_object_mut()) {
        status.retain(|k, _| FINISHED_KEEPS.contains(&k.as_str()));
    }
}

/// Whether a stored run is over (its `Succeeded` condition written), without decoding it.
fn finished(obj: &DynamicObject) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Succeeded"))
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

/// The run controller's view of the runs, shared by every reconcile (clones share it).
#[derive(Clone)]
pub struct RunsView {
    store: Store<DynamicObject>,
    resource: ApiResource,
    wake: UnboundedSender<ObjectRef<DynamicObject>>,
    /// What this process wrote that the store may not have seen yet, by (namespace, name):
    /// a run it let start counts as running before the store has its `startTime` (a run
    /// created in the same second with a smaller name must not start next to it), and a run
    /// it finished counts as finished before the store has its end (the run it wakes must not
    /// find it still running).
    overlay: Arc<Mutex<HashMap<(String, String), Overlay>>>,
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
    /// A view of `store` (the run controller's) that wakes runs through `wake`.
    pub fn new(
        store: Store<DynamicObject>,
        resource: ApiResource,
        wake: UnboundedSender<ObjectRef<DynamicObject>>,
    ) -> Self {
        Self {
            store,
            resource,
            wake,
            overlay: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The stored runs of Migration `migration` in `namespace`, undecoded.
    fn stored(&self, namespace: &str, migration: &str) -> Vec<Arc<DynamicObject>> {
        self.store.state_filter(|o| {
            o.metadata.namespace.as_deref() == Some(namespace)
                && o.data
                    .pointer("/spec/migrationRef")
                    .and_then(|v| v.as_str())
                    == Some(migration)
        })
    }

    /// The runs of Migration `migration` in `namespace`, as this process knows them.
    pub fn of_migration(&self, namespace: &str, migration: &str) -> Vec<MigrationRun> {
        let Ok(mut overlay) = self.overlay.lock() else {
            return Vec::new();
        };
        let runs: Vec<MigrationRun> = self
            .stored(namespace, migration)
            .iter()
            .filter_map(|o| decode(o))
            .map(|mut r| {
                let key = (namespace.to_string(), r.name_any());
                let stored_end = r.status.as_ref().is_some_and(terminal);
                match overlay.get(&key) {
                    Some(Overlay::Started) => {
                        let status = r.status.get_or_insert_with(Default::default);
                        if status.start_time.is_none() {
                            status.start_time = Some("started by this operator".into());
                        }
                    }
                    // The store caught up: the overlay is no longer needed.
                    Some(Overlay::Finished(_)) if stored_end => {
                        overlay.remove(&key);
                    }
                    Some(Overlay::Finished(status)) => r.status = Some((**status).clone()),
                    None => {}
                }
                r
            })
            .collect();
        runs
    }

    /// Lets `name` start as the one running run of Migration `migration`, unless another run
    /// of it that this process let start is still running (then its name). The check and the
    /// record are one step under one lock, so two runs the same finish unblocked (the post run
    /// and the next pre run) never both start; a recorded run the store no longer holds, or
    /// holds as finished, no longer counts.
    pub fn claim(&self, namespace: &str, migration: &str, name: &str) -> Result<(), String> {
        let running: HashMap<String, bool> = self
            .stored(namespace, migration)
            .iter()
            .map(|o| (o.metadata.name.clone().unwrap_or_default(), !finished(o)))
            .collect();
        let Ok(mut o) = self.overlay.lock() else {
            return Err("the operator's view of the runs".into());
        };
        if let Some(((_, holder), _)) = o.iter().find(|((ns, other), v)| {
            ns == namespace
                && other != name
                && matches!(v, Overlay::Started)
                && running.get(other).copied().unwrap_or(false)
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
    use serde_json::json;

    fn object(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "stagehand.dev/v1beta1",
            "kind": "MigrationRun",
            "metadata": {
                "name": "r", "namespace": "ns",
                "annotations": {LAST_APPLIED: "{...}", "stagehand.dev/approve-plan": "sha256:a"},
                "managedFields": [{"manager": "kubectl"}]
            },
            "spec": {"migrationRef": "opendesk", "stage": "pre", "release": "v1.18.0"},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn a_running_run_keeps_its_status_and_a_finished_one_only_its_end() {
        let running = json!({
            "conditions": [{"type": "Ready", "status": "False", "reason": "Running", "message": "", "lastTransitionTime": "2026-12-02T00:00:00Z"}],
            "actions": [{"index": 0, "id": "workload_scale", "decision": "Run", "reason": "InWindow"}],
            "startTime": "2026-12-02T00:00:00Z"
        });
        let mut o = object(running.clone());
        slim(&mut o);
        assert!(o.metadata.managed_fields.is_none());
        assert_eq!(
            o.data["status"], running,
            "a running run keeps its whole status"
        );
        assert!(
            o.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key(LAST_APPLIED)
        );

        let mut done = running.clone();
        done["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-12-02T00:00:00Z"}));
        done["completionTime"] = json!("2026-12-02T00:01:00Z");
        done["frozenPlan"] = json!({"digest": "sha256:x", "releaseVersion": "", "secretFiles": "", "objectStore": "", "actionsSkip": ""});
        let mut o = object(done);
        slim(&mut o);
        let status = o.data["status"].as_object().unwrap();
        let mut keys: Vec<&str> = status.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["completionTime", "conditions", "startTime"]);
        let annotations = o.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert!(annotations.contains_key("stagehand.dev/approve-plan"));
        let run = decode(&o).unwrap();
        assert!(
            run.status
                .as_ref()
                .is_some_and(super::super::gate::terminal)
        );
        assert!(run.status.unwrap().actions.is_empty());
    }

    #[test]
    fn what_this_process_wrote_counts_before_the_store_has_seen_it() {
        use kube::runtime::reflector::store::Writer;
        use kube::runtime::watcher::Event;
        let resource = ApiResource::erase::<MigrationRun>(&());
        let mut writer = Writer::<DynamicObject>::new(resource.clone());
        let waiting = object(json!({}));
        writer.apply_watcher_event(&Event::Apply(waiting.clone()));
        let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel();
        let view = RunsView::new(writer.as_reader(), resource, wake);
        let status = |v: &RunsView| {
            v.of_migration("ns", "opendesk")
                .into_iter()
                .find(|r| r.name_any() == "r")
                .unwrap()
                .status
                .unwrap_or_default()
        };
        assert!(status(&view).start_time.is_none());
        assert!(view.of_migration("other", "opendesk").is_empty());
        assert!(view.of_migration("ns", "other").is_empty());

        assert_eq!(view.claim("ns", "opendesk", "r"), Ok(()));
        assert!(
            status(&view).start_time.is_some(),
            "started, store not caught up"
        );
        let mut sibling = object(json!({}));
        sibling.metadata.name = Some("s".into());
        writer.apply_watcher_event(&Event::Apply(sibling));
        assert_eq!(
            view.claim("ns", "opendesk", "s"),
            Err("r".to_string()),
            "one run of a Migration at a time, even before the store saw the first start"
        );
        assert_eq!(
            view.claim("ns", "opendesk", "r"),
            Ok(()),
            "a run may claim again"
        );

        let ended = MigrationRunStatus {
            conditions: vec![
                serde_json::from_value(json!({
                    "type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "",
                    "lastTransitionTime": "2026-12-02T00:00:00Z"
                }))
                .unwrap(),
            ],
            ..Default::default()
        };
        view.mark_finished("ns", "r", &ended);
        assert!(terminal(&status(&view)), "finished, store not caught up");

        // The store catches up; then the overlay is dropped and the store's copy counts.
        let mut done = waiting;
        done.data["status"] = json!({"conditions": [{
            "type": "Succeeded", "status": "False", "reason": "Failed", "message": "",
            "lastTransitionTime": "2026-12-02T00:00:00Z"
        }]});
        writer.apply_watcher_event(&Event::Apply(done));
        assert!(terminal(&status(&view)));
        assert!(view.overlay.lock().unwrap().is_empty());

        view.wake("ns", ["r"]);
        assert_eq!(woken.try_recv().unwrap().name, "r");
    }

    #[test]
    fn a_run_that_does_not_decode_is_left_out() {
        let mut o = object(json!({}));
        o.data["spec"]["stage"] = json!("sideways");
        assert!(decode(&o).is_none());
    }
}
