//! `ox_names_to_object_identifier`: renames OX App Suite's users and groups from the name the
//! IAM knows them by (a user's `uid`, a group's `cn`) to the IAM's `univentionObjectIdentifier`,
//! through the SOAP provisioning API. Objects keep their numeric OX id, so everything that
//! references them stays valid.
//!
//! What it reads from the IAM's directory (below `ldap.baseDn`, through the [`crate::clients::ldap`]
//! layer: `ldapsearch` in the LDAP pod, or Stagehand's own connection with `ldap.url`):
//!
//! - OX contexts: `oxContextIDNum` of every `oxContext` entry (UDM `oxmail/oxcontext`), plus
//!   every context id a user carries. "All OX contexts found in the IAM" are these; contexts OX
//!   has and the IAM does not name are not touched, and IAM contexts OX does not have are
//!   reported.
//! - Users: entries with a `uid` and an `oxContextIDNum` (the OX Connector's users, objectClass
//!   `oxUserObject`). A user belongs to the context its `oxContextIDNum` names and is matched
//!   only there. Users without a context are not OX users and are not read.
//! - Groups: `posixGroup`, `univentionGroup`, `groupOfNames`, `groupOfUniqueNames` and `oxGroup`
//!   entries, by `cn`. The Connector puts a group into every context its OX members live in, so
//!   a group is matched in every context addressed (a copy in a context without its members is
//!   the same IAM group under the same name).
//!
//! Per context, the context admin (`OXContextService.getAdminId`) and the standard group
//! (`OXGroupService.getDefaultGroup`) are held out by the id OX reports, never by name. Every
//! other user (`listAll`, then `getMultipleData` for the names) and group (`listAll`) is
//! sorted: named like the identifier of an IAM object of the context (UUIDs compare without
//! case) → done; named like an IAM object → renamed to its identifier (`change` with `{id,
//! name}`); neither → reported and left alone. User names compare without case (OX's logins
//! do), group names exactly (OX keeps their case).
//!
//! The plan fails, before anything is renamed, when an IAM object OX knows by name has no
//! identifier, or when a rename could not succeed (the identifier is taken by another OX
//! object, or several IAM objects claim one OX object). Apply renames (a few in flight at a
//! time), stops at the first refusal (renames made so far stay, a rerun finds them done and
//! continues with the rest) and reads every renamed object back with `getMultipleData`,
//! failing for any that does not carry its identifier.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::future::BoxFuture;
use futures::stream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::{ConfigIssue, Endpoint, Needs};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome, Progress, StopSignal};
use crate::batch::run_bounded;
use crate::clients::IDENTIFIER;
use crate::clients::ldap::{Directory, Entry};
use crate::clients::ox::{OxClient, OxError};
pub use crate::shared_config::Ldap;
use crate::shared_config::{OX_PASSWORD_FILE, OxSoap, needs_secrets};
use crate::text::plural;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Report what would change and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the IAM objects are read.
    #[serde(default)]
    pub ldap: Ldap,
    /// OX App Suite's SOAP API.
    #[serde(default)]
    pub ox_app_suite: OxSoap,
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_names_to_object_identifier";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = self.ldap.issues("ldap");
        issues.extend(self.ox_app_suite.issues("oxAppSuite"));
        issues
    }
}

/// The OX context id on users and contexts (UDM `oxContext`/`contextid`).
pub const CONTEXT_ID: &str = "oxContextIDNum";
/// The IAM's OX contexts.
pub const CONTEXT_FILTER: &str = "(objectClass=oxContext)";
/// The IAM's OX users: a login and a context.
pub const USER_FILTER: &str = "(&(uid=*)(oxContextIDNum=*))";
/// The IAM's groups.
pub const GROUP_FILTER: &str = "(&(cn=*)(|(objectClass=posixGroup)(objectClass=univentionGroup)(objectClass=groupOfNames)(objectClass=groupOfUniqueNames)(objectClass=oxGroup)))";
/// How many renames are in flight at once.
const RENAMES_IN_FLIGHT: usize = 4;
/// How many items a message lists before it counts the rest.
const LIST_LIMIT: usize = 20;

