//! A control plane of one test's own (`e2e/cluster/up` in a fresh state dir), for the tests
//! that stop its kube-apiserver or etcd (`e2e/cluster/ctl`): the shared control plane the
//! other tests use is never touched. Stopped (`e2e/cluster/down`) when dropped.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use crate::local_server::temp_dir;
use crate::{OperatorProcess, run_with_stdin, stderr, stdout};

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

impl PrivateCluster {
    /// `kubectl get WHAT -n NS -o json`, `None` when it fails (the object missing, the
    /// server away).
    pub fn get(&self, ns: &str, what: &str) -> Option<serde_json::Value> {
        let out = self.kubectl(&["get", what, "-n", ns, "-o", "json"]);
        out.status
            .success()
            .then(|| serde_json::from_str(&stdout(&out)).ok())
            .flatten()
    }

    /// `kubectl apply -f -` of `yaml`; fails the test on error.
    pub fn apply(&self, yaml: &str) {
        crate::ok(
            "kubectl apply",
            &self.kubectl_stdin(&["apply", "-f", "-"], Some(yaml)),
        );
    }

    /// Creates namespace `ns`; fails the test on error.
    pub fn create_namespace(&self, ns: &str) {
        crate::ok(
            "create namespace",
            &self.kubectl(&["create", "namespace", ns]),
        );
    }

    /// [`crate::create_secret`] against it.
    pub fn create_secret(&self, ns: &str, name: &str, key: &str, value: &str) {
        let args = crate::secret_args(ns, name, key, value);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::ok("create secret", &self.kubectl(&args));
    }

    /// Installs Stagehand's CRDs (`stagehand crds`) and waits until they are established.
    pub fn install_crds(&self) {
        let crds = Command::new(crate::stagehand_bin())
            .arg("crds")
            .output()
            .unwrap_or_else(|e| panic!("cannot run stagehand crds: {e}"));
        assert!(crds.status.success(), "stagehand crds: {}", stderr(&crds));
        crate::ok(
            "apply CRDs",
            &self.kubectl_stdin(&["apply", "--server-side", "-f", "-"], Some(&stdout(&crds))),
        );
        for crd in ["migrations.stagehand.dev", "migrationruns.stagehand.dev"] {
            crate::ok(
                "CRD established",
                &self.kubectl(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    &format!("crd/{crd}"),
                ]),
            );
        }
    }
}

/// The operator as a Deployment runs it against a [`PrivateCluster`]: started again (after
/// 2 s) whenever it exits, while the test calls [`Replicas::tick`] or [`Replicas::sleep`].
#[derive(Debug)]
pub struct Replicas<'a> {
    cluster: &'a PrivateCluster,
    ns: String,
    /// The replica running now.
    pub current: OperatorProcess,
    started: Instant,
    /// The replicas that exited: exit status and log.
    pub exited: Vec<(ExitStatus, String)>,
}

impl<'a> Replicas<'a> {
    /// Starts the first replica, for namespace `ns`.
    pub fn start(cluster: &'a PrivateCluster, ns: &str) -> Self {
        Self {
            cluster,
            ns: ns.to_string(),
            current: Self::process(cluster, ns),
            started: Instant::now(),
            exited: Vec::new(),
        }
    }

    fn process(cluster: &PrivateCluster, ns: &str) -> OperatorProcess {
        OperatorProcess::start_with(
            ns,
            cluster.kubeconfig(),
            &[
                "--probe-address",
                "127.0.0.1:0",
                "--metrics-address",
                "127.0.0.1:0",
            ],
        )
    }

    /// Starts a new replica if the current one exited (at least 2 s after it started).
    pub fn tick(&mut self) {
        if let Some(exit) = self.current.try_wait()
            && self.started.elapsed() > Duration::from_secs(2)
        {
            self.exited.push((exit, self.current.logs()));
            self.current = Self::process(self.cluster, &self.ns);
            self.started = Instant::now();
        }
    }

    /// Stops `component` (`kube-apiserver`, `etcd`) for `length` in all, ticking, starts it
    /// again, and waits until the MigrationRun `run` is `Ready` (at most `ready_within` after
    /// the stop began). `left` is read when the stop has returned and again at the end of the
    /// outage: what the server under test still holds.
    pub async fn outage(
        &mut self,
        component: &str,
        length: Duration,
        run: &str,
        ready_within: Duration,
        left: impl Fn() -> u64,
    ) -> Outage {
        let began = Instant::now();
        self.cluster.stop(component);
        let stopped_after = began.elapsed();
        let left_when_stopped = left();
        self.sleep(length.saturating_sub(stopped_after)).await;
        let left_after = left();
        self.cluster.start(component);
        let back_after = began.elapsed();
        let run = self.until_ready(run, began + ready_within).await;
        Outage {
            stopped_after,
            left_when_stopped,
            left_after,
            back_after,
            ready_after: began.elapsed(),
            run,
        }
    }

    /// Waits (ticking) until the MigrationRun `run` in the replicas' namespace is `Ready`, and
    /// returns it; fails the test with its status and the current replica's log once
    /// `deadline` has passed.
    pub async fn until_ready(&mut self, run: &str, deadline: Instant) -> serde_json::Value {
        let what = format!("migrationrun/{run}");
        loop {
            self.tick();
            if let Some(obj) = self.cluster.get(&self.ns, &what)
                && obj["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            {
                return obj;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not end Ready: {}\n{}",
                self.cluster.get(&self.ns, &what).unwrap_or_default(),
                self.current.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits `d`, ticking.
    pub async fn sleep(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until {
            self.tick();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What [`Replicas::outage`] saw, its times counted from the stop.
#[derive(Debug)]
pub struct Outage {
    /// How long `e2e/cluster/ctl stop` took (a graceful shutdown).
    pub stopped_after: Duration,
    /// What the server under test held when the stop had returned.
    pub left_when_stopped: u64,
    /// What it held at the end of the outage.
    pub left_after: u64,
    /// When the component answered again.
    pub back_after: Duration,
    /// When the run was `Ready`.
    pub ready_after: Duration,
    /// The run then.
    pub run: serde_json::Value,
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = Command::new(script("down"))
            .env("STAGEHAND_CLUSTER_DIR", &self.dir)
            .output();
    }
}
