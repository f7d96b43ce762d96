//! Leader election on a `coordination.k8s.io/v1` Lease (SPEC 5), so that two replicas never
//! run the same stage twice. Built on `kube-lease-manager` (server-side conflict detection,
//! takeover of an expired lease), with a **renew deadline** around it, as client-go's leader
//! election has.
//!
//! The leader renews the Lease every `renew_every` (5 s by default); a standby takes over once
//! the holder's lease has expired (`lease_duration`, 15 s, after its last renewal), or as soon
//! as it wakes up after the holder released it on shutdown.
//!
//! kube-lease-manager alone never tells a leader that cannot reach the API server that it
//! lost: its renewals fail, it logs them and retries, and its "leading" flag stays true while
//! a standby takes the expired Lease. So this module watches the renewals itself: every second
//! it reads the Lease, and the `renewTime` of a Lease this replica holds is the time of its
//! last renewal that the API server accepted. When none succeeded for `renew_deadline` (10 s),
//! the replica is no longer the leader ([`Leadership::lost`]), 5 s before a standby can take
//! the Lease: time for the run engine to stop its action at a safe point.
//! `renew_every < renew_deadline < lease_duration` is checked ([`LeaseTimings::new`]).

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// The Lease's name.
pub const LEASE_NAME: &str = "stagehand-leader";
/// How long a lease lasts without renewal, in seconds.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// How long the leader goes on leading without a successful renewal, in seconds: shorter
/// than the lease, so that it stops before a standby can take over.
pub const RENEW_DEADLINE_SECONDS: u64 = 10;
/// How often the leader renews it, in seconds.
pub const RENEW_EVERY_SECONDS: u64 = 5;

/// How often the leader reads the Lease to see its renewals.
const CONFIRM_EVERY: Duration = Duration::from_secs(1);

/// The three durations of the election, in whole seconds (the Lease counts in seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a lease lasts after its last renewal: then a standby may take it.
    pub lease_duration: u64,
    /// How long the leader goes on without a successful renewal before it stops leading.
    pub renew_deadline: u64,
    /// How often the leader renews.
    pub renew_every: u64,
}

/// Lease timings that could let two replicas lead at once, or make a leader give up between
/// two renewals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingsError {
    /// The renew deadline must end before the lease does.
    #[error(
        "the renew deadline ({renew_deadline} s) must be shorter than the lease duration ({lease_duration} s): a leader cut off from the API server must stop before a standby can take the Lease"
    )]
    DeadlineNotBeforeExpiry {
        /// Seconds.
        renew_deadline: u64,
        /// Seconds.
        lease_duration: u64,
    },
    /// Renewals must come more often than the deadline.
    #[error(
        "the renewal interval ({renew_every} s) must be shorter than the renew deadline ({renew_deadline} s), and at least 1 s"
    )]
    RenewalNotBeforeDeadline {
        /// Seconds.
        renew_every: u64,
        /// Seconds.
        renew_deadline: u64,
    },
}

impl LeaseTimings {
    /// 15 s lease, 10 s renew deadline, renewed every 5 s.
    pub const DEFAULT: LeaseTimings = LeaseTimings {
        lease_duration: LEASE_DURATION_SECONDS,
        renew_deadline: RENEW_DEADLINE_SECONDS,
        renew_every: RENEW_EVERY_SECONDS,
    };

    /// Checks `0 < renew_every < renew_deadline < lease_duration`.
    pub fn new(
        lease_duration: u64,
        renew_deadline: u64,
        renew_every: u64,
    ) -> Result<Self, TimingsError> {
        if renew_deadline >= lease_duration {
            return Err(TimingsError::DeadlineNotBeforeExpiry {
                renew_deadline,
                lease_duration,
            });
        }
        if renew_every == 0 || renew_every >= renew_deadline {
            return Err(TimingsError::RenewalNotBeforeDeadline {
                renew_every,
                renew_deadline,
            });
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            renew_every,
        })
    }
}

// The defaults keep the invariant (checked when the crate compiles).
const _: () = assert!(
    RENEW_EVERY_SECONDS > 0
        && RENEW_EVERY_SECONDS < RENEW_DEADLINE_SECONDS
        && RENEW_DEADLINE_SECONDS < LEASE_DURATION_SECONDS
);

/// The renew deadline's clock (pure): when the last renewal the API server accepted was
/// sent, and whether the deadline has passed since.
#[derive(Debug, Clone, Copy)]
pub struct RenewClock {
    deadline: Duration,
    lease: Duration,
    last: Instant,
}

impl RenewClock {
    /// A clock whose last renewal was at `acquired` (taking the Lease renews it).
    pub fn new(timings: LeaseTimings, acquired: Instant) -> Self {
        Self {
            deadline: Duration::from_secs(timings.renew_deadline),
            lease: Duration::from_secs(timings.lease_duration),
            last: acquired,
        }
    }

    /// A renewal sent at `at` was accepted (an older one changes nothing).
    pub fn renewed(&mut self, at: Instant) {
        self.last = self.last.max(at);
    }

