//! `udm_remove_legacy_hashes`: runs Nubus 1.22's two cleanup tools in the UDM REST API's pod,
//! `remove_sambantpassword` (deletes `sambaNTPassword` from every object holding one) and
//! `remove_krb5key_keytypes` (deletes the weak `krb5Key` types, raising
//! `krb5KeyVersionNumber` on each object it changes, skipping objects with a `krb5Key` it
//! cannot decode), as openDesk v1.19's post stage does.
//!
//! The pod is the one Running pod `udm.podSelector` finds in the Migration's namespace; the
//! tools run in `udm.container` through the Kubernetes exec API, each within
//! `udm.timeoutSeconds`. Planning runs both with `--dry-run` and counts, per tool, the objects
//! they would change (read from what the tools print). Apply runs them for real, in that order,
//! then both dry runs again: anything they still report is a failure naming it. A tool that
//! fails (non-zero exit, timeout) stops the action, naming the tool, how it ended and what it
//! printed. The tools' output is read as Nubus prints it (see [`read_nt`] and [`read_krb5`]);
//! output that is neither is refused rather than guessed at.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::ConfigIssue;

use crate::action::{
    Action, ActionConfig, ActionContext, ActionError, FindingRow, Findings, Outcome,
};
use crate::clients::ldap::LdapError;
use crate::clients::ldap::exec::preflight::{
    ExecProblem, ExecTarget, exec_review, exit_code, pod_problem, review_problem,
};
use crate::clients::ldap::exec::{CommandOutput, CommandRunner, KubeExec};
use crate::text::{one_line, plural};

/// The tool removing NT hashes.
pub const NT_TOOL: &str = "remove_sambantpassword";
/// The tool removing weak Kerberos keys.
pub const KRB5_TOOL: &str = "remove_krb5key_keytypes";
/// How many objects a message names before it counts the rest.
const LIST_LIMIT: usize = 20;
/// How many characters of a tool's output a message quotes.
const QUOTE_LIMIT: usize = 800;

/// The action's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Run only the tools' dry runs and change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Where the tools run.
    #[serde(default)]
    pub udm: UdmPod,
}

/// The UDM REST API's pod, where Nubus ships the tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UdmPod {
    /// The label selector finding the pod in the Migration's namespace (exactly one Running
    /// pod must match).
    #[serde(default = "UdmPod::default_pod_selector")]
    #[schemars(length(min = 1))]
    pub pod_selector: String,
    /// The container within the pod.
    #[serde(default = "UdmPod::default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// The time each tool run may take (each dry run too).
    #[serde(default = "UdmPod::default_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
    /// The directory holding the tools in the container (Stagehand's addition; openDesk's
    /// path by default).
    #[serde(default = "UdmPod::default_tools_directory")]
    #[schemars(length(min = 1))]
    pub tools_directory: String,
}

impl UdmPod {
    fn default_pod_selector() -> String {
        "app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums".into()
    }
    fn default_container() -> String {
        "main".into()
    }
    fn default_timeout() -> u64 {
        300
    }
    fn default_tools_directory() -> String {
        "/usr/share/univention-directory-manager-tools".into()
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.max(1))
    }

    /// The path of `tool` in the container.
    pub fn tool_path(&self, tool: &str) -> String {
        format!("{}/{tool}", self.tools_directory.trim_end_matches('/'))
    }
}

impl Default for UdmPod {
    fn default() -> Self {
        Self {
            pod_selector: Self::default_pod_selector(),
            container: Self::default_container(),
            timeout_seconds: Self::default_timeout(),
            tools_directory: Self::default_tools_directory(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "udm_remove_legacy_hashes";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if let Some(message) = selector_issue(&self.udm.pod_selector) {
            issues.push(ConfigIssue {
                path: "udm.podSelector".into(),
                message,
            });
        }
        if !self.udm.tools_directory.starts_with('/') {
            issues.push(ConfigIssue {
                path: "udm.toolsDirectory".into(),
                message: format!(
                    "{:?} is not an absolute path: name the directory holding {NT_TOOL} and {KRB5_TOOL} in the container",
                    self.udm.tools_directory
                ),
            });
        }
        issues
    }
}

/// What is wrong with an equality-based label selector (`k=v,k2=v2`, `k!=v`, `k`), if
/// anything: an empty selector would match every pod of the namespace.
fn selector_issue(selector: &str) -> Option<String> {
    if selector.trim().is_empty() {
        return Some("an empty selector matches every pod of the namespace: name the UDM REST API's labels, e.g. app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums".into());
    }
    for term in selector.split(',') {
        let term = term.trim();
        let key = term
            .split_once("!=")
            .or_else(|| term.split_once("=="))
            .or_else(|| term.split_once('='))
            .map_or(term, |(k, _)| k)
            .trim()
            .trim_start_matches('!');
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Some(format!(
                "{term:?} in {selector:?} is not a label requirement (key=value, key!=value or key, separated by commas)"
            ));
        }
    }
    None
}

/// One object a tool changed or would change (or skipped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolObject {
    /// Its DN.
    pub dn: String,
    /// What about it (`sambaNTPassword`, `2 krb5Key value(s) [23, 1]`, or why it was skipped).
    pub detail: String,
    /// Whether the tool printed `done` for it (apply), rather than `(dry run!)`.
    pub done: bool,
}

