//! Tenancy (docs/deploy.md#tenancy-and-the-threat-model) on the local kube-apiserver: a run
//! whose Migration names `serviceAccountName` reads its `secretFiles` Secrets as that
//! ServiceAccount (impersonated), not with the operator's rights. The operator here runs with
//! the test control plane's admin kubeconfig, so it could read every Secret itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, condition, create_secret, get, kubectl, ok, running_pods, statefulset, stderr,
    stdout, wait,
};

/// A ServiceAccount `tenant` that may scale the StatefulSet `ox-connector` (the workload rules
/// of the chart's Role) and, with `secret`, read that Secret.
fn tenant_rbac(ns: &str, secret: Option<&str>) {
    let secret_rule = secret
        .map(|s| {
            format!(
                r#"{{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["{s}"]}},"#
            )
        })
        .unwrap_or_default();
    let list = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {{"name": "tenant", "namespace": "{ns}"}}}},
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {{"name": "tenant", "namespace": "{ns}"}},
    "rules": [{secret_rule}
      {{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]}},
      {{"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["get", "patch"]}},
      {{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}}]}},
  {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {{"name": "tenant", "namespace": "{ns}"}},
    "roleRef": {{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"}},
    "subjects": [{{"kind": "ServiceAccount", "name": "tenant", "namespace": "{ns}"}}]}}]}}"#
    );
    ok(
        "apply the tenant's RBAC",
        &stagehand_e2e::kubectl_stdin(&["apply", "-f", "-"], Some(&list)),
    );
}

fn migration(ns: &str, run: &str) {
    apply(
        &Migration::new(ns)
            .installed("v1.17.3")
            .service_account("tenant")
            .secret_file("redis-password", "tenant-redis", "password")
            .pre(
                Action::scale("ox-connector", 0)
                    .tag("v1.18.0")
                    .run_mode("apply"),
            )
            .to_yaml(),
    );
    apply(&MigrationRun::new(ns, run, "pre").to_yaml());
}

/// The ServiceAccount may not read the Secret its Migration's `secretFiles` names: the run ends
/// `PreflightFailed` naming the Secret and the ServiceAccount, although the operator (admin)
/// could read it, and nothing is scaled. With a Role granting the Secret, the next run scales.
#[tokio::test]
async fn a_run_reads_secrets_with_its_service_account_s_rights_not_the_operator_s() {
    let ns = Scene::cluster("tenancy").await;
    let value = format!("tenant-{}-S3cret", std::process::id());
    create_secret(&ns.name, "tenant-redis", "password", &value);
    tenant_rbac(&ns.name, None);
    // The operator's own view: it reads the Secret; the tenant's does not.
    ok(
        "get the Secret as the operator",
        &kubectl(&["get", "secret/tenant-redis", "-n", &ns.name, "-o", "name"]),
    );
    let as_tenant = format!("--as=system:serviceaccount:{}:tenant", ns.name);
    let out = kubectl(&["get", "secret/tenant-redis", "-n", &ns.name, &as_tenant]);
    assert!(
        !out.status.success() && stderr(&out).contains("(Forbidden)"),
        "the tenant must not read the Secret: {}{}",
        stdout(&out),
        stderr(&out)
    );

    let _operator = ns.start_operator();
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    migration(&ns.name, "pre");
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    let stalled = condition(&pre, "Stalled");
    assert_eq!(stalled["reason"], "PreflightFailed", "{pre}");
    let message = stalled["message"].as_str().unwrap();
    let expected = format!(
        "secret file \"redis-password\": system:serviceaccount:{ns}:tenant (the run's ServiceAccount) may not read Secret {ns}/tenant-redis (403 Forbidden: ",
        ns = ns.name
    );
    assert!(
        message.contains(&expected)
            && message
                .contains("grant that ServiceAccount get on secrets, resourceNames [tenant-redis]"),
        "the message names the Secret, the ServiceAccount and the rule: {message}"
    );
    assert!(!message.contains(&value), "{message}");
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 1, "nothing was scaled: {sts}");

    // Granting the ServiceAccount the Secret lets the next run go on.
    tenant_rbac(&ns.name, Some("tenant-redis"));
    apply(&MigrationRun::new(&ns.name, "pre-2", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre-2", "Ready");
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 0, "{sts}");
}

