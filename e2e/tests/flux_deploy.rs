//! Flux deploys a release in openDesk's order (issue 30, item 2): Flux's own source-controller
//! and kustomize-controller (built by `e2e/flux/build` from the Go module proxy,
//! `$STAGEHAND_FLUX_BIN`) run as processes against the test control plane, with their CRDs.
//! They reconcile the recipe of docs/gitops.md "Flux" as it is in the repository:
//!
//! - `deploy/gitops/flux/flux.yaml`: a Bucket on the test's MinIO (TLS, its own CA) and the
//!   Kustomizations pre → apps → post chained with `dependsOn`, `wait: true` and the
//!   `healthCheckExprs` (placeholders `${NAMESPACE}`, `${S3_ENDPOINT}`, `${BUCKET}` replaced);
//! - the source the bucket holds: `deploy/gitops/flux/source/deployment/kustomization.yaml`
//!   (the deployment id, `${DEPLOYMENT}` replaced by each revision's id),
//!   `deploy/gitops/flux/source/pre/kustomization.yaml`, `deploy/gitops/flux/source/pre/run.yaml`,
//!   `deploy/gitops/flux/source/post/kustomization.yaml` and
//!   `deploy/gitops/flux/source/post/run.yaml`; what a user writes next to them, the Migration
//!   (`pre/migration.yaml`) and the applications (`apps/`, here the OX Connector StatefulSet),
//!   comes from the test.
//!
//! Asserted against the API server: the application never exists before the pre run has
//! succeeded, the post run never before the application is ready; a failed pre run keeps the
//! applications from being applied (the apps Kustomization reports `DependencyNotReady`); a new
//! revision of the source makes new runs, whose tagged action is skipped (`FootprintRecorded`)
//! and whose untagged action runs again, while Flux leaves the finished runs in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stagehand_e2e::local_server::{free_port, temp_dir};
use stagehand_e2e::manifests::{Action, Migration};
use stagehand_e2e::minio::{BUCKET, Minio, MinioOptions};
use stagehand_e2e::process::workspace_root;
use stagehand_e2e::scene::append_to_dump;
use stagehand_e2e::{
    Scene, apply, condition, decisions, get, kubeconfig, kubectl, ok, running_pods, statefulset,
    stdout, wait_established,
};

/// The Flux objects of the recipe.
const FLUX_RECIPE: &str = "deploy/gitops/flux/flux.yaml";
/// The recipe's part of the source, as the bucket holds it (below `deploy/gitops/flux/source/`).
const SOURCE_RECIPE: [&str; 5] = [
    "deploy/gitops/flux/source/deployment/kustomization.yaml",
    "deploy/gitops/flux/source/pre/kustomization.yaml",
    "deploy/gitops/flux/source/pre/run.yaml",
    "deploy/gitops/flux/source/post/kustomization.yaml",
    "deploy/gitops/flux/source/post/run.yaml",
];
const SOURCE_DIR: &str = "deploy/gitops/flux/source/";

/// The application the apps Kustomization applies.
const APP: &str = "ox-connector";
const PRE: &str = "opendesk-migrations-pre";
const APPS: &str = "opendesk-apps";
const POST: &str = "opendesk-migrations-post";

/// How long a whole deployment (three Kustomizations, two runs) may take.
const DEPLOYMENT_TIMEOUT: Duration = Duration::from_secs(240);

/// The directory `e2e/flux/build` printed: `$STAGEHAND_FLUX_BIN`.
fn flux_bin() -> PathBuf {
    match std::env::var("STAGEHAND_FLUX_BIN") {
        Ok(dir) if Path::new(&dir).join("kustomize-controller").is_file() => PathBuf::from(dir),
        other => panic!(
            "STAGEHAND_FLUX_BIN is {other:?}, not a directory holding source-controller, kustomize-controller and crds/: run\n  export STAGEHAND_FLUX_BIN=\"$(e2e/flux/build | tail -n1)\""
        ),
    }
}

/// Flux's CRDs of the built controllers, applied (they stay installed, as Stagehand's do).
fn install_flux_crds(bin: &Path) {
    let crds = bin.join("crds");
    ok(
        "apply Flux CRDs",
        &kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &crds.to_string_lossy(),
        ]),
    );
    for crd in [
        "buckets.source.toolkit.fluxcd.io",
        "kustomizations.kustomize.toolkit.fluxcd.io",
    ] {
        wait_established(crd);
    }
}

