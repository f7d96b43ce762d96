//! The chart's PrometheusRule (`deploy/charts/stagehand/templates/prometheusrule.yaml`) with Prometheus'
//! own tooling: `promtool check rules` on the rendered rules and `promtool test rules` with
//! the unit tests of `e2e/prometheus/rules.test.yaml`, whose input series are those of
//! `e2e/prometheus/metrics-fixture.txt` — the `/metrics` output of a real operator — and a
//! test that the fixture's metrics and labels are still what a running operator exports, so
//! neither the rules nor their tests can drift from the metrics. The chart's Grafana dashboard
//! (`dashboard.enabled`) is rendered too, and each of its queries must read series that
//! docs/operator.md#metrics lists (`observability.rs` checks that list against a running
//! operator).
//!
//! promtool is built by `e2e/prometheus/build` (e2e/test passes its path as
//! `STAGEHAND_PROMTOOL_BIN`). Recapture the fixture with
//! `STAGEHAND_CAPTURE_METRICS_FIXTURE=1 cargo test -p stagehand-e2e --test alerts`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{Scene, apply, ok, wait};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A binary one of our build scripts prints as the last line of its stdout.
fn built(env: &str, script: &str, args: &[&str]) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return PathBuf::from(path);
    }
    let out = Command::new(root().join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let text = ok(script, &out);
    PathBuf::from(
        text.lines()
            .last()
            .unwrap_or_else(|| panic!("{script} printed no path")),
    )
}

fn promtool() -> PathBuf {
    built("STAGEHAND_PROMTOOL_BIN", "e2e/prometheus/build", &[])
}

/// Runs `promtool ARGS` in `dir` (its rule and test files there).
fn promtool_in(dir: &std::path::Path, args: [&str; 3]) -> std::process::Output {
    Command::new(promtool())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// The rule groups of the chart's PrometheusRule, as `helm template` renders them with the
/// default values in `stagehand-system` (the namespace the unit tests' series carry).
fn rendered_rules() -> serde_norway::Value {
    let helm = built("STAGEHAND_HELM_BIN", "e2e/cluster/build-helm", &[]);
    let out = Command::new(helm)
        .current_dir(root())
        .args([
            "template",
            "stagehand",
            "deploy/charts/stagehand",
            "--namespace",
            "stagehand-system",
            "--set",
            "prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])
        .output()
        .expect("running helm");
    let doc: serde_norway::Value = serde_norway::from_str(&ok("helm template", &out)).unwrap();
    assert_eq!(doc["kind"], "PrometheusRule", "{doc:?}");
    assert_eq!(doc["apiVersion"], "monitoring.coreos.com/v1");
    doc["spec"].clone()
}

/// `name{label="value",...} 1` or `name 1` or a selector `name{...}`: the name and labels.
fn parse_series(line: &str) -> (String, BTreeMap<String, String>) {
    let line = line.trim();
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    if line[name_end..].starts_with('{') {
        let mut rest = &line[name_end + 1..];
        while !rest.starts_with('}') {
            let eq = rest
                .find('=')
                .unwrap_or_else(|| panic!("bad series {line}"));
            let key = rest[..eq].trim().to_string();
            rest = &rest[eq + 1..];
            assert!(rest.starts_with('"'), "bad series {line}");
            let mut value = String::new();
            let mut chars = rest[1..].char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => {
                        if let Some((_, c)) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some((i, '"')) => break i + 2,
                    Some((_, c)) => value.push(c),
                    None => panic!("bad series {line}"),
                }
            };
            labels.insert(key, value);
            rest = rest[end..].trim_start_matches(',').trim_start();
        }
    }
    (name, labels)
}

/// Every sample's metric name with the names of its labels, in an exposition text.
fn shapes(text: &str) -> BTreeSet<(String, BTreeSet<String>)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, labels) = parse_series(l);
            (name, labels.into_keys().collect())
        })
        .collect()
}

