//! What a create (`POST`, a `PUT` to a new DN) and a modification (`PUT`, `PATCH`) run before
//! the object is stored, in the order UDM runs it: `Object.create` and `Object.modify`, the
//! properties sanitizer, the required properties, the mail allocator and the renames. The
//! rules of single modules they call are in `rules.rs`.

use axum::response::Response;
use serde_json::{Map, Value, json};

use super::super::{
    ModuleDef, Store, Stored, Udm, lock, naming_of, norm_dn, object_dn, parent_dn, under,
};
use super::error::{all_valid, dn_exists, invalid_body, invalid_properties, py_type, udm_error};
use super::request::Ctx;
use super::rules::{check_name_unique, check_pairs_unique};

impl Udm {
    /// `Object.create` up to the LDAP add: the checks in the order UDM runs them.
    pub(super) fn create_object(
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
        if !container_exists(&store, container) {
            return Err(udm_error(ctx, &format!("No such object. {container}")));
        }
        check_mail_unique(ctx, &store, &properties, None)?;
        check_required(ctx, def, &properties, &[])?;
        check_pairs_unique(ctx, def, &properties)?;
        let naming = naming_of(def, &properties).unwrap_or_default();
        let dn = object_dn(def, &naming, container);
        if let Some(explicit) = explicit_dn
            && norm_dn(explicit) != norm_dn(&dn)
        {
            return Err(invalid_body(
                ctx,
                "dn",
                "Trying to create an object with wrong RDN.",
            ));
        }
        check_name_unique(ctx, def, &store, &naming, None)?;
        if store.objects.contains_key(&norm_dn(&dn)) {
            return Err(dn_exists(ctx, &dn));
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
            return Err(dn_exists(ctx, &dn));
        }
        let stored = store.version(def, dn.clone(), uuid, properties);
        store.objects.insert(norm_dn(&dn), stored.clone());
        Ok(stored)
    }

    /// `Object.modify`: may-not-change properties, required, uniqueness, renames.
    pub(super) fn modify_object(
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
                    let message =
                        format!("The property {name} has an invalid value: Value may not change.");
                    return Err(invalid_body(ctx, name, &message));
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
        let naming = naming_of(def, &next).unwrap_or_default();
        let parent = parent_dn(&current.dn).unwrap_or_default();
        let dn = object_dn(def, &naming, &parent);
        let new_key = norm_dn(&dn);
        if new_key != old_key {
            check_name_unique(ctx, def, &store, &naming, Some(&old_key))?;
            if store.objects.contains_key(&new_key) {
                return Err(dn_exists(ctx, &dn));
            }
        }
        let dn = if new_key != old_key {
            dn
        } else {
            current.dn.clone()
        };
        Ok(store.replace(current, dn, next))
    }
}

/// Whether `dn` exists: a known container, or the ancestor of an object.
pub(super) fn container_exists(store: &Store, dn: &str) -> bool {
    let key = norm_dn(dn);
    store.containers.contains(&key) || store.objects.keys().any(|k| under(k, &key))
}

/// Whether a property's value counts as not given (`null`, `""`, `[]`).
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
    all_valid(ctx, errors, out)
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
    all_valid(ctx, missing, ())
}

/// The mail allocator: a `mailPrimaryAddress` another object has (any module) → `422`.
fn check_mail_unique(
    ctx: &Ctx,
    store: &Store,
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