/// source-controller and kustomize-controller watching one namespace, leader election off,
/// on free loopback ports; source-controller serves the artifacts it stores in a temporary
/// directory at 127.0.0.1:<port>, where kustomize-controller downloads them. On drop the Flux
/// objects' finalizers are removed (so the namespace can go), the controllers are killed by
/// PID and, when the test failed, their logs and the Flux objects go to the namespace's dump.
struct FluxControllers {
    namespace: String,
    children: Vec<(&'static str, Child, PathBuf)>,
    storage: PathBuf,
}

impl FluxControllers {
    fn start(namespace: &str) -> Self {
        let bin = flux_bin();
        install_flux_crds(&bin);
        let storage = temp_dir("flux-storage");
        let storage_addr = format!("127.0.0.1:{}", free_port());
        let mut flux = Self {
            namespace: namespace.to_string(),
            children: Vec::new(),
            storage: storage.clone(),
        };
        let source_args = vec![
            format!("--storage-path={}", storage.display()),
            format!("--storage-addr={storage_addr}"),
            format!("--storage-adv-addr={storage_addr}"),
        ];
        flux.spawn(&bin, "source-controller", source_args);
        flux.spawn(
            &bin,
            "kustomize-controller",
            vec![
                // A dependency not ready is looked at again after 2 s, not 30 s.
                "--requeue-dependency=2s".to_string(),
                "--no-remote-bases=true".to_string(),
            ],
        );
        flux
    }