/// The chart's Grafana dashboard (`dashboard.enabled=true`): a ConfigMap with the sidecar's
/// label holding `files/dashboard.json`, whose every query reads only series that
/// docs/operator.md#metrics lists (and `observability.rs` checks a running operator exports).
#[test]
fn the_dashboard_ships_when_asked_and_queries_only_exported_series() {
    let _scene = Scene::offline();
    let helm = built("STAGEHAND_HELM_BIN", "e2e/cluster/build-helm", &[]);
    let render = |extra: &[&str]| {
        let out = Command::new(&helm)
            .current_dir(root())
            .args([
                "template",
                "stagehand",
                "deploy/charts/stagehand",
                "-n",
                "stagehand-system",
            ])
            .args(extra)
            .output()
            .expect("running helm");
        ok("helm template", &out)
    };
    assert!(
        !render(&[]).contains("grafana_dashboard"),
        "no dashboard unless asked"
    );
    let text = render(&[
        "--set",
        "dashboard.enabled=true",
        "--show-only",
        "templates/dashboard.yaml",
    ]);
    let map: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(map["kind"], "ConfigMap", "{text}");
    assert_eq!(
        map["metadata"]["labels"]["grafana_dashboard"], "1",
        "{text}"
    );
    let shipped: serde_json::Value =
        serde_json::from_str(map["data"]["stagehand.json"].as_str().unwrap()).unwrap();
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/charts/stagehand/files/dashboard.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file, "the ConfigMap holds files/dashboard.json");

    let documented = stagehand_e2e::metrics_docs::documented_series();
    let histograms: BTreeSet<String> = documented
        .iter()
        .filter(|(_, (kind, _))| kind == "histogram")
        .map(|(n, _)| n.clone())
        .collect();
    // Every expression of the dashboard: the panels' targets and the variables' queries.
    let mut exprs = Vec::new();
    let panels = file["panels"].as_array().unwrap();
    for panel in panels {
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        exprs.extend(
            targets
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_string()),
        );
    }
    for variable in file["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            exprs.push(query.to_string());
        }
    }
    let mut read = BTreeSet::new();
    for expr in &exprs {
        let series = stagehand_e2e::metrics_docs::promql_series(expr, &histograms);
        assert!(!series.is_empty(), "{expr} reads no stagehand series");
        for name in series {
            assert!(
                documented.contains_key(&name),
                "the dashboard queries {name} ({expr}), which docs/operator.md#metrics does not list and the operator does not export"
            );
            read.insert(name);
        }
    }
    dashboard_queries_run_in_prometheus(panels);
    // What the issue asked the dashboard to show.
    for needed in [
        "stagehand_runs_total",
        "stagehand_actions_running",
        "stagehand_action_progress_done",
        "stagehand_action_progress_ratio",
        "stagehand_action_duration_seconds",
        "stagehand_reconcile_errors_total",
        "stagehand_leader",
    ] {
        assert!(read.contains(needed), "the dashboard shows no {needed}");
    }
    // The alerts read documented series too.
    let rules = rendered_rules();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            for name in stagehand_e2e::metrics_docs::promql_series(expr, &histograms) {
                assert!(
                    documented.contains_key(&name),
                    "{expr}: {name} is not documented"
                );
            }
        }
    }
}

/// Every panel's query (its Grafana variables filled in) as a recording rule that
/// `promtool check rules` parses, and the "Running actions with progress" panel evaluated by
/// `promtool test rules`: a running action's figures are shown, a finished one's are not.
/// (The variables' own queries, `label_values(...)`, are Grafana's, not PromQL.)
fn dashboard_queries_run_in_prometheus(panels: &[serde_json::Value]) {
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    let grafana = |e: &str| {
        e.replace("$migration_namespace", ".*")
            .replace("$__rate_interval", "5m")
    };
    let mut rules = Vec::new();
    for (i, expr) in exprs.iter().enumerate() {
        rules.push(
            serde_json::json!({"record": format!("dashboard_query_{i}"), "expr": grafana(expr)}),
        );
    }
    let panel = panels
        .iter()
        .find(|p| p["title"] == "Running actions with progress")
        .expect("the dashboard has a panel \"Running actions with progress\"");
    for target in panel["targets"].as_array().unwrap() {
        let reference = target["refId"].as_str().unwrap();
        rules.push(serde_json::json!({
            "record": format!("dashboard_progress_{reference}"),
            "expr": grafana(target["expr"].as_str().unwrap()),
        }));
    }
    let scene = Scene::offline();
    let dir = scene.dir();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(
        dir.join("dashboard.rules.yaml"),
        serde_norway::to_string(&file).unwrap(),
    )
    .unwrap();
    let check = promtool_in(&dir, ["check", "rules", "dashboard.rules.yaml"]);
    let said = ok("promtool check rules (the dashboard's queries)", &check);
    assert!(
        said.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{said}"
    );

    let running = "migration_namespace=\"tenant-a\",migration=\"opendesk\",stage=\"pre\",action=\"ox_functional_accounts_export\"";
    let finished = "migration_namespace=\"tenant-b\",migration=\"opendesk\",stage=\"pre\",action=\"ldap_entryuuid_to_object_identifier\"";
    let series = |name: &str, labels: &str, values: &str| serde_json::json!({"series": format!("{name}{{{labels}}}"), "values": values});
    let tests = serde_json::json!({
        "rule_files": ["dashboard.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                series("stagehand_actions_running", running, "1x3"),
                series("stagehand_action_progress_done", running, "0 700 2100 2100"),
                series("stagehand_action_progress_ratio", running, "0 0.14 0.42 0.42"),
                series("stagehand_actions_running", finished, "1 0 0 0"),
                series("stagehand_action_progress_done", finished, "20 0 0 0"),
                series("stagehand_action_progress_ratio", finished, "0.5 0 0 0"),
            ],
            "promql_expr_test": [
                {"expr": "dashboard_progress_B", "eval_time": "2m",
                 "exp_samples": [{"labels": format!("dashboard_progress_B{{{running}}}"), "value": 2100}]},
                {"expr": "dashboard_progress_C", "eval_time": "2m",
                 "exp_samples": [{"labels": format!("dashboard_progress_C{{{running}}}"), "value": 0.42}]},
                {"expr": "dashboard_progress_B", "eval_time": "0m",
                 "exp_samples": [
                     {"labels": format!("dashboard_progress_B{{{running}}}"), "value": 0},
                     {"labels": format!("dashboard_progress_B{{{finished}}}"), "value": 20},
                 ]},
            ],
        }],
    });
    std::fs::write(
        dir.join("dashboard.test.yaml"),
        serde_norway::to_string(&tests).unwrap(),
    )
    .unwrap();
    let test = promtool_in(&dir, ["test", "rules", "dashboard.test.yaml"]);
    ok(
        "promtool test rules (the dashboard's progress panel)",
        &test,
    );
}

