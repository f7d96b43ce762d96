//! `ox_shared_accounts_import`: part 2 of the Functional Accounts to Shared Accounts
//! migration (stage `post`). Creates the Shared Accounts from the handover
//! `ox_functional_accounts_export` wrote and links their users with the permission.
//!
//! **Planning** (and a dry run, or `dryRun: true`) reads the handover (missing: a clear error),
//! applies the name rule of [`crate::functional_accounts::name`] to every recorded account,
//! reads the Shared Accounts, the users and the permission (`sharedAccounts.permission`, by its
//! UDM `name`) through the UDM REST API, and fails before any change on an account that cannot
//! be created: a Shared Account of another identifier with its name or address, a Functional
//! Account or a user that still has its address. A permission that is not there yet is reported
//! (apply waits for it), not a failure.
//!
//! **Apply** waits up to `sharedAccounts.permissionWaitSeconds` for the permission (the
//! stackdata Job loads it, and may still be running), then creates one `oxmail/shared_account`
//! per recorded account in the module's default position: `name` the respelled name,
//! `displayName` the original one, `mailPrimaryAddress`, `oxContext`, the Functional Account's
//! entryUUID as `univentionObjectIdentifier` (so OX App Suite keeps the mailbox), and `users`
//! the pairs `[user identifier, permission identifier]` of the users that were linked (had a
//! groupware account). An account that exists as recorded (same identifier, name, address and
//! context) is done, so a rerun after a crash creates only the rest. Every account is read back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use stagehand_config::{ConfigIssue, Endpoint, HandoverRole, Needs};

use crate::action::ActionConfig;
use crate::action::{Action, ActionContext, ActionError, Outcome, Progress, StopSignal};
use crate::batch::run_bounded;
use crate::clients::IDENTIFIER;
use crate::clients::ldap::dn::norm_dn;
use crate::clients::s3::HandoverStore;
use crate::clients::udm::{
    FUNCTIONAL_ACCOUNT, Filter, PERMISSION, SHARED_ACCOUNT, Search, USER, UdmClient, UdmError,
    UdmObject,
};
use crate::functional_accounts::name::shared_account_names;
use crate::functional_accounts::record::{FunctionalAccount, OxFunctionalAccounts};
use crate::functional_accounts::{IN_FLIGHT, check_store_and_udm, handover_needs, short_list};
use crate::shared_config::{Handover, LdapBase, UDM_PASSWORD_FILE, Udm};
use crate::text::plural;

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
    /// Where part 1 wrote the accounts down.
    #[serde(default)]
    pub handover: Handover,
    /// How the Shared Accounts are created.
    #[serde(default)]
    pub shared_accounts: SharedAccounts,
}

/// How the Shared Accounts are created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedAccounts {
    /// The UDM name (not the display name) of the permission users are linked with.
    #[serde(default = "SharedAccounts::default_permission")]
    #[schemars(length(min = 1))]
    pub permission: String,
    /// How long to wait for the permission to appear (the stackdata Job loads it).
    #[serde(default = "SharedAccounts::default_wait")]
    pub permission_wait_seconds: u64,
}

impl SharedAccounts {
    fn default_permission() -> String {
        "opendesk_mail_author_calendar_author".into()
    }
    fn default_wait() -> u64 {
        900
    }
}

impl Default for SharedAccounts {
    fn default() -> Self {
        Self {
            permission: Self::default_permission(),
            permission_wait_seconds: Self::default_wait(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "ox_shared_accounts_import";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        self.udm.issues("udm")
    }
}

/// How often the permission is looked for while waiting.
const POLL: Duration = Duration::from_secs(5);

/// The properties of a Shared Account that decide whether it is the recorded one.
const SHARED_PROPERTIES: &[&str] = &[
    "name",
    "displayName",
    "mailPrimaryAddress",
    "oxContext",
    "users",
    IDENTIFIER,
];

/// What to do with one recorded account.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Create it with this name.
    Create(String),
    /// It exists as recorded.
    Done(String),
}

/// A user link of one account, resolved now.
#[derive(Debug, Clone)]
struct Link {
    /// The user's identifier.
    identifier: String,
}

/// What planning found.
#[derive(Debug)]
struct Survey {
    handover: OxFunctionalAccounts,
    steps: Vec<Step>,
    /// Per account (same order), the users to link.
    links: Vec<Vec<Link>>,
    /// Users recorded as linked that cannot be linked now (gone, or without an identifier).
    not_linked: Vec<String>,
    /// Users recorded as not linkable (no groupware account).
    unlinkable: usize,
    groups: usize,
    /// The permission's identifier, when it exists.
    permission: Option<String>,
}

impl Survey {
    fn to_create(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Create(_)))
            .count()
    }

    fn users_linked(&self) -> usize {
        self.links.iter().map(Vec::len).sum()
    }

    fn describe_users(&self) -> String {
        let mut out = String::new();
        if !self.not_linked.is_empty() {
            out.push_str(&format!(
                "; users recorded as linked that cannot be linked now: {} ({})",
                self.not_linked.len(),
                short_list(&self.not_linked)
            ));
        }
        if self.unlinkable > 0 {
            out.push_str(&format!(
                "; users the export could not link (no groupware account): {}",
                self.unlinkable
            ));
        }
        if self.groups > 0 {
            out.push_str(&format!(
                "; group links recorded and not carried over: {}",
                self.groups
            ));
        }
        out
    }
}

