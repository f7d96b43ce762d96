//! The IAM's LDAP directory as the actions read and write it, behind one trait with two
//! transports:
//!
//! - [`direct`]: an LDAP connection of Stagehand's own (`ldap://`, `ldaps://` or `ldapi://`,
//!   simple bind), with paged searches and many modifications in flight on one connection;
//! - [`exec`]: `ldapsearch`/`ldapmodify` executed inside the LDAP server's pod through the
//!   Kubernetes exec API, bound with SASL EXTERNAL over `ldapi:///` (what openDesk's own
//!   migrations do).
//!
//! [`escape`] builds filters and DNs from data, [`dn`] reads DNs back (compares them, takes
//! them apart), [`ldif`] reads and writes the LDIF the command
//! line tools speak.

pub mod direct;
pub mod dn;
pub mod escape;
pub mod exec;
pub mod ldif;
pub(crate) mod wire;

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;

/// One entry as a search returned it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// The entry's DN, as the server wrote it.
    pub dn: String,
    /// The values of the attributes asked for, by lower-cased attribute name. Values that are
    /// not UTF-8 are kept with replacement characters (the actions compare UUIDs and names).
    pub attrs: BTreeMap<String, Vec<String>>,
}

impl Entry {
    /// An entry without attributes.
    pub fn new(dn: impl Into<String>) -> Self {
        Self {
            dn: dn.into(),
            attrs: BTreeMap::new(),
        }
    }

    /// Adds a value (attribute names are case-insensitive).
    pub fn push(&mut self, attr: &str, value: impl Into<String>) {
        self.attrs
            .entry(attr.to_ascii_lowercase())
            .or_default()
            .push(value.into());
    }

    /// The values of `attr` (case-insensitive), empty when it has none.
    pub fn values(&self, attr: &str) -> &[String] {
        // Few attributes per entry: a scan without allocating beats a lower-cased lookup.
        self.attrs
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(attr))
            .map_or(&[], |(_, values)| values.as_slice())
    }
}

/// Replaces every value of `attr` on the entry `dn` with `value` (an LDAP modify/replace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replace {
    /// The entry.
    pub dn: String,
    /// The attribute.
    pub attr: String,
    /// Its one new value.
    pub value: String,
}

/// A change the server did not make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The entry, when the transport can tell which one (`ldapmodify` run as one batch cannot:
    /// the read-back afterwards names the entries).
    pub dn: Option<String>,
    /// The server's answer, e.g. `insufficientAccessRights (50): no write access to parent`.
    pub message: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dn {
            Some(dn) => write!(f, "{dn}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Why the directory could not be read or written. Messages name the server or pod and never
/// carry the password.
#[derive(Debug, thiserror::Error)]
pub enum LdapError {
    /// The configuration cannot work (an unusable URL, a missing secret).
    #[error("{0}")]
    Config(String),
    /// No connection to the server.
    #[error("cannot connect to the LDAP server {url}: {message}")]
    Connect {
        /// The server's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The server refused the bind.
    #[error(
        "the LDAP server {url} refused the bind as {bind_dn}: {message} (check ldap.bindDn and the secret file ldap-admin-password)"
    )]
    Bind {
        /// The server's URL.
        url: String,
        /// The DN bound as.
        bind_dn: String,
        /// The server's answer.
        message: String,
    },
    /// A search failed.
    #[error("searching {base} for {filter} at {server}: {message}")]
    Search {
        /// What was searched (URL and bind DN, or pod and container).
        server: String,
        /// The search base.
        base: String,
        /// The filter.
        filter: String,
        /// The server's (or the tool's) answer.
        message: String,
        /// The LDAP result code, when the server answered one (`ldapsearch` exits with it).
        code: Option<u32>,
    },
    /// The connection failed while changes were being sent.
    #[error("modifying entries at {server}: {message}")]
    Modify {
        /// Where the changes went.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The Kubernetes exec API could not run a command in the LDAP server's container.
    #[error("cannot execute {command} in {target}: {message}")]
    Exec {
        /// The command (`ldapsearch` or `ldapmodify`).
        command: String,
        /// Pod, container and namespace.
        target: String,
        /// The API server's answer.
        message: String,
    },
    /// Output of a command line tool that is not the LDIF expected.
    #[error("cannot read what {command} printed in {target}: {message}")]
    Ldif {
        /// The command.
        command: String,
        /// Where it ran.
        target: String,
        /// What is wrong with the output.
        message: String,
    },
}

impl From<LdapError> for crate::action::ActionError {
    /// By what happened: no connection (or one broken while changes were sent)
    /// [`ActionError::Unavailable`](crate::action::ActionError::Unavailable); a refused bind
    /// (invalidCredentials) or a search answered insufficientAccessRights (50) or
    /// invalidCredentials (49) `Refused`; a search answered noSuchObject (32) `NotFound`;
    /// output of `ldapsearch` that is not LDIF `InvalidAnswer`; anything else `Failed`. The
    /// message is the LDAP error's.
    fn from(e: LdapError) -> Self {
        use crate::action::ActionError;
        let message = e.to_string();
        match e {
            LdapError::Connect { .. } | LdapError::Modify { .. } => {
                ActionError::Unavailable(message)
            }
            LdapError::Bind { .. }
            | LdapError::Search {
                code: Some(49 | 50),
                ..
            } => ActionError::Refused(message),
            LdapError::Search { code: Some(32), .. } => ActionError::NotFound(message),
            LdapError::Ldif { .. } => ActionError::InvalidAnswer(message),
            LdapError::Config(_) | LdapError::Search { .. } | LdapError::Exec { .. } => {
                ActionError::Failed(message)
            }
        }
    }
}

/// A directory the actions can search and change.
pub trait Directory: Send + Sync + fmt::Debug {
    /// What the directory is, for messages: `ldap://host:389 as cn=admin,...` or `pod X,
    /// container Y, namespace Z`.
    fn describe(&self) -> String;

    /// Every entry below `base` (subtree) matching `filter`, with the attributes `attrs`
    /// (operational ones such as `entryUUID` included when named). Pages through large
    /// results.
    fn search<'a>(
        &'a self,
        base: &'a str,
        filter: &'a str,
        attrs: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Entry>, LdapError>>;

    /// Makes every change it can; returns the ones the server refused. An error means the
    /// transport itself failed (some changes may have been made: read back to find out).
    fn replace<'a>(
        &'a self,
        changes: &'a [Replace],
    ) -> BoxFuture<'a, Result<Vec<Refused>, LdapError>>;

    /// The naming contexts the server's root DSE lists (`namingContexts`): the base DNs of
    /// its databases, for an action whose config names none. This default says the transport
    /// cannot tell.
    fn naming_contexts(&self) -> BoxFuture<'_, Result<Vec<String>, LdapError>> {
        let server = self.describe();
        Box::pin(async move {
            Err(LdapError::Config(format!(
                "{server} cannot read the root DSE: set ldap.baseDn"
            )))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_are_case_insensitive() {
        let mut e = Entry::new("uid=a,dc=x");
        e.push("entryUUID", "1");
        e.push("ENTRYUUID", "2");
        assert_eq!(e.values("entryuuid"), ["1", "2"]);
        assert!(e.values("univentionObjectIdentifier").is_empty());
    }
}
