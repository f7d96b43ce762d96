//! A real OpenLDAP server (`slapd`, Debian's `slapd` package) for the LDAP tests: started in
//! a temp dir with a generated `slapd.conf`, an mdb database with the base
//! `dc=swp-ldap,dc=internal`, the schemas core/cosine/inetorgperson/nis plus
//! `e2e/ldap/univention.schema`, listening on a free loopback port (`ldap://127.0.0.1:PORT/`)
//! and on a socket in the temp dir (`ldapi://`, where SASL EXTERNAL of the current user maps to
//! the rootdn, as the root user in openDesk's LDAP pod). Runs in the foreground as the current
//! user (`-d 0`), so no init script or AppArmor profile is involved; killed by PID on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use stagehand_actions::clients::ldap::LdapError;
use stagehand_actions::clients::ldap::exec::{CommandOutput, CommandRunner};

use crate::local_server::{free_port, generate_ca, generate_server_cert, require, temp_dir, write};
use crate::try_run_with_stdin;

/// The directory's base DN (openDesk's).
pub const BASE_DN: &str = "dc=swp-ldap,dc=internal";
/// The rootdn.
pub const ROOT_DN: &str = "cn=admin,dc=swp-ldap,dc=internal";
/// The rootdn's password.
pub const ROOT_PASSWORD: &str = "stagehand-test-admin-secret";

const SLAPD: &str = "/usr/sbin/slapd";
const SLAPADD: &str = "/usr/sbin/slapadd";

/// How to set a server up.
#[derive(Debug, Clone, Default)]
pub struct SlapdOptions {
    /// LDIF loaded with `slapadd` before the server starts (entries may carry their own
    /// `entryUUID`, `entryCSN`, `modifyTimestamp`). Empty: only the base entry.
    pub initial_ldif: String,
    /// `slapd.conf` lines appended to the database section (ACLs, limits, ...).
    pub database_config: String,
    /// `dbnosync` for the mdb database (benchmarks: no fsync per write).
    pub nosync: bool,
    /// Also listen on `ldaps://127.0.0.1:PORT/` with a server certificate (for `127.0.0.1` and
    /// `localhost`) issued by a CA generated for this server (`openssl` CLI); see
    /// [`Slapd::ca_file`].
    pub tls: bool,
}

/// A running `slapd`; killed and its directory removed when dropped.
#[derive(Debug)]
pub struct Slapd {
    child: Child,
    dir: PathBuf,
    port: u16,
    tls_port: Option<u16>,
}

/// The current user's numeric uid (for the SASL EXTERNAL mapping of the ldapi socket).
fn current_uid() -> String {
    let out = Command::new("id").arg("-u").output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        other => panic!("`id -u` failed: {other:?}"),
    }
}

