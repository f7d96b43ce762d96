//! Workloads in a test namespace: StatefulSets whose pods the kwok node runs, their replicas
//! and pods, and finalizers that hold objects as a GitOps tool's would.

use std::process::Output;
use std::time::Duration;

use crate::cluster::{get, kubectl};
use crate::process::{ok, stdout};
use crate::waiting::wait_for;

/// A StatefulSet whose pods (label `app: NAME`) the kwok node runs.
pub fn statefulset(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  serviceName: {name}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: main, image: example.invalid/{name}:1}}]}}
"#
    )
}

/// `spec.replicas` of StatefulSet `sts` in `ns`.
pub fn replicas(ns: &str, sts: &str) -> u64 {
    let object = get(ns, &format!("statefulset/{sts}"));
    match object["spec"]["replicas"].as_u64() {
        Some(n) => n,
        None => panic!("statefulset/{sts} has no spec.replicas: {object}"),
    }
}

/// Waits (90 s) until exactly `n` pods labelled `app: APP` are Running.
pub async fn running_pods(ns: &str, app: &str, n: usize) {
    wait_for(
        &format!("{n} {app} pods Running"),
        Duration::from_secs(90),
        || async {
            let out = kubectl(&[
                "get",
                "pods",
                "-n",
                ns,
                "-l",
                &format!("app={app}"),
                "-o",
                "jsonpath={.items[*].status.phase}",
            ]);
            (stdout(&out)
                .split_whitespace()
                .filter(|p| *p == "Running")
                .count()
                == n)
                .then_some(())
        },
    )
    .await;
}

/// Holds pod `pod` in `ns` with the finalizer `example.com/hold`: deleted, it stays
/// Terminating until [`release_pod`].
pub fn hold_pod(ns: &str, pod: &str) {
    hold(ns, &format!("pod/{pod}"));
}

/// Removes the finalizers of pod `pod` in `ns` (see [`hold_pod`]); kubectl's answer.
pub fn release_pod(ns: &str, pod: &str) -> Output {
    release(ns, &format!("pod/{pod}"))
}

/// Holds the object `what` (`kind/name`) in `ns` with the finalizer `example.com/hold`, as a
/// GitOps tool's finalizer would: deleted (or its namespace deleted), it stays until
/// [`release`].
pub fn hold(ns: &str, what: &str) {
    ok(
        "hold",
        &kubectl(&[
            "patch",
            what,
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ]),
    );
}

/// Removes the finalizers of `what` in `ns` (see [`hold`]); kubectl's answer.
pub fn release(ns: &str, what: &str) -> Output {
    kubectl(&[
        "patch",
        what,
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
}
