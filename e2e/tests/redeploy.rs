//! A new run per deployment (issue 13): runs created with `generateName`, as an Argo CD
//! PreSync hook or a pipeline creates them on every deployment. A tagged action runs once
//! (the next runs skip it, `FootprintRecorded`), an untagged one runs every time, and the
//! Migration keeps only its newest `runHistoryLimit` finished runs of the stage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, decisions, get, kubectl_stdin, ok, running_pods, statefulset, wait,
};

fn migration(ns: &str) -> String {
    let window = json!({"minimum": "v1.15", "from": "v1.15", "to": "v1.18"});
    Migration::new(ns)
        .installed("v1.17.3")
        .run_history_limit(2)
        .pre(
            Action::scale("once", 1)
                .tag("v1.18.0")
                .versions(window.clone()),
        )
        .pre(Action::scale("every", 1).versions(window))
        .to_yaml()
}

fn runs(ns: &str) -> Vec<Value> {
    get(ns, "migrationruns")["items"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_deployment_runs_untagged_actions_again_and_old_runs_are_deleted() {
    let ns = Scene::cluster("redeploy").await;
    apply(&statefulset(&ns.name, "once", 1));
    apply(&statefulset(&ns.name, "every", 1));
    running_pods(&ns.name, "once", 1).await;
    running_pods(&ns.name, "every", 1).await;
    apply(&migration(&ns.name));
    let _operator = ns.start_operator();
    wait(&ns.name, "migration/opendesk", "Ready");

    let mut names = Vec::new();
    for deployment in 1..=3 {
        let created = ok(
            "create run",
            &kubectl_stdin(
                &["create", "-o", "name", "-f", "-"],
                Some(&MigrationRun::generated(&ns.name, "opendesk-pre-", "pre").to_yaml()),
            ),
        );
        let name = created.trim().to_string();
        wait(&ns.name, &name, "Ready");
        let run = get(&ns.name, &name);
        let expected_tagged = if deployment == 1 {
            ("Succeeded", "InWindow")
        } else {
            ("Skipped", "FootprintRecorded")
        };
        let got = decisions(&run);
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str()),
            expected_tagged,
            "deployment {deployment}: the tagged action runs once: {got:?}"
        );
        assert_eq!(
            got[1].0, "Succeeded",
            "deployment {deployment}: the untagged action runs every time: {got:?}"
        );
        names.push(name);
    }

    // runHistoryLimit 2: the first run was deleted when the third finished.
    let mut left: Vec<String> = runs(&ns.name)
        .iter()
        .map(|r| {
            format!(
                "migrationrun.stagehand.dev/{}",
                r["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let mut expected = names[1..].to_vec();
    expected.sort();
    left.sort();
    assert_eq!(left, expected, "the newest 2 finished runs are kept");
}
