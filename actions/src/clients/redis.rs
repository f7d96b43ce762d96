//! A Redis connection for deleting keys by pattern: connected and authenticated (ACL user or
//! the legacy password), optionally over TLS, a probe of the right to UNLINK under the pattern,
//! and sweeps of the keyspace (SCAN in parallel lanes, UNLINK in batches) that count what the
//! server did. Messages name the server, the database and the user, never the password.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::{
    Builder, Client, ClientLike, Config as FredConfig, ConnectionConfig, Error as FredError,
    ErrorKind as FredErrorKind, Key, KeysInterface, PerformanceConfig, ServerConfig, TcpConfig,
    TlsConfig, TlsConnector, Value,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::action::{ActionError, Progress, SecretValue, StopSignal, Warnings};
use crate::clients::tls;

/// The Redis server, as the Intercom Service's `cache.intercomService` block configures it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Redis {
    /// Host name.
    #[serde(default = "Redis::default_host")]
    #[schemars(length(min = 1))]
    pub host: String,
    /// Port.
    #[serde(default = "Redis::default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// ACL user name; the password is the `redis-password` secret file.
    #[serde(default = "Redis::default_username")]
    pub username: String,
    /// Connect with TLS (the certificate is verified).
    #[serde(default)]
    pub tls: bool,
    /// CA certificates to trust for TLS besides the public web roots and the system's store: a
    /// PEM file path (openDesk's `/etc/opendesk/trust/ca-certificates.crt`), or the PEM text
    /// itself (a value starting with `-----BEGIN`). Stagehand's addition: the reference has
    /// no such key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// With `tls`, do not verify the server's certificate: the run records a warning (log,
    /// Event, `Warning:` line of the action's summary). Stagehand's addition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    /// The database number.
    #[serde(default)]
    pub database: u32,
    /// The keys to delete, as a Redis glob; it must start with a literal part.
    #[serde(default = "Redis::default_key_pattern")]
    #[schemars(length(min = 1))]
    pub key_pattern: String,
    /// Timeout of one request.
    #[serde(default = "Redis::default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

impl Redis {
    fn default_host() -> String {
        "redis-headless".into()
    }
    fn default_port() -> u16 {
        6379
    }
    fn default_username() -> String {
        "default".into()
    }
    fn default_key_pattern() -> String {
        "sess:*".into()
    }
    fn default_timeout() -> u64 {
        30
    }
}

impl Default for Redis {
    fn default() -> Self {
        Self {
            host: Self::default_host(),
            port: Self::default_port(),
            username: Self::default_username(),
            tls: false,
            ca_bundle: None,
            insecure_skip_tls_verify: false,
            database: 0,
            key_pattern: Self::default_key_pattern(),
            request_timeout_seconds: Self::default_timeout(),
        }
    }
}

/// The secret file holding the Redis password.
pub const PASSWORD_FILE: &str = "redis-password";

/// Keys asked for per SCAN call. Redis 7.0 spends 0.7 to 1 µs per key visited, so a call
/// keeps the server busy for about a millisecond.
const SCAN_COUNT: u32 = 1000;

/// Keys per UNLINK.
const UNLINK_BATCH: usize = 500;

/// UNLINK batches per lane sent but not yet answered while the walk goes on.
const UNLINKS_IN_FLIGHT: usize = 2;

/// Parts of the cursor space walked at once (a power of two), so that the server has the next
/// SCAN call queued while the answer to the last one travels.
const LANES: u64 = 4;

// ---------------------------------------------------------------------------------------------
// Redis glob matching (the server's `stringmatchlen`), for the permission probe
// ---------------------------------------------------------------------------------------------

/// Whether `key` matches the Redis glob `pattern`, as the server decides it (case-sensitive
/// `stringmatchlen` of Redis 7: `*`, `?`, `[...]` with `^` and ranges, `\` escapes).
pub fn glob_matches(pattern: &[u8], key: &[u8]) -> bool {
    let mut skip_longer = false;
    glob_impl(pattern, key, &mut skip_longer)
}

