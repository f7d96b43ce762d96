//! The OX App Suite SOAP provisioning API simulator: `POST /webservices/OXContextService`,
//! `OXUserService`, `OXGroupService` and `OXSecondaryAccountService`, SOAP 1.1
//! document/literal, with per-context users, groups and secondary accounts.
//!
//! The exact request and response XML it accepts and sends is in the crate's `README.md`.
//! In short:
//!
//! - The operation is the element inside `<Body>` (in `http://soap.admin.openexchange.com`);
//!   its parameters are its children in that namespace; the fields of `ctx`, `user`, `grp`,
//!   `auth`, … are in `http://dataobjects.soap.admin.openexchange.com/xsd` (`auth`'s fields in
//!   `http://dataobjects.rmi.admin.openexchange.com/xsd`; either data-object namespace is
//!   accepted for any field). Prefixes are free; an element in a wrong namespace is ignored,
//!   as the real server does, and the call fails for the missing value.
//! - `OXContextService` needs the master admin; the other services need the context admin
//!   (`oxadmin`, by its current name) or, unless [`OxSoap::set_master_account_override`] was
//!   turned off, the master admin. A context that does not exist fails authentication
//!   (`Authentication failed`), as on the real server.
//! - Answers are `<{op}Response xmlns="http://soap.admin.openexchange.com">` with one
//!   `<return>` per item (none for an empty list) whose fields carry the `ns2` prefix of
//!   `http://dataobjects.soap.admin.openexchange.com/xsd`; unset fields are `xsi:nil`.
//! - Failures are HTTP 500 SOAP faults: `faultcode` `soap:Server`, `faultstring`
//!   `"<message>; exceptionId <n>-<n>"` and a `<detail>` naming the exception
//!   (`InvalidCredentialsException`, `InvalidDataException`, `NoSuchContextException`,
//!   `NoSuchUserException`, `NoSuchObjectException`, `StorageException`). Malformed requests get
//!   `soap:Client` faults without detail.
//!
//! OX-specific fault injection: "fail after N successful renames" is a rule
//! `FaultRule::op("change").from_nth(N + 1)`; a secondary account that survives its deletion
//! is [`OxSoap::set_accounts_come_back`]; a rename the server answers but does not make is
//! [`OxSoap::set_renames_lost`].
//!
//! Seed JSON (`--seed FILE`, `POST /_sim/seed`):
//! `{"username_changeable"?: bool, "accounts_come_back"?: bool, "renames_lost"?: bool, "contexts": [{"id", "name"?,
//! "admin_password"?, "users": [{"id"?, "name", "display_name"?, "given_name"?, "sur_name"?,
//! "email"?}], "groups": [{"id"?, "name", "displayname"?, "members": ["<user name>"]}],
//! "secondary_accounts": [{"primary_address", "name"?, "users": ["<user name>"]}]}]}`.
//! Contexts that exist already get the objects added.

mod ops;
pub mod xml;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::http::{Protocol, SimRequest, SimServer, text_response};

/// A running OX SOAP simulator.
pub type OxSim = SimServer<OxSoap>;

/// Starts an OX SOAP simulator on a free loopback port.
pub async fn start(config: OxConfig) -> std::io::Result<OxSim> {
    SimServer::start(OxSoap::new(config)).await
}

impl SimServer<OxSoap> {
    /// The SOAP base URL clients are configured with (`soapUrl`); services are at
    /// `{soap_url}/webservices/<Service>`.
    pub fn soap_url(&self) -> String {
        self.base_url()
    }

    /// The endpoint of one service, such as `OXUserService`.
    pub fn service_url(&self, service: &str) -> String {
        format!("{}/webservices/{service}", self.base_url())
    }
}

/// The id of the context admin `oxadmin` in every context the simulator creates.
pub const CONTEXT_ADMIN_ID: u32 = 2;
/// The context admin's name.
pub const CONTEXT_ADMIN_NAME: &str = "oxadmin";
/// The id of the default group `users` in every context the simulator creates.
pub const DEFAULT_GROUP_ID: u32 = 1;
/// The default group's name.
pub const DEFAULT_GROUP_NAME: &str = "users";

