//! A real `redis-server` for tests and benchmarks: started on a free loopback port in a temp
//! directory of its own (`--save '' --appendonly no`), optionally with ACL users and TLS (a CA
//! and server certificate generated with the `openssl` CLI), and killed by PID when dropped.
//!
//! Needs the Debian packages `redis-server` (redis-server, redis-cli) and `openssl`; without them
//! the test panics saying what to install.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::local_server::{free_port, generate_server_cert, read, require, write};
pub use crate::local_server::{generate_ca, temp_dir, unrelated_ca_pem};
use crate::try_run_with_stdin;

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// ACL users, each as the rules that follow `user` in redis.conf, e.g.
    /// `intercom on >pw ~sess:* +scan +unlink`.
    pub users: Vec<String>,
    /// The password of the `default` user (`None`: no password).
    pub default_password: Option<String>,
    /// Serve TLS only (`port 0`, `tls-port`), with a server certificate for `127.0.0.1` and
    /// `localhost` issued by a CA generated for this server (`tls-auth-clients no`). The
    /// server also listens on `127.0.0.2`, a name its certificate is not valid for.
    pub tls: bool,
    /// Allow `DEBUG` from loopback (`DEBUG POPULATE` loads keys fast).
    pub debug_command: bool,
}

/// A running `redis-server`; killed (by PID) and its directory removed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    dir: PathBuf,
    port: u16,
    tls: bool,
    default_password: Option<String>,
}