fn glob_impl(p: &[u8], s: &[u8], skip_longer: &mut bool) -> bool {
    // Indices into the pattern and the string; `pl`/`sl` are the lengths left, as in the C.
    let (mut pi, mut si) = (0usize, 0usize);
    while pi < p.len() && si < s.len() {
        match p[pi] {
            b'*' => {
                while pi + 1 < p.len() && p[pi + 1] == b'*' {
                    pi += 1;
                }
                if pi + 1 == p.len() {
                    return true;
                }
                while si < s.len() {
                    if glob_impl(&p[pi + 1..], &s[si..], skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    si += 1;
                }
                *skip_longer = true;
                return false;
            }
            b'?' => {
                si += 1;
                pi += 1;
            }
            b'[' => {
                pi += 1;
                let not = p.get(pi) == Some(&b'^');
                if not {
                    pi += 1;
                }
                let mut matched = false;
                let c = s[si];
                let mut terminated = true;
                loop {
                    if pi >= p.len() {
                        terminated = false;
                        break;
                    }
                    if p[pi] == b'\\' && p.len() - pi >= 2 {
                        pi += 1;
                        if p[pi] == c {
                            matched = true;
                        }
                    } else if p[pi] == b']' {
                        break;
                    } else if p.len() - pi >= 3 && p[pi + 1] == b'-' {
                        // The server compares C `char`s, which are signed on its platforms.
                        let (mut start, mut end) = (p[pi] as i8, p[pi + 2] as i8);
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        let signed = c as i8;
                        pi += 2;
                        if signed >= start && signed <= end {
                            matched = true;
                        }
                    } else if p[pi] == c {
                        matched = true;
                    }
                    pi += 1;
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                si += 1;
                if terminated {
                    pi += 1; // the closing `]`
                }
            }
            b'\\' if p.len() - pi >= 2 => {
                if p[pi + 1] != s[si] {
                    return false;
                }
                pi += 2;
                si += 1;
            }
            literal => {
                if literal != s[si] {
                    return false;
                }
                pi += 1;
                si += 1;
            }
        }
        if si == s.len() {
            while pi < p.len() && p[pi] == b'*' {
                pi += 1;
            }
            break;
        }
    }
    pi == p.len() && si == s.len()
}

/// A key that matches `pattern`, with `token` where its first `*` is, so that it cannot be
/// a real key. `None` when the pattern has no `*` (every key it matches could exist) or when
/// no such key can be built (an empty or unterminated character class).
pub fn probe_key(pattern: &str, token: &str) -> Option<Vec<u8>> {
    const CANDIDATES: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_:.";
    let p = pattern.as_bytes();
    let mut out = Vec::with_capacity(p.len() + token.len());
    let mut star = false;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'*' => {
                if !star {
                    out.extend_from_slice(token.as_bytes());
                    star = true;
                }
                i += 1;
            }
            b'?' => {
                out.push(b'x');
                i += 1;
            }
            b'[' => {
                let mut j = i + 1;
                if p.get(j) == Some(&b'^') {
                    j += 1;
                }
                loop {
                    match p.get(j) {
                        None => return None,
                        Some(b'\\') if j + 1 < p.len() => j += 2,
                        Some(b']') => break,
                        Some(_) => j += 1,
                    }
                }
                let class = &p[i..=j];
                let pick = CANDIDATES
                    .iter()
                    .copied()
                    .chain(0x20u8..=0x7e)
                    .find(|&c| glob_matches(class, &[c]))?;
                out.push(pick);
                i = j + 1;
            }
            b'\\' if i + 1 < p.len() => {
                out.push(p[i + 1]);
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    (star && glob_matches(p, &out)).then_some(out)
}

/// A token no real key carries: 128 random bits (std's per-process random hasher keys).
fn probe_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let a = RandomState::new().hash_one(nanos);
    let b = RandomState::new().hash_one((std::process::id(), nanos));
    format!("stagehand-probe-{a:016x}{b:016x}")
}

// ---------------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------------

/// rustls (ring) with the trust anchors of [`tls::root_store`] (the public web roots, the
/// system's store, `redis.caBundle` read now); the server name (host name or IP address) is
/// verified, unless `redis.insecureSkipTlsVerify`, which is recorded in `warnings`. The error
/// names `target` and what in the settings cannot be used.
fn tls_config(target: &str, redis: &Redis, warnings: &Warnings) -> Result<TlsConfig, ActionError> {
    let verify = if redis.insecure_skip_tls_verify {
        tls::Verify::Nothing
    } else {
        tls::Verify::Full
    };
    let config = tls::client_config("redis", redis.ca_bundle.as_deref(), verify)
        .map_err(|e| ActionError::from(e).map_message(|m| format!("{target}: {m}")))?;
    if redis.insecure_skip_tls_verify {
        warnings.warn(tls::insecure_warning(
            "redis.insecureSkipTlsVerify",
            &format!("Redis {}:{}", redis.host, redis.port),
        ));
    }
    Ok(TlsConnector::from(config).into())
}

// ---------------------------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------------------------

/// A connected, authenticated client and how to name the server in messages.
pub struct Session {
    client: Client,
    /// `host:port database N as user U`.
    pub target: String,
    /// The password, to scrub from any message (a server or library could echo it).
    password: SecretValue,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Connects and authenticates (fails on a wrong credential, naming server and user).
    /// With `redis.insecureSkipTlsVerify` the warning is recorded in `warnings`.
    pub async fn open(
        redis: &Redis,
        password: SecretValue,
        warnings: &Warnings,
    ) -> Result<Self, ActionError> {
        let target = describe(redis);
        let database = u8::try_from(redis.database).map_err(|_| {
            ActionError::Config(format!(
                "redis.database {} is out of range (0 to 255)",
                redis.database
            ))
        })?;
        let tls = if redis.tls {
            Some(tls_config(&target, redis, warnings)?)
        } else {
            None
        };
        let timeout = Duration::from_secs(redis.request_timeout_seconds.max(1));
        let config = FredConfig {
            server: ServerConfig::new_centralized(redis.host.clone(), redis.port),
            // An empty user name means the legacy AUTH with the password alone.
            username: (!redis.username.is_empty()).then(|| redis.username.clone()),
            password: (!password.expose().is_empty()).then(|| password.expose().to_string()),
            // A new connection starts in database 0; SELECT only for another one (so that an
            // ACL user for database 0 does not need +select).
            database: (database != 0).then_some(database),
            tls,
            fail_fast: true,
            ..FredConfig::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: timeout,
            internal_command_timeout: timeout,
            max_command_attempts: 1,
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        };
        let performance = PerformanceConfig {
            default_command_timeout: timeout,
            ..PerformanceConfig::default()
        };
        let session_err = |e: FredError| connect_error(&target, redis, &e, &password);
        let client = Builder::from_config(config)
            .set_connection_config(connection)
            .set_performance_config(performance)
            .build()
            .map_err(session_err)?;
        client.init().await.map_err(session_err)?;
        Ok(Self {
            client,
            target,
            password,
        })
    }

    /// Connects, authenticates and proves the right to UNLINK
    /// keys of the pattern (`Session::probe_unlink`): what planning, apply and preflight
    /// start with. Answers whether the right was proven (see `probe_unlink`); on an error the
    /// connection is closed.
    pub async fn open_proven(
        redis: &Redis,
        password: SecretValue,
        warnings: &Warnings,
    ) -> Result<(Self, bool), ActionError> {
        let session = Self::open(redis, password, warnings).await?;
        match session.probe_unlink(redis).await {
            Ok(probed) => Ok((session, probed)),
            Err(e) => {
                session.close().await;
                Err(e)
            }
        }
    }

    /// An error of a request, scrubbed of the password: a refused credential or command
    /// (`NOPERM`, `NOAUTH`, `WRONGPASS`) is [`ActionError::Refused`], a connection lost or a
    /// timeout [`ActionError::Unavailable`], a reply that is not what the command answers
    /// [`ActionError::InvalidAnswer`], anything else [`ActionError::Failed`].
    pub fn failed(&self, doing: &str, e: &FredError) -> ActionError {
        let message = redact(&format!("{}: {doing}: {e}", self.target), &self.password);
        let text = e.to_string();
        if matches!(e.kind(), FredErrorKind::Auth)
            || ["NOPERM", "NOAUTH", "WRONGPASS"]
                .iter()
                .any(|code| text.contains(code))
        {
            ActionError::Refused(message)
        } else if matches!(
            e.kind(),
            FredErrorKind::IO | FredErrorKind::Timeout | FredErrorKind::Canceled
        ) {
            ActionError::Unavailable(message)
        } else if matches!(e.kind(), FredErrorKind::Protocol | FredErrorKind::Parse) {
            ActionError::InvalidAnswer(message)
        } else {
            ActionError::Failed(message)
        }
    }

    /// Proves the right to UNLINK keys of the pattern: UNLINK of a key that matches the
    /// pattern and cannot exist. `false` when the pattern has no `*` (no such key can be
    /// built; the first real UNLINK proves it then, before anything is deleted).
    async fn probe_unlink(&self, redis: &Redis) -> Result<bool, ActionError> {
        let Some(key) = probe_key(&redis.key_pattern, &probe_token()) else {
            return Ok(false);
        };
        match self
            .client
            .unlink::<i64, _>(Key::from(key.as_slice()))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => {
                let text = e.to_string();
                let error = if text.contains("NOPERM") {
                    ActionError::Refused(format!(
                        "{}: may not delete keys matching {:?} (UNLINK of a key of the pattern that does not exist was refused: {text}); grant the user the ACL rules +unlink and ~{}",
                        self.target, redis.key_pattern, redis.key_pattern
                    ))
                } else if text.contains("READONLY") {
                    ActionError::Refused(format!(
                        "{}: the server is a read-only replica ({text}); point redis.host at the primary",
                        self.target
                    ))
                } else {
                    self.failed("", &e).map_message(|_| {
                        format!(
                            "{}: proving the right to delete keys matching {:?} with UNLINK of a key that does not exist failed: {text}",
                            self.target, redis.key_pattern
                        )
                    })
                };
                Err(error.map_message(|message| redact(&message, &self.password)))
            }
        }
    }

    /// One SCAN call: the next cursor and the keys of this page.
    pub async fn scan_page(
        &self,
        cursor: u64,
        pattern: &str,
    ) -> Result<(u64, Vec<Key>), FredError> {
        let reply: Value = self
            .client
            .scan_page(
                cursor.to_string(),
                pattern.to_string(),
                Some(SCAN_COUNT),
                None,
            )
            .await?;
        parse_scan_reply(reply)
    }

    /// Walks the whole database with SCAN. Counting ([`Delete::Nothing`]) walks one cursor at
    /// a time. Deleting walks `LANES` parts of the cursor space at once (so that the server
    /// always has the next call queued) and UNLINKs what it selects in batches sent while the
    /// walk goes on. The last call of a part may run into the next part, so a key can be
    /// returned twice; every count but `deleted` (UNLINK's own count, exact) is of distinct
    /// keys, by their digests.
    ///
    /// SCAN's guarantee: a key present from the start to the end of a full walk is returned by
    /// it. So after a [`Delete::All`] walk, every key that matched when it started and was not
    /// deleted by somebody else was returned, and its digest is in [`Sweep::seen`]; a later
    /// walk that finds a key whose digest is not there finds a key created after the first
    /// walk started ([`Delete::Only`] keeps those).
    ///
    /// Once `signal` asks to stop, each part stops before its next SCAN call (the safe point:
    /// the UNLINKs sent are awaited and counted) and the sweep answers
    /// [`ActionError::Stopped`] with what was deleted.
    ///
    /// Every UNLINK's count is added to `progress` as it is answered.
    pub async fn sweep(
        &self,
        pattern: &str,
        delete: Delete<'_>,
        signal: &StopSignal,
        progress: &Progress,
    ) -> Result<Sweep, SweepError> {
        let stop = AtomicBool::new(false);
        let lanes = if matches!(delete, Delete::Nothing) {
            1
        } else {
            LANES
        };
        let digests = match delete {
            Delete::Only(earlier) => earlier.empty_like(),
            Delete::Nothing | Delete::All => KeyDigests::new(),
        };
        let results = futures::future::join_all((0..lanes).map(|lane| {
            self.sweep_lane(
                pattern,
                delete,
                Lane {
                    lane,
                    lanes,
                    seen: digests.empty_like(),
                    kept: digests.empty_like(),
                },
                &stop,
                signal,
                progress,
            )
        }))
        .await;
        let mut total = Sweep {
            found: 0,
            deleted: 0,
            seen: digests.empty_like(),
            kept: 0,
        };
        let mut kept = digests.empty_like();
        let mut error = None;
        for result in results {
            match result {
                Ok(lane) => {
                    total.found += lane.found;
                    total.deleted += lane.deleted;
                    total.seen.extend(lane.seen);
                    kept.extend(lane.kept);
                }
                Err(e) => {
                    total.deleted += e.deleted;
                    error.get_or_insert(e.error);
                }
            }
        }
        if !matches!(delete, Delete::Nothing) {
            // Distinct keys: a part's last call may have returned keys of the next part.
            total.found = (total.seen.len() + kept.len()) as u64;
        }
        total.kept = kept.len() as u64;
        match error {
            Some(error) => Err(SweepError {
                error,
                deleted: total.deleted,
            }),
            None => Ok(total),
        }
    }

    /// One part of the cursor space: from its first cursor until SCAN returns a cursor of the
    /// next part (or 0, the end).
    async fn sweep_lane(
        &self,
        pattern: &str,
        delete: Delete<'_>,
        mut part: Lane,
        stop: &AtomicBool,
        signal: &StopSignal,
        progress: &Progress,
    ) -> Result<LaneSweep, SweepError> {
        let (lane, lanes) = (part.lane, part.lanes);
        let mut found = 0u64;
        let mut deleted = 0u64;
        let mut batch: Vec<Key> = Vec::with_capacity(UNLINK_BATCH);
        let mut unlinks: JoinSet<Result<i64, FredError>> = JoinSet::new();
        let mut cursor = lane_start(lane, lanes);
        loop {
            if stop.load(Ordering::Relaxed) {
                deleted += drain(&mut unlinks).await;
                return Ok(part.done(found, deleted));
            }
            if let Err(error) = signal.check() {
                // The keys of `batch` were found but not sent: the next sweep finds them again.
                deleted += drain(&mut unlinks).await;
                return Err(SweepError { error, deleted });
            }
            let (next, keys) = match self.scan_page(cursor, pattern).await {
                Ok(page) => page,
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    deleted += drain(&mut unlinks).await;
                    return Err(SweepError {
                        error: self.failed("SCAN", &e),
                        deleted,
                    });
                }
            };
            found += keys.len() as u64;
            match delete {
                Delete::Nothing => {}
                Delete::All => {
                    for key in &keys {
                        part.seen.insert(key.as_bytes());
                    }
                    batch.extend(keys);
                }
                Delete::Only(earlier) => {
                    for key in keys {
                        if earlier.contains(key.as_bytes()) {
                            part.seen.insert(key.as_bytes());
                            batch.push(key);
                        } else {
                            part.kept.insert(key.as_bytes());
                        }
                    }
                }
            }
            while batch.len() >= UNLINK_BATCH {
                let rest = batch.split_off(UNLINK_BATCH);
                let full = std::mem::replace(&mut batch, rest);
                self.spawn_unlink(&mut unlinks, full);
            }
            while unlinks.len() > UNLINKS_IN_FLIGHT {
                if let Some(done) = unlinks.join_next().await {
                    deleted += self
                        .unlinked(done, &mut unlinks, deleted, stop, progress)
                        .await?;
                }
            }
            while let Some(done) = unlinks.try_join_next() {
                deleted += self
                    .unlinked(done, &mut unlinks, deleted, stop, progress)
                    .await?;
            }
            if lane_done(lane, lanes, next) {
                break;
            }
            cursor = next;
        }
        if !batch.is_empty() {
            self.spawn_unlink(&mut unlinks, batch);
        }
        while let Some(done) = unlinks.join_next().await {
            deleted += self
                .unlinked(done, &mut unlinks, deleted, stop, progress)
                .await?;
        }
        Ok(part.done(found, deleted))
    }

    fn spawn_unlink(&self, unlinks: &mut JoinSet<Result<i64, FredError>>, keys: Vec<Key>) {
        let client = self.client.clone();
        unlinks.spawn(async move { client.unlink::<i64, _>(keys).await });
    }

    /// The count of one finished UNLINK, or the error (after waiting for the others, so that
    /// the error can say how many keys went).
    async fn unlinked(
        &self,
        done: Result<Result<i64, FredError>, tokio::task::JoinError>,
        unlinks: &mut JoinSet<Result<i64, FredError>>,
        deleted_so_far: u64,
        stop: &AtomicBool,
        progress: &Progress,
    ) -> Result<u64, SweepError> {
        let error = match done {
            Ok(Ok(n)) => {
                let n = u64::try_from(n).unwrap_or(0);
                progress.add(n);
                return Ok(n);
            }
            Ok(Err(e)) => self.failed("UNLINK", &e),
            Err(e) => ActionError::Failed(format!("{}: UNLINK task failed: {e}", self.target)),
        };
        stop.store(true, Ordering::Relaxed);
        let more = drain(unlinks).await;
        Err(SweepError {
            error,
            deleted: deleted_so_far + more,
        })
    }

    pub async fn close(self) {
        let _ = self.client.quit().await;
    }
}