    fn spawn(&mut self, bin: &Path, name: &'static str, extra: Vec<String>) {
        let log = std::env::temp_dir().join(format!(
            "stagehand-flux-{name}-{}-{}.log",
            self.namespace,
            std::process::id()
        ));
        let file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let child = Command::new(bin.join(name))
            .env("KUBECONFIG", kubeconfig())
            .env("RUNTIME_NAMESPACE", &self.namespace)
            .args([
                "--watch-all-namespaces=false",
                "--enable-leader-election=false",
                "--events-addr=",
                "--log-level=debug",
                &format!("--metrics-addr=127.0.0.1:{}", free_port()),
                &format!("--health-addr=127.0.0.1:{}", free_port()),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.children.push((name, child, log));
    }

    /// Fails the test when a controller has exited.
    fn assert_running(&mut self) {
        for (name, child, log) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{name} exited ({status}): {}",
                    std::fs::read_to_string(&*log).unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for FluxControllers {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            let out = kubectl(&[
                "get",
                "buckets.source.toolkit.fluxcd.io,kustomizations.kustomize.toolkit.fluxcd.io",
                "-n",
                &self.namespace,
                "-o",
                "yaml",
            ]);
            append_to_dump(&self.namespace, "Flux objects", &stdout(&out));
        }
        for (name, child, log) in &mut self.children {
            let pid = child.id();
            let _ = child.kill();
            let _ = child.wait();
            if failed {
                append_to_dump(
                    &self.namespace,
                    &format!("{name} log (pid {pid})"),
                    &std::fs::read_to_string(&*log).unwrap_or_default(),
                );
            }
            let _ = std::fs::remove_file(&*log);
        }
        // With the controllers gone nobody would remove their finalizers, and the namespace
        // would never be deleted.
        for kind in [
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "buckets.source.toolkit.fluxcd.io",
        ] {
            let names = stdout(&kubectl(&[
                "get",
                kind,
                "-n",
                &self.namespace,
                "-o",
                "name",
            ]));
            for name in names.lines() {
                let _ = kubectl(&[
                    "patch",
                    name,
                    "-n",
                    &self.namespace,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
        }
        let _ = std::fs::remove_dir_all(&self.storage);
    }
}

/// A file of the repository.
fn repo_file(path: &str) -> String {
    let full = workspace_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read {}: {e}", full.display()))
}

/// MinIO with TLS, and the Secrets the recipe's Bucket names: `opendesk-bucket` (the
/// dedicated identity of the bucket) and `opendesk-bucket-ca` (the server's CA).
fn bucket_server(ns: &str) -> Minio {
    let minio = Minio::start(MinioOptions {
        tls: true,
        ..MinioOptions::default()
    });
    ok(
        "bucket credentials",
        &kubectl(&[
            "create",
            "secret",
            "generic",
            "opendesk-bucket",
            "-n",
            ns,
            &format!("--from-literal=accesskey={}", minio.access_key()),
            &format!("--from-literal=secretkey={}", minio.secret_key()),
        ]),
    );
    let ca = temp_dir("flux-ca").join("ca.crt");
    std::fs::write(&ca, minio.ca_pem().expect("a TLS server has a CA")).unwrap();
    ok(
        "bucket CA",
        &kubectl(&[
            "create",
            "secret",
            "generic",
            "opendesk-bucket-ca",
            "-n",
            ns,
            &format!("--from-file=ca.crt={}", ca.display()),
        ]),
    );
    let _ = std::fs::remove_dir_all(ca.parent().unwrap());
    minio
}

/// Writes one revision of the source into the bucket: the recipe's files with `${DEPLOYMENT}`
/// replaced by `deployment`, the test's Migration as `pre/migration.yaml` and the application
/// as `apps/ox-connector.yaml`.
fn put_revision(minio: &Minio, deployment: &str, migration: &str, app: &str) {
    for path in SOURCE_RECIPE {
        let key = path.strip_prefix(SOURCE_DIR).unwrap();
        let text = repo_file(path).replace("${DEPLOYMENT}", deployment);
        minio.put_object(BUCKET, key, text.as_bytes());
    }
    minio.put_object(BUCKET, "pre/migration.yaml", migration.as_bytes());
    minio.put_object(BUCKET, "apps/ox-connector.yaml", app.as_bytes());
}

/// The recipe's Flux objects with its placeholders replaced, applied.
fn apply_flux_recipe(ns: &str, minio: &Minio) {
    let endpoint = minio.endpoint();
    let host = endpoint.strip_prefix("https://").unwrap();
    let recipe = repo_file(FLUX_RECIPE)
        .replace("${NAMESPACE}", ns)
        .replace("${S3_ENDPOINT}", host)
        .replace("${BUCKET}", BUCKET);
    assert!(
        !recipe.contains("${"),
        "{FLUX_RECIPE} has a placeholder the test does not know: {recipe}"
    );
    apply(&recipe);
}

/// Asks source-controller to look at the bucket now (what `flux reconcile source bucket` does).
fn reconcile_bucket(ns: &str) {
    let now = format!("{:?}", Instant::now());
    ok(
        "annotate bucket",
        &kubectl(&[
            "annotate",
            "--overwrite",
            "-n",
            ns,
            "buckets.source.toolkit.fluxcd.io/opendesk",
            &format!("reconcile.fluxcd.io/requestedAt={now}"),
        ]),
    );
}

/// The object `what` in `ns` as JSON, or `None` when it does not exist.
fn try_get(ns: &str, what: &str) -> Option<Value> {
    let out = kubectl(&["get", what, "-n", ns, "-o", "json", "--ignore-not-found"]);
    assert!(
        out.status.success(),
        "kubectl get {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    (!text.trim().is_empty()).then(|| serde_json::from_str(&text).unwrap())
}

fn is_true(obj: &Value, type_: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

fn kustomization(ns: &str, name: &str) -> Value {
    get(
        ns,
        &format!("kustomizations.kustomize.toolkit.fluxcd.io/{name}"),
    )
}

/// A Migration of the installed v1.17.3 going to v1.18.0: in each stage one action tagged for
/// v1.18.0 (runs once) and one untagged (runs in every deployment), scaling workloads the
/// installation already has.
fn migration(ns: &str) -> String {
    let window = json!({"minimum": "v1.15", "from": "v1.15", "to": "v1.18"});
    Migration::new(ns)
        .installed("v1.17.3")
        .pre(
            Action::scale("once", 1)
                .tag("v1.18.0")
                .versions(window.clone()),
        )
        .pre(Action::scale("every", 1).versions(window.clone()))
        .post(Action::scale("every", 1).versions(window))
        .to_yaml()
}

/// Watches one deployment until its post run is Ready, asserting the order on every look:
/// the application does not exist while the pre run has not succeeded, and the post run does
/// not exist while the application is not ready (the apps Kustomization waits for it).
async fn watch_deployment_in_order(flux: &mut FluxControllers, ns: &str, deployment: &str) {
    let pre = format!("migrationruns.stagehand.dev/opendesk-pre-{deployment}");
    let post = format!("migrationruns.stagehand.dev/opendesk-post-{deployment}");
    let app = format!("statefulsets.apps/{APP}");
    let first = deployment == "1";
    let deadline = Instant::now() + DEPLOYMENT_TIMEOUT;
    loop {
        flux.assert_running();
        // Read in the reverse order of the deployment, so what is read later is newer.
        let post_run = try_get(ns, &post);
        let sts = try_get(ns, &app);
        let pre_run = try_get(ns, &pre);
        let pre_ready = pre_run.as_ref().is_some_and(|r| is_true(r, "Ready"));
        if first {
            assert!(
                sts.is_none() || pre_ready,
                "deployment {deployment}: the application exists while the pre run has not succeeded: {pre_run:?}"
            );
        }
        if let Some(run) = &post_run {
            assert!(
                pre_ready,
                "deployment {deployment}: the post run exists while the pre run has not succeeded: {pre_run:?}"
            );
            let ready = sts
                .as_ref()
                .and_then(|s| s["status"]["readyReplicas"].as_u64())
                .unwrap_or(0);
            assert_eq!(
                ready, 1,
                "deployment {deployment}: the post run exists before the application is ready: {sts:?}"
            );
            if is_true(run, "Ready") {
                return;
            }
            assert!(
                !is_true(run, "Stalled"),
                "deployment {deployment}: the post run failed: {run}"
            );
        }
        assert!(
            Instant::now() < deadline,
            "deployment {deployment}: no Ready post run after {DEPLOYMENT_TIMEOUT:?}; pre Kustomization {}\napps Kustomization {}",
            kustomization(ns, PRE)["status"],
            kustomization(ns, APPS)["status"],
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (60 s) until the three Kustomizations are Ready at the bucket's current revision
/// (Flux notices a Ready run at its next health-check poll, a few seconds after the operator).
async fn kustomizations_ready(flux: &mut FluxControllers, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        flux.assert_running();
        let revision =
            get(ns, "buckets.source.toolkit.fluxcd.io/opendesk")["status"]["artifact"]["revision"]
                .clone();
        let statuses: Vec<Value> = [PRE, APPS, POST]
            .iter()
            .map(|name| kustomization(ns, name))
            .collect();
        if statuses
            .iter()
            .all(|k| is_true(k, "Ready") && k["status"]["lastAppliedRevision"] == revision)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the Kustomizations are not all Ready at revision {revision} after 60 s: {:?}",
            statuses.iter().map(|k| &k["status"]).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The creation time of an object read with [`get`].
fn created(obj: &Value) -> k8s_openapi::jiff::Timestamp {
    obj["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_applies_pre_then_apps_then_post_and_each_revision_makes_new_runs() {
    let ns = Scene::cluster("flux-deploy").await;
    // The installation's workloads the actions scale.
    apply(&statefulset(&ns.name, "once", 1));
    apply(&statefulset(&ns.name, "every", 1));
    running_pods(&ns.name, "once", 1).await;
    running_pods(&ns.name, "every", 1).await;
    let _operator = ns.start_operator();
    let minio = bucket_server(&ns.name);
    let mut flux = FluxControllers::start(&ns.name);

    let migration = migration(&ns.name);
    let app = statefulset(&ns.name, APP, 1);
    put_revision(&minio, "1", &migration, &app);
    apply_flux_recipe(&ns.name, &minio);
    watch_deployment_in_order(&mut flux, &ns.name, "1").await;

    let pre1 = get(&ns.name, "migrationruns.stagehand.dev/opendesk-pre-1");
    let sts = get(&ns.name, &format!("statefulsets.apps/{APP}"));
    let post1 = get(&ns.name, "migrationruns.stagehand.dev/opendesk-post-1");
    let pre_done: k8s_openapi::jiff::Timestamp = condition(&pre1, "Ready")["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        pre_done <= created(&sts) && created(&sts) <= created(&post1),
        "order: pre run Ready {pre_done}, {APP} created {}, post run created {}",
        created(&sts),
        created(&post1)
    );
    assert_eq!(
        decisions(&pre1),
        [
            ("Succeeded".to_string(), "InWindow".to_string()),
            ("Succeeded".to_string(), "InWindow".to_string())
        ],
        "deployment 1: both pre actions run"
    );
    kustomizations_ready(&mut flux, &ns.name).await;

    // Revision 2: only the deployment id changed.
    put_revision(&minio, "2", &migration, &app);
    reconcile_bucket(&ns.name);
    watch_deployment_in_order(&mut flux, &ns.name, "2").await;
    let pre2 = get(&ns.name, "migrationruns.stagehand.dev/opendesk-pre-2");
    let got = decisions(&pre2);
    assert_eq!(
        (got[0].0.as_str(), got[0].1.as_str()),
        ("Skipped", "FootprintRecorded"),
        "deployment 2: the tagged action ran once: {got:?}"
    );
    assert_eq!(
        got[1].0, "Succeeded",
        "deployment 2: the untagged action runs again: {got:?}"
    );
    let post2 = get(&ns.name, "migrationruns.stagehand.dev/opendesk-post-2");
    assert_eq!(
        decisions(&post2)[0].0,
        "Succeeded",
        "deployment 2: the untagged post action runs again"
    );
    // Flux applied the new revision everywhere and left the finished runs in place.
    kustomizations_ready(&mut flux, &ns.name).await;
    let mut runs: Vec<String> = get(&ns.name, "migrationruns.stagehand.dev")["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            "opendesk-post-1",
            "opendesk-post-2",
            "opendesk-pre-1",
            "opendesk-pre-2"
        ],
        "each revision made its runs; Flux pruned none"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_does_not_apply_the_apps_when_the_pre_run_fails() {
    let ns = Scene::cluster("flux-deploy-fail").await;
    let _operator = ns.start_operator();
    let minio = bucket_server(&ns.name);
    let mut flux = FluxControllers::start(&ns.name);

    // The pre action scales a StatefulSet that does not exist: the pre run fails.
    let migration = Migration::new(&ns.name)
        .installed("v1.17.3")
        .pre(Action::scale_without_timeout("absent", 1).versions(json!({
            "minimum": "v1.15", "from": "v1.15", "to": "v1.18",
        })))
        .to_yaml();
    put_revision(&minio, "1", &migration, &statefulset(&ns.name, APP, 1));
    apply_flux_recipe(&ns.name, &minio);

    let app = format!("statefulsets.apps/{APP}");
    // The pre Kustomization fails its health check (fail-fast, long before its 60m timeout).
    let deadline = Instant::now() + Duration::from_secs(180);
    let failed = loop {
        flux.assert_running();
        assert!(
            try_get(&ns.name, &app).is_none(),
            "{APP} was applied while the pre stage has not succeeded"
        );
        let k = kustomization(&ns.name, PRE);
        let health_check_failed = k["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter().any(|c| {
                c["type"] == "Ready" && c["status"] == "False" && c["reason"] == "HealthCheckFailed"
            })
        });
        if health_check_failed {
            break k;
        }
        assert!(
            Instant::now() < deadline,
            "the pre Kustomization did not fail its health check within 180 s: {}",
            k["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let run = get(&ns.name, "migrationruns.stagehand.dev/opendesk-pre-1");
    assert!(is_true(&run, "Stalled"), "the pre run failed: {run}");
    let message = condition(&failed, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("opendesk-pre-1"),
        "the pre Kustomization names the failed run: {message}"
    );

    // For the next 20 s (10 re-evaluations of the dependency), the apps stay unapplied and
    // say why; no post run.
    let until = Instant::now() + Duration::from_secs(20);
    let mut apps = kustomization(&ns.name, APPS);
    while Instant::now() < until {
        flux.assert_running();
        assert!(
            try_get(&ns.name, &app).is_none(),
            "{APP} was applied although the pre run failed"
        );
        assert!(
            try_get(&ns.name, "migrationruns.stagehand.dev/opendesk-post-1").is_none(),
            "the post run was applied although the pre run failed"
        );
        apps = kustomization(&ns.name, APPS);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ready = condition(&apps, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("DependencyNotReady")),
        "the apps Kustomization waits for the pre stage: {ready}"
    );
    assert!(
        ready["message"].as_str().unwrap_or_default().contains(PRE),
        "it names the pre Kustomization: {ready}"
    );
}
