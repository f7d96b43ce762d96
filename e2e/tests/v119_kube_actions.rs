//! openDesk v1.19's Kubernetes actions against the real API server: `configmap_create` (the
//! `element-markers` marker) and `synapse_signing_key_export` (a real Synapse signing key, made
//! by Synapse's own `generate_signing_key`, read through the Kubernetes exec API from a pod of
//! the local exec node into the Secret matrix-tools reads).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, ObjectMeta};
use serde_json::{Value, json};
use stagehand_actions::action::{Action, ActionContext, ActionError, Secrets};
use stagehand_actions::clients::labelled::{Created, create_or_read};
use stagehand_actions::synapse_signing_key_export::key_file;
use stagehand_e2e::exec_node::LocalExecNode;
use stagehand_e2e::secrets::CapturedLogs;
use stagehand_e2e::{Scene, kubectl_stdin, ok, running_pods};

const MARKER_LABEL: &str = "app.kubernetes.io/managed-by";

fn action(id: &str, config: Value) -> Box<dyn Action> {
    match stagehand_actions::instantiate(id, &config) {
        Ok(a) => a,
        Err(e) => panic!("instantiate {id}: {e}"),
    }
}

fn ctx(client: &Client, ns: &str) -> ActionContext {
    ActionContext {
        client: client.clone(),
        namespace: ns.to_string(),
        secrets: Secrets::default(),
        object_store: None,
        run: Default::default(),
        stop: Default::default(),
        approved_findings: None,
        warnings: stagehand_actions::action::Warnings::default(),
        progress: Default::default(),
    }
}

/// openDesk v1.19's `configmap_create` config, for the ConfigMap `name`.
fn marker(name: &str) -> Value {
    json!({"configmap": {
        "name": name,
        "data": {"MATRIX_STACK_MSC3861": "legacy_auth"},
        "labels": {MARKER_LABEL: "matrix-tools-deployment-markers"}
    }})
}

fn create(ns: &str, object: Value) {
    ok(
        "kubectl create",
        &kubectl_stdin(&["create", "-n", ns, "-f", "-"], Some(&object.to_string())),
    );
}