/// What one run of a tool printed, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolReport {
    /// The objects it changed or would change.
    pub changed: Vec<ToolObject>,
    /// The objects it skipped (an undecodable `krb5Key`).
    pub skipped: Vec<ToolObject>,
    /// Key values removed (or that would be), `remove_krb5key_keytypes` only.
    pub keys: usize,
    /// The object it had started when its output ended (a `Remove ... for DN` line without
    /// `done`): the one it failed on, when it failed.
    pub unfinished: Option<String>,
    /// Warnings worth repeating (the UCR variable `password/samba/nthash` not `false`).
    pub warnings: Vec<String>,
}

/// Splits `Remove ... for DN done` / `(dry run!)` into the DN and whether it was done; `None`
/// when the line has neither ending (the tool stopped inside that object).
fn split_outcome(rest: &str) -> (String, Option<bool>) {
    let rest = rest.trim_end();
    if let Some(dn) = rest.strip_suffix("(dry run!)") {
        (dn.trim_end().to_string(), Some(false))
    } else if let Some(dn) = rest.strip_suffix(" done") {
        (dn.trim_end().to_string(), Some(true))
    } else {
        (rest.to_string(), None)
    }
}

/// A tool's output that is not what Nubus prints.
fn unreadable(tool: &str, stdout: &str) -> ActionError {
    ActionError::InvalidAnswer(format!(
        "{tool} printed something Stagehand cannot read as Nubus 1.22's {tool} output (is udm.toolsDirectory the Nubus tools' directory?): {}",
        quote(stdout)
    ))
}

/// The output of `remove_sambantpassword` (with or without `--dry-run`): one
/// `Remove sambaNTPassword for DN done|(dry run!)` line per object, or
/// `No account with sambaNTPassword was found.`; a warning line when the UCR variable
/// `password/samba/nthash` is not `false`. `complete`: the tool exited 0, so the output must
/// say one or the other.
pub fn read_nt(stdout: &str, complete: bool) -> Result<ToolReport, ActionError> {
    let mut report = ToolReport::default();
    let mut none_found = false;
    for line in stdout.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Remove sambaNTPassword for ") {
            let (dn, outcome) = split_outcome(rest);
            match outcome {
                Some(done) => report.changed.push(ToolObject {
                    dn,
                    detail: "sambaNTPassword".into(),
                    done,
                }),
                None => report.unfinished = Some(dn),
            }
        } else if line == "No account with sambaNTPassword was found." {
            none_found = true;
        } else if line.contains("\"password/samba/nthash\" is not set to false") {
            report.warnings.push(
                "the UCR variable password/samba/nthash is not false in the UDM REST API: UDM will write NT hashes again at the next password change".into(),
            );
        }
    }
    if complete && !none_found && report.changed.is_empty() {
        return Err(unreadable(NT_TOOL, stdout));
    }
    Ok(report)
}

/// The `Summary:` line of `remove_krb5key_keytypes`: objects affected, key values removed,
/// objects skipped.
fn krb5_summary(line: &str) -> Option<(usize, usize, usize)> {
    let rest = line.strip_prefix("Summary: ")?;
    let numbers: Vec<usize> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    match numbers[..] {
        [affected, removed, skipped] => Some((affected, removed, skipped)),
        _ => None,
    }
}

