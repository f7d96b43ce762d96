//! docs/argocd/health.lua, run by a real Lua interpreter (`lua5.4`) on the objects the
//! operator writes: Stalled is Degraded, Ready is Healthy, the rest Progressing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::{Value, json};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/argocd/health.lua");

/// A JSON value as a Lua table constructor.
fn lua(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!(
            "{{{}}}",
            items.iter().map(lua).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("[{k:?}] = {}", lua(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn health(obj: &Value) -> (String, String) {
    let program = format!(
        "obj = {}\nlocal hs = dofile({SCRIPT:?})\nio.write(hs.status, \"\\n\", hs.message or \"\")",
        lua(obj)
    );
    let out = Command::new("lua5.4")
        .args(["-e", &program])
        .output()
        .expect("lua5.4 is installed (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (status, message) = text.split_once('\n').unwrap();
    (status.to_string(), message.to_string())
}

fn run(conditions: Value) -> Value {
    json!({"apiVersion": "stagehand.dev/v1beta1", "kind": "MigrationRun", "metadata": {"generation": 1},
           "status": {"observedGeneration": 1, "conditions": conditions}})
}

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message})
}

#[test]
fn health_follows_the_conditions() {
    assert_eq!(
        health(&json!({"metadata": {}})).0,
        "Progressing",
        "no status yet"
    );
    let waiting = run(json!([
        cond("Ready", "False", "Waiting", "waiting for the pre run"),
        cond("Reconciling", "True", "Waiting", ""),
        cond("Stalled", "False", "Waiting", "")
    ]));
    assert_eq!(
        health(&waiting),
        (
            "Progressing".into(),
            "Waiting: waiting for the pre run".into()
        )
    );
    let ok = run(json!([
        cond("Ready", "True", "Succeeded", "1 action(s) declared, 1 run"),
        cond("Stalled", "False", "Succeeded", ""),
        cond("Succeeded", "True", "Succeeded", "")
    ]));
    assert_eq!(health(&ok).0, "Healthy");
    let failed = run(json!([
        cond("Ready", "False", "Failed", "x"),
        cond(
            "Stalled",
            "True",
            "Failed",
            "action 0 workload_scale failed: timed out"
        )
    ]));
    assert_eq!(
        health(&failed),
        (
            "Degraded".into(),
            "action 0 workload_scale failed: timed out".into()
        )
    );
    let mut stale = ok.clone();
    stale["metadata"]["generation"] = json!(2);
    assert_eq!(
        health(&stale).0,
        "Progressing",
        "a change not yet observed is not Healthy"
    );
    let invalid_migration = json!({"kind": "Migration", "status": {"conditions": [cond("Ready", "False", "Invalid", "2 problem(s)"), cond("Stalled", "True", "Invalid", "2 problem(s): ...")]}});
    assert_eq!(health(&invalid_migration).0, "Degraded");
}