async fn configmap(client: &Client, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

async fn secret(client: &Client, ns: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn version<K: kube::Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap()
}

#[tokio::test]
async fn configmap_create_creates_the_marker_once_and_never_overwrites_another() {
    let scene = Scene::cluster_without_crds("v119-cm").await;
    let (client, ns) = (scene.client().clone(), scene.namespace().to_string());
    let c = ctx(&client, &ns);
    let markers = action("configmap_create", marker("element-markers"));

    // Absent: preflight and plan prove the create (a server-side dry run) and change nothing.
    markers.preflight(&c).await.unwrap();
    let plan = markers.plan(&c).await.unwrap().summary;
    assert_eq!(
        plan,
        format!(
            "ConfigMap {ns}/element-markers would be created with MATRIX_STACK_MSC3861=legacy_auth; labels {MARKER_LABEL}=matrix-tools-deployment-markers (a server-side dry run accepted it)"
        )
    );
    assert!(configmap(&client, &ns, "element-markers").await.is_none());

    // Apply creates it with the data and the labels; the summary is the server's answer.
    let applied = markers.apply(&c).await.unwrap().summary;
    let cm = configmap(&client, &ns, "element-markers").await.unwrap();
    assert_eq!(
        applied,
        format!(
            "ConfigMap {ns}/element-markers created (resourceVersion {}): MATRIX_STACK_MSC3861=legacy_auth; labels {MARKER_LABEL}=matrix-tools-deployment-markers",
            version(&cm)
        )
    );
    assert_eq!(
        cm.data.clone().unwrap(),
        BTreeMap::from([(
            "MATRIX_STACK_MSC3861".to_string(),
            "legacy_auth".to_string()
        )])
    );
    assert_eq!(
        cm.metadata.labels.clone().unwrap()[MARKER_LABEL],
        "matrix-tools-deployment-markers"
    );

    // A rerun (preflight, plan, apply) finds it as configured and changes nothing.
    markers.preflight(&c).await.unwrap();
    assert!(
        markers
            .plan(&c)
            .await
            .unwrap()
            .summary
            .contains("is already present with the configured data and labels")
    );
    let again = markers.apply(&c).await.unwrap().summary;
    assert_eq!(
        again,
        format!(
            "ConfigMap {ns}/element-markers is already present with the configured data and labels (resourceVersion {}): nothing changed",
            version(&cm)
        )
    );
    assert_eq!(
        version(&configmap(&client, &ns, "element-markers").await.unwrap()),
        version(&cm)
    );

    // A create that loses the race (409 AlreadyExists) reads the winner back for the rule.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let duplicate = ConfigMap {
        metadata: ObjectMeta {
            name: Some("element-markers".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    match create_or_read(&api, &duplicate, "ConfigMap element-markers", "rule")
        .await
        .unwrap()
    {
        Created::Existing(found) => assert_eq!(version(&found), version(&cm)),
        Created::New(_) => panic!("the name was taken: the server must answer 409"),
    }

    // Another marker value (a deployment already migrated) and an extra key: every phase
    // fails naming the keys and both values, and the ConfigMap is left as it was.
    create(
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "migrated", "labels": {MARKER_LABEL: "matrix-tools-deployment-markers"}},
               "data": {"MATRIX_STACK_MSC3861": "delegated_auth", "NOTE": "by hand"}}),
    );
    let before = configmap(&client, &ns, "migrated").await.unwrap();
    let other = action("configmap_create", marker("migrated"));
    let preflight = other.preflight(&c).await.unwrap_err();
    let planned = other.plan(&c).await.unwrap_err();
    let applied = other.apply(&c).await.unwrap_err();
    for e in [&preflight, &planned, &applied] {
        assert!(matches!(e, ActionError::Conflict(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "ConfigMap {ns}/migrated already exists with other data: MATRIX_STACK_MSC3861 is \"delegated_auth\", configured \"legacy_auth\"; NOTE is not configured (it holds \"by hand\"). Stagehand never overwrites an existing ConfigMap"
            )),
            "{text}"
        );
    }
    let after = configmap(&client, &ns, "migrated").await.unwrap();
    assert_eq!(version(&after), version(&before));
    assert_eq!(after.data, before.data);

    // The right data without the managed-by label: refused naming the label, untouched.
    create(
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unlabelled"},
               "data": {"MATRIX_STACK_MSC3861": "legacy_auth"}}),
    );
    let before = configmap(&client, &ns, "unlabelled").await.unwrap();
    let unlabelled = action("configmap_create", marker("unlabelled"));
    let e = unlabelled.preflight(&c).await.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "ConfigMap {ns}/unlabelled lacks the label {MARKER_LABEL}=matrix-tools-deployment-markers (absent)"
        )) && e.ends_with(&format!(
            "add the label (kubectl -n {ns} label configmap unlabelled {MARKER_LABEL}=matrix-tools-deployment-markers) and run the stage again"
        )),
        "{e}"
    );
    unlabelled.apply(&c).await.unwrap_err();
    let after = configmap(&client, &ns, "unlabelled").await.unwrap();
    assert_eq!(version(&after), version(&before));
    assert_eq!(after.metadata.labels, before.metadata.labels);
}

/// A signing key made by Synapse's own generator (the venv of `stagehand_e2e::synapse`), at
/// `path`; returns the file's text.
fn generate_key(path: &Path) -> String {
    let bin = stagehand_e2e::synapse::venv().join("bin/generate_signing_key");
    let out = Command::new(&bin)
        .arg("-o")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    assert!(out.status.success(), "{}: {out:?}", bin.display());
    std::fs::read_to_string(path).unwrap()
}

/// The base64 seed of a key file's first line.
fn seed(file: &str) -> String {
    file.split_whitespace().nth(2).unwrap().to_string()
}

