//! The storage-version engine (docs/design.md#storage-versions, the lab automated): rewrite every
//! object of a CRD through its storage version, then prune `status.storedVersions` to that version
//! alone.
//!
//! Order is the safety property: `storedVersions` is only pruned after every object was
//! rewritten, and only if the CRD did not change meanwhile (generation and storage version
//! re-read), through the status subresource with a resourceVersion precondition. A failure
//! anywhere before leaves `storedVersions` as it was, so the API server keeps refusing to drop
//! a version that objects may still be stored in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{TryStreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionStatus,
};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Mutex;

use crate::action::{Progress, StopSignal};
use crate::batch::run_bounded;
use crate::text::plural;

/// Why a storage-version check or migration failed. `storedVersions` is unchanged unless the
/// error says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The CRD does not exist.
    #[error("CustomResourceDefinition {0} not found")]
    CrdNotFound(String),
    /// The CRD has no version marked `storage: true`.
    #[error("CustomResourceDefinition {0} has no storage version")]
    NoStorageVersion(String),
    /// A call to the API server failed.
    #[error("{context}: {source}")]
    Api {
        /// What was being done.
        context: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// The CRD changed while objects were rewritten; nothing was pruned.
    #[error(
        "CustomResourceDefinition {crd} changed during the rewrite (generation {old_generation} -> {new_generation}, storage version {old_storage} -> {new_storage}); storedVersions left unchanged, run storage-migrate again"
    )]
    CrdChanged {
        /// The CRD.
        crd: String,
        /// Generation before the rewrite.
        old_generation: i64,
        /// Generation after.
        new_generation: i64,
        /// Storage version before.
        old_storage: String,
        /// Storage version after.
        new_storage: String,
    },
    /// An object kept conflicting with concurrent writers.
    #[error(
        "{object}: still conflicting after {attempts} attempts; storedVersions left unchanged, run storage-migrate again"
    )]
    Conflicts {
        /// `namespace/name` of the object.
        object: String,
        /// How many writes were tried.
        attempts: u32,
    },
}

fn api_err(context: impl Into<String>) -> impl FnOnce(kube::Error) -> StorageError {
    let context = context.into();
    move |source| StorageError::Api { context, source }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Where a CRD's versions stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageState {
    /// The CRD's name.
    pub crd: String,
    /// The served versions, in `spec.versions` order.
    pub served: Vec<String>,
    /// The storage version.
    pub storage: String,
    /// `status.storedVersions`.
    pub stored: Vec<String>,
}

impl StorageState {
    /// Stored versions other than the storage version: objects may still be stored in them.
    pub fn pending(&self) -> Vec<&str> {
        self.stored
            .iter()
            .map(String::as_str)
            .filter(|v| *v != self.storage)
            .collect()
    }

    /// The lab's check output: `served=`, `storage=`, `stored=` lines, then `PENDING <v>` per
    /// pending version or `MIGRATED`.
    pub fn render(&self) -> String {
        let mut out = format!(
            "served={}\nstorage={}\nstored={}\n",
            self.served.join(","),
            self.storage,
            self.stored.join(",")
        );
        let pending = self.pending();
        if pending.is_empty() {
            out.push_str("MIGRATED\n");
        } else {
            for v in pending {
                out.push_str(&format!("PENDING {v}\n"));
            }
        }
        out
    }

    fn of(crd: &CustomResourceDefinition) -> Result<Self, StorageError> {
        let name = crd.name_any();
        let storage = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .ok_or_else(|| StorageError::NoStorageVersion(name.clone()))?;
        Ok(Self {
            served: crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect(),
            storage,
            stored: crd
                .status
                .as_ref()
                .and_then(|s| s.stored_versions.clone())
                .unwrap_or_default(),
            crd: name,
        })
    }
}

