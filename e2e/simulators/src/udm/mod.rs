//! The UDM REST API simulator (`univention/univention-corporate-server`,
//! `management/univention-directory-manager-rest`, `module.py`): the object collections and
//! objects of `users/user`, `groups/group`, `oxmail/functional_account`,
//! `oxmail/shared_account` and `oxmail/shared_account_permission` under `/univention/udm/`,
//! with the real server's HTTP Basic handling, content negotiation, HAL+JSON shapes, error
//! envelope, entity tags and validation rules.
//!
//! | request | answers |
//! | --- | --- |
//! | `GET /univention/udm/` | `200` the module links (`udm:object-types`, `udm:object/get-by-dn`, …) |
//! | `GET /univention/udm/<module>/` | no query string: `200` links only (no search); with one: `200 {_links, _embedded: {"udm:object": […]}, results}` (no `udm:object` key when nothing matched) |
//! | `POST /univention/udm/<module>/` | `201` + `Location` + `ETag`, body `{dn, uuid}`; `422` validation (required, uniqueness, RDN), `400` other |
//! | `GET /univention/udm/<module>/<dn>` | `200` the object + `ETag` + `Last-Modified`; `404` |
//! | `PUT /univention/udm/<module>/<dn>` | `204` modified, `201` created (unknown DN) or moved (other `position`); `412` `If-Match` mismatch; `422` |
//! | `PATCH /univention/udm/<module>/<dn>` | `204`; `404`, `412`, `422` |
//! | `DELETE /univention/udm/<module>/<dn>` | `204`, then `404`; `412`; `400` for a still referenced permission |
//! | `GET /univention/udm/object/<dn or uuid>` | `301` + `Location` of the object |
//!
//! Authentication: no `Authorization` header, wrong credentials → `401` with an empty body and
//! `WWW-Authenticate: Basic realm="Univention Management Console"`; a malformed Basic header →
//! `400`; a login that is not the admin (`cn=admin` by default) nor in an authorized group →
//! `403`. Content negotiation: `Accept: application/json` → JSON, `application/hal+json` → HAL
//! JSON, no `Accept`, `*/*` or `text/html` → **HTML** (as the real server; `406` when the HTML
//! view is disabled), anything else → `406`.
//!
//! Seed JSON (`--seed FILE`, `POST /_sim/seed`):
//! `{"objects": [{"module", "properties", "position"?, "uuid"?, "after_seconds"?}],
//!   "logins": [{"username", "password", "authorized"?}]}`. An object with `after_seconds`
//! appears only that long after it was seeded (the permissions the stackdata Job loads late).
//! Seeded objects keep exactly the properties given: one without `univentionObjectIdentifier`
//! has none (as objects created before UCS set it).
//!
//! This file holds the state (objects, containers, logins) and the seeding; `server/` answers
//! the requests, one file a resource (its module documentation maps them), and `modules.rs`
//! holds each module's rules.

mod filter;
mod modules;
mod server;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::http::SimServer;

pub use filter::{Filter, FilterError};
pub use modules::{
    FUNCTIONAL_ACCOUNT, GROUPS_GROUP, MODULES, ModuleDef, SHARED_ACCOUNT,
    SHARED_ACCOUNT_PERMISSION, USERS_USER, module,
};

/// The LDAP base openDesk uses.
pub const DEFAULT_BASE_DN: &str = "dc=swp-ldap,dc=internal";

/// The path every UDM URL starts with.
pub const API_PATH: &str = "/univention/udm";

/// A running UDM REST API simulator.
pub type UdmSim = SimServer<Udm>;

/// Starts a UDM REST API simulator on a free loopback port.
pub async fn start(config: UdmConfig) -> std::io::Result<UdmSim> {
    SimServer::start(Udm::new(config)).await
}

impl SimServer<Udm> {
    /// The API base, `http://127.0.0.1:PORT/univention/udm/`: what a client is configured with.
    pub fn api_url(&self) -> String {
        format!("{}{API_PATH}/", self.base_url())
    }

    /// The URI the simulator gives the object `dn` of `module` (as in its answers).
    pub fn object_uri(&self, module: &str, dn: &str) -> String {
        format!("{}{API_PATH}/{module}/{}", self.base_url(), quote_dn(dn))
    }
}

