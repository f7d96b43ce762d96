//! The Helm chart in `deploy/charts/stagehand`: it lints, its rendering is the committed
//! `deploy/manifests/stagehand.yaml`, its CRDs are `stagehand crds`, and its RBAC is sufficient
//! (the operator runs under the chart's ServiceAccount, with a token from `kubectl create
//! token`, and a `workload_scale` run goes Ready) and necessary in a clear way (without the
//! scale permission the run ends Stalled naming the missing permission). Secrets are granted by
//! name only (`rbac.secretNames`; none by default): a Secret not listed is forbidden to the
//! ServiceAccount, and a run that needs one stops with `PreflightFailed` naming the Secret and
//! the rule to add, never a value.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, assert_no_secret_leak, condition, create_secret, get, kubectl, kubectl_stdin, ok,
    running_pods, stagehand, statefulset, stderr, stdout, wait,
};

/// The three comment lines on top of `deploy/manifests/stagehand.yaml`.
const MANIFEST_HEADER: &str = "# GENERATED from deploy/charts/stagehand: do not edit. Regenerate with\n\
#   \"$(e2e/cluster/build-helm | tail -n1)\" template stagehand deploy/charts/stagehand --namespace stagehand-system --include-crds\n\
# (keeping these three comment lines); e2e/tests/rbac.rs fails when it is stale.\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The helm binary, built by `e2e/cluster/build-helm` if needed (last line of its stdout).
fn helm_bin() -> PathBuf {
    let out = Command::new(root().join("e2e/cluster/build-helm"))
        .output()
        .expect("running e2e/cluster/build-helm");
    let text = ok("e2e/cluster/build-helm", &out);
    PathBuf::from(
        text.lines()
            .last()
            .expect("build-helm printed no path")
            .trim(),
    )
}

fn helm(args: &[&str]) -> String {
    let out = Command::new(helm_bin())
        .current_dir(root())
        .args(args)
        .output()
        .expect("running helm");
    ok(&format!("helm {}", args.join(" ")), &out)
}

/// Text without its comment lines (those starting with `#`).
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_chart_lints_and_the_committed_manifests_are_its_rendering() {
    helm(&["lint", "--strict", "deploy/charts/stagehand"]);
    helm(&[
        "lint",
        "--strict",
        "deploy/charts/stagehand",
        "--set",
        "watchNamespace=*",
        "--set",
        "rbac.secretNames={a,b}",
    ]);
    helm(&[
        "lint",
        "--strict",
        "deploy/charts/stagehand",
        "--set",
        "rbac.allSecrets=true",
    ]);
    let rendered = helm(&[
        "template",
        "stagehand",
        "deploy/charts/stagehand",
        "--namespace",
        "stagehand-system",
        "--include-crds",
    ]);
    let committed = std::fs::read_to_string(root().join("deploy/manifests/stagehand.yaml"))
        .expect("reading deploy/manifests/stagehand.yaml");
    assert!(
        committed == format!("{MANIFEST_HEADER}{rendered}"),
        "deploy/manifests/stagehand.yaml is stale: regenerate it as its first lines say"
    );
}

#[test]
fn the_chart_s_crds_are_the_generated_ones() {
    let generated = ok("stagehand crds", &stagehand(&["crds"]));
    let chart =
        std::fs::read_to_string(root().join("deploy/charts/stagehand/crds/stagehand-crds.yaml"))
            .expect("reading the chart's CRDs");
    let committed = std::fs::read_to_string(root().join("deploy/crds/stagehand-crds.yaml"))
        .expect("reading deploy/crds/stagehand-crds.yaml");
    assert!(
        without_comments(&chart) == without_comments(&generated),
        "deploy/charts/stagehand/crds/stagehand-crds.yaml differs from `stagehand crds`: regenerate it as its first lines say"
    );
    assert!(
        committed == generated,
        "deploy/crds/stagehand-crds.yaml differs from `stagehand crds`"
    );
}