/// How hard to push the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrateOptions {
    /// Objects per list page.
    pub page_size: u32,
    /// Rewrites in flight at once.
    pub concurrency: usize,
    /// Upper bound on writes per second (`None`: bounded by concurrency only).
    pub max_writes_per_second: Option<u32>,
    /// Attempts per object when it conflicts with concurrent writers.
    pub conflict_attempts: u32,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        Self {
            page_size: 500,
            concurrency: 32,
            max_writes_per_second: Some(2000),
            conflict_attempts: 5,
        }
    }
}

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// The state before.
    pub before: StorageState,
    /// The state after.
    pub after: StorageState,
    /// Objects written back through the storage version.
    pub rewritten: u64,
    /// Objects deleted between list and write (fine: nothing left to rewrite).
    pub gone: u64,
    /// Writes retried after a conflict.
    pub conflicts: u64,
    /// Wall time of the rewrite.
    pub elapsed: Duration,
}

impl MigrateReport {
    /// One line for people.
    pub fn summary(&self) -> String {
        if self.before.pending().is_empty() {
            return format!(
                "{}: storedVersions already [{}]; nothing to rewrite",
                self.before.crd,
                self.before.stored.join(",")
            );
        }
        format!(
            "{}: rewrote {} through {} in {:.1}s ({} deleted meanwhile, {} retried); storedVersions [{}] -> [{}]",
            self.before.crd,
            count(self.rewritten, "object"),
            self.before.storage,
            self.elapsed.as_secs_f64(),
            self.gone,
            count(self.conflicts, "conflict"),
            self.before.stored.join(","),
            self.after.stored.join(",")
        )
    }
}

/// `1 object`, `2 objects`.
fn count(n: u64, noun: &str) -> String {
    plural(usize::try_from(n).unwrap_or(usize::MAX), noun)
}

/// Reads where a CRD's versions stand; changes nothing.
pub async fn storage_state(client: &Client, crd: &str) -> Result<StorageState, StorageError> {
    StorageState::of(&get_crd(client, crd).await?)
}

async fn get_crd(client: &Client, crd: &str) -> Result<CustomResourceDefinition, StorageError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.get_opt(crd)
        .await
        .map_err(api_err(format!("reading CustomResourceDefinition {crd}")))?
        .ok_or_else(|| StorageError::CrdNotFound(crd.to_string()))
}

/// Rewrites every object of `crd` through its storage version, then prunes `storedVersions`.
/// Does nothing when `storedVersions` already holds only the storage version.
pub async fn migrate(
    client: &Client,
    crd_name: &str,
    options: &MigrateOptions,
) -> Result<MigrateReport, StorageError> {
    migrate_reporting(client, crd_name, options, &Progress::default()).await
}

