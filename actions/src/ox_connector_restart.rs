//! `ox_connector_restart`: scales a StatefulSet to 0, waits, and scales it back up.

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome};
use crate::clients::workload::{Target, WorkloadKind, replicas_i32};

/// How long the StatefulSet's pods may take to go before the restart fails naming them.
pub(crate) const POD_TIMEOUT: Duration = Duration::from_secs(300);

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The StatefulSet to restart.
    #[serde(default)]
    pub statefulset: StatefulSet,
}

/// The StatefulSet and how to bring it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatefulSet {
    /// Its name in the Migration's namespace.
    #[serde(default = "StatefulSet::default_name")]
    #[schemars(length(min = 1))]
    pub name: String,
    /// The replica count to scale back up to.
    #[serde(default = "StatefulSet::default_replicas")]
    pub replicas: u32,
    /// How long to wait at zero before scaling back up.
    #[serde(default = "StatefulSet::default_wait_seconds")]
    pub wait_seconds: u64,
}

impl StatefulSet {
    fn default_name() -> String {
        "ox-connector".into()
    }
    fn default_replicas() -> u32 {
        1
    }
    fn default_wait_seconds() -> u64 {
        30
    }
}

impl Default for StatefulSet {
    fn default() -> Self {
        Self {
            name: Self::default_name(),
            replicas: Self::default_replicas(),
            wait_seconds: Self::default_wait_seconds(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_connector_restart";
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let s = &self.statefulset;
            let replicas = replicas_i32(s.replicas)?;
            let t = Target::new(WorkloadKind::StatefulSet, &s.name, ctx);
            let observed = t.inspect(ctx, &[0, replicas]).await?;
            Ok(Outcome::new(format!(
                "StatefulSet {}: would scale {} -> 0 (waiting up to {}s for its pods to go), wait {}s, then scale to {replicas}",
                s.name,
                observed.replicas,
                POD_TIMEOUT.as_secs(),
                s.wait_seconds
            )))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let s = &self.statefulset;
            let replicas = replicas_i32(s.replicas)?;
            let t = Target::new(WorkloadKind::StatefulSet, &s.name, ctx);
            // Re-entrant: a rerun finds it at 0 (or anywhere) and restarts from there; a
            // restart repeated after a crash is harmless.
            let observed = t.inspect(ctx, &[]).await?;
            if observed.replicas != 0 {
                t.scale(ctx, 0).await?;
            }
            let (gone, took) = t
                .wait_for_pods(ctx, &observed.selector, 0, POD_TIMEOUT)
                .await?;
            tokio::time::sleep(Duration::from_secs(s.wait_seconds)).await;
            t.scale(ctx, replicas).await?;
            Ok(Outcome::new(format!(
                "StatefulSet {}: {} -> 0 ({gone} pods gone after {}s), waited {}s, -> {replicas} replicas",
                s.name,
                observed.replicas,
                took.as_secs(),
                s.wait_seconds
            )))
        })
    }
}
