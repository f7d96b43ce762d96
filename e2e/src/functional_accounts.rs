//! The world of the Functional Accounts to Shared Accounts tests (`ox_functional_accounts_export`
//! and `ox_shared_accounts_import`): a real MinIO ([`crate::minio`]) behind a fault-injecting
//! proxy ([`S3Proxy`]), the UDM REST and OX SOAP simulators, fixtures that seed both sides
//! consistently (the OX Connector's view: one secondary account row per groupware user of a
//! Functional Account), the checks of the crash-safety promise, and the manual clean-up the
//! export's stop message prescribes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};
use stagehand_actions::action::{ActionContext, ActionError, SecretValue, Secrets};
use stagehand_actions::clients::ox::{AccountOwners, OxClient};
use stagehand_actions::functional_accounts::name::shared_account_name;
use stagehand_actions::functional_accounts::record::OxFunctionalAccounts;
use stagehand_config::ObjectStore;
use stagehand_simulators::ox::{self, OxConfig, OxSim};
use stagehand_simulators::udm::{self, StoredObject, UdmConfig, UdmSim};

use crate::manifests::{Action, Migration};
use crate::minio::{BUCKET, Minio, MinioOptions};

/// The export's id.
pub const EXPORT: &str = "ox_functional_accounts_export";
/// The import's id.
pub const IMPORT: &str = "ox_shared_accounts_import";
/// The handover's key.
pub const KEY: &str = "ox-functional-accounts.yaml";
/// The permission users are linked with.
pub const PERMISSION: &str = "opendesk_mail_author_calendar_author";
/// The UDM admin.
pub const UDM_ADMIN: &str = "cn=admin";
/// The OX master admin.
pub const OX_MASTER: &str = "admin";
/// The OX context of the fixtures.
pub const CONTEXT: u32 = 1;

/// The UDM admin's password in the simulator.
pub const UDM_PASSWORD: &str = "udm-secret-pw";
/// The OX master admin's password in the simulator.
pub const OX_PASSWORD: &str = "ox-master-secret-pw";
const FA_MODULE: &str = "oxmail/functional_account";
const SA_MODULE: &str = "oxmail/shared_account";

// ---------------------------------------------------------------------------------------------
// The S3 fault proxy
// ---------------------------------------------------------------------------------------------

/// What the proxy does to a request a rule picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Fault {
    /// Close the connection without an answer (the request never reaches the store).
    Drop,
    /// Answer this status with an S3 error document (the request never reaches the store).
    Status(u16),
    /// Forward the request to the store, then close the connection without its answer (the
    /// change is made, its answer lost).
    ForwardThenDrop,
    /// Answer `200 OK` with these bytes instead of asking the store (a store that answers
    /// with something else than what it was given).
    Answer(&'static [u8]),
}

/// Which requests a fault applies to.
#[derive(Debug, Clone)]
pub struct S3Rule {
    /// The HTTP method (`GET`, `PUT`, ...).
    pub method: &'static str,
    /// Only requests of an object (not of the bucket, as the probe's listing).
    pub object_only: bool,
    /// Only requests after a `PUT` was forwarded (a write's read-back).
    pub after_put: bool,
    /// How many matching requests pass before the fault fires.
    pub skip: u64,
    /// How many matching requests it fires on after that (`None`: all).
    pub times: Option<u64>,
    /// The fault.
    pub fault: S3Fault,
}

impl S3Rule {
    /// Every object request with `method` gets `fault`.
    pub fn object(method: &'static str, fault: S3Fault) -> Self {
        S3Rule {
            method,
            object_only: true,
            after_put: false,
            skip: 0,
            times: None,
            fault,
        }
    }
}

#[derive(Debug, Default)]
struct ProxyState {
    rules: Vec<(S3Rule, u64)>,
    put_seen: bool,
    log: Vec<(String, String, Option<S3Fault>)>,
}

