//! The kill matrix (docs/reliability.md#the-kill-matrix, issue 17): one action run through the
//! operator, the operator SIGKILLed at one point, a new operator started, and the promise checked
//! on the servers' own state and request logs.
//!
//! The kill points of one action ([`points`]):
//! - `planned`: the status write that freezes the plan has been carried out, before the action
//!   starts (the [`KubeProxy`] kills the operator before it sees the answer);
//! - `started`: its `Started` Event has been written;
//! - `inside k/n`: `k` of its `n` destructive requests have been served, for k = 1, half and
//!   all-but-one (the server's side tells: a simulator's fault rule, a [`crate::wire_proxy`]
//!   holding the next one, or the kube proxy counting the API server's answers);
//! - `ledger`: its footprint has been written to the history ledger, before the run's status;
//! - `final`: the status write that records its success, before the run's final status.
//!
//! A case holds when the new operator ends the run `Ready` and: the end state is the
//! uninterrupted run's, no destructive request was repeated for an object already done, and
//! the footprint is recorded once (one ledger key, one `status.history` entry).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kube_proxy::{KubeProxy, Seen};
use crate::manifests::MigrationRun;
use crate::{OperatorProcess, TestNamespace, apply, get, kubectl, stdout};

/// Where the operator is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// After the plan is written, before the action starts.
    Planned,
    /// After the action's `Started` Event.
    Started,
    /// After `k` of the action's `n` destructive requests were served.
    Inside {
        /// Served before the kill.
        k: usize,
        /// The action's destructive requests in an uninterrupted run.
        n: usize,
    },
    /// After the ledger write, before the run's status write.
    Ledger,
    /// After the last action's status, before the run's final status.
    Final,
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::Planned => f.write_str("planned"),
            Point::Started => f.write_str("started"),
            Point::Inside { k, n } => write!(f, "inside {k}/{n}"),
            Point::Ledger => f.write_str("ledger"),
            Point::Final => f.write_str("final"),
        }
    }
}

/// Every kill point of an action with `n` destructive requests: `inside` for k = 1, n/2 and
/// n - 1 (each once; `1/1` when there is only one).
pub fn points(n: usize) -> Vec<Point> {
    let mut ks: Vec<usize> = if n <= 1 {
        vec![1]
    } else {
        vec![1, n / 2, n - 1]
    };
    ks.retain(|k| *k >= 1);
    ks.dedup();
    let mut out = vec![Point::Planned, Point::Started];
    out.extend(ks.into_iter().map(|k| Point::Inside { k, n }));
    out.extend([Point::Ledger, Point::Final]);
    out
}

/// How a test tells the runner about one action's server side.
#[allow(async_fn_in_trait)]
pub trait Target {
    /// The action's id.
    fn id(&self) -> &'static str;
    /// Its stage: `pre` or `post`.
    fn stage(&self) -> &'static str;
    /// Its destructive requests in an uninterrupted run.
    fn destructive_total(&self) -> usize;
    /// Fresh state for one case in `ns` (servers reset and seeded, Secrets and objects
    /// created); answers the Migration's YAML.
    async fn prepare(&mut self, ns: &str) -> String;
    /// Arms the server's side to stop the action after `k` destructive requests were served.
    /// `Some(trip)` when the kube proxy is the one that counts (Kubernetes actions): the
    /// runner arms it with the operator's pid.
    async fn hold_after(&mut self, ns: &str, k: usize) -> Option<KubeTrip>;
    /// Whether the server's side holds the action (after `hold_after`). The default, for the
    /// targets the kube proxy counts for (it kills the operator itself): never.
    async fn holding(&self) -> bool {
        false
    }
    /// Lets the server's side answer normally again (the default: nothing is held).
    async fn release(&mut self) {}
    /// The objects of every destructive request the server served so far in this case, one
    /// entry per request per object (for the kube proxy's targets, read from its log).
    async fn served(&self, ns: &str, log: &[Seen]) -> Vec<String>;
    /// Why a destructive request repeated for an object already done changes nothing, for an
    /// action that cannot tell which objects are done; `None` (the default): a repeat fails.
    fn repeats_are_no_ops(&self) -> Option<&'static str> {
        None
    }
    /// Whether the state is the uninterrupted run's (an error says what differs).
    async fn check_end_state(&self, ns: &str) -> Result<(), String>;
}

/// A kube-proxy trip for the `inside` point: the `k`-th matching answer kills.
pub struct KubeTrip {
    /// Which answered request counts.
    pub matches: Box<dyn Fn(&Seen) -> bool + Send + Sync>,
}

