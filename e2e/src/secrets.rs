//! Secrets the tests create, and the search for their values where they must never appear
//! (the objects Stagehand writes, and the logs an action emits: [`CapturedLogs`]).

use std::io::Write;
use std::sync::{Arc, Mutex};

use stagehand_actions::clients::ldap::exec::PAYLOAD_LOG_CAPS;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cluster::kubectl;
use crate::process::ok;

/// `kubectl create secret generic NAME --from-literal=KEY=VALUE -n NS`; fails the test on
/// error.
pub fn create_secret(ns: &str, name: &str, key: &str, value: &str) {
    let args = secret_args(ns, name, key, value);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok("create secret", &kubectl(&args));
}

/// The kubectl arguments of [`create_secret`].
pub fn secret_args(ns: &str, name: &str, key: &str, value: &str) -> Vec<String> {
    [
        "create",
        "secret",
        "generic",
        name,
        "-n",
        ns,
        &format!("--from-literal={key}={value}"),
    ]
    .map(String::from)
    .to_vec()
}

/// The secret-leak search: fails the test when any of `values` (secret values the test put in
/// Secrets) appears in what Stagehand writes in `ns` — Migrations, MigrationRuns (status,
/// conditions, problems), Events, ConfigMaps (the history ledger) — or in `texts` (the
/// operator's log, a command's output). `texts` name where each came from.
pub fn assert_no_secret_leak(ns: &str, values: &[&str], texts: &[(&str, &str)]) {
    let objects = ok(
        "dump",
        &kubectl(&[
            "get",
            "migrations.stagehand.dev,migrationruns.stagehand.dev,events,configmaps",
            "-n",
            ns,
            "-o",
            "yaml",
        ]),
    );
    assert!(
        objects.contains("kind: MigrationRun") || objects.contains("kind: Migration"),
        "the search reads Stagehand's objects in {ns}"
    );
    for (place, text) in
        std::iter::once(("the objects and Events", objects.as_str())).chain(texts.iter().copied())
    {
        for value in values {
            assert!(
                !value.is_empty() && !text.contains(value),
                "a secret value leaked into {place}"
            );
        }
    }
}

/// Everything the `tracing` (and `log`) macros emit on this thread while it is held — the
/// actions', the kube client's, the exec WebSocket's — at every level the operator allows
/// (TRACE, capped as it caps them: `PAYLOAD_LOG_CAPS`), for a search for leaked values. A
/// `#[tokio::test]` runs on one thread, so its actions' logs are all here.
#[allow(missing_debug_implementations)]
pub struct CapturedLogs {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::dispatcher::DefaultGuard,
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    /// Starts capturing on this thread, until dropped.
    pub fn start() -> Self {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(buf.clone());
        let mut filter = tracing_subscriber::EnvFilter::new("trace");
        for cap in PAYLOAD_LOG_CAPS {
            match cap.parse() {
                Ok(directive) => filter = filter.add_directive(directive),
                Err(e) => panic!("PAYLOAD_LOG_CAPS holds {cap:?}, which does not parse: {e}"),
            }
        }
        let guard = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish()
            .set_default();
        Self { buf, _guard: guard }
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .buf
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}
