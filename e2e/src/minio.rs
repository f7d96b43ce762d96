//! A real S3-compatible server for tests: MinIO, started on free loopback ports in a temp
//! directory of its own, optionally serving TLS with a certificate for `127.0.0.1` and
//! `localhost` issued by a CA generated for it (with the `openssl` CLI). At start it creates the
//! bucket [`BUCKET`] and a dedicated identity (a MinIO user whose policy allows `s3:*` on that
//! bucket and its objects only), which is what the handover store is meant to be given. Killed
//! by PID and its directory removed when dropped.
//!
//! The `minio` and `mc` binaries come from `$STAGEHAND_MINIO_BIN` (a directory) when set, else
//! from `e2e/s3/build`, which builds them from the Go module proxy into
//! `${XDG_CACHE_HOME:-$HOME/.cache}/stagehand/minio/bin` on first use (about 10 minutes on
//! 2 cores) and is a quick cache check afterwards. It runs once per test process; if it fails,
//! the test panics saying what to do. The readiness check needs `curl`, TLS needs `openssl`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::local_server::{free_port, generate_server_cert, read, require, temp_dir, write};
pub use crate::local_server::{generate_ca, random_hex, unrelated_ca_pem};
use crate::try_run_with_stdin;

/// The bucket every server is started with (openDesk's `objectstores.migrations`).
pub const BUCKET: &str = "migrations";

/// The dedicated identity's access key id.
pub const ACCESS_KEY: &str = "stagehand-migrations";

/// How long start-up may take before the test fails.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct MinioOptions {
    /// Serve TLS only, with a server certificate for `127.0.0.1` and `localhost` issued by a CA
    /// generated for this server ([`Minio::ca_pem`]).
    pub tls: bool,
    /// The region the server answers for (`MINIO_SITE_REGION`); MinIO's default is `us-east-1`.
    pub region: Option<String>,
}

/// A running MinIO server; killed (by PID) and its directory removed when dropped.
#[derive(Debug)]
pub struct Minio {
    child: Option<Child>,
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    console_port: u16,
    opts: MinioOptions,
    root_user: String,
    root_password: String,
    secret_key: String,
}

/// The directory holding `minio` and `mc`: `$STAGEHAND_MINIO_BIN`, else what `e2e/s3/build`
/// prints (it builds on first use). Panics, saying what to do, when neither works.
pub fn bin_dir() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BIN.get_or_init(|| {
        if let Ok(dir) = std::env::var("STAGEHAND_MINIO_BIN")
            && !dir.is_empty()
        {
            let dir = PathBuf::from(dir);
            return match missing_in(&dir) {
                None => Ok(dir),
                Some(name) => Err(format!(
                    "STAGEHAND_MINIO_BIN={} holds no executable {name}: point it at a directory with minio and mc, or unset it to build them with e2e/s3/build",
                    dir.display()
                )),
            };
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("s3").join("build");
        eprintln!(
            "minio: checking/building the MinIO binaries with {} (the first build takes about 10 minutes)",
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
        if !out.status.success() || last.is_empty() {
            return Err(format!(
                "{} failed ({}); see its messages above. It needs Go and the Go module proxy; or set STAGEHAND_MINIO_BIN to a directory holding minio and mc",
                script.display(),
                out.status
            ));
        }
        let dir = PathBuf::from(last);
        match missing_in(&dir) {
            None => Ok(dir),
            Some(name) => Err(format!(
                "{} printed {} but it holds no executable {name}",
                script.display(),
                dir.display()
            )),
        }
    });
    match found {
        Ok(dir) => dir.clone(),
        Err(message) => panic!("no MinIO for the S3 tests: {message}"),
    }
}

fn missing_in(dir: &Path) -> Option<&'static str> {
    ["minio", "mc"]
        .into_iter()
        .find(|name| !std::fs::metadata(dir.join(name)).is_ok_and(|m| m.is_file() && m.len() > 0))
}