/// A TCP proxy in front of an S3 server that passes requests through unchanged (so presigned
/// signatures stay valid: the `Host` header is the proxy's, which is what was signed) and
/// injects faults by rule. One request per connection; stopped when dropped.
#[derive(Debug)]
pub struct S3Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<ProxyState>>,
    thread: Option<JoinHandle<()>>,
}

fn lock(state: &Mutex<ProxyState>) -> std::sync::MutexGuard<'_, ProxyState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl S3Proxy {
    /// A proxy on a free loopback port forwarding to `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Self {
        let listener = match TcpListener::bind("127.0.0.1:0") {
            Ok(l) => l,
            Err(e) => panic!("the S3 proxy cannot listen: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("the S3 proxy has no address: {e}"),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(ProxyState::default()));
        let (stop2, state2) = (stop.clone(), state.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let state = state2.clone();
                std::thread::spawn(move || serve(conn, upstream_port, &state));
            }
        });
        S3Proxy {
            addr,
            stop,
            state,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: the endpoint clients are given.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a fault rule.
    pub fn fail(&self, rule: S3Rule) {
        lock(&self.state).rules.push((rule, 0));
    }

    /// Removes every rule and forgets that a `PUT` was seen.
    pub fn heal(&self) {
        let mut s = lock(&self.state);
        s.rules.clear();
        s.put_seen = false;
    }

    /// The requests so far: method, path (without the query), fault.
    pub fn requests(&self) -> Vec<(String, String, Option<S3Fault>)> {
        lock(&self.state).log.clone()
    }
}

impl Drop for S3Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves one connection: one request, then the connection is closed.
fn serve(mut client: TcpStream, upstream_port: u16, state: &Mutex<ProxyState>) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let Some((head, body)) = read_request(&mut client) else {
        return;
    };
    let first = head.lines().next().unwrap_or_default().to_string();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_string();
    let is_object = path.trim_matches('/').contains('/');
    let fault = {
        let mut s = lock(state);
        let put_seen = s.put_seen;
        let mut fault = None;
        for (rule, seen) in &mut s.rules {
            if rule.method != method
                || (rule.object_only && !is_object)
                || (rule.after_put && !put_seen)
            {
                continue;
            }
            *seen += 1;
            let n = *seen;
            let firing = n > rule.skip && rule.times.is_none_or(|t| n <= rule.skip + t);
            if firing && fault.is_none() {
                fault = Some(rule.fault);
            }
        }
        s.log.push((method.clone(), path.clone(), fault));
        fault
    };
    match fault {
        Some(S3Fault::Drop) => {
            let _ = client.shutdown(Shutdown::Both);
        }
        Some(S3Fault::Status(status)) => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>injected by the test proxy ({status})</Message></Error>"
            );
            let _ = write!(
                client,
                "HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = client.shutdown(Shutdown::Both);
        }
        Some(S3Fault::Answer(bytes)) => {
            let _ = write!(
                client,
                "HTTP/1.1 200 OK\r\nContent-Type: application/yaml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                bytes.len()
            );
            let _ = client.write_all(bytes);
            let _ = client.shutdown(Shutdown::Both);
        }
        None | Some(S3Fault::ForwardThenDrop) => {
            let Some(answer) = forward(upstream_port, &head, &body) else {
                let _ = client.shutdown(Shutdown::Both);
                return;
            };
            if method == "PUT" {
                lock(state).put_seen = true;
            }
            if fault.is_none() {
                let _ = client.write_all(&answer);
            }
            let _ = client.shutdown(Shutdown::Both);
        }
    }
}

