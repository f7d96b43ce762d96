//! `flush_intercom_sessions` planned and applied against a real `redis-server` (started per
//! test by `stagehand_e2e::redis`): only the sessions of the configured database go, ACL users,
//! wrong credentials, TLS, dry runs, reruns and keys written while the action runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::{
    Builder, ClientLike, Config as FredConfig, Expiration, KeysInterface, ServerConfig,
};
use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, ActionError, SecretValue, Secrets};
use stagehand_e2e::redis::{RedisOptions, RedisServer, session_commands, unrelated_ca_pem};
use stagehand_e2e::{client, offline_client};

const ID: &str = "flush_intercom_sessions";
const DEFAULT_PASSWORD: &str = "default-Pa55word";

fn action(config: Value) -> Box<dyn Action> {
    match stagehand_actions::instantiate(ID, &config) {
        Ok(a) => a,
        Err(e) => panic!("instantiate {ID}: {e}"),
    }
}

async fn ctx(password: &str) -> ActionContext {
    ActionContext {
        client: client().await,
        ..offline_ctx(password)
    }
}

/// A context whose Kubernetes client points nowhere (the action never calls Kubernetes).
fn offline_ctx(password: &str) -> ActionContext {
    ActionContext {
        client: offline_client(),
        namespace: "default".into(),
        secrets: Secrets::new([("redis-password".to_string(), SecretValue::new(password))]),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

fn config(server: &RedisServer, extra: Value) -> Value {
    let mut redis = json!({"host": "127.0.0.1", "port": server.port()});
    if let (Some(obj), Value::Object(more)) = (redis.as_object_mut(), extra) {
        obj.extend(more);
    }
    json!({ "redis": redis })
}

fn server(users: &[&str]) -> RedisServer {
    RedisServer::start(RedisOptions {
        users: users.iter().map(|u| u.to_string()).collect(),
        default_password: Some(DEFAULT_PASSWORD.into()),
        tls: false,
        debug_command: true,
    })
}

/// `count` sessions (with TTL) and `count` other keys in `db`.
fn small_load(server: &RedisServer, db: u32, count: u64) {
    server.pipe(db, session_commands(count, 86_400, "small"));
    server.populate(db, count, "ox:session", 50);
}

fn failure(result: Result<stagehand_actions::action::Outcome, ActionError>) -> String {
    match result {
        Ok(o) => panic!("expected a failure, got {:?}", o.summary),
        Err(e) => e.to_string(),
    }
}

fn summary(result: Result<stagehand_actions::action::Outcome, ActionError>) -> String {
    match result {
        Ok(o) => o.summary,
        Err(e) => panic!("the action failed: {e}"),
    }
}

const SINGLE_LOOKALIKES: &[&str] = &[
    "sess", "xsess:1", "Sess:1", "SESS:1", "sessX", "sess_1", "sess;1", "ses:1",
];

#[tokio::test]
async fn only_the_sessions_of_the_database_go_among_a_million_keys_and_a_rerun_finds_nothing() {
    let redis = server(&[]);
    // db 0: 200,000 sessions (SET ... EX, as connect-redis writes them) among 1,000,000 others.
    redis.pipe(0, session_commands(200_000, 86_400, ""));
    let mut others: Vec<Vec<String>> = SINGLE_LOOKALIKES
        .iter()
        .map(|k| vec!["SET".to_string(), k.to_string(), "x".to_string()])
        .collect();
    for i in 0..10_000 {
        others.push(vec![
            "SET".into(),
            format!("PHPREDIS_SESSION:{i:026x}"),
            "php|a:0:{}".into(),
            "EX".into(),
            "1440".into(),
        ]);
    }
    for i in 0..1_000 {
        others.push(vec!["SET".into(), format!("xsess:n{i}"), "x".into()]);
        others.push(vec!["SET".into(), format!("Sess:n{i}"), "x".into()]);
    }
    let populated = 1_000_000 - others.len() as u64;
    redis.pipe(0, others);
    redis.populate(0, populated, "ox:session", 100);
    // db 1: sessions of somebody else.
    redis.pipe(1, session_commands(1_000, 86_400, "db1"));
    redis.populate(1, 1_000, "nc:cache", 20);
    assert_eq!(redis.dbsize(0), 1_200_000);
    assert_eq!(redis.dbsize(1), 2_000);
    let first_session = session_commands(1, 86_400, "")[0][1].clone();
    let ttl: i64 = redis.cli(0, &["TTL", &first_session]).parse().unwrap();
    assert!(ttl > 0, "sessions carry a TTL: {ttl}");

    let ctx = ctx(DEFAULT_PASSWORD).await;
    let flush = action(config(&redis, json!({"username": "default"})));

    // Plan (what a dry run does): counts, deletes nothing.
    let planned = summary(flush.plan(&ctx).await);
    assert!(
        planned.contains("200000 keys match \"sess:*\""),
        "{planned}"
    );
    assert!(
        planned.contains(&format!("127.0.0.1:{}", redis.port())),
        "{planned}"
    );
    assert_eq!(redis.dbsize(0), 1_200_000);

    let applied = summary(flush.apply(&ctx).await);
    assert!(applied.contains("deleted 200000 keys"), "{applied}");
    assert!(
        applied.contains("none of the keys present at the start is left"),
        "{applied}"
    );

    assert_eq!(redis.dbsize(0), 1_000_000);
    assert_eq!(redis.count_matching(0, "sess:*"), 0);
    assert_eq!(redis.count_matching(0, "PHPREDIS_SESSION:*"), 10_000);
    assert_eq!(redis.count_matching(0, "xsess:*"), 1_001);
    assert_eq!(redis.count_matching(0, "Sess:*"), 1_001);
    for key in SINGLE_LOOKALIKES {
        assert_eq!(redis.cli(0, &["EXISTS", key]), "1", "{key} survives");
    }
    assert_eq!(redis.dbsize(1), 2_000, "database 1 is untouched");
    assert_eq!(redis.count_matching(1, "sess:*"), 1_000);

    // A second run finds nothing to do and says so.
    let again = summary(flush.apply(&ctx).await);
    assert!(again.contains("nothing to do"), "{again}");
    let replanned = summary(flush.plan(&ctx).await);
    assert!(replanned.contains("nothing to do"), "{replanned}");
    assert_eq!(redis.dbsize(0), 1_000_000);
}

#[tokio::test]
async fn dry_run_plan_reports_the_count_and_deletes_nothing() {
    let redis = server(&[]);
    small_load(&redis, 0, 1_234);
    let flush = action(config(&redis, json!({})));
    let planned = summary(flush.plan(&ctx(DEFAULT_PASSWORD).await).await);
    assert!(planned.contains("1234 keys match \"sess:*\""), "{planned}");
    assert!(planned.contains("apply would UNLINK them"), "{planned}");
    assert_eq!(redis.dbsize(0), 2_468);
    assert_eq!(redis.count_matching(0, "sess:*"), 1_234);
}

#[tokio::test]
async fn a_real_runs_plan_proves_access_without_walking_the_keyspace() {
    let redis = server(&[]);
    small_load(&redis, 0, 1_234);
    let flush = action(config(&redis, json!({})));
    let mut ctx = ctx(DEFAULT_PASSWORD).await;
    ctx.run.apply_follows = true;
    redis.cli(0, &["CONFIG", "RESETSTAT"]);
    let planned = summary(flush.plan(&ctx).await);
    assert!(
        planned.contains("connection and credential proven") && !planned.contains("1234"),
        "{planned}"
    );
    // One SCAN call (the right to SCAN), no walk: the keyspace has 2,468 keys, a walk with
    // COUNT 1000 would take at least three calls.
    let stats = redis.cli(0, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_scan:calls=1,"), "{stats}");
    assert_eq!(redis.count_matching(0, "sess:*"), 1_234);
    // A wrong password still fails the plan.
    let mut wrong = ctx.clone();
    wrong.secrets = Secrets::new([("redis-password".to_string(), SecretValue::new("nope"))]);
    failure(flush.plan(&wrong).await);
    let applied = summary(flush.apply(&ctx).await);
    assert!(applied.contains("deleted 1234 keys"), "{applied}");
}

#[tokio::test]
async fn an_acl_user_with_the_minimal_rights_flushes_its_database() {
    // Database 0 needs SCAN and UNLINK on the pattern's keys; another database also SELECT.
    let redis = server(&[
        "intercom on >intercom-Pa55 ~sess:* +scan +unlink",
        "intercom3 on >intercom3-Pa55 ~sess:* +scan +unlink +select",
    ]);
    small_load(&redis, 0, 3_000);
    small_load(&redis, 3, 2_000);
    // The user really is limited: it may not read a session.
    let denied = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "--user", "intercom"])
        .args([
            "--pass",
            "intercom-Pa55",
            "--no-auth-warning",
            "GET",
            "sess:x",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&denied.stdout).contains("NOPERM"),
        "{denied:?}"
    );

    let flush = action(config(&redis, json!({"username": "intercom"})));
    let ctx0 = ctx("intercom-Pa55").await;
    let planned = summary(flush.plan(&ctx0).await);
    assert!(planned.contains("3000 keys match"), "{planned}");
    let applied = summary(flush.apply(&ctx0).await);
    assert!(applied.contains("deleted 3000 keys"), "{applied}");
    assert_eq!(redis.count_matching(0, "sess:*"), 0);
    assert_eq!(redis.dbsize(0), 3_000);
    assert_eq!(
        redis.count_matching(3, "sess:*"),
        2_000,
        "db 3 not touched yet"
    );

    let flush3 = action(config(
        &redis,
        json!({"username": "intercom3", "database": 3}),
    ));
    let applied = summary(flush3.apply(&ctx("intercom3-Pa55").await).await);
    assert!(applied.contains("deleted 2000 keys"), "{applied}");
    assert!(applied.contains("database 3"), "{applied}");
    assert_eq!(redis.count_matching(3, "sess:*"), 0);
    assert_eq!(redis.dbsize(3), 2_000);
}

#[tokio::test]
async fn a_user_without_unlink_fails_in_plan_and_nothing_is_deleted() {
    let redis = server(&[
        "reader on >reader-Pa55 ~sess:* +scan +ping",
        "otherkeys on >otherkeys-Pa55 ~cache:* +scan +unlink",
    ]);
    small_load(&redis, 0, 2_000);

    let flush = action(config(&redis, json!({"username": "reader"})));
    let reader = ctx("reader-Pa55").await;
    let err = failure(flush.plan(&reader).await);
    assert!(
        err.contains("may not delete keys matching \"sess:*\""),
        "{err}"
    );
    assert!(err.contains("+unlink"), "{err}");
    assert!(err.contains("\"reader\""), "{err}");
    assert!(
        err.contains(&format!("127.0.0.1:{}", redis.port())),
        "{err}"
    );
    // apply runs the same proof first.
    let err = failure(flush.apply(&reader).await);
    assert!(err.contains("may not delete keys"), "{err}");
    assert_eq!(redis.dbsize(0), 4_000);

    // UNLINK is allowed, but not on the pattern's keys.
    let flush = action(config(&redis, json!({"username": "otherkeys"})));
    let err = failure(flush.plan(&ctx("otherkeys-Pa55").await).await);
    assert!(err.contains("may not delete keys"), "{err}");
    assert_eq!(redis.dbsize(0), 4_000);
}

#[tokio::test]
async fn a_wrong_password_fails_naming_server_and_user_but_not_the_password() {
    let redis = server(&[]);
    small_load(&redis, 0, 1_000);
    let wrong = "Wr0ng-password-value";
    let flush = action(config(&redis, json!({})));
    let ctx = ctx(wrong).await;
    for err in [
        failure(flush.plan(&ctx).await),
        failure(flush.apply(&ctx).await),
    ] {
        assert!(
            err.contains(&format!("127.0.0.1:{}", redis.port())),
            "{err}"
        );
        assert!(err.contains("\"default\""), "{err}");
        assert!(err.contains("redis-password"), "{err}");
        assert!(!err.contains(wrong), "the password leaked: {err}");
    }
    assert_eq!(redis.dbsize(0), 2_000);

    // A missing secret file is named as well.
    let no_secret = ActionContext {
        secrets: Secrets::default(),
        ..ctx.clone()
    };
    let err = failure(flush.plan(&no_secret).await);
    assert!(err.contains("redis-password"), "{err}");
    assert_eq!(redis.dbsize(0), 2_000);
}

#[tokio::test]
async fn tls_with_the_generated_ca_works_and_an_untrusted_certificate_fails() {
    let redis = RedisServer::start(RedisOptions {
        default_password: Some(DEFAULT_PASSWORD.into()),
        tls: true,
        debug_command: true,
        ..RedisOptions::default()
    });
    small_load(&redis, 0, 1_500);
    let ctx = ctx(DEFAULT_PASSWORD).await;

    // Trusting only the public web roots: the test CA is unknown.
    let err = failure(
        action(config(&redis, json!({"tls": true})))
            .plan(&ctx)
            .await,
    );
    assert!(err.contains("TLS"), "{err}");
    assert!(err.contains("untrusted issuer"), "{err}");
    assert!(err.contains("add that CA to redis.caBundle"), "{err}");
    // Trusting another CA.
    let err = failure(
        action(config(
            &redis,
            json!({"tls": true, "caBundle": unrelated_ca_pem()}),
        ))
        .apply(&ctx)
        .await,
    );
    assert!(err.contains("TLS"), "{err}");
    // Plain text against the TLS port fails too.
    assert!(
        action(config(&redis, json!({"requestTimeoutSeconds": 3})))
            .plan(&ctx)
            .await
            .is_err()
    );
    // The right CA, but a host name the certificate is not valid for.
    let err = failure(
        action(json!({"redis": {
            "host": "127.0.0.2", "port": redis.port(), "tls": true, "caBundle": redis.ca_pem().unwrap()
        }}))
        .plan(&ctx)
        .await,
    );
    assert!(err.contains("TLS"), "{err}");
    assert!(err.contains("127.0.0.2"), "{err}");
    assert_eq!(redis.dbsize(0), 3_000, "nothing deleted by the failures");

    // The name the certificate is valid for, by DNS name.
    let planned = summary(
        action(json!({"redis": {
            "host": "localhost", "port": redis.port(), "tls": true, "caBundle": redis.ca_pem().unwrap()
        }}))
        .plan(&ctx)
        .await,
    );
    assert!(planned.contains("1500 keys match"), "{planned}");

    // The bundle as a PEM file path (openDesk's trust mount).
    let file = redis.dir().join("ca.crt").to_string_lossy().into_owned();
    let planned = summary(
        action(config(&redis, json!({"tls": true, "caBundle": file})))
            .plan(&ctx)
            .await,
    );
    assert!(planned.contains("1500 keys match"), "{planned}");
    assert!(ctx.warnings.list().is_empty());

    // Nothing checked, not even the name: it connects and the run records one warning.
    let skipping = offline_ctx(DEFAULT_PASSWORD);
    let planned = summary(
        action(json!({"redis": {
            "host": "127.0.0.2", "port": redis.port(), "tls": true, "insecureSkipTlsVerify": true
        }}))
        .plan(&skipping)
        .await,
    );
    assert!(planned.contains("1500 keys match"), "{planned}");
    let warnings = skipping.warnings.list();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("redis.insecureSkipTlsVerify is set"),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains(&format!("127.0.0.2:{}", redis.port())),
        "{warnings:?}"
    );

    // With the server's CA.
    let flush = action(config(
        &redis,
        json!({"tls": true, "caBundle": redis.ca_pem().unwrap()}),
    ));
    let planned = summary(flush.plan(&ctx).await);
    assert!(planned.contains("1500 keys match"), "{planned}");
    assert!(planned.contains("over TLS"), "{planned}");
    let applied = summary(flush.apply(&ctx).await);
    assert!(applied.contains("deleted 1500 keys"), "{applied}");
    assert_eq!(redis.dbsize(0), 1_500);
}