impl Minio {
    /// Starts a server, waits until it is ready, and creates [`BUCKET`] and the dedicated
    /// identity [`ACCESS_KEY`]; panics if anything of that fails.
    pub fn start(opts: MinioOptions) -> Self {
        require("curl", "curl");
        let bin = bin_dir();
        let dir = temp_dir("stagehand-minio");
        if opts.tls {
            let pki = dir.join("pki");
            write(&pki.join(".keep"), b"");
            generate_ca(&pki, "Stagehand MinIO Test CA");
            generate_server_cert(&pki);
            let copy = |from: &str, to: PathBuf| {
                write(&to, read(&pki.join(from)).as_bytes());
            };
            copy("server.crt", dir.join("certs/public.crt"));
            copy("server.key", dir.join("certs/private.key"));
            copy("ca.crt", dir.join("certs/CAs/ca.crt"));
            // mc trusts the CAs in its config dir.
            copy("ca.crt", dir.join("mc/certs/CAs/ca.crt"));
        }
        let mut server = Self {
            child: None,
            bin,
            dir,
            port: 0,
            console_port: 0,
            opts,
            root_user: format!("root{}", random_hex(8)),
            root_password: random_hex(32),
            secret_key: random_hex(40),
        };
        let mut last_log = String::new();
        for _ in 0..5 {
            server.port = free_port();
            server.console_port = free_port();
            if server.port == server.console_port {
                continue;
            }
            match server.spawn_and_wait() {
                Ok(()) => {
                    server.provision();
                    return server;
                }
                Err(log) => last_log = log,
            }
            // Most likely a port was taken in the meantime: try others.
        }
        panic!("minio did not start:\n{last_log}");
    }

