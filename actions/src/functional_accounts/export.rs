//! `ox_functional_accounts_export`: part 1 of the Functional Accounts to Shared Accounts
//! migration (stage `pre`). Records the accounts in the handover, then removes them from OX and
//! the IAM, and reads OX back.
//!
//! **Planning** (and a dry run, or `dryRun: true`) reads every `oxmail/functional_account` with
//! its users and groups through the UDM REST API, checks that every name can become a Shared
//! Account name (the rule of [`crate::functional_accounts::name`]; two accounts that would get
//! one name, or an existing Shared Account of another identifier under that name, fail too),
//! proves the object store answers and holds the bucket, reads the handover if there is one,
//! and proves the OX credentials by listing every context's secondary accounts. It reports what
//! apply would do and fails on everything apply would stop at.
//!
//! **Apply** works out its case from the state it finds:
//!
//! | handover | Functional Accounts in the IAM | apply |
//! | --- | --- | --- |
//! | none | some | write the handover (PUT, read back, compared), remove every account's OX secondary accounts per context (`OXSecondaryAccountService.delete` by primary address, for every user), delete the UDM objects, read every OX context and the IAM back |
//! | none | none | write an empty handover, so part 2 finds one and creates nothing |
//! | present, written by this run | some, all described by it | **continue**: the run was re-entered after its operator died part way; remove the OX secondary accounts of the handover's accounts that are left, delete the remaining accounts from the IAM, read back |
//! | present, written by another run | some | **stop** with instructions, changing nothing: an earlier run died part way |
//! | present | none | repeat only the final read-back of OX against the handover |
//!
//! "This run" is the MigrationRun's uid, recorded in the handover (`runUid`): a run deleted and
//! created again under its name is another run, and so is a run without a uid (the library
//! called outside the operator). A handover is never rewritten with fewer accounts than it
//! holds, and nothing is removed before the handover is durable.
//!
//! **Stopping** (the operator's stop signal: lost leadership, shutdown, the run deleted): before
//! the handover is written, and after it at every safe point of the removal (between two
//! requests, every request in flight awaited). The handover already describes every account
//! then, so the same run, resumed by the next leader or the restarted operator, continues the
//! export from it (the "continue" case above) and sends requests only for what is left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stagehand_config::{ConfigIssue, Endpoint, HandoverRole, Needs};

use crate::action::ActionConfig;
use crate::action::{
    Action, ActionContext, ActionError, Outcome, Progress, RunIdentity, StopSignal,
};
use crate::batch::run_bounded;
use crate::clients::IDENTIFIER;
use crate::clients::ldap::dn::{norm_dn, parent_of};
use crate::clients::ox::{AccountOwners, Context, OxClient, OxError, SecondaryAccount};
use crate::clients::s3::HandoverStore;
use crate::clients::udm::{FUNCTIONAL_ACCOUNT, GROUP, SHARED_ACCOUNT, UdmClient, UdmObject};
use crate::functional_accounts::name::{NameError, shared_account_names};
use crate::functional_accounts::record::{
    FunctionalAccount, LinkedGroup, LinkedUser, OxFunctionalAccounts, OxSecondaryAccount,
};
use crate::functional_accounts::{IN_FLIGHT, check_store_and_udm, handover_needs, short_list};
use crate::shared_config::{Handover, LdapBase, OX_PASSWORD_FILE, OxSoap, UDM_PASSWORD_FILE, Udm};
use crate::text::{bytes, plural};

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// The UDM REST API.
    #[serde(default)]
    pub udm: Udm,
    /// The directory base.
    #[serde(default)]
    pub ldap: LdapBase,
    /// Where the accounts are written down for part 2.
    #[serde(default)]
    pub handover: Handover,
    /// OX App Suite's SOAP API and the context to work in.
    #[serde(default)]
    pub ox_app_suite: OxContextSoap,
}

/// OX App Suite's SOAP API, with the context the secondary accounts live in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OxContextSoap {
    /// The OX context of a Functional Account that names none (`oxContext` not set), as the OX
    /// Connector's default context.
    #[serde(default = "default_context")]
    pub context: u32,
    /// The SOAP API's base URL; left out, it is
    /// `http://open-xchange-core-mw-admin.<namespace>.svc.cluster.local` of the Migration's
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soap_url: Option<String>,
    /// The master admin to authenticate as; the password is the `ox-master-password` secret file.
    #[serde(default = "default_username")]
    #[schemars(length(min = 1))]
    pub username: String,
    /// Timeout of one request.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
    /// The most bytes read of one answer (16 MiB when left out); a larger answer fails the
    /// action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_response_bytes: Option<u64>,
    /// CA certificates trusted for an `https://` URL besides the public web roots and the
    /// system's store: a PEM file path or the PEM text itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Do not verify the server's certificate: the run records a warning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
}

impl OxContextSoap {
    /// The SOAP API part of the block.
    pub fn soap(&self) -> OxSoap {
        OxSoap {
            soap_url: self.soap_url.clone(),
            username: self.username.clone(),
            request_timeout_seconds: self.request_timeout_seconds,
            max_response_bytes: self.max_response_bytes,
            ca_bundle: self.ca_bundle.clone(),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify,
        }
    }
}

fn default_context() -> u32 {
    1
}

fn default_username() -> String {
    OxSoap::default().username
}

fn default_timeout() -> u64 {
    OxSoap::default().request_timeout_seconds
}

impl Default for OxContextSoap {
    fn default() -> Self {
        let soap = OxSoap::default();
        Self {
            context: default_context(),
            soap_url: soap.soap_url,
            username: soap.username,
            request_timeout_seconds: soap.request_timeout_seconds,
            max_response_bytes: soap.max_response_bytes,
            ca_bundle: soap.ca_bundle,
            insecure_skip_tls_verify: soap.insecure_skip_tls_verify,
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_functional_accounts_export";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = self.ox_app_suite.soap().issues("oxAppSuite");
        issues.extend(self.udm.issues("udm"));
        issues
    }
}

/// The properties of a Functional Account the handover holds in fields of its own; every other
/// one goes into `udmProperties`.
const RECORDED_PROPERTIES: &[&str] = &[
    "name",
    "mailPrimaryAddress",
    "oxContext",
    "personal",
    "oxQuota",
    "users",
    "groups",
    IDENTIFIER,
];

/// The user properties read for the handover.
const USER_PROPERTIES: &[&str] = &["username", "isOxUser", "oxContext", IDENTIFIER];

/// One OX context's secondary account rows.
#[derive(Debug, Clone)]
struct ContextRows {
    id: u32,
    rows: Vec<SecondaryAccount>,
}

/// What the action found in the IAM, OX and the store.
#[derive(Debug)]
struct Survey {
    /// The handover in the store, if any.
    existing: Option<OxFunctionalAccounts>,
    /// The Functional Accounts in the IAM, as they would be recorded.
    accounts: Vec<FunctionalAccount>,
    /// Their UDM objects (same order).
    objects: Vec<UdmObject>,
    /// Every OX context with its secondary accounts.
    ox: Vec<ContextRows>,
}

/// The per-run report: what the log says account by account, summarized.
#[derive(Debug, Default)]
struct Report {
    linked: usize,
    unlinkable: Vec<String>,
    missing_users: Vec<String>,
    groups: usize,
    /// Per context: (address, user entries) of the exported accounts' mailboxes.
    mailboxes: BTreeMap<u32, Vec<(String, usize)>>,
    /// Per context: addresses of secondary accounts that belong to no exported account.
    foreign: BTreeMap<u32, BTreeSet<String>>,
    /// Contexts the accounts name that OX does not have.
    contexts_missing: BTreeSet<u32>,
}

impl Report {
    fn mailbox_count(&self) -> usize {
        self.mailboxes.values().map(Vec::len).sum()
    }

