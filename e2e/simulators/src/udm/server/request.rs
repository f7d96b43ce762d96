//! What a request says: the answer format it accepts, its Basic credentials, its JSON body,
//! its query string, its entity-tag preconditions and the representation a POST or PUT sends.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::http::{HeaderName, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value};

use super::super::{API_PATH, Login, Udm, UdmConfig, lock, norm_dn, quote_dn, under};
use super::answer::{build, force_authorization};
use super::error::{http_error, invalid_body, py_type};
use crate::http::{SimRequest, basic_payload, percent_decode};

/// The answer formats of `check_acceptable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lang {
    Html,
    Json,
    HalJson,
}

/// What every answer needs to know about its request.
pub(super) struct Ctx {
    /// `http://host:port`, from the `Host` header.
    pub(super) origin: String,
    pub(super) lang: Lang,
    pub(super) base: String,
    /// The request URL, for the error's `self` link.
    pub(super) url: String,
}

impl Ctx {
    /// The context of `request`, answered in `lang`, under the LDAP base `base`.
    pub(super) fn new(request: &SimRequest, lang: Lang, base: &str) -> Self {
        let host = header_str(request, &header::HOST).unwrap_or("127.0.0.1");
        let origin = format!("http://{host}");
        let url = match &request.query {
            Some(q) => format!("{origin}{}?{q}", request.path),
            None => format!("{origin}{}", request.path),
        };
        Ctx {
            origin,
            lang,
            base: base.to_string(),
            url,
        }
    }

    /// `http://host:port/univention/udm/`.
    pub(super) fn api(&self) -> String {
        format!("{}{API_PATH}/", self.origin)
    }

    /// The URI of the object `dn` of `module`.
    pub(super) fn object_uri(&self, module: &str, dn: &str) -> String {
        format!("{}{API_PATH}/{module}/{}", self.origin, quote_dn(dn))
    }
}

fn header_str<'a>(request: &'a SimRequest, name: &HeaderName) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// `check_acceptable`: the answer format, or the `406` message.
pub(super) fn negotiate(request: &SimRequest, html_enabled: bool) -> Result<Lang, &'static str> {
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
    // ISO-8859-1, as the real server decodes it.
    let decoded: String = basic_payload(value)?.iter().map(|&b| b as char).collect();
    let (user, password) = decoded.split_once(':')?;
    if user.is_empty() || password.is_empty() {
        return None;
    }
    Some((user.to_string(), password.to_string()))
}

