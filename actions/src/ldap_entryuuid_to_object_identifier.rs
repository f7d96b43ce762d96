//! `ldap_entryuuid_to_object_identifier`: sets `univentionObjectIdentifier` to `entryUUID`
//! wherever they differ, then reads the directory back.
//!
//! Every object below `ldap.baseDn` that carries a `univentionObjectIdentifier` is compared
//! with its `entryUUID` as a UUID (case and hyphens do not count). Those that differ get their
//! `entryUUID` as the identifier (an LDAP modify/replace; UDM declares the attribute
//! unchangeable, so the directory is written directly). Objects that already match are left
//! alone, so a rerun finds nothing to do; objects without the attribute are never touched.
//! Afterwards the directory is searched again and the action fails naming the objects that
//! still differ.
//!
//! Two transports (see [`crate::clients::ldap`]): with `ldap.url` set, Stagehand binds to that server
//! itself as `ldap.bindDn` with the secret file `ldap-admin-password`; without it,
//! `ldapsearch`/`ldapmodify` run in `ldap.pod`/`ldap.container` through the Kubernetes exec
//! API, as openDesk's migration does.

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::{ConfigIssue, Endpoint, Needs};
use tracing::info;

use crate::action::ActionConfig;
use crate::action::{
    Action, ActionContext, ActionError, FindingRow, Findings, Outcome, Progress, StopSignal,
};
use crate::clients::IDENTIFIER;
use crate::clients::ldap::{Directory, Entry, Refused, Replace};
pub use crate::clients::{format_uuid, parse_uuid};
use crate::shared_config::{Ldap, needs_secrets};
use crate::text::plural;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the directory is written.
    #[serde(default)]
    pub ldap: Ldap,
}

impl ActionConfig for Config {
    const ID: &'static str = "ldap_entryuuid_to_object_identifier";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        self.ldap.issues("ldap")
    }
}

/// The attribute it is set from.
pub const ENTRY_UUID: &str = "entryUUID";
/// The objects looked at: every one carrying the identifier.
pub const FILTER: &str = "(univentionObjectIdentifier=*)";
/// How many DNs a message lists before it counts the rest.
const LIST_LIMIT: usize = 20;

/// What the directory holds, sorted out.
#[derive(Debug, Default)]
struct Survey {
    /// Objects carrying the identifier.
    carrying: usize,
    /// The changes that make the differing ones match.
    changes: Vec<Replace>,
    /// Objects whose entryUUID could not be read (nothing to set them to).
    unreadable: Vec<String>,
}

/// An entry's entryUUID, when it has exactly one that reads as a UUID.
fn entry_uuid(entry: &Entry) -> Option<u128> {
    match entry.values(ENTRY_UUID) {
        [one] => parse_uuid(one),
        _ => None,
    }
}

/// The change an entry needs: its identifier set to its entryUUID, unless it carries exactly
/// that already (as a UUID). `None` too when its entryUUID cannot be read (nothing to set).
fn change_of(entry: &Entry) -> Option<Replace> {
    let uuid = entry_uuid(entry)?;
    let matches = matches!(entry.values(IDENTIFIER), [one] if parse_uuid(one) == Some(uuid));
    (!matches).then(|| Replace {
        dn: entry.dn.clone(),
        attr: IDENTIFIER.to_string(),
        value: format_uuid(uuid),
    })
}

fn survey(entries: &[Entry]) -> Survey {
    let mut s = Survey {
        carrying: entries.len(),
        changes: entries.iter().filter_map(change_of).collect(),
        unreadable: entries
            .iter()
            .filter(|e| entry_uuid(e).is_none())
            .map(|e| e.dn.clone())
            .collect(),
    };
    s.changes.sort_by(|a, b| a.dn.cmp(&b.dn));
    s.unreadable.sort();
    s
}

/// The group of the findings' rows: objects whose identifier differs from their entryUUID.
pub const DIFFERS: &str = "differs";

