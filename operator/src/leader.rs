//! Leader election on a `coordination.k8s.io/v1` Lease
//! (docs/design.md#restarts-shutdown-and-leadership), so that two replicas never run the same stage
//! twice. The leader renews the Lease through `kube-lease-manager`, with a **renew deadline**
//! around it, as client-go's leader election has; a standby decides itself when it may take the
//! Lease, as client-go does.
//!
//! The leader renews the Lease every `renew_every` (5 s by default). A standby reads the Lease
//! every second and takes it once it is free (released by its holder on shutdown), or once its
//! record (holder, `acquireTime`, `renewTime`, `leaseTransitions`, …) has not changed for
//! `lease_duration` (15 s) **of the standby's own monotonic clock**, counted from when the
//! standby saw it change last (a record seen for the first time counts from then):
//! [`LeaseObserver`]. It never compares the holder's `renewTime` with its own wall clock, so
//! node clocks seconds apart cannot make it take the Lease from a leader that still renews
//! (kube-lease-manager judges expiry that way, so it only ever runs once this replica holds the
//! Lease). The take is a replace guarded by the Lease's `resourceVersion`: a renewal or another
//! standby's take in between wins, and the standby goes on watching.
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

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerError, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

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
/// How often a standby reads the Lease to see whether its record changes.
const STANDBY_POLL: Duration = Duration::from_secs(1);

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

/// What a standby saw of the Lease and when, on its own monotonic clock (client-go's
/// `observedRecord` and `observedTime`): the decision to take the Lease (pure).
#[derive(Debug, Clone, Default)]
pub struct LeaseObserver {
    seen: Option<(LeaseSpec, Instant)>,
}

impl LeaseObserver {
    /// Notes the record read at `now`: the observed time moves only when the record differs
    /// from the one seen last (a renewal changes `renewTime`), or on the first read.
    pub fn observe(&mut self, record: &LeaseSpec, now: Instant) {
        if self.seen.as_ref().is_none_or(|(seen, _)| seen != record) {
            self.seen = Some((record.clone(), now));
        }
    }

    /// Whether `identity` may take the Lease at `now`: it has no holder, or names `identity`,
    /// or its record has not changed for longer than the lease duration (the record's
    /// `leaseDurationSeconds` or `lease_duration`, whichever is longer) since this replica saw
    /// it change. The holder's timestamps are never read: they come from another clock.
    pub fn may_take(&self, identity: &str, lease_duration: Duration, now: Instant) -> bool {
        let Some((record, at)) = &self.seen else {
            return false;
        };
        match record.holder_identity.as_deref() {
            None | Some("") => return true,
            Some(holder) if holder == identity => return true,
            Some(_) => {}
        }
        let recorded = record
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(Duration::ZERO, Duration::from_secs);
        now > *at + lease_duration.max(recorded)
    }
}

/// The record with which `identity` takes (or renews) the Lease whose record is `old`, at
/// `wall_now`; a new holder counts a transition, as client-go does.
pub fn taken(
    old: &LeaseSpec,
    identity: &str,
    lease_duration: u64,
    wall_now: Timestamp,
) -> LeaseSpec {
    let ours = old.holder_identity.as_deref() == Some(identity);
    let now = MicroTime(wall_now);
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        acquire_time: if ours {
            old.acquire_time.clone().or_else(|| Some(now.clone()))
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_duration_seconds: Some(i32::try_from(lease_duration).unwrap_or(i32::MAX)),
        lease_transitions: if ours {
            old.lease_transitions
        } else {
            Some(old.lease_transitions.unwrap_or(0).saturating_add(1))
        },
        ..old.clone()
    }
}

