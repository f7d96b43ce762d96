//! Programs the tests run: the `stagehand` binary (a command, or the operator as a child
//! process), any command with its output captured, and the settings of this test process.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cluster::kubeconfig;

/// The `stagehand` binary of this workspace, built (once per test process) if needed; or,
/// when `STAGEHAND_E2E_OPERATOR_BIN` names one (relative to the workspace root, or absolute),
/// that binary, built by whoever set it. e2e/test sets it to the release operator it built
/// beside the test run, and runs the scale and fault tests of a release operator from the
/// dev-profile test binaries it has already built (the simulators are optimised in both
/// profiles), instead of building every test crate again in release.
pub fn stagehand_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = workspace_root();
        if let Some(given) = std::env::var_os("STAGEHAND_E2E_OPERATOR_BIN") {
            let bin = root.join(given);
            assert!(
                bin.is_file(),
                "STAGEHAND_E2E_OPERATOR_BIN names {}, which is not a file: build it (cargo build --release -p stagehand --bin stagehand) or unset the variable",
                bin.display()
            );
            return bin;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // The profile this test was built with: a release test build drives a release
        // operator.
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let mut build = Command::new(cargo);
        build.current_dir(&root).args([
            "build",
            "--quiet",
            "--locked",
            "-p",
            "stagehand",
            "--bin",
            "stagehand",
        ]);
        if profile == "release" {
            build.arg("--release");
        }
        // Without what cargo set for this test process: build scripts that watch these
        // (ring's watches CARGO_MANIFEST_DIR) would otherwise rebuild half the dependency tree
        // here, and again in the next plain `cargo build`.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if [
                "CARGO_MANIFEST_",
                "CARGO_PKG_",
                "CARGO_BIN_",
                "CARGO_CRATE_NAME",
            ]
            .iter()
            .any(|p| name.starts_with(p))
                || name == "CARGO_PRIMARY_PACKAGE"
                || name == "CARGO_TARGET_TMPDIR"
            {
                build.env_remove(name.as_ref());
            }
        }
        let status = build.status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "building the stagehand binary failed: {status:?}"
        );
        target_dir().join(profile).join("stagehand")
    })
    .clone()
}

/// The workspace's root directory (the parent of `e2e/`).
pub fn workspace_root() -> PathBuf {
    let e2e = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    e2e.parent().unwrap_or(e2e).to_path_buf()
}

/// The workspace's cargo target directory (`CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace_root().join("target"))
}

/// Runs `stagehand` against the test control plane.
pub fn stagehand(args: &[&str]) -> Output {
    run_with_stdin(
        Command::new(stagehand_bin())
            .env("KUBECONFIG", kubeconfig())
            .args(args),
        None,
    )
}

/// `stagehand ARGS` with `input` on its standard input.
pub fn stagehand_stdin(args: &[&str], input: &str) -> Output {
    run_with_stdin(
        Command::new(stagehand_bin())
            .env("KUBECONFIG", kubeconfig())
            .args(args),
        Some(input.as_bytes()),
    )
}

/// Runs `cmd` to its end with `input` on its standard input (without: `/dev/null`), capturing
/// its standard output and error; fails the test when it cannot be run or fed.
pub fn run_with_stdin(cmd: &mut Command, input: Option<&[u8]>) -> Output {
    match try_run_with_stdin(cmd, input) {
        Ok(out) => out,
        Err(e) => panic!("cannot run {cmd:?}: {e}"),
    }
}

/// [`run_with_stdin`], answering the error instead of failing the test.
pub fn try_run_with_stdin(cmd: &mut Command, input: Option<&[u8]>) -> std::io::Result<Output> {
    use std::io::Write;
    use std::process::Stdio;
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(bytes)?;
    }
    child.wait_with_output()
}

/// Standard output as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts success, showing both streams otherwise; returns stdout.
pub fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// `GET path` on `address` (an operator's probe or metrics server); the status code and body,
/// or `None` if it cannot connect.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// The value of the log field `field` (e.g. `probe_address`) in an operator's JSON log.
pub fn logged(logs: &str, field: &str) -> Option<String> {
    logs.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["fields"][field].as_str().map(str::to_string))
}

/// The operator (`stagehand operator`) running as a child process for one test, watching one
/// namespace; killed when dropped. Its log goes to a file whose text `logs()` returns; when the
/// test fails, the log is appended to the dump file of its namespace ([`crate::scene`]).
#[derive(Debug)]
pub struct OperatorProcess {
    child: std::process::Child,
    log: PathBuf,
    /// The namespace it watches (its Lease's when it watches all of them).
    namespace: String,
}

impl OperatorProcess {
    /// Starts the operator for `namespace` with the test control plane's kubeconfig.
    pub fn start(namespace: &str) -> Self {
        Self::start_with(namespace, &kubeconfig(), &[])
    }

    /// Starts the operator with a given kubeconfig and extra arguments.
    pub fn start_with(namespace: &str, kubeconfig_path: &str, extra: &[&str]) -> Self {
        let mut args = vec!["--namespace", namespace];
        args.extend_from_slice(extra);
        Self::spawn(namespace, kubeconfig_path, &args)
    }

    /// Starts the operator for every namespace, its Lease in `lease_namespace`. Only for a
    /// test binary of one test: it reconciles the runs of every namespace, so a namespaced
    /// operator of another test running at the same time would race it.
    pub fn start_all_namespaces(lease_namespace: &str) -> Self {
        Self::spawn(
            lease_namespace,
            &kubeconfig(),
            &["--leader-election-namespace", lease_namespace],
        )
    }

    fn spawn(label: &str, kubeconfig_path: &str, args: &[&str]) -> Self {
        // One file per process started: two replicas of one test must not share a log.
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "stagehand-operator-{label}-{}-{}.log",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let file = match std::fs::File::create(&log) {
            Ok(f) => f,
            Err(e) => panic!("cannot create {}: {e}", log.display()),
        };
        let child = Command::new(stagehand_bin())
            .env("KUBECONFIG", kubeconfig_path)
            .env("RUST_LOG", "info")
            .args(["operator", "--log-format", "json"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn();
        match child {
            Ok(child) => Self {
                child,
                log,
                namespace: label.to_string(),
            },
            Err(e) => panic!("cannot start the operator: {e}"),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Everything the operator logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Asks it to stop with SIGTERM (as Kubernetes does) and waits until it has exited.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().ok()
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stops it with SIGKILL (a crash) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let pid = self.pid();
        self.kill();
        if std::thread::panicking() {
            crate::scene::append_to_dump(
                &self.namespace,
                &format!("operator log (pid {pid})"),
                &self.logs(),
            );
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The number in environment variable `name` (a test's size or duration), else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The multi-threaded runtime of the bench binary `program`. When it cannot be built the error
/// is printed (`PROGRAM: ERROR`) and `Err` is the exit code to return.
pub fn bench_runtime(program: &str) -> Result<tokio::runtime::Runtime, std::process::ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("{program}: {e}");
            std::process::ExitCode::FAILURE
        })
}
