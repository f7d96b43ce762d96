//! `flush_intercom_sessions`: deletes the Intercom Service's sessions (keys matching
//! `keyPattern`, walked with SCAN; never FLUSH).
//!
//! How it talks to Redis (one connection, pipelined):
//! - `plan` connects and authenticates (the credential is proven), proves the right to UNLINK
//!   keys of the pattern with an `UNLINK` of a random key that matches the pattern and cannot
//!   exist (a no-op), and the right to SCAN with one `SCAN` call. A dry run (and any plan that
//!   apply does not follow at once) also counts the matching keys with a full SCAN; a real
//!   run's plan does not walk the keyspace: apply walks it anyway.
//! - `apply` does the same preflight, then walks the database once with `SCAN cursor MATCH
//!   pattern COUNT 1000` (each call keeps the server busy for about a millisecond) and deletes
//!   what it finds with `UNLINK` in batches that are sent while the walk goes on. The cursor
//!   space is walked in four parts at once, so that the server always has the next call
//!   queued. It remembers a 64-bit digest of every key it deletes. A second full SCAN
//!   verifies: by SCAN's guarantee (a key present for a whole walk is returned by it) a key
//!   whose digest the first walk did not remember was created after it started: a session of
//!   the release now running, left and counted in the summary ("N sessions created during the
//!   flush were left"), never a failure; a remembered one is there again and is deleted again.
//!   So none of the keys present at the start is left, however busy the sign-ins are.
//!
//! Never `FLUSHDB`/`FLUSHALL`, never `KEYS`, no Lua. Every request is bounded by
//! `requestTimeoutSeconds`.

use std::fmt::Write as _;
use std::time::Instant;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::{ConfigIssue, Endpoint, Needs};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome, Progress, StopSignal};
use crate::clients::redis::{Delete, PASSWORD_FILE, Redis, Session, SweepError};
use crate::clients::tls::ca_bundle_issue;
use crate::shared_config::needs_secrets;
use crate::text::seconds;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The Redis server holding the sessions.
    #[serde(default)]
    pub redis: Redis,
}

/// The literal prefix of a Redis glob: the characters before its first unescaped wildcard
/// (`*`, `?`, `[`), with escapes resolved.
pub fn literal_prefix(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' => break,
            '\\' => match chars.next() {
                Some(escaped) => out.push(escaped),
                None => break,
            },
            other => out.push(other),
        }
    }
    out
}

impl ActionConfig for Config {
    const ID: &'static str = "flush_intercom_sessions";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let redis = &self.redis;
        if literal_prefix(&redis.key_pattern).is_empty() {
            issues.push(ConfigIssue {
                path: "redis.keyPattern".into(),
                message: format!(
                    "{:?} has no literal part before its first wildcard, so it could match keys of other components sharing the database: start it with a fixed prefix such as \"sess:\"",
                    redis.key_pattern
                ),
            });
        }
        if u8::try_from(redis.database).is_err() {
            issues.push(ConfigIssue {
                path: "redis.database".into(),
                message: format!(
                    "database {} is out of range: Stagehand selects databases 0 to 255",
                    redis.database
                ),
            });
        }
        if let Some(bundle) = &redis.ca_bundle {
            if !redis.tls {
                issues.push(ConfigIssue {
                    path: "redis.caBundle".into(),
                    message: "a CA bundle is only used with TLS: set redis.tls to true or remove redis.caBundle".into(),
                });
            }
            if let Some(problem) = ca_bundle_issue(bundle) {
                issues.push(ConfigIssue {
                    path: "redis.caBundle".into(),
                    message: problem,
                });
            }
        }
        if redis.insecure_skip_tls_verify && !redis.tls {
            issues.push(ConfigIssue {
                path: "redis.insecureSkipTlsVerify".into(),
                message: "insecureSkipTlsVerify is only used with TLS: set redis.tls to true or remove redis.insecureSkipTlsVerify".into(),
            });
        }
        issues
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let redis = &self.redis;
            let (session, probed) = open_proven(redis, ctx).await?;
            if ctx.run.apply_follows {
                // A real run: prove SCAN too (what apply walks with), count nothing.
                let scanned = session
                    .scan_page(0, &redis.key_pattern)
                    .await
                    .map_err(|e| session.failed("SCAN", &e));
                let target = session.target.clone();
                session.close().await;
                scanned?;
                let mut summary = format!(
                    "{target}: connection and credential proven, UNLINK and SCAN of keys matching {:?} allowed; apply will UNLINK them and verify with another full SCAN (not counted beforehand: a dry run counts)",
                    redis.key_pattern
                );
                if !probed {
                    summary.push_str(
                        "; the right to UNLINK is proven by the first deletion (the pattern has no '*', so no key of it can be tried without touching a real one)",
                    );
                }
                return Ok(Outcome::new(summary));
            }
            let result = async {
                let started = Instant::now();
                let sweep = session
                    .sweep(
                        &redis.key_pattern,
                        Delete::Nothing,
                        &ctx.stop,
                        &Progress::default(),
                    )
                    .await
                    .map_err(|e| e.error)?;
                Ok::<_, ActionError>((sweep, started.elapsed()))
            }
            .await;
            let target = session.target.clone();
            session.close().await;
            let (sweep, took) = result?;
            let mut summary = if sweep.found == 0 {
                format!(
                    "{target}: no key matches {:?}: nothing to do (full SCAN in {})",
                    redis.key_pattern,
                    seconds(took)
                )
            } else {
                format!(
                    "{target}: {} keys match {:?} (full SCAN in {}); apply would UNLINK them and verify with another full SCAN",
                    sweep.found,
                    redis.key_pattern,
                    seconds(took)
                )
            };
            if !probed {
                summary.push_str(
                    "; the right to UNLINK is proven by the first deletion (the pattern has no '*', so no key of it can be tried without touching a real one)",
                );
            }
            Ok(Outcome::new(summary))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let redis = &self.redis;
            let (session, _) = open_proven(redis, ctx).await?;
            let result = apply_with(&session, redis, &ctx.stop, &ctx.progress).await;
            session.close().await;
            result.map(Outcome::new)
        })
    }

    /// The password is read whatever the config says (an empty one sends no `AUTH`, but the
    /// secret file is still read).
    fn needs(&self) -> Needs {
        needs_secrets([PASSWORD_FILE])
    }

    fn endpoints(&self, _namespace: &str) -> Vec<Endpoint> {
        vec![Endpoint::new(
            "redis.host",
            self.redis.host.clone(),
            Some(self.redis.port),
        )]
    }

    /// Connects and authenticates, proves the right to UNLINK with the planning phase's
    /// no-op probe, and sends one `SCAN` call (the command planning and apply walk with):
    /// no key is counted, none is deleted.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let redis = &self.redis;
            let (session, _) = open_proven(redis, ctx).await?;
            let scanned = session
                .scan_page(0, &redis.key_pattern)
                .await
                .map_err(|e| session.failed("SCAN", &e));
            session.close().await;
            scanned.map(drop)
        })
    }
}