impl std::fmt::Debug for KubeTrip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeTrip")
    }
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct Row {
    /// The action.
    pub action: String,
    /// The kill point.
    pub point: Point,
    /// `None` when it held, else why not.
    pub failure: Option<String>,
    /// Destructive requests served before the kill.
    pub before: usize,
    /// Destructive requests served in the whole case.
    pub total: usize,
    /// Objects a destructive request was sent for more than once (allowed only where the
    /// action's repeats are no-ops).
    pub repeated: usize,
    /// How long the case took, seconds.
    pub seconds: f64,
}

impl Row {
    /// `action<TAB>point<TAB>held|failed<TAB>before/total<TAB>repeated<TAB>seconds<TAB>why`.
    pub fn tsv(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}/{}\t{}\t{:.1}\t{}",
            self.action,
            self.point,
            if self.failure.is_none() {
                "held"
            } else {
                "failed"
            },
            self.before,
            self.total,
            self.repeated,
            self.seconds,
            self.failure.clone().unwrap_or_default()
        )
    }
}

const RUN: &str = "kill";

fn operator(ns: &str, kubeconfig: &str) -> OperatorProcess {
    OperatorProcess::start_with(
        ns,
        kubeconfig,
        &[
            "--leader-elect=false",
            "--probe-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
        ],
    )
}

fn status_patch_of(seen: &Seen, ns: &str) -> Option<Value> {
    let path = format!("/namespaces/{ns}/migrationruns/{RUN}/status");
    (seen.method == "PATCH" && seen.path.split('?').next()?.ends_with(&path)).then(|| seen.json())
}

