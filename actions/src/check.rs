//! Config checking against the typed config: every unknown key, missing key and wrong type
//! at once (walking the config's JSON schema), then the type's own rules.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};
use stagehand_config::ConfigIssue;

use crate::action::ActionConfig;

/// Everything wrong with `config` for the action `T` (empty when valid).
pub fn issues<T: ActionConfig>(config: &Value) -> Vec<ConfigIssue> {
    let schema = schema_of::<T>();
    let mut found = Vec::new();
    walk(&schema, config, "", &mut found);
    if !found.is_empty() {
        return found;
    }
    // The schema walk found nothing; the deserializer has the last word.
    match parse::<T>(config) {
        Ok(typed) => typed.semantic_issues(),
        Err(issue) => vec![issue],
    }
}

/// Deserializes a config, naming the key path on failure.
pub fn parse<T: ActionConfig>(config: &Value) -> Result<T, ConfigIssue> {
    serde_path_to_error::deserialize(config).map_err(|e| {
        let path = e.path().to_string();
        ConfigIssue {
            path: if path == "." { String::new() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}

/// The config's JSON schema with every subschema inlined.
pub fn schema_of<T: ActionConfig>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    generator.into_root_schema_for::<T>().to_value()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn has_type(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

fn walk(schema: &Value, value: &Value, path: &str, found: &mut Vec<ConfigIssue>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    let at = |message: String| ConfigIssue {
        path: path.to_string(),
        message,
    };
    if let Some(options) = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)
    {
        let fits = options.iter().any(|o| {
            let mut sub = Vec::new();
            walk(o, value, path, &mut sub);
            sub.is_empty()
        });
        if !fits {
            let allowed: Vec<String> = options.iter().flat_map(allowed_values).collect();
            found.push(at(if allowed.is_empty() {
                format!("{} does not fit any accepted form", type_name(value))
            } else {
                format!("{value} is not one of {}", allowed.join(", "))
            }));
        }
        return;
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| has_type(value, t)) {
        let expected: Vec<String> = types
            .iter()
            .filter(|t| **t != "null")
            .map(|t| describe_type(t))
            .collect();
        found.push(at(format!(
            "must be {}, not {} ({value})",
            expected.join(" or "),
            type_name(value)
        )));
        return;
    }
    if let Some(allowed) = schema
        .get("enum")
        .and_then(Value::as_array)
        .filter(|a| !a.contains(value))
    {
        let names: Vec<String> = allowed.iter().map(Value::to_string).collect();
        found.push(at(format!("{value} is not one of {}", names.join(", "))));
    }
    if let Some(constant) = schema.get("const").filter(|c| *c != value) {
        found.push(at(format!("must be {constant}, not {value}")));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema
            .get("minimum")
            .and_then(Value::as_f64)
            .filter(|m| n < *m)
        {
            found.push(at(format!("{value} is below the minimum {min}")));
        }
        if let Some(max) = schema
            .get("maximum")
            .and_then(Value::as_f64)
            .filter(|m| n > *m)
        {
            found.push(at(format!("{value} is above the maximum {max}")));
        }
    }
    if let (Some(s), Some(min)) = (
        value.as_str(),
        schema.get("minLength").and_then(Value::as_u64),
    ) && (s.chars().count() as u64) < min
    {
        found.push(at("must not be empty".to_string()));
    }
    match value {
        Value::Object(map) => walk_object(schema, map, path, found),
        Value::Array(items) => {
            if let Some(min) = schema
                .get("minItems")
                .and_then(Value::as_u64)
                .filter(|m| (items.len() as u64) < *m)
            {
                found.push(at(format!("needs at least {min} entries")));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), found);
                }
            }
        }
        _ => {}
    }
}

fn walk_object(
    schema: &Map<String, Value>,
    map: &Map<String, Value>,
    path: &str,
    found: &mut Vec<ConfigIssue>,
) {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required
            .iter()
            .filter_map(Value::as_str)
            .filter(|k| !map.contains_key(*k))
        {
            found.push(ConfigIssue {
                path: join(path, key),
                message: format!("{key} is required and has no default"),
            });
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (key, value) in map {
        match properties.get(key) {
            Some(sub) => walk(sub, value, &join(path, key), found),
            None if closed => {
                let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                found.push(ConfigIssue {
                    path: join(path, key),
                    message: format!("unknown key {key:?}: expected one of {}", known.join(", ")),
                });
            }
            None => {}
        }
    }
}

fn allowed_values(option: &Value) -> Vec<String> {
    if let Some(c) = option.get("const") {
        return vec![c.to_string()];
    }
    option
        .get("enum")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Value::to_string).collect())
        .unwrap_or_default()
}

fn describe_type(ty: &str) -> String {
    match ty {
        "object" => "a mapping".into(),
        "array" => "a list".into(),
        "integer" => "an integer".into(),
        other => format!("a {other}"),
    }
}
