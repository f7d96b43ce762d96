//! A real Matrix homeserver for the v1.19 Synapse tests and benches: PostgreSQL (Debian's
//! server, `/usr/lib/postgresql/<major>/bin`) and Synapse (from PyPI, pinned, in the venv that
//! `e2e/synapse/install` makes), each started on free loopback ports in a temp dir of its own,
//! in the foreground, and stopped by PID when dropped (never by name). On a panic the dropped
//! server prints its log.
//!
//! - [`Postgres::start`]: `initdb --locale=C --encoding=UTF8` (Synapse refuses other collations),
//!   TCP on `127.0.0.1:<port>` with password (scram) authentication and a socket in the temp dir
//!   where the superuser `postgres` needs none; role [`DB_USER`] with a random password owns
//!   database [`DB_NAME`], as openDesk's `databases.synapse` defaults name them. Run as the
//!   `postgres` OS user when the test runs as root (PostgreSQL refuses root).
//! - [`Synapse::start`]: a real `homeserver.yaml` (server name [`SERVER_NAME`], one listener with
//!   the client and federation resources, psycopg2 to the [`Postgres`], the registration shared
//!   secret inline, in a file, or absent as behind MAS, a signing key Synapse generates at first
//!   start, guests allowed, rate limits out of the way, an OIDC provider `idp_id: oidc` that
//!   needs no network), waits for `/health`.
//! - Accounts through Synapse itself: [`Synapse::register_admin`] (shared-secret registration),
//!   [`Synapse::create_oidc_user`] (admin API, `external_ids` as Synapse records an OIDC login),
//!   [`Synapse::create_guest`] (client API); and for benches [`Synapse::write_oidc_users`], rows
//!   written straight into the database as Synapse writes them.
//!
//! The venv comes from `$STAGEHAND_SYNAPSE_VENV` when set, else from `e2e/synapse/install`
//! (a cache check, or about 25 s to install); PostgreSQL's binaries from
//! `$STAGEHAND_POSTGRES_BIN` (a directory) when set, else the newest
//! `/usr/lib/postgresql/*/bin`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha1::Sha1;

use crate::local_server::{free_port, random_hex, temp_dir, write};
use crate::try_run_with_stdin;

/// The homeserver's `server_name` (openDesk's is the deployment's domain).
pub const SERVER_NAME: &str = "opendesk.test";
/// The database role Synapse connects as (openDesk's `databases.synapse.username`).
pub const DB_USER: &str = "matrix_user";
/// The database (openDesk's `databases.synapse.name`).
pub const DB_NAME: &str = "matrix";
/// The `idp_id` of the OIDC provider, and so the `auth_provider` of its users' external ids.
pub const OIDC_PROVIDER: &str = "oidc";

/// How long a server may take to start before the test fails.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// The directory holding `initdb`, `postgres` and `psql`.
fn postgres_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("STAGEHAND_POSTGRES_BIN")
        && !dir.is_empty()
    {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let major = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                    let bin = e.path().join("bin");
                    bin.join("initdb").is_file().then_some((major, bin))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): install the Debian package postgresql (apt-get install postgresql; e2e/setup does), or set STAGEHAND_POSTGRES_BIN to a directory holding initdb, postgres and psql"
        ),
    }
}

/// The OS user the server runs as: `postgres` (or `nobody`) when we are root, else ourselves.
/// Returns `(name, uid, gid)` for a switch, `None` for no switch.
fn server_user() -> Option<(String, u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = Command::new("id").args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    for name in ["postgres", "nobody"] {
        if let (Some(uid), Some(gid)) = (id(&["-u", name]), id(&["-g", name])) {
            return Some((name.to_string(), uid, gid));
        }
    }
    panic!(
        "running as root, and neither the OS user postgres nor nobody exists to run PostgreSQL as (it refuses root): install the Debian package postgresql"
    )
}

/// `cmd` run as `user` (via `setpriv`, which execs: the PID is the server's own).
fn as_user(bin: &Path, user: &Option<(String, u32, u32)>) -> Command {
    match user {
        None => Command::new(bin),
        Some((_, uid, gid)) => {
            let mut cmd = Command::new("setpriv");
            cmd.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={gid}"))
                .arg("--clear-groups")
                .arg(bin);
            cmd
        }
    }
}