/// The key id of a key file's first line, as the action names it.
fn key_name(file: &str) -> String {
    let fields: Vec<&str> = file.split_whitespace().collect();
    format!("{}:{}", fields[0], fields[1])
}

fn export(path: &Path, secret: &str) -> Box<dyn Action> {
    action(
        "synapse_signing_key_export",
        json!({
            "source": {"pod": "opendesk-synapse-0", "container": "synapse", "path": path},
            "target": {"secret": secret, "key": "SYNAPSE_SIGNING_KEY",
                       "labels": {MARKER_LABEL: "matrix-tools-init-secrets"}}
        }),
    )
}

fn held(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["SYNAPSE_SIGNING_KEY"]
        .0
        .clone()
}

#[tokio::test]
async fn the_signing_key_is_exported_through_the_exec_api_and_never_shown() {
    let scene = Scene::cluster_without_crds("v119-key").await;
    let (client, ns) = (scene.client().clone(), scene.namespace().to_string());
    let node = LocalExecNode::start_for(&["synapse"]);
    ok(
        "create pod",
        &kubectl_stdin(
            &["create", "-n", &ns, "-f", "-"],
            Some(&node.pod_with(
                "opendesk-synapse-0",
                &[("app", "opendesk-synapse")],
                &["synapse"],
            )),
        ),
    );
    running_pods(&ns, "opendesk-synapse", 1).await;
    let dir: PathBuf = std::env::temp_dir().join(format!("sh-v119-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("signingKey");
    let old = generate_key(&path);
    let c = ctx(&client, &ns);
    let log = CapturedLogs::start();
    let mut shown: Vec<String> = Vec::new();
    let exporter = export(&path, "element-generated");
    let where_ = format!(
        "{} in container synapse of pod {ns}/opendesk-synapse-0",
        path.display()
    );

    // Absent: preflight and plan read the key through the exec API, prove the create with a
    // server-side dry run, and change nothing.
    exporter.preflight(&c).await.unwrap();
    let plan = exporter.plan(&c).await.unwrap();
    assert_eq!(
        plan.summary,
        format!(
            "Secret {ns}/element-generated would be created with the labels and the signing key {} under SYNAPSE_SIGNING_KEY (a server-side dry run accepted it); read from {where_}",
            key_name(&old)
        )
    );
    shown.push(format!("{plan:?}"));
    assert!(secret(&client, &ns, "element-generated").await.is_none());

    // Apply creates it: the file as Synapse wrote it, the labels, the key named by id only.
    let applied = exporter.apply(&c).await.unwrap();
    shown.push(format!("{applied:?}"));
    let created = secret(&client, &ns, "element-generated").await.unwrap();
    assert_eq!(held(&created), old.as_bytes());
    assert_eq!(
        created.metadata.labels.clone().unwrap()[MARKER_LABEL],
        "matrix-tools-init-secrets"
    );
    assert_eq!(
        applied.summary,
        format!(
            "Secret {ns}/element-generated created with the labels (resourceVersion {}): signing key {} under SYNAPSE_SIGNING_KEY, read from {where_}",
            version(&created),
            key_name(&old)
        )
    );
    // Synapse reads back what the Secret holds as the same key.
    assert_eq!(
        key_file::parse(&held(&created)).unwrap(),
        key_file::parse(old.as_bytes()).unwrap()
    );

    // The equal key: success, nothing changed.
    exporter.preflight(&c).await.unwrap();
    let again = exporter.apply(&c).await.unwrap();
    shown.push(format!("{again:?}"));
    assert!(
        again.summary.contains("already holds it, nothing changed"),
        "{}",
        again.summary
    );
    assert_eq!(
        version(&secret(&client, &ns, "element-generated").await.unwrap()),
        version(&created)
    );

    // Another key in the pod (a new Synapse would have minted one): every phase fails naming
    // both keys by id, and the Secret keeps the old key.
    let new = generate_key(&path);
    assert_ne!(seed(&new), seed(&old));
    let preflight = exporter.preflight(&c).await.unwrap_err();
    let planned = exporter.plan(&c).await.unwrap_err();
    let refused = exporter.apply(&c).await.unwrap_err();
    for e in [&preflight, &planned, &refused] {
        assert!(matches!(e, ActionError::Conflict(_)), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "Secret {ns}/element-generated already holds another signing key under SYNAPSE_SIGNING_KEY: {} there, {} in {where_}. Nothing was changed",
                key_name(&old),
                key_name(&new)
            )),
            "{e}"
        );
        shown.push(format!("{e} {e:?}"));
    }
    let kept = secret(&client, &ns, "element-generated").await.unwrap();
    assert_eq!(version(&kept), version(&created));
    assert_eq!(held(&kept), old.as_bytes());

    // A labelled Secret without the key gets it, its other data kept.
    create(
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "element-labelled", "labels": {MARKER_LABEL: "matrix-tools-init-secrets"}},
               "stringData": {"OTHER": "kept"}}),
    );
    let labelled = export(&path, "element-labelled");
    labelled.preflight(&c).await.unwrap();
    let added = labelled.apply(&c).await.unwrap();
    shown.push(format!("{added:?}"));
    let s = secret(&client, &ns, "element-labelled").await.unwrap();
    assert_eq!(held(&s), new.as_bytes());
    assert_eq!(s.data.as_ref().unwrap()["OTHER"].0, b"kept");
    assert!(added.summary.contains("given the key"), "{}", added.summary);

    // An unlabelled Secret without the key: refused naming the label, untouched.
    create(
        &ns,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "element-foreign"},
               "stringData": {"OTHER": "kept"}}),
    );
    let before = secret(&client, &ns, "element-foreign").await.unwrap();
    let foreign = export(&path, "element-foreign");
    let e = foreign.preflight(&c).await.unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "Secret {ns}/element-foreign lacks the label {MARKER_LABEL}=matrix-tools-init-secrets (absent)"
        )),
        "{e}"
    );
    shown.push(format!("{e} {:?}", foreign.apply(&c).await.unwrap_err()));
    assert_eq!(
        version(&secret(&client, &ns, "element-foreign").await.unwrap()),
        version(&before)
    );

    // A file that is not a key file: the pod and path and the line, never the content.
    let bad_path = dir.join("notAKey");
    std::fs::write(&bad_path, format!("{}\nnot a key\n", new.trim_end())).unwrap();
    let e = export(&bad_path, "element-generated")
        .preflight(&c)
        .await
        .unwrap_err();
    assert!(matches!(e, ActionError::InvalidAnswer(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "the file {} in container synapse of pod {ns}/opendesk-synapse-0 is not a Synapse signing key file: line 2: the algorithm is not ed25519, the only one Synapse reads; set source.path to the old Synapse's signing key (its homeserver.yaml names it as signing_key_path)",
            bad_path.display()
        )
    );
    shown.push(format!("{e} {e:?}"));
    // A path that does not exist: NotFound naming it.
    let e = export(&dir.join("missing"), "element-generated")
        .plan(&c)
        .await
        .unwrap_err();
    assert!(matches!(e, ActionError::NotFound(_)), "{e:?}");
    assert!(
        e.to_string().contains(&format!(
            "{} in container synapse of pod {ns}/opendesk-synapse-0 failed (",
            dir.join("missing").display()
        )),
        "{e}"
    );
    shown.push(format!("{e}"));

    // The key's value is in the Secret only: in no outcome, error or log line.
    let logged = log.text();
    assert!(
        logged.contains("exec") || logged.contains("secrets"),
        "the capture sees the kube client's requests:\n{logged}"
    );
    let texts = shown.join("\n");
    for key in [&old, &new] {
        let value = seed(key);
        assert!(
            !texts.contains(&value),
            "a key leaked into an outcome or error:\n{texts}"
        );
        assert!(!logged.contains(&value), "a key leaked into the log");
        assert!(!node.log().contains(&value), "a key leaked into kwok's log");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