/// The findings of a reading (docs/design.md#findings): one row per object whose identifier
/// differs from its entryUUID (`dn`, `objectIdentifier` as it is, `entryUUID`), group
/// [`DIFFERS`]; counts `carrying` (objects carrying the identifier) and `differs`.
pub fn findings_of(entries: &[Entry]) -> Findings {
    let rows: Vec<FindingRow> = entries
        .iter()
        .filter_map(|e| {
            let change = change_of(e)?;
            Some(FindingRow {
                group: DIFFERS.to_string(),
                values: vec![change.dn, e.values(IDENTIFIER).join(" "), change.value],
            })
        })
        .collect();
    let differs = rows.len() as u64;
    Findings::new(
        &["dn", IDENTIFIER, ENTRY_UUID],
        rows,
        [
            ("carrying".to_string(), entries.len() as u64),
            (DIFFERS.to_string(), differs),
        ],
    )
}

/// `a, b, c (and 7 more)`.
fn list<'a>(items: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = items.len();
    let shown: Vec<&str> = items.take(LIST_LIMIT).collect();
    let mut out = shown.join("; ");
    if total > shown.len() {
        out.push_str(&format!(" (and {} more)", total - shown.len()));
    }
    out
}

impl Config {
    async fn read(&self, dir: &dyn Directory) -> Result<Survey, ActionError> {
        Ok(survey(&self.entries(dir).await?))
    }

    async fn entries(&self, dir: &dyn Directory) -> Result<Vec<Entry>, ActionError> {
        dir.search(&self.ldap.base_dn, FILTER, &[ENTRY_UUID, IDENTIFIER])
            .await
            .map_err(ActionError::from)
    }

    fn unreadable_error(&self, dir: &dyn Directory, s: &Survey) -> ActionError {
        ActionError::Failed(format!(
            "{} of {} objects carrying {IDENTIFIER} below {} have no readable {ENTRY_UUID} at {} (may the bind read it?), so there is nothing to set them to: {}",
            s.unreadable.len(),
            s.carrying,
            self.ldap.base_dn,
            dir.describe(),
            list(s.unreadable.iter().map(String::as_str))
        ))
    }

    /// The planning phase on a given directory: reads, changes nothing, says how many
    /// objects differ.
    pub async fn plan_on(&self, dir: &dyn Directory) -> Result<Outcome, ActionError> {
        let entries = self.entries(dir).await?;
        let findings = findings_of(&entries);
        let s = survey(&entries);
        if !s.unreadable.is_empty() {
            return Err(self.unreadable_error(dir, &s));
        }
        let head = format!(
            "{} below {} {} {IDENTIFIER} ({})",
            plural(s.carrying, "object"),
            self.ldap.base_dn,
            if s.carrying == 1 { "carries" } else { "carry" },
            dir.describe()
        );
        if s.changes.is_empty() {
            return Ok(Outcome::new(format!(
                "{head}; all match their {ENTRY_UUID}: nothing to do"
            ))
            .with_findings(findings));
        }
        Ok(Outcome::new(format!(
            "{head}; {} differ from their {ENTRY_UUID} and would be set to it: {}",
            s.changes.len(),
            list(s.changes.iter().map(|c| c.dn.as_str()))
        ))
        .with_findings(findings))
    }

    /// The apply phase on a given directory: sets the differing identifiers, reads back, fails
    /// naming what still differs. With `dryRun` it only plans.
    pub async fn apply_on(&self, dir: &dyn Directory) -> Result<Outcome, ActionError> {
        self.apply_until(dir, &StopSignal::never(), None, &Progress::default())
            .await
    }

