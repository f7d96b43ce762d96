//! Status writes: server-side apply under one field manager, and the Migration's status with
//! a resourceVersion precondition so that a concurrent writer never loses a footprint.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use stagehand_crds::unversioned::{MigrationRunStatus, MigrationStatus};
use stagehand_crds::{Migration, MigrationRun};

/// The field manager of everything Stagehand writes.
pub const FIELD_MANAGER: &str = "stagehand";

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The API server refused or could not be reached.
    #[error("writing the status of {kind} {name}: {source}")]
    Write {
        /// The kind.
        kind: &'static str,
        /// The object.
        name: String,
        /// The answer.
        source: kube::Error,
    },
    /// The Migration kept changing under us.
    #[error("the status of Migration {0} kept changing; will retry")]
    Contended(String),
    /// The run changed since the version a reconcile started from: that reconcile decided
    /// from an old copy (the watch had not delivered the newer one yet) and must start again.
    #[error("MigrationRun {0} changed since this reconcile read it; reconciling it again")]
    Stale(String),
}

/// Server-side applies `status` as the whole status of `name` under Stagehand's field
/// manager; with `precondition`, only if the object is still at that resourceVersion (the API
/// server answers 409 if not).
async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
    precondition: Option<&str>,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut patch = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(version) = precondition {
        patch["metadata"] = json!({"resourceVersion": version});
    }
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// Applies a run's whole status; with `precondition`, only if the run is still at that
/// resourceVersion ([`StatusError::Stale`] if not).
pub async fn apply_run_status(
    api: &Api<MigrationRun>,
    name: &str,
    status: &MigrationRunStatus,
    precondition: Option<&str>,
) -> Result<(), StatusError> {
    match apply_status(api, name, status, precondition).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 && precondition.is_some() => {
            Err(StatusError::Stale(name.to_string()))
        }
        Err(source) => Err(StatusError::Write {
            kind: "MigrationRun",
            name: name.to_string(),
            source,
        }),
    }
}

/// Reads the Migration, lets `change` edit its status, and applies it with the
/// resourceVersion read as a precondition; on a conflict, reads again and retries.
pub async fn update_migration_status<F>(
    api: &Api<Migration>,
    name: &str,
    mut change: F,
) -> Result<Migration, StatusError>
where
    F: FnMut(&mut MigrationStatus),
{
    for _ in 0..10 {
        let current = api.get(name).await.map_err(|source| StatusError::Write {
            kind: "Migration",
            name: name.to_string(),
            source,
        })?;
        let mut status = current.status.clone().unwrap_or_default();
        change(&mut status);
        if current.status.as_ref() == Some(&status) {
            return Ok(current);
        }
        match apply_status(api, name, &status, current.resource_version().as_deref()).await {
            Ok(m) => return Ok(m),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(source) => {
                return Err(StatusError::Write {
                    kind: "Migration",
                    name: name.to_string(),
                    source,
                });
            }
        }
    }
    Err(StatusError::Contended(name.to_string()))
}