/// Reads a request head (up to the blank line) and its `Content-Length` body.
fn read_request(client: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = client.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = client.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// Sends the request upstream with `Connection: close` and reads the whole answer.
fn forward(port: u16, head: &str, body: &[u8]) -> Option<Vec<u8>> {
    let mut upstream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = upstream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut out = String::new();
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        if line
            .split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    upstream.write_all(out.as_bytes()).ok()?;
    upstream.write_all(body).ok()?;
    let mut answer = Vec::new();
    upstream.read_to_end(&mut answer).ok()?;
    Some(answer)
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A user of the fixture.
#[derive(Debug, Clone)]
pub struct UserSpec {
    /// The user name.
    pub uid: String,
    /// Whether it has a groupware account (`isOxUser`).
    pub ox: bool,
}

/// A Functional Account of the fixture.
#[derive(Debug, Clone)]
pub struct AccountSpec {
    /// Its name.
    pub name: String,
    /// Its address.
    pub mail: String,
    /// The user names linked to it.
    pub users: Vec<String>,
}

/// What a fixture seeded, to check against.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// The accounts: spec, DN, entryUUID.
    pub accounts: Vec<(AccountSpec, String, String)>,
    /// The users: uid → (DN, identifier, groupware).
    pub users: BTreeMap<String, (String, String, bool)>,
    /// The permission's identifier.
    pub permission: Option<String>,
}

impl Seeded {
    /// The entryUUIDs of the accounts.
    pub fn uuids(&self) -> BTreeSet<String> {
        self.accounts
            .iter()
            .map(|(_, _, u)| u.to_lowercase())
            .collect()
    }
}

/// The small fixture: four accounts (one name with a space, one user without a groupware
/// account, one account without users), three groupware users and one without.
pub fn small_fixture() -> (Vec<UserSpec>, Vec<AccountSpec>) {
    let users = [
        ("anna", true),
        ("ben", true),
        ("carl", true),
        ("dora", false),
    ]
    .into_iter()
    .map(|(uid, ox)| UserSpec {
        uid: uid.into(),
        ox,
    })
    .collect();
    let account = |name: &str, mail: &str, users: &[&str]| AccountSpec {
        name: name.into(),
        mail: mail.into(),
        users: users.iter().map(|u| u.to_string()).collect(),
    };
    let accounts = vec![
        account("Team Sales", "sales@example.org", &["anna", "ben", "dora"]),
        account("Support (EU)", "support@example.org", &["ben", "carl"]),
        account("info.desk", "info@example.org", &["anna"]),
        account("Empty box", "empty@example.org", &[]),
    ];
    (users, accounts)
}

/// `n` accounts with three groupware users each (`fa{i}-u{0..3}`).
pub fn scale_fixture(n: usize) -> (Vec<UserSpec>, Vec<AccountSpec>) {
    let mut users = Vec::with_capacity(3 * n);
    let mut accounts = Vec::with_capacity(n);
    for i in 0..n {
        let uids: Vec<String> = (0..3).map(|j| format!("fa{i}-u{j}")).collect();
        for uid in &uids {
            users.push(UserSpec {
                uid: uid.clone(),
                ox: true,
            });
        }
        accounts.push(AccountSpec {
            name: format!("Functional Account {i}"),
            mail: format!("fa{i}@example.org"),
            users: uids,
        });
    }
    (users, accounts)
}

// ---------------------------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------------------------

/// MinIO behind the fault proxy, the UDM and OX simulators, and the run's context.
pub struct World {
    /// The real S3 server.
    pub minio: Minio,
    /// The fault proxy the actions talk to.
    pub proxy: S3Proxy,
    /// The UDM REST simulator.
    pub udm: UdmSim,
    /// The OX SOAP simulator.
    pub ox: OxSim,
    /// What the actions run with.
    pub ctx: ActionContext,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("minio", &self.minio.endpoint())
            .field("proxy", &self.proxy.endpoint())
            .field("udm", &self.udm.api_url())
            .field("ox", &self.ox.soap_url())
            .finish_non_exhaustive()
    }
}

