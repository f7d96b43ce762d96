//! The Functional Accounts to Shared Accounts migration, one room: [`export`]
//! (`ox_functional_accounts_export`, stage `pre`) and [`import`] (`ox_shared_accounts_import`,
//! stage `post`), the handover document between them ([`record`]), and what both share (this
//! file):
//!
//! * [`name`]: the one name rule both apply ("Team Sales" becomes `Team-Sales`; a name with no
//!   letter fails).
//! * The clients both build from their config and the run's credentials: the UDM REST API
//!   (`udm-admin-password`) and the handover store (the Migration's `objectStore`).
//! * Reading users by DN in few requests, and short lists for messages.

pub mod export;
pub mod import;
pub mod name;
pub mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::action::{ActionContext, ActionError};
use crate::clients::s3::HandoverStore;
use crate::clients::udm::{Filter, Search, UdmClient, UdmObject};
use crate::shared_config::{Handover, Udm, needs_secrets};
use stagehand_config::{HandoverRole, Needs};

/// The secret file with the password of `udm.username`.
pub const UDM_PASSWORD_FILE: &str = "udm-admin-password";
/// The UDM module of the Functional Accounts.
pub const FUNCTIONAL_ACCOUNT: &str = "oxmail/functional_account";
/// The UDM module of the Shared Accounts.
pub const SHARED_ACCOUNT: &str = "oxmail/shared_account";
/// The UDM module of the Shared Account permissions.
pub const PERMISSION: &str = "oxmail/shared_account_permission";
/// The UDM module of the users.
pub const USER: &str = "users/user";
/// The UDM module of the groups.
pub const GROUP: &str = "groups/group";
/// The identifier property the OX Connector links objects by.
pub const IDENTIFIER: &str = "univentionObjectIdentifier";
/// How many values one `(|(...)(...))` search filter carries.
pub const SEARCH_CHUNK: usize = 100;
/// How many changes are in flight at once.
pub const IN_FLIGHT: usize = 8;
/// How many items a summary lists before it counts the rest.
pub const LIST_LIMIT: usize = 10;

/// The UDM REST API client the `udm` block and the secret file [`UDM_PASSWORD_FILE`] describe.
pub fn udm_client(udm: &Udm, ctx: &ActionContext) -> Result<UdmClient, ActionError> {
    let password = ctx.secrets.get(UDM_PASSWORD_FILE)?;
    UdmClient::new(
        &udm.url,
        &udm.username,
        password.clone(),
        Duration::from_secs(udm.request_timeout_seconds.max(1)),
    )
    .map_err(ActionError::from)
}

/// The handover store: the Migration's `objectStore` with its secret key file.
pub fn handover_store(ctx: &ActionContext, action: &str) -> Result<HandoverStore, ActionError> {
    let Some(settings) = &ctx.object_store else {
        return Err(ActionError::Failed(format!(
            "{action} hands the Functional Accounts over in the Migration's object store, and the Migration declares none: set spec.objectStore (endpoint, bucket, accessKeyId, secretKeyFile) to the deployment's migrations bucket"
        )));
    };
    HandoverStore::connect_with_secrets(settings, &ctx.secrets, crate::clients::s3::DEFAULT_TIMEOUT)
}

/// What one half needs: the secret files it reads and its side of the handover
/// `handover.objectKey`.
pub fn handover_needs(files: &[&str], handover: &Handover, role: HandoverRole) -> Needs {
    Needs {
        handover: Some(stagehand_config::Handover {
            object_key: handover.object_key.clone(),
            role,
        }),
        ..needs_secrets(files.iter().copied())
    }
}

/// Proves what both halves reach before reading anything: the store answers, accepts the
/// credential and holds the bucket ([`HandoverStore::probe`]; the handover object need not
/// exist), and the UDM REST API accepts the credential ([`UdmClient::check_access`]). A
/// refused UDM credential names the secret file [`UDM_PASSWORD_FILE`].
pub async fn check_store_and_udm(
    store: &HandoverStore,
    udm: &UdmClient,
) -> Result<(), ActionError> {
    store.probe().await?;
    udm.check_access().await.map_err(|e| match e.status() {
        Some(401 | 403) => ActionError::Failed(format!(
            "{e} (the password of udm.username is the secret file {UDM_PASSWORD_FILE:?})"
        )),
        _ => ActionError::from(e),
    })
}

