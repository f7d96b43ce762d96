//! Helpers for the end-to-end tests: they run against the real control plane that
//! `e2e/cluster/up` starts (the test command `e2e/test` starts it and exports `KUBECONFIG`).
//!
//! There is no skipping: without a reachable control plane every e2e test fails, saying how
//! to start one.

pub mod functional_accounts;
pub mod kill_matrix;
pub mod kube_proxy;
pub mod local_server;
pub mod manifests;
pub mod minio;
pub mod private_cluster;
pub mod proxy;
pub mod redis;
pub mod slapd;
pub mod wire_proxy;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};

/// The kubeconfig of the test control plane; panics (failing the test) when it is not set.
pub fn kubeconfig() -> String {
    match std::env::var("KUBECONFIG") {
        Ok(path) if std::path::Path::new(&path).is_file() => path,
        other => panic!(
            "no test control plane: KUBECONFIG is {other:?}. Run the tests with e2e/test, or start one with\n  export KUBECONFIG=\"$(e2e/cluster/up | tail -n1)\""
        ),
    }
}

/// A client of the test control plane.
pub async fn client() -> Client {
    kubeconfig();
    match Client::try_default().await {
        Ok(c) => c,
        Err(e) => panic!("cannot build a client from KUBECONFIG: {e}"),
    }
}

/// A Kubernetes client for tests of actions that never call Kubernetes (the REST and SOAP
/// actions): it points at a closed loopback port, so a call it did make would fail loudly.
pub fn offline_client() -> Client {
    let config = kube::Config::new(http_uri("http://127.0.0.1:9"));
    match Client::try_from(config) {
        Ok(c) => c,
        Err(e) => panic!("cannot build an offline client: {e}"),
    }
}

fn http_uri(uri: &str) -> http::Uri {
    match uri.parse() {
        Ok(u) => u,
        Err(e) => panic!("bad URI {uri}: {e}"),
    }
}

/// Runs `kubectl` against the test control plane.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_stdin(args, None)
}

/// Runs `kubectl` with `input` on standard input.
pub fn kubectl_stdin(args: &[&str], input: Option<&str>) -> Output {
    run_with_stdin(
        Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig())
            .args(args),
        input.map(str::as_bytes),
    )
}

/// The `stagehand` binary of this workspace, built (once per test process) if needed.
pub fn stagehand_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // The profile this test was built with: a release test (the scale run) drives a
        // release operator.
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
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target"));
        target.join(profile).join("stagehand")
    })
    .clone()
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

/// Polls `check` every 100 ms until it returns `Some`, failing the test after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A namespace of its own for one test. When the test fails, everything in it is printed;
/// the namespace is deleted either way.
#[derive(Debug)]
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
}

impl TestNamespace {
    /// Creates `<prefix>-<pid>-<n>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            match serde_json::from_value(serde_json::json!({"metadata": {"name": name}})) {
                Ok(ns) => ns,
                Err(e) => panic!("namespace object: {e}"),
            };
        if let Err(e) = api.create(&PostParams::default(), &ns).await {
            panic!("creating namespace {name}: {e}");
        }
        Self { name }
    }

    /// Prints what the namespace holds (for a failing test).
    pub fn dump(&self) {
        let out = kubectl(&[
            "get",
            "all,events,migrations.stagehand.dev,migrationruns.stagehand.dev",
            "-n",
            &self.name,
            "-o",
            "yaml",
        ]);
        eprintln!(
            "---- namespace {} at failure ----\n{}{}",
            self.name,
            stdout(&out),
            stderr(&out)
        );
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump();
        }
        let _ = kubectl(&[
            "delete",
            "namespace",
            &self.name,
            "--wait=false",
            "--ignore-not-found",
        ]);
    }
}

/// The operator (`stagehand operator`) running as a child process for one test, watching one
/// namespace; killed when dropped. Its log goes to a file whose text `logs()` returns.
#[derive(Debug)]
pub struct OperatorProcess {
    child: std::process::Child,
    log: PathBuf,
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
            Ok(child) => Self { child, log },
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
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- operator log ----\n{}", self.logs());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Installs (or updates) Stagehand's current CRDs and waits until they are established.
pub fn install_crds() {
    let current = ok("stagehand crds", &stagehand(&["crds"]));
    ok(
        "apply CRDs",
        &kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&current),
        ),
    );
    for crd in ["migrations.stagehand.dev", "migrationruns.stagehand.dev"] {
        wait_established(crd);
    }
}

/// Waits (60 s) until the CRD `crd` is Established; fails the test otherwise.
pub fn wait_established(crd: &str) {
    ok(
        "wait Established",
        &kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}"),
        ]),
    );
}