/// The secrets of the world's runs: the UDM and OX passwords and the store's secret key (with
/// a trailing line break, as Secret files often have), `replaced` by another value.
fn secrets(minio: &Minio, replaced: Option<(&str, &str)>) -> Secrets {
    let secret_key = format!("{}\n", minio.secret_key());
    Secrets::new(
        [
            ("udm-admin-password", UDM_PASSWORD),
            ("ox-master-password", OX_PASSWORD),
            (SECRET_KEY_FILE, secret_key.as_str()),
        ]
        .map(|(name, value)| {
            let value = match replaced {
                Some((r, v)) if r == name => v,
                _ => value,
            };
            (name.to_string(), SecretValue::new(value))
        }),
    )
}

/// The `secretFiles` name of the store's secret key.
pub const SECRET_KEY_FILE: &str = "objectstore-migrations-secret-key";

impl World {
    /// Starts everything, with OX context [`CONTEXT`] and nothing seeded.
    pub async fn start() -> Self {
        let minio = Minio::start(MinioOptions::default());
        let proxy = S3Proxy::start(minio.port());
        let udm = match udm::start(UdmConfig::new(UDM_ADMIN, UDM_PASSWORD)).await {
            Ok(s) => s,
            Err(e) => panic!("the UDM simulator did not start: {e}"),
        };
        let ox = match ox::start(OxConfig::new(OX_MASTER, OX_PASSWORD)).await {
            Ok(s) => s,
            Err(e) => panic!("the OX simulator did not start: {e}"),
        };
        ox.state().add_context(CONTEXT, "context1");
        let secrets = secrets(&minio, None);
        let ctx = ActionContext {
            client: crate::offline_client(),
            namespace: "opendesk".into(),
            secrets,
            object_store: Some(ObjectStore {
                endpoint: proxy.endpoint(),
                bucket: BUCKET.into(),
                region: None,
                path_style: Some(true),
                insecure_skip_tls_verify: None,
                access_key_id: minio.access_key().into(),
                secret_key_file: SECRET_KEY_FILE.into(),
                ca_bundle: None,
            }),
            run: Default::default(),
            stop: Default::default(),
            approved_findings: None,
            warnings: stagehand_actions::action::Warnings::default(),
            progress: Default::default(),
        };
        World {
            minio,
            proxy,
            udm,
            ox,
            ctx,
        }
    }

    /// The run's context with the secret file `name` holding `value` instead.
    pub fn ctx_with_secret(&self, name: &str, value: &str) -> ActionContext {
        ActionContext {
            secrets: secrets(&self.minio, Some((name, value))),
            ..self.ctx.clone()
        }
    }

    /// Seeds users, accounts, their OX secondary accounts (one row per groupware user), a
    /// foreign secondary account and (when `permission`) the permission.
    pub fn seed(&self, users: &[UserSpec], accounts: &[AccountSpec], permission: bool) -> Seeded {
        let udm = self.udm.state();
        let ox = self.ox.state();
        let mut seeded_users = BTreeMap::new();
        let mut ox_ids = BTreeMap::new();
        for u in users {
            let mail = format!("{}@users.example.org", u.uid);
            let created = match udm.add_user(&u.uid, &mail, u.ox.then_some(i64::from(CONTEXT))) {
                Ok(c) => c,
                Err(e) => panic!("seeding user {}: {e}", u.uid),
            };
            seeded_users.insert(u.uid.clone(), (created.dn, created.uuid, u.ox));
            if u.ox {
                match ox.add_user(CONTEXT, &u.uid, &mail) {
                    Ok(id) => {
                        ox_ids.insert(u.uid.clone(), id);
                    }
                    Err(e) => panic!("seeding OX user {}: {e}", u.uid),
                }
            }
        }
        let mut seeded = Vec::new();
        for a in accounts {
            let dns: Vec<&str> = a.users.iter().map(|u| seeded_users[u].0.as_str()).collect();
            let created = match udm.add_functional_account(
                &a.name,
                &a.mail,
                &dns,
                Some(i64::from(CONTEXT)),
            ) {
                Ok(c) => c,
                Err(e) => panic!("seeding account {}: {e}", a.name),
            };
            let ids: Vec<u32> = a
                .users
                .iter()
                .filter_map(|u| ox_ids.get(u).copied())
                .collect();
            if !ids.is_empty()
                && let Err(e) = ox.add_secondary_account(CONTEXT, &a.mail, &a.name, &ids)
            {
                panic!("seeding the secondary accounts of {}: {e}", a.name);
            }
            seeded.push((a.clone(), created.dn, created.uuid));
        }
        // A secondary account of no Functional Account, to be left alone.
        if let Some(id) = ox_ids.values().next()
            && let Err(e) = ox.add_secondary_account(CONTEXT, "other@example.org", "Other", &[*id])
        {
            panic!("seeding the foreign secondary account: {e}");
        }
        let permission = permission.then(|| self.add_permission());
        Seeded {
            accounts: seeded,
            users: seeded_users,
            permission,
        }
    }

