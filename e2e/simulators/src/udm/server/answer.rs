//! The success answers: a body in the negotiated format (JSON, HAL+JSON or the HTML view),
//! an object's representation and links, and the answers to a create and a modification.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::super::{ModuleDef, Stored, http_date, parent_dn};
use super::request::{Ctx, Lang};

/// A response of `status` with `headers` and, if any, a body of its content type.
pub(super) fn build(
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
pub(super) fn answer(
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
pub(super) fn force_authorization() -> Response {
    build(
        StatusCode::UNAUTHORIZED,
        &[(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"Univention Management Console\"".into(),
        )],
        Some(("text/html; charset=UTF-8", Vec::new())),
    )
}

/// `Object.get_representation`.
pub(super) fn representation(object: &Stored, properties: &[String]) -> Value {
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
    let mut id = object.naming();
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

/// The links of a module's collection.
pub(super) fn collection_links(ctx: &Ctx, def: &ModuleDef) -> Value {
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

/// The links of an object at `uri`.
pub(super) fn object_links(ctx: &Ctx, object: &Stored, uri: &str) -> Value {
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

/// `ETag` and `Last-Modified` of an object.
pub(super) fn entity_headers(object: &Stored) -> Vec<(HeaderName, String)> {
    vec![
        (header::ETAG, object.etag()),
        (header::LAST_MODIFIED, http_date(object.modified)),
    ]
}

/// `201` for a created object: `{dn, uuid}`, `Location`, `ETag`.
pub(super) fn created_response(ctx: &Ctx, created: &Stored) -> Response {
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

/// `204` for a modified object, with its `Location` and `ETag`.
pub(super) fn modified_response(ctx: &Ctx, updated: &Stored) -> Response {
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