fn fixture_path() -> PathBuf {
    root().join("e2e/prometheus/metrics-fixture.txt")
}

fn fixture() -> String {
    std::fs::read_to_string(fixture_path()).expect("reading e2e/prometheus/metrics-fixture.txt")
}

#[test]
fn promtool_checks_and_unit_tests_the_chart_rules() {
    let scene = Scene::offline();
    let dir = scene.dir();
    std::fs::write(
        dir.join("rules.yaml"),
        serde_norway::to_string(&rendered_rules()).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("e2e/prometheus/rules.test.yaml"),
        dir.join("rules.test.yaml"),
    )
    .unwrap();
    let check = promtool_in(&dir, ["check", "rules", "rules.yaml"]);
    let said = ok("promtool check rules", &check);
    assert!(said.contains("SUCCESS: 5 rules found"), "{said}");
    let test = promtool_in(&dir, ["test", "rules", "rules.test.yaml"]);
    ok("promtool test rules", &test);
}

#[test]
fn the_rules_and_their_tests_use_only_series_the_operator_exports() {
    let _scene = Scene::offline();
    let known = shapes(&fixture());
    let names: BTreeSet<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
    // The unit tests' input series: a name and label names of the fixture (plus the
    // `namespace` the scrape adds).
    let tests: serde_norway::Value = serde_norway::from_str(
        &std::fs::read_to_string(root().join("e2e/prometheus/rules.test.yaml")).unwrap(),
    )
    .unwrap();
    let mut used = 0;
    for test in tests["tests"].as_sequence().unwrap() {
        for input in test["input_series"].as_sequence().unwrap() {
            let (name, mut labels) = parse_series(input["series"].as_str().unwrap());
            labels.remove("namespace");
            let shape = (name, labels.into_keys().collect::<BTreeSet<_>>());
            assert!(
                known.contains(&shape),
                "rules.test.yaml uses {shape:?}, which the operator's /metrics (metrics-fixture.txt) does not have:\n{known:#?}"
            );
            used += 1;
        }
    }
    assert!(used > 0);
    // Every metric a rule's expression names.
    let rules = rendered_rules();
    let mut alerts = Vec::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("stagehand_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                assert!(
                    names.contains(&tail[..end]),
                    "{} uses {}, which the operator's /metrics does not have",
                    rule["alert"].as_str().unwrap(),
                    &tail[..end]
                );
                rest = &tail[end..];
            }
            alerts.push(rule["alert"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        alerts,
        [
            "StagehandRunFailed",
            "StagehandRunWaitingTooLong",
            "StagehandRunRunningTooLong",
            "StagehandNotLeading",
            "StagehandReconcileErrors"
        ]
    );
}