/// Users or groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    User,
    Group,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Group => "group",
        }
    }

    /// How OX compares names of this kind: logins without case, group names exactly.
    fn key(self, name: &str) -> String {
        match self {
            Kind::User => name.to_lowercase(),
            Kind::Group => name.to_string(),
        }
    }
}

/// The identifier as compared: UUIDs without case.
fn id_key(identifier: &str) -> String {
    identifier.trim().to_lowercase()
}

/// An IAM user or group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IamObject {
    dn: String,
    /// `uid` or `cn` values.
    names: Vec<String>,
    identifier: Option<String>,
}

/// What the IAM holds.
#[derive(Debug, Default)]
struct Iam {
    /// Users by their OX context.
    users: BTreeMap<u32, Vec<IamObject>>,
    groups: Vec<IamObject>,
    /// Every context the IAM names (context objects and users).
    contexts: BTreeSet<u32>,
}

impl Iam {
    fn user_count(&self) -> usize {
        self.users.values().map(Vec::len).sum()
    }
}

fn parse_context_id(dn: &str, value: &str) -> Result<u32, ActionError> {
    value.trim().parse().map_err(|_| {
        ActionError::Failed(format!(
            "{dn} carries {CONTEXT_ID} {value:?}, which is not an OX context id (a number)"
        ))
    })
}

fn iam_object(entry: &Entry, name_attr: &str) -> IamObject {
    IamObject {
        dn: entry.dn.clone(),
        names: entry
            .values(name_attr)
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect(),
        identifier: entry
            .values(IDENTIFIER)
            .first()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty()),
    }
}

fn sort_iam(contexts: &[Entry], users: &[Entry], groups: &[Entry]) -> Result<Iam, ActionError> {
    let mut iam = Iam::default();
    for c in contexts {
        for v in c.values(CONTEXT_ID) {
            iam.contexts.insert(parse_context_id(&c.dn, v)?);
        }
    }
    for u in users {
        let Some(first) = u.values(CONTEXT_ID).first() else {
            continue;
        };
        let ctx = parse_context_id(&u.dn, first)?;
        iam.contexts.insert(ctx);
        iam.users.entry(ctx).or_default().push(iam_object(u, "uid"));
    }
    iam.groups = groups.iter().map(|g| iam_object(g, "cn")).collect();
    Ok(iam)
}

/// One rename to make.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rename {
    /// The OX object's id.
    id: u32,
    /// Its name now.
    from: String,
    /// The identifier.
    to: String,
    /// The IAM object.
    dn: String,
}

/// The users or the groups of one context, sorted out.
#[derive(Debug, Default, PartialEq, Eq)]
struct KindPlan {
    renames: Vec<Rename>,
    /// Already named like an identifier.
    done: usize,
    /// Names neither the IAM's nor an identifier: left alone.
    unknown: Vec<String>,
    /// IAM objects OX knows by name that have no identifier (their DNs).
    missing: Vec<String>,
    /// Renames that cannot succeed.
    conflicts: Vec<String>,
}

