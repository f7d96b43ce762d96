//! The test control plane: its kubeconfig and client, `kubectl`, the CRDs, objects applied and
//! read, and a namespace of its own for each test.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};

use crate::process::{ok, run_with_stdin, stagehand, stderr, stdout};
use crate::scene;
use crate::waiting::wait_for;

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

/// A namespace of its own for one test. When the test fails, what it holds is written to its
/// dump file ([`crate::scene::dump_path`]) before it is deleted; it is deleted either way.
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
        // A dump of an earlier test process with the same name is not this test's.
        let _ = std::fs::remove_file(scene::dump_path(&name));
        Self { name }
    }

    /// Appends what the namespace holds to its dump file (see [`crate::scene`]: Stagehand's
    /// objects, ConfigMaps, Events and workloads as YAML; never Secrets) and prints the file's
    /// path on standard error.
    pub fn dump(&self) {
        let out = kubectl(&["get", scene::DUMPED_KINDS, "-n", &self.name, "-o", "yaml"]);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        scene::append_to_dump(&self.name, &format!("namespace {}", self.name), &text);
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
