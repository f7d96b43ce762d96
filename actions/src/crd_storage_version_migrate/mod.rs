//! `crd_storage_version_migrate`: rewrites every object of a CRD through its storage version,
//! then prunes `status.storedVersions` (the storage-version lab, automated).

use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome};

pub mod rewrite;

/// The action's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The CRD's name, e.g. `tunnels.net.labhub.io`.
    #[schemars(length(min = 1))]
    pub crd: String,
    /// Objects per list page.
    #[serde(default = "default_page_size")]
    #[schemars(range(min = 1))]
    pub page_size: u32,
    /// Rewrites in flight at once.
    #[serde(default = "default_concurrency")]
    #[schemars(range(min = 1))]
    pub concurrency: u32,
}

fn default_page_size() -> u32 {
    500
}

fn default_concurrency() -> u32 {
    32
}

impl ActionConfig for Config {
    const ID: &'static str = "crd_storage_version_migrate";
}

/// By what happened: no CRD [`ActionError::NotFound`], a refused API call
/// [`ActionError::Kubernetes`], the CRD or an object changing under the rewrite
/// [`ActionError::Conflict`]; the message is the storage error's.
fn failed(e: rewrite::StorageError) -> ActionError {
    use rewrite::StorageError;
    let message = e.to_string();
    match e {
        StorageError::CrdNotFound(_) => ActionError::NotFound(message),
        StorageError::Api { context, source } => ActionError::Kubernetes { context, source },
        StorageError::CrdChanged { .. } | StorageError::Conflicts { .. } => {
            ActionError::Conflict(message)
        }
        StorageError::NoStorageVersion(_) => ActionError::Failed(message),
    }
}

impl Config {
    fn options(&self) -> rewrite::MigrateOptions {
        rewrite::MigrateOptions {
            page_size: self.page_size,
            concurrency: usize::try_from(self.concurrency).unwrap_or(usize::MAX),
            ..rewrite::MigrateOptions::default()
        }
    }

    /// Counts the CRD's objects (paging like the rewrite would) and proves, with a server-side
    /// dry run, that `status.storedVersions` may be written. Changes nothing.
    async fn count_and_check(
        &self,
        ctx: &ActionContext,
        storage: &str,
    ) -> Result<u64, ActionError> {
        let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
        let crd = crds
            .get(&self.crd)
            .await
            .map_err(ActionError::kube(format!(
                "reading CustomResourceDefinition {}",
                self.crd
            )))?;
        let gvk = GroupVersionKind::gvk(&crd.spec.group, storage, &crd.spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
        let mut count = 0u64;
        let mut params = ListParams::default().limit(self.page_size);
        loop {
            let page = api
                .list_metadata(&params)
                .await
                .map_err(ActionError::kube(format!(
                    "listing the objects of {}",
                    self.crd
                )))?;
            count += page.items.len() as u64;
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        crds.replace_status(&self.crd, &PostParams { dry_run: true, ..PostParams::default() }, &crd)
            .await
            .map_err(ActionError::kube(format!(
                "trying (dry run) to write status.storedVersions of {} (needs update on customresourcedefinitions/status)",
                self.crd
            )))?;
        Ok(count)
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let state = rewrite::storage_state(&ctx.client, &self.crd)
                .await
                .map_err(failed)?;
            let pending = state.pending();
            if pending.is_empty() {
                return Ok(Outcome::new(format!(
                    "{}: MIGRATED (storedVersions [{}]); nothing to rewrite",
                    self.crd,
                    state.stored.join(",")
                )));
            }
            let count = self.count_and_check(ctx, &state.storage).await?;
            Ok(Outcome::new(format!(
                "{}: PENDING {}: {count} objects would be rewritten through {}, then storedVersions [{}] -> [{}]",
                self.crd,
                pending.join(","),
                state.storage,
                state.stored.join(","),
                state.storage
            )))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            // The engine's future cannot be proven `Send` (a higher-ranked lifetime in its
            // stream of borrowing closures), and an action's future must be: it runs on a
            // blocking thread of its own, driven by the current runtime.
            let client = ctx.client.clone();
            let crd = self.crd.clone();
            let options = self.options();
            let progress = ctx.progress.clone();
            let runtime = tokio::runtime::Handle::current();
            let report = tokio::task::spawn_blocking(move || {
                runtime.block_on(async move {
                    rewrite::migrate_reporting(&client, &crd, &options, &progress).await
                })
            })
            .await
            .map_err(|e| {
                ActionError::Failed(format!(
                    "migrating {}: the rewrite task failed: {e}",
                    self.crd
                ))
            })?
            .map_err(failed)?;
            Ok(Outcome::new(report.summary()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_from_the_config() {
        let config = Config {
            crd: "a.b".into(),
            page_size: 7,
            concurrency: 3,
        };
        let options = config.options();
        assert_eq!(options.page_size, 7);
        assert_eq!(options.concurrency, 3);
        assert_eq!(
            options.conflict_attempts,
            rewrite::MigrateOptions::default().conflict_attempts
        );
    }
}
