//! A plan a person approves (issue 14): a `Manual` run plans, runs its preflight, writes its
//! frozen plan and digest and waits (`AwaitingApproval`, kstatus InProgress) with nothing
//! changed; an approval of another digest is refused in its condition; `stagehand approve`
//! prints the plan and approves it only when confirmed; then the run executes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    OperatorProcess, TestNamespace, apply, client, condition, get, install_crds, kubectl, ok,
    replicas, running_pods, stagehand_stdin, statefulset, stderr, stdout, wait, wait_for,
};

/// `stagehand approve ARGS` with `input` on stdin.
fn approve(args: &[&str], input: &str) -> std::process::Output {
    let args: Vec<&str> = std::iter::once("approve")
        .chain(args.iter().copied())
        .collect();
    stagehand_stdin(&args, input)
}

async fn message_contains(ns: &str, what: &str, text: &str) -> Value {
    wait_for(
        &format!("{what}'s Ready message containing {text:?}"),
        Duration::from_secs(60),
        || async {
            let obj = get(ns, what);
            // Until the operator's first status write the run has no condition yet.
            let has = obj["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Ready" && c["message"].as_str().is_some_and(|m| m.contains(text))
                })
            });
            has.then_some(obj)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_run_waits_for_the_approval_of_its_own_plan() {
    let client = client().await;
    install_crds();
    let ns = TestNamespace::new(&client, "approval").await;
    apply(&statefulset(&ns.name, "ums", 2));
    running_pods(&ns.name, "ums", 2).await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::scale("ums", 0).tag("v1.18.0"))
            .to_yaml(),
    );
    let _operator = OperatorProcess::start(&ns.name);
    apply(
        &MigrationRun::new(&ns.name, "pre", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    let run = message_contains(&ns.name, "migrationrun/pre", "waiting for approval of plan").await;
    let ready = condition(&run, "Ready");
    assert_eq!(ready["reason"], "AwaitingApproval", "{run}");
    assert_eq!(ready["status"], "False");
    assert_eq!(
        condition(&run, "Reconciling")["status"],
        "True",
        "InProgress to kstatus"
    );
    assert_eq!(condition(&run, "Stalled")["status"], "False");
    let digest = run["status"]["frozenPlan"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(digest.starts_with("sha256:"), "{digest}");
    assert!(ready["message"].as_str().unwrap().contains(&digest));
    assert_eq!(run["status"]["actions"][0]["decision"], "Run", "planned");
    assert!(
        run["status"]["actions"][0]["startTime"].is_null(),
        "not started"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        replicas(&ns.name, "ums"),
        2,
        "nothing changed before the approval"
    );

    // An approval of another plan is refused, and the run keeps waiting.
    ok(
        "annotate",
        &kubectl(&[
            "annotate",
            "migrationrun/pre",
            "-n",
            &ns.name,
            "stagehand.dev/approve-plan=sha256:0000",
        ]),
    );
    let run = message_contains(
        &ns.name,
        "migrationrun/pre",
        "the approval names plan sha256:0000",
    )
    .await;
    assert_eq!(condition(&run, "Ready")["reason"], "AwaitingApproval");
    assert_eq!(replicas(&ns.name, "ums"), 2);

    // `stagehand approve`: a digest the reviewer did not see, and no confirmation, approve
    // nothing; each prints the plan first.
    let out = approve(
        &[
            "migrationrun/pre",
            "-n",
            &ns.name,
            "--digest",
            "sha256:1111",
        ],
        "y\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("workload_scale"),
        "the plan is printed: {}",
        stdout(&out)
    );
    assert!(stdout(&out).contains(&digest));
    let out = approve(&["migrationrun/pre", "-n", &ns.name], "n\n");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not confirmed"), "{}", stderr(&out));
    assert_eq!(replicas(&ns.name, "ums"), 2);
    let out = approve(&["pod/x"], "");
    assert_eq!(out.status.code(), Some(2));

    // Confirmed: the annotation names the plan's digest and the run executes it.
    let out = approve(&["migrationrun/pre", "-n", &ns.name], "y\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("plan {digest} approved")),
        "{}",
        stdout(&out)
    );
    wait(&ns.name, "migrationrun/pre", "Ready");
    assert_eq!(replicas(&ns.name, "ums"), 0, "the approved plan ran");
    let run = get(&ns.name, "migrationrun/pre");
    assert_eq!(
        run["metadata"]["annotations"]["stagehand.dev/approve-plan"], digest,
        "{run}"
    );
    // Finished: nothing left to approve.
    let out = approve(&["migrationrun/pre", "-n", &ns.name, "--yes"], "");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}
