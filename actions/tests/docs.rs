//! docs/actions.md documents every action and every config key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use stagehand_actions::ACTION_IDS;

fn keys(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if sub.get("properties").is_some() {
                keys(sub, &path, out);
            } else {
                out.push(path);
            }
        }
    }
}

#[test]
fn every_action_and_key_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/actions.md"))
        .unwrap();
    let schemas = stagehand_actions::config_schemas();
    assert_eq!(schemas.len(), ACTION_IDS.len());
    for (id, schema) in schemas {
        let section = doc
            .split(&format!("## `{id}`"))
            .nth(1)
            .unwrap_or_else(|| panic!("docs/actions.md has no section for {id}"));
        let section = section.split("\n## ").next().unwrap();
        let mut found = Vec::new();
        keys(&schema, "", &mut found);
        assert!(!found.is_empty(), "{id} has config keys");
        for key in found {
            assert!(
                section.contains(&format!("`{key}`")),
                "docs/actions.md: {id} does not document `{key}`"
            );
        }
    }
}
