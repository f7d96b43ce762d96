//! The history ledger (the ConfigMap `opendesk-history`) and its footprints.

use crate::cluster::kubectl;
use crate::process::stdout;

/// The history ledger of `ns` (the ConfigMap `opendesk-history`), `None` when there is none.
pub fn ledger(ns: &str) -> Option<serde_json::Value> {
    let out = kubectl(&[
        "get",
        "configmap",
        "opendesk-history",
        "-n",
        ns,
        "-o",
        "json",
    ]);
    out.status
        .success()
        .then(|| serde_json::from_str(&stdout(&out)).ok())
        .flatten()
}

/// The footprint keys of `ledger` (a ledger ConfigMap as JSON) that begin with
/// `footprint.` and then `prefix` (`""`: all of them; `"pre.workload_scale."`: one action's).
pub fn footprints<'a>(ledger: &'a serde_json::Value, prefix: &str) -> Vec<&'a String> {
    let start = format!("footprint.{prefix}");
    ledger["data"]
        .as_object()
        .map(|d| d.keys().filter(|k| k.starts_with(&start)).collect())
        .unwrap_or_default()
}