/// Sorts the OX objects of one kind in one context against the IAM objects matched there.
/// `held_out` (the context admin or the standard group) is never looked at.
fn classify(
    kind: Kind,
    iam: &[&IamObject],
    ox: &[(u32, Option<String>)],
    held_out: u32,
) -> KindPlan {
    let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
    let mut by_identifier: HashMap<String, usize> = HashMap::new();
    for (i, obj) in iam.iter().enumerate() {
        for n in &obj.names {
            let list = by_name.entry(kind.key(n)).or_default();
            if !list.contains(&i) {
                list.push(i);
            }
        }
        if let Some(id) = &obj.identifier {
            by_identifier.insert(id_key(id), i);
        }
    }
    // Every name OX uses in the context (held-out objects included): a rename to one fails.
    let mut taken: HashMap<String, u32> = HashMap::new();
    for (id, name) in ox {
        if let Some(n) = name {
            taken.insert(id_key(n), *id);
        }
    }
    let mut plan = KindPlan::default();
    let mut targets: HashMap<String, u32> = HashMap::new();
    for (id, name) in ox {
        if *id == held_out {
            continue;
        }
        let Some(name) = name else {
            plan.unknown
                .push(format!("<{} id {id} without a name>", kind.noun()));
            continue;
        };
        if by_identifier.contains_key(&id_key(name)) {
            plan.done += 1;
            continue;
        }
        let Some(claims) = by_name.get(&kind.key(name)) else {
            plan.unknown.push(name.clone());
            continue;
        };
        if claims.len() > 1 {
            let dns: Vec<&str> = claims.iter().map(|i| iam[*i].dn.as_str()).collect();
            plan.conflicts.push(format!(
                "OX {} {name:?} (id {id}) is claimed by {} IAM objects: {}",
                kind.noun(),
                dns.len(),
                dns.join("; ")
            ));
            continue;
        }
        let obj = iam[claims[0]];
        let Some(identifier) = &obj.identifier else {
            plan.missing.push(obj.dn.clone());
            continue;
        };
        let key = id_key(identifier);
        if let Some(other) = taken.get(&key).filter(|other| **other != *id) {
            plan.conflicts.push(format!(
                "OX {} {name:?} (id {id}) of {} cannot be renamed to {identifier}: OX {} id {other} already has that name",
                kind.noun(),
                obj.dn,
                kind.noun()
            ));
            continue;
        }
        if let Some(other) = targets.insert(key, *id) {
            plan.conflicts.push(format!(
                "OX {}s id {other} and id {id} would both be renamed to {identifier} ({})",
                kind.noun(),
                obj.dn
            ));
            continue;
        }
        plan.renames.push(Rename {
            id: *id,
            from: name.clone(),
            to: identifier.clone(),
            dn: obj.dn.clone(),
        });
    }
    plan.unknown.sort();
    plan
}

/// One context of OX, sorted out.
#[derive(Debug)]
struct ContextPlan {
    id: u32,
    name: Option<String>,
    admin: (u32, Option<String>),
    default_group: (u32, Option<String>),
    users: KindPlan,
    groups: KindPlan,
}

impl ContextPlan {
    fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("context {} ({n})", self.id),
            None => format!("context {}", self.id),
        }
    }

    fn kind(&self, kind: Kind) -> &KindPlan {
        match kind {
            Kind::User => &self.users,
            Kind::Group => &self.groups,
        }
    }
}

/// Everything the plan found.
#[derive(Debug)]
struct Survey {
    iam_users: usize,
    iam_groups: usize,
    iam_contexts: usize,
    contexts: Vec<ContextPlan>,
    /// IAM contexts OX does not have.
    not_in_ox: Vec<u32>,
}

impl Survey {
    fn renames(&self) -> usize {
        self.contexts
            .iter()
            .map(|c| c.users.renames.len() + c.groups.renames.len())
            .sum()
    }
}

/// `a, b, c (and 7 more)`.
fn list<S: AsRef<str>>(items: &[S], sep: &str) -> String {
    let shown: Vec<&str> = items.iter().take(LIST_LIMIT).map(AsRef::as_ref).collect();
    let mut out = shown.join(sep);
    if items.len() > shown.len() {
        out.push_str(&format!(" (and {} more)", items.len() - shown.len()));
    }
    out
}

fn quoted(items: &[String]) -> Vec<String> {
    items.iter().map(|i| format!("{i:?}")).collect()
}

/// One rename to make, where.
#[derive(Debug)]
struct Job<'a> {
    ctx: u32,
    kind: Kind,
    rename: &'a Rename,
}

impl Config {
    /// The SOAP API's base URL: `oxAppSuite.soapUrl`, or OX's admin service in `namespace`.
    pub fn soap_url(&self, namespace: &str) -> String {
        match &self.ox_app_suite.soap_url {
            Some(url) => url.clone(),
            None => format!("http://open-xchange-core-mw-admin.{namespace}.svc.cluster.local"),
        }
    }

    /// The SOAP client the config and the run's credentials describe.
    pub fn ox_client(&self, ctx: &ActionContext) -> Result<OxClient, ActionError> {
        self.ox_app_suite
            .client(ctx, &self.soap_url(&ctx.namespace))
    }

