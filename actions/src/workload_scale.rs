//! `workload_scale`: scales a StatefulSet or Deployment; scaling down waits until its pods are
//! gone.

use std::time::Duration;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome};
use crate::clients::workload::{Target, WorkloadKind, replicas_i32};

/// The action's config. `kind`, `name` and `replicas` are required: a default for any of them
/// would scale something the declaration did not ask for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The workload to scale.
    pub workload: Workload,
}

/// A workload and its target replica count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// `StatefulSet` or `Deployment`.
    pub kind: WorkloadKind,
    /// The workload's name in the Migration's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The replica count to scale to.
    pub replicas: u32,
    /// How long a scale-down may take before the action fails naming the pods left.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
}

fn default_timeout_seconds() -> u64 {
    300
}

impl ActionConfig for Config {
    const ID: &'static str = "workload_scale";
}

/// Whether reaching `target` from `current` means waiting for pods to go: scaling down, or a
/// rerun that finds the target already set (the previous run may have stopped mid-wait).
fn waits(current: i32, target: i32) -> bool {
    target <= current
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let w = &self.workload;
            let target = replicas_i32(w.replicas)?;
            let t = Target::new(w.kind, &w.name, ctx);
            let observed = t.inspect(ctx, &[target]).await?;
            let head = if observed.replicas == target {
                format!("{} {}: already at {target} replicas", w.kind, w.name)
            } else {
                format!(
                    "{} {}: {} -> {target} replicas",
                    w.kind, w.name, observed.replicas
                )
            };
            let tail = if waits(observed.replicas, target) {
                format!("would wait up to {}s for its pods to go", w.timeout_seconds)
            } else {
                "scale-up is not waited for".to_string()
            };
            Ok(Outcome::new(format!("{head} ({tail})")))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let w = &self.workload;
            let target = replicas_i32(w.replicas)?;
            let t = Target::new(w.kind, &w.name, ctx);
            let observed = t.inspect(ctx, &[]).await?;
            let head = if observed.replicas == target {
                format!("{} {}: already at {target} replicas", w.kind, w.name)
            } else {
                t.scale(ctx, target).await?;
                format!(
                    "{} {}: {} -> {target} replicas",
                    w.kind, w.name, observed.replicas
                )
            };
            if !waits(observed.replicas, target) {
                return Ok(Outcome::new(format!("{head}; scale-up not waited for")));
            }
            let (gone, took) = t
                .wait_for_pods(
                    ctx,
                    &observed.selector,
                    target,
                    Duration::from_secs(w.timeout_seconds),
                )
                .await?;
            Ok(Outcome::new(format!(
                "{head}; {gone} pods gone after {}s",
                took.as_secs()
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_down_and_reruns_wait_scale_up_does_not() {
        assert!(waits(2, 0));
        assert!(waits(0, 0));
        assert!(waits(3, 1));
        assert!(!waits(0, 2));
        assert!(!waits(1, 3));
    }
}
