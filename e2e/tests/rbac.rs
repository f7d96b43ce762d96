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
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, assert_no_secret_leak, condition, create_secret, get, kubectl, kubectl_stdin, ok,
    running_pods, stagehand, statefulset, stderr, stdout, wait, wait_for,
};

/// The three comment lines on top of `deploy/manifests/stagehand.yaml`.
const MANIFEST_HEADER: &str = "# GENERATED from deploy/charts/stagehand: do not edit. Regenerate with\n\
#   \"$(e2e/cluster/build-helm | tail -n1)\" template stagehand deploy/charts/stagehand --namespace stagehand-system --include-crds\n\
# (keeping these three comment lines); e2e/tests/rbac.rs fails when it is stale.\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The helm v3 binary, built by `e2e/cluster/build-helm` if needed (last line of its stdout).
fn helm_bin() -> PathBuf {
    helm_bin_of("3")
}

/// The helm binary of major version `major` ("3" or "4"), built by `e2e/cluster/build-helm
/// MAJOR` if needed.
fn helm_bin_of(major: &str) -> PathBuf {
    let out = Command::new(root().join("e2e/cluster/build-helm"))
        .arg(major)
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

/// helm with `args` in the repository's root; its output, whatever the exit status.
fn helm_output(args: &[&str]) -> Output {
    Command::new(helm_bin())
        .current_dir(root())
        .args(args)
        .output()
        .expect("running helm")
}

fn helm(args: &[&str]) -> String {
    ok(&format!("helm {}", args.join(" ")), &helm_output(args))
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
        std::fs::read_to_string(root().join("deploy/charts/stagehand/files/stagehand-crds.yaml"))
            .expect("reading the chart's CRDs");
    let committed = std::fs::read_to_string(root().join("deploy/crds/stagehand-crds.yaml"))
        .expect("reading deploy/crds/stagehand-crds.yaml");
    assert!(
        without_comments(&chart) == without_comments(&generated),
        "deploy/charts/stagehand/files/stagehand-crds.yaml differs from `stagehand crds`: regenerate it as its first lines say"
    );
    assert!(
        committed == generated,
        "deploy/crds/stagehand-crds.yaml differs from `stagehand crds`"
    );
}

/// The CRDs are templates of the release (docs/deploy.md#crd-policy), with helm 3 and helm 4:
/// by default both CRDs are rendered with their schema digest and `helm.sh/resource-policy:
/// keep`; `crds.keep=false` drops only the keep annotation; `crds.install=false` renders no CRD.
/// `crdPolicy` reaches the operator as `STAGEHAND_CRD_POLICY`; the ClusterRole `stagehand-crds`
/// (`<release>-stagehand-crds`) grants `get` on the two CRDs by name, and `patch` only with
/// `crdPolicy=apply`.
#[test]
fn the_crds_are_kept_templates_and_the_crd_policy_reaches_the_operator() {
    let crds_of = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .cloned()
            .collect()
    };
    let env_of = |docs: &[Value]| -> Value {
        let deployment = named(docs, "Deployment", "stagehand").expect("the Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "STAGEHAND_CRD_POLICY")
            .map(|e| e["value"].clone())
            .unwrap_or(Value::Null)
    };
    let crd_rule = |docs: &[Value]| -> Value {
        let role =
            named(docs, "ClusterRole", "stagehand-crds").expect("ClusterRole stagehand-crds");
        assert!(named(docs, "ClusterRoleBinding", "stagehand-crds").is_some());
        role["rules"][0].clone()
    };
    for major in ["3", "4"] {
        let bin = helm_bin_of(major);
        let render = |values: &[&str]| -> Vec<Value> {
            let mut args = vec![
                "template",
                "stagehand",
                "deploy/charts/stagehand",
                "-n",
                "stagehand-system",
            ];
            for v in values {
                args.extend(["--set", v]);
            }
            let out = Command::new(&bin)
                .current_dir(root())
                .args(&args)
                .output()
                .expect("running helm");
            let text = ok(&format!("helm {major} {}", args.join(" ")), &out);
            serde_norway::Deserializer::from_str(&text)
                .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
                .filter(|v: &Value| !v.is_null())
                .collect()
        };
        let default = render(&[]);
        let crds = crds_of(&default);
        let names: Vec<&str> = crds
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["migrations.stagehand.dev", "migrationruns.stagehand.dev"],
            "helm {major}"
        );
        for crd in &crds {
            let annotations = &crd["metadata"]["annotations"];
            assert_eq!(
                annotations["helm.sh/resource-policy"], "keep",
                "helm {major}"
            );
            assert!(
                annotations["stagehand.dev/schema-digest"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("sha256:")),
                "helm {major}: {annotations}"
            );
            assert_eq!(
                annotations["stagehand.dev/version"],
                env!("CARGO_PKG_VERSION")
            );
        }
        assert_eq!(env_of(&default), "check", "helm {major}");
        assert_eq!(
            crd_rule(&default),
            serde_json::json!({
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["get"],
                "resourceNames": ["migrations.stagehand.dev", "migrationruns.stagehand.dev"],
            }),
            "helm {major}"
        );

        let unkept = crds_of(&render(&["crds.keep=false"]));
        assert_eq!(unkept.len(), 2, "helm {major}");
        for crd in &unkept {
            let annotations = &crd["metadata"]["annotations"];
            assert!(
                annotations.get("helm.sh/resource-policy").is_none()
                    && annotations.get("stagehand.dev/schema-digest").is_some(),
                "helm {major}: {annotations}"
            );
        }
        assert!(
            crds_of(&render(&["crds.install=false"])).is_empty(),
            "helm {major}: crds.install=false renders no CRD"
        );

        let applying = render(&["crdPolicy=apply", "crds.install=false"]);
        assert_eq!(env_of(&applying), "apply", "helm {major}");
        assert_eq!(
            crd_rule(&applying)["verbs"],
            serde_json::json!(["get", "patch"]),
            "helm {major}"
        );
        assert_eq!(
            crd_rule(&applying)["resourceNames"],
            serde_json::json!(["migrations.stagehand.dev", "migrationruns.stagehand.dev"])
        );
    }
}