    /// The last accepted renewal.
    pub fn last(&self) -> Instant {
        self.last
    }

    /// When the leader stops leading unless a renewal is accepted before.
    pub fn deadline(&self) -> Instant {
        self.last + self.deadline
    }

    /// Whether the renew deadline has passed at `now`.
    pub fn passed(&self, now: Instant) -> bool {
        now > self.deadline()
    }

    /// When a standby may take the Lease (its last renewal plus the lease duration), as far as
    /// this replica knows.
    pub fn expiry(&self) -> Instant {
        self.last + self.lease
    }
}

/// The instant of a `renewTime` read from the Lease (wall clock) as this process's monotonic
/// clock knows it: `now` minus its age; a time in the future counts as now.
pub fn renewal_instant(renew_time: SystemTime, wall_now: SystemTime, now: Instant) -> Instant {
    let age = wall_now
        .duration_since(renew_time)
        .unwrap_or(Duration::ZERO);
    now.checked_sub(age).unwrap_or(now)
}

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

/// Why a replica stopped leading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// In words, for the log.
    pub why: String,
    /// Another replica may lead already (the Lease names it, or the election stopped): stop
    /// at once. `false` after the renew deadline: the Lease cannot expire before
    /// [`Leadership::until_expiry`].
    pub now: bool,
}

