//! A kwok node of the test's own whose exec runs locally: the Kubernetes exec API end to end
//! (kube-apiserver, the kubelet API, the WebSocket streams) with the command run on this
//! machine, so an action's `pods/exec` reaches a local slapd, a local Synapse's files, or a
//! stand-in of a tool an image ships.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{kubeconfig, kubectl, kubectl_stdin};
use crate::process::ok;

/// A kwok of the test's own, serving the kubelet API of one tainted node of its own. Its
/// `ClusterExec` runs every exec in a pod on that node as a command on this machine: the
/// Kubernetes exec API end to end (kube-apiserver, the kubelet API, the WebSocket streams,
/// stdin, stdout, stderr, exit status), with the command reaching the local slapd. Killed by
/// PID and its node deleted on drop.
#[allow(missing_debug_implementations)]
pub struct LocalExecNode {
    child: Child,
    node: String,
    dir: PathBuf,
}

impl LocalExecNode {
    /// A node whose exec runs in container `main` of its pods run locally.
    pub fn start() -> Self {
        Self::start_for(&["main"])
    }

    /// A node whose exec in any of `containers` of its pods runs locally (in a temp work dir).
    pub fn start_for(containers: &[&str]) -> Self {
        let kubeconfig = kubeconfig();
        let env_file = Path::new(&kubeconfig).with_file_name("env");
        let env = std::fs::read_to_string(&env_file).unwrap_or_default();
        let bin = env
            .lines()
            .find_map(|l| l.strip_prefix("export STAGEHAND_K8S_BIN="))
            .map(|v| PathBuf::from(v.trim_matches('\'')))
            .unwrap_or_else(|| {
                panic!(
                    "{} does not name STAGEHAND_K8S_BIN: start the control plane with e2e/cluster/up (it builds kwok)",
                    env_file.display()
                )
            });
        let kwok = bin.join("kwok");
        let stages = std::fs::read_to_string(bin.join("kwok-stages.yaml"))
            .unwrap_or_else(|e| panic!("{}: {e} (run e2e/cluster/build)", bin.display()));
        assert!(
            kwok.is_file(),
            "{} is missing: run e2e/cluster/build",
            kwok.display()
        );
        // One node per call: the tests of one binary run in parallel, each with its own.
        static NODES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let node = format!(
            "ldap-exec-{}-{}",
            std::process::id(),
            NODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("sh-{node}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "{stages}\n---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterExec\nmetadata:\n  name: local-commands\nspec:\n  execs:\n  - containers: [{containers}]\n    local:\n      workDir: {}\n",
            dir.display(),
            containers = containers.join(", ")
        );
        std::fs::write(dir.join("kwok.yaml"), config).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("kwok.log")).unwrap();
        let child = Command::new(&kwok)
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--config={}", dir.join("kwok.yaml").display()))
            .args([
                "--manage-all-nodes=false",
                &format!("--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node={node}"),
                "--node-ip=127.0.0.1",
                &format!("--node-port={port}"),
                "--cidr=127.3.0.0/16",
                "--node-lease-duration-seconds=40",
                &format!("--server-address=127.0.0.1:{port}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", kwok.display()));
        let me = Self { child, node, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "kwok did not listen:\n{}",
                me.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        ok(
            "create node",
            &kubectl_stdin(
                &["create", "-f", "-"],
                Some(&format!(
                    r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "{n}",
                     "annotations": {{"kwok.x-k8s.io/node": "{n}"}}, "labels": {{"type": "kwok"}}}},
                     "spec": {{"taints": [{{"key": "stagehand.dev/local-exec", "effect": "NoSchedule"}}]}}}}"#,
                    n = me.node
                )),
            ),
        );
        ok(
            "node Ready",
            &kubectl(&[
                "wait",
                "--for=condition=Ready",
                "--timeout=60s",
                &format!("node/{}", me.node),
            ]),
        );
        me
    }

    /// kwok's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("kwok.log")).unwrap_or_default()
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.node
    }

    /// A pod on this node with one container `main` (label `app`).
    pub fn pod(&self, name: &str, app: &str) -> String {
        self.pod_with(name, &[("app", app)], &["main"])
    }

    /// A pod on this node with these labels and containers, as JSON for `kubectl create -f -`.
    pub fn pod_with(&self, name: &str, labels: &[(&str, &str)], containers: &[&str]) -> String {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
            .collect();
        let containers: Vec<serde_json::Value> = containers
            .iter()
            .map(|c| serde_json::json!({"name": c, "image": "example.invalid/local-exec:1"}))
            .collect();
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"nodeName": self.node, "terminationGracePeriodSeconds": 0,
              "tolerations": [{"key": "stagehand.dev/local-exec", "operator": "Exists"}],
              "containers": containers}
        })
        .to_string()
    }
}

impl Drop for LocalExecNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- kwok (local exec) log ----\n{}", self.log());
        }
        let _ = kubectl(&[
            "delete",
            "node",
            &self.node,
            "--wait=false",
            "--ignore-not-found",
        ]);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