/// A DN normalized for comparison: lower case, no blanks around `,` and `=`.
pub fn norm_dn(dn: &str) -> String {
    split_dn(dn)
        .iter()
        .map(|rdn| match rdn.split_once('=') {
            Some((a, v)) => format!("{}={}", a.trim(), v.trim()),
            None => rdn.trim().to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
        .to_lowercase()
}

/// The RDNs of a DN (escaped commas stay inside their RDN).
fn split_dn(dn: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in dn.chars() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == ',' {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() || !parts.is_empty() {
        parts.push(current);
    }
    parts
}

/// The value of the first RDN when its attribute is `attr` (`uid=anna,...` → `anna`), with
/// RFC 4514 escapes (`\,`, `\2C`) undone; `None` for another attribute or a multi-valued RDN.
pub fn first_rdn_value(dn: &str, attr: &str) -> Option<String> {
    let first = split_dn(dn).into_iter().next()?;
    let (a, v) = first.split_once('=')?;
    if !a.trim().eq_ignore_ascii_case(attr) {
        return None;
    }
    let v = v.trim();
    let mut out = Vec::with_capacity(v.len());
    let bytes = v.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'+' {
            return None;
        }
        if b == b'\\' && i + 1 < bytes.len() {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(byte) => {
                    out.push(byte);
                    i += 3;
                }
                None => {
                    out.push(bytes[i + 1]);
                    i += 2;
                }
            }
            continue;
        }
        out.push(b);
        i += 1;
    }
    String::from_utf8(out).ok().filter(|s| !s.is_empty())
}

/// Reads the users `dns` name: by user name (the `uid` of the DN) in searches of
/// [`SEARCH_CHUNK`] names, each result matched by DN; DNs the searches do not find are read one
/// by one. Answers every DN (normalized, see [`norm_dn`]) with its object, or `None` when no
/// such user exists.
pub async fn users_by_dn(
    udm: &UdmClient,
    base_dn: &str,
    dns: &BTreeSet<String>,
    properties: &[&str],
) -> Result<BTreeMap<String, Option<UdmObject>>, ActionError> {
    let mut found: BTreeMap<String, Option<UdmObject>> = BTreeMap::new();
    let wanted: BTreeMap<String, &String> = dns.iter().map(|dn| (norm_dn(dn), dn)).collect();
    let uids: Vec<String> = wanted
        .values()
        .filter_map(|dn| first_rdn_value(dn, "uid"))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for chunk in uids.chunks(SEARCH_CHUNK) {
        let filter = Filter::or(chunk.iter().map(|uid| Filter::eq("username", uid)));
        let objects = udm
            .search_with(
                USER,
                &Search {
                    filter: Some(filter),
                    position: Some(base_dn.to_string()),
                    properties: properties.iter().map(|p| p.to_string()).collect(),
                    ..Search::default()
                },
            )
            .await?;
        for object in objects {
            let key = norm_dn(&object.dn);
            if wanted.contains_key(&key) {
                found.insert(key, Some(object));
            }
        }
    }
    for (key, dn) in &wanted {
        if found.contains_key(key) {
            continue;
        }
        let object = udm.get_dn(USER, dn).await?;
        found.insert(key.clone(), object);
    }
    Ok(found)
}

/// Every object of `module` below `base_dn` with `properties` (all when empty).
pub async fn all_objects(
    udm: &UdmClient,
    module: &str,
    base_dn: &str,
    properties: &[&str],
) -> Result<Vec<UdmObject>, ActionError> {
    Ok(udm
        .search_with(
            module,
            &Search {
                filter: None,
                position: Some(base_dn.to_string()),
                properties: properties.iter().map(|p| p.to_string()).collect(),
                ..Search::default()
            },
        )
        .await?)
}

/// `a, b, c and 7 more` (at most [`LIST_LIMIT`] items).
pub fn short_list<S: AsRef<str>>(items: &[S]) -> String {
    let shown: Vec<&str> = items.iter().take(LIST_LIMIT).map(AsRef::as_ref).collect();
    let mut out = shown.join(", ");
    if items.len() > LIST_LIMIT {
        out.push_str(&format!(" and {} more", items.len() - LIST_LIMIT));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn dns_and_rdns() {
        assert_eq!(
            norm_dn("UID=Anna , cn=users,DC=x"),
            "uid=anna,cn=users,dc=x"
        );
        assert_eq!(
            first_rdn_value("uid=anna,cn=users,dc=x", "uid").as_deref(),
            Some("anna")
        );
        assert_eq!(
            first_rdn_value(r"uid=a\,b\2Bc,cn=users,dc=x", "UID").as_deref(),
            Some("a,b+c")
        );
        assert_eq!(first_rdn_value("cn=anna,dc=x", "uid"), None);
        assert_eq!(first_rdn_value("uid=a+cn=b,dc=x", "uid"), None);
    }

    #[test]
    fn short_lists() {
        let items: Vec<String> = (0..12).map(|i| i.to_string()).collect();
        assert_eq!(
            short_list(&items),
            "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"
        );
        assert_eq!(short_list(&["a"]), "a");
    }
}
