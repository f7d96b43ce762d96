//! The error answers, in the envelope of `write_error`: tornado's `HTTPError`, `NotFound`,
//! `UDM_Error` (`400`) and `UnprocessableEntity` (`422`) with its located details.

use axum::http::{HeaderName, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::answer::answer;
use super::request::Ctx;

/// The error envelope of `write_error`.
pub(super) fn envelope(
    ctx: &Ctx,
    status: StatusCode,
    title: &str,
    message: &str,
    error: Value,
    details: Vec<Value>,
    headers: &[(HeaderName, String)],
) -> Response {
    let code = status.as_u16();
    let mut inner = json!({
        "code": code,
        "title": title,
        "message": message,
        "error": error,
    });
    if code >= 500 {
        inner["traceback"] = Value::Null;
    }
    let mut body = json!({
        "error": inner,
        "_links": {"self": [{"href": ctx.url, "title": format!("HTTP-Error {code}: {title}")}]},
    });
    if !details.is_empty() {
        body["_embedded"] = json!({"udm:error": details});
    }
    let mut headers = headers.to_vec();
    headers.push((
        header::CACHE_CONTROL,
        "private, must-revalidate, no-cache, no-store".into(),
    ));
    answer(ctx, status, body, &headers)
}

/// A tornado `HTTPError`: empty title, `HTTP <code>: <reason> (<log message>)`.
pub(super) fn http_error(ctx: &Ctx, status: StatusCode, log_message: Option<&str>) -> Response {
    let reason = status.canonical_reason().unwrap_or("Unknown");
    let message = match log_message {
        Some(log) => format!("HTTP {}: {reason} ({log})", status.as_u16()),
        None => format!("HTTP {}: {reason}", status.as_u16()),
    };
    envelope(ctx, status, "", &message, json!({}), Vec::new(), &[])
}

/// Python's `repr` of a string.
fn py_repr(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\'', "\\'"))
    }
}

/// `NotFound(object_type, dn)`.
pub(super) fn not_found(ctx: &Ctx, module: &str, dn: &str) -> Response {
    let log = format!("{} {}", py_repr(module), py_repr(dn));
    http_error(ctx, StatusCode::NOT_FOUND, Some(&log))
}

/// A UDM exception outside the mapped ones (`UDM_Error`): `400`, empty title.
pub(super) fn udm_error(ctx: &Ctx, message: &str) -> Response {
    envelope(
        ctx,
        StatusCode::BAD_REQUEST,
        "",
        message,
        json!({}),
        Vec::new(),
        &[],
    )
}

/// A node of an `UnprocessableEntity` result: a message, or keys (a key may be JSON `null`,
/// as the real server's `(properties, None)` location for a `valueError` without property).
pub(super) enum Node {
    Leaf(String),
    Branch(Vec<(Value, Node)>),
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

fn node_json(node: &Node) -> Value {
    match node {
        Node::Leaf(message) => json!(message),
        Node::Branch(items) => Value::Object(
            items
                .iter()
                .map(|(k, v)| (key_text(k), node_json(v)))
                .collect(),
        ),
    }
}

fn walk(node: &Node, key: &Value, location: &[Value], out: &mut Vec<(Vec<Value>, String, String)>) {
    match node {
        Node::Leaf(message) => out.push((location.to_vec(), key_text(key), message.clone())),
        Node::Branch(items) => {
            for (k, v) in items {
                let mut next = location.to_vec();
                next.push(k.clone());
                walk(v, k, &next, out);
            }
        }
    }
}

/// `422 Unprocessable Entity` for the result `{kind: node}` (`kind` is `body` or `query`).
pub(super) fn unprocessable(ctx: &Ctx, kind: &str, node: Node) -> Response {
    let mut leaves = Vec::new();
    walk(&node, &json!(kind), &[json!(kind)], &mut leaves);
    let error = match (&node, kind) {
        (Node::Branch(items), "body") => items
            .iter()
            .find(|(k, _)| k == "properties")
            .map(|(_, v)| node_json(v))
            .unwrap_or_else(|| json!({kind: node_json(&node)})),
        (_, "query") => node_json(&node),
        _ => json!({kind: node_json(&node)}),
    };
    let summary: String = leaves
        .iter()
        .map(|(_, key, message)| format!("Request argument \"{key}\" {message}\n"))
        .collect();
    let head = leaves
        .iter()
        .map(|(_, _, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let details = leaves
        .iter()
        .map(|(location, _, message)| {
            json!({"location": location, "message": message, "type": "value_error"})
        })
        .collect();
    envelope(
        ctx,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Unprocessable Entity",
        &format!("{head}:\n{summary}"),
        error,
        details,
        &[],
    )
}

/// `422` at `body.properties.<name>` for each `(name, message)`.
pub(super) fn invalid_properties(ctx: &Ctx, errors: Vec<(String, String)>) -> Response {
    let branch = errors
        .into_iter()
        .map(|(name, message)| (json!(name), Node::Leaf(message)))
        .collect();
    unprocessable(
        ctx,
        "body",
        Node::Branch(vec![(json!("properties"), Node::Branch(branch))]),
    )
}

/// `value` when `errors` is empty, else `422` at `body.properties.<name>` for each of them.
pub(super) fn all_valid<T>(
    ctx: &Ctx,
    errors: Vec<(String, String)>,
    value: T,
) -> Result<T, Response> {
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(invalid_properties(ctx, errors))
    }
}

/// `422` at `<kind>.<field>`.
fn invalid_field(ctx: &Ctx, kind: &str, field: Value, message: &str) -> Response {
    unprocessable(
        ctx,
        kind,
        Node::Branch(vec![(field, Node::Leaf(message.into()))]),
    )
}

/// `422` at `query.<field>`.
pub(super) fn invalid_query(ctx: &Ctx, field: &str, message: &str) -> Response {
    invalid_field(ctx, "query", json!(field), message)
}

/// `422` at `body.<field>`.
pub(super) fn invalid_body(ctx: &Ctx, field: &str, message: &str) -> Response {
    invalid_field(ctx, "body", json!(field), message)
}

/// `422` for an object that exists: `Object exists: <what>: <detail>` at `body.dn`.
pub(super) fn object_exists(ctx: &Ctx, what: &str, detail: &str) -> Response {
    invalid_body(ctx, "dn", &format!("Object exists: {what}: {detail}"))
}

/// `422` for a DN another object has.
pub(super) fn dn_exists(ctx: &Ctx, dn: &str) -> Response {
    object_exists(ctx, &format!("dn: {dn}"), &format!("Object exists. {dn}"))
}

/// Python's name of the JSON value's type, as the sanitizer's messages give it.
pub(super) fn py_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}