/// Stands by until this replica holds the Lease: reads it every [`STANDBY_POLL`] and, once
/// [`LeaseObserver::may_take`] says so, takes it with a replace guarded by its
/// `resourceVersion` (a conflict means someone changed it first: go on watching). Answers
/// when the successful take was sent.
async fn take_when_free(
    api: &Api<Lease>,
    name: &str,
    identity: &str,
    timings: LeaseTimings,
) -> Instant {
    let mut observer = LeaseObserver::default();
    let lease_duration = Duration::from_secs(timings.lease_duration);
    loop {
        match api.get(name).await {
            Ok(mut lease) => {
                let record = lease.spec.clone().unwrap_or_default();
                observer.observe(&record, Instant::now());
                if observer.may_take(identity, lease_duration, Instant::now()) {
                    lease.spec = Some(taken(
                        &record,
                        identity,
                        timings.lease_duration,
                        Timestamp::now(),
                    ));
                    lease.metadata.managed_fields = None;
                    let sent = Instant::now();
                    match api.replace(name, &PostParams::default(), &lease).await {
                        Ok(_) => {
                            info!(identity, previous_holder = ?record.holder_identity, "took the Lease");
                            return sent;
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            debug!("the Lease changed before this replica could take it");
                        }
                        Err(e) => warn!(error = %e, "cannot take the Lease"),
                    }
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.to_string()),
                        ..Default::default()
                    },
                    spec: None,
                };
                if let Err(e) = api.create(&PostParams::default(), &lease).await {
                    debug!(error = %e, "cannot create the Lease");
                }
            }
            Err(e) => warn!(error = %e, "cannot read the Lease"),
        }
        tokio::time::sleep(STANDBY_POLL).await;
    }
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

/// A running election: this replica stands by until it takes the Lease, then a background
/// task renews it and reports whether this replica still leads.
pub struct Leadership {
    config: LeaderConfig,
    timings: LeaseTimings,
    client: Client,
    /// Until this replica leads: the manager that will renew the Lease, not contending yet.
    standby: Option<LeaseManager>,
    /// Once it took the Lease: kube-lease-manager's renewals, and whether it still holds it.
    renewing: Option<Renewing>,
    /// While leading: the renew deadline's watcher and what it says.
    deadline: Option<(watch::Receiver<RenewClock>, JoinHandle<Lost>)>,
}