/// How the simulator authenticates and behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OxConfig {
    /// The master admin's login (`admin` in openDesk, `oxadminmaster` by default in OX).
    pub master_login: String,
    /// The master admin's password.
    pub master_password: String,
    /// The password of `oxadmin` in contexts created by [`OxSoap::add_context`].
    pub context_admin_password: String,
    /// `USERNAME_CHANGEABLE` (OX ships `false`; default here `true`). When `false`, renaming a
    /// user fails with `Changing username is disabled!`.
    pub username_changeable: bool,
    /// Whether the master admin may call the per-context services (`MASTER_ACCOUNT_OVERRIDE`);
    /// default `true`, as openDesk's migrations use the master admin for everything.
    pub master_account_override: bool,
    /// Answer a void `change` with an empty `<soap:Body/>` instead of `<changeResponse/>`
    /// (default `false`; both happen on real servers).
    pub empty_change_response: bool,
}

impl OxConfig {
    /// The master admin's credentials; `oxadmin` gets the same password.
    pub fn new(master_login: &str, master_password: &str) -> Self {
        OxConfig {
            master_login: master_login.to_string(),
            master_password: master_password.to_string(),
            context_admin_password: master_password.to_string(),
            username_changeable: true,
            master_account_override: true,
            empty_change_response: false,
        }
    }
}

/// A user of a context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OxUser {
    /// The numeric id (assigned when 0 at creation).
    pub id: u32,
    /// The login name (what a rename changes).
    pub name: String,
    /// `display_name`.
    pub display_name: String,
    /// `given_name`.
    pub given_name: String,
    /// `sur_name`.
    pub sur_name: String,
    /// `primaryEmail`.
    pub primary_email: String,
    /// `email1`.
    pub email1: String,
}

impl OxUser {
    /// A user with this name and mail address (display name, given name and surname default to
    /// the name).
    pub fn new(name: &str, email: &str) -> Self {
        OxUser {
            id: 0,
            name: name.to_string(),
            display_name: name.to_string(),
            given_name: name.to_string(),
            sur_name: name.to_string(),
            primary_email: email.to_string(),
            email1: email.to_string(),
        }
    }
}

/// A group of a context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OxGroup {
    /// The numeric id.
    pub id: u32,
    /// The name (what a rename changes; case is kept).
    pub name: String,
    /// `displayname`.
    pub displayname: String,
    /// The member user ids.
    pub members: Vec<u32>,
}

/// One row of a secondary account: OX keeps one per linked user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OxSecondaryAccount {
    /// The account id (per row).
    pub id: u32,
    /// The primary address all rows of one account share.
    pub primary_address: String,
    /// The account name.
    pub name: String,
    /// The login.
    pub login: String,
    /// The user this row belongs to.
    pub user_id: u32,
}

/// One context with everything in it (a snapshot; see [`OxSoap::context`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OxContext {
    /// The context id.
    pub id: u32,
    /// The context name.
    pub name: String,
    /// Whether it is enabled.
    pub enabled: bool,
    /// The context admin's user id ([`CONTEXT_ADMIN_ID`]).
    pub admin_id: u32,
    /// The default group's id ([`DEFAULT_GROUP_ID`]).
    pub default_group_id: u32,
    /// Users by id (the context admin included).
    pub users: BTreeMap<u32, OxUser>,
    /// Groups by id (the default group included).
    pub groups: BTreeMap<u32, OxGroup>,
    /// Secondary account rows.
    pub secondary_accounts: Vec<OxSecondaryAccount>,
    admin_password: String,
    next_id: u32,
    next_account_id: u32,
}

impl OxContext {
    fn new(id: u32, name: &str, admin_password: &str) -> Self {
        let mut users = BTreeMap::new();
        users.insert(
            CONTEXT_ADMIN_ID,
            OxUser {
                id: CONTEXT_ADMIN_ID,
                name: CONTEXT_ADMIN_NAME.to_string(),
                display_name: "Context Admin".to_string(),
                given_name: "Context".to_string(),
                sur_name: "Admin".to_string(),
                primary_email: format!("oxadmin@context{id}.invalid"),
                email1: format!("oxadmin@context{id}.invalid"),
            },
        );
        let mut groups = BTreeMap::new();
        groups.insert(
            DEFAULT_GROUP_ID,
            OxGroup {
                id: DEFAULT_GROUP_ID,
                name: DEFAULT_GROUP_NAME.to_string(),
                displayname: "All users".to_string(),
                members: vec![CONTEXT_ADMIN_ID],
            },
        );
        OxContext {
            id,
            name: name.to_string(),
            enabled: true,
            admin_id: CONTEXT_ADMIN_ID,
            default_group_id: DEFAULT_GROUP_ID,
            users,
            groups,
            secondary_accounts: Vec::new(),
            admin_password: admin_password.to_string(),
            next_id: 3,
            next_account_id: 1,
        }
    }