/// [`migrate`], counting the objects rewritten (or found gone) in `progress`.
pub async fn migrate_reporting(
    client: &Client,
    crd_name: &str,
    options: &MigrateOptions,
    progress: &Progress,
) -> Result<MigrateReport, StorageError> {
    let crd = get_crd(client, crd_name).await?;
    let before = StorageState::of(&crd)?;
    if before.pending().is_empty() {
        return Ok(MigrateReport {
            after: before.clone(),
            before,
            rewritten: 0,
            gone: 0,
            conflicts: 0,
            elapsed: Duration::ZERO,
        });
    }
    let generation = crd.metadata.generation.unwrap_or_default();
    let gvk = GroupVersionKind::gvk(&crd.spec.group, &before.storage, &crd.spec.names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    let namespaced = crd.spec.scope == "Namespaced";
    let started = Instant::now();
    progress.phase(
        format!(
            "rewriting the {} objects through {}",
            crd.spec.names.kind, before.storage
        ),
        None,
        "objects",
    );
    let counters = Counters {
        progress: progress.clone(),
        ..Counters::default()
    };
    rewrite_all(client, &resource, namespaced, options, &counters).await?;
    let elapsed = started.elapsed();

    // Every object was rewritten. Only prune if the CRD is still what we rewrote for.
    let mut now = get_crd(client, crd_name).await?;
    let current = StorageState::of(&now)?;
    let new_generation = now.metadata.generation.unwrap_or_default();
    if new_generation != generation || current.storage != before.storage {
        return Err(StorageError::CrdChanged {
            crd: crd_name.to_string(),
            old_generation: generation,
            new_generation,
            old_storage: before.storage.clone(),
            new_storage: current.storage,
        });
    }
    let status = now
        .status
        .get_or_insert_with(CustomResourceDefinitionStatus::default);
    status.stored_versions = Some(vec![before.storage.clone()]);
    // `now` carries the resourceVersion we read: the API server refuses the write (409) if the
    // CRD changed since, and we report that instead of pruning blindly.
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let written = api
        .replace_status(crd_name, &PostParams::default(), &now)
        .await
        .map_err(api_err(format!(
            "pruning status.storedVersions of {crd_name} (storedVersions left unchanged)"
        )))?;
    Ok(MigrateReport {
        before,
        after: StorageState::of(&written)?,
        rewritten: counters.rewritten.load(Ordering::Relaxed),
        gone: counters.gone.load(Ordering::Relaxed),
        conflicts: counters.conflicts.load(Ordering::Relaxed),
        elapsed,
    })
}

#[derive(Debug, Default)]
struct Counters {
    rewritten: AtomicU64,
    gone: AtomicU64,
    conflicts: AtomicU64,
    /// Objects rewritten or gone, as the action's progress.
    progress: Progress,
}

async fn rewrite_all(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    options: &MigrateOptions,
    counters: &Counters,
) -> Result<(), StorageError> {
    let list_api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let pacer = options
        .max_writes_per_second
        .filter(|r| *r > 0)
        .map(|r| Arc::new(Pacer::new(r)));
    // One stream of objects over all pages: the next page is fetched as soon as the last
    // object of the current one is handed to a writer, so listing overlaps with writing and
    // the writers never drain at a page boundary.
    let objects = stream::try_unfold(Some(None::<String>), |cursor| {
        let list_api = list_api.clone();
        async move {
            let Some(mut token) = cursor else {
                return Ok(None);
            };
            loop {
                let mut params = ListParams::default().limit(options.page_size.max(1));
                if let Some(t) = &token {
                    params = params.continue_token(t);
                }
                match list_api.list(&params).await {
                    Ok(page) => {
                        let next = page.metadata.continue_.clone().filter(|t| !t.is_empty());
                        let cursor = next.map(Some);
                        return Ok(Some((stream::iter(page.items.into_iter().map(Ok)), cursor)));
                    }
                    // The continue token expired (410 Gone): start over; rewriting twice is harmless.
                    Err(e) if is_status(&e, 410) && token.is_some() => token = None,
                    Err(e) => return Err(api_err(format!("listing {}", resource.plural))(e)),
                }
            }
        }
    })
    .try_flatten();
    // After a failure no new write starts, but the writes in flight are awaited: the API
    // server carries them out anyway, and the counters must say what it did. No stop signal:
    // every write goes to the API server the Lease lives on (a replica cut off from it cannot
    // write either), and rewriting an object twice is harmless.
    let batch = run_bounded(
        objects,
        options.concurrency.max(1),
        &StopSignal::never(),
        |object| {
            let pacer = pacer.clone();
            async move {
                let object = object?;
                if let Some(p) = pacer {
                    p.wait().await;
                }
                rewrite_one(
                    client,
                    resource,
                    namespaced,
                    object,
                    options.conflict_attempts,
                    counters,
                )
                .await
            }
        },
    )
    .await;
    match batch.into_first_failure() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Writes one object back unchanged through the storage version; on conflict re-reads and
/// tries again; an object deleted meanwhile needs no rewrite.
async fn rewrite_one(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    mut object: DynamicObject,
    attempts: u32,
    counters: &Counters,
) -> Result<(), StorageError> {
    let name = object.name_any();
    let namespace = object.namespace().filter(|_| namespaced);
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let label = namespace
        .as_ref()
        .map_or_else(|| name.clone(), |ns| format!("{ns}/{name}"));
    let url = DynamicObject::url_path(resource, namespace.as_deref());
    for attempt in 1..=attempts.max(1) {
        match put_unchanged(client, &url, &name, &object).await {
            Ok(()) => {
                counters.rewritten.fetch_add(1, Ordering::Relaxed);
                counters.progress.add(1);
                return Ok(());
            }
            Err(e) if is_status(&e, 404) => {
                counters.gone.fetch_add(1, Ordering::Relaxed);
                counters.progress.add(1);
                return Ok(());
            }
            Err(e) if is_status(&e, 409) && attempt < attempts => {
                counters.conflicts.fetch_add(1, Ordering::Relaxed);
                match api
                    .get_opt(&name)
                    .await
                    .map_err(api_err(format!("re-reading {label}")))?
                {
                    Some(fresh) => object = fresh,
                    None => {
                        counters.gone.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                }
            }
            Err(e) if is_status(&e, 409) => break,
            Err(e) => {
                return Err(api_err(format!(
                    "rewriting {label} through {}",
                    resource.version
                ))(e));
            }
        }
    }
    Err(StorageError::Conflicts {
        object: label,
        attempts,
    })
}

/// PUTs the object as it was read (its resourceVersion makes a concurrent change a 409).
/// `fieldValidation=Ignore`: the body is exactly what the server just served, so checking it
/// for unknown fields is wasted work; the response body is not parsed.
async fn put_unchanged(
    client: &Client,
    url: &str,
    name: &str,
    object: &DynamicObject,
) -> Result<(), kube::Error> {
    // managedFields left out are kept as they are by the API server; not sending them makes
    // the request smaller for it to decode.
    let mut object = object.clone();
    object.metadata.managed_fields = None;
    let body = serde_json::to_vec(&object).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(url)
        .replace(name, &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    let (mut parts, body) = request.into_parts();
    let separator = if parts.uri.query().is_some() {
        '&'
    } else {
        '?'
    };
    parts.uri = format!("{}{separator}fieldValidation=Ignore", parts.uri)
        .parse()
        .map_err(|e: http::uri::InvalidUri| {
            kube::Error::BuildRequest(kube::core::request::Error::Validation(e.to_string()))
        })?;
    client
        .request_text(http::Request::from_parts(parts, body))
        .await
        .map(drop)
}

/// Spaces writes evenly so that at most `rate` start per second.
#[derive(Debug)]
struct Pacer {
    interval: Duration,
    next: Mutex<tokio::time::Instant>,
}

impl Pacer {
    fn new(rate: u32) -> Self {
        Self {
            interval: Duration::from_secs(1) / rate,
            next: Mutex::new(tokio::time::Instant::now()),
        }
    }

    async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().await;
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(stored: &[&str]) -> StorageState {
        StorageState {
            crd: "tunnels.net.labhub.io".into(),
            served: vec!["v1alpha1".into(), "v1beta1".into()],
            storage: "v1beta1".into(),
            stored: stored.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn pending_and_render() {
        let s = state(&["v1alpha1", "v1beta1"]);
        assert_eq!(s.pending(), ["v1alpha1"]);
        assert_eq!(
            s.render(),
            "served=v1alpha1,v1beta1\nstorage=v1beta1\nstored=v1alpha1,v1beta1\nPENDING v1alpha1\n"
        );
        let s = state(&["v1beta1"]);
        assert!(s.pending().is_empty());
        assert!(s.render().ends_with("stored=v1beta1\nMIGRATED\n"));
    }

    #[tokio::test(start_paused = true)]
    async fn pacer_spaces_writes() {
        let pacer = Pacer::new(10);
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            pacer.wait().await;
        }
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    }
}