/// How the simulator authenticates and behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdmConfig {
    /// The admin login (`cn=admin` in openDesk): needs no group membership.
    pub admin_user: String,
    /// The admin password.
    pub admin_password: String,
    /// The LDAP base.
    pub base_dn: String,
    /// Whether requests without `Accept: application/json` get HTML (default `true`, as the
    /// addendum observed); off, they get `406` like a server with
    /// `directory/manager/rest/html-view-enabled=false`.
    pub html_view_enabled: bool,
    /// Whether a create without `univentionObjectIdentifier` gets a fresh one (default `true`).
    pub assign_object_identifier: bool,
}

impl UdmConfig {
    /// The given admin credentials, the openDesk LDAP base, defaults otherwise.
    pub fn new(admin_user: &str, admin_password: &str) -> Self {
        UdmConfig {
            admin_user: admin_user.to_string(),
            admin_password: admin_password.to_string(),
            base_dn: DEFAULT_BASE_DN.to_string(),
            html_view_enabled: true,
            assign_object_identifier: true,
        }
    }
}

/// An object as the simulator stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredObject {
    /// The module, such as `oxmail/functional_account`.
    pub module: String,
    /// The DN.
    pub dn: String,
    /// The entryUUID.
    pub uuid: String,
    /// The UDM properties (integers as numbers, passwords included).
    pub properties: Map<String, Value>,
}

impl StoredObject {
    /// A property as text (numbers written out); `None` when absent, null or not scalar.
    pub fn property_str(&self, name: &str) -> Option<String> {
        match self.properties.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// The DN and entryUUID of an object the simulator created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The DN.
    pub dn: String,
    /// The entryUUID.
    pub uuid: String,
}

/// Why an object cannot be added through the Rust or seed API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeedError {
    /// The module is not one the simulator serves.
    #[error("the UDM simulator has no module {0:?}")]
    UnknownModule(String),
    /// The identifying property is missing.
    #[error("a {module} object needs the property {property:?}")]
    MissingName {
        /// The module.
        module: String,
        /// The identifying property.
        property: String,
    },
    /// An object with that DN exists (or is pending).
    #[error("an object {0} exists already")]
    Exists(String),
    /// The properties are not a JSON object.
    #[error("the properties of a {0} object must be a JSON object")]
    NotAnObject(String),
}

#[derive(Debug, Clone)]
struct Stored {
    module: &'static ModuleDef,
    dn: String,
    uuid: String,
    properties: Map<String, Value>,
    csn: u64,
    modified: SystemTime,
}

impl Stored {
    fn public(&self) -> StoredObject {
        StoredObject {
            module: self.module.name.to_string(),
            dn: self.dn.clone(),
            uuid: self.uuid.clone(),
            properties: self.properties.clone(),
        }
    }

    fn etag(&self) -> String {
        let part = |salt: u64| {
            let mut h = std::hash::DefaultHasher::new();
            salt.hash(&mut h);
            norm_dn(&self.dn).hash(&mut h);
            self.module.name.hash(&mut h);
            self.csn.hash(&mut h);
            self.uuid.hash(&mut h);
            h.finish()
        };
        format!("\"{:016x}{:016x}\"", part(1), part(2))
    }

    /// The value of the module's naming property (empty when it has none).
    fn naming(&self) -> String {
        naming_of(self.module, &self.properties).unwrap_or_default()
    }
}

/// The value of `def`'s naming property in `properties`: the object's RDN value and `id`.
fn naming_of(def: &ModuleDef, properties: &Map<String, Value>) -> Option<String> {
    properties
        .get(def.naming)
        .and_then(|v| filter::value_strings(v).into_iter().next())
}

/// The DN of an object of `def` named `naming` in `container`.
fn object_dn(def: &ModuleDef, naming: &str, container: &str) -> String {
    format!("{}={},{container}", def.rdn_attr, escape_rdn_value(naming))
}

#[derive(Debug, Clone)]
struct Login {
    password: String,
    authorized: bool,
}

#[derive(Debug, Default)]
struct Store {
    /// By normalized DN.
    objects: BTreeMap<String, Stored>,
    /// Objects that appear at their instant.
    pending: Vec<(Instant, Stored)>,
    /// Containers that exist (normalized DNs) besides the objects and their ancestors.
    containers: BTreeSet<String>,
    counter: u64,
    csn: u64,
}

impl Store {
    /// A new version of an object: the next change sequence number, modified now.
    fn version(
        &mut self,
        module: &'static ModuleDef,
        dn: String,
        uuid: String,
        properties: Map<String, Value>,
    ) -> Stored {
        self.csn += 1;
        Stored {
            module,
            dn,
            uuid,
            properties,
            csn: self.csn,
            modified: SystemTime::now(),
        }
    }