/// The results a run can end with: the Ready reasons of docs/operator.md's condition table
/// whose `Reconciling` is False, in lower case (as `stagehand_runs_total` names them).
fn terminal_results() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/operator.md")).unwrap();
    let results: Vec<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // | reason | Ready | Reconciling | Stalled | Succeeded | when |
            (cells.len() == 8 && cells[3] == "False")
                .then(|| cells[1].trim_matches('`').to_ascii_lowercase())
        })
        .collect();
    assert!(
        results.contains(&"terminating".to_string()) && results.len() >= 10,
        "the condition table of docs/operator.md was not found: {results:?}"
    );
    results
}

fn scrape(address: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default()
}

/// A run that fails on its action, one that waits (its Migration does not exist), leadership:
/// every series the rules and their tests use appears, and the fixture's metrics still exist
/// with the same labels.
#[tokio::test]
async fn the_fixture_is_what_a_running_operator_exports() {
    let ns = Scene::cluster("alerts").await;
    let address = format!("127.0.0.1:{}", stagehand_e2e::local_server::free_port());
    let operator = ns.start_operator_with(
        &stagehand_e2e::kubeconfig(),
        &["--metrics-address", &address],
    );
    let failing = Migration::new(&ns.name)
        .installed("v1.17.3")
        .pre(Action::scale_without_timeout("ox-connector-missing", 0).tag("v1.18.0"));
    let run = MigrationRun::new(&ns.name, "opendesk-v1.18.0-pre", "pre");
    let orphan = MigrationRun::new(&ns.name, "orphan", "pre").of("no-such-migration");
    apply(&[failing.to_yaml(), run.to_yaml(), orphan.to_yaml()].join("---\n"));
    wait(&ns.name, "migrationrun/opendesk-v1.18.0-pre", "Stalled");
    let waiting = format!(
        "{{migration_namespace=\"{}\",migration=\"no-such-migration\",stage=\"pre\",phase=\"waiting\"}}",
        ns.name
    );
    let group = format!(
        "migration_namespace=\"{}\",migration=\"opendesk\",stage=\"pre\"",
        ns.name
    );
    let failed = format!("stagehand_last_run_result{{{group},result=\"failed\"}} 1");
    let mut body = String::new();
    for _ in 0..100 {
        body = scrape(&address);
        if body.contains(&waiting) && body.contains(&failed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(body.contains("stagehand_leader 1"), "{body}");
    assert!(body.contains(&waiting), "{body}\n{}", operator.logs());
    assert!(body.contains(&failed), "{body}");
    assert!(
        body.contains(&format!(
            "stagehand_runs_total{{{group},result=\"failed\"}} 1"
        )),
        "{body}"
    );
    // What the alerts read exists before its first event: every other result of the
    // Migration's runs at 0 (`terminating` among them), both controllers' error counters.
    for result in terminal_results().iter().filter(|r| r.as_str() != "failed") {
        for name in ["stagehand_last_run_result", "stagehand_runs_total"] {
            let line = format!("{name}{{{group},result=\"{result}\"}} 0");
            assert!(body.contains(&line), "{line} is not pre-set:\n{body}");
        }
    }
    // A Migration none of whose runs has finished yet (the orphan waits): every result is
    // there at 0 already, so the first failure is a change an alert sees, not a new series.
    let unfinished = format!(
        "migration_namespace=\"{}\",migration=\"no-such-migration\",stage=\"pre\"",
        ns.name
    );
    for result in terminal_results() {
        for name in ["stagehand_last_run_result", "stagehand_runs_total"] {
            let line = format!("{name}{{{unfinished},result=\"{result}\"}} 0");
            assert!(
                body.contains(&line),
                "{line} is not pre-set before the first run finishes:\n{body}"
            );
        }
    }
    for controller in ["migrationrun", "migration"] {
        let line = format!("stagehand_reconcile_errors_total{{controller=\"{controller}\"}} ");
        assert!(body.contains(&line), "{line} is not pre-set:\n{body}");
    }
    if std::env::var_os("STAGEHAND_CAPTURE_METRICS_FIXTURE").is_some() {
        std::fs::write(fixture_path(), &body).unwrap();
        eprintln!("wrote {}", fixture_path().display());
    }
    let live = shapes(&body);
    let missing: Vec<_> = shapes(&fixture()).difference(&live).cloned().collect();
    assert!(
        missing.is_empty(),
        "metrics-fixture.txt has series the operator no longer exports (rename them in the rules and rules.test.yaml, then recapture): {missing:?}\nlive /metrics:\n{body}"
    );
}
