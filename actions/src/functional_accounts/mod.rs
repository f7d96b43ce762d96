//! The Functional Accounts to Shared Accounts migration, one room: [`export`]
//! (`ox_functional_accounts_export`, stage `pre`) and [`import`] (`ox_shared_accounts_import`,
//! stage `post`), the handover document between them ([`record`]), and what both share (this
//! file):
//!
//! * [`name`]: the one name rule both apply ("Team Sales" becomes `Team-Sales`; a name with no
//!   letter fails).
//! * What both halves need from their run, and the proof of the handover store and the UDM
//!   REST API both give before reading anything.
//! * Short lists for messages.
//!
//! The clients both build come from their config sections ([`crate::shared_config::Udm`]) and
//! the clients ([`HandoverStore::for_run`], [`UdmClient::users_by_dn`]).

pub mod export;
pub mod import;
pub mod name;
pub mod record;

use crate::action::ActionError;
use crate::clients::s3::HandoverStore;
use crate::clients::udm::UdmClient;
use crate::shared_config::{Handover, UDM_PASSWORD_FILE, needs_secrets};
use stagehand_config::{HandoverRole, Needs};

/// How many changes are in flight at once.
pub const IN_FLIGHT: usize = 8;
/// How many items a summary lists before it counts the rest.
pub const LIST_LIMIT: usize = 10;

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
        Some(401 | 403) => ActionError::Refused(format!(
            "{e} (the password of udm.username is the secret file {UDM_PASSWORD_FILE:?})"
        )),
        _ => ActionError::from(e),
    })
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
    fn short_lists() {
        let items: Vec<String> = (0..12).map(|i| i.to_string()).collect();
        assert_eq!(
            short_list(&items),
            "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more"
        );
        assert_eq!(short_list(&["a"]), "a");
    }
}
