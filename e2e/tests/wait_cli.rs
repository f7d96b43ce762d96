//! `stagehand wait` against real runs on the local control plane: it keeps waiting while no
//! operator has seen the run, prints each action's start and end, exits 0 on success, 1 as
//! soon as the run stalls (with the message), 2 on timeout or a usage error, and
//! `--for-release` waits for the newest run of both stages (a dry run counts only with
//! `--include-dry-runs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stagehand_e2e::manifests::{Action, Migration, MigrationRun};
use stagehand_e2e::{
    Scene, apply, kubeconfig, running_pods, stagehand, stagehand_bin, statefulset, stderr, stdout,
};

/// A Migration adopting v1.17.3 whose pre and post stages each scale StatefulSet `sts`.
fn migration(ns: &str, sts: &str) -> String {
    Migration::new(ns)
        .installed("v1.17.3")
        .pre(Action::scale(sts, 0).tag("v1.18.0-pre"))
        .post(Action::scale(sts, 1).tag("v1.18.0-post"))
        .to_yaml()
}

fn run(ns: &str, name: &str, stage: &str) -> String {
    MigrationRun::new(ns, name, stage)
        .wait_timeout_seconds(300)
        .to_yaml()
}

/// `stagehand wait ARGS` as a child process.
fn spawn_wait(args: &[&str]) -> Child {
    Command::new(stagehand_bin())
        .env("KUBECONFIG", kubeconfig())
        .arg("wait")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stagehand wait")
}