/// A running election: a background task that acquires and renews the Lease and reports
/// whether this replica leads.
pub struct Leadership {
    config: LeaderConfig,
    timings: LeaseTimings,
    client: Client,
    leading: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, LeaseManagerError>>,
    /// While leading: the renew deadline's watcher and what it says.
    deadline: Option<(watch::Receiver<RenewClock>, JoinHandle<Lost>)>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("config", &self.config)
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Creates the Lease if it does not exist and starts contending for it.
    pub async fn start(
        client: Client,
        config: LeaderConfig,
        timings: LeaseTimings,
    ) -> Result<Self, LeaseManagerError> {
        let params = LeaseParams::new(
            config.identity.clone(),
            timings.lease_duration,
            timings.lease_duration - timings.renew_every,
        );
        let manager = LeaseManager::new(
            client.clone(),
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
            lease_duration_seconds = timings.lease_duration,
            renew_deadline_seconds = timings.renew_deadline,
            renew_every_seconds = timings.renew_every,
            "contending for leadership"
        );
        Ok(Self {
            config,
            timings,
            client,
            leading,
            task,
            deadline: None,
        })
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until this replica leads; `false` if the election stopped first. From then on
    /// the renew deadline is watched.
    pub async fn acquired(&mut self) -> bool {
        match self.leading.wait_for(|leading| *leading).await {
            Ok(_) => {
                info!(identity = %self.config.identity, lease = %self.config.lease_name, "became the leader");
                let clock = RenewClock::new(self.timings, Instant::now());
                let (tx, rx) = watch::channel(clock);
                let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
                let watcher = tokio::spawn(watch_renewals(
                    api,
                    self.config.lease_name.clone(),
                    self.config.identity.clone(),
                    self.timings,
                    tx,
                ));
                self.deadline = Some((rx, watcher));
                true
            }
            Err(_) => {
                warn!("the leader election stopped");
                false
            }
        }
    }

    /// Resolves when this replica no longer leads: kube-lease-manager saw another holder, the
    /// election stopped, or no renewal succeeded within the renew deadline. Answers why.
    pub async fn lost(&mut self) -> Lost {
        let why = {
            let Self {
                leading, deadline, ..
            } = self;
            let leading = leading.wait_for(|leading| !*leading);
            let deadline = async {
                match deadline {
                    Some((_, watcher)) => watcher.await.unwrap_or_else(|e| Lost {
                        why: format!("the renew deadline's watcher failed: {e}"),
                        now: true,
                    }),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = leading => Lost {
                    why: match r {
                        Ok(_) => "another replica holds the Lease".to_string(),
                        Err(_) => "the leader election stopped".to_string(),
                    },
                    now: true,
                },
                lost = deadline => lost,
            }
        };
        warn!(identity = %self.config.identity, lease = %self.config.lease_name, reason = %why.why, "lost the leadership");
        why
    }

    /// How long until a standby may take the Lease, counted from the last renewal this replica
    /// saw accepted (zero when not leading).
    pub fn until_expiry(&self) -> Duration {
        self.deadline.as_ref().map_or(Duration::ZERO, |(clock, _)| {
            clock
                .borrow()
                .expiry()
                .saturating_duration_since(Instant::now())
        })
    }

    /// Stops contending and releases the Lease if held (so a standby takes over at once);
    /// waits at most `timeout`.
    pub async fn release(self, timeout: Duration) {
        let Self {
            config,
            leading,
            task,
            deadline,
            ..
        } = self;
        if let Some((_, watcher)) = deadline {
            watcher.abort();
        }
        // Closing the channel makes the task release the Lease and return.
        drop(leading);
        match tokio::time::timeout(timeout, task).await {
            Ok(Ok(Ok(_))) => info!(identity = %config.identity, "released the lease"),
            Ok(Ok(Err(e))) => warn!(error = %e, "cannot release the lease"),
            Ok(Err(e)) => warn!(error = %e, "the leader election task failed"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }

    /// Stops contending without touching the Lease: what a replica that lost its leadership
    /// does (a write of its could land after a standby took the Lease).
    pub fn abandon(self) {
        if let Some((_, watcher)) = self.deadline {
            watcher.abort();
        }
        self.task.abort();
    }
}

/// Reads the Lease every [`CONFIRM_EVERY`] (each read bounded by the time left) and moves the
/// clock to each accepted renewal of `identity`; answers why it stopped leading: the renew
/// deadline passed, or the Lease names another holder.
async fn watch_renewals(
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
    clock: watch::Sender<RenewClock>,
) -> Lost {
    loop {
        let deadline = clock.borrow().deadline();
        let read = async {
            let lease = api.get(&name).await;
            tokio::time::sleep(CONFIRM_EVERY).await;
            lease
        };
        let lease = tokio::select! {
            lease = read => lease,
            () = tokio::time::sleep_until(deadline.into()) => {
                let clock = *clock.borrow();
                if clock.passed(Instant::now()) {
                    return Lost {
                        why: format!(
                            "no renewal of the Lease succeeded for {} s (the renew deadline; the last one {:.1} s ago): another replica may take it {} s after it",
                            timings.renew_deadline,
                            clock.last().elapsed().as_secs_f64(),
                            timings.lease_duration
                        ),
                        now: false,
                    };
                }
                continue;
            }
        };
        let spec = match lease {
            Ok(lease) => lease.spec.unwrap_or_default(),
            Err(e) => {
                warn!(error = %e, "cannot read the Lease to confirm the renewal");
                continue;
            }
        };
        match (&spec.holder_identity, &spec.renew_time) {
            (Some(holder), Some(renewed)) if *holder == identity => {
                let at = renewal_instant(
                    SystemTime::from(renewed.0),
                    SystemTime::now(),
                    Instant::now(),
                );
                clock.send_modify(|c| c.renewed(at));
            }
            (Some(holder), _) if *holder != identity => {
                return Lost {
                    why: format!("the Lease is held by {holder}"),
                    now: true,
                };
            }
            // Released, or being taken over: kube-lease-manager's watch tells.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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

    #[test]
    fn the_renew_deadline_must_end_before_the_lease_and_after_a_renewal() {
        assert_eq!(LeaseTimings::new(15, 10, 5), Ok(LeaseTimings::DEFAULT));
        assert!(matches!(
            LeaseTimings::new(15, 15, 5),
            Err(TimingsError::DeadlineNotBeforeExpiry { .. })
        ));
        assert!(matches!(
            LeaseTimings::new(15, 20, 5),
            Err(TimingsError::DeadlineNotBeforeExpiry { .. })
        ));
        assert!(matches!(
            LeaseTimings::new(15, 10, 10),
            Err(TimingsError::RenewalNotBeforeDeadline { .. })
        ));
        assert!(matches!(
            LeaseTimings::new(15, 10, 0),
            Err(TimingsError::RenewalNotBeforeDeadline { .. })
        ));
        let e = LeaseTimings::new(15, 15, 5)
            .map(drop)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be shorter than the lease duration"), "{e}");
    }

    #[test]
    fn the_deadline_passes_renew_deadline_after_the_last_accepted_renewal() {
        let t0 = Instant::now();
        let mut clock = RenewClock::new(LeaseTimings::DEFAULT, t0);
        let s = Duration::from_secs;
        assert!(
            !clock.passed(t0 + s(10)),
            "exactly at the deadline: still leading"
        );
        assert!(clock.passed(t0 + s(10) + Duration::from_millis(1)));
        // A renewal at 5 s moves the deadline to 15 s and the expiry to 20 s.
        clock.renewed(t0 + s(5));
        assert!(!clock.passed(t0 + s(12)));
        assert!(clock.passed(t0 + s(15) + Duration::from_millis(1)));
        assert_eq!(clock.expiry(), t0 + s(20));
        // A renewal read late (older than the last one) changes nothing.
        clock.renewed(t0 + s(2));
        assert_eq!(clock.last(), t0 + s(5));
        // The deadline always comes before the expiry a standby waits for.
        assert!(clock.deadline() < clock.expiry());
    }

    #[test]
    fn a_renew_time_is_placed_on_the_monotonic_clock_by_its_age() {
        let now = Instant::now() + Duration::from_secs(100);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let three_s_ago = wall - Duration::from_secs(3);
        assert_eq!(
            renewal_instant(three_s_ago, wall, now),
            now - Duration::from_secs(3)
        );
        // A renewTime ahead of this clock (skew) counts as now, never later.
        assert_eq!(
            renewal_instant(wall + Duration::from_secs(2), wall, now),
            now
        );
    }
}
