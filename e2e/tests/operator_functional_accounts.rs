//! The Functional → Shared Accounts pair run by the operator as pre and post MigrationRuns on
//! the local control plane, against a real MinIO and the UDM REST and OX SOAP simulators, with
//! every credential read from Secrets. The operator is killed between the two runs; a new one
//! runs the post stage. The end state is checked account by account.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use stagehand_e2e::functional_accounts::{World, small_fixture};
use stagehand_e2e::manifests::MigrationRun;
use stagehand_e2e::{Scene, apply, get, wait};

// Multi-threaded: the simulators serve from this process while the test blocks on kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_then_import_as_runs_with_the_operator_killed_in_between() {
    let ns = Scene::cluster("op-fa").await;
    let world = World::start().await;
    let (users, accounts) = small_fixture();
    let seeded = world.seed(&users, &accounts, true);
    world.create_secrets(&ns.name);
    let migration = world.migration(&ns.name);

    let mut operator = ns.start_operator();
    apply(&migration);
    apply(&MigrationRun::new(&ns.name, "pre", "pre").to_yaml());
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
    let handover = world.handover().expect("and wrote the handover first");
    assert_eq!(
        (handover.release.as_str(), handover.run.as_deref()),
        ("v1.18.0", Some("pre")),
        "the handover names the release and the run that wrote it"
    );
    world.assert_every_account_described(&seeded);

    // The operator dies between the stages; a new one runs the post stage.
    operator.kill();
    let _operator = ns.start_operator();
    apply(&MigrationRun::new(&ns.name, "post", "post").to_yaml());
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
