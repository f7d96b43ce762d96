//! A control plane of one test's own (`e2e/cluster/up` in a fresh state dir), for the tests
//! that stop its kube-apiserver or etcd (`e2e/cluster/ctl`): the shared control plane the
//! other tests use is never touched. Stopped (`e2e/cluster/down`) when dropped.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::local_server::temp_dir;
use crate::{run_with_stdin, stderr, stdout};

/// A running private control plane.
#[derive(Debug)]
pub struct PrivateCluster {
    dir: PathBuf,
    kubeconfig: String,
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("cluster")
        .join(name)
}

impl PrivateCluster {
    /// Starts one (binaries from the cache `e2e/cluster/build` fills; a few seconds warm).
    pub fn up() -> Self {
        let dir = temp_dir("stagehand-private-cluster");
        let out = Command::new(script("up"))
            .env("STAGEHAND_CLUSTER_DIR", &dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/up: {e}"));
        assert!(
            out.status.success(),
            "e2e/cluster/up failed: {}",
            stderr(&out)
        );
        let kubeconfig = stdout(&out).lines().last().unwrap_or_default().to_string();
        assert!(
            std::path::Path::new(&kubeconfig).is_file(),
            "e2e/cluster/up printed no kubeconfig: {}",
            stdout(&out)
        );
        Self { dir, kubeconfig }
    }

    /// Its kubeconfig's path.
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// `e2e/cluster/ctl stop COMPONENT` (`kube-apiserver`, `etcd`, ...).
    pub fn stop(&self, component: &str) {
        self.ctl("stop", component);
    }

    /// `e2e/cluster/ctl start COMPONENT`: the same flags, ports and data; returns once it
    /// answers.
    pub fn start(&self, component: &str) {
        self.ctl("start", component);
    }

    fn ctl(&self, action: &str, component: &str) {
        let out = Command::new(script("ctl"))
            .env("STAGEHAND_CLUSTER_DIR", &self.dir)
            .args([action, component])
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/ctl: {e}"));
        assert!(
            out.status.success(),
            "e2e/cluster/ctl {action} {component} failed: {}",
            stderr(&out)
        );
    }

    /// `kubectl` against it.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None)
    }

    /// `kubectl` against it, with `input` on standard input.
    pub fn kubectl_stdin(&self, args: &[&str], input: Option<&str>) -> Output {
        run_with_stdin(
            Command::new("kubectl")
                .env("KUBECONFIG", &self.kubeconfig)
                .args(args),
            input.map(str::as_bytes),
        )
    }

    /// A client of it.
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.kubeconfig));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", self.kubeconfig));
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = Command::new(script("down"))
            .env("STAGEHAND_CLUSTER_DIR", &self.dir)
            .output();
    }
}