fn chown(path: &Path, user: &Option<(String, u32, u32)>) {
    if let Some((name, uid, gid)) = user
        && let Err(e) = std::os::unix::fs::chown(path, Some(*uid), Some(*gid))
    {
        panic!("cannot hand {} to the OS user {name}: {e}", path.display());
    }
}

/// How to reach a [`Postgres`] with `psql` as the superuser (over its socket); cheap to clone.
#[derive(Debug, Clone)]
pub struct Psql {
    bin: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    db: String,
}

impl Psql {
    /// A `psql` command as the superuser on the database (`-X -q -At -v ON_ERROR_STOP=1`).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.arg("-X")
            .arg("-q")
            .arg("-At")
            .args(["-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                &self.db,
            ]);
        cmd
    }

    /// Runs `sql` (any number of statements); returns the rows, `|`-separated, one per line.
    pub fn sql(&self, sql: &str) -> String {
        self.script(sql)
    }

    /// Runs a `psql` script from standard input (statements, `COPY … FROM STDIN` with its data
    /// and `\.`); fails the test with psql's message when a statement fails.
    pub fn script(&self, script: &str) -> String {
        let out = try_run_with_stdin(self.command().args(["-f", "-"]), Some(script.as_bytes()));
        let out = match out {
            Ok(o) => o,
            Err(e) => panic!("cannot run {}: {e}", self.bin.join("psql").display()),
        };
        let shown: String = script.chars().take(400).collect();
        assert!(
            out.status.success(),
            "psql on database {} failed ({}): {}\nscript (start): {shown}",
            self.db,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The single value `sql` selects, parsed; fails the test when it is not one `T`.
    pub fn value<T: std::str::FromStr>(&self, sql: &str) -> T {
        let got = self.sql(sql);
        match got.trim().parse() {
            Ok(v) => v,
            Err(_) => panic!("`{sql}` answered {got:?}, not one value of the expected type"),
        }
    }
}

/// A running PostgreSQL server; stopped by PID and its directory removed when dropped.
#[derive(Debug)]
pub struct Postgres {
    child: Child,
    dir: PathBuf,
    port: u16,
    password: String,
    psql: Psql,
}

impl Postgres {
    /// A fresh cluster (C collation, UTF-8) with [`DB_USER`] owning [`DB_NAME`]; panics, with the
    /// server's log, when it cannot start.
    pub fn start() -> Self {
        let bin = postgres_bin();
        let user = server_user();
        let dir = temp_dir("sh-postgres");
        let data = dir.join("data");
        let run = dir.join("run");
        for d in [&data, &run] {
            if let Err(e) = std::fs::create_dir_all(d) {
                panic!("cannot create {}: {e}", d.display());
            }
            chown(d, &user);
        }
        let init = as_user(&bin.join("initdb"), &user)
            .arg("-D")
            .arg(&data)
            .args([
                "--locale=C",
                "--encoding=UTF8",
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
            ])
            .stdin(Stdio::null())
            .output();
        match init {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "initdb failed ({}): {}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("cannot run {}: {e}", bin.join("initdb").display()),
        }
        let password = random_hex(24);
        for attempt in 0..5 {
            let port = free_port();
            if let Some(child) = Self::launch(&bin, &user, &dir, port) {
                let psql = Psql {
                    bin: bin.clone(),
                    socket_dir: run.clone(),
                    port,
                    db: "postgres".into(),
                };
                let pg = Self {
                    child,
                    dir,
                    port,
                    password,
                    psql: Psql {
                        db: DB_NAME.into(),
                        ..psql.clone()
                    },
                };
                psql.sql(&format!(
                    "CREATE ROLE {DB_USER} LOGIN PASSWORD '{}';\nCREATE DATABASE {DB_NAME} OWNER {DB_USER} ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;",
                    pg.password
                ));
                return pg;
            }
            eprintln!("postgres did not come up on port {port} (attempt {attempt}), retrying");
        }
        panic!(
            "postgres did not start; its log:\n{}",
            std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
        );
    }

    fn launch(
        bin: &Path,
        user: &Option<(String, u32, u32)>,
        dir: &Path,
        port: u16,
    ) -> Option<Child> {
        let log = match std::fs::File::create(dir.join("postgres.log")) {
            Ok(f) => f,
            Err(e) => panic!("cannot create the postgres log: {e}"),
        };
        let child = as_user(&bin.join("postgres"), user)
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                dir.join("run").display()
            ))
            .args(["-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!("cannot run {}: {e}", bin.join("postgres").display()),
        };
        let socket = dir.join("run").join(format!(".s.PGSQL.{port}"));
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "postgres exited early ({status}):\n{}",
                    std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
                );
                return None;
            }
            if socket.exists() && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                let ready = Command::new(bin.join("pg_isready"))
                    .arg("-h")
                    .arg(dir.join("run"))
                    .args(["-p", &port.to_string(), "-U", "postgres", "-q"])
                    .status();
                if ready.is_ok_and(|s| s.success()) {
                    return Some(child);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop_pid(&mut child, "-INT");
        panic!(
            "postgres did not accept connections on port {port} within {}s; its log:\n{}",
            READY_TIMEOUT.as_secs(),
            std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
        );
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// [`DB_NAME`].
    pub fn db(&self) -> &'static str {
        DB_NAME
    }

    /// [`DB_USER`].
    pub fn user(&self) -> &'static str {
        DB_USER
    }

    /// [`DB_USER`]'s password (random per server).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `psql` on [`DB_NAME`] as the superuser.
    pub fn psql_client(&self) -> Psql {
        self.psql.clone()
    }

    /// Runs `sql` on [`DB_NAME`] as the superuser; returns the rows, `|`-separated.
    pub fn psql(&self, sql: &str) -> String {
        self.psql.sql(sql)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }
}

