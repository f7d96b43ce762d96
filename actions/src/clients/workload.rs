//! Kubernetes workloads (StatefulSets, Deployments) as the actions scale and restart them:
//! read the scale subresource, patch the replica count, wait until the pods are gone, and the
//! messages of a refused or timed-out scaling.

use std::fmt;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::Selector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::action::{ActionContext, ActionError};
use crate::text::plural;

/// The kinds of workload the actions scale and restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WorkloadKind {
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 Deployment.
    Deployment,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        })
    }
}

impl WorkloadKind {
    /// The resource's plural, as RBAC rules name it.
    fn plural(self) -> &'static str {
        match self {
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::Deployment => "deployments",
        }
    }
}

/// How often a scale-down looks at the pods that are left.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// One workload in one namespace, as `workload_scale` and `ox_connector_restart` address it.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: String,
}

/// What the cluster says about a workload.
#[derive(Debug, Clone)]
pub struct Observed {
    /// `spec.replicas` as the scale subresource reports it.
    pub replicas: i32,
    /// The workload's pod selector.
    pub selector: Selector,
}

impl Target {
    pub fn new(kind: WorkloadKind, name: &str, ctx: &ActionContext) -> Self {
        Self {
            kind,
            name: name.to_string(),
            namespace: ctx.namespace.clone(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} {} in namespace {}",
            self.kind, self.name, self.namespace
        )
    }

    /// The workload's selector, or `None` when it does not exist.
    async fn selector(&self, ctx: &ActionContext) -> Result<Option<LabelSelector>, kube::Error> {
        Ok(match self.kind {
            WorkloadKind::StatefulSet => {
                Api::<StatefulSet>::namespaced(ctx.client.clone(), &self.namespace)
                    .get_opt(&self.name)
                    .await?
                    .map(|w| w.spec.map(|s| s.selector).unwrap_or_default())
            }
            WorkloadKind::Deployment => {
                Api::<Deployment>::namespaced(ctx.client.clone(), &self.namespace)
                    .get_opt(&self.name)
                    .await?
                    .map(|w| w.spec.map(|s| s.selector).unwrap_or_default())
            }
        })
    }

    async fn scale_replicas(&self, ctx: &ActionContext) -> Result<i32, kube::Error> {
        let scale = match self.kind {
            WorkloadKind::StatefulSet => {
                Api::<StatefulSet>::namespaced(ctx.client.clone(), &self.namespace)
                    .get_scale(&self.name)
                    .await?
            }
            WorkloadKind::Deployment => {
                Api::<Deployment>::namespaced(ctx.client.clone(), &self.namespace)
                    .get_scale(&self.name)
                    .await?
            }
        };
        Ok(scale.spec.and_then(|s| s.replicas).unwrap_or_default())
    }

    async fn patch_replicas(
        &self,
        ctx: &ActionContext,
        replicas: i32,
        dry_run: bool,
    ) -> Result<(), kube::Error> {
        let params = PatchParams {
            dry_run,
            ..PatchParams::default()
        };
        let patch = Patch::Merge(serde_json::json!({ "spec": { "replicas": replicas } }));
        match self.kind {
            WorkloadKind::StatefulSet => {
                Api::<StatefulSet>::namespaced(ctx.client.clone(), &self.namespace)
                    .patch_scale(&self.name, &params, &patch)
                    .await?;
            }
            WorkloadKind::Deployment => {
                Api::<Deployment>::namespaced(ctx.client.clone(), &self.namespace)
                    .patch_scale(&self.name, &params, &patch)
                    .await?;
            }
        }
        Ok(())
    }

    /// A kube error, with the permission that is missing spelled out when it was a 403.
    fn error(
        &self,
        doing: &str,
        verb: &str,
        resource: &str,
    ) -> impl FnOnce(kube::Error) -> ActionError {
        let context = format!("{doing} {}", self.describe());
        let resource = resource.to_string();
        let verb = verb.to_string();
        move |source| match &source {
            kube::Error::Api(status) if status.code == 403 => ActionError::Refused(
                forbidden_message(&context, &verb, &resource, &status.message),
            ),
            _ => ActionError::Kubernetes { context, source },
        }
    }

    /// Reads the workload and its scale, and proves the scale can be written (server-side
    /// dry run of every replica count in `would_set`) and the pods listed. Changes nothing.
    pub async fn inspect(
        &self,
        ctx: &ActionContext,
        would_set: &[i32],
    ) -> Result<Observed, ActionError> {
        let plural = self.kind.plural();
        let selector = self
            .selector(ctx)
            .await
            .map_err(self.error("reading", "get", &format!("{plural}.apps")))?
            .ok_or_else(|| ActionError::NotFound(format!("{} not found", self.describe())))?;
        let selector = Selector::try_from(selector).map_err(|e| {
            ActionError::InvalidAnswer(format!(
                "{} has a selector Stagehand cannot read: {e}",
                self.describe()
            ))
        })?;
        let replicas = self.scale_replicas(ctx).await.map_err(self.error(
            "reading the scale of",
            "get",
            &format!("{plural}.apps/scale"),
        ))?;
        for &n in would_set {
            self.patch_replicas(ctx, n, true).await.map_err(self.error(
                "trying (dry run) to scale",
                "patch",
                &format!("{plural}.apps/scale"),
            ))?;
        }
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        pods.list_metadata(&ListParams::default().labels_from(&selector).limit(1))
            .await
            .map_err(self.error("listing the pods of", "list", "pods"))?;
        Ok(Observed { replicas, selector })
    }