    /// [`Config::apply_on`], stopping at its safe points when `stop` asks: before the search
    /// and its changes start, and after them, before the read-back. The changes are one
    /// batch (one `ldapmodify` in the pod, or one connection's modifies) that is let finish;
    /// applied again, the action finds those entries matching and changes only the rest.
    ///
    /// With `approved` (the findings a person approved, docs/design.md#findings), the
    /// directory is read first and the action stops with [`ActionError::FindingsChanged`],
    /// nothing changed, when other objects differ now; the changes then touch only the
    /// approved objects (one that started to differ between that reading and the changes is
    /// left alone, and the read-back names it).
    ///
    /// `progress` shows the search, then the changes counted as the server answers them
    /// (`setting univentionObjectIdentifier below <base>: 2,100/20,000 entries`; the exec
    /// transport's one `ldapmodify` is counted when it ends).
    pub async fn apply_until(
        &self,
        dir: &dyn Directory,
        stop: &StopSignal,
        approved: Option<&Findings>,
        progress: &Progress,
    ) -> Result<Outcome, ActionError> {
        stop.check()?;
        if self.dry_run {
            let planned = self.plan_on(dir).await?;
            let summary = format!("dryRun is set, nothing changed: {}", planned.summary);
            return Ok(Outcome {
                summary,
                findings: planned.findings,
            });
        }
        let allowed: Option<std::collections::BTreeSet<String>> = match approved {
            Some(approved) => {
                let now = findings_of(&self.entries(dir).await?);
                if let Some(difference) = now.difference_from(approved) {
                    return Err(ActionError::FindingsChanged(format!(
                        "the objects whose {IDENTIFIER} differs from their {ENTRY_UUID} below {} ({}) are not the ones approved: {difference}; nothing was changed. Create a new run, review its findings (stagehand report) and approve them",
                        self.ldap.base_dn,
                        dir.describe()
                    )));
                }
                Some(
                    approved
                        .rows
                        .iter()
                        .filter_map(|r| r.values.first().cloned())
                        .collect(),
                )
            }
            None => None,
        };
        let change =
            |e: &Entry| change_of(e).filter(|c| allowed.as_ref().is_none_or(|a| a.contains(&c.dn)));
        // Search, then change what differs. Entries without a readable entryUUID get no
        // change: the planning phase refuses to go on with them, and the read-back below
        // names them.
        progress.step(format!("reading the objects below {}", self.ldap.base_dn));
        let found = dir
            .search(&self.ldap.base_dn, FILTER, &[ENTRY_UUID, IDENTIFIER])
            .await
            .map_err(ActionError::from)?;
        let mut changes: Vec<Replace> = found.iter().filter_map(change).collect();
        changes.sort_by(|a, b| a.dn.cmp(&b.dn));
        progress.phase(
            format!("setting {IDENTIFIER} below {}", self.ldap.base_dn),
            Some(changes.len() as u64),
            "entries",
        );
        let refused = dir.replace(&changes).await.map_err(ActionError::from)?;
        progress.set_done(changes.len() as u64);
        let changed = findings_of(&found);
        let before = survey(&found);
        if before.changes.is_empty() && before.unreadable.is_empty() {
            return Ok(Outcome::new(format!(
                "{} below {} {} {IDENTIFIER}; all match their {ENTRY_UUID}: nothing to do",
                plural(before.carrying, "object"),
                self.ldap.base_dn,
                if before.carrying == 1 {
                    "carries"
                } else {
                    "carry"
                },
            ))
            .with_findings(changed));
        }
        if let Err(stopped) = stop.check() {
            info!(
                changed = before.changes.len(),
                "stopping after the changes, before their read-back"
            );
            return Err(stopped);
        }
        let after = self.read(dir).await?;
        let still: Vec<&str> = after
            .changes
            .iter()
            .map(|c| c.dn.as_str())
            .chain(after.unreadable.iter().map(String::as_str))
            .collect();
        if !still.is_empty() {
            let mut message = format!(
                "after setting {IDENTIFIER} to {ENTRY_UUID} on {} at {}, {} of {} objects still carry a different {IDENTIFIER}: {}",
                plural(before.changes.len(), "object"),
                dir.describe(),
                still.len(),
                after.carrying,
                list(still.iter().copied())
            );
            if !refused.is_empty() {
                message.push_str(&format!(
                    ". The server refused {}: {}",
                    refused_count(&refused),
                    list(
                        refused
                            .iter()
                            .map(Refused::to_string)
                            .collect::<Vec<_>>()
                            .iter()
                            .map(String::as_str)
                    )
                ));
            }
            return Err(ActionError::Failed(message));
        }
        Ok(Outcome::new(format!(
            "set {IDENTIFIER} to {ENTRY_UUID} on {} of {} objects below {} ({}); read back: all {} match",
            before.changes.len(),
            before.carrying,
            self.ldap.base_dn,
            dir.describe(),
            after.carrying
        ))
        .with_findings(changed))
    }
}

