//! A plan a person approves (issue 14): a `Manual` run plans, runs its preflight, writes its
//! frozen plan and digest and waits (`AwaitingApproval`, kstatus InProgress) with nothing
//! changed; an approval of another digest is refused in its condition; `stagehand approve`
//! prints the plan and approves it only when confirmed; then the run executes.
//!
//! Issue 26: the approved digest covers what the plan was computed from (the history ledger,
//! `installedRelease`): a ledger edited after the approval makes the run plan again and wait
//! for the approval of the new digest; `stagehand approve` annotates only the run it read
//! (its uid and resourceVersion as preconditions), never one recreated under the same name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    OperatorProcess, Scene, apply, condition, get, kubeconfig, kubectl, ok, replicas, running_pods,
    stagehand_bin, stagehand_stdin, statefulset, stderr, stdout, wait, wait_for,
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
    let ns = Scene::cluster("approval").await;
    apply(&statefulset(&ns.name, "ums", 2));
    running_pods(&ns.name, "ums", 2).await;
    apply(
        &Migration::new(&ns.name)
            .installed("v1.17.3")
            .pre(Action::scale("ums", 0).tag("v1.18.0"))
            .to_yaml(),
    );
    let _operator = ns.start_operator();
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

/// A Migration adopting v1.17.3 whose pre stage scales `ums` to 0 (tagged v1.18.0), a Manual
/// pre run of it awaiting approval, and the operator; the run's status.
async fn awaiting(ns: &str) -> (OperatorProcess, Value) {
    apply(&statefulset(ns, "ums", 2));
    running_pods(ns, "ums", 2).await;
    apply(
        &Migration::new(ns)
            .installed("v1.17.3")
            .pre(Action::scale("ums", 0).tag("v1.18.0"))
            .to_yaml(),
    );
    let operator = OperatorProcess::start(ns);
    apply(
        &MigrationRun::new(ns, "pre", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    let run = message_contains(ns, "migrationrun/pre", "waiting for approval of plan").await;
    (operator, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_edited_after_the_approval_makes_the_run_wait_for_its_new_plan() {
    let ns = Scene::cluster("approval-ledger").await;
    let (mut operator, run) = awaiting(&ns.name).await;
    let approved = run["status"]["frozenPlan"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        run["status"]["frozenPlan"]["lastMigratedRelease"],
        "v1.17.3"
    );
    assert_eq!(run["status"]["frozenPlan"]["installedRelease"], "v1.17.3");
    assert!(run["status"]["frozenPlan"]["footprints"].is_null(), "{run}");
    assert_eq!(run["status"]["actions"][0]["decision"], "Run");

    // Approved while the operator is down; then the history says the action already ran
    // (an import, a restored ledger): running it again is what the approval did not cover.
    operator.terminate();
    let out = approve(&["migrationrun/pre", "-n", &ns.name, "--yes"], "");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("installedRelease v1.17.3, the last migrated release v1.17.3"),
        "what the digest covers is printed: {}",
        stdout(&out)
    );
    let print = serde_json::json!({"stage": "pre", "id": "workload_scale", "tag": "v1.18.0",
        "runMode": null, "release": "v1.18.0", "runName": "elsewhere",
        "completedAt": "2026-12-01T10:00:00Z"});
    // The Migration recorded no history yet: the ledger is written as an import would.
    let ledger = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "opendesk-history", "namespace": ns.name},
        "data": {"format": "stagehand.dev/history/v1",
                 "footprint.pre.workload_scale.v1.18.0.": print.to_string()}});
    apply(&ledger.to_string());
    let _operator = ns.start_operator();
    let run = message_contains(
        &ns.name,
        "migrationrun/pre",
        &format!("the approval names plan {approved}, but this run's plan is"),
    )
    .await;
    let digest = run["status"]["frozenPlan"]["digest"].as_str().unwrap();
    assert_ne!(digest, approved, "{run}");
    assert!(
        condition(&run, "Ready")["message"]
            .as_str()
            .unwrap()
            .contains(digest)
    );
    assert_eq!(condition(&run, "Ready")["reason"], "AwaitingApproval");
    assert_eq!(
        run["status"]["frozenPlan"]["footprints"][0]["id"], "workload_scale",
        "{run}"
    );
    assert_eq!(run["status"]["actions"][0]["reason"], "FootprintRecorded");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(replicas(&ns.name, "ums"), 2, "the old approval ran nothing");

    // Approving the new plan lets it go: its action is skipped.
    let out = approve(&["migrationrun/pre", "-n", &ns.name, "--yes"], "");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .contains("recorded footprints of its tagged actions (pre workload_scale v1.18.0)"),
        "{}",
        stdout(&out)
    );
    wait(&ns.name, "migrationrun/pre", "Ready");
    let run = get(&ns.name, "migrationrun/pre");
    assert_eq!(run["status"]["actions"][0]["decision"], "Skipped", "{run}");
    assert_eq!(replicas(&ns.name, "ums"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_refuses_a_run_recreated_after_it_was_read() {
    let ns = Scene::cluster("approval-recreated").await;
    let (_operator, first) = awaiting(&ns.name).await;
    let first_uid = first["metadata"]["uid"].as_str().unwrap().to_string();

    // The reviewer reads the plan; before they confirm, the run is deleted and created again
    // under the same name (another pipeline run), with a plan of the same digest.
    let mut child = Command::new(stagehand_bin())
        .env("KUBECONFIG", kubeconfig())
        .args(["approve", "migrationrun/pre", "-n", &ns.name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut prompt = Vec::new();
    let start = Instant::now();
    while !String::from_utf8_lossy(&prompt).contains("[y/N]") {
        assert!(start.elapsed() < Duration::from_secs(60), "no prompt");
        let mut buf = [0u8; 256];
        let n = err.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stderr closed before the prompt: {}",
            String::from_utf8_lossy(&prompt)
        );
        prompt.extend_from_slice(&buf[..n]);
    }
    ok(
        "delete",
        &kubectl(&[
            "delete",
            "migrationrun/pre",
            "-n",
            &ns.name,
            "--timeout=60s",
        ]),
    );
    apply(
        &MigrationRun::new(&ns.name, "pre", "pre")
            .approval("Manual")
            .to_yaml(),
    );
    let second =
        message_contains(&ns.name, "migrationrun/pre", "waiting for approval of plan").await;
    assert_ne!(second["metadata"]["uid"], first_uid.as_str());
    assert_eq!(
        second["status"]["frozenPlan"]["digest"], first["status"]["frozenPlan"]["digest"],
        "the same plan: only the run's identity tells them apart"
    );

    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(out.status.code(), Some(1), "stderr: {rest}");
    assert!(
        rest.contains("migrationrun/pre changed, or was deleted and recreated, since it was read: nothing approved"),
        "{rest}"
    );
    let run = get(&ns.name, "migrationrun/pre");
    assert!(
        run["metadata"]["annotations"]["stagehand.dev/approve-plan"].is_null(),
        "{run}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(replicas(&ns.name, "ums"), 2, "nothing ran");
    assert_eq!(
        condition(&get(&ns.name, "migrationrun/pre"), "Ready")["reason"],
        "AwaitingApproval"
    );
}
