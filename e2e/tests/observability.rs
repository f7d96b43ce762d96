//! What a platform team sees of a run, from a real operator on the shared control plane: its
//! `/metrics` after a run, compared with the table of docs/operator.md#metrics (a series
//! documented but not exported, exported but not documented, or with other labels fails), and
//! its JSON logs, in which every line of an action's work carries the run, the Migration and
//! the action (docs/operator.md, **Logs**).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::metrics_docs::documented_series;
use stagehand_e2e::{Scene, apply, http_get, running_pods, statefulset, wait};

/// The series of an OpenMetrics exposition, by the name PromQL reads (a counter's with
/// `_total`, a histogram's without its suffixes): name → label names of its samples (empty
/// set when it has no sample yet: `None`).
fn exported(text: &str) -> BTreeMap<String, Option<BTreeSet<String>>> {
    let mut kinds = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            kinds.insert(name.to_string(), kind.to_string());
        }
    }
    let mut series: BTreeMap<String, Option<BTreeSet<String>>> = kinds
        .iter()
        .map(|(name, kind)| {
            let shown = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.clone()
            };
            (shown, None)
        })
        .collect();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap();
        let sample = &line[..name_end];
        let family = kinds
            .keys()
            .filter(|f| sample.starts_with(f.as_str()))
            .max_by_key(|f| f.len())
            .unwrap_or_else(|| panic!("a sample of no family: {line}"));
        let shown = if kinds[family] == "counter" {
            format!("{family}_total")
        } else {
            family.clone()
        };
        let labels: BTreeSet<String> = if line[name_end..].starts_with('{') {
            let inner = &line[name_end + 1..line.rfind('}').unwrap()];
            inner
                .split("\",")
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
                .filter(|k| k != "le")
                .collect()
        } else {
            BTreeSet::new()
        };
        series.insert(shown, Some(labels));
    }
    series
}

/// One succeeded run with an action, a waiting run: every documented series is exported
/// with its documented labels and has a sample, nothing undocumented is exported, the run
/// series name the Migration and never a run; every log line of the action's work carries
/// the run, the Migration and the action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_the_docs_and_action_logs_carry_run_migration_and_action() {
    let ns = Scene::cluster("observe").await;
    apply(&statefulset(&ns.name, "ums", 1));
    running_pods(&ns.name, "ums", 1).await;
    let address = format!("127.0.0.1:{}", stagehand_e2e::local_server::free_port());
    let operator = ns.start_operator_with(
        &stagehand_e2e::kubeconfig(),
        &["--metrics-address", &address],
    );
    apply(
        &[
            Migration::new(&ns.name)
                .installed("v1.17.3")
                .pre(Action::scale("ums", 0).tag("v1.18.0"))
                .to_yaml(),
            MigrationRun::new(&ns.name, "pre", "pre").to_yaml(),
            MigrationRun::new(&ns.name, "orphan", "pre")
                .of("no-such-migration")
                .to_yaml(),
        ]
        .join("---\n"),
    );
    wait(&ns.name, "migrationrun/pre", "Ready");
    let succeeded = format!(
        "stagehand_runs_total{{migration_namespace=\"{}\",migration=\"opendesk\",stage=\"pre\",result=\"succeeded\"}} 1",
        ns.name
    );
    let waiting = format!(
        "stagehand_run_phase_start_timestamp_seconds{{migration_namespace=\"{}\",migration=\"no-such-migration\",stage=\"pre\",phase=\"waiting\"}} ",
        ns.name
    );
    let mut body = String::new();
    for _ in 0..100 {
        body = http_get(&address, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        if body.contains(&succeeded) && body.contains(&waiting) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(body.contains(&succeeded), "{body}\n{}", operator.logs());
    assert!(body.contains(&waiting), "{body}");
    for line in [
        format!(
            "stagehand_last_run_result{{migration_namespace=\"{}\",migration=\"opendesk\",stage=\"pre\",result=\"succeeded\"}} 1",
            ns.name
        ),
        format!(
            "stagehand_runs_total{{migration_namespace=\"{}\",migration=\"opendesk\",stage=\"pre\",result=\"terminating\"}} 0",
            ns.name
        ),
        format!(
            "stagehand_actions_total{{migration_namespace=\"{}\",migration=\"opendesk\",action=\"workload_scale\",result=\"succeeded\"}} 1",
            ns.name
        ),
        "stagehand_leader 1".to_string(),
        "stagehand_runs_waiting 1".to_string(),
        "stagehand_reconcile_errors_total{controller=\"migrationrun\"} 0".to_string(),
    ] {
        assert!(body.contains(&line), "{line} missing:\n{body}");
    }
    assert!(
        body.contains("stagehand_kube_client_requests_total{verb=\"patch\",code=\"200\"}"),
        "the status writes are counted: {body}"
    );
    assert!(
        body.contains("stagehand_kube_client_requests_total{verb=\"watch\",code=\"200\"}"),
        "the watches are counted: {body}"
    );
    assert!(!body.contains("run=\""), "no run name is a label:\n{body}");

    let documented = documented_series();
    let exported = exported(&body);
    let undocumented: Vec<&String> = exported
        .keys()
        .filter(|n| !documented.contains_key(*n))
        .collect();
    assert!(
        undocumented.is_empty(),
        "/metrics exports series docs/operator.md#metrics does not list: {undocumented:?}"
    );
    for (name, (_, labels)) in &documented {
        match exported.get(name) {
            None => panic!(
                "docs/operator.md#metrics lists {name}, which /metrics does not export:\n{body}"
            ),
            Some(None) => panic!("{name} has no sample after a run:\n{body}"),
            Some(Some(seen)) => assert_eq!(
                seen, labels,
                "{name}: the labels of /metrics (left) and docs/operator.md (right) differ"
            ),
        }
    }

    // The logs: every line in the action's span carries the run, the Migration and the
    // action, its id and index.
    let logs = operator.logs();
    let action_lines: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["spans"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == "action"))
        })
        .collect();
    let messages: Vec<&str> = action_lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    for expected in ["action started", "action applied; writing its result"] {
        assert!(
            messages.contains(&expected),
            "no line {expected:?} in the action's span: {messages:?}\n{logs}"
        );
    }
    for line in &action_lines {
        let spans = line["spans"].as_array().unwrap();
        let run = spans
            .iter()
            .find(|s| s["name"] == "run")
            .unwrap_or_else(|| panic!("no run span: {line}"));
        assert_eq!(run["run"], "pre", "{line}");
        assert_eq!(run["migration"], "opendesk", "{line}");
        assert_eq!(run["namespace"], ns.name.as_str(), "{line}");
        let action = spans.iter().find(|s| s["name"] == "action").unwrap();
        assert_eq!(action["id"], "workload_scale", "{line}");
        assert_eq!(action["index"], 0, "{line}");
    }
}