    /// Sets the replica count through the scale subresource.
    pub async fn scale(&self, ctx: &ActionContext, replicas: i32) -> Result<(), ActionError> {
        self.patch_replicas(ctx, replicas, false)
            .await
            .map_err(self.error(
                &format!("scaling to {replicas} replicas"),
                "patch",
                &format!("{}.apps/scale", self.kind.plural()),
            ))
    }

    /// The names of the pods the selector matches, terminating ones included, sorted.
    async fn pod_names(
        &self,
        ctx: &ActionContext,
        selector: &Selector,
    ) -> Result<Vec<String>, ActionError> {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &self.namespace);
        let list = pods
            .list_metadata(&ListParams::default().labels_from(selector))
            .await
            .map_err(self.error("listing the pods of", "list", "pods"))?;
        let mut names: Vec<String> = list.items.iter().map(|p| p.name_any()).collect();
        names.sort();
        Ok(names)
    }

    /// Waits until at most `replicas` pods match the selector (none for 0), failing after
    /// `timeout` naming the pods left. Returns how many pods went and how long it took.
    pub async fn wait_for_pods(
        &self,
        ctx: &ActionContext,
        selector: &Selector,
        replicas: i32,
        timeout: Duration,
    ) -> Result<(usize, Duration), ActionError> {
        let started = Instant::now();
        let limit = usize::try_from(replicas).unwrap_or(0);
        let mut first: Option<usize> = None;
        loop {
            let names = self.pod_names(ctx, selector).await?;
            let initial = *first.get_or_insert(names.len());
            if names.len() <= limit {
                return Ok((initial.saturating_sub(names.len()), started.elapsed()));
            }
            if started.elapsed() >= timeout {
                return Err(ActionError::Failed(timeout_message(
                    &self.describe(),
                    replicas,
                    &names,
                    timeout,
                )));
            }
            tokio::time::sleep(POLL_INTERVAL.min(timeout.saturating_sub(started.elapsed()))).await;
        }
    }
}

fn forbidden_message(context: &str, verb: &str, resource: &str, server: &str) -> String {
    format!(
        "{context}: forbidden: Stagehand's ServiceAccount needs permission to {verb} {resource} (API server: {server})"
    )
}

/// The error of a scale-down that did not finish in time: names every pod left, sorted.
pub fn timeout_message(
    workload: &str,
    replicas: i32,
    pods_left: &[String],
    timeout: Duration,
) -> String {
    let mut sorted = pods_left.to_vec();
    sorted.sort();
    let goal = if replicas == 0 {
        "all its pods to be gone".to_string()
    } else {
        format!(
            "at most {}",
            plural(usize::try_from(replicas).unwrap_or(0), "pod")
        )
    };
    format!(
        "{workload}: timed out after {}s waiting for {goal}; {} left: {}",
        timeout.as_secs(),
        plural(sorted.len(), "pod"),
        sorted.join(", ")
    )
}

/// Converts a configured replica count for the API (which counts in i32).
pub fn replicas_i32(replicas: u32) -> Result<i32, ActionError> {
    i32::try_from(replicas)
        .map_err(|_| ActionError::Config(format!("replicas {replicas} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_names_the_pods_left_sorted_and_the_timeout() {
        let msg = timeout_message(
            "StatefulSet ox-connector in namespace ns",
            0,
            &["ox-connector-1".to_string(), "ox-connector-0".to_string()],
            Duration::from_secs(300),
        );
        assert!(
            msg.contains("StatefulSet ox-connector in namespace ns"),
            "{msg}"
        );
        assert!(msg.contains("300s"), "{msg}");
        assert!(
            msg.contains("2 pods left: ox-connector-0, ox-connector-1"),
            "{msg}"
        );
    }

    #[test]
    fn partial_scale_down_names_the_goal() {
        let msg = timeout_message(
            "Deployment web",
            1,
            &["web-a".to_string(), "web-b".to_string()],
            Duration::from_secs(3),
        );
        assert!(msg.contains("at most 1 pod;"), "{msg}");
        assert!(msg.contains("3s"), "{msg}");
    }

    #[test]
    fn forbidden_names_the_permission() {
        let msg = forbidden_message(
            "trying (dry run) to scale StatefulSet x in namespace y",
            "patch",
            "statefulsets.apps/scale",
            "nope",
        );
        assert!(msg.contains("forbidden"), "{msg}");
        assert!(msg.contains("patch statefulsets.apps/scale"), "{msg}");
    }

    #[test]
    fn replicas_beyond_i32_are_a_config_error() {
        assert!(matches!(
            replicas_i32(u32::MAX),
            Err(ActionError::Config(_))
        ));
        assert_eq!(replicas_i32(3).ok(), Some(3));
    }
}