/// Waits for the UNLINKs still in flight; the keys they deleted.
async fn drain(unlinks: &mut JoinSet<Result<i64, FredError>>) -> u64 {
    let mut n = 0u64;
    while let Some(done) = unlinks.join_next().await {
        if let Ok(Ok(k)) = done {
            n += u64::try_from(k).unwrap_or(0);
        }
    }
    n
}

/// What a walk deletes of the keys it finds.
#[derive(Debug, Clone, Copy)]
pub enum Delete<'a> {
    /// Nothing: the walk counts, one cursor at a time.
    Nothing,
    /// Every key it finds; their digests are remembered ([`Sweep::seen`]).
    All,
    /// The keys an earlier [`Delete::All`] walk deleted (by digest) that are there again;
    /// the others were created after that walk started and are kept ([`Sweep::kept`]).
    Only(&'a KeyDigests),
}

/// What one walk over the database found and deleted.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// Keys the walk found matching the pattern (distinct keys, except when counting).
    pub found: u64,
    /// Keys it deleted (what the server answered to UNLINK).
    pub deleted: u64,
    /// The digests of the keys it sent to UNLINK.
    pub seen: KeyDigests,
    /// Keys it found and kept ([`Delete::Only`]): distinct keys created after the earlier
    /// walk started.
    pub kept: u64,
}