/// The output of `remove_krb5key_keytypes` (with or without `--dry-run`):
/// `Remove N krb5Key value(s) [23, 1] for DN done|(dry run!)` per object changed,
/// `Skip DN: cannot decode krb5Key: ...` per object skipped, and
/// `Summary: A object(s) affected, R key value(s) removed, S object(s) skipped due to decoding
/// errors.` (or `No object with krb5Key was found.`). The summary must agree with the lines.
pub fn read_krb5(stdout: &str, complete: bool) -> Result<ToolReport, ActionError> {
    let mut report = ToolReport::default();
    let mut summary = None;
    let mut none_found = false;
    for line in stdout.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Remove ") {
            let Some((count, rest)) = rest.split_once(" krb5Key value(s) ") else {
                continue;
            };
            let Some((types, rest)) = rest.split_once(" for ") else {
                continue;
            };
            let count: usize = count
                .trim()
                .parse()
                .map_err(|_| unreadable(KRB5_TOOL, stdout))?;
            let (dn, outcome) = split_outcome(rest);
            match outcome {
                Some(done) => {
                    report.keys += count;
                    report.changed.push(ToolObject {
                        dn,
                        detail: format!("{count} krb5Key value(s) {types}"),
                        done,
                    });
                }
                None => report.unfinished = Some(dn),
            }
        } else if let Some(rest) = line.strip_prefix("Skip ") {
            if let Some((dn, why)) = rest.split_once(": cannot decode krb5Key") {
                let why = one_line(why.trim_start_matches(':'), 200);
                report.skipped.push(ToolObject {
                    dn: dn.to_string(),
                    detail: if why.is_empty() {
                        "krb5Key cannot be decoded".into()
                    } else {
                        format!("krb5Key cannot be decoded: {why}")
                    },
                    done: false,
                });
            }
        } else if line.starts_with("Summary: ") {
            summary = krb5_summary(line);
            if summary.is_none() {
                return Err(unreadable(KRB5_TOOL, stdout));
            }
        } else if line == "No object with krb5Key was found." {
            none_found = true;
        }
    }
    if !complete {
        return Ok(report);
    }
    match summary {
        Some((affected, removed, skipped))
            if affected == report.changed.len()
                && removed == report.keys
                && skipped == report.skipped.len() =>
        {
            Ok(report)
        }
        Some((affected, removed, skipped)) => Err(ActionError::InvalidAnswer(format!(
            "{KRB5_TOOL}'s summary ({affected} object(s) affected, {removed} key value(s) removed, {skipped} skipped) disagrees with the objects it listed ({}, {removed_listed} key value(s), {skipped_listed} skipped): {}",
            plural(report.changed.len(), "object"),
            quote(stdout),
            removed_listed = report.keys,
            skipped_listed = report.skipped.len(),
        ))),
        None if none_found => Ok(report),
        None => Err(unreadable(KRB5_TOOL, stdout)),
    }
}

/// At most `QUOTE_LIMIT` (800) characters of `text`, on one line; its end when it is longer (a
/// tool's last words say why it stopped).
pub fn quote(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = joined.chars().count();
    if joined.is_empty() {
        return "(nothing)".into();
    }
    if count <= QUOTE_LIMIT {
        return joined;
    }
    let tail: String = joined.chars().skip(count - QUOTE_LIMIT).collect();
    format!("...{tail}")
}

/// `a; b; c (and 7 more)`.
fn list(dns: &[&str]) -> String {
    let shown: Vec<&str> = dns.iter().take(LIST_LIMIT).copied().collect();
    let mut out = shown.join("; ");
    if dns.len() > shown.len() {
        out.push_str(&format!(" (and {} more)", dns.len() - shown.len()));
    }
    out
}

/// Why a tool run failed: which tool, how it ended, what it printed (its error output, else
/// its output), where, and what it had done.
pub fn tool_failed(tool: &str, mode: &str, out: &CommandOutput, target: &str) -> ActionError {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed = if stderr.trim().is_empty() {
        format!("it printed: {}", quote(&stdout))
    } else {
        format!("its error output: {}", quote(&stderr))
    };
    let read = if tool == NT_TOOL {
        read_nt(&stdout, false)
    } else {
        read_krb5(&stdout, false)
    };
    let progress = match read {
        Ok(r) => {
            let done = r.changed.iter().filter(|o| o.done).count();
            let mut p = String::new();
            if done > 0 {
                p.push_str(&format!(
                    "; it had changed {} before (a rerun's dry runs show what is left)",
                    plural(done, "object")
                ));
            }
            if let Some(dn) = r.unfinished {
                p.push_str(&format!("; it stopped while changing {dn}"));
            }
            p
        }
        Err(_) => String::new(),
    };
    ActionError::Failed(format!(
        "{tool}{mode} failed ({}) in {target}: {printed}{progress}",
        ended(out)
    ))
}

/// A real run's report, when it says `done` for every object it lists: one that printed
/// `(dry run!)` did not change them, whatever its exit status.
fn all_done(tool: &str, report: ToolReport, stdout: &str) -> Result<ToolReport, ActionError> {
    if report.changed.iter().all(|o| o.done) {
        return Ok(report);
    }
    Err(ActionError::InvalidAnswer(format!(
        "{tool}, run without --dry-run, reported a dry run (no \"done\" after some objects), so it changed nothing there: {}",
        quote(stdout)
    )))
}