    fn describe_users(&self) -> String {
        let mut out = format!("users linked: {}", self.linked);
        if !self.unlinkable.is_empty() {
            out.push_str(&format!(
                "; users that cannot be linked (no groupware account, isOxUser is not set): {} ({})",
                self.unlinkable.len(),
                short_list(&self.unlinkable)
            ));
        }
        if !self.missing_users.is_empty() {
            out.push_str(&format!(
                "; linked DNs that name no user: {} ({})",
                self.missing_users.len(),
                short_list(&self.missing_users)
            ));
        }
        if self.groups > 0 {
            out.push_str(&format!(
                "; group links recorded: {} (not carried over: the OX Connector never provisioned them)",
                self.groups
            ));
        }
        out
    }

    fn describe_ox(&self) -> String {
        let mut parts: Vec<String> = self
            .mailboxes
            .iter()
            .map(|(ctx, boxes)| {
                let entries: usize = boxes.iter().map(|(_, n)| n).sum();
                format!(
                    "context {ctx}: {} with {}",
                    mailboxes(boxes.len()),
                    user_entries(entries)
                )
            })
            .collect();
        if parts.is_empty() {
            parts.push("no secondary account of these accounts".into());
        }
        let mut out = parts.join(", ");
        let foreign: Vec<String> = self
            .foreign
            .iter()
            .flat_map(|(ctx, addrs)| addrs.iter().map(move |a| format!("{a} (context {ctx})")))
            .collect();
        if !foreign.is_empty() {
            out.push_str(&format!(
                "; foreign secondary accounts left alone: {} ({})",
                foreign.len(),
                short_list(&foreign)
            ));
        }
        if !self.contexts_missing.is_empty() {
            let ids: Vec<String> = self.contexts_missing.iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "; contexts the accounts name that OX App Suite does not have: {}",
                ids.join(", ")
            ));
        }
        out
    }
}

/// The clients of a run.
struct Clients {
    udm: UdmClient,
    ox: OxClient,
    store: HandoverStore,
    /// The run, recorded in the handover.
    run: RunIdentity,
    /// The operator's stop: honoured before the handover write and at every safe point of the
    /// removal after it (see [`Config::remove`]).
    stop: StopSignal,
    /// How far the export is.
    progress: Progress,
}

impl Config {
    /// The SOAP API's base URL: `oxAppSuite.soapUrl`, or OX's admin service in `namespace`.
    pub fn soap_url(&self, namespace: &str) -> String {
        match &self.ox_app_suite.soap_url {
            Some(url) => url.clone(),
            None => format!("http://open-xchange-core-mw-admin.{namespace}.svc.cluster.local"),
        }
    }

    fn clients(&self, ctx: &ActionContext) -> Result<Clients, ActionError> {
        let store = HandoverStore::for_run(ctx, Self::ID)?;
        let udm = self.udm.client(ctx)?;
        let ox = self
            .ox_app_suite
            .soap()
            .client(ctx, &self.soap_url(&ctx.namespace))?;
        Ok(Clients {
            udm,
            ox,
            store,
            run: ctx.run.clone(),
            stop: ctx.stop.clone(),
            progress: ctx.progress.clone(),
        })
    }

    fn key(&self) -> &str {
        &self.handover.object_key
    }

    fn ox_failed(&self, ox: &OxClient, e: OxError) -> ActionError {
        if e.is_authentication() {
            ActionError::Refused(format!(
                "OX App Suite at {} refused the credentials of {:?} ({e}): check oxAppSuite.username and the secret file {OX_PASSWORD_FILE:?} (per-context calls with the master admin need MASTER_ACCOUNT_OVERRIDE=true)",
                ox.base_url(),
                ox.login()
            ))
        } else {
            ActionError::from(e)
        }
    }

    /// What depends on nothing an earlier action changes (planning's first step, and the
    /// preflight): the store and its bucket, the UDM credential, the OX credential. Answers
    /// OX's contexts.
    async fn check_access(&self, c: &Clients) -> Result<Vec<Context>, ActionError> {
        check_store_and_udm(&c.store, &c.udm).await?;
        self.ox_contexts(&c.ox).await
    }

    /// Reads the store, the IAM and OX.
    async fn survey(&self, c: &Clients) -> Result<Survey, ActionError> {
        c.progress
            .step("reading the Functional Accounts, their users and OX App Suite");
        let contexts = self.check_access(c).await?;
        let existing = c.store.read_functional_accounts(self.key()).await?;
        let (accounts, objects) = self.read_iam(&c.udm).await?;
        let ox = self.read_rows(&c.ox, contexts).await?;
        Ok(Survey {
            existing,
            accounts,
            objects,
            ox,
        })
    }

    /// Every Functional Account with its users and groups, as the handover records them.
    async fn read_iam(
        &self,
        udm: &UdmClient,
    ) -> Result<(Vec<FunctionalAccount>, Vec<UdmObject>), ActionError> {
        let base = &self.ldap.base_dn;
        let objects = udm.all_objects(FUNCTIONAL_ACCOUNT, base, &[]).await?;
        let mut user_dns = BTreeSet::new();
        let mut group_dns = BTreeSet::new();
        for o in &objects {
            user_dns.extend(o.property_strings("users"));
            group_dns.extend(o.property_strings("groups"));
        }
        let users = udm.users_by_dn(base, &user_dns, USER_PROPERTIES).await?;
        let mut groups: BTreeMap<String, Option<UdmObject>> = BTreeMap::new();
        for dn in &group_dns {
            groups.insert(norm_dn(dn), udm.get_dn(GROUP, dn).await?);
        }
        let mut accounts = Vec::with_capacity(objects.len());
        for o in &objects {
            accounts.push(self.record(o, &users, &groups)?);
        }
        Ok((accounts, objects))
    }