    fn take_id(&mut self, wanted: u32) -> u32 {
        let id = if wanted == 0 { self.next_id } else { wanted };
        self.next_id = self.next_id.max(id + 1);
        id
    }

    fn user_by_name(&self, name: &str) -> Option<&OxUser> {
        self.users
            .values()
            .find(|u| u.name.eq_ignore_ascii_case(name))
    }

    fn group_by_name(&self, name: &str) -> Option<&OxGroup> {
        self.groups.values().find(|g| g.name == name)
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "enabled": self.enabled,
            "admin_id": self.admin_id,
            "default_group_id": self.default_group_id,
            "users": self.users.values().collect::<Vec<_>>(),
            "groups": self.groups.values().collect::<Vec<_>>(),
            "secondary_accounts": self.secondary_accounts,
        })
    }
}

/// Why seeding the simulator failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// The context does not exist: add it first.
    #[error("context {0} does not exist: add it with add_context first")]
    NoSuchContext(u32),
    /// The user does not exist in the context.
    #[error("no user {user} in context {context}")]
    NoSuchUser {
        /// The context.
        context: u32,
        /// The user id or name.
        user: String,
    },
    /// The name is taken in the context.
    #[error("{kind} name {name} is already taken in context {context}")]
    NameTaken {
        /// The context.
        context: u32,
        /// `user` or `group`.
        kind: &'static str,
        /// The name.
        name: String,
    },
}

#[derive(Debug)]
struct OxState {
    config: OxConfig,
    contexts: BTreeMap<u32, OxContext>,
    accounts_come_back: bool,
    renames_lost: bool,
    renames: u64,
}

/// The OX SOAP simulator's state and behaviour; reach it through [`SimServer::state`].
#[derive(Debug)]
pub struct OxSoap {
    state: Mutex<OxState>,
    exception_seq: AtomicU64,
}