/// kube-lease-manager's renewal task and whether it holds the Lease.
type Renewing = (
    watch::Receiver<bool>,
    JoinHandle<Result<LeaseManager, LeaseManagerError>>,
);

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("config", &self.config)
            .field("timings", &self.timings)
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Creates the Lease if it does not exist; [`Leadership::acquired`] contends for it.
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
            standby: Some(manager),
            renewing: None,
            deadline: None,
        })
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until this replica leads (it took the Lease, see [`LeaseObserver`], and
    /// kube-lease-manager renews it); `false` if the election stopped first, or if
    /// kube-lease-manager did not see this replica hold the Lease within the renew deadline.
    /// From then on the renew deadline is watched.
    pub async fn acquired(&mut self) -> bool {
        let Some(manager) = self.standby.take() else {
            warn!("the leader election stopped");
            return false;
        };
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let sent = take_when_free(
            &api,
            &self.config.lease_name,
            &self.config.identity,
            self.timings,
        )
        .await;
        let (leading, task) = self.renewing.insert(manager.watch().await);
        let confirmed = tokio::time::timeout_at(
            (sent + Duration::from_secs(self.timings.renew_deadline)).into(),
            leading.wait_for(|leading| *leading),
        )
        .await;
        match confirmed {
            Ok(Ok(_)) => {
                info!(identity = %self.config.identity, lease = %self.config.lease_name, "became the leader");
                let clock = RenewClock::new(self.timings, sent);
                let (tx, rx) = watch::channel(clock);
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
            Ok(Err(_)) => {
                warn!("the leader election stopped");
                false
            }
            Err(_) => {
                warn!(
                    "took the Lease, but kube-lease-manager did not see this replica hold it within the renew deadline: giving up"
                );
                task.abort();
                false
            }
        }
    }

    /// Resolves when this replica no longer leads: kube-lease-manager saw another holder, the
    /// election stopped, or no renewal succeeded within the renew deadline. Answers why.
    pub async fn lost(&mut self) -> Lost {
        let why = {
            let Self {
                renewing, deadline, ..
            } = self;
            let leading = async {
                match renewing {
                    Some((leading, _)) => leading.wait_for(|leading| !*leading).await.map(drop),
                    None => std::future::pending().await,
                }
            };
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
            client,
            renewing,
            deadline,
            ..
        } = self;
        if let Some((_, watcher)) = deadline {
            watcher.abort();
        }
        let Some((leading, task)) = renewing else {
            // A standby: it may have taken the Lease just as it was asked to stop.
            let api: Api<Lease> = Api::namespaced(client, &config.namespace);
            match tokio::time::timeout(timeout, release_if_held(&api, &config)).await {
                Ok(Ok(true)) => info!(identity = %config.identity, "released the lease"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => warn!(error = %e, "cannot release the lease"),
                Err(_) => warn!("releasing the lease timed out"),
            }
            return;
        };
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
        if let Some((_, task)) = self.renewing {
            task.abort();
        }
    }
}

/// Empties the Lease's holder if it names this replica (a replace guarded by its
/// `resourceVersion`); whether it did.
async fn release_if_held(api: &Api<Lease>, config: &LeaderConfig) -> Result<bool, kube::Error> {
    let mut lease = api.get(&config.lease_name).await?;
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(false);
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    spec.lease_duration_seconds = None;
    lease.metadata.managed_fields = None;
    api.replace(&config.lease_name, &PostParams::default(), &lease)
        .await?;
    Ok(true)
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
        let deadline: fn(&TimingsError) -> bool =
            |e| matches!(e, TimingsError::DeadlineNotBeforeExpiry { .. });
        let renewal: fn(&TimingsError) -> bool =
            |e| matches!(e, TimingsError::RenewalNotBeforeDeadline { .. });
        for (renew_deadline, renew_every, refused_for) in [
            (15, 5, deadline),
            (20, 5, deadline),
            (10, 10, renewal),
            (10, 0, renewal),
        ] {
            let e = LeaseTimings::new(15, renew_deadline, renew_every)
                .map(drop)
                .unwrap_err();
            assert!(refused_for(&e), "{renew_deadline}, {renew_every}: {e:?}");
        }
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

    /// The Lease as `holder` wrote it, renewed at `renewed` (the holder's wall clock).
    fn held(holder: &str, renewed: SystemTime, transitions: i32) -> LeaseSpec {
        let at = MicroTime(Timestamp::try_from(renewed).unwrap());
        LeaseSpec {
            holder_identity: Some(holder.to_string()),
            acquire_time: Some(at.clone()),
            renew_time: Some(at),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn a_standby_whose_clock_is_ahead_never_takes_a_lease_that_is_renewed() {
        let s = Duration::from_secs;
        // The standby's wall clock is this process's; the leader's is 30 s behind it, so
        // each renewTime it writes looks 30 s old here (its lease "expired" 15 s ago).
        let leader_wall = SystemTime::now() - s(30);
        let t0 = Instant::now();
        let mut standby = LeaseObserver::default();
        // The leader renews every 5 s for two minutes; the standby reads every second.
        for read in 0..120 {
            let renewed = leader_wall + s(read / 5 * 5);
            let now = t0 + s(read);
            standby.observe(&held("replica-a", renewed, 1), now);
            assert!(
                !standby.may_take("replica-b", LEASE, now),
                "took a renewed Lease at {read} s"
            );
        }
    }

    #[test]
    fn a_standby_takes_the_lease_once_its_record_stopped_changing_for_the_lease_duration() {
        let s = Duration::from_secs;
        // The standby's clock is 30 s behind the leader's this time: by the renewTime, the
        // lease would look valid for another 30 s.
        let leader_wall = SystemTime::now() + s(30);
        let t0 = Instant::now();
        let mut standby = LeaseObserver::default();
        // Renewed every 5 s until 20 s, then never again; read every second.
        for read in 0..=35 {
            let renewed = leader_wall + s(read.min(20) / 5 * 5);
            let now = t0 + s(read);
            standby.observe(&held("replica-a", renewed, 1), now);
            assert!(
                !standby.may_take("replica-b", LEASE, now),
                "took the Lease at {read} s, its last change seen at 20 s"
            );
        }
        let ms = Duration::from_millis;
        assert!(!standby.may_take("replica-b", LEASE, t0 + s(35)));
        assert!(standby.may_take("replica-b", LEASE, t0 + s(35) + ms(1)));
        // Any change of the record counts, not only renewTime: a new holder (a transition).
        standby.observe(&held("replica-c", leader_wall + s(20), 2), t0 + s(36));
        assert!(!standby.may_take("replica-b", LEASE, t0 + s(50)));
        assert!(standby.may_take("replica-b", LEASE, t0 + s(52)));
    }

    #[test]
    fn a_record_seen_for_the_first_time_counts_from_when_it_was_seen() {
        let s = Duration::from_secs;
        // Renewed an hour ago by the holder's clock: a standby that just started still waits
        // a whole lease duration of its own.
        let stale = held("replica-a", SystemTime::now() - s(3600), 7);
        let t0 = Instant::now();
        let mut standby = LeaseObserver::default();
        assert!(
            !standby.may_take("replica-b", LEASE, t0),
            "nothing seen yet"
        );
        standby.observe(&stale, t0);
        assert!(!standby.may_take("replica-b", LEASE, t0 + s(15)));
        standby.observe(&stale, t0 + s(10));
        assert!(standby.may_take("replica-b", LEASE, t0 + s(16)));
    }

    #[test]
    fn a_free_or_own_lease_is_taken_at_once_and_a_longer_recorded_duration_is_waited_out() {
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut standby = LeaseObserver::default();
        standby.observe(&LeaseSpec::default(), t0);
        assert!(standby.may_take("replica-b", LEASE, t0), "released");
        standby.observe(&held("replica-b", SystemTime::now(), 1), t0);
        assert!(standby.may_take("replica-b", LEASE, t0), "its own");
        let mut long = held("replica-a", SystemTime::now(), 1);
        long.lease_duration_seconds = Some(60);
        standby.observe(&long, t0);
        assert!(!standby.may_take("replica-b", LEASE, t0 + s(59)));
        assert!(standby.may_take("replica-b", LEASE, t0 + s(61)));
    }

    #[test]
    fn taking_a_lease_names_the_new_holder_and_counts_a_transition() {
        let then = Timestamp::from_second(1_000).unwrap();
        let now = Timestamp::from_second(2_000).unwrap();
        let mut old = held("replica-a", SystemTime::from(then), 3);
        old.preferred_holder = Some("replica-a".into());
        let new = taken(&old, "replica-b", 15, now);
        assert_eq!(new.holder_identity.as_deref(), Some("replica-b"));
        assert_eq!(new.acquire_time, Some(MicroTime(now)));
        assert_eq!(new.renew_time, Some(MicroTime(now)));
        assert_eq!(new.lease_duration_seconds, Some(15));
        assert_eq!(new.lease_transitions, Some(4));
        assert_eq!(new.preferred_holder.as_deref(), Some("replica-a"));
        // Its own Lease (a restart under the same identity): a renewal.
        let again = taken(
            &new,
            "replica-b",
            15,
            Timestamp::from_second(2_005).unwrap(),
        );
        assert_eq!(again.acquire_time, Some(MicroTime(now)));
        assert_eq!(again.lease_transitions, Some(4));
        // A released Lease (no holder) counts a transition too.
        assert_eq!(
            taken(&LeaseSpec::default(), "replica-b", 15, now).lease_transitions,
            Some(1)
        );
    }
}