/// Cluster-scoped objects of one test's release, deleted when dropped.
struct ClusterObjects(Vec<String>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for what in &self.0 {
            let _ = kubectl(&["delete", what, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// The rules on `secrets` of the chart's operator Role rendered with `values` (`--set`s).
fn secret_rules(values: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "stagehand",
        "deploy/charts/stagehand",
        "--namespace",
        "stagehand-system",
        "--show-only",
        "templates/rbac.yaml",
    ];
    for v in values {
        args.extend(["--set", v]);
    }
    let rendered = helm(&args);
    let mut rules = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&rendered) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] == "Role" && v["metadata"]["name"] == "stagehand" {
            rules.extend(
                v["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| {
                        r["resources"]
                            .as_array()
                            .unwrap()
                            .contains(&"secrets".into())
                    })
                    .cloned(),
            );
        }
    }
    rules
}

/// By default the operator may read no Secret; `rbac.secretNames` grants those named and no
/// other (`resourceNames`); `rbac.allSecrets=true` is the opt-in for every Secret.
#[test]
fn secrets_are_granted_by_name_and_none_by_default() {
    assert_eq!(
        secret_rules(&[]),
        Vec::<Value>::new(),
        "the default values grant no Secret"
    );
    assert_eq!(
        secret_rules(&["rbac.secretNames={redis,provisioning}"]),
        [serde_json::json!({
            "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
            "resourceNames": ["redis", "provisioning"],
        })]
    );
    assert_eq!(
        secret_rules(&["rbac.allSecrets=true"]),
        [serde_json::json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})]
    );
}

/// The chart's RBAC documents (ServiceAccount, roles, bindings) rendered for a release named
/// after the namespace with the `--set`s of `values`, installed into it; `edit` may change
/// them first. Returns the ServiceAccount's name and a guard of the cluster-scoped objects.
fn install_rbac(ns: &str, values: &[&str], edit: impl Fn(&mut Value)) -> (String, ClusterObjects) {
    let mut args = vec!["template", ns, "deploy/charts/stagehand", "--namespace", ns];
    for v in values {
        args.extend(["--set", v]);
    }
    let rendered = helm(&args);
    let mut docs = Vec::new();
    let mut cluster = Vec::new();
    let mut account = None;
    for doc in serde_yaml::Deserializer::from_str(&rendered) {
        let mut v: Value = match serde::Deserialize::deserialize(doc) {
            Ok(v) => v,
            Err(e) => panic!("rendered chart is not YAML: {e}"),
        };
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "ServiceAccount" => account = Some(name),
            "Role" | "RoleBinding" => {}
            "ClusterRole" | "ClusterRoleBinding" => {
                cluster.push(format!("{}/{name}", kind.to_lowercase()));
            }
            _ => continue,
        }
        edit(&mut v);
        docs.push(serde_json::to_string(&v).unwrap());
    }
    let guard = ClusterObjects(cluster);
    let list = format!(
        "{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{}]}}",
        docs.join(",")
    );
    ok(
        "apply the chart's RBAC",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&list)),
    );
    (account.expect("the chart renders a ServiceAccount"), guard)
}

