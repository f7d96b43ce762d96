//! How the UDM simulator answers requests, one file a resource of the REST API. Every module
//! (`users/user`, `groups/group`, the `oxmail/*` modules) is served by the same handlers, steered
//! by its [`ModuleDef`](super::ModuleDef); what only some modules do is in `rules.rs`.
//!
//! | file | holds |
//! | --- | --- |
//! | `mod.rs` | the [`Protocol`]: authentication, body decoding, routing to the resources below, the fault answers, the control API's state and seed |
//! | `request.rs` | what a request says: the answer format (`check_acceptable`), the Basic credentials, the JSON body, the query string, `If-Match`/`If-None-Match`, the `position`/`properties` of a POST or PUT |
//! | `answer.rs` | the success answers in JSON, HAL+JSON or HTML: an object's representation, the links, `201` created, `204` modified |
//! | `error.rs` | the error envelope of `write_error`: `401`, tornado's `HTTPError`, `NotFound`, `UDM_Error`, `422` |
//! | `index.rs` | `GET /univention/udm/` (the module links) and `GET /univention/udm/object/<dn or uuid>` |
//! | `collection.rs` | `GET /univention/udm/<module>/` (search) and `POST` (create) |
//! | `object.rs` | `GET`, `PUT`, `PATCH`, `DELETE /univention/udm/<module>/<dn>` (and the move of a `PUT`) |
//! | `write.rs` | `Object.create` and `Object.modify` behind POST, PUT and PATCH: the sanitizer, required properties, mail uniqueness, renames |
//! | `rules.rs` | the rules of single modules: user and group names unique across both, a shared account's users and groups each once, a permission a shared account still references |

// An `Err` here is the finished answer to the request, built once per request: boxing it
// would only add noise.
#![allow(clippy::result_large_err)]

mod answer;
mod collection;
mod error;
mod index;
mod object;
mod request;
mod rules;
mod write;

use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::modules;
use super::{API_PATH, Udm, lock, promote_due};
use crate::http::{Protocol, SimRequest, percent_decode};
use answer::force_authorization;
use error::{envelope, http_error, not_found};
use request::{Ctx, Lang, decode_body, negotiate};

/// What a handler gives: the answer, or (`Err`) the error answer that ended it early.
type Handled = Result<Response, Response>;

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
        let ctx = Ctx::new(request, lang.unwrap_or(Lang::Html), &config.base_dn);
        self.authenticate(&ctx, request, &config, lang)
            .and_then(|()| decode_body(&ctx, request))
            .and_then(|body| {
                promote_due(&mut lock(&self.store));
                self.route(&ctx, request, &body)
            })
            .unwrap_or_else(|answer| answer)
    }

    fn fault_response(&self, status: StatusCode, request: &SimRequest) -> Response {
        let config = self.config();
        let lang = negotiate(request, config.html_view_enabled).unwrap_or(Lang::Html);
        let ctx = Ctx::new(request, lang, &config.base_dn);
        // The error's `self` link names the path without the query string.
        let ctx = Ctx {
            url: format!("{}{}", ctx.origin, request.path),
            ..ctx
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

impl Udm {
    /// Sends the request to its resource: the module index, an object link, a module's
    /// collection or one of its objects.
    fn route(&self, ctx: &Ctx, request: &SimRequest, body: &Value) -> Handled {
        let not_allowed = || Err(http_error(ctx, StatusCode::METHOD_NOT_ALLOWED, None));
        let Some(rest) = request.path.strip_prefix(API_PATH) else {
            return Err(http_error(ctx, StatusCode::NOT_FOUND, None));
        };
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            return match request.method {
                Method::GET => Ok(self.modules_index(ctx)),
                _ => not_allowed(),
            };
        }
        if let Some(target) = rest.strip_prefix("object/") {
            return match request.method {
                Method::GET => self.object_link(ctx, &percent_decode(target)),
                _ => not_allowed(),
            };
        }
        let mut parts = rest.splitn(3, '/');
        let (Some(flavor), Some(kind)) = (parts.next(), parts.next()) else {
            return Err(http_error(ctx, StatusCode::NOT_FOUND, None));
        };
        let module_name = format!("{}/{}", percent_decode(flavor), percent_decode(kind));
        let Some(def) = modules::module(&module_name) else {
            return Err(not_found(ctx, &module_name, ""));
        };
        let dn = parts
            .next()
            .map(|raw| percent_decode(raw).replace(",/=/,", "//"))
            .unwrap_or_default();
        if dn.is_empty() {
            return match request.method {
                Method::GET | Method::HEAD => self.search(ctx, def, request),
                Method::POST => self.post(ctx, def, body),
                _ => not_allowed(),
            };
        }
        let existing = || self.existing(ctx, def, &dn, request);
        match request.method {
            Method::GET | Method::HEAD => self.get_object(ctx, &existing()?),
            Method::PUT => self.put(ctx, def, &dn, request, body),
            Method::PATCH => self.patch(ctx, &existing()?, body),
            Method::DELETE => self.delete(ctx, &existing()?),
            _ => not_allowed(),
        }
    }
}
