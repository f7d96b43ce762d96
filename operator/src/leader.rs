//! Leader election on a `coordination.k8s.io/v1` Lease (SPEC 5), so that two replicas never
//! run the same stage twice. Built on `kube-lease-manager` (server-side conflict detection,
//! takeover of an expired lease).
//!
//! The leader renews the Lease every `duration - grace` seconds (5 s with the defaults); a
//! standby takes over once the holder's lease has expired (at most `duration` after its last
//! renewal), or as soon as it wakes up after the holder released it on shutdown.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// The Lease's name.
pub const LEASE_NAME: &str = "stagehand-leader";
/// How long a lease lasts without renewal, in seconds.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// How often the leader renews it, in seconds.
pub const RENEW_EVERY_SECONDS: u64 = 5;

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Where and as whom to hold the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// The Lease's name.
    pub lease_name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity (the Lease's `holderIdentity` while it leads).
    pub identity: String,
}

impl LeaderConfig {
    /// The Lease `stagehand-leader` in `namespace` (see [`lease_namespace`]) held as
    /// `identity` (see [`default_identity`]).
    pub fn new(namespace: String, identity: String) -> Self {
        Self {
            lease_name: LEASE_NAME.to_string(),
            namespace,
            identity,
        }
    }
}

/// This replica's identity: `POD_NAME`, else `<hostname>-<pid>`.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "stagehand".to_string());
    format!("{host}-{}", std::process::id())
}

/// The Lease's namespace: the explicit one, else the watched namespace, else the pod's own
/// namespace (in-cluster), else `default`.
pub fn lease_namespace(explicit: Option<&str>, watched: Option<&str>) -> String {
    if let Some(ns) = explicit.or(watched).filter(|ns| !ns.is_empty()) {
        return ns.to_string();
    }
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// A running election: a background task that acquires and renews the Lease and reports
/// whether this replica leads.
#[derive(Debug)]
pub struct Leadership {
    config: LeaderConfig,
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Creates the Lease if it does not exist and starts contending for it.
    pub async fn start(client: Client, config: LeaderConfig) -> Result<Self, LeaseManagerError> {
        let params = LeaseParams::new(
            config.identity.clone(),
            LEASE_DURATION_SECONDS,
            LEASE_DURATION_SECONDS - RENEW_EVERY_SECONDS,
        );
        let manager = LeaseManager::new(
            client,
            config.lease_name.clone(),
            config.namespace.clone(),
            params,
            LeaseCreateMode::AutoCreate,
        )
        .await?;
        let (leading, task) = manager.watch().await;
        info!(
            lease = %config.lease_name,
            lease_namespace = %config.namespace,
            identity = %config.identity,
            "contending for leadership"
        );
        Ok(Self {
            config,
            leading,
            task,
        })
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until this replica leads; `false` if the election stopped first.
    pub async fn acquired(&mut self) -> bool {
        match self.leading.wait_for(|leading| *leading).await {
            Ok(_) => {
                info!(identity = %self.config.identity, lease = %self.config.lease_name, "became the leader");
                true
            }
            Err(_) => {
                warn!("the leader election stopped");
                false
            }
        }
    }

    /// Resolves when this replica no longer leads (or the election stopped).
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|leading| !*leading).await;
        warn!(identity = %self.config.identity, lease = %self.config.lease_name, "lost the leadership");
    }

    /// Stops contending and releases the Lease if held (so a standby takes over at once);
    /// waits at most `timeout`.
    pub async fn release(self, timeout: Duration) {
        let Self {
            config,
            leading,
            task,
        } = self;
        // Closing the channel makes the task release the Lease and return.
        drop(leading);
        match tokio::time::timeout(timeout, task).await {
            Ok(Ok(Ok(_))) => info!(identity = %config.identity, "released the lease"),
            Ok(Ok(Err(e))) => warn!(error = %e, "cannot release the lease"),
            Ok(Err(e)) => warn!(error = %e, "the leader election task failed"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_namespace_prefers_explicit_then_watched() {
        assert_eq!(lease_namespace(Some("a"), Some("b")), "a");
        assert_eq!(lease_namespace(None, Some("b")), "b");
    }

    #[test]
    fn identity_is_not_empty() {
        assert!(!default_identity().is_empty());
    }
}
