//! A module's collection, `/univention/udm/<module>/`: `GET` searches it, `POST` creates an
//! object in it.

use axum::http::{StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::super::filter::{self, Filter};
use super::super::{ModuleDef, Stored, Udm, lock, norm_dn, parent_dn, under};
use super::Handled;
use super::answer::{answer, collection_links, created_response, representation};
use super::error::invalid_query;
use super::request::{Ctx, parse_query, read_representation};
use super::write::container_exists;
use crate::http::SimRequest;

impl Udm {
    /// `GET /univention/udm/<module>/`: the links alone without a query string, else the
    /// objects of `def` that `position`, `scope` and `filter` (or `query[…]`) select.
    pub(super) fn search(
        &self,
        ctx: &Ctx,
        def: &'static ModuleDef,
        request: &SimRequest,
    ) -> Handled {
        let raw = request.query.as_deref().unwrap_or("");
        let params = parse_query(raw);
        let first = |key: &str| first_param(&params, key);
        let mut result = collection_links(ctx, def);

        // @sanitize of Objects.get
        let scope = first("scope").unwrap_or_else(|| "sub".into());
        if !["sub", "one", "base", "base+one"].contains(&scope.as_str()) {
            return Err(invalid_query(
                ctx,
                "scope",
                "Value has to be one of ['sub', 'one', 'base', 'base+one']",
            ));
        }
        let position = first("position").filter(|p| !p.is_empty());
        if let Some(position) = &position
            && !under(&norm_dn(position), &norm_dn(&ctx.base))
        {
            return Err(invalid_query(
                ctx,
                "position",
                &format!("The ldap base is invalid. Use {}.", ctx.base),
            ));
        }
        let filter = search_filter(ctx, def, &params)?;
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
            return Ok(answer(ctx, StatusCode::OK, result, &[]));
        }

        let store = lock(&self.store);
        let base = position.clone().unwrap_or_else(|| ctx.base.clone());
        if !container_exists(&store, &base) {
            drop(store);
            return Err(invalid_query(
                ctx,
                "position",
                &format!("LDAP object {base} does not exist."),
            ));
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
        Ok(answer(
            ctx,
            StatusCode::OK,
            result,
            &[(
                header::CACHE_CONTROL,
                "private, must-revalidate, no-cache, no-store, max-age=1".into(),
            )],
        ))
    }

    /// `POST /univention/udm/<module>/`: creates the object in `position`, else in the
    /// module's default container.
    pub(super) fn post(&self, ctx: &Ctx, def: &'static ModuleDef, body: &Value) -> Handled {
        let (position, properties) = read_representation(ctx, body, false)?;
        let container = position.unwrap_or_else(|| def.default_container(&ctx.base));
        let created = self.create_object(ctx, def, &container, &properties, None)?;
        Ok(created_response(ctx, &created))
    }
}

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

/// The search filter: `filter` (LDAP syntax), else the `query[<property>]` terms (`query[]`
/// names the `property` parameter, else the naming property), else none.
fn search_filter(
    ctx: &Ctx,
    def: &ModuleDef,
    params: &[(String, String)],
) -> Result<Option<Filter>, Response> {
    let first = |key: &str| first_param(params, key);
    match first("filter").filter(|f| !f.trim().is_empty()) {
        Some(text) => match Filter::parse(&text) {
            Ok(f) => Ok(Some(f)),
            Err(e) => Err(invalid_query(ctx, "filter", &e.0)),
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
            Ok((!terms.is_empty()).then_some(Filter::And(terms)))
        }
    }
}

/// The first value of the query parameter `key`.
fn first_param(params: &[(String, String)], key: &str) -> Option<String> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}