impl Config {
    fn key(&self) -> &str {
        &self.handover.object_key
    }

    /// Reads the handover: its absence is an error that says what it means.
    async fn handover(&self, store: &HandoverStore) -> Result<OxFunctionalAccounts, ActionError> {
        match store.read_functional_accounts(self.key()).await? {
            Some(doc) => Ok(doc),
            None => Err(ActionError::NotFound(format!(
                "there is no handover {:?} in {}: ox_functional_accounts_export writes it in the pre stage of the same release (even when there is no Functional Account), so it did not run, or handover.objectKey or the Migration's objectStore differ between the two declarations. Nothing was created",
                self.key(),
                store.describe()
            ))),
        }
    }

    /// The permission's identifier, if it exists now.
    async fn permission(&self, udm: &UdmClient) -> Result<Option<String>, ActionError> {
        let name = &self.shared_accounts.permission;
        let found = udm
            .search_with(
                PERMISSION,
                &Search {
                    filter: Some(Filter::eq("name", name)),
                    position: Some(self.ldap.base_dn.clone()),
                    properties: vec!["name".into(), IDENTIFIER.into()],
                    ..Search::default()
                },
            )
            .await?;
        let Some(p) = found.into_iter().find(|p| {
            p.property_str("name")
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        }) else {
            return Ok(None);
        };
        match p.object_identifier() {
            Some(id) => Ok(Some(id)),
            None => Err(ActionError::NotFound(format!(
                "the permission {name:?} ({}) has no {IDENTIFIER}: Shared Accounts link users with a permission by that identifier; run ldap_entryuuid_to_object_identifier (or set it) and run the stage again. Nothing was created",
                p.dn
            ))),
        }
    }

