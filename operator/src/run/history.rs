//! The history ledger on the cluster: a ConfigMap in the Migration's namespace (named by
//! `spec.historyConfigMap`, default `<migration>-history`) with no owner reference, so it
//! outlives the Migration. Every footprint and the last migrated release are written here
//! first (resourceVersion-guarded), then mirrored into the Migration's status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use stagehand_crds::Migration;
use stagehand_crds::unversioned::MigrationStatus;

use super::ledger::{Ledger, LedgerError, ledger_name};
use super::status::{StatusError, update_migration_status};

/// Why the history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The ledger exists but cannot be read; it is left as it is.
    #[error(
        "the history ledger ConfigMap {namespace}/{name} cannot be read: {why}. Nothing was changed; restore the ledger from a backup (docs/api.md, \"The history ledger\") or fix it, then create a new MigrationRun"
    )]
    Unreadable {
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// What is wrong.
        why: LedgerError,
    },
    /// The API server refused or could not be reached.
    #[error("{context} the history ledger ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// What was done.
        context: &'static str,
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// The answer.
        source: Box<kube::Error>,
    },
    /// Others kept writing the ledger.
    #[error("the history ledger ConfigMap {namespace}/{name} kept changing; will retry")]
    Contended {
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
    },
    /// Mirroring into the Migration's status failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

impl HistoryError {
    /// Whether the ledger is malformed (the run stalls with `HistoryUnreadable`) rather than
    /// out of reach for a moment (the reconcile is retried).
    pub fn is_unreadable(&self) -> bool {
        matches!(self, HistoryError::Unreadable { .. })
    }

    /// A 409 from the API server: someone else wrote first.
    fn is_conflict(&self) -> bool {
        matches!(self, HistoryError::Api { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409))
    }
}

/// The ledger of one Migration.
#[derive(Clone)]
pub struct History {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
    migration: String,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The label every ledger carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "stagehand");
/// The label naming the Migration a ledger belongs to.
pub const MIGRATION_LABEL: &str = "stagehand.dev/migration";

impl History {
    /// The ledger of `migration`.
    pub fn of(client: &Client, migration: &Migration) -> Self {
        let namespace = migration.namespace().unwrap_or_default();
        Self {
            api: Api::namespaced(client.clone(), &namespace),
            name: ledger_name(
                &migration.name_any(),
                migration.spec.history_config_map.as_deref(),
            ),
            namespace,
            migration: migration.name_any(),
        }
    }

    /// The ConfigMap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn api_error(&self, context: &'static str) -> impl FnOnce(kube::Error) -> HistoryError {
        let (namespace, name) = (self.namespace.clone(), self.name.clone());
        move |source| HistoryError::Api {
            context,
            namespace,
            name,
            source: Box::new(source),
        }
    }

    fn unreadable(&self, why: LedgerError) -> HistoryError {
        HistoryError::Unreadable {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            why,
        }
    }

    fn parse(&self, cm: &ConfigMap) -> Result<Ledger, HistoryError> {
        Ledger::parse(&cm.data.clone().unwrap_or_default()).map_err(|why| self.unreadable(why))
    }

    /// The ledger, or `None` when there is none.
    pub async fn read(&self) -> Result<Option<Ledger>, HistoryError> {
        let cm = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(self.api_error("reading"))?;
        cm.map(|cm| self.parse(&cm)).transpose()
    }

    /// The ledger; when there is none but the Migration's status recorded a history (a
    /// Migration created before the ledger existed), writes it from that status first.
    pub async fn ensure(&self, status: Option<&MigrationStatus>) -> Result<Ledger, HistoryError> {
        if let Some(ledger) = self.read().await? {
            return Ok(ledger);
        }
        let seeded = status.map(Ledger::from_status).unwrap_or_default();
        if seeded.is_empty() {
            return Ok(seeded);
        }
        tracing::info!(ledger = %self.name, footprints = seeded.footprints.len(), "writing the history ledger from the Migration's status");
        match self.create(&seeded).await {
            Ok(()) => Ok(seeded),
            // Someone else wrote it meanwhile: theirs is the record.
            Err(e) if e.is_conflict() => self.read().await.map(Option::unwrap_or_default),
            Err(e) => Err(e),
        }
    }

    async fn create(&self, ledger: &Ledger) -> Result<(), HistoryError> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([
                    (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
                    (MIGRATION_LABEL.to_string(), self.migration.clone()),
                ])),
                ..ObjectMeta::default()
            },
            data: Some(ledger.to_data()),
            ..ConfigMap::default()
        };
        self.api
            .create(&PostParams::default(), &cm)
            .await
            .map(drop)
            .map_err(self.api_error("creating"))
    }

    /// Reads the ledger, lets `change` edit it, and writes it back guarded by the
    /// resourceVersion read (creating it when there is none); retries on a conflict. A
    /// malformed ledger is never rewritten. Returns the ledger as written.
    pub async fn update<F>(&self, mut change: F) -> Result<Ledger, HistoryError>
    where
        F: FnMut(&mut Ledger),
    {
        for _ in 0..10 {
            let current = self
                .api
                .get_opt(&self.name)
                .await
                .map_err(self.api_error("reading"))?;
            let Some(mut cm) = current else {
                let mut ledger = Ledger::default();
                change(&mut ledger);
                match self.create(&ledger).await {
                    Ok(()) => return Ok(ledger),
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e),
                }
            };
            let mut ledger = self.parse(&cm)?;
            let before = ledger.clone();
            change(&mut ledger);
            if ledger == before {
                return Ok(ledger);
            }
            cm.data = Some(ledger.to_data());
            // `replace` sends the resourceVersion read: a concurrent writer makes it 409.
            match self
                .api
                .replace(&self.name, &PostParams::default(), &cm)
                .await
            {
                Ok(_) => return Ok(ledger),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(source) => return Err(self.api_error("writing")(source)),
            }
        }
        Err(HistoryError::Contended {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }
}

/// Mirrors the ledger into the Migration's `status.history` and `status.lastMigratedRelease`
/// (status is a copy: reconstructible from the ledger). A Migration deleted meanwhile has no
/// status to mirror into: the ledger holds the record, and a recreated Migration shows it.
pub async fn mirror(
    migrations: &Api<Migration>,
    name: &str,
    ledger: &Ledger,
) -> Result<(), HistoryError> {
    match update_migration_status(migrations, name, |s| ledger.mirror_into(s)).await {
        Ok(_) => Ok(()),
        Err(StatusError::Write {
            source: kube::Error::Api(e),
            ..
        }) if e.code == 404 => {
            tracing::info!(migration = %name, "the Migration is gone: the history ledger alone holds the record");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