/// Arms the proxy for a point other than `inside`.
fn arm(proxy: &KubeProxy, pid: u32, ns: &str, point: Point, id: &'static str) {
    let ns = ns.to_string();
    match point {
        Point::Planned => proxy.arm(pid, 1, move |s| {
            status_patch_of(s, &ns).is_some_and(|b| {
                let actions = b["status"]["actions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                !b["status"]["frozenPlan"].is_null()
                    && !actions.is_empty()
                    && actions.iter().all(|a| a["startTime"].is_null())
            })
        }),
        Point::Started => proxy.arm(pid, 1, move |s| {
            s.method == "POST"
                && s.path.contains(&format!("/namespaces/{ns}/events"))
                && s.json()["reason"] == "Started"
        }),
        Point::Ledger => proxy.arm(pid, 1, move |s| {
            s.is_write()
                && s.path.contains(&format!("/namespaces/{ns}/configmaps"))
                && s.body.contains("footprint.")
                && s.body.contains(id)
        }),
        Point::Final => proxy.arm(pid, 1, move |s| {
            status_patch_of(s, &ns).is_some_and(|b| {
                let actions = b["status"]["actions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let ready = b["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                !actions.is_empty()
                    && actions.iter().all(|a| a["decision"] == "Succeeded")
                    && !ready
            })
        }),
        Point::Inside { .. } => {}
    }
}

/// Runs one case of `target` at `point` in a fresh namespace.
pub async fn case<T: Target>(
    target: &mut T,
    client: &kube::Client,
    proxy: &KubeProxy,
    point: Point,
) -> Row {
    let ns = TestNamespace::new(
        client,
        &format!(
            "kill-{}",
            target
                .id()
                .replace('_', "-")
                .chars()
                .take(20)
                .collect::<String>()
        ),
    )
    .await;
    let migration = target.prepare(&ns.name).await;
    apply(&migration);
    proxy.disarm();
    proxy.clear_log();
    let mut row = Row {
        action: target.id().into(),
        point,
        failure: None,
        before: 0,
        total: 0,
        repeated: 0,
        seconds: 0.0,
    };
    let started = Instant::now();
    let mut first = operator(&ns.name, proxy.kubeconfig());
    let mut server_holds = false;
    match point {
        Point::Inside { k, .. } => match target.hold_after(&ns.name, k).await {
            Some(trip) => proxy.arm(first.pid(), k, trip.matches),
            None => server_holds = true,
        },
        other => arm(proxy, first.pid(), &ns.name, other, target.id()),
    }
    apply(&MigrationRun::new(&ns.name, RUN, target.stage()).to_yaml());

    // Until the kill point is reached: the proxy kills, or the server holds and the test kills.
    let deadline = Instant::now() + Duration::from_secs(90);
    let reached = loop {
        if server_holds && target.holding().await {
            first.kill();
            break true;
        }
        if !server_holds && first.exited() {
            break proxy.fired().is_some();
        }
        if Instant::now() > deadline || ready(&ns.name) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    first.kill();
    proxy.disarm();
    target.release().await;
    if !reached {
        row.failure = Some(format!(
            "the kill point was never reached (run {})",
            reason(&ns.name)
        ));
        ns.dump();
        row.seconds = started.elapsed().as_secs_f64();
        return row;
    }
    let log_before = proxy.log();
    row.before = target.served(&ns.name, &log_before).await.len();

    // A new operator finishes the run.
    let second = operator(&ns.name, proxy.kubeconfig());
    let deadline = Instant::now() + Duration::from_secs(120);
    while !ready(&ns.name) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut problems = Vec::new();
    let run = get(&ns.name, &format!("migrationrun/{RUN}"));
    if !ready(&ns.name) {
        problems.push(format!("the run did not end Ready: {}", reason(&ns.name)));
    }
    if let Err(e) = target.check_end_state(&ns.name).await {
        problems.push(format!("end state: {e}"));
    }
    let served = target.served(&ns.name, &proxy.log()).await;
    row.total = served.len();
    let mut per_object: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &served {
        *per_object.entry(o).or_default() += 1;
    }
    let repeated: Vec<String> = per_object
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(o, n)| format!("{o} x{n}"))
        .collect();
    row.repeated = repeated.len();
    if !repeated.is_empty() && target.repeats_are_no_ops().is_none() {
        problems.push(format!(
            "destructive requests repeated: {}",
            repeated.join(", ")
        ));
    }
    if let Err(e) = footprint_once(&ns.name, target.id(), target.stage()) {
        problems.push(e);
    }
    if run["status"]["actions"][0]["decision"] != "Succeeded" {
        problems.push(format!(
            "the action's decision: {}",
            run["status"]["actions"][0]
        ));
    }
    drop(second);
    row.seconds = started.elapsed().as_secs_f64();
    if !problems.is_empty() {
        ns.dump();
        row.failure = Some(problems.join("; "));
    }
    row
}

fn ready(ns: &str) -> bool {
    let run = get_opt(ns);
    run["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn reason(ns: &str) -> String {
    let run = get_opt(ns);
    run["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| format!("{}: {}", c["reason"], c["message"]))
        .unwrap_or_else(|| "without a Ready condition".into())
}

fn get_opt(ns: &str) -> Value {
    let out = kubectl(&[
        "get",
        &format!("migrationrun/{RUN}"),
        "-n",
        ns,
        "-o",
        "json",
    ]);
    serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null)
}

/// The footprint of `id` is in the ledger once and in the Migration's history once.
fn footprint_once(ns: &str, id: &str, stage: &str) -> Result<(), String> {
    let ledger = crate::ledger(ns).unwrap_or(Value::Null);
    let keys = crate::footprints(&ledger, &format!("{stage}.{id}."));
    if keys.len() != 1 {
        return Err(format!("ledger footprints of {id}: {keys:?}"));
    }
    let migration = get(ns, "migration/opendesk");
    let entries = migration["status"]["history"]
        .as_array()
        .map(|h| h.iter().filter(|e| e["id"] == id).count())
        .unwrap_or(0);
    if entries != 1 {
        return Err(format!(
            "status.history entries of {id}: {entries} ({})",
            migration["status"]["history"]
        ));
    }
    Ok(())
}

/// Appends rows to the suite's table (`kill-matrix.tsv` in `dir`, the tests'
/// `CARGO_TARGET_TMPDIR`; `e2e/test` empties it first and prints it at the end) and fails the test if a case did
/// not hold.
pub fn report(dir: &str, rows: &[Row]) {
    let text: String = rows.iter().map(|r| r.tsv() + "\n").collect();
    eprintln!("action\tpoint\tresult\tdestructive before/total\trepeated\tseconds\twhy\n{text}");
    // One append per test: rows of tests running at once do not interleave.
    let path = std::path::Path::new(dir).join("kill-matrix.tsv");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        use std::io::Write as _;
        let _ = file.write_all(text.as_bytes());
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.failure.is_some())
        .map(Row::tsv)
        .collect();
    assert!(
        failed.is_empty(),
        "cases that did not hold:\n{}",
        failed.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_killed_at_each_boundary_and_at_one_half_and_all_but_one_inside() {
        let labels = |n| {
            points(n)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            labels(1),
            ["planned", "started", "inside 1/1", "ledger", "final"]
        );
        assert_eq!(
            labels(2),
            ["planned", "started", "inside 1/2", "ledger", "final"]
        );
        assert_eq!(
            labels(4),
            [
                "planned",
                "started",
                "inside 1/4",
                "inside 2/4",
                "inside 3/4",
                "ledger",
                "final"
            ]
        );
        assert_eq!(
            labels(10)[2..5],
            ["inside 1/10", "inside 5/10", "inside 9/10"]
        );
    }
}