/// How a command ended, for a message: `exit code N` whichever form the exec API reported it
/// in (a status cause, or a runtime's `... exit status N` message), else what it said.
fn ended(out: &CommandOutput) -> String {
    match exit_code(&out.status) {
        Some(code) => format!("exit code {code}"),
        None => one_line(&out.status, 300),
    }
}

/// The pods the selector found, sorted out: exactly one Running pod, else the problem.
pub fn choose_pod(selector: &str, namespace: &str, pods: &[Pod]) -> Result<String, ActionError> {
    let state = |p: &Pod| -> String {
        if p.metadata.deletion_timestamp.is_some() {
            return "being deleted".into();
        }
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into())
    };
    let name = |p: &Pod| p.metadata.name.clone().unwrap_or_default();
    let mut running: Vec<String> = pods
        .iter()
        .filter(|p| state(p) == "Running")
        .map(name)
        .collect();
    running.sort();
    let mut others: Vec<String> = pods
        .iter()
        .filter(|p| state(p) != "Running")
        .map(|p| format!("{} ({})", name(p), state(p)))
        .collect();
    others.sort();
    match running.len() {
        1 => Ok(running.remove(0)),
        0 if others.is_empty() => Err(ActionError::NotFound(format!(
            "no pod in namespace {namespace} matches udm.podSelector {selector}: the UDM REST API must run there (kubectl -n {namespace} get pods -l '{selector}'); set udm.podSelector to its labels"
        ))),
        0 => Err(ActionError::Failed(format!(
            "no Running pod in namespace {namespace} matches udm.podSelector {selector} (found: {}): wait until the UDM REST API runs and start the run again",
            others.join(", ")
        ))),
        n => Err(ActionError::Conflict(format!(
            "{n} Running pods in namespace {namespace} match udm.podSelector {selector} ({}): the tools must run in exactly one; narrow udm.podSelector (e.g. add a label only the UDM REST API's pods carry)",
            running.join(", ")
        ))),
    }
}

/// A pod problem found by the exec transport's check, worded for this action's keys.
fn pod_problem_message(problem: &ExecProblem) -> ActionError {
    match problem {
        ExecProblem::ContainerMissing {
            namespace,
            pod,
            container,
            containers,
        } => ActionError::NotFound(format!(
            "pod {namespace}/{pod} (the UDM REST API) has no container {container} (it has: {containers}): set udm.container to the UDM REST API's container"
        )),
        ExecProblem::ContainerNotRunning {
            namespace,
            pod,
            container,
            state,
        } => ActionError::Failed(format!(
            "container {container} of pod {namespace}/{pod} (the UDM REST API) is not running ({state}): wait until it runs and start the run again"
        )),
        ExecProblem::ExecForbidden {
            namespace,
            pod,
            reason,
        } => ActionError::Refused(format!(
            "the operator may not create pods/exec on pod {namespace}/{pod} (the UDM REST API; {reason}): enable rbac.udmTools in the chart values (Role rules: pods list, pods/exec create)"
        )),
        other => ActionError::from(other.clone()),
    }
}

/// Where the tools run, found: the pod the selector finds and its runner.
struct Found {
    target: ExecTarget,
    runner: KubeExec,
}

/// The dry runs' reading.
#[derive(Debug, Default)]
struct Survey {
    nt: ToolReport,
    krb5: ToolReport,
}

impl Survey {
    fn nothing_left(&self) -> bool {
        self.nt.changed.is_empty() && self.krb5.changed.is_empty()
    }

    fn findings(&self) -> Findings {
        let row = |group: &str, o: &ToolObject| FindingRow {
            group: group.into(),
            values: vec![o.dn.clone(), o.detail.clone()],
        };
        let rows = self
            .nt
            .changed
            .iter()
            .map(|o| row("sambaNTPassword", o))
            .chain(self.krb5.changed.iter().map(|o| row("krb5Key", o)))
            .chain(self.krb5.skipped.iter().map(|o| row("krb5KeySkipped", o)))
            .collect();
        Findings::new(
            &["dn", "change"],
            rows,
            [
                ("sambaNTPassword".to_string(), self.nt.changed.len() as u64),
                ("krb5Key".to_string(), self.krb5.changed.len() as u64),
                ("krb5KeyValues".to_string(), self.krb5.keys as u64),
                ("krb5KeySkipped".to_string(), self.krb5.skipped.len() as u64),
            ],
        )
    }