    /// Reads the handover and the IAM, and works out every account's step; fails on every
    /// account that cannot be created.
    async fn survey(&self, udm: &UdmClient, store: &HandoverStore) -> Result<Survey, ActionError> {
        check_store_and_udm(store, udm).await?;
        let handover = self.handover(store).await?;
        let accounts = &handover.accounts;
        let names = shared_account_names(accounts.iter().map(|a| (a.name.as_str(), a.dn.as_str())))
            .map_err(|problems| {
                let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
                ActionError::Failed(format!(
                    "the handover {:?} holds {} that cannot become a Shared Account, nothing was created: {}",
                    self.key(),
                    plural(problems.len(), "account"),
                    messages.join("; ")
                ))
            })?;
        let permission = self.permission(udm).await?;
        let base = &self.ldap.base_dn;
        let existing = udm
            .all_objects(SHARED_ACCOUNT, base, SHARED_PROPERTIES)
            .await?;
        let existing = Existing::new(&existing);
        let mut problems = Vec::new();
        let steps: Vec<Step> = accounts
            .iter()
            .zip(&names)
            .map(|(a, name)| match step(a, name, &existing) {
                Ok(s) => s,
                Err(problem) => {
                    problems.push(problem.to_string());
                    Step::Done(name.clone())
                }
            })
            .collect();
        let to_create: Vec<&FunctionalAccount> = accounts
            .iter()
            .zip(&steps)
            .filter(|(_, s)| matches!(s, Step::Create(_)))
            .map(|(a, _)| a)
            .collect();
        problems.extend(self.addresses_in_use(udm, &to_create).await?);
        if !problems.is_empty() {
            return Err(ActionError::Conflict(format!(
                "{} cannot be created, nothing was created: {}",
                plural(problems.len(), "Shared Account"),
                problems.join("; ")
            )));
        }

        let dns: BTreeSet<String> = accounts
            .iter()
            .flat_map(|a| {
                a.users
                    .iter()
                    .filter(|u| u.is_ox_user)
                    .map(|u| u.dn.clone())
            })
            .collect();
        let users = udm
            .users_by_dn(base, &dns, &["username", IDENTIFIER])
            .await?;
        let mut not_linked = Vec::new();
        let mut unlinkable = 0;
        let mut groups = 0;
        let mut links = Vec::with_capacity(accounts.len());
        for a in accounts {
            let mut seen = BTreeSet::new();
            let mut mine = Vec::new();
            groups += a.groups.len();
            for u in &a.users {
                if !u.is_ox_user {
                    unlinkable += 1;
                    continue;
                }
                let now = users.get(&norm_dn(&u.dn)).cloned().flatten();
                let identifier = match &now {
                    Some(o) => o
                        .object_identifier()
                        .or_else(|| u.univention_object_identifier.clone()),
                    None => None,
                };
                match identifier {
                    Some(id) => {
                        if seen.insert(id.to_lowercase()) {
                            mine.push(Link { identifier: id });
                        }
                    }
                    None if now.is_none() => {
                        not_linked.push(format!("{} (in {:?}: no longer exists)", u.dn, a.name))
                    }
                    None => {
                        not_linked.push(format!("{} (in {:?}: has no {IDENTIFIER})", u.dn, a.name))
                    }
                }
            }
            links.push(mine);
        }
        Ok(Survey {
            handover,
            steps,
            links,
            not_linked,
            unlinkable,
            groups,
            permission,
        })
    }

    /// The problems of accounts whose address another IAM object still has: a Functional
    /// Account (part 1 did not finish) or a user.
    async fn addresses_in_use(
        &self,
        udm: &UdmClient,
        accounts: &[&FunctionalAccount],
    ) -> Result<Vec<String>, ActionError> {
        if accounts.is_empty() {
            return Ok(Vec::new());
        }
        let base = &self.ldap.base_dn;
        let mut problems = Vec::new();
        let wanted: BTreeMap<String, &FunctionalAccount> = accounts
            .iter()
            .map(|a| (a.mail_primary_address.to_lowercase(), *a))
            .collect();
        let fas = udm
            .all_objects(FUNCTIONAL_ACCOUNT, base, &["name", "mailPrimaryAddress"])
            .await?;
        for fa in fas {
            if let Some(a) = fa
                .property_str("mailPrimaryAddress")
                .and_then(|m| wanted.get(&m.to_lowercase()))
            {
                problems.push(format!(
                    "the Functional Account {} still has the address {} of {:?}: ox_functional_accounts_export did not finish in the pre stage (run it again, or delete the Functional Account by hand once the handover describes it)",
                    fa.dn, a.mail_primary_address, a.name
                ));
            }
        }
        let mails: Vec<&String> = wanted.keys().collect();
        let users = udm
            .search_any_of(
                USER,
                "mailPrimaryAddress",
                &mails,
                base,
                &["username", "mailPrimaryAddress"],
            )
            .await?;
        for u in users {
            if let Some(a) = u
                .property_str("mailPrimaryAddress")
                .and_then(|m| wanted.get(&m.to_lowercase()))
            {
                problems.push(format!(
                    "the user {} has the address {} of {:?} as its primary address: change it in the IAM and run the stage again",
                    u.dn, a.mail_primary_address, a.name
                ));
            }
        }
        Ok(problems)
    }

    /// The planning phase on given clients.
    async fn plan_with(
        &self,
        udm: &UdmClient,
        store: &HandoverStore,
    ) -> Result<Outcome, ActionError> {
        let s = self.survey(udm, store).await?;
        let permission = match &s.permission {
            Some(_) => format!("the permission {:?}", self.shared_accounts.permission),
            None => format!(
                "the permission {:?}, which is not in the IAM yet (apply waits up to {}s for it)",
                self.shared_accounts.permission, self.shared_accounts.permission_wait_seconds
            ),
        };
        Ok(Outcome::new(format!(
            "the handover {:?} in {} holds {}: would create {} ({} as recorded), linking {} with {permission}{}",
            self.key(),
            store.describe(),
            plural(s.handover.accounts.len(), "account"),
            plural(s.to_create(), "Shared Account"),
            match s.steps.len() - s.to_create() {
                1 => "1 exists".to_string(),
                n => format!("{n} exist"),
            },
            plural(s.users_linked(), "user"),
            s.describe_users()
        )))
    }