    /// Adds the permission; its identifier.
    pub fn add_permission(&self) -> String {
        match self
            .udm
            .state()
            .add_permission(PERMISSION, "Mail: Full access, Calendar: Full access")
        {
            Ok(c) => self
                .udm
                .state()
                .object(&c.dn)
                .and_then(|o| o.property_str("univentionObjectIdentifier"))
                .unwrap_or_default(),
            Err(e) => panic!("seeding the permission: {e}"),
        }
    }

    /// The export's config (with `extra` merged in).
    pub fn export_config(&self, extra: Value) -> Value {
        merge(
            json!({
                "udm": {"url": self.udm.api_url(), "requestTimeoutSeconds": 10},
                "oxAppSuite": {"soapUrl": self.ox.soap_url(), "requestTimeoutSeconds": 10, "context": CONTEXT},
            }),
            extra,
        )
    }

    /// The import's config (with `extra` merged in); the permission wait is 2 s.
    pub fn import_config(&self, extra: Value) -> Value {
        merge(
            json!({
                "udm": {"url": self.udm.api_url(), "requestTimeoutSeconds": 10},
                "sharedAccounts": {"permissionWaitSeconds": 2},
            }),
            extra,
        )
    }

    /// Creates in `ns` the Secrets that [`World::migration`] reads its credentials from.
    pub fn create_secrets(&self, ns: &str) {
        for (name, key, value) in self.secret_objects() {
            crate::create_secret(ns, name, key, value);
        }
    }

    /// The Secrets [`World::migration`] reads its credentials from: name, key, value.
    pub fn secret_objects(&self) -> [(&'static str, &'static str, &str); 3] {
        [
            ("ums-ldap-server-admin", "password", UDM_PASSWORD),
            ("opendesk-ox-admin-password", "password", OX_PASSWORD),
            (
                "objectstore-migrations-secret-key",
                "secretKey",
                self.minio.secret_key(),
            ),
        ]
    }

    /// A Migration `opendesk` in `ns` (release v1.18.0, installed v1.17.3) with the export as its
    /// pre action and the import as its post action, both against this world, every credential
    /// read from the Secrets of [`World::create_secrets`].
    pub fn migration(&self, ns: &str) -> String {
        self.migration_with(ns, &[EXPORT], &[IMPORT])
    }