    /// `remove_sambantpassword: 3 objects; remove_krb5key_keytypes: 2 objects (4 key values),
    /// 1 skipped (...)`.
    fn describe(&self, verb: &str) -> String {
        let nt = &self.nt.changed;
        let krb5 = &self.krb5.changed;
        let mut out = format!(
            "{NT_TOOL}: sambaNTPassword {verb} from {}{}; {KRB5_TOOL}: {} weak krb5Key value(s) {verb} from {}{}",
            plural(nt.len(), "object"),
            names(nt),
            self.krb5.keys,
            plural(krb5.len(), "object"),
            names(krb5),
        );
        out.push_str(&skipped_note(&self.krb5.skipped));
        for w in self.nt.warnings.iter().chain(&self.krb5.warnings) {
            out.push_str(&format!("; warning: {w}"));
        }
        out
    }
}

/// ` (a; b)` for a few objects, nothing for none.
fn names(objects: &[ToolObject]) -> String {
    if objects.is_empty() {
        return String::new();
    }
    let dns: Vec<&str> = objects.iter().map(|o| o.dn.as_str()).collect();
    format!(" ({})", list(&dns))
}

fn skipped_note(skipped: &[ToolObject]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let dns: Vec<&str> = skipped.iter().map(|o| o.dn.as_str()).collect();
    format!(
        "; {} skipped by {KRB5_TOOL}, its krb5Key cannot be decoded, left as it is (a password reset rewrites it): {}",
        plural(skipped.len(), "object"),
        list(&dns)
    )
}