/// The 64-bit digests of a set of key names: 8 bytes a key, whatever its length (a million
/// sessions cost about 16 MiB). The digest is keyed per process; two names sharing a digest
/// (odds about n²/2⁶⁵: 3·10⁻⁸ for a million keys) make a later [`Delete::Only`] walk delete
/// a new key it should have kept, never keep an old one.
#[derive(Debug, Clone)]
pub struct KeyDigests {
    hasher: RandomState,
    digests: std::collections::HashSet<u64>,
}

impl KeyDigests {
    fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            digests: std::collections::HashSet::new(),
        }
    }

    /// An empty set with the same digest (so that its digests compare with this one's).
    fn empty_like(&self) -> Self {
        Self {
            hasher: self.hasher.clone(),
            digests: std::collections::HashSet::new(),
        }
    }

    fn insert(&mut self, key: &[u8]) {
        self.digests.insert(self.hasher.hash_one(key));
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.digests.contains(&self.hasher.hash_one(key))
    }

    fn extend(&mut self, other: Self) {
        self.digests.extend(other.digests);
    }

    /// How many distinct keys.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// One part of the cursor space and what its walk remembers.
struct Lane {
    lane: u64,
    lanes: u64,
    seen: KeyDigests,
    kept: KeyDigests,
}

impl Lane {
    fn done(self, found: u64, deleted: u64) -> LaneSweep {
        LaneSweep {
            found,
            deleted,
            seen: self.seen,
            kept: self.kept,
        }
    }
}

