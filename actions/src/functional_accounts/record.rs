//! The handover document of the Functional Accounts migration: the versioned YAML that
//! `ox_functional_accounts_export` writes in the `pre` stage and `ox_shared_accounts_import`
//! reads in the `post` stage (`apiVersion: stagehand.dev/handover/v1`,
//! `kind: OxFunctionalAccounts`), kept in the Migration's object store
//! ([`HandoverStore`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::clients::s3::{HandoverError, HandoverStore};

/// The `apiVersion` of the handover documents this build writes and reads.
pub const API_VERSION: &str = "stagehand.dev/handover/v1";

/// The `kind` of the functional-accounts handover.
pub const KIND_OX_FUNCTIONAL_ACCOUNTS: &str = "OxFunctionalAccounts";

/// What `ox_functional_accounts_export` wrote down in the `pre` stage for
/// `ox_shared_accounts_import` in the `post` stage: every Functional Account
/// (`oxmail/functional_account`) with everything needed to create its Shared Account and to
/// report on it. Once the accounts are deleted, this and the Job's log are the only places the
/// information still exists.
///
/// ```yaml
/// apiVersion: stagehand.dev/handover/v1
/// kind: OxFunctionalAccounts
/// release: v1.18.0
/// recordedAt: "2026-03-02T10:15:00Z"
/// run: pre-v1-18-0
/// ldapBaseDn: dc=swp-ldap,dc=internal
/// accounts:
///   - name: Team Sales
///     dn: cn=Team Sales,cn=functional_accounts,cn=open-xchange,dc=swp-ldap,dc=internal
///     position: cn=functional_accounts,cn=open-xchange,dc=swp-ldap,dc=internal
///     entryUUID: 5b1c…
///     mailPrimaryAddress: sales@example.org
///     oxContext: 1
///     users:
///       - dn: uid=anna,cn=users,dc=swp-ldap,dc=internal
///         uid: anna
///         entryUUID: 0f3e…
///         isOxUser: true
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OxFunctionalAccounts {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND_OX_FUNCTIONAL_ACCOUNTS`].
    pub kind: String,
    /// The release whose `pre` stage wrote it (the Migration's `releaseVersion`), where the
    /// writer knew it; left out when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release: String,
    /// When it was written (RFC 3339, UTC).
    pub recorded_at: String,
    /// The MigrationRun that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// That run's `metadata.uid`: the same run, re-entered after its operator died part way,
    /// continues the export this handover describes (another run of the same name does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_uid: Option<String>,
    /// The LDAP base the accounts were searched under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ldap_base_dn: Option<String>,
    /// The Functional Accounts, in the order they were found.
    #[serde(default)]
    pub accounts: Vec<FunctionalAccount>,
}

/// One Functional Account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionalAccount {
    /// UDM `name` (LDAP `cn`): a plain string that becomes the Shared Account's `displayName`
    /// and, respelled as a user name, its `name`.
    pub name: String,
    /// A display name, where the account had one besides its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The object's DN.
    pub dn: String,
    /// The container the object was in.
    pub position: String,
    /// The object's `entryUUID`: the Shared Account is created with it as its
    /// `univentionObjectIdentifier`, so that OX App Suite keeps the mailbox.
    #[serde(rename = "entryUUID")]
    pub entry_uuid: String,
    /// The object's `univentionObjectIdentifier`, where it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub univention_object_identifier: Option<String>,
    /// UDM `mailPrimaryAddress` (lower case).
    pub mail_primary_address: String,
    /// The OX context id (`oxContext`).
    pub ox_context: u32,
    /// UDM `personal` (`oxPersonal`): the sender name, where set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal: Option<String>,
    /// UDM `oxQuota`, where set, as UDM gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ox_quota: Option<serde_json::Value>,
    /// The linked users (UDM `users`), resolved.
    #[serde(default)]
    pub users: Vec<LinkedUser>,
    /// The linked groups (UDM `groups`), resolved as far as they could be.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<LinkedGroup>,
    /// The OX App Suite secondary accounts that belonged to it when it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ox_secondary_accounts: Vec<OxSecondaryAccount>,
    /// Every other UDM property of the object as read (the ones no field above holds), so
    /// that nothing is lost with the object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub udm_properties: BTreeMap<String, serde_json::Value>,
}

/// A user linked to a Functional Account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkedUser {
    /// The user's DN as the account listed it.
    pub dn: String,
    /// The user name (`uid`); empty when the DN named no existing user.
    #[serde(default)]
    pub uid: String,
    /// The user's `entryUUID`, where found.
    #[serde(default, rename = "entryUUID", skip_serializing_if = "Option::is_none")]
    pub entry_uuid: Option<String>,
    /// The user's `univentionObjectIdentifier`, where found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub univention_object_identifier: Option<String>,
    /// Whether the user has a groupware account (`isOxUser`); one without cannot be linked.
    #[serde(default)]
    pub is_ox_user: bool,
    /// The user's numeric OX id, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ox_user_id: Option<u32>,
}

/// A group linked to a Functional Account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkedGroup {
    /// The group's DN as the account listed it.
    pub dn: String,
    /// The group's name (`cn`), where found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The group's `entryUUID`, where found.
    #[serde(default, rename = "entryUUID", skip_serializing_if = "Option::is_none")]
    pub entry_uuid: Option<String>,
    /// The group's `univentionObjectIdentifier`, where found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub univention_object_identifier: Option<String>,
}

/// An OX App Suite secondary account (one per linked user) as `OXSecondaryAccountService.list`
/// reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OxSecondaryAccount {
    /// The OX context id.
    pub context_id: u32,
    /// The OX user id the account belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// The account's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<u32>,
    /// The account's login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
}

impl OxFunctionalAccounts {
    /// An empty handover of this version for `release`, recorded at `recorded_at` (RFC 3339).
    pub fn new(release: impl Into<String>, recorded_at: impl Into<String>) -> Self {
        Self {
            api_version: API_VERSION.to_string(),
            kind: KIND_OX_FUNCTIONAL_ACCOUNTS.to_string(),
            release: release.into(),
            recorded_at: recorded_at.into(),
            run: None,
            run_uid: None,
            ldap_base_dn: None,
            accounts: Vec::new(),
        }
    }

    /// Parses a handover document; an error names a version or kind this build does not know,
    /// a YAML problem, or a rule of [`check`](Self::check) that fails.
    pub fn from_yaml(bytes: &[u8]) -> Result<Self, HandoverError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Header {
            api_version: Option<String>,
            kind: Option<String>,
        }
        // One parse on the way that succeeds; the header is looked at on its own only to
        // explain a failure, so that a document of another version or kind is reported as
        // that and not as its first unknown field.
        let parsed: Result<Self, _> = serde_norway::from_slice(bytes);
        let doc = match parsed {
            Ok(doc) => {
                header_problem(Some(&doc.api_version), Some(&doc.kind))?;
                doc
            }
            Err(e) => {
                let header: Header = serde_norway::from_slice(bytes)
                    .map_err(|_| HandoverError::Document(format!("not a YAML mapping: {e}")))?;
                header_problem(header.api_version.as_deref(), header.kind.as_deref())?;
                return Err(HandoverError::Document(e.to_string()));
            }
        };
        let problems = doc.check();
        if !problems.is_empty() {
            return Err(HandoverError::Document(problems.join("; ")));
        }
        Ok(doc)
    }

    /// The document as YAML (checked first: a handover that could not be read back is not
    /// written).
    pub fn to_yaml(&self) -> Result<Vec<u8>, HandoverError> {
        let problems = self.check();
        if !problems.is_empty() {
            return Err(HandoverError::Document(problems.join("; ")));
        }
        serde_norway::to_string(self)
            .map(String::into_bytes)
            .map_err(|e| HandoverError::Document(format!("cannot serialize: {e}")))
    }

    /// The rules every handover follows: this version and kind; every account has a name, a
    /// DN, an `entryUUID`, a mail address; no two accounts share a DN, an `entryUUID` or a
    /// mail address. Returns the problems (none: valid).
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.api_version != API_VERSION {
            problems.push(format!(
                "apiVersion is {:?}, not {API_VERSION:?}",
                self.api_version
            ));
        }
        if self.kind != KIND_OX_FUNCTIONAL_ACCOUNTS {
            problems.push(format!(
                "kind is {:?}, not {KIND_OX_FUNCTIONAL_ACCOUNTS:?}",
                self.kind
            ));
        }
        let mut dns = BTreeSet::new();
        let mut uuids = BTreeSet::new();
        let mut mails = BTreeSet::new();
        for (i, a) in self.accounts.iter().enumerate() {
            let at = format!("accounts[{i}] ({:?})", a.name);
            for (field, value) in [
                ("name", &a.name),
                ("dn", &a.dn),
                ("entryUUID", &a.entry_uuid),
                ("mailPrimaryAddress", &a.mail_primary_address),
            ] {
                if value.trim().is_empty() {
                    problems.push(format!("{at}: {field} is empty"));
                }
            }
            if !a.dn.is_empty() && !dns.insert(a.dn.to_ascii_lowercase()) {
                problems.push(format!("{at}: dn {:?} appears twice", a.dn));
            }
            if !a.entry_uuid.is_empty() && !uuids.insert(a.entry_uuid.to_ascii_lowercase()) {
                problems.push(format!("{at}: entryUUID {:?} appears twice", a.entry_uuid));
            }
            if !a.mail_primary_address.is_empty()
                && !mails.insert(a.mail_primary_address.to_lowercase())
            {
                problems.push(format!(
                    "{at}: mailPrimaryAddress {:?} appears twice",
                    a.mail_primary_address
                ));
            }
        }
        problems
    }

    /// Whether this handover may replace `existing` in the store: only if it still holds every
    /// account `existing` holds (by `entryUUID`), so a handover is never rewritten with fewer
    /// accounts. The error names the accounts that would be lost.
    pub fn may_replace(&self, existing: &OxFunctionalAccounts) -> Result<(), HandoverError> {
        let kept: BTreeSet<String> = self
            .accounts
            .iter()
            .map(|a| a.entry_uuid.to_ascii_lowercase())
            .collect();
        let lost: Vec<String> = existing
            .accounts
            .iter()
            .filter(|a| !kept.contains(&a.entry_uuid.to_ascii_lowercase()))
            .map(|a| format!("{:?} ({})", a.name, a.entry_uuid))
            .collect();
        if lost.is_empty() {
            Ok(())
        } else {
            Err(HandoverError::Document(format!(
                "refusing to rewrite the handover of {} account(s) with {}: it would lose {}",
                existing.accounts.len(),
                self.accounts.len(),
                lost.join(", ")
            )))
        }
    }
}

/// Why a document's `apiVersion` and `kind` are not this build's handover, if they are not.
fn header_problem(api_version: Option<&str>, kind: Option<&str>) -> Result<(), HandoverError> {
    match api_version {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(HandoverError::Document(format!(
                "apiVersion {other:?} is not one this Stagehand reads (it reads {API_VERSION:?}): not a handover, or one written by a newer Stagehand"
            )));
        }
        None => {
            return Err(HandoverError::Document(format!(
                "no apiVersion (expected {API_VERSION:?}): not a handover Stagehand wrote"
            )));
        }
    }
    if kind != Some(KIND_OX_FUNCTIONAL_ACCOUNTS) {
        return Err(HandoverError::Document(format!(
            "kind {:?} is not {KIND_OX_FUNCTIONAL_ACCOUNTS:?}",
            kind.unwrap_or_default()
        )));
    }
    Ok(())
}

/// The document read from and written to the store: the typed half of the store's bytes.
impl HandoverStore {
    /// Reads and parses the functional-accounts handover at `key`.
    pub async fn read_functional_accounts(
        &self,
        key: &str,
    ) -> Result<Option<OxFunctionalAccounts>, HandoverError> {
        match self.read(key).await? {
            None => Ok(None),
            Some(bytes) => OxFunctionalAccounts::from_yaml(&bytes)
                .map(Some)
                .map_err(|e| match e {
                    HandoverError::Document(msg) => HandoverError::Document(format!(
                        "the object {key:?} in {}: {msg}",
                        self.describe()
                    )),
                    other => other,
                }),
        }
    }

    /// Serializes `handover` and writes it with [`write_durable`](Self::write_durable).
    pub async fn write_functional_accounts(
        &self,
        key: &str,
        handover: &OxFunctionalAccounts,
    ) -> Result<(), HandoverError> {
        let bytes = handover.to_yaml()?;
        self.write_durable(key, bytes).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn account(name: &str, uuid: &str, mail: &str) -> FunctionalAccount {
        FunctionalAccount {
            name: name.into(),
            display_name: None,
            dn: format!("cn={name},cn=functional_accounts,cn=open-xchange,dc=x"),
            position: "cn=functional_accounts,cn=open-xchange,dc=x".into(),
            entry_uuid: uuid.into(),
            univention_object_identifier: None,
            mail_primary_address: mail.into(),
            ox_context: 1,
            personal: None,
            ox_quota: None,
            users: vec![LinkedUser {
                dn: "uid=anna,cn=users,dc=x".into(),
                uid: "anna".into(),
                entry_uuid: Some("0f3e".into()),
                univention_object_identifier: None,
                is_ox_user: true,
                ox_user_id: Some(3),
            }],
            groups: vec![],
            ox_secondary_accounts: vec![],
            udm_properties: BTreeMap::new(),
        }
    }

    #[test]
    fn yaml_round_trip_with_the_documented_field_names() {
        let mut doc = OxFunctionalAccounts::new("1.18.0", "2026-03-02T10:15:00Z");
        doc.accounts
            .push(account("Team Sales", "5b1c", "sales@example.org"));
        let yaml = String::from_utf8(doc.to_yaml().unwrap()).unwrap();
        for needle in [
            "apiVersion: stagehand.dev/handover/v1",
            "kind: OxFunctionalAccounts",
            "recordedAt:",
            "entryUUID: 5b1c",
            "mailPrimaryAddress: sales@example.org",
            "oxContext: 1",
            "isOxUser: true",
            "oxUserId: 3",
        ] {
            assert!(yaml.contains(needle), "{needle:?} missing in\n{yaml}");
        }
        assert_eq!(
            OxFunctionalAccounts::from_yaml(yaml.as_bytes()).unwrap(),
            doc
        );
    }

    #[test]
    fn unknown_versions_kinds_and_fields_are_refused() {
        let e = OxFunctionalAccounts::from_yaml(
            b"apiVersion: stagehand.dev/handover/v9\nkind: OxFunctionalAccounts\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("newer Stagehand"), "{e}");
        let e = OxFunctionalAccounts::from_yaml(b"kind: OxFunctionalAccounts\n").unwrap_err();
        assert!(e.to_string().contains("no apiVersion"), "{e}");
        let e = OxFunctionalAccounts::from_yaml(
            b"apiVersion: stagehand.dev/handover/v1\nkind: Other\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("kind \"Other\""), "{e}");
        let e = OxFunctionalAccounts::from_yaml(
            b"apiVersion: stagehand.dev/handover/v1\nkind: OxFunctionalAccounts\nrelease: 1.18.0\nrecordedAt: x\nacounts: []\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("acounts"), "{e}");
    }

    #[test]
    fn duplicates_and_empty_fields_are_problems() {
        let mut doc = OxFunctionalAccounts::new("1.18.0", "t");
        doc.accounts.push(account("A", "u1", "a@x"));
        doc.accounts.push(account("B", "U1", "A@x"));
        doc.accounts.push(account("C", "", "c@x"));
        let problems = doc.check();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(doc.to_yaml().is_err());
    }

    #[test]
    fn never_replaced_by_fewer_accounts() {
        let mut old = OxFunctionalAccounts::new("1.18.0", "t");
        old.accounts.push(account("A", "u1", "a@x"));
        old.accounts.push(account("B", "u2", "b@x"));
        let mut new = OxFunctionalAccounts::new("1.18.0", "t2");
        new.accounts.push(account("A", "u1", "a@x"));
        let e = new.may_replace(&old).unwrap_err();
        assert!(e.to_string().contains("\"B\" (u2)"), "{e}");
        new.accounts.push(account("B", "u2", "b@x"));
        new.accounts.push(account("C", "u3", "c@x"));
        new.may_replace(&old).unwrap();
    }
}