/// Query string pairs, `+` and percent escapes decoded.
pub(super) fn parse_query(query: &str) -> Vec<(String, String)> {
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
pub(super) fn check_preconditions(
    ctx: &Ctx,
    request: &SimRequest,
    etag: &str,
) -> Result<(), Response> {
    let safe = matches!(request.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let matches = |tags: &[String]| tags.iter().any(|t| t == "*" || t == etag);
    if let Some(tags) = header_tags(ctx, request, &header::IF_NONE_MATCH, "If-None-Match")?
        && matches(&tags)
    {
        if safe {
            return Err(build(
                StatusCode::NOT_MODIFIED,
                &[(header::ETAG, etag.into())],
                None,
            ));
        }
        return Err(changed_meanwhile(ctx, "If-None-Match", &tags, etag));
    }
    if let Some(tags) = header_tags(ctx, request, &header::IF_MATCH, "If-Match")?
        && !safe
        && !matches(&tags)
    {
        return Err(changed_meanwhile(ctx, "If-Match", &tags, etag));
    }
    Ok(())
}

/// The entity tags of the header `label` (`name`), if the request has it; `400` when they
/// cannot be read.
fn header_tags(
    ctx: &Ctx,
    request: &SimRequest,
    name: &HeaderName,
    label: &str,
) -> Result<Option<Vec<String>>, Response> {
    let Some(value) = header_str(request, name) else {
        return Ok(None);
    };
    let tags = entity_tags(value);
    if tags.is_empty() {
        let message = format!("Invalid \"{label}\" syntax.");
        return Err(http_error(ctx, StatusCode::BAD_REQUEST, Some(&message)));
    }
    Ok(Some(tags))
}

/// `412`: the tags of the header `label` do not allow the change of the object at `etag`.
fn changed_meanwhile(ctx: &Ctx, label: &str, tags: &[String], etag: &str) -> Response {
    let message = format!(
        "The resource has meanwhile been changed. {label} {} does not match entity tag {etag}.",
        tags.join(", ")
    );
    http_error(ctx, StatusCode::PRECONDITION_FAILED, Some(&message))
}

impl Udm {
    /// `ResourceBase.prepare`: authentication first, the Accept check in its `finally`.
    pub(super) fn authenticate(
        &self,
        ctx: &Ctx,
        request: &SimRequest,
        config: &UdmConfig,
        lang: Result<Lang, &str>,
    ) -> Result<(), Response> {
        let Some(authorization) = header_str(request, &header::AUTHORIZATION) else {
            return Err(force_authorization());
        };
        let credentials = parse_basic(authorization);
        if let Err(message) = lang {
            return Err(http_error(ctx, StatusCode::NOT_ACCEPTABLE, Some(message)));
        }
        let Some((user, password)) = credentials else {
            return Err(http_error(
                ctx,
                StatusCode::BAD_REQUEST,
                Some("The basic auth credentials are malformed."),
            ));
        };
        if user == config.admin_user {
            if password != config.admin_password {
                return Err(force_authorization());
            }
            return Ok(());
        }
        check_login(ctx, &self.logins, &user, &password)
    }
}

/// A login other than the admin: known with this password (else `401`) and authorized
/// (else `403`).
fn check_login(
    ctx: &Ctx,
    logins: &Mutex<BTreeMap<String, Login>>,
    user: &str,
    password: &str,
) -> Result<(), Response> {
    let login: Option<Login> = lock(logins).get(user).cloned();
    match login {
        Some(login) if login.password == password => {
            if login.authorized {
                Ok(())
            } else {
                Err(http_error(
                    ctx,
                    StatusCode::FORBIDDEN,
                    Some("Not in allowed groups."),
                ))
            }
        }
        _ => Err(force_authorization()),
    }
}

/// `decode_request_arguments`: no body for a safe method; a JSON body when the content type
/// says so, else an empty object.
pub(super) fn decode_body(ctx: &Ctx, request: &SimRequest) -> Result<Value, Response> {
    if matches!(
        request.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::DELETE
    ) {
        if !request.body.is_empty() {
            return Err(http_error(
                ctx,
                StatusCode::BAD_REQUEST,
                Some("Safe HTTP method should not contain request body/Content-Type header."),
            ));
        }
        return Ok(Value::Object(Map::new()));
    }
    let content_type = header_str(request, &header::CONTENT_TYPE)
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if content_type != "application/json" {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice::<Value>(&request.body).map_err(|e| {
        let message = format!("Invalid JSON document: JSONDecodeError('{e}')");
        http_error(ctx, StatusCode::BAD_REQUEST, Some(&message))
    })
}

/// Reads `position` and `properties` of a POST/PUT body.
pub(super) fn read_representation(
    ctx: &Ctx,
    body: &Value,
    position_required: bool,
) -> Result<(Option<String>, Map<String, Value>), Response> {
    let position = match body.get("position") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            let message = format!("Not a \"str\": {}", py_type(other));
            return Err(invalid_body(ctx, "position", &message));
        }
    };
    if position.is_none() && position_required {
        return Err(invalid_body(ctx, "position", "Argument required"));
    }
    if let Some(p) = &position
        && !under(&norm_dn(p), &norm_dn(&ctx.base))
    {
        let message = format!("The ldap base is invalid. Use {}.", ctx.base);
        return Err(invalid_body(ctx, "position", &message));
    }
    let properties = read_properties(ctx, body, true)?;
    Ok((position, properties))
}

/// The `properties` of a body: a JSON object; when missing, `422` if `required`, else none.
pub(super) fn read_properties(
    ctx: &Ctx,
    body: &Value,
    required: bool,
) -> Result<Map<String, Value>, Response> {
    match body.get("properties") {
        None | Some(Value::Null) if required => {
            Err(invalid_body(ctx, "properties", "Argument required"))
        }
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(p)) => Ok(p.clone()),
        Some(other) => {
            let message = format!("Not a \"dict\": {}", py_type(other));
            Err(invalid_body(ctx, "properties", &message))
        }
    }
}