/// Refuses an unsafe pattern, then opens a session that has proven the right to UNLINK
/// ([`Session::open_proven`]): what planning, apply and preflight start with.
async fn open_proven(redis: &Redis, ctx: &ActionContext) -> Result<(Session, bool), ActionError> {
    refuse_unsafe_pattern(redis)?;
    Session::open_proven(
        redis,
        ctx.secrets.get(PASSWORD_FILE)?.clone(),
        &ctx.warnings,
    )
    .await
}

/// The pattern check of validation, repeated where it matters (a config that skipped
/// validation must not reach the server with `*`).
fn refuse_unsafe_pattern(redis: &Redis) -> Result<(), ActionError> {
    if literal_prefix(&redis.key_pattern).is_empty() {
        return Err(ActionError::Config(format!(
            "redis.keyPattern {:?} has no literal part before its first wildcard; refusing to delete with it",
            redis.key_pattern
        )));
    }
    Ok(())
}

/// Deletes and verifies on a session [`Session::open_proven`] opened (the right to UNLINK is
/// proven already).
///
/// The rule: every key that matched when the action started is deleted, and the verification
/// proves that none of those is left; keys created while it runs are sessions of the release
/// now running, counted and left. SCAN's guarantee tells the two apart: the deleting walk
/// returns (and deletes) every key present from its start to its end, and remembers their
/// digests. The verifying walk then finds only keys created after the deleting walk started
/// (their digests are not remembered: left and counted) or keys it deleted that are there
/// again (re-created under the same name, or not deleted: deleted again). No number of new
/// sessions makes the action fail.
async fn apply_with(
    session: &Session,
    redis: &Redis,
    stop: &StopSignal,
    progress: &Progress,
) -> Result<String, ActionError> {
    let pattern = &redis.key_pattern;
    let target = &session.target;
    let interrupted = |e: SweepError, before: u64| ActionError::Interrupted {
        cause: Box::new(e.error),
        progress: format!(
            "{} keys matching {pattern:?} were deleted before this error, a rerun deletes the rest",
            before + e.deleted
        ),
    };
    let started = Instant::now();
    progress.phase(
        format!("deleting the keys matching {pattern:?} (SCAN and UNLINK)"),
        None,
        "keys",
    );
    let first = session
        .sweep(pattern, Delete::All, stop, progress)
        .await
        .map_err(|e| interrupted(e, 0))?;
    let deleting = started.elapsed();
    progress.phase(
        format!("verifying with a full SCAN that no key matching {pattern:?} is left"),
        None,
        "keys deleted again",
    );
    let verify = session
        .sweep(pattern, Delete::Only(&first.seen), stop, progress)
        .await
        .map_err(|e| interrupted(e, first.deleted))?;
    let verifying = started.elapsed() - deleting;
    Ok(flush_summary(
        target,
        pattern,
        &Flushed {
            deleted: first.deleted,
            redeleted: verify.deleted,
            created: verify.kept,
            nothing_found: first.found == 0 && verify.found == 0,
            deleting,
            verifying,
        },
    ))
}