    /// A Migration `opendesk` in `ns` as [`World::migration`], declaring the actions `pre` and
    /// `post` (of [`EXPORT`] and [`IMPORT`]) in those stages.
    pub fn migration_with(&self, ns: &str, pre: &[&str], post: &[&str]) -> String {
        let store = self.ctx.object_store.clone().unwrap_or_else(|| {
            panic!("the world has an object store");
        });
        let action = |id: &str| {
            let config = if id == EXPORT {
                self.export_config(json!({}))
            } else {
                self.import_config(json!({}))
            };
            Action::new(id)
                .tag("v1.18.0")
                .run_mode("apply")
                .config(config)
        };
        let mut migration = Migration::new(ns)
            .installed("v1.17.3")
            .secret_file("udm-admin-password", "ums-ldap-server-admin", "password")
            .secret_file(
                "ox-master-password",
                "opendesk-ox-admin-password",
                "password",
            )
            .secret_file(
                "objectstore-migrations-secret-key",
                "objectstore-migrations-secret-key",
                "secretKey",
            )
            .object_store(json!({
                "endpoint": store.endpoint,
                "bucket": BUCKET,
                "pathStyle": true,
                "accessKeyId": store.access_key_id,
                "secretKeyFile": "objectstore-migrations-secret-key",
            }));
        for id in pre {
            migration = migration.pre(action(id));
        }
        for id in post {
            migration = migration.post(action(id));
        }
        migration.to_yaml()
    }

    /// The planning phase of `id` (as a dry run does).
    pub async fn plan(&self, id: &str, config: &Value) -> Result<String, ActionError> {
        let action = stagehand_actions::instantiate(id, config)?;
        Ok(action.plan(&self.ctx).await?.summary)
    }

    /// `id` as the run engine runs it: plan, then apply; the apply summary.
    pub async fn run(&self, id: &str, config: &Value) -> Result<String, ActionError> {
        let action = stagehand_actions::instantiate(id, config)?;
        action.plan(&self.ctx).await?;
        Ok(action.apply(&self.ctx).await?.summary)
    }

    /// The export with the default config.
    pub async fn export(&self) -> Result<String, ActionError> {
        self.run(EXPORT, &self.export_config(json!({}))).await
    }

    /// The import with the default config.
    pub async fn import(&self) -> Result<String, ActionError> {
        self.run(IMPORT, &self.import_config(json!({}))).await
    }

    /// The handover as the store holds it (read as root, past the proxy).
    pub fn handover(&self) -> Option<OxFunctionalAccounts> {
        self.minio
            .object(BUCKET, KEY)
            .map(|bytes| match OxFunctionalAccounts::from_yaml(&bytes) {
                Ok(doc) => doc,
                Err(e) => panic!("the handover does not parse: {e}"),
            })
    }

    /// The Functional Accounts in the IAM.
    pub fn functional_accounts(&self) -> Vec<StoredObject> {
        self.udm.state().objects(FA_MODULE)
    }

    /// The Shared Accounts in the IAM.
    pub fn shared_accounts(&self) -> Vec<StoredObject> {
        self.udm.state().objects(SA_MODULE)
    }

    /// The OX secondary account rows of `address` (any case).
    pub fn ox_rows(&self, address: &str) -> usize {
        self.ox
            .state()
            .secondary_accounts(CONTEXT)
            .iter()
            .filter(|a| a.primary_address.eq_ignore_ascii_case(address))
            .count()
    }