    /// Waits up to `permissionWaitSeconds` for the permission; its identifier.
    async fn wait_for_permission(
        &self,
        udm: &UdmClient,
        progress: &Progress,
    ) -> Result<String, ActionError> {
        let limit = Duration::from_secs(self.shared_accounts.permission_wait_seconds);
        let started = Instant::now();
        let mut logged = false;
        progress.phase(
            format!(
                "waiting for the permission {:?} in the IAM",
                self.shared_accounts.permission
            ),
            Some(limit.as_secs()),
            "seconds",
        );
        loop {
            progress.set_done(started.elapsed().as_secs());
            if let Some(id) = self.permission(udm).await? {
                if logged {
                    tracing::info!(
                        permission = %self.shared_accounts.permission,
                        waited_s = started.elapsed().as_secs(),
                        "the permission appeared"
                    );
                }
                return Ok(id);
            }
            let elapsed = started.elapsed();
            if elapsed >= limit {
                return Err(ActionError::Failed(format!(
                    "the permission {:?} (oxmail/shared_account_permission, by its UDM name) did not appear in the IAM within {}s: the stackdata Job loads it from the openDesk profiles, so check that Job, or set sharedAccounts.permission to the name of an existing permission. Nothing was created; run the stage again once it exists",
                    self.shared_accounts.permission,
                    limit.as_secs()
                )));
            }
            if !logged {
                tracing::info!(
                    permission = %self.shared_accounts.permission,
                    wait_s = limit.as_secs(),
                    "the permission is not in the IAM yet: waiting for it"
                );
                logged = true;
            }
            tokio::time::sleep(POLL.min(limit - elapsed)).await;
        }
    }

    /// The apply phase on given clients.
    async fn apply_with(
        &self,
        udm: &UdmClient,
        store: &HandoverStore,
        stop: &StopSignal,
        reporter: &Progress,
    ) -> Result<Outcome, ActionError> {
        if self.dry_run {
            let planned = self.plan_with(udm, store).await?;
            return Ok(Outcome::new(format!(
                "dryRun is set, nothing changed: {}",
                planned.summary
            )));
        }
        let started = Instant::now();
        reporter.step("reading the handover and the IAM");
        let s = self.survey(udm, store).await?;
        let permission = match &s.permission {
            Some(id) => id.clone(),
            None => self.wait_for_permission(udm, reporter).await?,
        };
        let waited = started.elapsed();
        let total = s.handover.accounts.len();
        let jobs = s
            .handover
            .accounts
            .iter()
            .zip(&s.steps)
            .zip(&s.links)
            .filter_map(|((a, step), links)| match step {
                Step::Create(name) => Some((a, name, links)),
                Step::Done(name) => {
                    tracing::info!(account = %a.name, shared_account = %name, "the Shared Account exists as recorded");
                    None
                }
            });
        let to_create = s.to_create();
        let permission = permission.as_str();
        reporter.phase(
            "creating Shared Accounts",
            Some(to_create as u64),
            "accounts",
        );
        let batch = run_bounded(
            futures::stream::iter(jobs),
            IN_FLIGHT,
            stop,
            |(a, name, links)| async move {
                let r = self.create(udm, a, name, links, permission).await;
                match &r {
                    Ok(_) => reporter.add(1),
                    Err(e) => {
                        tracing::warn!(account = %a.name, shared_account = %name, error = %e, "creating the Shared Account failed");
                    }
                }
                r
            },
        )
        .await;
        let created = batch.succeeded;
        let progress = batch.report(to_create, &plural(to_create, "Shared Account"), "created");
        if let Some(stopped) = batch.stop_error() {
            return Err(stopped.after(Some(format!(
                "{progress}; a rerun creates the rest (the ones created count as done)"
            ))));
        }
        if let Some((_, e)) = batch.into_first_failure() {
            return Err(e.map_message(|e| {
                format!(
                    "{e}. {progress}; a rerun creates the rest (the ones created count as done)"
                )
            }));
        }
        let created_at = started.elapsed();

        // Read back: every recorded account is a Shared Account with its identifier.
        reporter.step("reading the Shared Accounts back");
        let now = udm
            .all_objects(SHARED_ACCOUNT, &self.ldap.base_dn, SHARED_PROPERTIES)
            .await?;
        let have: BTreeSet<String> = now
            .iter()
            .filter_map(UdmObject::object_identifier)
            .map(|id| id.to_lowercase())
            .collect();
        let missing: Vec<String> = s
            .handover
            .accounts
            .iter()
            .filter(|a| !have.contains(&a.entry_uuid.to_lowercase()))
            .map(|a| format!("{:?} ({})", a.name, a.entry_uuid))
            .collect();
        if !missing.is_empty() {
            return Err(ActionError::Failed(format!(
                "read back: the IAM has no Shared Account for {} of the handover: {}; run the stage again",
                plural(missing.len(), "account"),
                short_list(&missing)
            )));
        }
        tracing::info!(
            created,
            total,
            permission_wait_ms = waited.as_millis() as u64,
            create_ms = (created_at - waited).as_millis() as u64,
            read_back_ms = (started.elapsed() - created_at).as_millis() as u64,
            "Shared Accounts created"
        );
        Ok(Outcome::new(format!(
            "created {} from the handover {:?} ({} existed as recorded), linking {} with the permission {:?}; read back: every one of the {} is a Shared Account{}",
            plural(created, "Shared Account"),
            self.key(),
            s.steps.len() - s.to_create(),
            plural(s.users_linked(), "user"),
            self.shared_accounts.permission,
            plural(total, "recorded account"),
            s.describe_users()
        )))
    }