    fn ox_failed(&self, ox: &OxClient, e: OxError, context: Option<u32>) -> ActionError {
        if !e.is_authentication() {
            return ActionError::from(e);
        }
        let reason = e
            .fault()
            .map(|f| f.message().to_string())
            .unwrap_or_default();
        ActionError::Refused(match context {
            None => format!(
                "OX App Suite at {} refused the credentials of {:?} ({reason}): check oxAppSuite.username and the secret file {OX_PASSWORD_FILE:?}",
                ox.base_url(),
                ox.login()
            ),
            Some(n) => format!(
                "OX App Suite at {} accepted {:?} as master admin but refused it for context {n} ({reason}): the master admin can manage a context's users and groups only while OX runs with MASTER_ACCOUNT_OVERRIDE=true ({e})",
                ox.base_url(),
                ox.login()
            ),
        })
    }

    /// OX's contexts (`OXContextService.listAll` as the master admin): proves the SOAP URL
    /// and the credential, whatever the IAM holds.
    async fn ox_contexts(
        &self,
        ox: &OxClient,
    ) -> Result<Vec<crate::clients::ox::Context>, ActionError> {
        ox.list_contexts()
            .await
            .map_err(|e| self.ox_failed(ox, e, None))
    }

    async fn read_iam(&self, dir: &dyn Directory) -> Result<Iam, ActionError> {
        let base = self.ldap.base_dn.as_str();
        let failed = ActionError::from;
        let contexts = dir
            .search(base, CONTEXT_FILTER, &[CONTEXT_ID])
            .await
            .map_err(failed)?;
        let users = dir
            .search(base, USER_FILTER, &["uid", IDENTIFIER, CONTEXT_ID])
            .await
            .map_err(failed)?;
        let groups = dir
            .search(base, GROUP_FILTER, &["cn", IDENTIFIER])
            .await
            .map_err(failed)?;
        sort_iam(&contexts, &users, &groups)
    }

    async fn survey_context(
        &self,
        ox: &OxClient,
        iam: &Iam,
        ctx: &crate::clients::ox::Context,
    ) -> Result<ContextPlan, ActionError> {
        let id = ctx.id;
        let err = |e| self.ox_failed(ox, e, Some(id));
        let admin_id = ox.context_admin_id(id).await.map_err(err)?;
        let user_ids = ox.list_user_ids(id).await.map_err(err)?;
        let users = ox.users(id, &user_ids).await.map_err(err)?;
        let default_group = ox.default_group(id).await.map_err(err)?;
        let groups = ox.list_groups(id).await.map_err(err)?;
        let iam_users: Vec<&IamObject> = iam
            .users
            .get(&id)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let iam_groups: Vec<&IamObject> = iam.groups.iter().collect();
        let ox_users: Vec<(u32, Option<String>)> =
            users.iter().map(|u| (u.id, u.name.clone())).collect();
        let ox_groups: Vec<(u32, Option<String>)> =
            groups.iter().map(|g| (g.id, g.name.clone())).collect();
        let admin_name = users
            .iter()
            .find(|u| u.id == admin_id)
            .and_then(|u| u.name.clone());
        Ok(ContextPlan {
            id,
            name: ctx.name.clone(),
            admin: (admin_id, admin_name),
            default_group: (default_group.id, default_group.name.clone()),
            users: classify(Kind::User, &iam_users, &ox_users, admin_id),
            groups: classify(Kind::Group, &iam_groups, &ox_groups, default_group.id),
        })
    }