/// `--default-service-account`: a Migration that names none runs as that ServiceAccount of
/// its namespace, never with the operator's rights; a missing Secret rule stops it the same way.
#[tokio::test]
async fn the_default_service_account_applies_when_the_migration_names_none() {
    let ns = Scene::cluster("tenancy-default").await;
    create_secret(&ns.name, "tenant-redis", "password", "irrelevant-S3cret");
    tenant_rbac(&ns.name, None);
    let _operator = ns.start_operator_with(
        &stagehand_e2e::cluster::kubeconfig(),
        &["--default-service-account", "tenant"],
    );
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("redis-password", "tenant-redis", "password")
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
    assert!(
        message.contains(&format!(
            "system:serviceaccount:{}:tenant (the run's ServiceAccount) may not read Secret {}/tenant-redis",
            ns.name, ns.name
        )),
        "{message}"
    );
}

/// `--allowed-endpoints`: a Migration whose action names a host the operator does not allow
/// is invalid: the run ends `Invalid` with
/// the problem `EndpointNotAllowed` naming the stage, the action, the key, the host and the
/// allowed patterns, and nothing ran (the scale declared before it did not scale). An action
/// whose endpoint is allowed is no problem.
#[tokio::test]
async fn an_endpoint_outside_the_allowed_ones_is_a_declaration_problem_and_nothing_runs() {
    let ns = Scene::cluster("tenancy-endpoints").await;
    let _operator = ns.start_operator_with(
        &stagehand_e2e::cluster::kubeconfig(),
        &["--allowed-endpoints", "*.allowed.test"],
    );
    apply(&statefulset(&ns.name, "ox-connector", 1));
    running_pods(&ns.name, "ox-connector", 1).await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .secret_file("provisioning-api-password", "provisioning", "password")
            .secret_file("redis-password", "redis", "password")
            .pre(
                Action::scale("ox-connector", 0)
                    .tag("v1.18.0")
                    .run_mode("apply"),
            )
            .pre(
                Action::new("flush_intercom_sessions")
                    .tag("v1.18.0")
                    .config(serde_json::json!({"redis": {"host": "redis.allowed.test"}})),
            )
            .pre(
                Action::new("provisioning_drop_subscriptions")
                    .tag("v1.18.0")
                    .config(serde_json::json!({
                        "provisioning": {"url": "https://provisioning.other.test/v1"},
                        "subscriptions": ["ox-connector"],
                    })),
            )
            .to_yaml(),
    );
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
    wait(&ns.name, "migrationrun/pre", "Stalled");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(condition(&pre, "Ready")["reason"], "Invalid", "{pre}");
    let problems = pre["status"]["problems"].as_array().unwrap();
    let found: Vec<(&str, &str, &str)> = problems
        .iter()
        .map(|p| {
            (
                p["code"].as_str().unwrap(),
                p["field"].as_str().unwrap_or(""),
                p["id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        found,
        [(
            "EndpointNotAllowed",
            "config.provisioning.url",
            "provisioning_drop_subscriptions"
        )],
        "{pre}"
    );
    assert_eq!(problems[0]["stage"], "pre", "{pre}");
    assert_eq!(problems[0]["index"], 2, "{pre}");
    let message = condition(&pre, "Stalled")["message"].as_str().unwrap();
    assert!(
        message.contains("EndpointNotAllowed actions.pre[2] (provisioning_drop_subscriptions) config.provisioning.url: the endpoint provisioning.other.test:443 (provisioning.url) is not allowed by the operator's --allowed-endpoints (*.allowed.test)")
            && message.contains("nothing was executed"),
        "{message}"
    );
    assert_eq!(pre["status"]["actions"], serde_json::json!([]), "{pre}");
    let sts = get(&ns.name, "statefulset/ox-connector");
    assert_eq!(sts["spec"]["replicas"], 1, "nothing was scaled: {sts}");
}