    /// The handover record of one Functional Account.
    pub(crate) fn record(
        &self,
        o: &UdmObject,
        users: &BTreeMap<String, Option<UdmObject>>,
        groups: &BTreeMap<String, Option<UdmObject>>,
    ) -> Result<FunctionalAccount, ActionError> {
        let name = o.property_str("name").unwrap_or_default();
        let Some(entry_uuid) = o.uuid.clone().filter(|u| !u.is_empty()) else {
            return Err(ActionError::InvalidAnswer(format!(
                "the UDM REST API gave no entryUUID (uuid) for the Functional Account {}: it is needed as the Shared Account's {IDENTIFIER}",
                o.dn
            )));
        };
        let Some(mail) = o.property_str("mailPrimaryAddress") else {
            return Err(ActionError::Failed(format!(
                "the Functional Account {name:?} ({}) has no mailPrimaryAddress: a Shared Account needs one; give it one in the IAM and run the stage again",
                o.dn
            )));
        };
        let ox_context = match o.property_i64("oxContext") {
            None => self.ox_app_suite.context,
            Some(n) => u32::try_from(n).map_err(|_| {
                ActionError::Failed(format!(
                    "the Functional Account {name:?} ({}) has the oxContext {n}, which is not an OX context id",
                    o.dn
                ))
            })?,
        };
        let linked_users = o
            .property_strings("users")
            .into_iter()
            .map(|dn| match users.get(&norm_dn(&dn)).cloned().flatten() {
                Some(u) => LinkedUser {
                    uid: u
                        .property_str("username")
                        .or_else(|| u.id.clone())
                        .unwrap_or_default(),
                    entry_uuid: u.uuid.clone(),
                    univention_object_identifier: u.object_identifier(),
                    is_ox_user: u.flag("isOxUser"),
                    ox_user_id: None,
                    dn,
                },
                None => LinkedUser {
                    dn,
                    uid: String::new(),
                    entry_uuid: None,
                    univention_object_identifier: None,
                    is_ox_user: false,
                    ox_user_id: None,
                },
            })
            .collect();
        let linked_groups = o
            .property_strings("groups")
            .into_iter()
            .map(|dn| {
                let g = groups.get(&norm_dn(&dn)).cloned().flatten();
                LinkedGroup {
                    name: g.as_ref().and_then(|g| g.property_str("name")),
                    entry_uuid: g.as_ref().and_then(|g| g.uuid.clone()),
                    univention_object_identifier: g.as_ref().and_then(UdmObject::object_identifier),
                    dn,
                }
            })
            .collect();
        let udm_properties: BTreeMap<String, Value> = o
            .properties
            .iter()
            .filter(|(k, v)| {
                !RECORDED_PROPERTIES.contains(&k.as_str())
                    && !v.is_null()
                    && (k.as_str() != "objectFlag" || v.as_array().is_none_or(|a| !a.is_empty()))
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(FunctionalAccount {
            display_name: None,
            dn: o.dn.clone(),
            position: o
                .position
                .clone()
                .unwrap_or_else(|| parent_of(&o.dn).to_string()),
            entry_uuid,
            univention_object_identifier: o.object_identifier(),
            mail_primary_address: mail.to_lowercase(),
            ox_context,
            personal: o.property_str("personal"),
            ox_quota: o.property("oxQuota").filter(|v| !v.is_null()).cloned(),
            users: linked_users,
            groups: linked_groups,
            ox_secondary_accounts: Vec::new(),
            udm_properties,
            name,
        })
    }

    /// OX's contexts (`OXContextService.listAll`: proves the SOAP URL and the credential).
    async fn ox_contexts(&self, ox: &OxClient) -> Result<Vec<Context>, ActionError> {
        ox.list_contexts().await.map_err(|e| self.ox_failed(ox, e))
    }

    /// Every OX context with its secondary accounts.
    async fn read_ox(&self, ox: &OxClient) -> Result<Vec<ContextRows>, ActionError> {
        let contexts = self.ox_contexts(ox).await?;
        self.read_rows(ox, contexts).await
    }

    /// The secondary accounts of each of `contexts`.
    async fn read_rows(
        &self,
        ox: &OxClient,
        contexts: Vec<Context>,
    ) -> Result<Vec<ContextRows>, ActionError> {
        let mut out = Vec::with_capacity(contexts.len());
        for context in contexts {
            let rows = ox
                .list_secondary_accounts(context.id)
                .await
                .map_err(|e| self.ox_failed(ox, e))?;
            out.push(ContextRows {
                id: context.id,
                rows,
            });
        }
        out.sort_by_key(|c| c.id);
        Ok(out)
    }

    /// Fails on every account part 2 could not create: a name without a letter, two accounts
    /// with one Shared Account name, an existing Shared Account of another identifier with the
    /// name or the address.
    async fn check_names(
        &self,
        udm: &UdmClient,
        accounts: &[FunctionalAccount],
    ) -> Result<(), ActionError> {
        let names = shared_account_names(accounts.iter().map(|a| (a.name.as_str(), a.dn.as_str())))
            .map_err(|problems| name_failure(&problems))?;
        if accounts.is_empty() {
            return Ok(());
        }
        let existing = udm
            .all_objects(
                SHARED_ACCOUNT,
                &self.ldap.base_dn,
                &["name", "mailPrimaryAddress", IDENTIFIER],
            )
            .await?;
        let mut by_name: BTreeMap<String, &UdmObject> = BTreeMap::new();
        let mut by_mail: BTreeMap<String, &UdmObject> = BTreeMap::new();
        for sa in &existing {
            if let Some(n) = sa.property_str("name") {
                by_name.insert(n.to_lowercase(), sa);
            }
            if let Some(m) = sa.property_str("mailPrimaryAddress") {
                by_mail.insert(m.to_lowercase(), sa);
            }
        }
        let mut problems = Vec::new();
        for (a, shared) in accounts.iter().zip(&names) {
            for (what, found) in [
                ("name", by_name.get(&shared.to_lowercase())),
                (
                    "address",
                    by_mail.get(&a.mail_primary_address.to_lowercase()),
                ),
            ] {
                if let Some(sa) = found
                    && !sa
                        .object_identifier()
                        .is_some_and(|id| id.eq_ignore_ascii_case(&a.entry_uuid))
                {
                    problems.push(format!(
                        "the Functional Account {:?} would become the Shared Account {shared:?} <{}>, and the Shared Account {} already has that {what}",
                        a.name, a.mail_primary_address, sa.dn
                    ));
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ActionError::Conflict(format!(
                "{} cannot be migrated, nothing was changed: {}; rename or remove the conflicting object in the IAM and run the stage again",
                plural(problems.len(), "Functional Account"),
                problems.join("; ")
            )))
        }
    }

    /// The report of the accounts (users) and OX (mailboxes per context, foreign accounts).
    fn report(&self, accounts: &[FunctionalAccount], ox: &[ContextRows]) -> Report {
        let mut r = Report::default();
        for a in accounts {
            for u in &a.users {
                if u.uid.is_empty() {
                    r.missing_users.push(format!("{} (in {:?})", u.dn, a.name));
                } else if u.is_ox_user {
                    r.linked += 1;
                } else {
                    r.unlinkable.push(format!("{} (in {:?})", u.uid, a.name));
                }
            }
            r.groups += a.groups.len();
        }
        let addresses: BTreeSet<String> = accounts
            .iter()
            .map(|a| a.mail_primary_address.to_lowercase())
            .collect();
        let known: BTreeSet<u32> = ox.iter().map(|c| c.id).collect();
        r.contexts_missing = accounts
            .iter()
            .map(|a| a.ox_context)
            .filter(|c| !known.contains(c))
            .collect();
        for c in ox {
            let mut mine: BTreeMap<String, usize> = BTreeMap::new();
            for row in &c.rows {
                let addr = row
                    .primary_address
                    .clone()
                    .unwrap_or_default()
                    .to_lowercase();
                if addresses.contains(&addr) {
                    *mine.entry(addr).or_default() += 1;
                } else {
                    r.foreign
                        .entry(c.id)
                        .or_default()
                        .insert(if addr.is_empty() {
                            format!("account {}", row.id.unwrap_or_default())
                        } else {
                            addr
                        });
                }
            }
            if !mine.is_empty() {
                r.mailboxes.insert(c.id, mine.into_iter().collect());
            }
        }
        r
    }

    /// The planning phase on given clients.
    async fn plan_with(&self, c: &Clients) -> Result<Outcome, ActionError> {
        let s = self.survey(c).await?;
        let key = self.key();
        match (&s.existing, s.accounts.is_empty()) {
            (Some(existing), false) if continues(&c.run, existing, &s.accounts) => {
                Ok(Outcome::new(format!(
                    "the handover {key:?} in {} was written by this run ({}), which is re-entered: would remove what is left of its {} in OX App Suite and delete the {} still in the IAM, then read back",
                    c.store.describe(),
                    plural(existing.accounts.len(), "account"),
                    plural(existing.accounts.len(), "account"),
                    plural(s.accounts.len(), "Functional Account")
                )))
            }
            (Some(existing), false) => Err(self.stop(c, existing, &s.accounts)),
            (Some(existing), true) => Ok(Outcome::new(format!(
                "no Functional Account is left in the IAM and the handover {key:?} in {} holds {} (written {}): would only read OX App Suite back to confirm that none of them is left; {}",
                c.store.describe(),
                plural(existing.accounts.len(), "account"),
                existing.recorded_at,
                self.report(&existing.accounts, &s.ox).describe_ox()
            ))),
            (None, true) => Ok(Outcome::new(format!(
                "no Functional Account in the IAM: would write an empty handover {key:?} to {}, so that ox_shared_accounts_import finds it and creates nothing",
                c.store.describe()
            ))),
            (None, false) => {
                self.check_names(&c.udm, &s.accounts).await?;
                let doc = self.document(&c.run, &s.accounts, &s.ox);
                let size = doc.to_yaml()?.len();
                let r = self.report(&s.accounts, &s.ox);
                Ok(Outcome::new(format!(
                    "would record {} in the handover {key:?} in {} ({}), then remove {} in OX App Suite ({}), delete the {} from the IAM and read OX App Suite back; {}",
                    plural(s.accounts.len(), "Functional Account"),
                    c.store.describe(),
                    bytes(size),
                    mailboxes(r.mailbox_count()),
                    r.describe_ox(),
                    plural(s.accounts.len(), "Functional Account"),
                    r.describe_users()
                )))
            }
        }
    }

    /// The handover document of `accounts`, with their OX secondary accounts.
    fn document(
        &self,
        run: &RunIdentity,
        accounts: &[FunctionalAccount],
        ox: &[ContextRows],
    ) -> OxFunctionalAccounts {
        let mut doc = OxFunctionalAccounts::new(run.release.clone(), now());
        doc.run.clone_from(&run.name);
        doc.run_uid.clone_from(&run.uid);
        doc.ldap_base_dn = Some(self.ldap.base_dn.clone());
        let mut rows: BTreeMap<String, Vec<OxSecondaryAccount>> = BTreeMap::new();
        for c in ox {
            for row in &c.rows {
                if let Some(addr) = &row.primary_address {
                    rows.entry(addr.to_lowercase())
                        .or_default()
                        .push(OxSecondaryAccount {
                            context_id: c.id,
                            user_id: row.user_id,
                            account_id: row.id,
                            login: row.login.clone(),
                        });
                }
            }
        }
        doc.accounts = accounts
            .iter()
            .cloned()
            .map(|mut a| {
                a.ox_secondary_accounts = rows.remove(&a.mail_primary_address).unwrap_or_default();
                a
            })
            .collect();
        doc
    }

    /// The error that stops a run finding a handover while Functional Accounts remain.
    fn stop(
        &self,
        c: &Clients,
        existing: &OxFunctionalAccounts,
        remaining: &[FunctionalAccount],
    ) -> ActionError {
        let recorded: BTreeSet<String> = existing
            .accounts
            .iter()
            .map(|a| a.entry_uuid.to_lowercase())
            .collect();
        let (described, undescribed): (Vec<&FunctionalAccount>, Vec<&FunctionalAccount>) =
            remaining
                .iter()
                .partition(|a| recorded.contains(&a.entry_uuid.to_lowercase()));
        let label = |a: &&FunctionalAccount| {
            format!(
                "{:?} <{}> (context {})",
                a.name, a.mail_primary_address, a.ox_context
            )
        };
        let described: Vec<String> = described.iter().map(label).collect();
        let undescribed: Vec<String> = undescribed.iter().map(label).collect();
        let mut message = format!(
            "the handover {:?} in {} already exists (written {}, {}) while {} still in the IAM: an earlier run stopped part way, and a run is not continued by the next one. Nothing was changed. Sort it out by hand, keeping the handover (it is the only description of the accounts that are already gone): ",
            self.key(),
            c.store.describe(),
            existing.recorded_at,
            plural(existing.accounts.len(), "account"),
            if remaining.len() == 1 {
                "1 Functional Account is".to_string()
            } else {
                format!("{} Functional Accounts are", remaining.len())
            }
        );
        if !described.is_empty() {
            message.push_str(&format!(
                "the handover describes {} of them ({}): remove each one's secondary accounts in OX App Suite (listsecondaryaccount -c <context>, then deletesecondaryaccount -c <context> -e <address> --groups 0) and then delete it from the IAM (DELETE on the UDM REST API, or udm oxmail/functional_account remove); ",
                described.len(),
                short_list(&described)
            ));
        }
        if !undescribed.is_empty() {
            message.push_str(&format!(
                "the handover does not describe {} ({}): they were created after it was written and would not be migrated; create their Shared Accounts by hand and delete them, or delete them if they are not needed; ",
                plural(undescribed.len(), "Functional Account"),
                short_list(&undescribed)
            ));
        }
        message.push_str(
            "then run the stage again: with no Functional Account left, it only reads OX App Suite back",
        );
        ActionError::Conflict(message)
    }

    /// Reads every OX context back: fails naming the secondary accounts of `accounts` that are
    /// left. Answers the report of what OX holds.
    async fn read_back(
        &self,
        ox: &OxClient,
        accounts: &[FunctionalAccount],
    ) -> Result<Report, ActionError> {
        let contexts = self.read_ox(ox).await?;
        let r = self.report(accounts, &contexts);
        if r.mailboxes.is_empty() {
            return Ok(r);
        }
        let left: Vec<String> = r
            .mailboxes
            .iter()
            .flat_map(|(ctx, boxes)| {
                boxes
                    .iter()
                    .map(move |(addr, n)| format!("{addr} in context {ctx} ({})", user_entries(*n)))
            })
            .collect();
        Err(ActionError::Failed(format!(
            "OX App Suite still holds the secondary accounts of {} that were exported and deleted: {}. OX App Suite answered the deletion but kept them; remove them by hand (deletesecondaryaccount -c <context> -e <address> --groups 0) and run the stage again, which then only reads OX App Suite back",
            mailboxes(left.len()),
            short_list(&left)
        )))
    }

    /// Writes `doc`, never over a handover with accounts it lacks, and only returns once the
    /// store holds exactly it (read back and compared).
    async fn write_handover(
        &self,
        store: &HandoverStore,
        doc: &OxFunctionalAccounts,
    ) -> Result<usize, ActionError> {
        if let Some(existing) = store.read_functional_accounts(self.key()).await? {
            doc.may_replace(&existing)?;
        }
        let yaml = doc.to_yaml()?;
        let written = yaml.len();
        store.write_durable(self.key(), yaml).await?;
        Ok(written)
    }

    /// The apply phase on given clients.
    async fn apply_with(&self, c: &Clients) -> Result<Outcome, ActionError> {
        if self.dry_run {
            let planned = self.plan_with(c).await?;
            return Ok(Outcome::new(format!(
                "dryRun is set, nothing changed: {}",
                planned.summary
            )));
        }
        let s = self.survey(c).await?;
        let key = self.key();
        match (&s.existing, s.accounts.is_empty()) {
            (Some(existing), false) if continues(&c.run, existing, &s.accounts) => {
                tracing::info!(
                    key,
                    accounts = existing.accounts.len(),
                    remaining = s.accounts.len(),
                    "the handover was written by this run, which is re-entered: continuing the export"
                );
                let started = Instant::now();
                let r = self.report(&existing.accounts, &s.ox);
                self.remove(c, &existing.accounts, &s, started).await?;
                Ok(Outcome::new(format!(
                    "continued the export this run began: the handover {key:?} in {} holds {} (written {}); removed the {} left in OX App Suite ({}); deleted the {} left in the IAM; read back: none of them is left in OX App Suite or the IAM",
                    c.store.describe(),
                    plural(existing.accounts.len(), "account"),
                    existing.recorded_at,
                    mailboxes(r.mailbox_count()),
                    r.describe_ox(),
                    plural(s.accounts.len(), "Functional Account"),
                )))
            }
            (Some(existing), false) => Err(self.stop(c, existing, &s.accounts)),
            (Some(existing), true) => {
                tracing::info!(
                    key,
                    accounts = existing.accounts.len(),
                    "the handover exists and no Functional Account is left in the IAM: repeating only the read-back of OX App Suite"
                );
                let r = self.read_back(&c.ox, &existing.accounts).await?;
                Ok(Outcome::new(format!(
                    "nothing left to export: the handover {key:?} holds {} (written {}) and no Functional Account is in the IAM; OX App Suite read back, none of their secondary accounts is left{}",
                    plural(existing.accounts.len(), "account"),
                    existing.recorded_at,
                    foreign_suffix(&r)
                )))
            }
            (None, true) => {
                let doc = self.document(&c.run, &[], &s.ox);
                let size = self.write_handover(&c.store, &doc).await?;
                tracing::info!(
                    key,
                    size,
                    "no Functional Account in the IAM: wrote an empty handover"
                );
                Ok(Outcome::new(format!(
                    "no Functional Account in the IAM: wrote an empty handover {key:?} to {} ({}) for ox_shared_accounts_import",
                    c.store.describe(),
                    bytes(size)
                )))
            }
            (None, false) => self.export(c, &s).await,
        }
    }

    /// The export proper: record, remove in OX, delete in the IAM, read back.
    async fn export(&self, c: &Clients, s: &Survey) -> Result<Outcome, ActionError> {
        let key = self.key();
        let started = Instant::now();
        self.check_names(&c.udm, &s.accounts).await?;
        let r = self.report(&s.accounts, &s.ox);
        for a in &s.accounts {
            let users: Vec<&str> = a.users.iter().map(|u| u.uid.as_str()).collect();
            tracing::info!(
                account = %a.name,
                dn = %a.dn,
                mail = %a.mail_primary_address,
                context = a.ox_context,
                entry_uuid = %a.entry_uuid,
                users = ?users,
                "recording Functional Account"
            );
            for u in &a.users {
                if u.uid.is_empty() {
                    tracing::warn!(account = %a.name, user = %u.dn, "the linked DN names no user: not linked");
                } else if u.is_ox_user {
                    tracing::info!(account = %a.name, user = %u.uid, "user linked");
                } else {
                    tracing::warn!(account = %a.name, user = %u.uid, "user cannot be linked: no groupware account (isOxUser is not set)");
                }
            }
        }
        for (ctx, addrs) in &r.foreign {
            for addr in addrs {
                tracing::info!(context = ctx, address = %addr, "foreign secondary account left alone");
            }
        }

        // Before the handover nothing is changed, so a stop here leaves the whole export to the
        // next run of the action. The removal after it stops at its own safe points (`remove`).
        c.stop.check()?;
        // 1. The handover, durable before anything is removed.
        c.progress.step("writing the handover");
        let doc = self.document(&c.run, &s.accounts, &s.ox);
        let size = self.write_handover(&c.store, &doc).await?;
        let recorded = started.elapsed();
        tracing::info!(
            key,
            store = %c.store.describe(),
            accounts = doc.accounts.len(),
            size,
            "handover written and read back"
        );
        let total = s.accounts.len();
        let (removed_ox, deleted_udm) = self.remove(c, &s.accounts, s, started).await?;
        tracing::info!(
            recorded_ms = recorded.as_millis() as u64,
            ox_removed_ms = (removed_ox - recorded).as_millis() as u64,
            udm_deleted_ms = (deleted_udm - removed_ox).as_millis() as u64,
            read_back_ms = (started.elapsed() - deleted_udm).as_millis() as u64,
            "Functional Accounts exported"
        );
        Ok(Outcome::new(format!(
            "recorded {} in the handover {key:?} in {} ({}); removed {} in OX App Suite ({}); deleted the {} from the IAM; read back: none of them is left in OX App Suite or the IAM; {}",
            plural(total, "Functional Account"),
            c.store.describe(),
            bytes(size),
            mailboxes(r.mailbox_count()),
            r.describe_ox(),
            plural(total, "Functional Account"),
            r.describe_users(),
        )))
    }

    /// Steps 2 to 4 of the export, once the handover recording `recorded` is durable: removes
    /// the OX secondary accounts of `recorded` that `s.ox` holds, deletes `s.objects` (the
    /// accounts still in the IAM) and reads both back. Answers when the OX removal and the IAM
    /// deletion ended, counted from `started`.
    ///
    /// Stops when the operator asks (`c.stop`: the replica lost its leadership, is shutting
    /// down, or the run is being deleted) at each safe point: before the first request, between
    /// two requests of each batch (the ones in flight are awaited and counted), between the OX
    /// removal and the IAM deletion, and before the read-back. All of them come after the
    /// handover, which describes every account, the ones already gone too: the run's next pass
    /// continues from it (`continues`), reads OX and the IAM again and sends requests only for
    /// what is left, so nothing is sent twice and no account is lost.
    async fn remove(
        &self,
        c: &Clients,
        recorded: &[FunctionalAccount],
        s: &Survey,
        started: Instant,
    ) -> Result<(Duration, Duration), ActionError> {
        let key = self.key();
        let total = recorded.len();
        // The accounts deleted from the IAM before this pass (a continued export).
        let gone_before = total.saturating_sub(s.objects.len());
        let stopped = |e, deleted, done: &str| self.stopped_after_handover(e, total, deleted, done);
        c.stop
            .check()
            .map_err(|e| stopped(e, gone_before, "no removal was sent yet"))?;

        // 2. The OX secondary accounts, per context by primary address, for every user.
        let wanted: BTreeSet<String> = recorded
            .iter()
            .map(|a| a.mail_primary_address.to_lowercase())
            .collect();
        let jobs: Vec<(u32, String, usize)> =
            s.ox.iter()
                .flat_map(|ctx| {
                    let mut seen: BTreeMap<String, (String, usize)> = BTreeMap::new();
                    for row in &ctx.rows {
                        if let Some(addr) = &row.primary_address
                            && wanted.contains(&addr.to_lowercase())
                        {
                            seen.entry(addr.to_lowercase())
                                .or_insert_with(|| (addr.clone(), 0))
                                .1 += 1;
                        }
                    }
                    seen.into_values()
                        .map(move |(addr, n)| (ctx.id, addr, n))
                        .collect::<Vec<_>>()
                })
                .collect();
        let mailbox_jobs = jobs.len();
        c.progress.phase(
            "removing mailboxes in OX App Suite",
            Some(mailbox_jobs as u64),
            "mailboxes",
        );
        let removed = run_bounded(
            futures::stream::iter(jobs),
            IN_FLIGHT,
            &c.stop,
            |(ctx, addr, n)| async move {
                tracing::info!(context = ctx, address = %addr, user_entries = n, "removing mailbox (secondary account) in OX App Suite");
                let r = c
                    .ox
                    .delete_secondary_account(ctx, &addr, AccountOwners::Everyone)
                    .await;
                match &r {
                    Ok(_) => c.progress.add(1),
                    Err(e) => {
                        tracing::warn!(context = ctx, address = %addr, error = %e, "removing the mailbox failed");
                    }
                }
                r.map(|_| ())
            },
        )
        .await;
        let ox_report = removed.report(
            mailbox_jobs,
            &mailboxes(mailbox_jobs),
            "removed in OX App Suite",
        );
        if let Some(e) = removed.stop_error() {
            return Err(stopped(e, gone_before, &ox_report));
        }
        let note = format!("{ox_report}; no Functional Account was deleted from the IAM yet");
        if let Some((_, e)) = removed.into_first_failure() {
            return Err(self.after_handover(self.ox_failed(&c.ox, e), total, &note));
        }
        let removed_ox = started.elapsed();
        let ox_done = format!(
            "every mailbox was removed in OX App Suite ({})",
            mailboxes(mailbox_jobs)
        );
        c.stop
            .check()
            .map_err(|e| stopped(e, gone_before, &ox_done))?;

        // 3. The UDM objects.
        c.progress.phase(
            "deleting Functional Accounts from the IAM",
            Some(total as u64),
            "accounts",
        );
        c.progress.set_done(gone_before as u64);
        let deleted = run_bounded(
            futures::stream::iter(s.objects.iter().zip(&s.accounts)),
            IN_FLIGHT,
            &c.stop,
            |(o, a)| async move {
                match c.udm.delete(o.uri.as_str(), None).await {
                    Ok(existed) => {
                        tracing::info!(account = %a.name, dn = %o.dn, existed, "Functional Account deleted from the IAM");
                        c.progress.add(1);
                        Ok(())
                    }
                    Err(e) => {
                        tracing::warn!(account = %a.name, dn = %o.dn, error = %e, "deleting the Functional Account from the IAM failed");
                        Err(ActionError::from(e))
                    }
                }
            },
        )
        .await;
        let remaining = s.objects.len();
        let note = format!(
            "every mailbox was removed in OX App Suite; {}",
            deleted.report(
                remaining,
                &plural(remaining, "Functional Account"),
                "deleted from the IAM"
            )
        );
        if let Some(e) = deleted.stop_error() {
            return Err(stopped(e, gone_before + deleted.succeeded, &ox_done));
        }
        if let Some((_, e)) = deleted.into_first_failure() {
            return Err(self.after_handover(e, total, &note));
        }
        let deleted_udm = started.elapsed();
        c.stop
            .check()
            .map_err(|e| stopped(e, total, &format!("{ox_done}; only the read-back is left")))?;

        // 4. Read back: OX, then the IAM.
        c.progress.step("reading OX App Suite and the IAM back");
        self.read_back(&c.ox, recorded).await?;
        let gone: BTreeSet<String> = recorded
            .iter()
            .map(|a| a.entry_uuid.to_lowercase())
            .collect();
        let left: Vec<String> = c
            .udm
            .all_objects(FUNCTIONAL_ACCOUNT, &self.ldap.base_dn, &["name"])
            .await?
            .into_iter()
            .filter(|o| {
                o.uuid
                    .as_ref()
                    .is_some_and(|u| gone.contains(&u.to_lowercase()))
            })
            .map(|o| o.dn)
            .collect();
        if !left.is_empty() {
            return Err(ActionError::Failed(format!(
                "the IAM still holds {} that were exported and deleted: {}; the handover {key:?} describes them: delete them by hand and run the stage again, which then only reads OX App Suite back",
                plural(left.len(), "Functional Account"),
                short_list(&left)
            )));
        }
        Ok((removed_ox, deleted_udm))
    }

    /// An error after the handover is durable, with what was done and what to do.
    fn after_handover(&self, e: ActionError, total: usize, done: &str) -> ActionError {
        ActionError::Failed(format!(
            "{e}. The handover {:?} is written and describes {}; {done}. A rerun stops because Functional Accounts are still in the IAM: finish by hand as the message of that rerun says (remove the remaining accounts' secondary accounts in OX App Suite, delete them from the IAM, keep the handover), then run the stage again",
            self.key(),
            all_accounts(total),
        ))
    }

    /// The error of a stop asked after the handover is durable: `stop` ([`ActionError::Stopped`])
    /// with how far the removal got (`done`; `deleted` of the `total` accounts are gone from
    /// the IAM) and how the export goes on. Not a failure: the run stays resumable.
    fn stopped_after_handover(
        &self,
        stop: ActionError,
        total: usize,
        deleted: usize,
        done: &str,
    ) -> ActionError {
        stop.after(Some(format!(
            "{done}; {deleted} of {} deleted from the IAM. The handover {:?} is written and describes {} (the ones already gone too): when this run is resumed (by the next leader, or by this operator after a restart) it continues the export from the handover and sends requests only for what is left; a new run does not continue it, and stops naming what is left to finish by hand",
            plural(total, "Functional Account"),
            self.key(),
            all_accounts(total),
        )))
    }
}

/// Whether the handover `existing` was written by the run `run` itself, which is re-entered
/// (its operator died part way), and describes every Functional Account still in the IAM: then
/// the run continues its export instead of stopping. The run is told by its uid; without one
/// on either side it is another run.
fn continues(
    run: &RunIdentity,
    existing: &OxFunctionalAccounts,
    remaining: &[FunctionalAccount],
) -> bool {
    let same_run = run.uid.is_some() && existing.run_uid == run.uid;
    let same_release = existing.release.is_empty() || existing.release == run.release;
    let described: BTreeSet<String> = existing
        .accounts
        .iter()
        .map(|a| a.entry_uuid.to_lowercase())
        .collect();
    same_run
        && same_release
        && remaining
            .iter()
            .all(|a| described.contains(&a.entry_uuid.to_lowercase()))
}

/// `the account`, `all 3 accounts`.
fn all_accounts(total: usize) -> String {
    if total == 1 {
        "the account".to_string()
    } else {
        format!("all {total} accounts")
    }
}

/// `1 mailbox`, `3 mailboxes`.
fn mailboxes(n: usize) -> String {
    if n == 1 {
        "1 mailbox".into()
    } else {
        format!("{n} mailboxes")
    }
}

/// `1 user entry`, `3 user entries`.
fn user_entries(n: usize) -> String {
    if n == 1 {
        "1 user entry".into()
    } else {
        format!("{n} user entries")
    }
}

/// `; foreign secondary accounts left alone: …` when OX holds any.
fn foreign_suffix(r: &Report) -> String {
    let n: usize = r.foreign.values().map(BTreeSet::len).sum();
    if n == 0 {
        String::new()
    } else {
        let all: Vec<String> = r
            .foreign
            .iter()
            .flat_map(|(ctx, addrs)| addrs.iter().map(move |a| format!("{a} (context {ctx})")))
            .collect();
        format!(
            "; foreign secondary accounts left alone: {n} ({})",
            short_list(&all)
        )
    }
}

/// The error for names part 2 could not create, naming every account.
fn name_failure(problems: &[NameError]) -> ActionError {
    let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
    ActionError::Failed(format!(
        "{} cannot become a Shared Account, nothing was changed: {}",
        plural(problems.len(), "Functional Account name"),
        messages.join("; ")
    ))
}

/// The current time, RFC 3339 in UTC.
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let c = self.clients(ctx)?;
            self.plan_with(&c).await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let c = self.clients(ctx)?;
            self.apply_with(&c).await
        })
    }

    fn needs(&self) -> Needs {
        handover_needs(
            &[UDM_PASSWORD_FILE, OX_PASSWORD_FILE],
            &self.handover,
            HandoverRole::Writes,
        )
    }

    fn endpoints(&self, namespace: &str) -> Vec<Endpoint> {
        self.udm
            .endpoints()
            .into_iter()
            .chain(Endpoint::from_url(
                "oxAppSuite.soapUrl",
                &self.soap_url(namespace),
            ))
            .collect()
    }

    fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The store, its bucket and the credential (not the handover object: nobody has written
    /// it yet), the UDM credential and the OX credential.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let c = self.clients(ctx)?;
            self.check_access(&c).await.map(drop)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn defaults_and_the_clock() {
        let c: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(c.handover.object_key, "ox-functional-accounts.yaml");
        assert_eq!(c.ox_app_suite.context, 1);
        assert_eq!(
            c.soap_url("opendesk"),
            "http://open-xchange-core-mw-admin.opendesk.svc.cluster.local"
        );
        assert!(now().ends_with('Z'), "{}", now());
    }

    fn account(uuid: &str) -> FunctionalAccount {
        FunctionalAccount {
            name: format!("fa {uuid}"),
            display_name: None,
            dn: format!("cn=fa {uuid},dc=x"),
            position: "dc=x".into(),
            entry_uuid: uuid.into(),
            univention_object_identifier: None,
            mail_primary_address: format!("{uuid}@example.org"),
            ox_context: 1,
            personal: None,
            ox_quota: None,
            users: Vec::new(),
            groups: Vec::new(),
            ox_secondary_accounts: Vec::new(),
            udm_properties: BTreeMap::new(),
        }
    }

    #[test]
    fn only_the_run_that_wrote_the_handover_continues_it() {
        let run = RunIdentity {
            release: "v1.18.0".into(),
            name: Some("pre".into()),
            uid: Some("uid-1".into()),
            apply_follows: false,
        };
        let mut doc = OxFunctionalAccounts::new("v1.18.0", "2026-12-02T10:00:00Z");
        doc.run = Some("pre".into());
        doc.run_uid = Some("uid-1".into());
        doc.accounts = vec![account("a"), account("b")];
        let left = [account("B")];
        assert!(
            continues(&run, &doc, &left),
            "the same run, every account described"
        );
        // An account the handover does not describe (created since): stop.
        assert!(!continues(&run, &doc, &[account("b"), account("c")]));
        // Another run of the same name (deleted and created again): stop.
        let other = RunIdentity {
            uid: Some("uid-2".into()),
            ..run.clone()
        };
        assert!(!continues(&other, &doc, &left));
        // No uid on either side (the library outside the operator, an older handover): stop.
        let no_uid = RunIdentity {
            uid: None,
            ..run.clone()
        };
        assert!(!continues(&no_uid, &doc, &left));
        let mut old = doc.clone();
        old.run_uid = None;
        assert!(!continues(&run, &old, &left));
        assert!(!continues(&no_uid, &old, &left));
        // Another release's handover: stop.
        let mut other_release = doc.clone();
        other_release.release = "v1.19.0".into();
        assert!(!continues(&run, &other_release, &left));
    }

    /// Clients of servers that refuse every connection (port 9 on loopback): a request sent
    /// fails, so an answer that is a stop proves none was sent.
    fn unreachable_clients(stop: StopSignal) -> Clients {
        let settings = stagehand_config::ObjectStore {
            endpoint: "http://127.0.0.1:9".into(),
            bucket: "migrations".into(),
            region: None,
            path_style: Some(true),
            insecure_skip_tls_verify: None,
            ca_bundle: None,
            access_key_id: "stagehand".into(),
            secret_key_file: "objectstore-migrations-secret-key".into(),
        };
        let secret = crate::action::SecretValue::new("s3-secret");
        let timeout = Duration::from_secs(2);
        Clients {
            udm: UdmClient::new(
                "http://127.0.0.1:9/univention/udm/",
                "cn=admin",
                crate::action::SecretValue::new("pw"),
                timeout,
                &Default::default(),
            )
            .unwrap(),
            ox: OxClient::new(
                "http://127.0.0.1:9",
                "admin",
                crate::action::SecretValue::new("pw"),
                timeout,
                &Default::default(),
            )
            .unwrap(),
            store: HandoverStore::connect(&settings, &secret, timeout, &Default::default())
                .unwrap(),
            run: RunIdentity::default(),
            stop,
            progress: Progress::default(),
        }
    }

    /// The survey of `n` accounts in the IAM, each with one mailbox in OX context 1.
    fn survey_of(n: usize) -> Survey {
        let accounts: Vec<FunctionalAccount> =
            (0..n).map(|i| account(&format!("uuid-{i}"))).collect();
        let objects = accounts
            .iter()
            .map(|a| UdmObject {
                dn: a.dn.clone(),
                object_type: FUNCTIONAL_ACCOUNT.into(),
                id: Some(a.name.clone()),
                position: Some(a.position.clone()),
                uuid: Some(a.entry_uuid.clone()),
                properties: serde_json::Map::new(),
                uri: reqwest::Url::parse(&format!(
                    "http://127.0.0.1:9/univention/udm/{FUNCTIONAL_ACCOUNT}/{}",
                    a.dn
                ))
                .unwrap(),
                server_uri: None,
                etag: None,
            })
            .collect();
        let rows = accounts
            .iter()
            .enumerate()
            .map(|(i, a)| SecondaryAccount {
                id: Some(i as u32),
                user_id: Some(3),
                primary_address: Some(a.mail_primary_address.clone()),
                name: Some(a.name.clone()),
                login: None,
            })
            .collect();
        Survey {
            existing: None,
            accounts,
            objects,
            ox: vec![ContextRows { id: 1, rows }],
        }
    }

    #[tokio::test]
    async fn the_removal_after_the_handover_stops_when_asked_sending_nothing() {
        let (sender, signal) = StopSignal::channel();
        sender.stop("this replica is no longer the leader (the renew deadline passed)");
        let c = unreachable_clients(signal);
        let config: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        let s = survey_of(3);
        let e = config
            .remove(&c, &s.accounts, &s, Instant::now())
            .await
            .expect_err("a stopped removal does not succeed");
        assert!(e.is_stop(), "a stop, not a failure: {e}");
        let message = e.to_string();
        for part in [
            "stopped at a safe point: this replica is no longer the leader",
            "no removal was sent yet; 0 of 3 Functional Accounts deleted from the IAM",
            "The handover \"ox-functional-accounts.yaml\" is written and describes all 3 accounts",
            "when this run is resumed (by the next leader",
            "continues the export from the handover",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }

        // A continued pass (one account already deleted from the IAM) counts it as deleted.
        let mut continued = survey_of(3);
        continued.objects.remove(0);
        continued.accounts.remove(0);
        let recorded = survey_of(3).accounts;
        let e = config
            .remove(&c, &recorded, &continued, Instant::now())
            .await
            .expect_err("a stopped removal does not succeed");
        assert!(e.is_stop(), "{e}");
        assert!(
            e.to_string()
                .contains("1 of 3 Functional Accounts deleted from the IAM"),
            "{e}"
        );
    }

    #[test]
    fn bad_urls_are_config_issues() {
        let c: Config = serde_json::from_value(serde_json::json!({
            "udm": {"url": "not a url"},
            "oxAppSuite": {"soapUrl": "ftp://x"}
        }))
        .unwrap();
        let paths: Vec<String> = c.semantic_issues().into_iter().map(|i| i.path).collect();
        assert_eq!(paths, vec!["oxAppSuite.soapUrl", "udm.url"]);
    }
}