/// Holds pod `pod` in `ns` with the finalizer `example.com/hold`: deleted, it stays
/// Terminating until [`release_pod`].
pub fn hold_pod(ns: &str, pod: &str) {
    hold(ns, &format!("pod/{pod}"));
}

/// Removes the finalizers of pod `pod` in `ns` (see [`hold_pod`]); kubectl's answer.
pub fn release_pod(ns: &str, pod: &str) -> Output {
    release(ns, &format!("pod/{pod}"))
}

/// Holds the object `what` (`kind/name`) in `ns` with the finalizer `example.com/hold`, as a
/// GitOps tool's finalizer would: deleted (or its namespace deleted), it stays until
/// [`release`].
pub fn hold(ns: &str, what: &str) {
    ok(
        "hold",
        &kubectl(&[
            "patch",
            what,
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ]),
    );
}

/// Removes the finalizers of `what` in `ns` (see [`hold`]); kubectl's answer.
pub fn release(ns: &str, what: &str) -> Output {
    kubectl(&[
        "patch",
        what,
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
}

/// The secret-leak search: fails the test when any of `values` (secret values the test put in
/// Secrets) appears in what Stagehand writes in `ns` — Migrations, MigrationRuns (status,
/// conditions, problems), Events, ConfigMaps (the history ledger) — or in `texts` (the
/// operator's log, a command's output). `texts` name where each came from.
pub fn assert_no_secret_leak(ns: &str, values: &[&str], texts: &[(&str, &str)]) {
    let objects = ok(
        "dump",
        &kubectl(&[
            "get",
            "migrations.stagehand.dev,migrationruns.stagehand.dev,events,configmaps",
            "-n",
            ns,
            "-o",
            "yaml",
        ]),
    );
    assert!(
        objects.contains("kind: MigrationRun") || objects.contains("kind: Migration"),
        "the search reads Stagehand's objects in {ns}"
    );
    for (place, text) in
        std::iter::once(("the objects and Events", objects.as_str())).chain(texts.iter().copied())
    {
        for value in values {
            assert!(
                !value.is_empty() && !text.contains(value),
                "a secret value leaked into {place}"
            );
        }
    }
}

/// The `status.storedVersions` of the CRD `crd`.
pub fn stored_versions(crd: &str) -> Vec<String> {
    let crd_object = get_json(&["get", "crd", crd, "-o", "json"]);
    match serde_json::from_value(crd_object["status"]["storedVersions"].clone()) {
        Ok(versions) => versions,
        Err(e) => panic!("{crd}: no storedVersions ({e}): {crd_object}"),
    }
}

/// Deletes the CRD `crd` (if it exists) and waits (60 s) until it is gone.
pub async fn delete_crd(crd: &str) {
    let _ = kubectl(&["delete", "crd", crd, "--ignore-not-found", "--wait=false"]);
    wait_for(
        &format!("CRD {crd} to be deleted"),
        Duration::from_secs(60),
        || async {
            let out = kubectl(&["get", "crd", crd, "--ignore-not-found", "-o", "name"]);
            stdout(&out).trim().is_empty().then_some(())
        },
    )
    .await;
}

/// `kubectl create secret generic NAME --from-literal=KEY=VALUE -n NS`; fails the test on
/// error.
pub fn create_secret(ns: &str, name: &str, key: &str, value: &str) {
    let args = secret_args(ns, name, key, value);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok("create secret", &kubectl(&args));
}

/// The kubectl arguments of [`create_secret`].
pub fn secret_args(ns: &str, name: &str, key: &str, value: &str) -> Vec<String> {
    [
        "create",
        "secret",
        "generic",
        name,
        "-n",
        ns,
        &format!("--from-literal={key}={value}"),
    ]
    .map(String::from)
    .to_vec()
}

/// The number in environment variable `name` (a test's size or duration), else `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The history ledger of `ns` (the ConfigMap `opendesk-history`), `None` when there is none.
pub fn ledger(ns: &str) -> Option<serde_json::Value> {
    let out = kubectl(&[
        "get",
        "configmap",
        "opendesk-history",
        "-n",
        ns,
        "-o",
        "json",
    ]);
    out.status
        .success()
        .then(|| serde_json::from_str(&stdout(&out)).ok())
        .flatten()
}

/// The footprint keys of `ledger` (a ledger ConfigMap as JSON) that begin with
/// `footprint.` and then `prefix` (`""`: all of them; `"pre.workload_scale."`: one action's).
pub fn footprints<'a>(ledger: &'a serde_json::Value, prefix: &str) -> Vec<&'a String> {
    let start = format!("footprint.{prefix}");
    ledger["data"]
        .as_object()
        .map(|d| d.keys().filter(|k| k.starts_with(&start)).collect())
        .unwrap_or_default()
}

/// The condition `type_` of an object read with [`get`]; fails the test when it has none.
pub fn condition<'a>(obj: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no condition {type_} in {obj}"))
}

