//! How the UDM simulator answers requests: authentication, content negotiation, routing, the
//! handlers of the collection and object resources, and the error envelope of `write_error`.

// An `Err` here is the finished answer to the request, built once per request: boxing it
// would only add noise.
#![allow(clippy::result_large_err)]

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use serde_json::{Map, Value, json};

use super::filter::{self, Filter};
use super::modules::{self, ModuleDef};
use super::{
    API_PATH, Login, Stored, Udm, escape_rdn_value, http_date, lock, norm_dn, parent_dn,
    promote_due, quote_dn,
};
use crate::http::{Protocol, SimRequest, percent_decode};

/// The answer formats of `check_acceptable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Html,
    Json,
    HalJson,
}

/// What every answer needs to know about its request.
struct Ctx {
    /// `http://host:port`, from the `Host` header.
    origin: String,
    lang: Lang,
    base: String,
    /// The request URL, for the error's `self` link.
    url: String,
}

impl Ctx {
    fn api(&self) -> String {
        format!("{}{API_PATH}/", self.origin)
    }

    fn object_uri(&self, module: &str, dn: &str) -> String {
        format!("{}{API_PATH}/{module}/{}", self.origin, quote_dn(dn))
    }
}

// ---------------------------------------------------------------------------------------
// Responses

fn build(
    status: StatusCode,
    headers: &[(HeaderName, String)],
    body: Option<(&str, Vec<u8>)>,
) -> Response {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            builder = builder.header(name, value);
        }
    }
    let body = match body {
        Some((content_type, bytes)) => {
            builder = builder.header(header::CONTENT_TYPE, content_type);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    builder.body(body).unwrap_or_default()
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Answers `body` in the negotiated format (JSON adds the `curies` link like `get_json`).
fn answer(
    ctx: &Ctx,
    status: StatusCode,
    mut body: Value,
    headers: &[(HeaderName, String)],
) -> Response {
    if let Value::Object(map) = &mut body {
        let links = map.entry("_links").or_insert_with(|| json!({}));
        if let Value::Object(links) = links {
            links.insert(
                "curies".into(),
                json!([{"name": "udm", "href": format!("{}relation/{{rel}}", ctx.api()), "templated": true}]),
            );
        }
        if ctx.lang == Lang::HalJson {
            map.entry("_embedded").or_insert_with(|| json!({}));
        }
    }
    let mut headers = headers.to_vec();
    headers.push((
        header::VARY,
        "Accept, Accept-Language, Accept-Encoding, Authorization".into(),
    ));
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    match ctx.lang {
        Lang::Json => build(status, &headers, Some(("application/json", bytes))),
        Lang::HalJson => build(status, &headers, Some(("application/hal+json", bytes))),
        Lang::Html => {
            let pretty = serde_json::to_string_pretty(&body).unwrap_or_default();
            let page = format!(
                "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Univention Directory Manager REST API</title></head>\n<body><h1>Univention Directory Manager REST API</h1>\n<p>This is the HTML view. Send <code>Accept: application/json</code> for JSON.</p>\n<pre>{}</pre></body></html>\n",
                html_escape(&pretty)
            );
            build(
                status,
                &headers,
                Some(("text/html; charset=UTF-8", page.into_bytes())),
            )
        }
    }
}

/// `401` with the Basic challenge and no body (`force_authorization`).
fn force_authorization() -> Response {
    build(
        StatusCode::UNAUTHORIZED,
        &[(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"Univention Management Console\"".into(),
        )],
        Some(("text/html; charset=UTF-8", Vec::new())),
    )
}

/// The error envelope of `write_error`.
fn envelope(
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
fn http_error(ctx: &Ctx, status: StatusCode, log_message: Option<&str>) -> Response {
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
fn not_found(ctx: &Ctx, module: &str, dn: &str) -> Response {
    let log = format!("{} {}", py_repr(module), py_repr(dn));
    http_error(ctx, StatusCode::NOT_FOUND, Some(&log))
}

/// A UDM exception outside the mapped ones (`UDM_Error`): `400`, empty title.
fn udm_error(ctx: &Ctx, message: &str) -> Response {
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
enum Node {
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
fn unprocessable(ctx: &Ctx, kind: &str, node: Node) -> Response {
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
fn invalid_properties(ctx: &Ctx, errors: Vec<(String, String)>) -> Response {
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

/// `422` at `<kind>.<field>`.
fn invalid_field(ctx: &Ctx, kind: &str, field: Value, message: &str) -> Response {
    unprocessable(
        ctx,
        kind,
        Node::Branch(vec![(field, Node::Leaf(message.into()))]),
    )
}

fn object_exists(ctx: &Ctx, what: &str, detail: &str) -> Response {
    invalid_field(
        ctx,
        "body",
        json!("dn"),
        &format!("Object exists: {what}: {detail}"),
    )
}

// ---------------------------------------------------------------------------------------
// Request parsing

fn header_str<'a>(request: &'a SimRequest, name: &HeaderName) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// `check_acceptable`: the answer format, or the `406` message.
fn negotiate(request: &SimRequest, html_enabled: bool) -> Result<Lang, &'static str> {
    let accept = header_str(request, &header::ACCEPT).unwrap_or("text/html");
    let mut langs: Vec<(String, f32)> = accept
        .split(',')
        .map(|item| {
            let mut parts = item.trim().split(';');
            let name = parts.next().unwrap_or("").trim().to_string();
            let q = parts
                .map(str::trim)
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (name, q)
        })
        .collect();
    langs.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
    let mut lang = None;
    for (name, q) in langs {
        if q <= 0.0 {
            continue;
        }
        lang = match name.as_str() {
            "text/html" | "text/xml" | "application/xml" | "text/*" | "*/*" => Some(Lang::Html),
            "application/hal+json" | "application/*" => Some(Lang::HalJson),
            "application/json" => Some(Lang::Json),
            _ => continue,
        };
        break;
    }
    match lang {
        None => Err("The requested Content-Type does not exists. Specify a valid Accept header."),
        Some(Lang::Html) if !html_enabled => Err(
            "The unsupported HTML view of the UDM REST API is disabled. Please use the JSON interface via the \"Accept: application/json\" HTTP header or enable it via the UCR variable \"directory/manager/rest/html-view-enabled\". To get a developer overview the OpenAPI schema interface can be reached at /univention/udm/schema/.",
        ),
        Some(lang) => Ok(lang),
    }
}

/// The user and password of a Basic header; `None` when malformed or either is empty.
fn parse_basic(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    // ISO-8859-1, as the real server decodes it.
    let decoded: String = decoded.iter().map(|&b| b as char).collect();
    let (user, password) = decoded.split_once(':')?;
    if user.is_empty() || password.is_empty() {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

/// Query string pairs, `+` and percent escapes decoded.
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

/// Parses entity tags of `If-Match`/`If-None-Match` (`*`, `"x"`, `W/"x"`).
fn entity_tags(value: &str) -> Vec<String> {
    let mut tags = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find(['*', '"', 'W']) {
        rest = &rest[start..];
        if let Some(r) = rest.strip_prefix('*') {
            tags.push("*".to_string());
            rest = r;
        } else if let Some(r) = rest.strip_prefix("W/\"").or_else(|| rest.strip_prefix('"')) {
            match r.find('"') {
                Some(end) => {
                    tags.push(format!("\"{}\"", &r[..end]));
                    rest = &r[end + 1..];
                }
                None => break,
            }
        } else {
            rest = &rest[1..];
        }
    }
    tags
}

/// `check_conditional_request_etag`: `Err` with the answer when a precondition fails.
fn check_preconditions(ctx: &Ctx, request: &SimRequest, etag: &str) -> Result<(), Response> {
    let safe = matches!(request.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if let Some(value) = header_str(request, &header::IF_NONE_MATCH) {
        let tags = entity_tags(value);
        if tags.is_empty() {
            return Err(http_error(
                ctx,
                StatusCode::BAD_REQUEST,
                Some("Invalid \"If-None-Match\" syntax."),
            ));
        }
        if tags.iter().any(|t| t == "*" || t == etag) {
            if safe {
                return Err(build(
                    StatusCode::NOT_MODIFIED,
                    &[(header::ETAG, etag.into())],
                    None,
                ));
            }
            let message = format!(
                "The resource has meanwhile been changed. If-None-Match {} does not match entity tag {etag}.",
                tags.join(", ")
            );
            return Err(http_error(
                ctx,
                StatusCode::PRECONDITION_FAILED,
                Some(&message),
            ));
        }
    }
    if let Some(value) = header_str(request, &header::IF_MATCH) {
        let tags = entity_tags(value);
        if tags.is_empty() {
            return Err(http_error(
                ctx,
                StatusCode::BAD_REQUEST,
                Some("Invalid \"If-Match\" syntax."),
            ));
        }
        if !safe && !tags.iter().any(|t| t == "*" || t == etag) {
            let message = format!(
                "The resource has meanwhile been changed. If-Match {} does not match entity tag {etag}.",
                tags.join(", ")
            );
            return Err(http_error(
                ctx,
                StatusCode::PRECONDITION_FAILED,
                Some(&message),
            ));
        }
    }
    Ok(())
}

fn py_type(value: &Value) -> &'static str {
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

fn is_empty_value(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// `PropertiesSanitizer`: unknown properties and values of the wrong type, as `422` at
/// `body.properties.<name>`; coerces integers and lower-cases what the module lower-cases.
fn sanitize(
    ctx: &Ctx,
    def: &ModuleDef,
    properties: &Map<String, Value>,
) -> Result<Map<String, Value>, Response> {
    let mut errors = Vec::new();
    let mut out = Map::new();
    for (name, value) in properties {
        if !def.has_property(name) && name != "objectFlag" {
            errors.push((
                name.clone(),
                format!("The {} module has no property {name}.", def.title),
            ));
            continue;
        }
        let invalid = |expected: &str| {
            (
                name.clone(),
                format!(
                    "The property {name} has an invalid value: Value must be of type {expected} not {}.",
                    py_type(value)
                ),
            )
        };
        let mut value = value.clone();
        if def.integers.contains(&name.as_str()) {
            value = match &value {
                Value::Null => Value::Null,
                Value::Number(n) if n.is_i64() => value.clone(),
                Value::String(s) if s.trim().parse::<i64>().is_ok() => {
                    json!(s.trim().parse::<i64>().unwrap_or_default())
                }
                Value::String(s) if s.is_empty() => Value::Null,
                _ => {
                    errors.push(invalid("integer"));
                    continue;
                }
            };
        } else if def.pairs.contains(&name.as_str()) {
            let ok = match &value {
                Value::Null => {
                    value = json!([]);
                    true
                }
                Value::Array(items) => items.iter().all(|item| {
                    matches!(item, Value::Array(pair) if pair.len() == 2 && pair.iter().all(Value::is_string))
                }),
                _ => false,
            };
            if !ok {
                errors.push(invalid("list of [user, permission] pairs"));
                continue;
            }
        } else if def.lists.contains(&name.as_str()) {
            match &value {
                Value::Null => value = json!([]),
                Value::Array(_) => {}
                _ => {
                    errors.push(invalid("list"));
                    continue;
                }
            }
        }
        if def.lowercase.contains(&name.as_str())
            && let Value::String(s) = &value
        {
            value = json!(s.to_lowercase());
        }
        out.insert(name.clone(), value);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(invalid_properties(ctx, errors))
    }
}

// ---------------------------------------------------------------------------------------
// The protocol

impl Protocol for Udm {
    /// A `POST` creates an object the path does not name: `<module path> <name>`, the name
    /// being its `name` or `username` property.
    fn object(&self, request: &SimRequest) -> Option<String> {
        if request.method != Method::POST {
            return None;
        }
        let body: Value = serde_json::from_slice(&request.body).ok()?;
        let properties = body.get("properties")?;
        let name = properties
            .get("name")
            .or_else(|| properties.get("username"))?
            .as_str()?;
        Some(format!("{} {name}", request.path.trim_end_matches('/')))
    }

    fn handle(&self, request: &SimRequest) -> Response {
        let config = self.config();
        let lang = negotiate(request, config.html_view_enabled);
        let host = header_str(request, &header::HOST).unwrap_or("127.0.0.1");
        let origin = format!("http://{host}");
        let url = match &request.query {
            Some(q) => format!("{origin}{}?{q}", request.path),
            None => format!("{origin}{}", request.path),
        };
        let ctx = Ctx {
            origin,
            lang: lang.unwrap_or(Lang::Html),
            base: config.base_dn.clone(),
            url,
        };

        // ResourceBase.prepare: authentication first, the Accept check in its `finally`.
        let Some(authorization) = header_str(request, &header::AUTHORIZATION) else {
            return force_authorization();
        };
        let credentials = parse_basic(authorization);
        if let Err(message) = lang {
            return http_error(&ctx, StatusCode::NOT_ACCEPTABLE, Some(message));
        }
        let Some((user, password)) = credentials else {
            return http_error(
                &ctx,
                StatusCode::BAD_REQUEST,
                Some("The basic auth credentials are malformed."),
            );
        };
        if user == config.admin_user {
            if password != config.admin_password {
                return force_authorization();
            }
        } else {
            let login: Option<Login> = lock(&self.logins).get(&user).cloned();
            match login {
                Some(login) if login.password == password => {
                    if !login.authorized {
                        return http_error(
                            &ctx,
                            StatusCode::FORBIDDEN,
                            Some("Not in allowed groups."),
                        );
                    }
                }
                _ => return force_authorization(),
            }
        }

        // decode_request_arguments
        let body = if matches!(
            request.method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::DELETE
        ) {
            if !request.body.is_empty() {
                return http_error(
                    &ctx,
                    StatusCode::BAD_REQUEST,
                    Some("Safe HTTP method should not contain request body/Content-Type header."),
                );
            }
            Value::Object(Map::new())
        } else {
            let content_type = header_str(request, &header::CONTENT_TYPE)
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if content_type == "application/json" {
                match serde_json::from_slice::<Value>(&request.body) {
                    Ok(v) => v,
                    Err(e) => {
                        let message = format!("Invalid JSON document: JSONDecodeError('{e}')");
                        return http_error(&ctx, StatusCode::BAD_REQUEST, Some(&message));
                    }
                }
            } else {
                Value::Object(Map::new())
            }
        };

        {
            let mut store = lock(&self.store);
            promote_due(&mut store);
        }
        self.route(&ctx, request, &body)
    }

    fn fault_response(&self, status: StatusCode, request: &SimRequest) -> Response {
        let config = self.config();
        let host = header_str(request, &header::HOST).unwrap_or("127.0.0.1");
        let ctx = Ctx {
            origin: format!("http://{host}"),
            lang: negotiate(request, config.html_view_enabled).unwrap_or(Lang::Html),
            base: config.base_dn,
            url: format!("http://{host}{}", request.path),
        };
        match status {
            StatusCode::UNAUTHORIZED => force_authorization(),
            StatusCode::SERVICE_UNAVAILABLE => envelope(
                &ctx,
                status,
                "Service Unavailable",
                "Could not connect to the LDAP server. The LDAP server might be down or not reachable.",
                json!({}),
                Vec::new(),
                &[(header::RETRY_AFTER, "15".into())],
            ),
            _ => http_error(&ctx, status, None),
        }
    }

    fn state_json(&self) -> Value {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        let now = std::time::Instant::now();
        let objects: Vec<Value> = store
            .objects
            .values()
            .map(|o| {
                let mut properties = o.properties.clone();
                for p in o.module.passwords {
                    properties.remove(*p);
                }
                json!({"module": o.module.name, "dn": o.dn, "uuid": o.uuid, "properties": properties})
            })
            .collect();
        let pending: Vec<Value> = store
            .pending
            .iter()
            .map(|(at, o)| {
                json!({
                    "module": o.module.name,
                    "dn": o.dn,
                    "uuid": o.uuid,
                    "appears_in_ms": at.saturating_duration_since(now).as_millis() as u64,
                })
            })
            .collect();
        json!({"base_dn": self.base_dn(), "objects": objects, "pending": pending})
    }

    fn seed_json(&self, seed: &Value) -> Result<(), String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Seed {
            #[serde(default)]
            objects: Vec<SeedObject>,
            #[serde(default)]
            logins: Vec<SeedLogin>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct SeedObject {
            module: String,
            properties: Value,
            #[serde(default)]
            position: Option<String>,
            #[serde(default)]
            uuid: Option<String>,
            #[serde(default)]
            after_seconds: Option<f64>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct SeedLogin {
            username: String,
            password: String,
            #[serde(default = "yes")]
            authorized: bool,
        }
        fn yes() -> bool {
            true
        }
        let seed: Seed =
            serde_json::from_value(seed.clone()).map_err(|e| format!("not a UDM seed: {e}"))?;
        for login in seed.logins {
            self.add_login(&login.username, &login.password, login.authorized);
        }
        for object in seed.objects {
            let delay = object
                .after_seconds
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(std::time::Duration::from_secs_f64);
            self.insert_seeded(
                &object.module,
                object.position.as_deref(),
                object.properties,
                object.uuid,
                delay,
            )
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Routing and handlers

/// The objects' values of a filter attribute: the property, else an LDAP alias.
fn attribute_values(object: &Stored, name: &str) -> Vec<String> {
    if let Some(value) = object.properties.get(name) {
        return filter::value_strings(value);
    }
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "objectclass" => object
            .module
            .object_classes
            .iter()
            .map(|c| c.to_string())
            .collect(),
        "entryuuid" => vec![object.uuid.clone()],
        _ => object
            .module
            .ldap_aliases
            .iter()
            .find(|(attr, _)| *attr == lower)
            .and_then(|(_, prop)| object.properties.get(*prop))
            .map(filter::value_strings)
            .unwrap_or_default(),
    }
}

fn naming_value(object: &Stored) -> String {
    object
        .properties
        .get(object.module.naming)
        .and_then(|v| filter::value_strings(v).into_iter().next())
        .unwrap_or_default()
}

/// `Object.get_representation`.
fn representation(object: &Stored, properties: &[String]) -> Value {
    let all = properties.iter().any(|p| p == "*");
    let def = object.module;
    let mut values = Map::new();
    for (name, value) in &object.properties {
        if all || properties.iter().any(|p| p == name) {
            let value = if def.passwords.contains(&name.as_str()) {
                Value::Null
            } else {
                value.clone()
            };
            values.insert(name.clone(), value);
        }
    }
    if all || properties.iter().any(|p| p == "objectFlag") {
        values.entry("objectFlag").or_insert_with(|| json!([]));
    }
    let mut id = naming_value(object);
    if id.is_empty() {
        id = object.dn.split(',').next().unwrap_or("").to_string();
    }
    json!({
        "dn": object.dn,
        "objectType": def.name,
        "id": id,
        "position": parent_dn(&object.dn).unwrap_or_default(),
        "properties": values,
        "options": def.options(),
        "policies": if all { def.policies() } else { json!({}) },
        "uuid": object.uuid,
    })
}

fn collection_links(ctx: &Ctx, def: &ModuleDef) -> Value {
    let here = format!("{}{}/", ctx.api(), def.name);
    json!({
        "_links": {
            "udm:object-modules": [{"href": ctx.api(), "title": "All modules"}],
            "self": [{"href": here, "name": def.name, "title": def.title}],
            "describedby": [{"href": here, "title": format!("{} module", def.name), "method": "OPTIONS"}],
            "search": [{"href": format!("{here}{{?position,query*,filter,scope,hidden,properties}}"), "templated": true, "title": format!("Search for {}", def.title)}],
            "create-form": [{"href": format!("{here}add"), "title": format!("Create a {}", def.title)}],
        }
    })
}

fn object_links(ctx: &Ctx, object: &Stored, uri: &str) -> Value {
    let here = format!("{}{}/", ctx.api(), object.module.name);
    json!({
        "udm:object-modules": [{"href": ctx.api(), "title": "All modules"}],
        "udm:object-module": [{"href": here, "name": object.module.name, "title": object.module.title}],
        "type": [{"href": here, "name": object.module.name, "title": object.module.title}],
        "up": [{"href": here, "name": object.module.name, "title": object.module.title}],
        "self": [{"href": uri, "title": object.dn}],
        "describedby": [{"href": uri, "title": format!("{} module", object.module.name), "method": "OPTIONS"}],
        "udm:object/remove": [{"href": uri, "method": "DELETE"}],
        "udm:object/edit": [{"href": uri, "method": "PUT"}],
    })
}

fn entity_headers(object: &Stored) -> Vec<(HeaderName, String)> {
    vec![
        (header::ETAG, object.etag()),
        (header::LAST_MODIFIED, http_date(object.modified)),
    ]
}

fn under(dn_norm: &str, base_norm: &str) -> bool {
    dn_norm == base_norm || dn_norm.ends_with(&format!(",{base_norm}"))
}

impl Udm {
    fn route(&self, ctx: &Ctx, request: &SimRequest, body: &Value) -> Response {
        let Some(rest) = request.path.strip_prefix(API_PATH) else {
            return http_error(ctx, StatusCode::NOT_FOUND, None);
        };
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            return match request.method {
                Method::GET => self.modules_index(ctx),
                _ => http_error(ctx, StatusCode::METHOD_NOT_ALLOWED, None),
            };
        }
        if let Some(target) = rest.strip_prefix("object/") {
            return match request.method {
                Method::GET => self.object_link(ctx, &percent_decode(target)),
                _ => http_error(ctx, StatusCode::METHOD_NOT_ALLOWED, None),
            };
        }
        let mut parts = rest.splitn(3, '/');
        let (Some(flavor), Some(kind)) = (parts.next(), parts.next()) else {
            return http_error(ctx, StatusCode::NOT_FOUND, None);
        };
        let module_name = format!("{}/{}", percent_decode(flavor), percent_decode(kind));
        let Some(def) = modules::module(&module_name) else {
            return not_found(ctx, &module_name, "");
        };
        let dn = parts
            .next()
            .map(|raw| percent_decode(raw).replace(",/=/,", "//"))
            .unwrap_or_default();
        if dn.is_empty() {
            return match request.method {
                Method::GET | Method::HEAD => self.search(ctx, def, request),
                Method::POST => self.post(ctx, def, body),
                _ => http_error(ctx, StatusCode::METHOD_NOT_ALLOWED, None),
            };
        }
        match request.method {
            Method::GET | Method::HEAD => self.get_object(ctx, def, &dn, request),
            Method::PUT => self.put(ctx, def, &dn, request, body),
            Method::PATCH => self.patch(ctx, def, &dn, request, body),
            Method::DELETE => self.delete(ctx, def, &dn, request),
            _ => http_error(ctx, StatusCode::METHOD_NOT_ALLOWED, None),
        }
    }

    fn modules_index(&self, ctx: &Ctx) -> Response {
        let types: Vec<Value> = modules::MODULES
            .iter()
            .map(|m| json!({"href": format!("{}{}/", ctx.api(), m.name), "name": m.name, "title": m.title}))
            .collect();
        let body = json!({
            "_links": {
                "self": [{"href": ctx.api(), "title": "All modules"}],
                "udm:object-types": types,
                "udm:object/get-by-dn": [{"href": format!("{}object/{{dn}}", ctx.api()), "templated": true}],
                "udm:object/get-by-uuid": [{"href": format!("{}object/{{uuid}}", ctx.api()), "templated": true}],
                "udm:ldap-base": [{"href": format!("{}ldap/base/", ctx.api()), "title": "LDAP base"}],
            }
        });
        answer(ctx, StatusCode::OK, body, &[])
    }

    fn object_link(&self, ctx: &Ctx, target: &str) -> Response {
        let store = lock(&self.store);
        let found = store
            .objects
            .get(&norm_dn(target))
            .or_else(|| {
                store
                    .objects
                    .values()
                    .find(|o| o.uuid.eq_ignore_ascii_case(target))
            })
            .map(|o| ctx.object_uri(o.module.name, &o.dn));
        drop(store);
        match found {
            Some(uri) => answer(
                ctx,
                StatusCode::MOVED_PERMANENTLY,
                json!({"_links": {"self": [{"href": uri}]}}),
                &[(header::LOCATION, uri.clone())],
            ),
            None => http_error(ctx, StatusCode::NOT_FOUND, Some("None ''")),
        }
    }

    fn container_exists(store: &super::Store, dn: &str) -> bool {
        let key = norm_dn(dn);
        store.containers.contains(&key) || store.objects.keys().any(|k| under(k, &key))
    }

    fn search(&self, ctx: &Ctx, def: &'static ModuleDef, request: &SimRequest) -> Response {
        let raw = request.query.as_deref().unwrap_or("");
        let params = parse_query(raw);
        let first = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mut result = collection_links(ctx, def);

        // @sanitize of Objects.get
        let scope = first("scope").unwrap_or_else(|| "sub".into());
        if !["sub", "one", "base", "base+one"].contains(&scope.as_str()) {
            return invalid_field(
                ctx,
                "query",
                json!("scope"),
                "Value has to be one of ['sub', 'one', 'base', 'base+one']",
            );
        }
        let position = first("position").filter(|p| !p.is_empty());
        if let Some(position) = &position
            && !under(&norm_dn(position), &norm_dn(&ctx.base))
        {
            return invalid_field(
                ctx,
                "query",
                json!("position"),
                &format!("The ldap base is invalid. Use {}.", ctx.base),
            );
        }
        let filter = match first("filter").filter(|f| !f.trim().is_empty()) {
            Some(text) => match Filter::parse(&text) {
                Ok(f) => Some(f),
                Err(e) => return invalid_field(ctx, "query", json!("filter"), &e.0),
            },
            None => {
                let property = first("property").filter(|p| !p.is_empty());
                let terms: Vec<Filter> = params
                    .iter()
                    .filter_map(|(k, v)| {
                        let name = k.strip_prefix("query[")?.strip_suffix(']')?;
                        let name = if name.is_empty() {
                            property.clone().unwrap_or_else(|| def.naming.to_string())
                        } else {
                            name.to_string()
                        };
                        let value = if v.is_empty() { "*" } else { v.as_str() };
                        let pieces: Vec<String> = value.split('*').map(str::to_string).collect();
                        Some(
                            if pieces.len() == 2 && pieces.iter().all(String::is_empty) {
                                Filter::Present(name)
                            } else {
                                Filter::Equal { name, pieces }
                            },
                        )
                    })
                    .collect();
                (!terms.is_empty()).then_some(Filter::And(terms))
            }
        };
        let mut properties: Vec<String> = params
            .iter()
            .filter(|(k, _)| k == "properties")
            .map(|(_, v)| v.clone())
            .collect();
        if properties.is_empty() {
            properties.push("*".into());
        }

        if raw.is_empty() {
            // No query string: no search at all, only the links and forms.
            result["_embedded"] = json!({});
            return answer(ctx, StatusCode::OK, result, &[]);
        }

        let store = lock(&self.store);
        let base = position.clone().unwrap_or_else(|| ctx.base.clone());
        if !Self::container_exists(&store, &base) {
            drop(store);
            return invalid_field(
                ctx,
                "query",
                json!("position"),
                &format!("LDAP object {base} does not exist."),
            );
        }
        let base_norm = norm_dn(&base);
        let entries: Vec<Value> = store
            .objects
            .iter()
            .filter(|(_, o)| o.module.name == def.name)
            .filter(|(key, _)| {
                let parent = parent_dn(key).unwrap_or_default();
                match scope.as_str() {
                    "base" => **key == base_norm,
                    "one" => parent == base_norm,
                    "base+one" => **key == base_norm || parent == base_norm,
                    _ => under(key, &base_norm),
                }
            })
            .filter(|(_, o)| {
                filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&|name| attribute_values(o, name)))
            })
            .map(|(_, o)| {
                let uri = ctx.object_uri(def.name, &o.dn);
                let mut entry = representation(o, &properties);
                entry["uri"] = json!(uri);
                let id = entry["id"].clone();
                entry["_links"] = json!({"self": [{"href": uri, "name": o.dn, "title": id}]});
                entry
            })
            .collect();
        drop(store);
        result["results"] = json!(entries.len());
        result["_embedded"] = if entries.is_empty() {
            json!({})
        } else {
            json!({"udm:object": entries})
        };
        answer(
            ctx,
            StatusCode::OK,
            result,
            &[(
                header::CACHE_CONTROL,
                "private, must-revalidate, no-cache, no-store, max-age=1".into(),
            )],
        )
    }

    fn get_object(&self, ctx: &Ctx, def: &ModuleDef, dn: &str, request: &SimRequest) -> Response {
        let store = lock(&self.store);
        let Some(object) = store
            .objects
            .get(&norm_dn(dn))
            .filter(|o| o.module.name == def.name)
            .cloned()
        else {
            drop(store);
            return not_found(ctx, def.name, dn);
        };
        drop(store);
        if let Err(response) = check_preconditions(ctx, request, &object.etag()) {
            return response;
        }
        let uri = ctx.object_uri(def.name, &object.dn);
        let mut body = representation(&object, &["*".to_string()]);
        body["uri"] = json!(uri);
        body["_links"] = object_links(ctx, &object, &uri);
        let mut headers = entity_headers(&object);
        headers.push((header::ALLOW, "GET, OPTIONS, PUT, PATCH, DELETE".into()));
        headers.push((
            HeaderName::from_static("accept-patch"),
            "application/json-patch+json, application/json".into(),
        ));
        headers.push((header::CACHE_CONTROL, "private, must-revalidate".into()));
        answer(ctx, StatusCode::OK, body, &headers)
    }

    /// `Object.create` up to the LDAP add: the checks in the order UDM runs them.
    fn create_object(
        &self,
        ctx: &Ctx,
        def: &'static ModuleDef,
        container: &str,
        properties: &Map<String, Value>,
        explicit_dn: Option<&str>,
    ) -> Result<Stored, Response> {
        let mut properties = sanitize(ctx, def, properties)?;
        properties.retain(|_, v| !v.is_null());
        let mut store = lock(&self.store);
        if !Self::container_exists(&store, container) {
            return Err(udm_error(ctx, &format!("No such object. {container}")));
        }
        check_mail_unique(ctx, &store, &properties, None)?;
        check_required(ctx, def, &properties, &[])?;
        check_pairs_unique(ctx, def, &properties)?;
        let naming = properties
            .get(def.naming)
            .and_then(|v| filter::value_strings(v).into_iter().next())
            .unwrap_or_default();
        let dn = format!("{}={},{container}", def.rdn_attr, escape_rdn_value(&naming));
        if let Some(explicit) = explicit_dn
            && norm_dn(explicit) != norm_dn(&dn)
        {
            return Err(invalid_field(
                ctx,
                "body",
                json!("dn"),
                "Trying to create an object with wrong RDN.",
            ));
        }
        check_name_unique(ctx, def, &store, &naming, None)?;
        if store.objects.contains_key(&norm_dn(&dn)) {
            return Err(object_exists(
                ctx,
                &format!("dn: {dn}"),
                &format!("Object exists. {dn}"),
            ));
        }
        if !properties.contains_key("univentionObjectIdentifier")
            && lock(&self.config).assign_object_identifier
        {
            drop(store);
            let uoid = self.next_uuid();
            properties.insert("univentionObjectIdentifier".into(), json!(uoid));
            store = lock(&self.store);
        }
        drop(store);
        let uuid = self.next_uuid();
        let mut store = lock(&self.store);
        // Re-check after re-locking (another request may have raced in).
        if store.objects.contains_key(&norm_dn(&dn)) {
            return Err(object_exists(
                ctx,
                &format!("dn: {dn}"),
                &format!("Object exists. {dn}"),
            ));
        }
        store.csn += 1;
        let stored = Stored {
            module: def,
            dn: dn.clone(),
            uuid,
            properties,
            csn: store.csn,
            modified: std::time::SystemTime::now(),
        };
        store.objects.insert(norm_dn(&dn), stored.clone());
        Ok(stored)
    }

    /// `Object.modify`: may-not-change properties, required, uniqueness, renames.
    fn modify_object(
        &self,
        ctx: &Ctx,
        current: &Stored,
        properties: &Map<String, Value>,
    ) -> Result<Stored, Response> {
        let def = current.module;
        let changes = sanitize(ctx, def, properties)?;
        let mut sorted: Vec<(&String, &Value)> = changes.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        for (name, value) in &sorted {
            if def.is_immutable(name) {
                let old = current.properties.get(name.as_str());
                let same = match old {
                    Some(old) => old == *value,
                    None => is_empty_value(Some(value)),
                };
                if !same {
                    return Err(invalid_field(
                        ctx,
                        "body",
                        json!(name),
                        &format!("The property {name} has an invalid value: Value may not change."),
                    ));
                }
            }
        }
        let mut next = current.properties.clone();
        for (name, value) in changes.iter() {
            if value.is_null() {
                next.remove(name);
            } else {
                next.insert(name.clone(), value.clone());
            }
        }
        // Passwords are never read back, so a modification need not repeat them.
        check_required(ctx, def, &next, def.passwords)?;
        let mut store = lock(&self.store);
        let old_key = norm_dn(&current.dn);
        let mail_changed =
            next.get("mailPrimaryAddress") != current.properties.get("mailPrimaryAddress");
        if mail_changed {
            check_mail_unique(ctx, &store, &next, Some(&old_key))?;
        }
        if def
            .pairs
            .iter()
            .any(|p| next.get(*p) != current.properties.get(*p))
        {
            check_pairs_unique(ctx, def, &next)?;
        }
        let naming = next
            .get(def.naming)
            .and_then(|v| filter::value_strings(v).into_iter().next())
            .unwrap_or_default();
        let parent = parent_dn(&current.dn).unwrap_or_default();
        let dn = format!("{}={},{parent}", def.rdn_attr, escape_rdn_value(&naming));
        let new_key = norm_dn(&dn);
        if new_key != old_key {
            check_name_unique(ctx, def, &store, &naming, Some(&old_key))?;
            if store.objects.contains_key(&new_key) {
                return Err(object_exists(
                    ctx,
                    &format!("dn: {dn}"),
                    &format!("Object exists. {dn}"),
                ));
            }
        }
        store.csn += 1;
        let updated = Stored {
            module: def,
            dn: if new_key != old_key {
                dn
            } else {
                current.dn.clone()
            },
            uuid: current.uuid.clone(),
            properties: next,
            csn: store.csn,
            modified: std::time::SystemTime::now(),
        };
        store.objects.remove(&old_key);
        store.objects.insert(norm_dn(&updated.dn), updated.clone());
        Ok(updated)
    }

    fn post(&self, ctx: &Ctx, def: &'static ModuleDef, body: &Value) -> Response {
        let (position, properties) = match read_representation(ctx, body, false) {
            Ok(r) => r,
            Err(response) => return response,
        };
        let container = position.unwrap_or_else(|| def.default_container(&ctx.base));
        match self.create_object(ctx, def, &container, &properties, None) {
            Ok(created) => created_response(ctx, &created),
            Err(response) => response,
        }
    }

    fn find_in(&self, def: &ModuleDef, dn: &str) -> Option<Stored> {
        lock(&self.store)
            .objects
            .get(&norm_dn(dn))
            .filter(|o| o.module.name == def.name)
            .cloned()
    }

    fn put(
        &self,
        ctx: &Ctx,
        def: &'static ModuleDef,
        dn: &str,
        request: &SimRequest,
        body: &Value,
    ) -> Response {
        let (position, properties) = match read_representation(ctx, body, true) {
            Ok(r) => r,
            Err(response) => return response,
        };
        let position = position.unwrap_or_default();
        let Some(current) = self.find_in(def, dn) else {
            // A PUT to an unknown DN creates the object there.
            let container = parent_dn(dn).unwrap_or_default();
            return match self.create_object(ctx, def, &container, &properties, Some(dn)) {
                Ok(created) => created_response(ctx, &created),
                Err(response) => response,
            };
        };
        if let Err(response) = check_preconditions(ctx, request, &current.etag()) {
            return response;
        }
        let parent = parent_dn(&current.dn).unwrap_or_default();
        if norm_dn(&position) != norm_dn(&parent) {
            return self.move_object(ctx, &current, &position);
        }
        match self.modify_object(ctx, &current, &properties) {
            Ok(updated) => modified_response(ctx, &updated),
            Err(response) => response,
        }
    }

    fn move_object(&self, ctx: &Ctx, current: &Stored, position: &str) -> Response {
        let mut store = lock(&self.store);
        if !Self::container_exists(&store, position) {
            drop(store);
            return udm_error(ctx, &format!("No such object. {position}"));
        }
        let rdn = current.dn.split(',').next().unwrap_or("").to_string();
        let dn = format!("{rdn},{position}");
        if store.objects.contains_key(&norm_dn(&dn)) {
            drop(store);
            return object_exists(ctx, &format!("dn: {dn}"), &format!("Object exists. {dn}"));
        }
        store.csn += 1;
        let mut moved = current.clone();
        moved.dn = dn.clone();
        moved.csn = store.csn;
        moved.modified = std::time::SystemTime::now();
        store.objects.remove(&norm_dn(&current.dn));
        store.objects.insert(norm_dn(&dn), moved.clone());
        drop(store);
        let uri = ctx.object_uri(moved.module.name, &moved.dn);
        answer(
            ctx,
            StatusCode::CREATED,
            json!({"id": moved.uuid, "finished": true, "errors": false, "uri": uri}),
            &[(header::LOCATION, uri.clone())],
        )
    }

    fn patch(
        &self,
        ctx: &Ctx,
        def: &ModuleDef,
        dn: &str,
        request: &SimRequest,
        body: &Value,
    ) -> Response {
        let Some(current) = self.find_in(def, dn) else {
            return not_found(ctx, def.name, dn);
        };
        if let Err(response) = check_preconditions(ctx, request, &current.etag()) {
            return response;
        }
        let properties = match body.get("properties") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(other) => {
                return invalid_field(
                    ctx,
                    "body",
                    json!("properties"),
                    &format!("Not a \"dict\": {}", py_type(other)),
                );
            }
        };
        match self.modify_object(ctx, &current, &properties) {
            Ok(updated) => modified_response(ctx, &updated),
            Err(response) => response,
        }
    }

    fn delete(&self, ctx: &Ctx, def: &ModuleDef, dn: &str, request: &SimRequest) -> Response {
        let Some(current) = self.find_in(def, dn) else {
            return not_found(ctx, def.name, dn);
        };
        if let Err(response) = check_preconditions(ctx, request, &current.etag()) {
            return response;
        }
        let mut store = lock(&self.store);
        if def.name == modules::SHARED_ACCOUNT_PERMISSION.name
            && let Some(uoid) = current
                .properties
                .get("univentionObjectIdentifier")
                .and_then(Value::as_str)
        {
            let suffix = format!(" with {}", uoid.to_lowercase());
            let referenced = store.objects.values().any(|o| {
                o.module.name == modules::SHARED_ACCOUNT.name
                    && ["users", "groups"].iter().any(|p| {
                        o.properties
                            .get(*p)
                            .map(filter::value_strings)
                            .unwrap_or_default()
                            .iter()
                            .any(|v| v.to_lowercase().ends_with(&suffix))
                    })
            });
            if referenced {
                drop(store);
                return udm_error(
                    ctx,
                    " The deletion of the Shared Account Permission object is not allowed as long as any Shared Account references it",
                );
            }
        }
        store.objects.remove(&norm_dn(&current.dn));
        drop(store);
        build(
            StatusCode::NO_CONTENT,
            &[(header::CACHE_CONTROL, "private, must-revalidate".into())],
            None,
        )
    }
}

/// Reads `position` and `properties` of a POST/PUT body.
fn read_representation(
    ctx: &Ctx,
    body: &Value,
    position_required: bool,
) -> Result<(Option<String>, Map<String, Value>), Response> {
    let position = match body.get("position") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(invalid_field(
                ctx,
                "body",
                json!("position"),
                &format!("Not a \"str\": {}", py_type(other)),
            ));
        }
    };
    if position.is_none() && position_required {
        return Err(invalid_field(
            ctx,
            "body",
            json!("position"),
            "Argument required",
        ));
    }
    if let Some(p) = &position
        && !under(&norm_dn(p), &norm_dn(&ctx.base))
    {
        return Err(invalid_field(
            ctx,
            "body",
            json!("position"),
            &format!("The ldap base is invalid. Use {}.", ctx.base),
        ));
    }
    let properties = match body.get("properties") {
        None | Some(Value::Null) => {
            return Err(invalid_field(
                ctx,
                "body",
                json!("properties"),
                "Argument required",
            ));
        }
        Some(Value::Object(p)) => p.clone(),
        Some(other) => {
            return Err(invalid_field(
                ctx,
                "body",
                json!("properties"),
                &format!("Not a \"dict\": {}", py_type(other)),
            ));
        }
    };
    Ok((position, properties))
}

fn created_response(ctx: &Ctx, created: &Stored) -> Response {
    let uri = ctx.object_uri(created.module.name, &created.dn);
    let mut headers = entity_headers(created);
    headers.push((header::LOCATION, uri));
    headers.push((
        header::CACHE_CONTROL,
        "private, must-revalidate, no-cache".into(),
    ));
    answer(
        ctx,
        StatusCode::CREATED,
        json!({"dn": created.dn, "uuid": created.uuid}),
        &headers,
    )
}

fn modified_response(ctx: &Ctx, updated: &Stored) -> Response {
    let mut headers = entity_headers(updated);
    headers.push((
        header::LOCATION,
        ctx.object_uri(updated.module.name, &updated.dn),
    ));
    headers.push((
        header::CACHE_CONTROL,
        "private, must-revalidate, no-cache, no-store".into(),
    ));
    build(StatusCode::NO_CONTENT, &headers, None)
}

/// Every required property of `def` (but those in `except`) that `properties` leaves empty →
/// `422`, all of them in one answer.
fn check_required(
    ctx: &Ctx,
    def: &ModuleDef,
    properties: &Map<String, Value>,
    except: &[&str],
) -> Result<(), Response> {
    let missing: Vec<(String, String)> = def
        .required
        .iter()
        .filter(|name| !except.contains(name))
        .filter(|name| is_empty_value(properties.get(**name)))
        .map(|name| {
            (
                name.to_string(),
                format!("The property \"{name}\" is required."),
            )
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(invalid_properties(ctx, missing))
    }
}

/// The mail allocator: a `mailPrimaryAddress` another object has (any module) → `422`.
fn check_mail_unique(
    ctx: &Ctx,
    store: &super::Store,
    properties: &Map<String, Value>,
    except: Option<&str>,
) -> Result<(), Response> {
    let Some(Value::String(mail)) = properties.get("mailPrimaryAddress") else {
        return Ok(());
    };
    if mail.is_empty() {
        return Ok(());
    }
    let taken = store.objects.iter().any(|(key, o)| {
        Some(key.as_str()) != except
            && o.properties
                .get("mailPrimaryAddress")
                .and_then(Value::as_str)
                .is_some_and(|m| m.eq_ignore_ascii_case(mail))
    });
    if taken {
        return Err(invalid_properties(
            ctx,
            vec![(
                "mailPrimaryAddress".into(),
                format!("The mail address is already in use. {mail}"),
            )],
        ));
    }
    Ok(())
}

/// The shared account's `_ldap_pre_create`/`_ldap_pre_modify`: a user (group) twice →
/// `valueError` without property, located at `["body", "properties", null]`.
fn check_pairs_unique(
    ctx: &Ctx,
    def: &ModuleDef,
    properties: &Map<String, Value>,
) -> Result<(), Response> {
    for (prop, what) in [("users", "user"), ("groups", "group")] {
        if !def.pairs.contains(&prop) {
            continue;
        }
        let Some(Value::Array(items)) = properties.get(prop) else {
            continue;
        };
        let mut seen = std::collections::BTreeSet::new();
        for item in items {
            let first = item
                .get(0)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_lowercase();
            if !seen.insert(first) {
                let message = format!(" A {what} must not be repeated in the Shared Account");
                return Err(unprocessable(
                    ctx,
                    "body",
                    Node::Branch(vec![(
                        json!("properties"),
                        Node::Branch(vec![(Value::Null, Node::Leaf(message))]),
                    )]),
                ));
            }
        }
    }
    Ok(())
}

/// `uidAlreadyUsed` / `groupNameAlreadyUsed`: user names and group names are unique across
/// both modules (`directory/manager/user_group/uniqueness`).
fn check_name_unique(
    ctx: &Ctx,
    def: &ModuleDef,
    store: &super::Store,
    name: &str,
    except: Option<&str>,
) -> Result<(), Response> {
    let (what, message) = match def.name {
        "users/user" => (
            "(uid)",
            "The username is already in use as username or as groupname",
        ),
        "groups/group" => (
            "(group)",
            "The groupname is already in use as groupname or as username",
        ),
        _ => return Ok(()),
    };
    let taken = store.objects.iter().any(|(key, o)| {
        Some(key.as_str()) != except
            && matches!(o.module.name, "users/user" | "groups/group")
            && naming_value(o).eq_ignore_ascii_case(name)
    });
    if taken {
        return Err(object_exists(ctx, what, &format!("{message} {name}")));
    }
    Ok(())
}
