//! The finalizer a started run carries (`stagehand.dev/run-in-progress`), so that at most
//! one run of a Migration executes, deletion included: a started run that is deleted stays
//! until its action stopped at a safe point and what completed is recorded, and only then
//! lets the object go. A run carries it from its start until it ended; a run that ended
//! (or never started) is deleted at once.

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use stagehand_crds::MigrationRun;

use super::status::StatusError;

/// The finalizer's name.
pub const RUN_FINALIZER: &str = "stagehand.dev/run-in-progress";

/// Whether `finalizers` holds [`RUN_FINALIZER`].
pub fn held(finalizers: Option<&[String]>) -> bool {
    finalizers.is_some_and(|f| f.iter().any(|f| f == RUN_FINALIZER))
}

/// The JSON merge patch that adds the finalizer to `finalizers`, conditional on
/// `resource_version` (the API server refuses it with 409 when the run changed since), or
/// `None` when it is there already (pure).
pub fn hold_patch(
    finalizers: Option<&[String]>,
    resource_version: Option<&str>,
) -> Option<serde_json::Value> {
    if held(finalizers) {
        return None;
    }
    let mut list: Vec<String> = finalizers.map(<[String]>::to_vec).unwrap_or_default();
    list.push(RUN_FINALIZER.to_string());
    let mut metadata = json!({ "finalizers": list });
    if let Some(version) = resource_version {
        metadata["resourceVersion"] = json!(version);
    }
    Some(json!({ "metadata": metadata }))
}

/// The JSON patch that removes the finalizer from `finalizers`, tested against the list as
/// read (another writer's change makes the API server refuse it), or `None` when it is not
/// there (pure).
pub fn release_patch(finalizers: Option<&[String]>) -> Option<serde_json::Value> {
    let list = finalizers?;
    if !held(Some(list)) {
        return None;
    }
    let rest: Vec<&String> = list.iter().filter(|f| *f != RUN_FINALIZER).collect();
    Some(json!([
        { "op": "test", "path": "/metadata/finalizers", "value": list },
        { "op": "replace", "path": "/metadata/finalizers", "value": rest },
    ]))
}

fn write_error(name: &str, source: kube::Error) -> StatusError {
    StatusError::Write {
        kind: "MigrationRun",
        name: name.to_string(),
        source,
    }
}

/// Adds the finalizer to run `name` as read at `resource_version`; returns the
/// resourceVersion after the write (`None` when nothing was written). A run changed since
/// is [`StatusError::Stale`]: the reconcile decided from an old copy.
pub async fn hold(
    api: &Api<MigrationRun>,
    name: &str,
    finalizers: Option<&[String]>,
    resource_version: Option<&str>,
) -> Result<Option<String>, StatusError> {
    let Some(patch) = hold_patch(finalizers, resource_version) else {
        return Ok(None);
    };
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(run) => Ok(run.metadata.resource_version),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(StatusError::Stale(name.to_string())),
        Err(source) => Err(write_error(name, source)),
    }
}

/// Removes the finalizer from run `name` (reading it first); a run already gone, or without
/// it, needs nothing. Retried while others change the list at the same time.
pub async fn release(api: &Api<MigrationRun>, name: &str) -> Result<(), StatusError> {
    for _ in 0..5 {
        let current = api
            .get_opt(name)
            .await
            .map_err(|source| write_error(name, source))?;
        let Some(run) = current else {
            return Ok(());
        };
        let Some(patch) = release_patch(run.metadata.finalizers.as_deref()) else {
            return Ok(());
        };
        match api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Json::<()>(
                    serde_json::from_value(patch)
                        .map_err(|e| write_error(name, kube::Error::SerdeError(e)))?,
                ),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            // 422: the test failed (the list changed since it was read); 409: a conflict.
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {}
            Err(source) => return Err(write_error(name, source)),
        }
    }
    Err(StatusError::Contended(format!("MigrationRun {name}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_is_added_once_under_the_version_read() {
        let patch = hold_patch(None, Some("42")).unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"finalizers": [RUN_FINALIZER], "resourceVersion": "42"}})
        );
        let others = vec!["argocd.argoproj.io/hook-finalizer".to_string()];
        let patch = hold_patch(Some(&others), None).unwrap();
        assert_eq!(
            patch["metadata"]["finalizers"],
            json!(["argocd.argoproj.io/hook-finalizer", RUN_FINALIZER]),
            "another tool's finalizer is kept"
        );
        let held_list = vec![RUN_FINALIZER.to_string()];
        assert_eq!(hold_patch(Some(&held_list), Some("1")), None);
    }

    #[test]
    fn the_finalizer_is_removed_keeping_the_others() {
        assert_eq!(release_patch(None), None);
        let list = vec!["a/b".to_string(), RUN_FINALIZER.to_string()];
        let patch = release_patch(Some(&list)).unwrap();
        assert_eq!(patch[0]["value"], json!(["a/b", RUN_FINALIZER]));
        assert_eq!(patch[1]["value"], json!(["a/b"]));
        assert_eq!(release_patch(Some(&["a/b".to_string()])), None);
    }
}