async fn writer_client(redis: &RedisServer) -> fred::prelude::Client {
    let config = FredConfig {
        server: ServerConfig::new_centralized("127.0.0.1", redis.port()),
        password: Some(DEFAULT_PASSWORD.into()),
        ..FredConfig::default()
    };
    let client = Builder::from_config(config).build().unwrap();
    client.init().await.unwrap();
    client
}

/// Signs users in: writes a `sess:late:<n>` key every 5 to 10 ms until `stop` is set.
/// Returns how many it wrote.
fn spawn_writer(
    client: fred::prelude::Client,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let written = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let n = written.fetch_add(1, Ordering::Relaxed);
            let _: () = client
                .set(
                    format!("sess:late:{n}"),
                    "{}",
                    Some(Expiration::EX(600)),
                    None,
                    false,
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5 + n % 6)).await;
        }
        written.load(Ordering::Relaxed)
    })
}

/// The number before `marker` in `summary` ("... 412 sessions created during the flush ...").
fn count_before(summary: &str, marker: &str) -> u64 {
    summary
        .split(marker)
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {marker:?} in {summary}"))
}

/// openDesk runs the flush in the post stage, with the new Intercom Service already serving:
/// users whose session was just deleted sign in again at once. The action succeeds, every
/// session present when it started is gone, and the new ones are left and counted.
#[tokio::test]
async fn users_signing_in_during_the_flush_keep_their_new_sessions_and_every_old_one_goes() {
    let redis = server(&[]);
    redis.pipe(0, session_commands(100_000, 86_400, ""));
    redis.populate(0, 300_000, "ox:session", 50);
    let flush = action(config(&redis, json!({})));
    let ctx = ctx(DEFAULT_PASSWORD).await;

    // Signing in for the whole run, and on after it.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(writer_client(&redis).await, stop.clone());
    let before_start = Instant::now();
    while redis.count_matching(0, "sess:late:*") < 3 {
        assert!(
            before_start.elapsed() < Duration::from_secs(10),
            "the writer writes nothing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let applied = summary(flush.apply(&ctx).await);
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();

    // Every session of the start is gone; only sessions written while it ran (or after) are
    // left, and the others are untouched.
    assert_eq!(
        redis.count_matching(0, "sess:*"),
        redis.count_matching(0, "sess:late:*"),
        "a session present at the start survived: {applied}"
    );
    assert_eq!(redis.count_matching(0, "ox:session:*"), 300_000);
    let left_now = redis.count_matching(0, "sess:late:*");
    let created = count_before(&applied, " sessions created during the flush were left");
    assert!(
        created >= 1 && created <= left_now,
        "{created} reported, {left_now} of {written} written are there: {applied}"
    );
    assert!(
        applied.contains("none of the keys present at the start is left"),
        "{applied}"
    );
    // UNLINK's count: the 100,000 sessions of the start plus those written while the
    // deleting walk ran that it found (at least the 3 written before it started).
    let deleted = count_before(&applied, " keys matching");
    assert!(
        (100_003..=100_000 + written).contains(&deleted),
        "{deleted} deleted of 100000 + {written} written: {applied}"
    );
    assert_eq!(deleted + left_now, 100_000 + written, "{applied}");
}

#[tokio::test]
async fn an_unreachable_server_fails_within_the_request_timeout() {
    // A port nobody listens on: connection refused, named in the error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let flush =
        action(json!({"redis": {"host": "127.0.0.1", "port": port, "requestTimeoutSeconds": 2}}));
    let started = std::time::Instant::now();
    let err = failure(flush.plan(&ctx("x").await).await);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("cannot connect"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The server's count of changes since the last save: every write adds to it.
fn writes(redis: &RedisServer) -> u64 {
    redis
        .cli(0, &["INFO", "persistence"])
        .lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO persistence has no rdb_changes_since_last_save"))
}

#[tokio::test]
async fn preflight_authenticates_and_proves_unlink_and_scan_without_writing() {
    let redis = server(&[
        "intercom on >intercom-Pa55 ~sess:* +scan +unlink",
        "noscan on >noscan-Pa55 ~sess:* +unlink",
        "reader on >reader-Pa55 ~sess:* +scan",
    ]);
    small_load(&redis, 0, 500);
    let before = writes(&redis);
    let preflight = |user: &str, password: &str| {
        let flush = action(config(&redis, json!({"username": user})));
        let ctx = offline_ctx(password);
        async move { flush.preflight(&ctx).await.map_err(|e| e.to_string()) }
    };

    // The minimal ACL user passes.
    preflight("intercom", "intercom-Pa55").await.unwrap();

    // A wrong password names the server, the user and the secret file, never the password.
    let wrong = "Wr0ng-intercom-value";
    let err = preflight("intercom", wrong).await.unwrap_err();
    assert!(
        err.contains(&format!("127.0.0.1:{}", redis.port())),
        "{err}"
    );
    assert!(err.contains("\"intercom\""), "{err}");
    assert!(err.contains("redis-password"), "{err}");
    assert!(!err.contains(wrong), "the password leaked: {err}");

    // The rights planning and apply need are proven: UNLINK (the no-op probe) and SCAN.
    let err = preflight("reader", "reader-Pa55").await.unwrap_err();
    assert!(err.contains("may not delete keys matching"), "{err}");
    let err = preflight("noscan", "noscan-Pa55").await.unwrap_err();
    assert!(err.contains("SCAN"), "{err}");
    assert!(err.contains("NOPERM"), "{err}");

    // Nothing was written or deleted.
    assert_eq!(writes(&redis), before, "preflight wrote to the server");
    assert_eq!(redis.dbsize(0), 1_000);
    assert_eq!(redis.count_matching(0, "sess:*"), 500);
}