    /// Replaces `current` by its next version, at `dn` with `properties`.
    fn replace(&mut self, current: &Stored, dn: String, properties: Map<String, Value>) -> Stored {
        let updated = self.version(current.module, dn, current.uuid.clone(), properties);
        self.objects.remove(&norm_dn(&current.dn));
        self.objects.insert(norm_dn(&updated.dn), updated.clone());
        updated
    }
}

/// The UDM REST API simulator's state and behaviour; reach it through [`SimServer::state`].
#[derive(Debug)]
pub struct Udm {
    config: Mutex<UdmConfig>,
    store: Mutex<Store>,
    logins: Mutex<BTreeMap<String, Login>>,
    seed: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Udm {
    /// A simulator with the default containers and no objects.
    pub fn new(config: UdmConfig) -> Self {
        let mut store = Store::default();
        let base = config.base_dn.clone();
        store.containers.insert(norm_dn(&base));
        for extra in ["cn=open-xchange", "cn=users", "cn=groups"] {
            store.containers.insert(norm_dn(&format!("{extra},{base}")));
        }
        for m in MODULES {
            store
                .containers
                .insert(norm_dn(&m.default_container(&base)));
        }
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(7)
            ^ u64::from(std::process::id()).rotate_left(32);
        Udm {
            config: Mutex::new(config),
            store: Mutex::new(store),
            logins: Mutex::new(BTreeMap::new()),
            seed,
        }
    }

    fn config(&self) -> UdmConfig {
        lock(&self.config).clone()
    }

    /// The LDAP base.
    pub fn base_dn(&self) -> String {
        lock(&self.config).base_dn.clone()
    }

    /// Switches the HTML view (see [`UdmConfig::html_view_enabled`]).
    pub fn set_html_view_enabled(&self, enabled: bool) {
        lock(&self.config).html_view_enabled = enabled;
    }

    /// Adds a login besides the admin; `authorized` says whether it is in a group of
    /// `directory/manager/rest/authorized-groups` (else it gets `403`).
    pub fn add_login(&self, username: &str, password: &str, authorized: bool) {
        lock(&self.logins).insert(
            username.to_string(),
            Login {
                password: password.to_string(),
                authorized,
            },
        );
    }

    /// Adds an object in the module's default container, bypassing the API's rules except
    /// that the DN must be free. Properties are stored as given (integers coerced).
    pub fn add_object(&self, module: &str, properties: Value) -> Result<Created, SeedError> {
        self.insert_seeded(module, None, properties, None, None)
    }

    /// Adds an object below `position`.
    pub fn add_object_at(
        &self,
        module: &str,
        position: &str,
        properties: Value,
    ) -> Result<Created, SeedError> {
        self.insert_seeded(module, Some(position), properties, None, None)
    }

    /// Adds an object that becomes visible only `delay` from now (searches, GETs and
    /// uniqueness checks do not see it before); its DN and entryUUID are fixed now.
    pub fn add_delayed(
        &self,
        module: &str,
        properties: Value,
        delay: Duration,
    ) -> Result<Created, SeedError> {
        self.insert_seeded(module, None, properties, None, Some(delay))
    }

    /// Adds a user (`uid=<username>,cn=users,<base>`) with `lastname` = username, the given
    /// primary address, `isOxUser` `OK` when `ox_context` is given (else `Not`), and a
    /// `univentionObjectIdentifier` equal to its entryUUID.
    pub fn add_user(
        &self,
        username: &str,
        mail: &str,
        ox_context: Option<i64>,
    ) -> Result<Created, SeedError> {
        let mut properties = json!({
            "username": username,
            "lastname": username,
            "firstname": "",
            "mailPrimaryAddress": mail,
            "isOxUser": if ox_context.is_some() { "OK" } else { "Not" },
        });
        if let Some(ctx) = ox_context {
            properties["oxContext"] = json!(ctx);
        }
        self.with_identifier_from_uuid("users/user", properties)
    }

    /// Adds a group (`cn=<name>,cn=groups,<base>`) with the given member DNs, its
    /// `univentionObjectIdentifier` equal to its entryUUID.
    pub fn add_group(&self, name: &str, users: &[&str]) -> Result<Created, SeedError> {
        self.with_identifier_from_uuid("groups/group", json!({"name": name, "users": users}))
    }

    /// Adds a functional account with member user DNs and **no**
    /// `univentionObjectIdentifier` (as the accounts created before UCS set one).
    pub fn add_functional_account(
        &self,
        name: &str,
        mail: &str,
        users: &[&str],
        ox_context: Option<i64>,
    ) -> Result<Created, SeedError> {
        let mut properties = json!({
            "name": name,
            "mailPrimaryAddress": mail,
            "users": users,
            "groups": [],
        });
        if let Some(ctx) = ox_context {
            properties["oxContext"] = json!(ctx);
        }
        self.add_object("oxmail/functional_account", properties)
    }

    /// Adds a shared account permission with a `univentionObjectIdentifier` equal to its
    /// entryUUID.
    pub fn add_permission(&self, name: &str, display_name: &str) -> Result<Created, SeedError> {
        self.with_identifier_from_uuid(
            "oxmail/shared_account_permission",
            json!({"name": name, "displayName": display_name}),
        )
    }

    fn with_identifier_from_uuid(
        &self,
        module: &str,
        properties: Value,
    ) -> Result<Created, SeedError> {
        let uuid = self.next_uuid();
        let mut properties = properties;
        properties["univentionObjectIdentifier"] = json!(uuid);
        self.insert_seeded(module, None, properties, Some(uuid), None)
    }

    fn insert_seeded(
        &self,
        module_name: &str,
        position: Option<&str>,
        properties: Value,
        uuid: Option<String>,
        delay: Option<Duration>,
    ) -> Result<Created, SeedError> {
        let def =
            module(module_name).ok_or_else(|| SeedError::UnknownModule(module_name.into()))?;
        let Value::Object(properties) = properties else {
            return Err(SeedError::NotAnObject(module_name.into()));
        };
        let properties = coerce_loosely(def, properties);
        let naming = naming_of(def, &properties).ok_or_else(|| SeedError::MissingName {
            module: module_name.into(),
            property: def.naming.into(),
        })?;
        let base = self.base_dn();
        let container = position
            .map(str::to_string)
            .unwrap_or_else(|| def.default_container(&base));
        let dn = object_dn(def, &naming, &container);
        let uuid = uuid.unwrap_or_else(|| self.next_uuid());
        let mut store = lock(&self.store);
        let key = norm_dn(&dn);
        if store.objects.contains_key(&key)
            || store.pending.iter().any(|(_, p)| norm_dn(&p.dn) == key)
        {
            return Err(SeedError::Exists(dn));
        }
        let stored = store.version(def, dn.clone(), uuid.clone(), properties);
        store.containers.insert(norm_dn(&container));
        match delay {
            Some(delay) => store.pending.push((Instant::now() + delay, stored)),
            None => {
                store.objects.insert(key, stored);
            }
        }
        Ok(Created { dn, uuid })
    }

    /// The object with this DN (case-insensitive), if visible.
    pub fn object(&self, dn: &str) -> Option<StoredObject> {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        store.objects.get(&norm_dn(dn)).map(Stored::public)
    }

    /// The visible objects of a module, by DN.
    pub fn objects(&self, module: &str) -> Vec<StoredObject> {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        store
            .objects
            .values()
            .filter(|o| o.module.name == module)
            .map(Stored::public)
            .collect()
    }

    /// The first visible object of `module` whose `property` has the value `value`
    /// (compared as text, case-insensitively; lists element by element).
    pub fn find(&self, module: &str, property: &str, value: &str) -> Option<StoredObject> {
        self.objects(module).into_iter().find(|o| {
            o.properties
                .get(property)
                .map(filter::value_strings)
                .unwrap_or_default()
                .iter()
                .any(|v| v.eq_ignore_ascii_case(value))
        })
    }

    /// Sets (or with `Value::Null` removes) a property, bypassing every rule (a change made
    /// behind the API's back, such as by an LDAP action); answers whether the object exists.
    pub fn set_property(&self, dn: &str, name: &str, value: Value) -> bool {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        store.csn += 1;
        let csn = store.csn;
        match store.objects.get_mut(&norm_dn(dn)) {
            Some(o) => {
                if value.is_null() {
                    o.properties.remove(name);
                } else {
                    o.properties.insert(name.to_string(), value);
                }
                o.csn = csn;
                o.modified = SystemTime::now();
                true
            }
            None => false,
        }
    }

    /// Removes an object without any check; answers whether it existed.
    pub fn remove(&self, dn: &str) -> bool {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        store.objects.remove(&norm_dn(dn)).is_some()
    }

    /// How many delayed objects have not appeared yet.
    pub fn pending_count(&self) -> usize {
        let mut store = lock(&self.store);
        promote_due(&mut store);
        store.pending.len()
    }

    fn next_uuid(&self) -> String {
        let n = {
            let mut store = lock(&self.store);
            store.counter += 1;
            store.counter
        };
        let a = splitmix(self.seed ^ n);
        let b = splitmix(a ^ n.rotate_left(17));
        format!(
            "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            8 + ((b >> 62) & 0x3),
            (b >> 48) & 0xfff,
            b & 0xffff_ffff_ffff
        )
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Moves the delayed objects whose time has come into the directory.
fn promote_due(store: &mut Store) {
    if store.pending.is_empty() {
        return;
    }
    let now = Instant::now();
    let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut store.pending)
        .into_iter()
        .partition(|(at, _)| *at <= now);
    store.pending = waiting;
    for (_, mut object) in due {
        object.modified = SystemTime::now();
        store.objects.insert(norm_dn(&object.dn), object);
    }
}

/// Integer properties given as numeric strings become numbers, lower-cased properties are
/// lower-cased; everything else is kept (the seed path, no validation).
fn coerce_loosely(def: &ModuleDef, mut properties: Map<String, Value>) -> Map<String, Value> {
    for name in def.integers {
        if let Some(Value::String(s)) = properties.get(*name)
            && let Ok(n) = s.trim().parse::<i64>()
        {
            properties.insert((*name).to_string(), json!(n));
        }
    }
    for name in def.lowercase {
        if let Some(Value::String(s)) = properties.get(*name) {
            let lower = s.to_lowercase();
            properties.insert((*name).to_string(), json!(lower));
        }
    }
    properties
}

/// A DN normalized for comparison: lower-case, no spaces around `,` and `=`.
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

/// The parent DN (`None` for a single RDN).
pub fn parent_dn(dn: &str) -> Option<String> {
    let parts = split_dn(dn);
    if parts.len() < 2 {
        return None;
    }
    Some(parts[1..].join(","))
}

/// Whether the normalized DN `dn_norm` is `base_norm` or below it.
fn under(dn_norm: &str, base_norm: &str) -> bool {
    dn_norm == base_norm || dn_norm.ends_with(&format!(",{base_norm}"))
}

/// Escapes an RDN value (RFC 4514).
pub fn escape_rdn_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Percent-encodes a DN for a URL path the way the real server's `quote_dn` does (Python's
/// `quote` with `/` kept, `//` written as `,/=/,`).
pub fn quote_dn(dn: &str) -> String {
    let dn = dn.replace("//", ",/=/,");
    let mut out = String::with_capacity(dn.len() * 3);
    for b in dn.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Formats an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year:04} {h:02}:{m:02}:{s:02} GMT",
        DAYS[weekday],
        MONTHS[(month - 1) as usize]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_normalize_split_and_escape() {
        assert_eq!(
            norm_dn("CN=Team Sales , cn=functional_accounts,DC=X"),
            "cn=team sales,cn=functional_accounts,dc=x"
        );
        assert_eq!(
            parent_dn(r"cn=a\,b,cn=c,dc=x").as_deref(),
            Some("cn=c,dc=x")
        );
        assert_eq!(escape_rdn_value("a,b+c "), r"a\,b\+c\ ");
        assert_eq!(
            quote_dn("uid=alice,cn=users,dc=x"),
            "uid%3Dalice%2Ccn%3Dusers%2Cdc%3Dx"
        );
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            http_date(UNIX_EPOCH + Duration::from_secs(784_111_777)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
    }

    #[test]
    fn uuids_are_v4_shaped_and_distinct() {
        let udm = Udm::new(UdmConfig::new("cn=admin", "pw"));
        let a = udm.next_uuid();
        let b = udm.next_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn delayed_objects_appear_later() {
        let udm = Udm::new(UdmConfig::new("cn=admin", "pw"));
        let created = udm
            .add_delayed(
                "oxmail/shared_account_permission",
                json!({"name": "p", "displayName": "P"}),
                Duration::from_millis(50),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(udm.object(&created.dn).is_none());
        assert_eq!(udm.pending_count(), 1);
        std::thread::sleep(Duration::from_millis(80));
        assert!(udm.object(&created.dn).is_some());
        assert_eq!(udm.pending_count(), 0);
    }
}
