//! Helpers the real-server harnesses (`redis`, `minio`, `slapd`) share: binaries that must be
//! installed, free loopback ports, temp dirs, and a CA with a server certificate generated with
//! `openssl`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Fails the test, naming the Debian package to install, when `binary` is missing: a command
/// on `PATH` that cannot be run (`binary --version`), or a path that is no file (a server such
/// as `/usr/sbin/slapd`, which is not run for the check).
pub fn require(binary: &str, package: &str) {
    let found = if binary.contains('/') {
        Path::new(binary).is_file()
    } else {
        Command::new(binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    assert!(
        found,
        "{binary} is not installed: install the Debian package {package} (apt-get install {package})"
    );
}

pub fn free_port() -> u16 {
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => panic!("no free loopback port: {e}"),
    }
}

/// A random lower-case hex string of `len` characters (not cryptographic; test credentials).
pub fn random_hex(len: usize) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let mut out = String::new();
    while out.len() < len {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u32(N.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out.truncate(len);
    out
}

/// A new empty directory under the system temp dir.
pub fn temp_dir(prefix: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {e}", dir.display());
    }
    dir
}

pub fn write(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        panic!("cannot create {}: {e}", parent.display());
    }
    if let Err(e) = std::fs::write(path, bytes) {
        panic!("cannot write {}: {e}", path.display());
    }
}

pub fn read(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

pub fn openssl(dir: &Path, args: &[&str]) {
    require("openssl", "openssl");
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("cannot run openssl: {e}"),
    }
}

/// Generates a CA (`ca.crt`, `ca.key`, EC P-256) in `dir`; returns its PEM.
pub fn generate_ca(dir: &Path, name: &str) -> String {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    read(&dir.join("ca.crt"))
}

/// Issues `server.crt`/`server.key` for `127.0.0.1` and `localhost` from the CA in `dir`.
pub fn generate_server_cert(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    write(
        &dir.join("server.ext"),
        b"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A CA made for one test and a certificate for `127.0.0.1` and `localhost` it issued
/// ([`generate_ca`], [`generate_server_cert`]), in a temporary directory removed on drop: what
/// a test serves TLS with (the simulators' `SimServer::start_tls`) and the `caBundle` file a
/// client trusts it with.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
}

impl TestPki {
    /// A new CA named `name` and its server certificate.
    pub fn new(name: &str) -> Self {
        let dir = temp_dir("stagehand-pki");
        generate_ca(&dir, name);
        generate_server_cert(&dir);
        TestPki { dir }
    }

    /// The CA's PEM file (what a `caBundle` names).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server's certificate (PEM).
    pub fn cert_pem(&self) -> String {
        read(&self.dir.join("server.crt"))
    }

    /// The server's private key (PEM).
    pub fn key_pem(&self) -> String {
        read(&self.dir.join("server.key"))
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PEM of a CA that signed nothing any test server uses (for "untrusted" tests).
pub fn unrelated_ca_pem() -> String {
    let dir = temp_dir("stagehand-unrelated-ca");
    let pem = generate_ca(&dir, "Unrelated Test CA");
    let _ = std::fs::remove_dir_all(&dir);
    pem
}