/// A kubeconfig for the test control plane that authenticates as the ServiceAccount with a
/// token from `kubectl create token`; returns its path.
fn service_account_kubeconfig(ns: &str, account: &str) -> String {
    let token = ok(
        "create token",
        &kubectl(&["create", "token", account, "-n", ns, "--duration=1h"]),
    );
    let admin: Value = serde_json::from_str(&ok(
        "config view",
        &kubectl(&[
            "config",
            "view",
            "--raw",
            "--minify",
            "--flatten",
            "-o",
            "json",
        ]),
    ))
    .unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster["server"],
            "certificate-authority-data": cluster["certificate-authority-data"],
        }}],
        "users": [{"name": account, "user": {"token": token.trim()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account, "namespace": ns}}],
        "current-context": "sa",
    });
    let path = std::env::temp_dir().join(format!("stagehand-rbac-{ns}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

/// The `--set` granting the Secret of [`workload_and_migration`]'s secret file.
const REDIS_SECRET_NAMES: &str = "rbac.secretNames={cache-intercom-service-password}";

/// A StatefulSet of `replicas` pods on the kwok node, and a Migration whose pre stage scales
/// it to 0 (reading a Secret through secretFiles), and its pre run.
async fn workload_and_migration(ns: &str) {
    create_secret(
        ns,
        "cache-intercom-service-password",
        "password",
        "rbac-test",
    );
    apply(&statefulset(ns, "ox-connector", 2));
    running_pods(ns, "ox-connector", 2).await;
    apply(
        &Migration::new(ns)
            .installed("v1.17.3")
            .secret_file(
                "redis-password",
                "cache-intercom-service-password",
                "password",
            )
            .pre(
                Action::scale("ox-connector", 0)
                    .tag("v1.18.0")
                    .run_mode("apply"),
            )
            .to_yaml(),
    );
    apply(&MigrationRun::new(ns, "pre", "pre").dry_run(false).to_yaml());
}

#[tokio::test]
async fn the_operator_under_the_chart_s_service_account_runs_a_workload_scale() {
    let ns = Scene::cluster("rbac-ok").await;
    let (account, _cluster) = install_rbac(&ns.name, &[REDIS_SECRET_NAMES], |_| {});
    let config = service_account_kubeconfig(&ns.name, &account);
    let _operator = ns.start_operator_with(&config, &[]);
    workload_and_migration(&ns.name).await;
    wait(&ns.name, "migrationrun/pre", "Ready");
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 0, "{sts}");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn without_the_scale_permission_the_run_stalls_naming_it() {
    let ns = Scene::cluster("rbac-denied").await;
    let (account, _cluster) = install_rbac(&ns.name, &[REDIS_SECRET_NAMES], |doc| {
        if doc["kind"] == "Role"
            && let Some(rules) = doc["rules"].as_array_mut()
        {
            rules.retain(|r| {
                !r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "statefulsets/scale"))
            });
        }
    });
    let config = service_account_kubeconfig(&ns.name, &account);
    let _operator = ns.start_operator_with(&config, &[]);
    workload_and_migration(&ns.name).await;
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let run = get(&ns.name, "migrationrun/pre");
    let stalled = run["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .unwrap();
    let message = stalled["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("forbidden") && message.contains("statefulsets.apps/scale"),
        "the Stalled message should name the missing permission: {message}"
    );
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 2, "{sts}");
    let _ = std::fs::remove_file(&config);
}