    /// Starts the process on the chosen ports and waits for `/minio/health/live`; the log on
    /// an early exit (e.g. a port taken), a panic on a timeout.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("minio.log");
        let log = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
        {
            Ok(f) => f,
            Err(e) => panic!("cannot open {}: {e}", log_path.display()),
        };
        let log_err = match log.try_clone() {
            Ok(f) => f,
            Err(e) => panic!("cannot open {}: {e}", log_path.display()),
        };
        let mut cmd = Command::new(self.bin.join("minio"));
        cmd.arg("server")
            .arg(self.dir.join("data"))
            .arg("--address")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{}", self.console_port))
            .arg("--quiet")
            .arg("--anonymous")
            .env("MINIO_ROOT_USER", &self.root_user)
            .env("MINIO_ROOT_PASSWORD", &self.root_password)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .env("HOME", &self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if self.opts.tls {
            cmd.arg("--certs-dir").arg(self.dir.join("certs"));
        } else {
            // Without --certs-dir MinIO looks in $HOME/.minio/certs: keep that empty.
            cmd.arg("--certs-dir").arg(self.dir.join("no-certs"));
        }
        if let Some(region) = &self.opts.region {
            cmd.env("MINIO_SITE_REGION", region);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start {}: {e}", self.bin.join("minio").display()),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.live() {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("minio exited ({status}):\n{}", self.log()));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "minio did not become ready in {}s:\n{}",
                    READY_TIMEOUT.as_secs(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /minio/health/live` answers 200.
    fn live(&self) -> bool {
        let mut cmd = Command::new("curl");
        cmd.args(["-sf", "-o", "/dev/null", "--max-time", "2"]);
        if self.opts.tls {
            cmd.arg("--cacert").arg(self.dir.join("certs/CAs/ca.crt"));
        }
        cmd.arg(format!("{}/minio/health/live", self.endpoint()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The bucket and the dedicated identity.
    fn provision(&self) {
        self.make_bucket(BUCKET);
        let policy = format!(
            r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::{BUCKET}","arn:aws:s3:::{BUCKET}/*"]}}]}}"#
        );
        let policy_path = self.dir.join("policy-migrations.json");
        write(&policy_path, policy.as_bytes());
        let policy_path = policy_path.display().to_string();
        self.mc_ok(&[
            "admin",
            "policy",
            "create",
            "root",
            "migrations-only",
            &policy_path,
        ]);
        self.mc_ok(&["admin", "user", "add", "root", ACCESS_KEY, &self.secret_key]);
        self.mc_ok(&[
            "admin",
            "policy",
            "attach",
            "root",
            "migrations-only",
            "--user",
            ACCESS_KEY,
        ]);
    }

    /// `http://127.0.0.1:PORT` (or `https://`).
    pub fn endpoint(&self) -> String {
        self.endpoint_for("127.0.0.1")
    }

    /// The endpoint with another host name for the loopback address (e.g. `localhost`).
    pub fn endpoint_for(&self, host: &str) -> String {
        let scheme = if self.opts.tls { "https" } else { "http" };
        format!("{scheme}://{host}:{}", self.port)
    }

    /// The S3 port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The PEM of the CA that issued the server certificate (TLS servers).
    pub fn ca_pem(&self) -> Option<String> {
        self.opts
            .tls
            .then(|| read(&self.dir.join("certs/CAs/ca.crt")))
    }

    /// The dedicated identity's access key id ([`ACCESS_KEY`]).
    pub fn access_key(&self) -> &str {
        ACCESS_KEY
    }

    /// The dedicated identity's secret key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The root user (may do everything).
    pub fn root_user(&self) -> &str {
        &self.root_user
    }

    /// The root user's password (its S3 secret key).
    pub fn root_password(&self) -> &str {
        &self.root_password
    }

    /// The server's directory (data, certificates, mc config, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `mc` with the alias `root` for this server (as the root user) and its own config dir.
    pub fn mc_command(&self) -> Command {
        let mut cmd = Command::new(self.bin.join("mc"));
        cmd.env("MC_CONFIG_DIR", self.dir.join("mc"))
            .env(
                "MC_HOST_root",
                format!(
                    "{}://{}:{}@127.0.0.1:{}",
                    if self.opts.tls { "https" } else { "http" },
                    self.root_user,
                    self.root_password,
                    self.port
                ),
            )
            .args(["--quiet", "--no-color", "--disable-pager"]);
        cmd
    }

    /// Runs `mc` with `args` (and `input` on standard input).
    pub fn mc(&self, args: &[&str], input: Option<&[u8]>) -> Output {
        match try_run_with_stdin(self.mc_command().args(args), input) {
            Ok(out) => out,
            Err(e) => panic!("cannot run mc {args:?}: {e}"),
        }
    }

    /// Runs `mc` and panics unless it succeeds; its standard output.
    pub fn mc_ok(&self, args: &[&str]) -> String {
        let out = self.mc(args, None);
        assert!(
            out.status.success(),
            "mc {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates a bucket (as root).
    pub fn make_bucket(&self, bucket: &str) {
        self.mc_ok(&["mb", &format!("root/{bucket}")]);
    }

    /// The object's bytes (read as root), or `None` when there is no such object. Panics on
    /// any other failure (e.g. no such bucket).
    pub fn object(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let out = self.mc(&["cat", &format!("root/{bucket}/{key}")], None);
        if out.status.success() {
            return Some(out.stdout);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Object does not exist") {
            return None;
        }
        panic!("mc cat root/{bucket}/{key} failed: {err}");
    }

    /// Writes an object (as root).
    pub fn put_object(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let target = format!("root/{bucket}/{key}");
        let out = self.mc(&["pipe", &target], Some(bytes));
        assert!(
            out.status.success(),
            "mc pipe {target} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Deletes an object (as root).
    pub fn delete_object(&self, bucket: &str, key: &str) {
        self.mc_ok(&["rm", &format!("root/{bucket}/{key}")]);
    }

    /// The keys of a bucket (recursive listing, as root).
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let out = self.mc_ok(&["ls", "--recursive", &format!("root/{bucket}")]);
        out.lines()
            .filter_map(|l| l.rsplit_once(' ').map(|(_, k)| k.to_string()))
            .collect()
    }

    /// Stops the server (SIGKILL by PID) and keeps its data: [`restart`](Self::restart) brings
    /// it back on the same port.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped server again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(log) = self.spawn_and_wait() {
            panic!("minio did not restart on port {}:\n{log}", self.port);
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("minio.log")).unwrap_or_default()
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- minio log ----\n{}", self.log());
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