    /// Creates one Shared Account; a create whose answer was lost (it exists now, as recorded)
    /// counts as done.
    async fn create(
        &self,
        udm: &UdmClient,
        a: &FunctionalAccount,
        name: &str,
        links: &[Link],
        permission: &str,
    ) -> Result<(), ActionError> {
        let mut properties = Map::new();
        properties.insert("name".into(), json!(name));
        properties.insert(
            "displayName".into(),
            json!(a.display_name.clone().unwrap_or_else(|| a.name.clone())),
        );
        properties.insert("mailPrimaryAddress".into(), json!(a.mail_primary_address));
        properties.insert("oxContext".into(), json!(a.ox_context));
        properties.insert(IDENTIFIER.into(), json!(a.entry_uuid));
        properties.insert(
            "users".into(),
            Value::Array(
                links
                    .iter()
                    .map(|l| json!([l.identifier, permission]))
                    .collect(),
            ),
        );
        match udm.create(SHARED_ACCOUNT, None, &properties).await {
            Ok(created) => {
                let users: Vec<&str> = links.iter().map(|l| l.identifier.as_str()).collect();
                tracing::info!(
                    account = %a.name,
                    shared_account = name,
                    dn = %created.dn,
                    identifier = %a.entry_uuid,
                    users = ?users,
                    "Shared Account created"
                );
                Ok(())
            }
            Err(e) => {
                // The answer may have been lost while the object was created: look.
                if let Ok(found) = self.find_shared(udm, &a.entry_uuid).await
                    && let Some(o) = found
                    && step(a, name, &Existing::new(std::slice::from_ref(&o)))
                        == Ok(Step::Done(name.to_string()))
                {
                    tracing::info!(account = %a.name, shared_account = name, "the Shared Account exists as recorded (the create's answer was lost)");
                    return Ok(());
                }
                Err(create_failure(a, name, e))
            }
        }
    }

    /// The Shared Account with this identifier, if any.
    async fn find_shared(
        &self,
        udm: &UdmClient,
        identifier: &str,
    ) -> Result<Option<UdmObject>, ActionError> {
        let all = udm
            .all_objects(SHARED_ACCOUNT, &self.ldap.base_dn, SHARED_PROPERTIES)
            .await?;
        Ok(all.into_iter().find(|o| {
            o.object_identifier()
                .is_some_and(|id| id.eq_ignore_ascii_case(identifier))
        }))
    }

    fn clients(&self, ctx: &ActionContext) -> Result<(UdmClient, HandoverStore), ActionError> {
        Ok((
            self.udm.client(ctx)?,
            HandoverStore::for_run(ctx, Self::ID)?,
        ))
    }
}

/// Why a recorded account cannot be created: a Shared Account already holds its identifier
/// (and differs from the handover), its name or its address. The message names both and
/// says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
struct StepConflict(String);