/// Secrets out of reach. With `rbac.secretNames={listed,absent}` the chart's ServiceAccount
/// reads Secret `listed` and may neither read `unlisted` (403) nor list Secrets. A run whose
/// Migration names all three stops with `PreflightFailed` before any change, its message naming
/// every problem at once: `unlisted` forbidden, with the Secret, the namespace and the rule to
/// add; `absent` missing (a 404, told apart). `stagehand wait` exits 1 printing it. No secret
/// value is in status, Events, the operator's log or `wait`'s output. Doing what the message
/// says (adding `unlisted` to `rbac.secretNames`, creating `absent`) lets the next run go Ready.
#[tokio::test]
async fn a_secret_not_listed_is_forbidden_and_the_run_names_the_rule_to_add() {
    let ns = Scene::cluster("rbac-secrets").await;
    let listed_value = format!("listed-{}-S3cret", std::process::id());
    let unlisted_value = format!("unlisted-{}-S3cret", std::process::id());
    let absent_value = format!("absent-{}-S3cret", std::process::id());
    create_secret(&ns.name, "listed", "password", &listed_value);
    create_secret(&ns.name, "unlisted", "password", &unlisted_value);
    let (account, _cluster) = install_rbac(&ns.name, &["rbac.secretNames={listed,absent}"], |_| {});
    let as_operator = format!("--as=system:serviceaccount:{}:{account}", ns.name);

    // The ServiceAccount's own view: the listed Secret, nothing else.
    let out = kubectl(&[
        "get",
        "secret/listed",
        "-n",
        &ns.name,
        &as_operator,
        "-o",
        "name",
    ]);
    assert_eq!(
        ok("get secret/listed as the operator", &out).trim(),
        "secret/listed"
    );
    for what in ["secret/unlisted", "secrets"] {
        let out = kubectl(&["get", what, "-n", &ns.name, &as_operator]);
        assert!(
            !out.status.success() && stderr(&out).contains("(Forbidden)"),
            "{what} must be forbidden to the operator: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }

    let config = service_account_kubeconfig(&ns.name, &account);
    let operator = ns.start_operator_with(&config, &[]);
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("redis-password", "listed", "password")
            .secret_file("provisioning-api-password", "unlisted", "password")
            .secret_file("udm-admin-password", "absent", "password")
            .pre(
                Action::scale("ox-connector", 0)
                    .tag("v1.18.0")
                    .run_mode("apply"),
            )
            .to_yaml(),
    );
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    let stalled = condition(&pre, "Stalled");
    assert_eq!(stalled["reason"], "PreflightFailed", "{pre}");
    let message = stalled["message"].as_str().unwrap();
    let forbidden = format!(
        "secret file \"provisioning-api-password\": the operator may not read Secret {}/unlisted (403 Forbidden: ",
        ns.name
    );
    assert!(
        message.starts_with("preflight: 2 problem(s) found before the first change")
            && message.contains(&forbidden)
            && message.contains(
                "add unlisted to rbac.secretNames in the chart values (Role rule: secrets get resourceNames)"
            )
            && message.contains(&format!(
                "secret file \"udm-admin-password\": Secret {}/absent does not exist",
                ns.name
            ))
            && !message.contains("redis-password"),
        "every problem at once, the forbidden one with its rule, the missing one as missing: {message}"
    );
    assert!(
        pre["status"]["actions"][0]["startTime"].is_null(),
        "nothing started: {pre}"
    );
    assert_eq!(
        get(&ns.name, "statefulset/ox-connector")["spec"]["replicas"],
        1
    );

    // `stagehand wait` says the same, and exits 1.
    let waited = stagehand(&[
        "wait",
        "migrationrun/pre",
        "-n",
        &ns.name,
        "--timeout",
        "30s",
    ]);
    assert_eq!(waited.status.code(), Some(1), "{}", stderr(&waited));
    assert!(
        stderr(&waited).contains("add unlisted to rbac.secretNames"),
        "{}",
        stderr(&waited)
    );
    let (wait_out, wait_err) = (stdout(&waited), stderr(&waited));
    let logs = operator.logs();
    assert!(
        logs.contains("run stalled"),
        "the operator's log was captured"
    );
    assert_no_secret_leak(
        &ns.name,
        &[&listed_value, &unlisted_value, &absent_value],
        &[
            ("the operator's log", &logs),
            ("stagehand wait's stdout", &wait_out),
            ("stagehand wait's stderr", &wait_err),
        ],
    );

    // As the message says: the rule gets the Secret, the missing one is created.
    let _granted = install_rbac(
        &ns.name,
        &["rbac.secretNames={listed,absent,unlisted}"],
        |_| {},
    );
    create_secret(&ns.name, "absent", "password", &absent_value);
    apply(&MigrationRun::new(&ns.name, "pre-again", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre-again", "Ready");
    assert_eq!(
        get(&ns.name, "statefulset/ox-connector")["spec"]["replicas"],
        0
    );
    assert_no_secret_leak(
        &ns.name,
        &[&listed_value, &unlisted_value, &absent_value],
        &[("the operator's log", &operator.logs())],
    );
    let _ = std::fs::remove_file(&config);
}
