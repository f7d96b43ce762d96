//! Waiting for what the operator does: polling, conditions, reasons and status times of the
//! objects it writes.

use std::time::{Duration, Instant};

use crate::cluster::{get, kubectl};
use crate::process::stderr;

/// Polls `check` every 100 ms until it returns `Some`, failing the test after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The condition `type_` of an object read with [`get`]; fails the test when it has none.
pub fn condition<'a>(obj: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no condition {type_} in {obj}"))
}

/// The `(decision, reason)` of each action in a run's `status.actions`, in order; fails the
/// test when the run has no `status.actions`.
pub fn decisions(run: &serde_json::Value) -> Vec<(String, String)> {
    run["status"]["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("no status.actions in {run}"))
        .iter()
        .map(|a| {
            (
                a["decision"].as_str().unwrap_or_default().to_string(),
                a["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Waits (90 s) until the Ready condition of `what` (read with [`get`]) has the reason `want`;
/// the object then.
pub async fn reason_becomes(ns: &str, what: &str, want: &str) -> serde_json::Value {
    wait_for(
        &format!("{what} reason {want}"),
        Duration::from_secs(90),
        || async {
            let obj = get(ns, what);
            let has = obj["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["reason"] == want)
            });
            has.then_some(obj)
        },
    )
    .await
}

/// The time `status.<field>` (`startTime`, `completionTime`) of an object read with [`get`].
pub fn status_time(obj: &serde_json::Value, field: &str) -> k8s_openapi::jiff::Timestamp {
    let text = obj["status"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {obj}"));
    match text.parse() {
        Ok(t) => t,
        Err(e) => panic!("{field} {text:?} is not a time: {e}"),
    }
}

/// Waits (60 s) until the first action of the run `what` has started.
pub async fn first_action_started(ns: &str, what: &str) {
    wait_for(
        "the first action to start",
        Duration::from_secs(60),
        || async {
            get(ns, what)["status"]["actions"][0]["startTime"]
                .is_string()
                .then_some(())
        },
    )
    .await;
}

/// `kubectl wait --for=condition=COND` (90 s); on timeout the test fails showing the object.
pub fn wait(ns: &str, what: &str, condition: &str) {
    wait_up_to(ns, what, condition, Duration::from_secs(90));
}

/// `kubectl wait --for=condition=COND` for at most `timeout`; on timeout the test fails showing
/// the object.
pub fn wait_up_to(ns: &str, what: &str, condition: &str, timeout: Duration) {
    let out = kubectl(&[
        "wait",
        &format!("--for=condition={condition}"),
        &format!("--timeout={}s", timeout.as_secs()),
        what,
        "-n",
        ns,
    ]);
    assert!(
        out.status.success(),
        "kubectl wait {what} {condition}: {}\n{}",
        stderr(&out),
        serde_json::to_string_pretty(&get(ns, what)).unwrap_or_default()
    );
}