/// What to do with the recorded account `a` (Shared Account name `name`) given the existing
/// Shared Accounts; a conflict is the error.
fn step(a: &FunctionalAccount, name: &str, existing: &Existing<'_>) -> Result<Step, StepConflict> {
    if let Some(o) = existing.by_identifier(&a.entry_uuid) {
        let mut differs = Vec::new();
        let have_name = o.property_str("name").unwrap_or_default();
        if !have_name.eq_ignore_ascii_case(name) {
            differs.push(format!("name {have_name:?}, recorded {name:?}"));
        }
        let have_mail = o.property_str("mailPrimaryAddress").unwrap_or_default();
        if !have_mail.eq_ignore_ascii_case(&a.mail_primary_address) {
            differs.push(format!(
                "address {have_mail:?}, recorded {:?}",
                a.mail_primary_address
            ));
        }
        let have_ctx = o.property_i64("oxContext");
        if have_ctx != Some(i64::from(a.ox_context)) {
            differs.push(format!(
                "oxContext {}, recorded {}",
                have_ctx
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "none".into()),
                a.ox_context
            ));
        }
        return if differs.is_empty() {
            Ok(Step::Done(name.to_string()))
        } else {
            Err(StepConflict(format!(
                "the Shared Account {} has the identifier {} of {:?} but differs from the handover ({}): correct or remove it in the IAM and run the stage again",
                o.dn,
                a.entry_uuid,
                a.name,
                differs.join(", ")
            )))
        };
    }
    if let Some(o) = existing.by_name(name) {
        return Err(StepConflict(format!(
            "the Shared Account {} is already named {name:?} (identifier {}), the name {:?} becomes (identifier {}): rename or remove it in the IAM and run the stage again",
            o.dn,
            o.object_identifier().unwrap_or_else(|| "none".into()),
            a.name,
            a.entry_uuid
        )));
    }
    if let Some(o) = existing.by_mail(&a.mail_primary_address) {
        return Err(StepConflict(format!(
            "the Shared Account {} (identifier {}) already has the address {} of {:?}: change or remove it in the IAM and run the stage again",
            o.dn,
            o.object_identifier().unwrap_or_else(|| "none".into()),
            a.mail_primary_address,
            a.name
        )));
    }
    Ok(Step::Create(name.to_string()))
}

/// The existing Shared Accounts, indexed by identifier, name and address (lower case).
#[derive(Debug)]
struct Existing<'a> {
    objects: &'a [UdmObject],
    by_id: HashMap<String, usize>,
    by_name: HashMap<String, usize>,
    by_mail: HashMap<String, usize>,
}

impl<'a> Existing<'a> {
    fn new(objects: &'a [UdmObject]) -> Self {
        let mut by_id = HashMap::new();
        let mut by_name = HashMap::new();
        let mut by_mail = HashMap::new();
        for (i, o) in objects.iter().enumerate() {
            if let Some(id) = o.object_identifier() {
                by_id.entry(id.to_lowercase()).or_insert(i);
            }
            if let Some(n) = o.property_str("name") {
                by_name.entry(n.to_lowercase()).or_insert(i);
            }
            if let Some(m) = o.property_str("mailPrimaryAddress") {
                by_mail.entry(m.to_lowercase()).or_insert(i);
            }
        }
        Existing {
            objects,
            by_id,
            by_name,
            by_mail,
        }
    }

    fn get(&self, map: &HashMap<String, usize>, key: &str) -> Option<&'a UdmObject> {
        map.get(&key.to_lowercase())
            .and_then(|i| self.objects.get(*i))
    }

    fn by_identifier(&self, id: &str) -> Option<&'a UdmObject> {
        self.get(&self.by_id, id)
    }

    fn by_name(&self, name: &str) -> Option<&'a UdmObject> {
        self.get(&self.by_name, name)
    }

    fn by_mail(&self, mail: &str) -> Option<&'a UdmObject> {
        self.get(&self.by_mail, mail)
    }
}