/// RESP encoding of commands (for `redis-cli --pipe`).
pub fn resp<S: AsRef<[u8]>>(commands: impl IntoIterator<Item = Vec<S>>) -> Vec<u8> {
    let mut out = Vec::new();
    for cmd in commands {
        let _ = write!(out, "*{}\r\n", cmd.len());
        for arg in cmd {
            let arg = arg.as_ref();
            let _ = write!(out, "${}\r\n", arg.len());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

impl RedisServer {
    /// Starts a server and waits until it accepts connections; panics if it cannot.
    pub fn start(opts: RedisOptions) -> Self {
        require("redis-server", "redis-server");
        require("redis-cli", "redis-server");
        let dir = temp_dir("stagehand-redis");
        if opts.tls {
            generate_ca(&dir, "Stagehand Test CA");
            generate_server_cert(&dir);
        }
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut conf = format!(
                "bind {}\nsave \"\"\nappendonly no\ndir {}\nlogfile {}\ndatabases 16\n",
                if opts.tls {
                    "127.0.0.1 127.0.0.2"
                } else {
                    "127.0.0.1"
                },
                dir.display(),
                dir.join("redis.log").display()
            );
            if opts.tls {
                conf.push_str(&format!(
                    "port 0\ntls-port {port}\ntls-cert-file {d}/server.crt\ntls-key-file {d}/server.key\ntls-ca-cert-file {d}/ca.crt\ntls-auth-clients no\n",
                    d = dir.display()
                ));
            } else {
                conf.push_str(&format!("port {port}\n"));
            }
            if opts.debug_command {
                conf.push_str("enable-debug-command local\n");
            }
            if let Some(pw) = &opts.default_password {
                conf.push_str(&format!("user default on >{pw} ~* &* +@all\n"));
            }
            for user in &opts.users {
                conf.push_str(&format!("user {user}\n"));
            }
            let conf_path = dir.join("redis.conf");
            write(&conf_path, conf.as_bytes());
            let _ = std::fs::remove_file(dir.join("redis.log"));
            let child = Command::new("redis-server")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match child {
                Ok(c) => c,
                Err(e) => panic!("cannot start redis-server: {e}"),
            };
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                if log.contains("Ready to accept connections") {
                    return Self {
                        child,
                        dir,
                        port,
                        tls: opts.tls,
                        default_password: opts.default_password,
                    };
                }
                if let Ok(Some(_)) = child.try_wait() {
                    last_log = log;
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("redis-server did not become ready in 15s:\n{log}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Most likely the port was taken in the meantime: try another one.
        }
        panic!("redis-server did not start:\n{last_log}");
    }

    /// The port it listens on (TLS only when started with `tls`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The PEM of the CA that issued the server certificate (TLS servers).
    pub fn ca_pem(&self) -> Option<String> {
        self.tls.then(|| read(&self.dir.join("ca.crt")))
    }

    /// The server's directory (config, log, certificates).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `redis-cli` connected as the `default` user (over TLS when the server uses it).
    pub fn cli_command(&self) -> Command {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if self.tls {
            cmd.arg("--tls")
                .arg("--cacert")
                .arg(self.dir.join("ca.crt"));
        }
        if let Some(pw) = &self.default_password {
            cmd.env("REDISCLI_AUTH", pw);
        }
        cmd.arg("--no-auth-warning");
        cmd
    }

    /// Runs one command in database `db` with `redis-cli`; its output, trimmed. Panics when
    /// redis-cli fails or the reply is an error.
    pub fn cli(&self, db: u32, args: &[&str]) -> String {
        let out = self
            .cli_command()
            .args(["-n", &db.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => panic!("cannot run redis-cli: {e}"),
        };
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && !text.starts_with("ERR") && !text.starts_with("(error)"),
            "redis-cli {args:?} failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// Sends commands to database `db` through `redis-cli --pipe`; panics on any error reply.
    pub fn pipe<S: AsRef<[u8]>>(&self, db: u32, commands: impl IntoIterator<Item = Vec<S>>) {
        let mut data = resp([vec!["SELECT".to_string(), db.to_string()]]);
        data.extend(resp(commands));
        let out = match try_run_with_stdin(self.cli_command().arg("--pipe"), Some(&data)) {
            Ok(o) => o,
            Err(e) => panic!("cannot run redis-cli --pipe: {e}"),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("errors: 0,"),
            "redis-cli --pipe failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `DBSIZE` of database `db`.
    pub fn dbsize(&self, db: u32) -> u64 {
        let text = self.cli(db, &["DBSIZE"]);
        match text.parse() {
            Ok(n) => n,
            Err(_) => panic!("DBSIZE answered {text:?}"),
        }
    }

    /// How many keys of database `db` match `pattern` (a server-side SCAN loop; for checks in
    /// tests only, it blocks the server while it runs).
    pub fn count_matching(&self, db: u32, pattern: &str) -> u64 {
        const COUNT: &str = "local c = '0' local n = 0 repeat local r = redis.call('SCAN', c, 'MATCH', ARGV[1], 'COUNT', 10000) c = r[1] n = n + #r[2] until c == '0' return n";
        let text = self.cli(db, &["EVAL", COUNT, "0", pattern]);
        match text.parse() {
            Ok(n) => n,
            Err(_) => panic!("counting {pattern:?} answered {text:?}"),
        }
    }

    /// `DEBUG POPULATE count prefix size` in database `db` (needs `debug_command`): keys
    /// `prefix:0`… with values of `size` bytes, no TTL.
    pub fn populate(&self, db: u32, count: u64, prefix: &str, size: u32) {
        self.cli(
            db,
            &[
                "DEBUG",
                "POPULATE",
                &count.to_string(),
                prefix,
                &size.to_string(),
            ],
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
}

/// `sess:<sid>` keys as connect-redis writes them: a JSON session with a TTL (`SET … EX`).
pub fn session_commands(count: u64, ttl_seconds: u64, salt: &str) -> Vec<Vec<String>> {
    let value = r#"{"cookie":{"originalMaxAge":86400000,"expires":"2030-01-01T00:00:00.000Z","secure":true,"httpOnly":true,"path":"/","sameSite":"lax"},"openidState":{"returnTo":"/"},"id_token":"eyJhbGciOiJSUzI1NiJ9.e30.c2ln"}"#;
    (0..count)
        .map(|i| {
            vec![
                "SET".to_string(),
                format!("sess:{salt}{:024x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                value.to_string(),
                "EX".to_string(),
                ttl_seconds.to_string(),
            ]
        })
        .collect()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- redis-server log ----\n{}", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