/// Cluster-scoped objects of one test's release, deleted when dropped.
struct ClusterObjects(Vec<String>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for what in &self.0 {
            let mut args = vec!["delete"];
            args.extend(what.split(' '));
            args.extend(["--ignore-not-found", "--wait=false"]);
            let _ = kubectl(&args);
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
    for doc in serde_norway::Deserializer::from_str(&rendered) {
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
    for doc in serde_norway::Deserializer::from_str(&rendered) {
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
            // The CRD check's Events about cluster-scoped objects, in namespace default:
            // outside the test's namespace, so removed with the cluster-wide ones.
            "Role" | "RoleBinding" if v["metadata"]["namespace"] == "default" => {
                cluster.push(format!(
                    "{}/{name} --namespace=default",
                    kind.to_lowercase()
                ));
            }
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
    // The CRD check's Warning Event Degraded is about a cluster-scoped CRD, so it lives in
    // namespace default: a namespaced install may write Events there, and nowhere else
    // outside its namespace.
    let as_operator = format!("--as=system:serviceaccount:{}:{account}", ns.name);
    let can_event = |namespace: &str| {
        let out = kubectl(&[
            "auth",
            "can-i",
            "create",
            "events.events.k8s.io",
            "-n",
            namespace,
            &as_operator,
        ]);
        stdout(&out).trim() == "yes"
    };
    assert!(can_event("default"), "the Degraded Event of the CRD check");
    assert!(
        !can_event("kube-system"),
        "Events only where the operator needs them"
    );
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

/// The ```yaml blocks of docs/deploy.md: every one is a values file of the chart.
fn documented_values() -> Vec<String> {
    let docs = std::fs::read_to_string(root().join("docs/deploy.md")).unwrap();
    let blocks: Vec<String> = docs
        .split("```yaml\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap().to_string())
        .collect();
    assert!(
        blocks.len() >= 2,
        "docs/deploy.md shows the Secrets and the platform values: {blocks:?}"
    );
    blocks
}

/// The "Platform pieces" values of docs/deploy.md (the block with `extraVolumes`), written
/// to a file for `-f`; returns its path.
fn platform_values_file(name: &str) -> PathBuf {
    let block = documented_values()
        .into_iter()
        .find(|b| b.contains("extraVolumes:"))
        .expect("docs/deploy.md shows values with extraVolumes");
    let path = std::env::temp_dir().join(format!(
        "stagehand-values-{name}-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, block).unwrap();
    path
}

/// The documents `helm template` renders with `args` appended.
fn rendered(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", "stagehand", "deploy/charts/stagehand"];
    all.extend(args);
    let text = helm(&all);
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// `values.schema.json` refuses a key the chart does not know, naming it and where it is
/// (`helm lint --strict` and `helm template` alike), instead of ignoring a typo such as
/// `rbac.secretName`; the default values and every values block of docs/deploy.md pass.
#[test]
fn the_values_schema_refuses_an_unknown_key_naming_it() {
    for (set, at, key) in [
        ("rbac.secretName=x", "/rbac", "secretName"),
        ("replicas=2", "", "replicas"),
        ("serviceMonitor.enable=true", "/serviceMonitor", "enable"),
        ("networkPolicy.egress=x", "/networkPolicy", "egress"),
        ("resources.limit.memory=1Gi", "/resources", "limit"),
        ("crds.installed=false", "/crds", "installed"),
    ] {
        let lint = helm_output(&["lint", "--strict", "deploy/charts/stagehand", "--set", set]);
        let template = helm_output(&["template", "x", "deploy/charts/stagehand", "--set", set]);
        let wanted = format!("at '{at}': additional properties '{key}' not allowed");
        for (what, out) in [("helm lint --strict", &lint), ("helm template", &template)] {
            let text = format!("{}{}", stdout(out), stderr(out));
            assert!(
                !out.status.success() && text.contains(&wanted),
                "{what} --set {set} must fail naming {wanted:?}: {text}"
            );
        }
    }
    let wrong_type = helm_output(&[
        "template",
        "x",
        "deploy/charts/stagehand",
        "--set",
        "logFormat=xml",
    ]);
    assert!(
        !wrong_type.status.success() && stderr(&wrong_type).contains("/logFormat"),
        "{}",
        stderr(&wrong_type)
    );
    let wrong_policy = helm_output(&[
        "template",
        "x",
        "deploy/charts/stagehand",
        "--set",
        "crdPolicy=force",
    ]);
    assert!(
        !wrong_policy.status.success() && stderr(&wrong_policy).contains("/crdPolicy"),
        "{}",
        stderr(&wrong_policy)
    );
    helm(&["lint", "--strict", "deploy/charts/stagehand"]);
    for (i, block) in documented_values().iter().enumerate() {
        let path = std::env::temp_dir().join(format!(
            "stagehand-docs-values-{}-{i}.yaml",
            std::process::id()
        ));
        std::fs::write(&path, block).unwrap();
        let file = path.to_string_lossy().into_owned();
        helm(&["lint", "--strict", "deploy/charts/stagehand", "-f", &file]);
        helm(&["template", "x", "deploy/charts/stagehand", "-f", &file]);
        let _ = std::fs::remove_file(&path);
    }
}

/// What the chart renders besides the operator: a PodDisruptionBudget only with more than one
/// replica, ServiceMonitor/PodMonitor/NetworkPolicy only when enabled (scraping the port named
/// `metrics`; the policy's ingress only to the metrics and probe ports, egress to DNS, the API
/// server and the declared systems), the aggregated view/edit ClusterRoles, and the
/// storage-version ClusterRole only for a cluster-wide install.
#[test]
fn the_platform_pieces_render_only_when_asked() {
    let default = rendered(&["-n", "stagehand-system"]);
    for kind in [
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PodMonitor",
    ] {
        assert!(
            !default.iter().any(|d| d["kind"] == kind),
            "no {kind} by default"
        );
    }
    let storage = "stagehand-crd-storage-version";
    for watch in [
        &["-n", "stagehand-system"][..],
        &["-n", "x", "--set", "watchNamespace=opendesk"],
    ] {
        let docs = rendered(watch);
        assert!(
            named(&docs, "ClusterRole", storage).is_none()
                && named(&docs, "ClusterRoleBinding", storage).is_none(),
            "a namespaced install ({watch:?}) gets no storage-version ClusterRole"
        );
    }
    let cluster_wide = rendered(&["-n", "x", "--set", "watchNamespace=*"]);
    let rules = &named(&cluster_wide, "ClusterRole", storage)
        .expect("cluster-wide: storage-version ClusterRole")["rules"];
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "migrations"
                && r["verbs"].as_array().unwrap().contains(&"update".into())),
        "{rules}"
    );
    assert!(named(&cluster_wide, "ClusterRoleBinding", storage).is_some());

    let view =
        named(&default, "ClusterRole", "stagehand-view").expect("ClusterRole stagehand-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert_eq!(
        view["rules"],
        serde_json::json!([{"apiGroups": ["stagehand.dev"], "resources": ["migrations", "migrationruns"], "verbs": ["get", "list", "watch"]}])
    );
    let edit =
        named(&default, "ClusterRole", "stagehand-edit").expect("ClusterRole stagehand-edit");
    assert_eq!(
        edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    assert!(
        edit["rules"][0]["verbs"]
            .as_array()
            .unwrap()
            .contains(&"create".into()),
        "{edit}"
    );

    let two = rendered(&["-n", "s", "--set", "replicaCount=2"]);
    let pdb = two
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .expect("a PDB with 2 replicas");
    let deployment = named(&two, "Deployment", "stagehand").unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);
    let by_max = rendered(&[
        "-n",
        "s",
        "--set",
        "replicaCount=3",
        "--set",
        "podDisruptionBudget.maxUnavailable=1",
    ]);
    let pdb = by_max
        .iter()
        .find(|d| d["kind"] == "PodDisruptionBudget")
        .unwrap();
    assert!(
        pdb["spec"]["maxUnavailable"] == 1 && pdb["spec"]["minAvailable"].is_null(),
        "{pdb}"
    );

    let values = platform_values_file("render");
    let file = values.to_string_lossy().into_owned();
    let docs = rendered(&["-n", "s", "-f", &file, "--set", "podMonitor.enabled=true"]);
    let _ = std::fs::remove_file(&values);
    let service = named(&docs, "Service", "stagehand-metrics").unwrap();
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .expect("a ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"],
        service["spec"]["selector"]
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let pods = docs
        .iter()
        .find(|d| d["kind"] == "PodMonitor")
        .expect("a PodMonitor");
    let deployment = named(&docs, "Deployment", "stagehand").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics")
    );
    assert_eq!(pods["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    assert_eq!(pods["spec"]["selector"], deployment["spec"]["selector"]);
    let env: Vec<&Value> = container["env"].as_array().unwrap().iter().collect();
    let value_of = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        value_of("STAGEHAND_PROBE_ADDRESS"),
        Some("[::]:8080".into())
    );
    assert_eq!(
        value_of("STAGEHAND_METRICS_ADDRESS"),
        Some("[::]:9090".into())
    );

    let policy = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy");
    assert_eq!(
        policy["spec"]["podSelector"],
        deployment["spec"]["selector"]
    );
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    let ingress_ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["ports"][0]["port"])
        .collect();
    assert_eq!(
        ingress_ports,
        [&Value::from("metrics"), &Value::from("http-probes")]
    );
    let egress = policy["spec"]["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 3, "DNS, API server, openDesk: {egress:?}");
    assert_eq!(egress[0]["ports"][0]["port"], 53);
    assert_eq!(egress[1]["to"][0]["ipBlock"]["cidr"], "10.0.0.1/32");
    assert_eq!(
        egress[2]["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "opendesk"
    );

    let refused = helm_output(&[
        "template",
        "x",
        "deploy/charts/stagehand",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "metrics.service.enabled=false",
    ]);
    assert!(
        !refused.status.success()
            && stderr(&refused).contains("serviceMonitor.enabled needs metrics.service.enabled"),
        "{}",
        stderr(&refused)
    );
}

/// The pods of release `instance` in `ns`, as JSON objects.
fn pods_of(ns: &str, selector: &str) -> Vec<Value> {
    let out = kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "json"]);
    let list: Value = serde_json::from_str(&ok("get pods", &out)).unwrap();
    list["items"].as_array().unwrap().clone()
}

/// Pod Security `restricted`: in a namespace that enforces it, the chart's Deployment (with
/// the platform values of docs/deploy.md: a CA Secret mounted at /etc/stagehand/ca, two
/// replicas, the PDB, the NetworkPolicy) is admitted without a warning and its two pods are
/// created, mounting the CA; the same Deployment allowing privilege escalation is warned about
/// and its pods are refused, so the namespace does enforce.
#[tokio::test]
async fn the_deployment_with_a_ca_mounted_is_admitted_under_restricted_pod_security() {
    let ns = Scene::cluster_without_crds("psa").await;
    let ns = ns.name.clone();
    ok(
        "label the namespace",
        &kubectl(&[
            "label",
            "namespace",
            &ns,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/warn=restricted",
        ]),
    );
    create_secret(
        &ns,
        "opendesk-ca",
        "ca.crt",
        "-----BEGIN CERTIFICATE-----\n",
    );
    let values = platform_values_file(&ns);
    let file = values.to_string_lossy().into_owned();
    let docs = rendered(&["-n", &ns, "-f", &file]);
    let _ = std::fs::remove_file(&values);
    let namespaced: Vec<Value> = docs
        .into_iter()
        .filter(|d| {
            [
                "ServiceAccount",
                "Deployment",
                "PodDisruptionBudget",
                "NetworkPolicy",
                "Service",
            ]
            .contains(&d["kind"].as_str().unwrap_or_default())
        })
        .collect();
    assert_eq!(namespaced.len(), 5, "{namespaced:?}");
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": namespaced});
    let applied = kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()));
    ok("apply the chart's Deployment", &applied);
    assert!(
        !stderr(&applied).contains("PodSecurity"),
        "no Pod Security warning: {}",
        stderr(&applied)
    );
    let selector = "app.kubernetes.io/name=stagehand,app.kubernetes.io/instance=stagehand";
    wait_for(
        "the operator's 2 pods created",
        Duration::from_secs(90),
        || async { (pods_of(&ns, selector).len() == 2).then_some(()) },
    )
    .await;
    let pod = &pods_of(&ns, selector)[0];
    let spec = &pod["spec"];
    assert!(
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "ca" && v["secret"]["secretName"] == "opendesk-ca"),
        "the pod has the CA Secret as a volume: {spec}"
    );
    let container = &spec["containers"][0];
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "ca"
                && m["mountPath"] == "/etc/stagehand/ca"
                && m["readOnly"] == true),
        "the operator container mounts it read-only at /etc/stagehand/ca: {container}"
    );
    assert!(
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "SSL_CERT_FILE" && e["value"] == "/etc/stagehand/ca/ca.crt"),
        "{container}"
    );
    assert_eq!(
        container["args"],
        serde_json::json!(["operator", "--max-concurrent-runs=8"])
    );

    // The same Deployment, allowing privilege escalation: warned about, its pods refused.
    let mut escalating = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap()
        .clone();
    escalating["metadata"]["name"] = "escalating".into();
    escalating["spec"]["selector"]["matchLabels"]["variant"] = "escalating".into();
    escalating["spec"]["template"]["metadata"]["labels"]["variant"] = "escalating".into();
    escalating["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] =
        true.into();
    let applied = kubectl_stdin(&["apply", "-f", "-"], Some(&escalating.to_string()));
    ok("apply the escalating Deployment", &applied);
    assert!(
        stderr(&applied).contains(
            "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{}",
        stderr(&applied)
    );
    let refusal = wait_for(
        "the escalating pods refused",
        Duration::from_secs(90),
        || async {
            let out = kubectl(&[
                "get",
                "replicasets",
                "-n",
                &ns,
                "-l",
                "variant=escalating",
                "-o",
                "json",
            ]);
            let list: Value = serde_json::from_str(&stdout(&out)).ok()?;
            list["items"].as_array()?.iter().find_map(|rs| {
                rs["status"]["conditions"].as_array()?.iter().find_map(|c| {
                    (c["type"] == "ReplicaFailure")
                        .then(|| c["message"].as_str().unwrap_or_default().to_string())
                })
            })
        },
    )
    .await;
    assert!(
        refusal.contains("violates PodSecurity \"restricted:latest\""),
        "{refusal}"
    );
    assert!(pods_of(&ns, "variant=escalating").is_empty());
}

/// The aggregated ClusterRoles reach humans: whoever has `view` in a namespace may list
/// Migrations and MigrationRuns there but not create them; `edit` may create them; without a
/// binding nothing.
#[tokio::test]
async fn view_and_edit_reach_migrations_through_aggregation() {
    let ns = Scene::cluster("aggregate").await;
    let ns = ns.name.clone();
    let text = helm(&[
        "template",
        &ns,
        "deploy/charts/stagehand",
        "-n",
        &ns,
        "--show-only",
        "templates/rbac-aggregated.yaml",
    ]);
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let _guard = ClusterObjects(
        docs.iter()
            .map(|d| format!("clusterrole/{}", d["metadata"]["name"].as_str().unwrap()))
            .collect(),
    );
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    ok(
        "apply the aggregated roles",
        &kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string())),
    );
    for (user, role) in [("viewer", "view"), ("editor", "edit")] {
        ok(
            "bind",
            &kubectl(&[
                "create",
                "rolebinding",
                user,
                "-n",
                &ns,
                &format!("--clusterrole={role}"),
                &format!("--user={user}"),
            ]),
        );
    }
    let can = |user: &str, verb: &str, resource: &str| {
        let out = kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            "-n",
            &ns,
            &format!("--as={user}"),
        ]);
        stdout(&out).trim() == "yes"
    };
    wait_for(
        "the aggregation controller",
        Duration::from_secs(60),
        || async {
            (can("viewer", "list", "migrationruns.stagehand.dev")
                && can("editor", "create", "migrationruns.stagehand.dev"))
            .then_some(())
        },
    )
    .await;
    assert!(can("viewer", "watch", "migrations.stagehand.dev"));
    assert!(
        !can("viewer", "create", "migrationruns.stagehand.dev"),
        "view only reads"
    );
    assert!(can("editor", "patch", "migrations.stagehand.dev"));
    assert!(!can("nobody", "list", "migrationruns.stagehand.dev"));
}