/// `kubectl apply -f -` of `yaml`; fails the test on error.
pub fn apply(yaml: &str) {
    ok(
        "kubectl apply",
        &kubectl_stdin(&["apply", "-f", "-"], Some(yaml)),
    );
}

/// `kubectl get WHAT -n NS -o json`, parsed.
pub fn get(ns: &str, what: &str) -> serde_json::Value {
    get_json(&["get", what, "-n", ns, "-o", "json"])
}

fn get_json(args: &[&str]) -> serde_json::Value {
    match serde_json::from_str(&ok("kubectl get", &kubectl(args))) {
        Ok(v) => v,
        Err(e) => panic!("kubectl {}: not JSON: {e}", args.join(" ")),
    }
}

/// Waits (90 s) until the Ready condition of `what` (read with [`get`]) has the reason `want`;
/// the object then.
pub async fn reason_becomes(ns: &str, what: &str, want: &str) -> serde_json::Value {
    wait_for(
        &format!("{what} reason {want}"),
        Duration::from_secs(90),
        || async {
            let obj = get(ns, what);
            let has = obj["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["reason"] == want)
            });
            has.then_some(obj)
        },
    )
    .await
}

/// The time `status.<field>` (`startTime`, `completionTime`) of an object read with [`get`].
pub fn status_time(obj: &serde_json::Value, field: &str) -> k8s_openapi::jiff::Timestamp {
    let text = obj["status"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {obj}"));
    match text.parse() {
        Ok(t) => t,
        Err(e) => panic!("{field} {text:?} is not a time: {e}"),
    }
}

/// Waits (60 s) until the first action of the run `what` has started.
pub async fn first_action_started(ns: &str, what: &str) {
    wait_for(
        "the first action to start",
        Duration::from_secs(60),
        || async {
            get(ns, what)["status"]["actions"][0]["startTime"]
                .is_string()
                .then_some(())
        },
    )
    .await;
}

/// `kubectl wait --for=condition=COND` (90 s); on timeout the test fails showing the object.
pub fn wait(ns: &str, what: &str, condition: &str) {
    wait_up_to(ns, what, condition, Duration::from_secs(90));
}

/// `kubectl wait --for=condition=COND` for at most `timeout`; on timeout the test fails showing
/// the object.
pub fn wait_up_to(ns: &str, what: &str, condition: &str, timeout: Duration) {
    let out = kubectl(&[
        "wait",
        &format!("--for=condition={condition}"),
        &format!("--timeout={}s", timeout.as_secs()),
        what,
        "-n",
        ns,
    ]);
    assert!(
        out.status.success(),
        "kubectl wait {what} {condition}: {}\n{}",
        stderr(&out),
        serde_json::to_string_pretty(&get(ns, what)).unwrap_or_default()
    );
}

/// `spec.replicas` of StatefulSet `sts` in `ns`.
pub fn replicas(ns: &str, sts: &str) -> u64 {
    let object = get(ns, &format!("statefulset/{sts}"));
    match object["spec"]["replicas"].as_u64() {
        Some(n) => n,
        None => panic!("statefulset/{sts} has no spec.replicas: {object}"),
    }
}

/// A StatefulSet whose pods (label `app: NAME`) the kwok node runs.
pub fn statefulset(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  serviceName: {name}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: main, image: example.invalid/{name}:1}}]}}
"#
    )
}

/// Waits (90 s) until exactly `n` pods labelled `app: APP` are Running.
pub async fn running_pods(ns: &str, app: &str, n: usize) {
    wait_for(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(90),
        || async {
            let out = kubectl(&[
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                &format!("app={app}"),
                "-o",
                "jsonpath={.items[*].status.phase}",
            ]);
            (stdout(&out)
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                == n)
                .then_some(())
        },
    )
    .await;
}

/// A Provisioning API simulator whose admin (`admin`) password is in the Secret `provisioning`
/// (key `password`) of `ns`, holding a subscription of each of `names`.
pub async fn provisioning_sim(
    ns: &str,
    names: &[&str],
) -> stagehand_simulators::provisioning::ProvisioningSim {
    use stagehand_simulators::provisioning::{self, ProvisioningConfig};
    let password = format!("prov-{}-S3cret", std::process::id());
    let sim = match provisioning::start(ProvisioningConfig::new("admin", &password)).await {
        Ok(sim) => sim,
        Err(e) => panic!("starting the Provisioning API simulator: {e}"),
    };
    for name in names {
        sim.state()
            .add_subscription(name, &[("udm", "users/user")], false, "c");
    }
    create_secret(ns, "provisioning", "password", &password);
    sim
}

/// How many DELETE requests the Provisioning API simulator `sim` received.
pub fn provisioning_deletes(sim: &stagehand_simulators::provisioning::ProvisioningSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count()
}