/// How many changes were refused, as far as the transport can tell (`ldapmodify` run as one
/// batch reports the batch, not each entry).
fn refused_count(refused: &[Refused]) -> String {
    if refused.iter().all(|r| r.dn.is_some()) {
        plural(refused.len(), "change")
    } else {
        "some changes".to_string()
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let dir = self.ldap.directory(ctx).await?;
            self.plan_on(dir.as_ref()).await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let dir = self.ldap.directory(ctx).await?;
            self.apply_until(
                dir.as_ref(),
                &ctx.stop,
                ctx.approved_findings.as_ref(),
                &ctx.progress,
            )
            .await
        })
    }

    fn needs(&self) -> Needs {
        needs_secrets(self.ldap.secret_files())
    }

    fn endpoints(&self, _namespace: &str) -> Vec<Endpoint> {
        self.ldap.endpoints()
    }

    fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The objects that differ, one row each ([`findings_of`]).
    fn reports_findings(&self) -> bool {
        true
    }

    /// The direct transport connects and binds as planning does; the exec transport proves the
    /// pod, the container, the `pods/exec` right and a read-only search of the base DN
    /// ([`Ldap::prove_transport`]).
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move { self.ldap.prove_transport(ctx).await })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::clients::ldap::LdapError;

    /// The message of the default config's failing apply on `dir`.
    async fn apply_error(dir: &Memory) -> String {
        Config::default()
            .apply_on(dir)
            .await
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn uuids_compare_as_uuids() {
        let a = parse_uuid("0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f").unwrap();
        assert_eq!(parse_uuid("0D4F8A30-1B2C-103F-8A1E-5B1F2C3D4E5F"), Some(a));
        assert_eq!(parse_uuid("{0d4f8a301b2c103f8a1e5b1f2c3d4e5f}"), Some(a));
        assert_eq!(format_uuid(a), "0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f");
        assert_eq!(parse_uuid("0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5"), None);
        assert_eq!(parse_uuid("alice"), None);
        assert_eq!(parse_uuid("+d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f"), None);
    }

    #[test]
    fn config_defaults_and_checks() {
        let c: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(c.ldap.pod, "ums-ldap-server-primary-0");
        assert_eq!(c.ldap.container, "main");
        assert_eq!(c.ldap.base_dn, "dc=swp-ldap,dc=internal");
        assert_eq!(
            c.ldap.effective_bind_dn(),
            "cn=admin,dc=swp-ldap,dc=internal"
        );
        assert_eq!(c.ldap.request_timeout_seconds, 30);
        assert!(c.semantic_issues().is_empty());
        let bad: Config =
            serde_json::from_value(serde_json::json!({"ldap": {"url": "http://x", }})).unwrap();
        assert_eq!(bad.semantic_issues()[0].path, "ldap.url");
        let stray: Config =
            serde_json::from_value(serde_json::json!({"ldap": {"bindDn": "cn=x"}})).unwrap();
        assert_eq!(stray.semantic_issues()[0].path, "ldap.bindDn");
        assert!(
            serde_json::from_value::<Config>(serde_json::json!({"ldap": {"nope": 1}})).is_err()
        );
    }

    /// A directory in memory; `stubborn` DNs accept the modification and keep their value
    /// (what a read-back is for), `refusing` ones are refused.
    #[derive(Debug, Default)]
    struct Memory {
        entries: Mutex<BTreeMap<String, Entry>>,
        stubborn: Vec<String>,
        refusing: Vec<String>,
        modifications: Mutex<usize>,
        /// Asked to stop while the changes are made (a leader losing its Lease meanwhile).
        stop_during_changes: Option<crate::action::StopSender>,
    }

    impl Memory {
        fn with(entries: &[(&str, Option<&str>, Option<&str>)]) -> Self {
            let m = Memory::default();
            for (dn, uuid, id) in entries {
                let mut e = Entry::new(*dn);
                if let Some(u) = uuid {
                    e.push(ENTRY_UUID, *u);
                }
                if let Some(i) = id {
                    e.push(IDENTIFIER, *i);
                }
                m.entries.lock().unwrap().insert(dn.to_string(), e);
            }
            m
        }
        fn id(&self, dn: &str) -> Vec<String> {
            self.entries.lock().unwrap()[dn].values(IDENTIFIER).to_vec()
        }
    }

    impl Directory for Memory {
        fn describe(&self) -> String {
            "memory".into()
        }
        fn search<'a>(
            &'a self,
            _base: &'a str,
            _filter: &'a str,
            _attrs: &'a [&'a str],
        ) -> BoxFuture<'a, Result<Vec<Entry>, LdapError>> {
            let found = self
                .entries
                .lock()
                .unwrap()
                .values()
                .filter(|e| !e.values(IDENTIFIER).is_empty())
                .cloned()
                .collect();
            Box::pin(async move { Ok(found) })
        }
        fn replace<'a>(
            &'a self,
            changes: &'a [Replace],
        ) -> BoxFuture<'a, Result<Vec<Refused>, LdapError>> {
            let mut refused = Vec::new();
            let mut entries = self.entries.lock().unwrap();
            for c in changes {
                *self.modifications.lock().unwrap() += 1;
                if self.refusing.contains(&c.dn) {
                    refused.push(Refused {
                        dn: Some(c.dn.clone()),
                        message: "insufficientAccessRights (50)".into(),
                    });
                } else if !self.stubborn.contains(&c.dn) {
                    let e = entries.get_mut(&c.dn).unwrap();
                    e.attrs
                        .insert(c.attr.to_ascii_lowercase(), vec![c.value.clone()]);
                }
            }
            if let Some(stop) = &self.stop_during_changes {
                stop.stop("the replica lost its Lease");
            }
            Box::pin(async move { Ok(refused) })
        }
    }

    const U1: &str = "11111111-1111-1111-1111-111111111111";
    const U2: &str = "22222222-2222-2222-2222-222222222222";
    const U3: &str = "33333333-3333-3333-3333-333333333333";

    fn sample() -> Memory {
        Memory::with(&[
            ("uid=differs,dc=x", Some(U1), Some("legacy-1")),
            ("uid=matches,dc=x", Some(U2), Some(&U2.to_uppercase())),
            ("uid=none,dc=x", Some(U3), None),
        ])
    }

    #[tokio::test]
    async fn plan_counts_and_changes_nothing_apply_fixes_rerun_has_nothing_to_do() {
        let dir = sample();
        let config = Config::default();
        let planned = config.plan_on(&dir).await.unwrap().summary;
        assert!(
            planned.contains("2 objects below dc=swp-ldap,dc=internal carry"),
            "{planned}"
        );
        assert!(
            planned.contains("1 differ") && planned.contains("uid=differs,dc=x"),
            "{planned}"
        );
        assert_eq!(*dir.modifications.lock().unwrap(), 0);

        let applied = config.apply_on(&dir).await.unwrap().summary;
        assert!(applied.contains("on 1 of 2 objects"), "{applied}");
        assert_eq!(dir.id("uid=differs,dc=x"), [U1]);
        assert_eq!(
            dir.id("uid=matches,dc=x"),
            [U2.to_uppercase()],
            "left alone"
        );
        assert!(dir.id("uid=none,dc=x").is_empty(), "never given one");
        assert_eq!(*dir.modifications.lock().unwrap(), 1);

        let again = config.apply_on(&dir).await.unwrap().summary;
        assert!(again.contains("nothing to do"), "{again}");
        assert_eq!(*dir.modifications.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn findings_list_what_differs_and_an_apply_changes_only_what_was_approved() {
        let dir = sample();
        let config = Config::default();
        let planned = config.plan_on(&dir).await.unwrap().findings.unwrap();
        assert_eq!(planned.columns, ["dn", IDENTIFIER, ENTRY_UUID]);
        assert_eq!(
            planned.rows,
            [FindingRow {
                group: DIFFERS.into(),
                values: vec!["uid=differs,dc=x".into(), "legacy-1".into(), U1.into()],
            }]
        );
        assert_eq!(planned.counts["carrying"], 2);
        assert_eq!(planned.counts[DIFFERS], 1);

        // Another object differs now: nothing changes, the message names it.
        dir.entries
            .lock()
            .unwrap()
            .get_mut("uid=matches,dc=x")
            .unwrap()
            .attrs
            .insert(IDENTIFIER.to_ascii_lowercase(), vec!["legacy-2".into()]);
        let out = config
            .apply_until(
                &dir,
                &StopSignal::never(),
                Some(&planned),
                &Progress::default(),
            )
            .await;
        assert!(
            matches!(&out, Err(ActionError::FindingsChanged(m)) if m.contains("found now but not approved: uid=matches,dc=x (differs)")),
            "{out:?}"
        );
        assert_eq!(*dir.modifications.lock().unwrap(), 0, "nothing changed");

        // The approved set found again: applied, and the findings are what was changed.
        let now = config.plan_on(&dir).await.unwrap().findings.unwrap();
        let applied = config
            .apply_until(&dir, &StopSignal::never(), Some(&now), &Progress::default())
            .await
            .unwrap();
        assert_eq!(applied.findings.unwrap().rows.len(), 2);
        assert_eq!(dir.id("uid=matches,dc=x"), [U2]);
    }

    #[tokio::test]
    async fn the_progress_counts_the_changes_of_the_rewrite() {
        let dir = sample();
        let progress = Progress::default();
        Config::default()
            .apply_until(&dir, &StopSignal::never(), None, &progress)
            .await
            .unwrap();
        let seen = progress.snapshot().unwrap();
        assert_eq!(
            seen.line(),
            format!("setting {IDENTIFIER} below dc=swp-ldap,dc=internal: 1/1 entries")
        );
    }

    #[tokio::test]
    async fn a_stop_is_seen_before_the_changes_and_before_the_read_back() {
        let config = Config::default();
        let (tx, asked) = StopSignal::channel();
        tx.stop("the operator is stopping");
        let dir = sample();
        let out = config
            .apply_until(&dir, &asked, None, &Progress::default())
            .await;
        assert!(matches!(out, Err(ActionError::Stopped(_))), "{out:?}");
        assert_eq!(*dir.modifications.lock().unwrap(), 0, "nothing changed");

        let (tx, signal) = StopSignal::channel();
        let mut dir = sample();
        dir.stop_during_changes = Some(tx);
        let out = config
            .apply_until(&dir, &signal, None, &Progress::default())
            .await;
        assert!(matches!(out, Err(ActionError::Stopped(_))), "{out:?}");
        assert_eq!(*dir.modifications.lock().unwrap(), 1, "the batch finished");
        assert_eq!(dir.id("uid=differs,dc=x"), [U1]);
        // Applied again (the next leader): nothing left to change.
        dir.stop_during_changes = None;
        let again = config.apply_on(&dir).await.unwrap().summary;
        assert!(again.contains("nothing to do"), "{again}");
        assert_eq!(*dir.modifications.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn dry_run_config_only_plans() {
        let dir = sample();
        let config = Config {
            dry_run: true,
            ..Config::default()
        };
        let out = config.apply_on(&dir).await.unwrap().summary;
        assert!(out.starts_with("dryRun is set, nothing changed"), "{out}");
        assert_eq!(*dir.modifications.lock().unwrap(), 0);
        assert_eq!(dir.id("uid=differs,dc=x"), ["legacy-1"]);
    }

    #[tokio::test]
    async fn a_change_that_does_not_stick_fails_the_read_back() {
        let mut dir = sample();
        dir.stubborn.push("uid=differs,dc=x".into());
        let err = apply_error(&dir).await;
        assert!(
            err.contains("1 of 2 objects still carry a different univentionObjectIdentifier: uid=differs,dc=x"),
            "{err}"
        );
        assert!(!err.contains("refused"), "{err}");
    }

    #[tokio::test]
    async fn refused_changes_are_named_with_the_servers_answer() {
        let mut dir = sample();
        dir.refusing.push("uid=differs,dc=x".into());
        let err = apply_error(&dir).await;
        assert!(err.contains("still carry"), "{err}");
        assert!(
            err.contains(
                "The server refused 1 change: uid=differs,dc=x: insufficientAccessRights (50)"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn objects_without_a_readable_entry_uuid_fail_the_plan_and_the_read_back() {
        let dir = Memory::with(&[
            ("uid=a,dc=x", None, Some("x")),
            ("uid=b,dc=x", Some("not-a-uuid"), Some("x")),
            ("uid=c,dc=x", Some(U1), Some("x")),
        ]);
        let err = Config::default()
            .plan_on(&dir)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 of 3 objects"), "{err}");
        assert!(err.contains("uid=a,dc=x; uid=b,dc=x"), "{err}");
        assert_eq!(
            *dir.modifications.lock().unwrap(),
            0,
            "planning changes nothing"
        );
        // Apply (which the engine only reaches after a plan that passed) sets what it can
        // and names the rest.
        let err = apply_error(&dir).await;
        assert!(
            err.contains("2 of 3 objects still carry a different univentionObjectIdentifier: uid=a,dc=x; uid=b,dc=x"),
            "{err}"
        );
        assert_eq!(dir.id("uid=c,dc=x"), [U1]);
    }

    #[tokio::test]
    async fn long_lists_are_cut_and_counted() {
        let dns: Vec<String> = (0..25).map(|i| format!("uid=u{i:02},dc=x")).collect();
        let entries: Vec<(&str, Option<&str>, Option<&str>)> = dns
            .iter()
            .map(|d| (d.as_str(), Some(U1), Some("old")))
            .collect();
        let dir = Memory::with(&entries);
        let planned = Config::default().plan_on(&dir).await.unwrap().summary;
        assert!(planned.contains("25 differ"), "{planned}");
        assert!(planned.contains("uid=u19,dc=x (and 5 more)"), "{planned}");
        assert!(!planned.contains("uid=u20"), "{planned}");
    }

    #[tokio::test]
    async fn multiple_identifier_values_count_as_differing() {
        let dir = Memory::with(&[("uid=a,dc=x", Some(U1), Some(U1))]);
        dir.entries
            .lock()
            .unwrap()
            .get_mut("uid=a,dc=x")
            .unwrap()
            .push(IDENTIFIER, U2);
        Config::default().apply_on(&dir).await.unwrap();
        assert_eq!(dir.id("uid=a,dc=x"), [U1]);
    }
}
