//! One object, `/univention/udm/<module>/<dn>`: `GET` reads it, `PUT` replaces (or creates,
//! or moves) it, `PATCH` changes some properties, `DELETE` removes it. Each checks
//! `If-Match`/`If-None-Match` against the object's entity tag first (`existing`, which the
//! router calls for `GET`, `PATCH` and `DELETE`).

use axum::http::{HeaderName, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::super::{ModuleDef, Stored, Udm, lock, norm_dn, parent_dn};
use super::Handled;
use super::answer::{
    answer, build, created_response, entity_headers, modified_response, object_links,
    representation,
};
use super::error::{dn_exists, not_found, udm_error};
use super::request::{Ctx, check_preconditions, read_properties, read_representation};
use super::rules::check_permission_unreferenced;
use super::write::container_exists;
use crate::http::SimRequest;

impl Udm {
    /// The object `dn` of `def`, if there is one.
    fn find_in(&self, def: &ModuleDef, dn: &str) -> Option<Stored> {
        lock(&self.store)
            .objects
            .get(&norm_dn(dn))
            .filter(|o| o.module.name == def.name)
            .cloned()
    }

    /// The object `dn` of `def` a `GET`, `PATCH` or `DELETE` acts on: `404` when there is
    /// none, the precondition's answer when `If-Match`/`If-None-Match` fails.
    pub(super) fn existing(
        &self,
        ctx: &Ctx,
        def: &ModuleDef,
        dn: &str,
        request: &SimRequest,
    ) -> Result<Stored, Response> {
        let current = self
            .find_in(def, dn)
            .ok_or_else(|| not_found(ctx, def.name, dn))?;
        check_preconditions(ctx, request, &current.etag())?;
        Ok(current)
    }

    /// `GET`: the object with all its properties (passwords `null`) and links.
    pub(super) fn get_object(&self, ctx: &Ctx, object: &Stored) -> Handled {
        let uri = ctx.object_uri(object.module.name, &object.dn);
        let mut body = representation(object, &["*".to_string()]);
        body["uri"] = json!(uri);
        body["_links"] = object_links(ctx, object, &uri);
        let mut headers = entity_headers(object);
        headers.push((header::ALLOW, "GET, OPTIONS, PUT, PATCH, DELETE".into()));
        headers.push((
            HeaderName::from_static("accept-patch"),
            "application/json-patch+json, application/json".into(),
        ));
        headers.push((header::CACHE_CONTROL, "private, must-revalidate".into()));
        Ok(answer(ctx, StatusCode::OK, body, &headers))
    }

    /// `PUT`: `position` and `properties` required. An unknown DN is created there (`201`);
    /// another `position` moves the object (`201`, the properties are not applied); else the
    /// properties are modified (`204`).
    pub(super) fn put(
        &self,
        ctx: &Ctx,
        def: &'static ModuleDef,
        dn: &str,
        request: &SimRequest,
        body: &Value,
    ) -> Handled {
        let (position, properties) = read_representation(ctx, body, true)?;
        let position = position.unwrap_or_default();
        let Some(current) = self.find_in(def, dn) else {
            // A PUT to an unknown DN creates the object there.
            let container = parent_dn(dn).unwrap_or_default();
            let created = self.create_object(ctx, def, &container, &properties, Some(dn))?;
            return Ok(created_response(ctx, &created));
        };
        check_preconditions(ctx, request, &current.etag())?;
        let parent = parent_dn(&current.dn).unwrap_or_default();
        if norm_dn(&position) != norm_dn(&parent) {
            return self.move_object(ctx, &current, &position);
        }
        let updated = self.modify_object(ctx, &current, &properties)?;
        Ok(modified_response(ctx, &updated))
    }

    /// The move of a `PUT` to another `position`: the same RDN below it.
    fn move_object(&self, ctx: &Ctx, current: &Stored, position: &str) -> Handled {
        let mut store = lock(&self.store);
        if !container_exists(&store, position) {
            drop(store);
            return Err(udm_error(ctx, &format!("No such object. {position}")));
        }
        let rdn = current.dn.split(',').next().unwrap_or("").to_string();
        let dn = format!("{rdn},{position}");
        if store.objects.contains_key(&norm_dn(&dn)) {
            drop(store);
            return Err(dn_exists(ctx, &dn));
        }
        let moved = store.replace(current, dn, current.properties.clone());
        drop(store);
        let uri = ctx.object_uri(moved.module.name, &moved.dn);
        Ok(answer(
            ctx,
            StatusCode::CREATED,
            json!({"id": moved.uuid, "finished": true, "errors": false, "uri": uri}),
            &[(header::LOCATION, uri.clone())],
        ))
    }

    /// `PATCH`: the properties given (none is no change) modify the object (`204`).
    pub(super) fn patch(&self, ctx: &Ctx, current: &Stored, body: &Value) -> Handled {
        let properties = read_properties(ctx, body, false)?;
        let updated = self.modify_object(ctx, current, &properties)?;
        Ok(modified_response(ctx, &updated))
    }

    /// `DELETE`: `204`, then the object is gone.
    pub(super) fn delete(&self, ctx: &Ctx, current: &Stored) -> Handled {
        let mut store = lock(&self.store);
        check_permission_unreferenced(ctx, &store, current)?;
        store.objects.remove(&norm_dn(&current.dn));
        drop(store);
        Ok(build(
            StatusCode::NO_CONTENT,
            &[(header::CACHE_CONTROL, "private, must-revalidate".into())],
            None,
        ))
    }
}