/// The error of a refused create, naming the account and, where the server located the
/// problem, what to do about it.
fn create_failure(a: &FunctionalAccount, name: &str, e: UdmError) -> ActionError {
    let hint = if e.is_located_at(&["properties", "mailPrimaryAddress"]) {
        " (another IAM object has this address: change it there and run the stage again)"
    } else if e.is_located_at(&["dn"]) {
        " (an object of this name exists in the Shared Accounts' container: rename or remove it and run the stage again)"
    } else {
        ""
    };
    let message = format!(
        "creating the Shared Account {name:?} <{}> for the Functional Account {:?} failed: {e}{hint}",
        a.mail_primary_address, a.name
    );
    if hint.is_empty() {
        ActionError::from(e).map_message(|_| message)
    } else {
        ActionError::Conflict(message)
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let (udm, store) = self.clients(ctx)?;
            self.plan_with(&udm, &store).await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let (udm, store) = self.clients(ctx)?;
            self.apply_with(&udm, &store, &ctx.stop, &ctx.progress)
                .await
        })
    }

    fn needs(&self) -> Needs {
        handover_needs(&[UDM_PASSWORD_FILE], &self.handover, HandoverRole::Reads)
    }

    fn endpoints(&self, _namespace: &str) -> Vec<Endpoint> {
        self.udm.endpoints()
    }

    fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The store, its bucket and the credential, and the UDM credential. The handover object
    /// itself is not looked for: the export of the same run may not have written it yet.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let (udm, store) = self.clients(ctx)?;
            check_store_and_udm(&store, &udm).await
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::action::SecretValue;

    fn account() -> FunctionalAccount {
        FunctionalAccount {
            name: "Team Sales".into(),
            display_name: None,
            dn: "cn=Team Sales,cn=functional_accounts,cn=open-xchange,dc=x".into(),
            position: "cn=functional_accounts,cn=open-xchange,dc=x".into(),
            entry_uuid: "5b1c".into(),
            univention_object_identifier: None,
            mail_primary_address: "sales@example.org".into(),
            ox_context: 1,
            personal: None,
            ox_quota: None,
            users: vec![],
            groups: vec![],
            ox_secondary_accounts: vec![],
            udm_properties: BTreeMap::new(),
        }
    }

    fn shared(name: &str, mail: &str, id: &str, ctx: i64) -> UdmObject {
        let udm = UdmClient::new(
            "http://u/univention/udm/",
            "a",
            SecretValue::new(""),
            Duration::from_secs(1),
            &Default::default(),
        )
        .unwrap();
        let mut properties = Map::new();
        properties.insert("name".into(), json!(name));
        properties.insert("mailPrimaryAddress".into(), json!(mail));
        properties.insert("oxContext".into(), json!(ctx));
        properties.insert(IDENTIFIER.into(), json!(id));
        let dn = format!("cn={name},cn=shared_accounts,dc=x");
        UdmObject {
            uri: udm.object_url(SHARED_ACCOUNT, &dn),
            dn,
            object_type: SHARED_ACCOUNT.into(),
            id: Some(name.into()),
            position: None,
            uuid: None,
            properties,
            server_uri: None,
            etag: None,
        }
    }

    #[test]
    fn steps() {
        let a = account();
        assert_eq!(
            step(&a, "Team-Sales", &Existing::new(&[])),
            Ok(Step::Create("Team-Sales".into()))
        );
        let done = shared("Team-Sales", "sales@example.org", "5B1C", 1);
        assert_eq!(
            step(&a, "Team-Sales", &Existing::new(&[done])),
            Ok(Step::Done("Team-Sales".into()))
        );
        let moved = shared("Team-Sales", "other@example.org", "5b1c", 2);
        let e = step(&a, "Team-Sales", &Existing::new(&[moved]))
            .unwrap_err()
            .0;
        assert!(e.contains("address") && e.contains("oxContext 2"), "{e}");
        let taken = shared("team-sales", "x@example.org", "other", 1);
        let e = step(&a, "Team-Sales", &Existing::new(&[taken]))
            .unwrap_err()
            .0;
        assert!(e.contains("already named"), "{e}");
        let mail = shared("Else", "SALES@example.org", "other", 1);
        let e = step(&a, "Team-Sales", &Existing::new(&[mail]))
            .unwrap_err()
            .0;
        assert!(e.contains("already has the address"), "{e}");
    }

    #[test]
    fn defaults() {
        let c: Config = serde_json::from_value(json!({})).unwrap();
        assert_eq!(
            c.shared_accounts.permission,
            "opendesk_mail_author_calendar_author"
        );
        assert_eq!(c.shared_accounts.permission_wait_seconds, 900);
        assert!(c.semantic_issues().is_empty());
    }
}
