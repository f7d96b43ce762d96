//! The scene of one test: its first line states the tier it runs in, and when it fails it leaves
//! behind what it saw.
//!
//! - [`Scene::offline`]: no cluster — the `stagehand` binary, files, local servers and
//!   simulators; a scratch directory ([`Scene::dir`]).
//! - [`Scene::cluster`]: Stagehand's CRDs installed, a client, and a namespace of its own
//!   ([`TestNamespace`]); the scene derefs to it, so `scene.name` is the namespace's name.
//!   [`Scene::cluster_without_crds`] leaves the CRDs alone (Kubernetes actions, CRD versions).
//! - [`Scene::operator`]: a cluster scene with the operator (`stagehand operator`) watching its
//!   namespace. A test that prepares the namespace first starts it later with
//!   [`Scene::start_operator`].
//!
//! When the test fails (the scene is dropped while the thread panics), the dump file
//! `target/tmp/scenes/<namespace>.txt` receives the log of every operator started on the
//! namespace and then the namespace's objects ([`DUMPED_KINDS`], `-o yaml`); its path is printed
//! on standard error, and only then is the namespace deleted. The scratch directory of a failed
//! test is kept (`target/tmp/scenes/<name>/`); otherwise it is removed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use kube::Client;

use crate::cluster::{TestNamespace, client, install_crds};
use crate::process::{OperatorProcess, target_dir};

/// What a dump holds of the namespace: Stagehand's objects, ConfigMaps (the ledger), Events and
/// the workloads the actions touch. Never Secrets.
pub const DUMPED_KINDS: &str = "migrationruns.stagehand.dev,migrations.stagehand.dev,configmaps,\
                                events,jobs,statefulsets,deployments,pods,leases";

/// One test's tier and fixtures; see the [module documentation](self).
pub struct Scene {
    // Fields drop in this order: the operator first (its log goes to the dump), then the
    // namespace (its objects go to the dump, then it is deleted).
    operator: Option<OperatorProcess>,
    namespace: Option<TestNamespace>,
    client: Option<Client>,
    /// The namespace's name, or `offline-<pid>-<n>`: the name of the scratch directory.
    name: String,
}

impl Scene {
    /// A test that needs no cluster.
    pub fn offline() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        Self {
            operator: None,
            namespace: None,
            client: None,
            name: format!(
                "offline-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// A test on the cluster: the CRDs installed (or updated) and established, and a namespace
    /// `<prefix>-<pid>-<n>` of its own.
    pub async fn cluster(prefix: &str) -> Self {
        install_crds();
        Self::cluster_without_crds(prefix).await
    }

    /// A cluster scene that leaves the CRDs alone: for tests of Kubernetes actions, which need
    /// none, and of CRD versions, which install their own.
    pub async fn cluster_without_crds(prefix: &str) -> Self {
        let client = client().await;
        let namespace = TestNamespace::new(&client, prefix).await;
        Self {
            operator: None,
            name: namespace.name.clone(),
            namespace: Some(namespace),
            client: Some(client),
        }
    }

    /// A cluster scene with the operator started on its namespace.
    pub async fn operator(prefix: &str) -> Self {
        let mut scene = Self::cluster(prefix).await;
        scene.operator = Some(scene.start_operator());
        scene
    }

    /// Starts an operator on the namespace, for a test that prepared it first; the test holds
    /// it (its log still goes to the scene's dump).
    pub fn start_operator(&self) -> OperatorProcess {
        OperatorProcess::start(self.namespace())
    }

    /// [`Scene::start_operator`] with another kubeconfig (a proxy's, a restricted account's)
    /// and `extra` arguments.
    pub fn start_operator_with(&self, kubeconfig_path: &str, extra: &[&str]) -> OperatorProcess {
        OperatorProcess::start_with(self.namespace(), kubeconfig_path, extra)
    }

    /// The namespace's name; fails the test in an offline scene.
    pub fn namespace(&self) -> &str {
        &self.test_namespace().name
    }

    /// The client of the test control plane; fails the test in an offline scene.
    pub fn client(&self) -> &Client {
        match &self.client {
            Some(client) => client,
            None => panic!("the offline scene {} has no cluster client", self.name),
        }
    }

    /// The operator [`Scene::operator`] started; fails the test when the scene has none.
    pub fn operator_process(&self) -> &OperatorProcess {
        match &self.operator {
            Some(operator) => operator,
            None => panic!("the scene {} started no operator", self.name),
        }
    }

    /// [`Scene::operator_process`], to stop or kill it.
    pub fn operator_process_mut(&mut self) -> &mut OperatorProcess {
        match &mut self.operator {
            Some(operator) => operator,
            None => panic!("the scene {} started no operator", self.name),
        }
    }

    /// The scene's scratch directory `target/tmp/scenes/<name>/`, created if needed; removed
    /// when the test passes, kept when it fails.
    pub fn dir(&self) -> PathBuf {
        let dir = scenes_dir().join(&self.name);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create the scene directory {}: {e}", dir.display());
        }
        dir
    }

    fn test_namespace(&self) -> &TestNamespace {
        match &self.namespace {
            Some(namespace) => namespace,
            None => panic!("the offline scene {} has no namespace", self.name),
        }
    }
}

impl std::fmt::Debug for Scene {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scene")
            .field("name", &self.name)
            .field("cluster", &self.client.is_some())
            .field("operator", &self.operator)
            .finish()
    }
}

impl std::ops::Deref for Scene {
    type Target = TestNamespace;

    /// The namespace; fails the test in an offline scene.
    fn deref(&self) -> &TestNamespace {
        self.test_namespace()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let dir = scenes_dir().join(&self.name);
        if !dir.exists() {
            return;
        }
        if std::thread::panicking() {
            eprintln!("the failed test's files are kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// `target/tmp/scenes`: the dumps and scratch directories of the scenes.
fn scenes_dir() -> PathBuf {
    target_dir().join("tmp").join("scenes")
}

/// The dump file of `namespace`: `target/tmp/scenes/<namespace>.txt`.
pub fn dump_path(namespace: &str) -> PathBuf {
    scenes_dir().join(format!("{namespace}.txt"))
}

/// Appends `text` under the heading `title` to the dump file of `namespace` and prints where on
/// standard error (printing `text` itself when the file cannot be written).
pub fn append_to_dump(namespace: &str, title: &str, text: &str) {
    let path = dump_path(namespace);
    let written = std::fs::create_dir_all(scenes_dir()).and_then(|()| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        write!(file, "==== {title} ====\n{text}\n")
    });
    match written {
        Ok(()) => eprintln!("---- {title}: written to {} ----", path.display()),
        Err(e) => eprintln!(
            "---- {title} (cannot write {}: {e}) ----\n{text}",
            path.display()
        ),
    }
}