impl Config {
    /// Finds the one Running pod of the selector and proves its container runs.
    async fn find(&self, ctx: &ActionContext) -> Result<Found, ActionError> {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let listed = pods
            .list(&ListParams::default().labels(&self.udm.pod_selector))
            .await
            .map_err(ActionError::kube(format!(
                "listing the pods of udm.podSelector {} in namespace {} (the chart's rbac.udmTools grants pods list)",
                self.udm.pod_selector, ctx.namespace
            )))?;
        let name = choose_pod(&self.udm.pod_selector, &ctx.namespace, &listed.items)?;
        let target = ExecTarget {
            namespace: ctx.namespace.clone(),
            pod: name.clone(),
            container: self.udm.container.clone(),
        };
        if let Some(pod) = listed
            .items
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&name))
            && let Some(problem) = pod_problem(&target, pod)
        {
            return Err(pod_problem_message(&problem));
        }
        let runner = KubeExec::new(
            ctx.client.clone(),
            &ctx.namespace,
            &name,
            &self.udm.container,
        );
        Ok(Found { target, runner })
    }

    /// Runs `tool` (with `--dry-run` when `dry`) within the timeout; its output, or the error
    /// naming the tool, how it ended and what it printed.
    async fn run(
        &self,
        runner: &dyn CommandRunner,
        tool: &str,
        dry: bool,
    ) -> Result<String, ActionError> {
        let mut argv = vec![self.udm.tool_path(tool)];
        if dry {
            argv.push("--dry-run".into());
        }
        let mode = if dry { " --dry-run" } else { "" };
        let timeout = self.udm.timeout();
        let out = match tokio::time::timeout(timeout, runner.run(&argv, None)).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                let message = match e {
                    LdapError::Exec { message, .. } => message,
                    other => other.to_string(),
                };
                return Err(ActionError::Unavailable(format!(
                    "{tool}{mode} could not be run in {}: {message}",
                    runner.describe()
                )));
            }
            Err(_) => {
                return Err(ActionError::Failed(format!(
                    "{tool}{mode} did not finish within {} s (udm.timeoutSeconds) in {}: it may still be running there, and what it changed stays changed; raise udm.timeoutSeconds for a large directory, and the next run's dry runs show what is left",
                    timeout.as_secs(),
                    runner.describe()
                )));
            }
        };
        if !out.success {
            return Err(tool_failed(tool, mode, &out, &runner.describe()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Both dry runs, read.
    async fn survey(&self, runner: &dyn CommandRunner) -> Result<Survey, ActionError> {
        let nt = read_nt(&self.run(runner, NT_TOOL, true).await?, true)?;
        let krb5 = read_krb5(&self.run(runner, KRB5_TOOL, true).await?, true)?;
        Ok(Survey { nt, krb5 })
    }

    /// The planning phase with the tools run by `runner`: both dry runs, counted per tool.
    pub async fn plan_with(&self, runner: &dyn CommandRunner) -> Result<Outcome, ActionError> {
        let s = self.survey(runner).await?;
        let head = if s.nothing_left() {
            "the dry runs find nothing to remove: ".to_string()
        } else {
            String::new()
        };
        Ok(Outcome::new(format!(
            "{head}{} ({})",
            s.describe("would be removed"),
            runner.describe()
        ))
        .with_findings(s.findings()))
    }

    /// The apply phase with the tools run by `runner`: the tools, then the dry runs again,
    /// which must find nothing left. With `dryRun` only the dry runs. With findings approved
    /// (`approved`), the dry runs run first and must find the same objects.
    pub async fn apply_with(
        &self,
        runner: &dyn CommandRunner,
        ctx: &ActionContext,
    ) -> Result<Outcome, ActionError> {
        ctx.stop.check()?;
        if self.dry_run {
            let planned = self.plan_with(runner).await?;
            return Ok(Outcome {
                summary: format!("dryRun is set, nothing changed: {}", planned.summary),
                findings: planned.findings,
            });
        }
        if let Some(approved) = &ctx.approved_findings {
            let found = self.survey(runner).await?.findings();
            if let Some(difference) = found.difference_from(approved) {
                return Err(ActionError::FindingsChanged(format!(
                    "the objects the dry runs find now are not the approved ones, nothing was removed: {difference}; plan and approve again"
                )));
            }
        }
        ctx.progress.phase(
            format!("removing the legacy hashes ({NT_TOOL}, then {KRB5_TOOL})"),
            Some(2),
            "tools run",
        );
        let nt_out = self.run(runner, NT_TOOL, false).await?;
        let nt = all_done(NT_TOOL, read_nt(&nt_out, true)?, &nt_out)?;
        let nt_done = nt.changed.iter().filter(|o| o.done).count();
        ctx.progress.add(1);
        ctx.stop.check().map_err(|e| {
            e.after(Some(format!(
                "{NT_TOOL} removed sambaNTPassword from {}; {KRB5_TOOL} has not run, a rerun runs it",
                plural(nt_done, "object")
            )))
        })?;
        let krb5_out = self.run(runner, KRB5_TOOL, false).await.map_err(|e| {
            e.map_message(|m| {
                format!(
                    "{m} ({NT_TOOL} had removed sambaNTPassword from {} before)",
                    plural(nt_done, "object")
                )
            })
        })?;
        let krb5 = all_done(KRB5_TOOL, read_krb5(&krb5_out, true)?, &krb5_out)?;
        ctx.progress.add(1);
        let done = Survey { nt, krb5 };
        ctx.progress
            .step("checking with the tools' dry runs that nothing is left");
        let after = self.survey(runner).await?;
        if !after.nothing_left() {
            let left: Vec<String> = after
                .nt
                .changed
                .iter()
                .map(|o| format!("{} (sambaNTPassword)", o.dn))
                .chain(
                    after
                        .krb5
                        .changed
                        .iter()
                        .map(|o| format!("{} ({})", o.dn, o.detail)),
                )
                .collect();
            let left: Vec<&str> = left.iter().map(String::as_str).collect();
            return Err(ActionError::Failed(format!(
                "after the tools ran ({}), their dry runs still report {} in {}: {}",
                done.describe("removed"),
                plural(left.len(), "object"),
                runner.describe(),
                list(&left)
            )));
        }
        Ok(Outcome::new(format!(
            "{}; the dry runs afterwards find nothing left ({})",
            done.describe("removed"),
            runner.describe()
        ))
        .with_findings(done.findings()))
    }

    /// The tools exist and are executable in the container (one exec naming the missing).
    async fn check_tools(&self, runner: &dyn CommandRunner) -> Result<(), ActionError> {
        let argv: Vec<String> = [
            "sh".to_string(),
            "-c".into(),
            "for t; do test -x \"$t\" || echo \"$t\"; done".into(),
            "sh".into(),
            self.udm.tool_path(NT_TOOL),
            self.udm.tool_path(KRB5_TOOL),
        ]
        .into();
        let out = match tokio::time::timeout(self.udm.timeout(), runner.run(&argv, None)).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Err(ActionError::Unavailable(format!(
                    "checking for {NT_TOOL} and {KRB5_TOOL} in {}: {e}",
                    runner.describe()
                )));
            }
            Err(_) => {
                return Err(ActionError::Unavailable(format!(
                    "checking for {NT_TOOL} and {KRB5_TOOL} in {}: no answer within {} s",
                    runner.describe(),
                    self.udm.timeout().as_secs()
                )));
            }
        };
        let missing = String::from_utf8_lossy(&out.stdout);
        let missing: Vec<&str> = missing
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if !out.success {
            return Err(ActionError::Failed(format!(
                "checking for {NT_TOOL} and {KRB5_TOOL} in {} failed ({}): {}",
                runner.describe(),
                ended(&out),
                quote(&String::from_utf8_lossy(&out.stderr))
            )));
        }
        if !missing.is_empty() {
            return Err(ActionError::NotFound(format!(
                "{} missing or not executable in {}: the tools come with Nubus 1.22 (openDesk v1.19) in the UDM REST API's container; check udm.container and udm.toolsDirectory ({})",
                missing.join(" and "),
                runner.describe(),
                self.udm.tools_directory
            )));
        }
        Ok(())
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let found = self.find(ctx).await?;
            self.plan_with(&found.runner).await
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let found = self.find(ctx).await?;
            self.apply_with(&found.runner, ctx).await
        })
    }

    fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Its findings are the review a `Manual` approval binds (docs/design.md#findings).
    fn reports_findings(&self) -> bool {
        true
    }

    /// Exactly one Running pod matches `udm.podSelector`, it has `udm.container` running, the
    /// operator may `create pods/exec` on it (a SelfSubjectAccessReview), and both tools are
    /// executable there. Changes nothing.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move {
            let found = self.find(ctx).await?;
            let reviews: Api<SelfSubjectAccessReview> = Api::all(ctx.client.clone());
            let answer = reviews
                .create(&PostParams::default(), &exec_review(&found.target))
                .await
                .map_err(ActionError::kube(format!(
                    "asking whether the operator may create pods/exec on pod {}/{}",
                    found.target.namespace, found.target.pod
                )))?;
            if let Some(problem) = review_problem(&found.target, answer.status.as_ref()) {
                return Err(pod_problem_message(&problem));
            }
            self.check_tools(&found.runner).await
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    const NT_DRY: &str = "Warning: At least S4/AD Connector password synchronization ... depend on NT hashes.\nSetting password/samba/nthash to false will break these use cases.\n\nThis cannot be undone! All users and service accounts would have to re-set their passwords.\nThe UCR variable \"password/samba/nthash\" is not set to false.\nRemove sambaNTPassword for uid=a,cn=users,dc=x (dry run!)\nRemove sambaNTPassword for uid=b c,cn=users,dc=x (dry run!)\n";

    const KRB5_DONE: &str = "Warning: Removing Kerberos keys can prevent principals from authenticating with\nclients or services that only support the removed encryption types.\n\nThis cannot be undone without setting the affected account passwords again.\nKey types selected for removal: {1, 2, 3, 16, 23}\nRemove 2 krb5Key value(s) [23, 1] for uid=a,cn=users,dc=x done\nSkip uid=broken,cn=users,dc=x: cannot decode krb5Key: ASN.1 error\nRemove 1 krb5Key value(s) [16] for uid=b,cn=users,dc=x done\nSummary: 2 object(s) affected, 3 key value(s) removed, 1 object(s) skipped due to decoding errors.\n";

    #[test]
    fn the_nt_tool_s_output_is_read_object_by_object() {
        let r = read_nt(NT_DRY, true).unwrap();
        assert_eq!(r.changed.len(), 2);
        assert_eq!(r.changed[1].dn, "uid=b c,cn=users,dc=x");
        assert!(!r.changed[0].done);
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        let none = read_nt(
            "Warning: ...\nNo account with sambaNTPassword was found.\n",
            true,
        )
        .unwrap();
        assert!(none.changed.is_empty() && none.warnings.is_empty());
        let done = read_nt("Remove sambaNTPassword for uid=a,dc=x done\n", true).unwrap();
        assert!(done.changed[0].done);
        let e = read_nt("usage: something else\n", true).unwrap_err();
        assert!(matches!(e, ActionError::InvalidAnswer(_)), "{e:?}");
        assert!(e.to_string().contains("usage: something else"), "{e}");
    }

    #[test]
    fn the_krb5_tool_s_output_is_read_and_checked_against_its_summary() {
        let r = read_krb5(KRB5_DONE, true).unwrap();
        assert_eq!(r.changed.len(), 2);
        assert_eq!(r.keys, 3);
        assert_eq!(r.changed[0].detail, "2 krb5Key value(s) [23, 1]");
        assert!(r.changed.iter().all(|o| o.done));
        assert_eq!(r.skipped.len(), 1);
        assert_eq!(r.skipped[0].dn, "uid=broken,cn=users,dc=x");
        assert_eq!(
            r.skipped[0].detail,
            "krb5Key cannot be decoded: ASN.1 error"
        );
        let lying = KRB5_DONE.replace("3 key value(s) removed", "4 key value(s) removed");
        let e = read_krb5(&lying, true).unwrap_err().to_string();
        assert!(e.contains("disagrees with the objects it listed"), "{e}");
        let none = read_krb5("Warning\nNo object with krb5Key was found.\n", true).unwrap();
        assert!(none.changed.is_empty());
        let nothing = read_krb5(
            "Summary: 0 object(s) affected, 0 key value(s) removed, 0 object(s) skipped due to decoding errors (dry run).\n",
            true,
        )
        .unwrap();
        assert!(nothing.changed.is_empty());
        assert!(read_krb5("Traceback ...\n", true).is_err());
    }

    #[test]
    fn a_failed_tool_is_named_with_its_status_its_words_and_its_progress() {
        let out = CommandOutput {
            success: false,
            status: "exit code 1".into(),
            stdout: b"Warning\nRemove sambaNTPassword for uid=a,dc=x done\nRemove sambaNTPassword for uid=b,dc=x ".to_vec(),
            stderr: b"Traceback (most recent call last):\n  File \"x\", line 3\nldap.INSUFFICIENT_ACCESS: {'desc': 'Insufficient access'}\n".to_vec(),
        };
        let e = tool_failed(NT_TOOL, "", &out, "pod p, container main, namespace n").to_string();
        assert_eq!(
            e,
            "remove_sambantpassword failed (exit code 1) in pod p, container main, namespace n: its error output: Traceback (most recent call last): File \"x\", line 3 ldap.INSUFFICIENT_ACCESS: {'desc': 'Insufficient access'}; it had changed 1 object before (a rerun's dry runs show what is left); it stopped while changing uid=b,dc=x"
        );
        let long = CommandOutput {
            success: false,
            status: "exit code 2".into(),
            stdout: "x ".repeat(2000).into_bytes(),
            stderr: vec![],
        };
        let e = tool_failed(KRB5_TOOL, " --dry-run", &long, "there").to_string();
        assert!(
            e.starts_with(
                "remove_krb5key_keytypes --dry-run failed (exit code 2) in there: it printed: ..."
            ),
            "{e}"
        );
        assert!(e.len() < 1000, "trimmed: {}", e.len());
    }

    fn pod(name: &str, phase: &str, deleting: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: deleting
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn exactly_one_running_pod_is_chosen_else_the_message_names_what_was_found() {
        let sel = "app=udm";
        assert_eq!(
            choose_pod(
                sel,
                "ns",
                &[
                    pod("udm-1", "Running", false),
                    pod("udm-0", "Pending", false)
                ]
            )
            .unwrap(),
            "udm-1"
        );
        let none = choose_pod(sel, "ns", &[]).unwrap_err();
        assert!(matches!(none, ActionError::NotFound(_)));
        assert!(
            none.to_string()
                .starts_with("no pod in namespace ns matches udm.podSelector app=udm"),
            "{none}"
        );
        let pending = choose_pod(
            sel,
            "ns",
            &[
                pod("udm-0", "Pending", false),
                pod("udm-1", "Running", true),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            pending.contains("(found: udm-0 (Pending), udm-1 (being deleted))"),
            "{pending}"
        );
        let two = choose_pod(
            sel,
            "ns",
            &[
                pod("udm-b", "Running", false),
                pod("udm-a", "Running", false),
            ],
        )
        .unwrap_err();
        assert!(matches!(two, ActionError::Conflict(_)));
        assert!(
            two.to_string().starts_with(
                "2 Running pods in namespace ns match udm.podSelector app=udm (udm-a, udm-b)"
            ),
            "{two}"
        );
    }

    #[test]
    fn config_defaults_are_opendesk_s_and_checks_catch_what_the_schema_cannot() {
        let c: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(!c.dry_run);
        assert_eq!(
            c.udm.pod_selector,
            "app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums"
        );
        assert_eq!(c.udm.container, "main");
        assert_eq!(c.udm.timeout_seconds, 300);
        assert_eq!(
            c.udm.tool_path(NT_TOOL),
            "/usr/share/univention-directory-manager-tools/remove_sambantpassword"
        );
        assert!(c.semantic_issues().is_empty());
        let v4: Config = serde_json::from_value(serde_json::json!({"dryRun": false, "udm": {
            "podSelector": "app.kubernetes.io/name=udm-rest-api,app.kubernetes.io/instance=ums",
            "container": "main", "timeoutSeconds": 300}}))
        .unwrap();
        assert_eq!(v4, c);
        let bad: Config = serde_json::from_value(
            serde_json::json!({"udm": {"podSelector": "a=b,,c", "toolsDirectory": "tools"}}),
        )
        .unwrap();
        let paths: Vec<String> = bad.semantic_issues().into_iter().map(|i| i.path).collect();
        assert_eq!(paths, ["udm.podSelector", "udm.toolsDirectory"]);
        assert!(selector_issue(" ").is_some());
        assert!(selector_issue("a!=b,c").is_none());
        assert!(serde_json::from_value::<Config>(serde_json::json!({"udm": {"nope": 1}})).is_err());
    }
}
