//! The resources above the modules: `GET /univention/udm/` (the module index) and
//! `GET /univention/udm/object/<dn or uuid>` (the object lookup).

use axum::http::{StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::super::{Udm, lock, modules, norm_dn};
use super::Handled;
use super::answer::answer;
use super::error::http_error;
use super::request::Ctx;

impl Udm {
    /// `GET /univention/udm/`: the links to every module and to the object lookups.
    pub(super) fn modules_index(&self, ctx: &Ctx) -> Response {
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

    /// `GET /univention/udm/object/<dn or uuid>`: `301` to the object's URI.
    pub(super) fn object_link(&self, ctx: &Ctx, target: &str) -> Handled {
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
            Some(uri) => Ok(answer(
                ctx,
                StatusCode::MOVED_PERMANENTLY,
                json!({"_links": {"self": [{"href": uri}]}}),
                &[(header::LOCATION, uri.clone())],
            )),
            None => Err(http_error(ctx, StatusCode::NOT_FOUND, Some("None ''"))),
        }
    }
}