/// What the two walks of apply did.
struct Flushed {
    /// Keys the deleting walk deleted (UNLINK's count).
    deleted: u64,
    /// Keys the verifying walk found again among those and deleted again.
    redeleted: u64,
    /// Keys the verifying walk found that were created after the deleting walk started: left.
    created: u64,
    /// Neither walk found a key.
    nothing_found: bool,
    deleting: std::time::Duration,
    verifying: std::time::Duration,
}

/// The summary of apply: what was deleted, that the verification found none of the keys of
/// the start left, and how many new sessions were left.
fn flush_summary(target: &str, pattern: &str, f: &Flushed) -> String {
    let mut summary = if f.nothing_found {
        format!("{target}: no key matches {pattern:?}: nothing to do")
    } else {
        format!(
            "{target}: deleted {} keys matching {pattern:?} (SCAN and UNLINK in {})",
            f.deleted + f.redeleted,
            seconds(f.deleting)
        )
    };
    let _ = write!(
        summary,
        "; verified with a full SCAN in {}: none of the keys present at the start is left",
        seconds(f.verifying)
    );
    if f.redeleted > 0 {
        let _ = write!(
            summary,
            " ({} deleted keys were there again under the same name and were deleted again)",
            f.redeleted
        );
    }
    if f.created > 0 {
        let _ = write!(
            summary,
            "; {} {} created during the flush {} left (sessions of the running release)",
            f.created,
            if f.created == 1 {
                "session"
            } else {
                "sessions"
            },
            if f.created == 1 { "was" } else { "were" },
        );
    }
    summary
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The paths of the semantic issues of the config `json`.
    fn issue_paths(json: serde_json::Value) -> Vec<String> {
        let config: Config = serde_json::from_value(json).expect("parses");
        config
            .semantic_issues()
            .into_iter()
            .map(|i| i.path)
            .collect()
    }

    #[test]
    fn ca_bundle_must_hold_certificates() {
        let paths = issue_paths(serde_json::json!({
            "redis": {"caBundle": "nothing here", "tls": false}
        }));
        assert_eq!(paths, vec!["redis.caBundle", "redis.caBundle"]);
        // A PEM file path (openDesk's trust mount) is read when the session opens.
        let paths = issue_paths(serde_json::json!({
            "redis": {"caBundle": "/etc/opendesk/trust/ca-certificates.crt", "tls": true,
                      "insecureSkipTlsVerify": true}
        }));
        assert_eq!(paths, Vec::<String>::new());
        let paths = issue_paths(serde_json::json!({
            "redis": {"insecureSkipTlsVerify": true}
        }));
        assert_eq!(paths, vec!["redis.insecureSkipTlsVerify"]);
    }

    fn flushed(redeleted: u64, created: u64) -> Flushed {
        Flushed {
            deleted: 10,
            redeleted,
            created,
            nothing_found: false,
            deleting: std::time::Duration::from_millis(300),
            verifying: std::time::Duration::from_millis(200),
        }
    }

    #[test]
    fn the_summary_counts_new_sessions_as_left_and_never_as_a_failure() {
        let quiet = flush_summary("redis:6379", "sess:*", &flushed(0, 0));
        assert!(quiet.contains("deleted 10 keys"), "{quiet}");
        assert!(
            quiet.contains("none of the keys present at the start is left"),
            "{quiet}"
        );
        assert!(!quiet.contains("created during"), "{quiet}");
        let busy = flush_summary("redis:6379", "sess:*", &flushed(2, 412));
        assert!(busy.contains("deleted 12 keys"), "{busy}");
        assert!(
            busy.contains("412 sessions created during the flush were left"),
            "{busy}"
        );
        assert!(busy.contains("2 deleted keys were there again"), "{busy}");
        let one = flush_summary("redis:6379", "sess:*", &flushed(0, 1));
        assert!(
            one.contains("1 session created during the flush was left"),
            "{one}"
        );
    }

    #[test]
    fn databases_beyond_255_are_rejected() {
        let paths = issue_paths(serde_json::json!({"redis": {"database": 256}}));
        assert_eq!(paths, vec!["redis.database"]);
    }
}
