//! The Functional → Shared Accounts pair run by the operator as pre and post MigrationRuns on
//! the local control plane, against a real MinIO and the UDM REST and OX SOAP simulators, with
//! every credential read from Secrets. The operator is killed between the two runs; a new one
//! runs the post stage. The end state is checked account by account.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use stagehand_e2e::functional_accounts::{
    EXPORT, IMPORT, OX_PASSWORD, UDM_PASSWORD, World, small_fixture,
};
use stagehand_e2e::minio::BUCKET;
use stagehand_e2e::{
    OperatorProcess, TestNamespace, apply, client, get, install_crds, kubectl, ok, wait,
};

fn run(ns: &str, name: &str, stage: &str) -> String {
    format!(
        "apiVersion: stagehand.dev/v1beta1\nkind: MigrationRun\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{migrationRef: opendesk, stage: {stage}, release: v1.18.0}}\n"
    )
}

fn secret(ns: &str, name: &str, key: &str, value: &str) {
    ok(
        "secret",
        &kubectl(&[
            "create",
            "secret",
            "generic",
            name,
            "-n",
            ns,
            &format!("--from-literal={key}={value}"),
        ]),
    );
}

// Multi-threaded: the simulators serve from this process while the test blocks on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_as_runs_with_the_operator_killed_in_between() {
    let client = client().await;
    install_crds();
    let ns = TestNamespace::new(&client, "op-fa").await;
    let world = World::start().await;
    let (users, accounts) = small_fixture();
    let seeded = world.seed(&users, &accounts, true);
    let store = world.ctx.object_store.clone().unwrap();

    secret(&ns.name, "ums-ldap-server-admin", "password", UDM_PASSWORD);
    secret(
        &ns.name,
        "opendesk-ox-admin-password",
        "password",
        OX_PASSWORD,
    );
    secret(
        &ns.name,
        "objectstore-migrations-secret-key",
        "secretKey",
        world.minio.secret_key(),
    );
    let export = serde_json::to_string(&world.export_config(json!({}))).unwrap();
    let import = serde_json::to_string(&world.import_config(json!({}))).unwrap();
    let migration = format!(
        r#"apiVersion: stagehand.dev/v1beta1
kind: Migration
metadata: {{name: opendesk, namespace: {ns}}}
spec:
  releaseVersion: "v1.18.0"
  installedRelease: "v1.17.3"
  secretFiles:
    - name: udm-admin-password
      secret: {{name: ums-ldap-server-admin, key: password}}
    - name: ox-master-password
      secret: {{name: opendesk-ox-admin-password, key: password}}
    - name: objectstore-migrations-secret-key
      secret: {{name: objectstore-migrations-secret-key, key: secretKey}}
  objectStore:
    endpoint: "{endpoint}"
    bucket: {BUCKET}
    pathStyle: true
    accessKeyId: "{access}"
    secretKeyFile: objectstore-migrations-secret-key
  actions:
    pre:
      - id: {EXPORT}
        tag: "v1.18.0"
        runMode: apply
        versions: {{minimum: "v1.15", from: "v1.15", to: "v1.17"}}
        config: {export}
    post:
      - id: {IMPORT}
        tag: "v1.18.0"
        runMode: apply
        versions: {{minimum: "v1.15", from: "v1.15", to: "v1.17"}}
        config: {import}
"#,
        ns = ns.name,
        endpoint = store.endpoint,
        access = store.access_key_id,
    );

    let mut operator = OperatorProcess::start(&ns.name);
    apply(&migration);
    apply(&run(&ns.name, "pre", "pre"));
    wait(&ns.name, "migrationrun/pre", "Ready");
    let pre = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        pre["status"]["actions"][0]["decision"], "Succeeded",
        "{pre}"
    );
    assert!(
        world.functional_accounts().is_empty(),
        "the export deleted every Functional Account"
    );
    assert!(world.handover().is_some(), "and wrote the handover first");
    world.assert_every_account_described(&seeded);

    // The operator dies between the stages; a new one runs the post stage.
    operator.kill();
    let _operator = OperatorProcess::start(&ns.name);
    apply(&run(&ns.name, "post", "post"));
    wait(&ns.name, "migrationrun/post", "Ready");
    let post = get(&ns.name, "migrationrun/post");
    assert_eq!(
        post["status"]["actions"][0]["decision"], "Succeeded",
        "{post}"
    );
    world.assert_imported_exactly(&seeded);
    assert_eq!(
        get(&ns.name, "migration/opendesk")["status"]["lastMigratedRelease"],
        "v1.18.0"
    );
    let history = get(&ns.name, "migration/opendesk")["status"]["history"].clone();
    assert_eq!(history.as_array().unwrap().len(), 2, "{history}");
}