/// Sends `signal` (`kill -s`) to the child by PID, waits up to 10 s, then kills it.
fn stop_pid(child: &mut Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: "fast" shutdown, the backends end with the postmaster.
        stop_pid(&mut self.child, "-INT");
        if std::thread::panicking() {
            eprintln!("---- postgres log ----\n{}", tail(&self.log(), 100));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// Synapse

/// The venv holding Synapse: `$STAGEHAND_SYNAPSE_VENV`, else what `e2e/synapse/install`
/// prints (it installs on first use). Panics, saying what to do, when neither works.
pub fn venv() -> PathBuf {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = VENV.get_or_init(|| {
        let usable = |dir: &Path| dir.join("bin/python").is_file();
        if let Ok(dir) = std::env::var("STAGEHAND_SYNAPSE_VENV")
            && !dir.is_empty()
        {
            let dir = PathBuf::from(dir);
            return if usable(&dir) {
                Ok(dir)
            } else {
                Err(format!(
                    "STAGEHAND_SYNAPSE_VENV={} holds no bin/python: point it at the venv e2e/synapse/install prints, or unset it",
                    dir.display()
                ))
            };
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("synapse/install");
        eprintln!(
            "synapse: checking/installing Synapse with {} (the first install takes about 25 s)",
            script.display()
        );
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => return Err(format!("cannot run {}: {e}", script.display())),
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or_default().trim().to_string();
        let dir = PathBuf::from(&last);
        if !out.status.success() || last.is_empty() || !usable(&dir) {
            return Err(format!(
                "{} failed ({}); see its messages above. It needs python3-venv and PyPI; or set STAGEHAND_SYNAPSE_VENV to a venv with matrix-synapse",
                script.display(),
                out.status
            ));
        }
        Ok(dir)
    });
    match found {
        Ok(dir) => dir.clone(),
        Err(message) => panic!("no Synapse for the Matrix tests: {message}"),
    }
}

/// Where the registration shared secret is configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SharedSecret {
    /// `registration_shared_secret:` inline (openDesk Enterprise).
    #[default]
    Inline,
    /// `registration_shared_secret_path:` a file Synapse reads (Community Edition).
    File,
    /// Neither: shared-secret registration is off, as on a Synapse behind MAS (MSC3861).
    None,
}

/// How to start Synapse.
#[derive(Debug, Clone, Default)]
pub struct SynapseOptions {
    /// Where the registration shared secret is configured.
    pub shared_secret: SharedSecret,
}

/// An account registered through the shared-secret registration.
#[derive(Debug, Clone)]
pub struct Registered {
    /// `@name:server`.
    pub user_id: String,
    /// Its access token.
    pub access_token: String,
}

/// One account [`Synapse::write_oidc_users`] writes.
#[derive(Debug, Clone)]
pub struct FixtureUser {
    /// The localpart (`@localpart:server`).
    pub localpart: String,
    /// The display name (`profiles.displayname`).
    pub display_name: String,
    /// The OIDC subject (`user_external_ids.external_id`, provider [`OIDC_PROVIDER`]).
    pub subject: String,
    /// `users.creation_ts`, seconds since the epoch (Synapse stores seconds).
    pub creation_ts: i64,
}

/// A running Synapse; killed by PID and its directory removed when dropped.
#[derive(Debug)]
pub struct Synapse {
    child: Child,
    dir: PathBuf,
    port: u16,
    shared_secret: Option<String>,
    psql: Psql,
    http: reqwest::Client,
    admin: tokio::sync::OnceCell<Registered>,
}

impl Synapse {
    /// Writes `homeserver.yaml` for `pg`, starts Synapse and waits for `/health`; panics with
    /// its log when it does not become healthy.
    pub fn start(pg: &Postgres, options: SynapseOptions) -> Self {
        let venv = venv();
        let dir = temp_dir("sh-synapse");
        let shared_secret = match options.shared_secret {
            SharedSecret::None => None,
            _ => Some(random_hex(32)),
        };
        if let (SharedSecret::File, Some(secret)) = (options.shared_secret, &shared_secret) {
            write(&dir.join("registration_shared_secret"), secret.as_bytes());
        }
        let http = match reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
        {
            Ok(c) => c,
            Err(e) => panic!("cannot build an HTTP client: {e}"),
        };
        for attempt in 0..5 {
            let port = free_port();
            write(
                &dir.join("homeserver.yaml"),
                homeserver_yaml(
                    &dir,
                    port,
                    pg,
                    options.shared_secret,
                    shared_secret.as_deref(),
                )
                .as_bytes(),
            );
            if let Some(child) = Self::launch(&venv, &dir, port) {
                return Self {
                    child,
                    dir,
                    port,
                    shared_secret,
                    psql: pg.psql_client(),
                    http,
                    admin: tokio::sync::OnceCell::new(),
                };
            }
            eprintln!("synapse did not come up on port {port} (attempt {attempt}), retrying");
        }
        panic!(
            "synapse did not start; its log:\n{}",
            tail(
                &std::fs::read_to_string(dir.join("synapse.log")).unwrap_or_default(),
                200
            )
        );
    }

    fn launch(venv: &Path, dir: &Path, port: u16) -> Option<Child> {
        let log = match std::fs::File::create(dir.join("synapse.log")) {
            Ok(f) => f,
            Err(e) => panic!("cannot create the synapse log: {e}"),
        };
        let python = venv.join("bin/python");
        let child = Command::new(&python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(dir.join("homeserver.yaml"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!("cannot run {}: {e}", python.display()),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "synapse exited early ({status}):\n{}",
                    tail(
                        &std::fs::read_to_string(dir.join("synapse.log")).unwrap_or_default(),
                        60
                    )
                );
                return None;
            }
            if health(port) {
                return Some(child);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "synapse did not answer /health on port {port} within {}s; its log:\n{}",
            READY_TIMEOUT.as_secs(),
            tail(
                &std::fs::read_to_string(dir.join("synapse.log")).unwrap_or_default(),
                200
            )
        );
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The listener's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// [`SERVER_NAME`].
    pub fn server_name(&self) -> &'static str {
        SERVER_NAME
    }

    /// `@localpart:server`.
    pub fn user_id(&self, localpart: &str) -> String {
        format!("@{localpart}:{SERVER_NAME}")
    }

    /// The `homeserver.yaml` it runs with (what the Synapse pod's `/config/homeserver.yaml` is).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("homeserver.yaml")
    }

    /// The signing key file Synapse generated at its first start (`ed25519 a_xxxx <base64>`).
    pub fn signing_key_path(&self) -> PathBuf {
        self.dir.join("signing.key")
    }

    /// The registration shared secret (`None` with [`SharedSecret::None`]).
    pub fn shared_secret(&self) -> Option<&str> {
        self.shared_secret.as_deref()
    }

    /// The file `registration_shared_secret_path` names (with [`SharedSecret::File`]).
    pub fn shared_secret_path(&self) -> PathBuf {
        self.dir.join("registration_shared_secret")
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("synapse.log")).unwrap_or_default()
    }

    /// `psql` on Synapse's database as the superuser; returns the rows, `|`-separated.
    pub fn psql(&self, sql: &str) -> String {
        self.psql.sql(sql)
    }

    /// The database client (for [`Psql::value`], [`Psql::script`]).
    pub fn db(&self) -> &Psql {
        &self.psql
    }

    /// Sends a request; returns the status and the JSON body (`Null` when there is none).
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base_url());
        let mut req = self.http.request(method.clone(), &url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => panic!("{method} {url} failed: {e}"),
        };
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, value)
    }

    /// Shared-secret registration (`GET`, then `POST /_synapse/admin/v1/register` with the
    /// HMAC-SHA1 over nonce, user, password and admin flag); `Err` carries the status and
    /// Synapse's answer (e.g. registration refused without a shared secret).
    pub async fn register(
        &self,
        username: &str,
        password: &str,
        admin: bool,
    ) -> Result<Registered, String> {
        const PATH: &str = "/_synapse/admin/v1/register";
        let (status, nonce) = self.request(reqwest::Method::GET, PATH, None, None).await;
        let Some(nonce) = nonce
            .get("nonce")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Err(format!("GET {PATH}: {status} {nonce}"));
        };
        // Without a configured secret the request is still sent (with an HMAC over an empty
        // key): the refusal is Synapse's own.
        let secret = self.shared_secret.as_deref().unwrap_or_default();
        let mac = registration_mac(secret, &nonce, username, password, admin);
        let body = json!({"nonce": nonce, "username": username, "password": password,
            "admin": admin, "mac": mac});
        let (status, reg) = self
            .request(reqwest::Method::POST, PATH, None, Some(&body))
            .await;
        match (
            reg.get("user_id").and_then(Value::as_str),
            reg.get("access_token").and_then(Value::as_str),
        ) {
            (Some(user_id), Some(token)) if status == 200 => Ok(Registered {
                user_id: user_id.into(),
                access_token: token.into(),
            }),
            _ => Err(format!("POST {PATH}: {status} {reg}")),
        }
    }

    /// A new server admin (`rig-admin-<random>`) through the shared-secret registration.
    pub async fn register_admin(&self) -> Registered {
        let name = format!("rig-admin-{}", random_hex(8));
        match self.register(&name, &random_hex(24), true).await {
            Ok(r) => r,
            Err(e) => panic!("registering the admin {name} failed: {e}"),
        }
    }

    /// The rig's own admin (registered on first use), for the admin-API helpers.
    pub async fn admin(&self) -> &Registered {
        self.admin
            .get_or_init(|| async { self.register_admin().await })
            .await
    }

    /// An admin-API request as the rig's admin; fails the test on a status other than 2xx.
    pub async fn admin_api(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Value {
        let token = self.admin().await.access_token.clone();
        let (status, value) = self.request(method.clone(), path, Some(&token), body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path} answered {status}: {value}"
        );
        value
    }

    /// An account bound to the OIDC provider [`OIDC_PROVIDER`] with `subject` (what Synapse
    /// records when that user first logs in with OIDC), created with the admin API
    /// (`PUT /_synapse/admin/v2/users/<id>` with `external_ids`); returns its Matrix ID.
    pub async fn create_oidc_user(
        &self,
        localpart: &str,
        display_name: &str,
        subject: &str,
    ) -> String {
        let user_id = self.user_id(localpart);
        let body = json!({"displayname": display_name,
            "external_ids": [{"auth_provider": OIDC_PROVIDER, "external_id": subject}]});
        self.admin_api(
            reqwest::Method::PUT,
            &format!("/_synapse/admin/v2/users/{user_id}"),
            Some(&body),
        )
        .await;
        user_id
    }

    /// A guest account (client API `POST /_matrix/client/v3/register?kind=guest`); returns its
    /// Matrix ID.
    pub async fn create_guest(&self) -> String {
        let (status, reg) = self
            .request(
                reqwest::Method::POST,
                "/_matrix/client/v3/register?kind=guest",
                None,
                Some(&json!({})),
            )
            .await;
        match reg.get("user_id").and_then(Value::as_str) {
            Some(id) if status == 200 => id.to_string(),
            _ => panic!("guest registration answered {status}: {reg}"),
        }
    }

    /// `GET /_synapse/admin/v2/users/<user_id>` as the rig's admin.
    pub async fn user(&self, user_id: &str) -> Value {
        self.admin_api(
            reqwest::Method::GET,
            &format!("/_synapse/admin/v2/users/{user_id}"),
            None,
        )
        .await
    }

    /// Writes `users` straight into the database in one transaction, as Synapse writes an
    /// OIDC-registered account: `users` (active, not admin, not guest, approved), its
    /// `user_external_ids` row (provider [`OIDC_PROVIDER`]), `profiles` and `user_directory`.
    /// For benches: thousands of accounts in a second instead of an API call each.
    pub fn write_oidc_users(&self, users: &[FixtureUser]) {
        let mut script = String::from("BEGIN;\n");
        let copy = |script: &mut String, head: &str, rows: &mut dyn Iterator<Item = String>| {
            script.push_str(head);
            script.push_str(" FROM STDIN;\n");
            for row in rows {
                script.push_str(&row);
                script.push('\n');
            }
            script.push_str("\\.\n");
        };
        copy(
            &mut script,
            "COPY users (name, creation_ts, admin, is_guest, deactivated, approved, locked, shadow_banned, suspended)",
            &mut users.iter().map(|u| {
                format!(
                    "{}\t{}\t0\t0\t0\tt\tf\tf\tf",
                    copy_text(&self.user_id(&u.localpart)),
                    u.creation_ts
                )
            }),
        );
        copy(
            &mut script,
            "COPY user_external_ids (auth_provider, external_id, user_id)",
            &mut users.iter().map(|u| {
                format!(
                    "{OIDC_PROVIDER}\t{}\t{}",
                    copy_text(&u.subject),
                    copy_text(&self.user_id(&u.localpart))
                )
            }),
        );
        copy(
            &mut script,
            "COPY profiles (user_id, displayname, full_user_id)",
            &mut users.iter().map(|u| {
                format!(
                    "{}\t{}\t{}",
                    copy_text(&u.localpart),
                    copy_text(&u.display_name),
                    copy_text(&self.user_id(&u.localpart))
                )
            }),
        );
        copy(
            &mut script,
            "COPY user_directory (user_id, display_name)",
            &mut users.iter().map(|u| {
                format!(
                    "{}\t{}",
                    copy_text(&self.user_id(&u.localpart)),
                    copy_text(&u.display_name)
                )
            }),
        );
        script.push_str("COMMIT;\n");
        self.psql.script(&script);
    }
}