    /// Reads both sides and sorts them out; fails for what would stop the renames.
    async fn survey(&self, dir: &dyn Directory, ox: &OxClient) -> Result<Survey, ActionError> {
        let iam = self.read_iam(dir).await?;
        let ox_contexts = self.ox_contexts(ox).await?;
        let mut survey = Survey {
            iam_users: iam.user_count(),
            iam_groups: iam.groups.len(),
            iam_contexts: iam.contexts.len(),
            contexts: Vec::new(),
            not_in_ox: Vec::new(),
        };
        for id in &iam.contexts {
            match ox_contexts.iter().find(|c| c.id == *id) {
                Some(c) => survey
                    .contexts
                    .push(self.survey_context(ox, &iam, c).await?),
                None => survey.not_in_ox.push(*id),
            }
        }
        let mut missing: BTreeSet<(Kind, String)> = BTreeSet::new();
        let mut conflicts = Vec::new();
        for c in &survey.contexts {
            for kind in [Kind::User, Kind::Group] {
                let k = c.kind(kind);
                missing.extend(k.missing.iter().map(|dn| (kind, dn.clone())));
                conflicts.extend(k.conflicts.iter().map(|m| format!("{}: {m}", c.label())));
            }
        }
        if !missing.is_empty() {
            let sentences: Vec<String> = missing
                .iter()
                .map(|(kind, dn)| {
                    format!(
                        "The {noun} {dn} has no {IDENTIFIER}, so its OX App Suite {noun} cannot be renamed to one.",
                        noun = kind.noun()
                    )
                })
                .collect();
            return Err(ActionError::NotFound(format!(
                "{} Nothing was renamed.",
                list(&sentences, " ")
            )));
        }
        if !conflicts.is_empty() {
            return Err(ActionError::Conflict(format!(
                "{} in OX App Suite at {} cannot succeed, so nothing was renamed: {}",
                plural(conflicts.len(), "rename"),
                ox.base_url(),
                list(&conflicts, "; ")
            )));
        }
        Ok(survey)
    }

    fn describe(&self, dir: &dyn Directory, ox: &OxClient, s: &Survey) -> String {
        let mut out = format!(
            "IAM ({}) below {}: {} in {}, {}; OX App Suite at {}",
            dir.describe(),
            self.ldap.base_dn,
            plural(s.iam_users, "OX user"),
            plural(s.iam_contexts, "context"),
            plural(s.iam_groups, "group"),
            ox.base_url()
        );
        if s.iam_contexts == 0 {
            out.push_str(&format!(
                ": the IAM names no OX context (no {CONTEXT_FILTER} entry, no user with {CONTEXT_ID}), so there is nothing to rename"
            ));
            return out;
        }
        for c in &s.contexts {
            out.push_str(&format!("; {}:", c.label()));
            for kind in [Kind::User, Kind::Group] {
                let k = c.kind(kind);
                out.push_str(&format!(
                    " {}s {} to rename, {} done, {} unknown",
                    kind.noun(),
                    k.renames.len(),
                    k.done,
                    k.unknown.len()
                ));
                if !k.unknown.is_empty() {
                    out.push_str(&format!(
                        " (left alone: {})",
                        list(&quoted(&k.unknown), ", ")
                    ));
                }
                out.push(',');
            }
            out.push_str(&format!(
                " held out by id: context admin {} (user {}), standard group {} (group {})",
                c.admin.1.as_deref().unwrap_or("?"),
                c.admin.0,
                c.default_group.1.as_deref().unwrap_or("?"),
                c.default_group.0
            ));
        }
        if !s.not_in_ox.is_empty() {
            let ids: Vec<String> = s.not_in_ox.iter().map(u32::to_string).collect();
            out.push_str(&format!(
                "; IAM contexts OX App Suite does not have (nothing to rename there): {}",
                list(&ids, ", ")
            ));
        }
        out
    }

    /// The planning phase on a given directory and OX: reads both, changes nothing, says per
    /// context how many users and groups would be renamed, are done and are unknown.
    pub async fn plan_on(
        &self,
        dir: &dyn Directory,
        ox: &OxClient,
    ) -> Result<Outcome, ActionError> {
        let s = self.survey(dir, ox).await?;
        Ok(Outcome::new(format!(
            "{} would be renamed to their {IDENTIFIER}. {}",
            plural(s.renames(), "object"),
            self.describe(dir, ox, &s)
        )))
    }

    /// The apply phase on a given directory and OX: renames, then reads every renamed object
    /// back. With `dryRun` it only plans.
    pub async fn apply_on(
        &self,
        dir: &dyn Directory,
        ox: &OxClient,
    ) -> Result<Outcome, ActionError> {
        self.apply_until(dir, ox, &StopSignal::never()).await
    }

    /// [`Config::apply_on`], stopping at the next safe point (no new rename starts, the ones
    /// sent are awaited and counted) once `stop` asks to.
    pub async fn apply_until(
        &self,
        dir: &dyn Directory,
        ox: &OxClient,
        stop: &StopSignal,
    ) -> Result<Outcome, ActionError> {
        self.apply_reporting(dir, ox, stop, &Progress::default())
            .await
    }