/// Waits for `child` (at most `limit`); its exit code, stdout and stderr.
fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            let mut err = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code().unwrap_or(-1), out, err);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "stagehand wait still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_through_an_unseen_run_prints_each_action_and_exits_0_on_success() {
    let ns = Scene::cluster("wait-ok").await;
    apply(&statefulset(&ns.name, "ums", 1));
    running_pods(&ns.name, "ums", 1).await;
    apply(&migration(&ns.name, "ums"));
    apply(&run(&ns.name, "pre", "pre"));
    // No operator runs: the run has not been seen, so `wait` must keep waiting.
    let mut waiting = spawn_wait(&["migrationrun/pre", "-n", &ns.name, "--timeout", "120s"]);
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "stagehand wait returned while no operator had seen the run"
    );
    let _operator = ns.start_operator();
    let (code, out, err) = finish(waiting, Duration::from_secs(110));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let run = stagehand_e2e::get(&ns.name, "migrationrun/pre");
    assert_eq!(
        stagehand_e2e::condition(&run, "Ready")["status"],
        "True",
        "exit 0 only once the run is Ready: {run}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("pre: NotObserved:"),
        "the first line says the operator has not seen the run: {out}"
    );
    let started = lines
        .iter()
        .position(|l| *l == "pre: [1/1] workload_scale (v1.18.0-pre) started")
        .unwrap_or_else(|| panic!("no start line: {out}"));
    let succeeded = lines
        .iter()
        .position(|l| l.starts_with("pre: [1/1] workload_scale (v1.18.0-pre) succeeded: "))
        .unwrap_or_else(|| panic!("no end line with a summary: {out}"));
    assert!(started < succeeded, "{out}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("started")).count(),
        1,
        "each start said once: {out}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("migrationrun/pre: succeeded"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_1_as_soon_as_the_run_stalls_with_its_message() {
    let ns = Scene::cluster("wait-fail").await;
    // The StatefulSet the pre stage scales does not exist: the preflight stops the run.
    apply(&migration(&ns.name, "missing"));
    apply(&run(&ns.name, "pre", "pre"));
    let _operator = ns.start_operator();
    let begun = Instant::now();
    let (code, out, err) = finish(
        spawn_wait(&["migrationrun/pre", "-n", &ns.name, "--timeout", "300s"]),
        Duration::from_secs(120),
    );
    assert_eq!(code, 1, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        begun.elapsed() < Duration::from_secs(60),
        "as soon as it stalls, not at the timeout"
    );
    let run = stagehand_e2e::get(&ns.name, "migrationrun/pre");
    let stalled = stagehand_e2e::condition(&run, "Stalled");
    assert_eq!(stalled["status"], "True", "{run}");
    let message = stalled["message"].as_str().unwrap();
    assert!(
        err.contains(message) && out.contains(message),
        "the condition's message is printed: {message}\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(err.contains(stalled["reason"].as_str().unwrap()), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_2_on_timeout_and_on_usage_errors() {
    let ns = Scene::cluster("wait-timeout").await;
    // A run of a Migration that does not exist waits (and no operator runs at all).
    apply(&run(&ns.name, "pre", "pre"));
    let begun = Instant::now();
    let (code, out, err) = finish(
        spawn_wait(&["migrationrun/pre", "-n", &ns.name, "--timeout", "3s"]),
        Duration::from_secs(30),
    );
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert!(begun.elapsed() >= Duration::from_secs(3));
    assert!(
        err.contains("timed out after 3s waiting for migrationrun/pre: NotObserved"),
        "{err}"
    );
    // A run that does not exist yet is waited for, and said once.
    let (code, out, _) = finish(
        spawn_wait(&["migrationrun/nothing", "-n", &ns.name, "--timeout", "2s"]),
        Duration::from_secs(30),
    );
    assert_eq!(code, 2);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["nothing: not found yet; waiting for it to be created"]
    );
    for args in [
        &["wait", "pod/x"][..],
        &["wait", "migrationrun"][..],
        &["wait", "migrationrun/x", "--timeout", "soon"][..],
        &["wait"][..],
        &["wait", "migration/x"][..],
    ] {
        let out = stagehand(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{args:?} says why");
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_release_waits_for_both_stages() {
    let ns = Scene::cluster("wait-release").await;
    apply(&statefulset(&ns.name, "ums", 1));
    running_pods(&ns.name, "ums", 1).await;
    apply(&migration(&ns.name, "ums"));
    apply(&run(&ns.name, "pre", "pre"));
    let _operator = ns.start_operator();
    let waiting = spawn_wait(&[
        "--for-release",
        "v1.18.0",
        "-n",
        &ns.name,
        "--timeout",
        "240s",
    ]);
    // The pre run succeeds; with no post run yet, the release is not done.
    stagehand_e2e::wait(&ns.name, "migrationrun/pre", "Ready");
    std::thread::sleep(Duration::from_secs(3));
    let mut waiting = waiting;
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "returned before the release's post run existed"
    );
    // A dry post run (a review before the real one) succeeds: it changed nothing, so the
    // release is not done, unless dry runs are asked to count.
    apply(
        &MigrationRun::new(&ns.name, "post-dry", "post")
            .dry_run(true)
            .wait_timeout_seconds(300)
            .to_yaml(),
    );
    stagehand_e2e::wait(&ns.name, "migrationrun/post-dry", "Ready");
    let (code, out, err) = finish(
        spawn_wait(&[
            "--for-release",
            "v1.18.0",
            "-n",
            &ns.name,
            "--timeout",
            "5s",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(code, 2, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        err.contains("no post run yet (post-dry is a dry run, which changed nothing and does not count: pass --include-dry-runs to count it)"),
        "{err}"
    );
    let (code, out, err) = finish(
        spawn_wait(&[
            "--for-release",
            "v1.18.0",
            "-n",
            &ns.name,
            "--include-dry-runs",
            "--timeout",
            "60s",
        ]),
        Duration::from_secs(70),
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "returned on a dry post run"
    );
    apply(&run(&ns.name, "post", "post"));
    let (code, out, err) = finish(waiting, Duration::from_secs(230));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let post = stagehand_e2e::get(&ns.name, "migrationrun/post");
    assert_eq!(stagehand_e2e::condition(&post, "Ready")["status"], "True");
    assert!(
        out.contains("post: [1/1] workload_scale (v1.18.0-post) succeeded"),
        "{out}"
    );
    assert!(
        out.contains("pre: [1/1] workload_scale (v1.18.0-pre)"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("release v1.18.0: succeeded"),
        "{out}"
    );
}