/// A value in `COPY … FROM STDIN` text format.
fn copy_text(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// The `mac` of a shared-secret registration: hex HMAC-SHA1 (key: the shared secret) over
/// nonce, user, password and `admin`/`notadmin`, NUL-separated.
pub fn registration_mac(
    secret: &str,
    nonce: &str,
    username: &str,
    password: &str,
    admin: bool,
) -> String {
    let mut mac = match Hmac::<Sha1>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(e) => panic!("HMAC-SHA1 takes a key of any length: {e}"),
    };
    let admin = if admin { "admin" } else { "notadmin" };
    for (i, part) in [nonce, username, password, admin].into_iter().enumerate() {
        if i > 0 {
            mac.update(b"\x00");
        }
        mac.update(part.as_bytes());
    }
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `GET /health` answers `200 OK`.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
}

fn homeserver_yaml(
    dir: &Path,
    port: u16,
    pg: &Postgres,
    shared: SharedSecret,
    secret: Option<&str>,
) -> String {
    let d = dir.display();
    let secret_line = match (shared, secret) {
        (SharedSecret::Inline, Some(s)) => format!("registration_shared_secret: \"{s}\""),
        (SharedSecret::File, Some(_)) => {
            format!("registration_shared_secret_path: \"{d}/registration_shared_secret\"")
        }
        _ => "# no registration shared secret: shared-secret registration is off (as behind MAS)"
            .into(),
    };
    let limit = "{per_second: 100000, burst_count: 100000}";
    let idp = "https://id.opendesk.test/realms/opendesk/protocol/openid-connect";
    format!(
        r#"# Written by the Stagehand e2e rig (e2e/src/synapse.rs).
server_name: "{SERVER_NAME}"
pid_file: "{d}/homeserver.pid"
public_baseurl: "http://127.0.0.1:{port}/"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client, federation]
        compress: false
database:
  name: psycopg2
  args:
    user: "{user}"
    password: "{password}"
    dbname: "{db}"
    host: "127.0.0.1"
    port: {pg_port}
    sslmode: prefer
    cp_min: 1
    cp_max: 10
media_store_path: "{d}/media_store"
signing_key_path: "{d}/signing.key"
{secret_line}
macaroon_secret_key: "{macaroon}"
form_secret: "{form}"
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
enable_registration: false
allow_guest_access: true
enable_metrics: false
presence:
  enabled: false
rc_message: {limit}
rc_registration: {limit}
rc_login:
  address: {limit}
  account: {limit}
  failed_attempts: {limit}
rc_admin_redaction: {limit}
rc_joins:
  local: {limit}
  remote: {limit}
rc_invites:
  per_room: {limit}
  per_user: {limit}
rc_3pid_validation: {limit}
# openDesk's legacy OIDC login (idp_id oidc, subject = opendesk_objectid). No discovery and no
# jwks (the userinfo endpoint is used): nothing is fetched at start.
oidc_providers:
  - idp_id: {OIDC_PROVIDER}
    idp_name: openDesk
    discover: false
    issuer: "https://id.opendesk.test/realms/opendesk"
    client_id: opendesk-matrix
    client_secret: "{oidc_secret}"
    scopes: [openid, opendesk-matrix-scope]
    user_profile_method: userinfo_endpoint
    authorization_endpoint: "{idp}/auth"
    token_endpoint: "{idp}/token"
    userinfo_endpoint: "{idp}/userinfo"
    user_mapping_provider:
      config:
        subject_claim: opendesk_objectid
        localpart_template: "{{{{ user.opendesk_username }}}}"
        display_name_template: "{{{{ user.name }}}}"
"#,
        user = DB_USER,
        password = pg.password(),
        db = DB_NAME,
        pg_port = pg.port(),
        macaroon = random_hex(32),
        form = random_hex(32),
        oidc_secret = random_hex(16),
    )
}

impl Drop for Synapse {
    fn drop(&mut self) {
        // SIGTERM: Synapse shuts down cleanly; killed after 10 s.
        stop_pid(&mut self.child, "-TERM");
        if std::thread::panicking() {
            eprintln!(
                "---- synapse log (last 200 lines) ----\n{}",
                tail(&self.log(), 200)
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_mac_matches_synapse_s_example() {
        // Computed with Python's hmac over b"\x00".join([nonce, user, password, b"admin"]),
        // as Synapse's register_new_matrix_user does.
        assert_eq!(
            registration_mac("shh-secret", "abc", "admin1", "pw-admin-1", true),
            "b10a5bb2e1ccf48a1c11ff3eb1c849d6e97afae7"
        );
    }

    #[test]
    fn copy_text_escapes_what_copy_would_split() {
        assert_eq!(copy_text("a\tb\\c\nd"), "a\\tb\\\\c\\nd");
    }
}