    /// [`Config::apply_until`], counting the renames made in `progress`.
    async fn apply_reporting(
        &self,
        dir: &dyn Directory,
        ox: &OxClient,
        stop: &StopSignal,
        reporter: &Progress,
    ) -> Result<Outcome, ActionError> {
        if self.dry_run {
            let planned = self.plan_on(dir, ox).await?;
            return Ok(Outcome::new(format!(
                "dryRun is set, nothing changed: {}",
                planned.summary
            )));
        }
        reporter.step("reading the IAM and OX App Suite");
        let s = self.survey(dir, ox).await?;
        let total = s.renames();
        if total == 0 {
            return Ok(Outcome::new(format!(
                "nothing to rename. {}",
                self.describe(dir, ox, &s)
            )));
        }
        let jobs: Vec<Job<'_>> = s
            .contexts
            .iter()
            .flat_map(|c| {
                [Kind::User, Kind::Group].into_iter().flat_map(move |kind| {
                    c.kind(kind).renames.iter().map(move |rename| Job {
                        ctx: c.id,
                        kind,
                        rename,
                    })
                })
            })
            .collect();
        reporter.phase(
            "renaming users and groups in OX App Suite",
            Some(total as u64),
            "renames",
        );
        let batch = run_bounded(
            stream::iter(&jobs),
            RENAMES_IN_FLIGHT,
            stop,
            |job| async move {
                let r = match job.kind {
                    Kind::User => ox.rename_user(job.ctx, job.rename.id, &job.rename.to).await,
                    Kind::Group => {
                        ox.rename_group(job.ctx, job.rename.id, &job.rename.to)
                            .await
                    }
                };
                if r.is_ok() {
                    reporter.add(1);
                }
                r
            },
        )
        .await;
        let progress = batch.report(total, &plural(total, "rename"), "made");
        if let Some(stopped) = batch.stop_error() {
            return Err(stopped.after(Some(format!(
                "{progress}; a rerun finds them done and continues with the rest"
            ))));
        }
        if let Some((i, first)) = batch.into_first_failure() {
            return Err(self.rename_failed(ox, &jobs[i], first, &progress));
        }
        reporter.step("reading the renamed objects back");
        self.verify(ox, &jobs).await?;
        let users: usize = s.contexts.iter().map(|c| c.users.renames.len()).sum();
        Ok(Outcome::new(format!(
            "renamed {} and {} to their {IDENTIFIER}; read back: {}. {}",
            plural(users, "user"),
            plural(total - users, "group"),
            if total == 1 {
                "it carries it".to_string()
            } else {
                format!("all {total} carry it")
            },
            self.describe(dir, ox, &s)
        )))
    }

    fn rename_failed(
        &self,
        ox: &OxClient,
        job: &Job<'_>,
        e: OxError,
        progress: &str,
    ) -> ActionError {
        let progress = format!("{progress}; a rerun finds them done and continues with the rest");
        if job.kind == Kind::User && e.fault().is_some_and(|f| f.is_username_not_changeable()) {
            return ActionError::Refused(format!(
                "OX App Suite at {} refuses to rename users (\"Changing username is disabled!\"): set USERNAME_CHANGEABLE=true in the middleware's AdminUser.properties, restart it and run the migration again ({progress})",
                ox.base_url()
            ));
        }
        self.ox_failed(ox, e, Some(job.ctx)).map_message(|cause| {
            format!(
                "renaming OX {} {:?} (id {}) of {} to {} in context {} failed ({progress}): {cause}",
                job.kind.noun(),
                job.rename.from,
                job.rename.id,
                job.rename.dn,
                job.rename.to,
                job.ctx
            )
        })
    }