/// What the walk of one part found.
struct LaneSweep {
    found: u64,
    deleted: u64,
    seen: KeyDigests,
    kept: KeyDigests,
}

/// A walk that failed, with the keys it had deleted by then.
#[derive(Debug)]
pub struct SweepError {
    /// Why the walk stopped.
    pub error: ActionError,
    /// Keys deleted before it stopped.
    pub deleted: u64,
}

/// The first cursor of `lane` of `lanes` (a power of two): SCAN walks the cursor space in
/// bit-reversed order, so the parts are ranges of the reversed cursor.
fn lane_start(lane: u64, lanes: u64) -> u64 {
    let bits = lanes.trailing_zeros();
    lane.checked_shl(64 - bits).unwrap_or(0).reverse_bits()
}

/// Whether `cursor` (returned by SCAN in `lane`) is past the lane: the end of the walk (0) or
/// a cursor of another part.
fn lane_done(lane: u64, lanes: u64, cursor: u64) -> bool {
    let bits = lanes.trailing_zeros();
    cursor == 0 || cursor.reverse_bits().checked_shr(64 - bits).unwrap_or(0) != lane
}

fn parse_scan_reply(reply: Value) -> Result<(u64, Vec<Key>), FredError> {
    let bad = |what: &str| {
        FredError::new(
            FredErrorKind::Protocol,
            format!("unexpected SCAN reply: {what}"),
        )
    };
    let Value::Array(mut parts) = reply else {
        return Err(bad("not an array"));
    };
    if parts.len() != 2 {
        return Err(bad("not [cursor, keys]"));
    }
    let keys = parts.pop();
    let cursor = match parts.pop() {
        Some(Value::String(s)) => s.parse::<u64>().ok(),
        Some(Value::Bytes(b)) => std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok()),
        Some(Value::Integer(i)) => u64::try_from(i).ok(),
        _ => None,
    };
    let Some(cursor) = cursor else {
        return Err(bad("the cursor is not a number"));
    };
    let keys = match keys {
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|k| match k {
                Value::String(s) => Ok(Key::from(s)),
                Value::Bytes(b) => Ok(Key::from(b)),
                _ => Err(bad("a key is not a string")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(bad("keys are not an array")),
    };
    Ok((cursor, keys))
}

/// `host:port database N as user U (TLS)`.
fn describe(redis: &Redis) -> String {
    format!(
        "Redis {}:{} database {} as user {:?}{}",
        redis.host,
        redis.port,
        redis.database,
        redis.username,
        if redis.tls { " over TLS" } else { "" }
    )
}

/// The connection error, with what to check.
fn connect_error(
    target: &str,
    redis: &Redis,
    e: &FredError,
    password: &SecretValue,
) -> ActionError {
    let text = e.to_string();
    let refused = text.contains("WRONGPASS")
        || text.contains("invalid password")
        || matches!(e.kind(), FredErrorKind::Auth);
    let hint = if refused {
        format!(
            "the server refused the credential: check user {:?} and the password in the secret file {PASSWORD_FILE:?}",
            redis.username
        )
    } else if let Some(hint) = tls::certificate_hint("redis", &text) {
        format!("the TLS handshake failed: {hint}")
    } else if matches!(e.kind(), FredErrorKind::Tls)
        || ["certificate", "tls", "handshake"]
            .iter()
            .any(|w| text.to_lowercase().contains(w))
    {
        "the TLS handshake failed: the server's certificate must be valid for the host name and issued by a CA in the public web roots, the system's store or redis.caBundle".to_string()
    } else if matches!(e.kind(), FredErrorKind::Timeout) {
        format!(
            "no answer within {}s (requestTimeoutSeconds)",
            redis.request_timeout_seconds
        )
    } else {
        "check host, port and that the server is reachable from the operator".to_string()
    };
    let message = redact(
        &format!("{target}: cannot connect: {text}; {hint}"),
        password,
    );
    if refused {
        ActionError::Refused(message)
    } else {
        ActionError::Unavailable(message)
    }
}

/// `message` with every occurrence of the secret replaced.
fn redact(message: &str, secret: &SecretValue) -> String {
    let value = secret.expose();
    if value.is_empty() {
        message.to_string()
    } else {
        message.replace(value, "<redacted>")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn at(port: u16) -> Redis {
        Redis {
            host: "127.0.0.1".into(),
            port,
            username: String::new(),
            request_timeout_seconds: 5,
            ..Redis::default()
        }
    }

    #[tokio::test]
    async fn a_server_nobody_runs_is_unavailable_a_wrong_password_refused() {
        let down = Session::open(
            &at(free_port()),
            SecretValue::new("pw"),
            &Warnings::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(down, ActionError::Unavailable(_)), "{down:?}");
        assert!(down.to_string().contains("cannot connect"), "{down}");

        let port = free_port();
        let mut server = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                "right-pw",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs");
        let mut refused = None;
        for _ in 0..50 {
            match Session::open(
                &at(port),
                SecretValue::new("wrong-pw"),
                &Warnings::default(),
            )
            .await
            {
                Err(ActionError::Unavailable(_)) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => {
                    refused = Some(other);
                    break;
                }
            }
        }
        let _ = server.kill();
        let _ = server.wait();
        let refused = refused.expect("the server answered").unwrap_err();
        assert!(matches!(refused, ActionError::Refused(_)), "{refused:?}");
        let text = refused.to_string();
        assert!(text.contains("refused the credential"), "{text}");
        assert!(!text.contains("wrong-pw"), "{text}");
    }
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        glob_matches(p.as_bytes(), s.as_bytes())
    }

    #[test]
    fn glob_matching_follows_the_server() {
        assert!(m("sess:*", "sess:abc"));
        assert!(m("sess:*", "sess:"));
        assert!(!m("sess:*", "sess"));
        assert!(!m("sess:*", "xsess:1"));
        assert!(!m("sess:*", "Sess:1"));
        assert!(m("s?ss:*", "sXss:1"));
        assert!(!m("s?ss:*", "ss:1"));
        assert!(m("a[bc]*", "ab"));
        assert!(m("a[bc]*", "acd"));
        assert!(!m("a[bc]*", "ad"));
        assert!(m("a[^bc]x", "adx"));
        assert!(!m("a[^bc]x", "abx"));
        assert!(m("a[a-c]x", "abx"));
        assert!(m("a[c-a]x", "abx"));
        assert!(!m("a[a-c]x", "adx"));
        assert!(m("\\*literal*", "*literal-1"));
        assert!(!m("\\*literal*", "xliteral-1"));
        assert!(m("a[\\]]b", "a]b"));
        assert!(m("*:*:x", "a:b:x"));
        assert!(!m("*:*:x", "a:b:y"));
        assert!(m("sess:**", "sess:1"));
        assert!(m("sess:", "sess:"));
        assert!(!m("sess:", "sess:1"));
        // An unterminated class is read to the end of the pattern, as the server does.
        assert!(m("a[bc", "ab"));
        assert!(!m("a[bc", "ad"));
    }

    #[test]
    fn probe_keys_match_their_pattern_and_carry_the_token() {
        for pattern in [
            "sess:*",
            "s?ss:*",
            "a[bc]*",
            "\\*literal*",
            "sess:*:data",
            "x[^a-z]*",
            "p[\\]]*",
        ] {
            let key = probe_key(pattern, "TOKEN").unwrap_or_else(|| panic!("{pattern}"));
            assert!(glob_matches(pattern.as_bytes(), &key), "{pattern}");
            assert!(String::from_utf8_lossy(&key).contains("TOKEN"), "{pattern}");
        }
        assert_eq!(probe_key("sess:*", "T").as_deref(), Some(&b"sess:T"[..]));
        // Without a `*` every key the pattern matches could be a real one.
        assert_eq!(probe_key("sess:", "T"), None);
        assert_eq!(probe_key("sess:???", "T"), None);
        // A class nothing can match.
        assert_eq!(probe_key("a[]*", "T"), None);
    }

    #[test]
    fn lanes_split_the_reversed_cursor_space() {
        // One lane: the whole walk, from 0 back to 0.
        assert_eq!(lane_start(0, 1), 0);
        assert!(!lane_done(0, 1, 12345));
        assert!(lane_done(0, 1, 0));
        // Two lanes: even cursors (reversed top bit 0), then odd ones.
        assert_eq!((lane_start(0, 2), lane_start(1, 2)), (0, 1));
        assert!(!lane_done(0, 2, 2048));
        assert!(lane_done(0, 2, 2049));
        assert!(!lane_done(1, 2, 2049));
        assert!(lane_done(1, 2, 0));
        // Four lanes: the two lowest cursor bits, reversed, number the lane.
        let starts: Vec<u64> = (0..4).map(|l| lane_start(l, 4)).collect();
        assert_eq!(starts, vec![0, 2, 1, 3]);
        for (lane, start) in starts.iter().enumerate() {
            // Higher cursor bits do not change the lane; the low two bits do.
            assert!(!lane_done(lane as u64, 4, start | 0x400), "lane {lane}");
            for other in starts.iter().filter(|&o| o != start) {
                assert!(lane_done(lane as u64, 4, other | 0x400), "lane {lane}");
            }
        }
    }

    #[test]
    fn probe_tokens_differ() {
        assert_ne!(probe_token(), probe_token());
    }

    #[test]
    fn redaction_removes_the_password() {
        let secret = SecretValue::new("hunter2");
        assert_eq!(
            redact("AUTH default hunter2 failed", &secret),
            "AUTH default <redacted> failed"
        );
        assert_eq!(redact("x", &SecretValue::new("")), "x");
    }

    #[test]
    fn scan_replies_are_read() {
        let reply = Value::Array(vec![
            Value::String("17".into()),
            Value::Array(vec![
                Value::String("sess:a".into()),
                Value::Bytes(vec![0xff].into()),
            ]),
        ]);
        let (cursor, keys) = parse_scan_reply(reply).expect("a SCAN reply");
        assert_eq!(cursor, 17);
        assert_eq!(keys.len(), 2);
        assert!(parse_scan_reply(Value::Null).is_err());
    }
}
