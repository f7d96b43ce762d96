//! The rules of single modules, beside what every module does: user and group names are
//! unique across `users/user` and `groups/group`; a `oxmail/shared_account` names each user
//! and group once; an `oxmail/shared_account_permission` a shared account still references
//! cannot be deleted.

use std::collections::BTreeSet;

use axum::response::Response;
use serde_json::{Map, Value, json};

use super::super::{ModuleDef, Store, Stored, filter, modules};
use super::error::{Node, object_exists, udm_error, unprocessable};
use super::request::Ctx;

/// The shared account's `_ldap_pre_create`/`_ldap_pre_modify`: a user (group) twice →
/// `valueError` without property, located at `["body", "properties", null]`.
pub(super) fn check_pairs_unique(
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
        let mut seen = BTreeSet::new();
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
pub(super) fn check_name_unique(
    ctx: &Ctx,
    def: &ModuleDef,
    store: &Store,
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
            && o.naming().eq_ignore_ascii_case(name)
    });
    if taken {
        return Err(object_exists(ctx, what, &format!("{message} {name}")));
    }
    Ok(())
}

/// `oxmail/shared_account_permission`'s `_ldap_pre_remove`: a permission that a shared
/// account's `users` or `groups` still names (`<dn> with <identifier>`) → `400`.
pub(super) fn check_permission_unreferenced(
    ctx: &Ctx,
    store: &Store,
    current: &Stored,
) -> Result<(), Response> {
    if current.module.name != modules::SHARED_ACCOUNT_PERMISSION.name {
        return Ok(());
    }
    let Some(uoid) = current
        .properties
        .get("univentionObjectIdentifier")
        .and_then(Value::as_str)
    else {
        return Ok(());
    };
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
        return Err(udm_error(
            ctx,
            " The deletion of the Shared Account Permission object is not allowed as long as any Shared Account references it",
        ));
    }
    Ok(())
}