    /// Reads every renamed object back; fails naming those that do not carry their identifier.
    async fn verify(&self, ox: &OxClient, jobs: &[Job<'_>]) -> Result<(), ActionError> {
        let mut groups: BTreeMap<(u32, Kind), Vec<&Job<'_>>> = BTreeMap::new();
        for job in jobs {
            groups.entry((job.ctx, job.kind)).or_default().push(job);
        }
        let mut wrong = Vec::new();
        for ((ctx, kind), group) in groups {
            let ids: Vec<u32> = group.iter().map(|j| j.rename.id).collect();
            let names: HashMap<u32, Option<String>> = match kind {
                Kind::User => ox
                    .users(ctx, &ids)
                    .await
                    .map(|v| v.into_iter().map(|u| (u.id, u.name)).collect()),
                Kind::Group => ox
                    .groups(ctx, &ids)
                    .await
                    .map(|v| v.into_iter().map(|g| (g.id, g.name)).collect()),
            }
            .map_err(|e| {
                self.ox_failed(ox, e, Some(ctx)).map_message(|cause| {
                    format!("the renames were made but reading them back failed: {cause}")
                })
            })?;
            for job in group {
                let r = job.rename;
                match names.get(&r.id) {
                    Some(Some(name)) if id_key(name) == id_key(&r.to) => {}
                    Some(Some(name)) => wrong.push(format!(
                        "{} id {} in context {ctx} ({}) is named {name:?}, not {}",
                        kind.noun(),
                        r.id,
                        r.dn,
                        r.to
                    )),
                    Some(None) | None => wrong.push(format!(
                        "{} id {} in context {ctx} ({}) was not returned",
                        kind.noun(),
                        r.id,
                        r.dn
                    )),
                }
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(ActionError::Failed(format!(
                "OX App Suite at {} accepted the renames, but read back, {} of {} renamed objects do not carry their {IDENTIFIER}: {}",
                ox.base_url(),
                wrong.len(),
                jobs.len(),
                list(&wrong, "; ")
            )))
        }
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ox = self.ox_client(ctx)?;
            let dir = self.ldap.directory(ctx).await?;
            self.plan_on(dir.as_ref(), &ox).await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ox = self.ox_client(ctx)?;
            let dir = self.ldap.directory(ctx).await?;
            self.apply_reporting(dir.as_ref(), &ox, &ctx.stop, &ctx.progress)
                .await
        })
    }

    fn needs(&self) -> Needs {
        needs_secrets(std::iter::once(OX_PASSWORD_FILE.to_string()).chain(self.ldap.secret_files()))
    }

    fn endpoints(&self, namespace: &str) -> Vec<Endpoint> {
        Endpoint::from_url("oxAppSuite.soapUrl", &self.soap_url(namespace))
            .into_iter()
            .chain(self.ldap.endpoints())
            .collect()
    }

    fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// OX's credential (`listAll` of the contexts) and the LDAP transport: the direct one
    /// binds; the exec one proves the pod, the container, the `pods/exec` right and a read-only
    /// search of the base DN alone. No IAM object is read: the identifiers planning matches by
    /// are rewritten by `ldap_entryuuid_to_object_identifier` earlier in the stage.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let ox = self.ox_client(ctx)?;
            self.ox_contexts(&ox).await?;
            self.ldap.prove_transport(ctx).await
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn obj(dn: &str, name: &str, identifier: Option<&str>) -> IamObject {
        IamObject {
            dn: dn.into(),
            names: vec![name.into()],
            identifier: identifier.map(str::to_string),
        }
    }

    const A: &str = "0d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f";
    const B: &str = "1d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f";

    fn ox(items: &[(u32, &str)]) -> Vec<(u32, Option<String>)> {
        items
            .iter()
            .map(|(i, n)| (*i, Some(n.to_string())))
            .collect()
    }

    #[test]
    fn objects_are_renamed_done_or_unknown_and_the_held_out_one_is_skipped() {
        let alice = obj("uid=alice,dc=x", "alice", Some(A));
        let bob = obj("uid=bob,dc=x", "bob", Some(B));
        let admin = obj(
            "uid=oxadmin,dc=x",
            "oxadmin",
            Some("2d4f8a30-1b2c-103f-8a1e-5b1f2c3d4e5f"),
        );
        let plan = classify(
            Kind::User,
            &[&alice, &bob, &admin],
            &ox(&[
                (2, "oxadmin"),
                (3, "Alice"),
                (4, &B.to_uppercase()),
                (5, "carol"),
            ]),
            2,
        );
        assert_eq!(
            plan.renames,
            [Rename {
                id: 3,
                from: "Alice".into(),
                to: A.into(),
                dn: "uid=alice,dc=x".into()
            }]
        );
        assert_eq!(plan.done, 1);
        assert_eq!(plan.unknown, ["carol"]);
        assert!(plan.missing.is_empty() && plan.conflicts.is_empty());
    }