/// Percent-encodes a socket path for an `ldapi://` URL.
fn ldapi_url_of(socket: &Path) -> String {
    let mut out = String::from("ldapi://");
    for b in socket.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Slapd {
    /// A server holding only the base entry.
    pub fn start() -> Self {
        Self::start_with(&SlapdOptions::default())
    }

    /// A server set up as `options` say.
    pub fn start_with(options: &SlapdOptions) -> Self {
        require(SLAPD, "slapd");
        require(SLAPADD, "slapd");
        let dir = temp_dir("sh-slapd");
        write(&dir.join("db/.keep"), b"");
        if options.tls {
            generate_ca(&dir, "stagehand test LDAP CA");
            generate_server_cert(&dir);
        }
        let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ldap/univention.schema");
        write(
            &dir.join("slapd.conf"),
            slapd_conf(&dir, &schema, options).as_bytes(),
        );
        let base = format!(
            "dn: {BASE_DN}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: swp-ldap\no: openDesk test directory\n\n"
        );
        write(
            &dir.join("initial.ldif"),
            format!("{base}{}", options.initial_ldif).as_bytes(),
        );
        let added = Command::new(SLAPADD)
            .args(["-q", "-f"])
            .arg(dir.join("slapd.conf"))
            .arg("-l")
            .arg(dir.join("initial.ldif"))
            .output();
        match added {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "slapadd failed ({}): {}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => panic!("cannot run {SLAPADD}: {e}"),
        }
        for attempt in 0..5 {
            let port = free_port();
            let tls_port = options.tls.then(free_port);
            if let Some(slapd) = Self::launch(&dir, port, tls_port) {
                return slapd;
            }
            eprintln!("slapd did not come up on port {port} (attempt {attempt}), retrying");
        }
        panic!(
            "slapd did not start; its log:\n{}",
            std::fs::read_to_string(dir.join("slapd.log")).unwrap_or_default()
        );
    }

    fn launch(dir: &Path, port: u16, tls_port: Option<u16>) -> Option<Self> {
        let log = match std::fs::File::create(dir.join("slapd.log")) {
            Ok(f) => f,
            Err(e) => panic!("cannot create the slapd log: {e}"),
        };
        let mut urls = format!(
            "ldap://127.0.0.1:{port}/ {}",
            ldapi_url_of(&dir.join("ldapi"))
        );
        if let Some(tls_port) = tls_port {
            urls.push_str(&format!(" ldaps://127.0.0.1:{tls_port}/"));
        }
        let child = Command::new(SLAPD)
            .args(["-d", "0", "-h", &urls, "-f"])
            .arg(dir.join("slapd.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!("cannot run {SLAPD}: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                // Exited (the port was taken, or a config error): the caller retries or fails.
                eprintln!(
                    "slapd exited early ({status}):\n{}",
                    std::fs::read_to_string(dir.join("slapd.log")).unwrap_or_default()
                );
                return None;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && dir.join("ldapi").exists()
                && tls_port.is_none_or(|p| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok())
            {
                return Some(Self {
                    child,
                    dir: dir.to_path_buf(),
                    port,
                    tls_port,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "slapd did not listen on port {port} within 20 s; its log:\n{}",
            std::fs::read_to_string(dir.join("slapd.log")).unwrap_or_default()
        );
    }

    /// `ldap://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    /// The loopback port of `ldap://` (for a proxy in front of it).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ldaps://127.0.0.1:PORT` (with [`SlapdOptions::tls`]).
    pub fn ldaps_url(&self) -> String {
        match self.tls_port {
            Some(p) => format!("ldaps://127.0.0.1:{p}"),
            None => panic!("this slapd was started without TLS (SlapdOptions::tls)"),
        }
    }

    /// The PEM file of the CA that issued the server certificate (with [`SlapdOptions::tls`]).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The `ldapi://` URL of its socket (SASL EXTERNAL of the current user is the rootdn).
    pub fn ldapi_url(&self) -> String {
        ldapi_url_of(&self.dir.join("ldapi"))
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("slapd.log")).unwrap_or_default()
    }

    /// `ldapmodify -x` as the rootdn over TCP with `ldif` (change records; `changetype: add`
    /// for new entries); fails the test on error.
    pub fn modify(&self, ldif: &str) {
        let out = self.tool("ldapmodify", &[], Some(ldif));
        assert!(
            out.status.success(),
            "ldapmodify failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `ldapsearch -LLL -x` as the rootdn below the base DN; returns its LDIF.
    pub fn search(&self, filter: &str, attrs: &[&str]) -> String {
        let mut args = vec!["-LLL", "-o", "ldif-wrap=no", "-b", BASE_DN, filter];
        args.extend_from_slice(attrs);
        let out = self.tool("ldapsearch", &args, None);
        assert!(
            out.status.success(),
            "ldapsearch failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn tool(&self, tool: &str, args: &[&str], input: Option<&str>) -> std::process::Output {
        let mut cmd = Command::new(tool);
        cmd.args(["-x", "-H", &self.url(), "-D", ROOT_DN, "-w", ROOT_PASSWORD])
            .args(args);
        match try_run_with_stdin(&mut cmd, input.map(str::as_bytes)) {
            Ok(out) => out,
            Err(e) => panic!(
                "cannot run {tool}: {e} (install OpenLDAP's tools: apt-get install ldap-utils)"
            ),
        }
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- slapd log ----\n{}", self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `include` lines for every other `*.schema` next to `schema` (e.g. `e2e/ldap/ox.schema`), in
/// name order.
fn other_schemas(schema: &Path) -> String {
    let Some(dir) = schema.parent() else {
        return String::new();
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "schema") && p != schema)
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .iter()
        .map(|p| format!("include {}\n", p.display()))
        .collect()
}

fn slapd_conf(dir: &Path, schema: &Path, options: &SlapdOptions) -> String {
    let d = dir.display();
    let uid = current_uid();
    format!(
        r#"include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
include {schema}
{more_schemas}
{tls}pidfile {d}/slapd.pid
argsfile {d}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
loglevel none

# SASL EXTERNAL over the ldapi socket as the current user is the rootdn (as root in the pod).
authz-regexp "gidNumber=[0-9]+[+]uidNumber={uid},cn=peercred,cn=external,cn=auth" "{ROOT_DN}"

database mdb
suffix "{BASE_DN}"
rootdn "{ROOT_DN}"
rootpw {ROOT_PASSWORD}
directory {d}/db
maxsize 1073741824
{nosync}
index objectClass eq
index univentionObjectIdentifier eq,pres
index uid,cn eq
{extra}
"#,
        schema = schema.display(),
        more_schemas = other_schemas(schema),
        nosync = if options.nosync { "dbnosync" } else { "" },
        tls = if options.tls {
            format!(
                "TLSCACertificateFile {d}/ca.crt\nTLSCertificateFile {d}/server.crt\nTLSCertificateKeyFile {d}/server.key\n\n"
            )
        } else {
            String::new()
        },
        extra = options.database_config,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldapi_urls_are_percent_encoded() {
        assert_eq!(
            ldapi_url_of(Path::new("/tmp/sh slapd/ldapi")),
            "ldapi://%2Ftmp%2Fsh%20slapd%2Fldapi"
        );
    }
}

/// Runs the LDAP exec transport's command lines (`ldapsearch`, `sh -c '… | ldapmodify'`) on this
/// machine instead of in the LDAP pod; pointed at a [`Slapd`]'s ldapi socket they reach the
/// directory as they would in the pod. A missing `ldap-utils` fails the test saying so.
#[derive(Debug)]
pub struct LocalLdapUtils;

impl CommandRunner for LocalLdapUtils {
    fn describe(&self) -> String {
        "local ldap-utils".into()
    }

    fn run<'a>(
        &'a self,
        argv: &'a [String],
        stdin: Option<&'a [u8]>,
    ) -> BoxFuture<'a, Result<CommandOutput, LdapError>> {
        let argv = argv.to_vec();
        let input = stdin.map(<[u8]>::to_vec);
        Box::pin(async move {
            let ran = tokio::task::spawn_blocking(move || -> std::io::Result<CommandOutput> {
                let out =
                    try_run_with_stdin(Command::new(&argv[0]).args(&argv[1..]), input.as_deref())
                        .map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("cannot run {}: {e} (apt-get install ldap-utils)", argv[0]),
                        )
                    })?;
                Ok(CommandOutput {
                    success: out.status.success(),
                    status: format!("exit code {}", out.status.code().unwrap_or(-1)),
                    stdout: out.stdout,
                    stderr: out.stderr,
                })
            })
            .await;
            match ran {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(e)) => panic!("{e}"),
                Err(e) => panic!("the local command panicked: {e}"),
            }
        })
    }
}