impl OxSoap {
    /// A simulator without contexts.
    pub fn new(config: OxConfig) -> Self {
        OxSoap {
            state: Mutex::new(OxState {
                config,
                contexts: BTreeMap::new(),
                accounts_come_back: false,
                renames_lost: false,
                renames: 0,
            }),
            exception_seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, OxState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with_context<T>(
        &self,
        context: u32,
        f: impl FnOnce(&mut OxContext) -> Result<T, SeedError>,
    ) -> Result<T, SeedError> {
        let mut state = self.lock();
        let ctx = state
            .contexts
            .get_mut(&context)
            .ok_or(SeedError::NoSuchContext(context))?;
        f(ctx)
    }

    /// Creates (or replaces) a context with `oxadmin` (id [`CONTEXT_ADMIN_ID`], the configured
    /// context admin password) and the default group `users` (id [`DEFAULT_GROUP_ID`]).
    pub fn add_context(&self, id: u32, name: &str) {
        let password = self.lock().config.context_admin_password.clone();
        self.add_context_with_admin(id, name, &password);
    }

    /// Creates (or replaces) a context whose `oxadmin` has this password.
    pub fn add_context_with_admin(&self, id: u32, name: &str, admin_password: &str) {
        self.lock()
            .contexts
            .insert(id, OxContext::new(id, name, admin_password));
    }

    /// Adds a user with this name and mail address (see [`OxUser::new`]) to the context and its
    /// default group; answers its id.
    pub fn add_user(&self, context: u32, name: &str, email: &str) -> Result<u32, SeedError> {
        self.add_user_full(context, OxUser::new(name, email))
    }

    /// Adds a user (its id assigned when 0) to the context and its default group; answers its
    /// id.
    pub fn add_user_full(&self, context: u32, user: OxUser) -> Result<u32, SeedError> {
        self.with_context(context, |ctx| {
            if ctx.user_by_name(&user.name).is_some()
                || (user.id != 0 && ctx.users.contains_key(&user.id))
            {
                return Err(SeedError::NameTaken {
                    context,
                    kind: "user",
                    name: user.name,
                });
            }
            let id = ctx.take_id(user.id);
            ctx.users.insert(id, OxUser { id, ..user });
            let default = ctx.default_group_id;
            if let Some(group) = ctx.groups.get_mut(&default) {
                group.members.push(id);
            }
            Ok(id)
        })
    }

    /// Adds a group with these members; answers its id.
    pub fn add_group(
        &self,
        context: u32,
        name: &str,
        displayname: &str,
        members: &[u32],
    ) -> Result<u32, SeedError> {
        self.add_group_with_id(context, 0, name, displayname, members)
    }

    fn add_group_with_id(
        &self,
        context: u32,
        id: u32,
        name: &str,
        displayname: &str,
        members: &[u32],
    ) -> Result<u32, SeedError> {
        self.with_context(context, |ctx| {
            if ctx.group_by_name(name).is_some() || (id != 0 && ctx.groups.contains_key(&id)) {
                return Err(SeedError::NameTaken {
                    context,
                    kind: "group",
                    name: name.to_string(),
                });
            }
            if let Some(missing) = members.iter().find(|m| !ctx.users.contains_key(m)) {
                return Err(SeedError::NoSuchUser {
                    context,
                    user: missing.to_string(),
                });
            }
            let id = ctx.take_id(id);
            ctx.groups.insert(
                id,
                OxGroup {
                    id,
                    name: name.to_string(),
                    displayname: displayname.to_string(),
                    members: members.to_vec(),
                },
            );
            Ok(id)
        })
    }

    /// Adds a secondary account for these users: one row per user, login
    /// `<primary address>/<user name>`; answers the row ids.
    pub fn add_secondary_account(
        &self,
        context: u32,
        primary_address: &str,
        name: &str,
        users: &[u32],
    ) -> Result<Vec<u32>, SeedError> {
        self.with_context(context, |ctx| {
            let mut ids = Vec::new();
            for user_id in users {
                let user = ctx.users.get(user_id).ok_or(SeedError::NoSuchUser {
                    context,
                    user: user_id.to_string(),
                })?;
                let login = format!("{primary_address}/{}", user.name);
                let id = ctx.next_account_id;
                ctx.next_account_id += 1;
                ctx.secondary_accounts.push(OxSecondaryAccount {
                    id,
                    primary_address: primary_address.to_string(),
                    name: name.to_string(),
                    login,
                    user_id: *user_id,
                });
                ids.push(id);
            }
            Ok(ids)
        })
    }

    /// The context ids.
    pub fn contexts(&self) -> Vec<u32> {
        self.lock().contexts.keys().copied().collect()
    }

    /// A snapshot of one context.
    pub fn context(&self, context: u32) -> Option<OxContext> {
        self.lock().contexts.get(&context).cloned()
    }

    /// The users of a context (the context admin included), by id.
    pub fn users(&self, context: u32) -> Vec<OxUser> {
        self.context(context)
            .map(|c| c.users.into_values().collect())
            .unwrap_or_default()
    }

    /// One user by id.
    pub fn user(&self, context: u32, id: u32) -> Option<OxUser> {
        self.lock()
            .contexts
            .get(&context)
            .and_then(|c| c.users.get(&id).cloned())
    }

    /// One user by name (case-insensitive, as OX's database compares).
    pub fn user_by_name(&self, context: u32, name: &str) -> Option<OxUser> {
        self.lock()
            .contexts
            .get(&context)
            .and_then(|c| c.user_by_name(name).cloned())
    }

    /// The groups of a context (the default group included), by id.
    pub fn groups(&self, context: u32) -> Vec<OxGroup> {
        self.context(context)
            .map(|c| c.groups.into_values().collect())
            .unwrap_or_default()
    }

    /// One group by id.
    pub fn group(&self, context: u32, id: u32) -> Option<OxGroup> {
        self.lock()
            .contexts
            .get(&context)
            .and_then(|c| c.groups.get(&id).cloned())
    }

    /// The secondary account rows of a context.
    pub fn secondary_accounts(&self, context: u32) -> Vec<OxSecondaryAccount> {
        self.context(context)
            .map(|c| c.secondary_accounts)
            .unwrap_or_default()
    }

    /// How many renames (`change` calls that changed a user's or a group's name) succeeded.
    pub fn rename_count(&self) -> u64 {
        self.lock().renames
    }

    /// Sets `USERNAME_CHANGEABLE`.
    pub fn set_username_changeable(&self, changeable: bool) {
        self.lock().config.username_changeable = changeable;
    }

    /// Whether the master admin may call the per-context services.
    pub fn set_master_account_override(&self, allowed: bool) {
        self.lock().config.master_account_override = allowed;
    }

    /// Answer a void `change` with an empty `<soap:Body/>`.
    pub fn set_empty_change_response(&self, empty: bool) {
        self.lock().config.empty_change_response = empty;
    }

    /// When set, `OXSecondaryAccountService.delete` answers as if it deleted but the rows stay
    /// (they "come back"), so a client's read-back must catch it.
    pub fn set_accounts_come_back(&self, come_back: bool) {
        self.lock().accounts_come_back = come_back;
    }

    /// When set, a rename (`change` with a new name) answers success but the name stays, as a
    /// server that drops the change would; only a client's read-back catches it. Renames lost
    /// this way are not counted by [`OxSoap::rename_count`].
    pub fn set_renames_lost(&self, lost: bool) {
        self.lock().renames_lost = lost;
    }

    fn next_exception_id(&self) -> String {
        let n = self.exception_seq.fetch_add(1, Ordering::SeqCst) + 1;
        format!("-1368829551-{n}")
    }

    fn seed(&self, seed: Seed) -> Result<(), SeedError> {
        {
            let mut state = self.lock();
            if let Some(v) = seed.username_changeable {
                state.config.username_changeable = v;
            }
            if let Some(v) = seed.accounts_come_back {
                state.accounts_come_back = v;
            }
            if let Some(v) = seed.renames_lost {
                state.renames_lost = v;
            }
        }
        for c in seed.contexts {
            let exists = self.lock().contexts.contains_key(&c.id);
            if !exists {
                let name = c.name.clone().unwrap_or_else(|| format!("context{}", c.id));
                match &c.admin_password {
                    Some(p) => self.add_context_with_admin(c.id, &name, p),
                    None => self.add_context(c.id, &name),
                }
            }
            for u in c.users {
                let mut user = OxUser::new(&u.name, u.email.as_deref().unwrap_or(""));
                user.id = u.id.unwrap_or(0);
                if let Some(d) = u.display_name {
                    user.display_name = d;
                }
                if let Some(g) = u.given_name {
                    user.given_name = g;
                }
                if let Some(s) = u.sur_name {
                    user.sur_name = s;
                }
                self.add_user_full(c.id, user)?;
            }
            for g in c.groups {
                let members = self.user_ids(c.id, &g.members)?;
                let displayname = g.displayname.unwrap_or_else(|| g.name.clone());
                self.add_group_with_id(c.id, g.id.unwrap_or(0), &g.name, &displayname, &members)?;
            }
            for a in c.secondary_accounts {
                let users = self.user_ids(c.id, &a.users)?;
                let name = a.name.unwrap_or_else(|| a.primary_address.clone());
                self.add_secondary_account(c.id, &a.primary_address, &name, &users)?;
            }
        }
        Ok(())
    }

    fn user_ids(&self, context: u32, names: &[String]) -> Result<Vec<u32>, SeedError> {
        names
            .iter()
            .map(|n| {
                self.user_by_name(context, n)
                    .map(|u| u.id)
                    .ok_or(SeedError::NoSuchUser {
                        context,
                        user: n.clone(),
                    })
            })
            .collect()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Seed {
    #[serde(default)]
    username_changeable: Option<bool>,
    #[serde(default)]
    accounts_come_back: Option<bool>,
    #[serde(default)]
    renames_lost: Option<bool>,
    #[serde(default)]
    contexts: Vec<SeedContext>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedContext {
    id: u32,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    admin_password: Option<String>,
    #[serde(default)]
    users: Vec<SeedUser>,
    #[serde(default)]
    groups: Vec<SeedGroup>,
    #[serde(default)]
    secondary_accounts: Vec<SeedAccount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedUser {
    #[serde(default)]
    id: Option<u32>,
    name: String,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    given_name: Option<String>,
    #[serde(default)]
    sur_name: Option<String>,
    #[serde(default)]
    email: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedGroup {
    #[serde(default)]
    id: Option<u32>,
    name: String,
    #[serde(default)]
    displayname: Option<String>,
    #[serde(default)]
    members: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedAccount {
    primary_address: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    users: Vec<String>,
}

/// The four services the simulator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    Context,
    User,
    Group,
    SecondaryAccount,
}

impl Service {
    fn from_path(path: &str) -> Option<Service> {
        match path.strip_prefix("/webservices/")?.trim_end_matches('/') {
            "OXContextService" => Some(Service::Context),
            "OXUserService" => Some(Service::User),
            "OXGroupService" => Some(Service::Group),
            "OXSecondaryAccountService" => Some(Service::SecondaryAccount),
            _ => None,
        }
    }
}

/// The operation named by the body's wrapper element, else by `SOAPAction`.
fn operation_of(request: &SimRequest) -> Option<String> {
    if let Ok(root) = xml::parse(&request.body)
        && let Some(op) = root
            .first(xml::SOAP_ENV, "Body")
            .and_then(|b| b.first_element())
    {
        return Some(op.name.clone());
    }
    let action = request.headers.get("soapaction")?.to_str().ok()?;
    let action = action.trim().trim_matches('"');
    let op = action.rsplit('/').next()?;
    (!op.is_empty()).then(|| op.to_string())
}

/// The object a changing call is for ([`Protocol::object`]): `context C user U` for a user's
/// `change`, `context C group G` for a group's, `context C mailbox ADDRESS` for a secondary
/// account `delete` (the address in lower case).
fn object_of(request: &SimRequest) -> Option<String> {
    let root = xml::parse(&request.body).ok()?;
    let call = root.first(xml::SOAP_ENV, "Body")?.first_element()?;
    let context = |param: &str| {
        call.first(xml::TNS, param)
            .and_then(|c| c.field_text("id"))
            .map(|id| id.trim().to_string())
    };
    let field = |param: &str, name: &str| {
        call.first(xml::TNS, param)
            .and_then(|e| e.field_text(name))
            .map(|v| v.trim().to_string())
    };
    match (Service::from_path(&request.path)?, call.name.as_str()) {
        (Service::User, "change") => Some(format!(
            "context {} user {}",
            context("ctx")?,
            field("usrdata", "id")?
        )),
        (Service::Group, "change") => Some(format!(
            "context {} group {}",
            context("ctx")?,
            field("grp", "id")?
        )),
        (Service::SecondaryAccount, "delete") => Some(format!(
            "context {} mailbox {}",
            context("context")?,
            call.first(xml::TNS, "primaryAddress")?
                .text
                .trim()
                .to_lowercase()
        )),
        _ => None,
    }
}

fn soap_xml(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/xml;charset=UTF-8"),
        )],
        body,
    )
        .into_response()
}

impl Protocol for OxSoap {
    fn operation(&self, request: &SimRequest) -> Option<String> {
        operation_of(request)
    }

    fn object(&self, request: &SimRequest) -> Option<String> {
        object_of(request)
    }

    fn handle(&self, request: &SimRequest) -> Response {
        let Some(service) = Service::from_path(&request.path) else {
            return text_response(StatusCode::NOT_FOUND, "No service was found.");
        };
        if request.method != Method::POST {
            return text_response(
                StatusCode::METHOD_NOT_ALLOWED,
                "SOAP services accept POST only",
            );
        }
        ops::call(self, service, &request.body)
    }

    fn fault_response(&self, status: StatusCode, _request: &SimRequest) -> Response {
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            ops::server_fault(
                self,
                ops::Exception::Storage,
                "Simulated storage failure (injected fault)",
            )
        } else {
            // What a proxy in front of the middleware answers.
            text_response(status, status.canonical_reason().unwrap_or("Error"))
        }
    }

    fn state_json(&self) -> Value {
        let state = self.lock();
        json!({
            "username_changeable": state.config.username_changeable,
            "master_account_override": state.config.master_account_override,
            "empty_change_response": state.config.empty_change_response,
            "accounts_come_back": state.accounts_come_back,
            "renames_lost": state.renames_lost,
            "renames": state.renames,
            "contexts": state.contexts.values().map(OxContext::to_json).collect::<Vec<_>>(),
        })
    }

    fn seed_json(&self, seed: &Value) -> Result<(), String> {
        let seed: Seed =
            serde_json::from_value(seed.clone()).map_err(|e| format!("not an OX seed: {e}"))?;
        self.seed(seed).map_err(|e| e.to_string())
    }
}