    #[test]
    fn group_names_keep_their_case() {
        let staff = obj("cn=Staff,dc=x", "Staff", Some(A));
        let plan = classify(
            Kind::Group,
            &[&staff],
            &ox(&[(1, "users"), (7, "staff")]),
            1,
        );
        assert!(plan.renames.is_empty());
        assert_eq!(plan.unknown, ["staff"]);
        let plan = classify(
            Kind::Group,
            &[&staff],
            &ox(&[(1, "users"), (7, "Staff")]),
            1,
        );
        assert_eq!(plan.renames.len(), 1);
    }

    #[test]
    fn missing_identifiers_and_conflicts_are_found() {
        let plain = obj("uid=default.user,dc=x", "default.user", None);
        let alice = obj("uid=alice,dc=x", "alice", Some(A));
        let plan = classify(
            Kind::User,
            &[&plain, &alice],
            &ox(&[(3, "default.user"), (4, "alice"), (5, "other")]),
            2,
        );
        assert_eq!(plan.missing, ["uid=default.user,dc=x"]);
        assert!(plan.renames.len() == 1 && plan.conflicts.is_empty());
        // The identifier is taken by an object the IAM does not know as done (the admin).
        let plan = classify(Kind::User, &[&alice], &ox(&[(2, A), (4, "alice")]), 2);
        assert!(plan.renames.is_empty());
        assert!(
            plan.conflicts[0].contains("already has that name"),
            "{:?}",
            plan.conflicts
        );
        // Two IAM objects claim one OX name.
        let twin = obj("uid=alice,ou=other,dc=x", "ALICE", Some(B));
        let plan = classify(Kind::User, &[&alice, &twin], &ox(&[(4, "alice")]), 2);
        assert!(
            plan.conflicts[0].contains("claimed by 2 IAM objects"),
            "{:?}",
            plan.conflicts
        );
    }

    #[test]
    fn the_iam_is_sorted_by_context() {
        let mut ctx = Entry::new("cn=context1,cn=open-xchange,dc=x");
        ctx.push(CONTEXT_ID, "1");
        let mut u = Entry::new("uid=a,dc=x");
        u.push("uid", "a");
        u.push(CONTEXT_ID, "10");
        u.push(IDENTIFIER, A);
        let mut g = Entry::new("cn=g,dc=x");
        g.push("cn", "g");
        let iam = sort_iam(&[ctx], &[u], &[g]).unwrap();
        assert_eq!(iam.contexts.iter().copied().collect::<Vec<_>>(), [1, 10]);
        assert_eq!(iam.users[&10][0].identifier.as_deref(), Some(A));
        assert_eq!(iam.groups[0].identifier, None);
        let mut bad = Entry::new("uid=b,dc=x");
        bad.push(CONTEXT_ID, "ten");
        let err = sort_iam(&[], &[bad], &[]).unwrap_err().to_string();
        assert!(
            err.contains("uid=b,dc=x carries oxContextIDNum \"ten\""),
            "{err}"
        );
    }

    #[test]
    fn config_defaults_and_the_soap_url() {
        let c: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(c.ldap.base_dn, "dc=swp-ldap,dc=internal");
        assert_eq!(c.ox_app_suite.username, "admin");
        assert_eq!(
            c.soap_url("opendesk"),
            "http://open-xchange-core-mw-admin.opendesk.svc.cluster.local"
        );
        assert!(c.semantic_issues().is_empty());
        let bad: Config =
            serde_json::from_value(serde_json::json!({"oxAppSuite": {"soapUrl": "ox:8009"}}))
                .unwrap();
        assert_eq!(bad.semantic_issues()[0].path, "oxAppSuite.soapUrl");
        let stray: Config =
            serde_json::from_value(serde_json::json!({"ldap": {"bindDn": "cn=x"}})).unwrap();
        assert_eq!(stray.semantic_issues()[0].path, "ldap.bindDn");
    }
}