    /// The crash-safety promise: every seeded account is still in the IAM or described in the
    /// handover (by entryUUID), never neither. Answers how many are in each.
    pub fn assert_every_account_described(&self, seeded: &Seeded) -> (usize, usize) {
        let in_iam: BTreeSet<String> = self
            .functional_accounts()
            .iter()
            .map(|o| o.uuid.to_lowercase())
            .collect();
        let described: BTreeSet<String> = self
            .handover()
            .map(|h| {
                h.accounts
                    .iter()
                    .map(|a| a.entry_uuid.to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        for (spec, dn, uuid) in &seeded.accounts {
            let uuid = uuid.to_lowercase();
            assert!(
                in_iam.contains(&uuid) || described.contains(&uuid),
                "the Functional Account {:?} ({dn}) is neither in the IAM nor in the handover",
                spec.name
            );
        }
        (in_iam.len(), described.len())
    }

    /// The manual clean-up the export's stop message prescribes: every Functional Account
    /// still in the IAM that the handover describes loses its OX secondary accounts
    /// (`deletesecondaryaccount -c <ctx> -e <address> --groups 0`) and is deleted from the IAM;
    /// the handover is kept. Answers how many were cleaned up.
    pub async fn manual_cleanup(&self) -> usize {
        let Some(handover) = self.handover() else {
            panic!("the manual clean-up needs a handover");
        };
        let described: BTreeSet<String> = handover
            .accounts
            .iter()
            .map(|a| a.entry_uuid.to_lowercase())
            .collect();
        let ox = match OxClient::new(
            &self.ox.soap_url(),
            OX_MASTER,
            SecretValue::new(OX_PASSWORD),
            Duration::from_secs(10),
            &Default::default(),
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        let mut n = 0;
        for fa in self.functional_accounts() {
            if !described.contains(&fa.uuid.to_lowercase()) {
                continue;
            }
            let mail = fa.property_str("mailPrimaryAddress").unwrap_or_default();
            if let Err(e) = ox
                .delete_secondary_account(CONTEXT, &mail, AccountOwners::Everyone)
                .await
            {
                panic!("deletesecondaryaccount {mail}: {e}");
            }
            assert!(self.udm.state().remove(&fa.dn), "udm remove {}", fa.dn);
            n += 1;
        }
        n
    }

    /// Part 2 created exactly the seeded accounts: one Shared Account each, with the
    /// respelled name, the original as display name, the address, the context, the account's
    /// entryUUID as identifier and the groupware users linked with the permission.
    pub fn assert_imported_exactly(&self, seeded: &Seeded) {
        let shared = self.shared_accounts();
        assert_eq!(
            shared.len(),
            seeded.accounts.len(),
            "Shared Accounts: {:?}",
            shared.iter().map(|s| &s.dn).collect::<Vec<_>>()
        );
        let by_id: BTreeMap<String, &StoredObject> = shared
            .iter()
            .map(|s| {
                (
                    s.property_str("univentionObjectIdentifier")
                        .unwrap_or_default()
                        .to_lowercase(),
                    s,
                )
            })
            .collect();
        let permission = seeded.permission.clone().unwrap_or_default();
        for (spec, dn, uuid) in &seeded.accounts {
            let Some(sa) = by_id.get(&uuid.to_lowercase()) else {
                panic!(
                    "no Shared Account has the identifier {uuid} of {:?}",
                    spec.name
                );
            };
            let expected_name = match shared_account_name(&spec.name, dn) {
                Ok(n) => n,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(
                sa.property_str("name").as_deref(),
                Some(expected_name.as_str())
            );
            assert_eq!(
                sa.property_str("displayName").as_deref(),
                Some(spec.name.as_str())
            );
            assert_eq!(
                sa.property_str("mailPrimaryAddress").as_deref(),
                Some(spec.mail.as_str())
            );
            assert_eq!(sa.property_str("oxContext"), Some(CONTEXT.to_string()));
            assert!(
                sa.dn
                    .ends_with(",cn=shared_accounts,cn=open-xchange,dc=swp-ldap,dc=internal"),
                "not in the default position: {}",
                sa.dn
            );
            let mut links: Vec<(String, String)> = sa
                .properties
                .get("users")
                .and_then(Value::as_array)
                .map(|pairs| {
                    pairs
                        .iter()
                        .map(|p| {
                            (
                                p[0].as_str().unwrap_or_default().to_string(),
                                p[1].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            links.sort();
            let mut expected: Vec<(String, String)> = spec
                .users
                .iter()
                .filter(|u| seeded.users[*u].2)
                .map(|u| (seeded.users[u].1.clone(), permission.clone()))
                .collect();
            expected.sort();
            assert_eq!(links, expected, "the links of {:?}", spec.name);
        }
    }
}

/// `base` with the keys of `extra` merged in, objects recursively.
pub fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            match b.get_mut(&k) {
                Some(existing) if existing.is_object() && v.is_object() => {
                    let merged = merge(existing.take(), v);
                    *existing = merged;
                }
                _ => {
                    b.insert(k, v);
                }
            }
        }
    }
    base
}
