//! kstatus conditions of a MigrationRun (docs/design.md#conditions): `Ready`, `Reconciling`,
//! `Stalled`, `Succeeded`, written from the first status update on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Where a run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Waiting to start (another run of the Migration, the pre run, the Migration itself).
    Waiting(String),
    /// Executing; the message says which action.
    Running(String),
    /// Every action finished or was skipped.
    Succeeded(String),
    /// An action failed; the message names it and its error.
    Failed(String),
    /// The declarations have problems; nothing was executed.
    Invalid(String),
    /// Waiting to start because the Migration is suspended (`spec.suspend: true`).
    Suspended(String),
    /// The Migration's declarations for the stage changed after the run planned them; it
    /// applies nothing more.
    DeclarationsChanged(String),
    /// The preflight found problems before the first change; nothing was applied.
    PreflightFailed(String),
    /// The history ledger exists but cannot be read; nothing was changed.
    HistoryUnreadable(String),
    /// A `Manual` run planned and passed its preflight; it waits for the annotation that
    /// approves its plan's digest. Nothing was changed.
    AwaitingApproval(String),
    /// The run is being deleted (`metadata.deletionTimestamp`: it or its namespace was
    /// deleted, and a finalizer keeps it for now): no further action starts.
    Terminating(String),
    /// A post run's pre run (the newest pre run of its release created at or before it)
    /// failed, was stopped or was a dry run: the post run applies nothing.
    PreRunFailed(String),
    /// The Migration's pre-stage declarations no longer match what the post run's pre run
    /// froze: the post run applies nothing.
    PreRunOutdated(String),
    /// The history holds footprints but no release (neither `lastMigratedRelease` nor
    /// `installedRelease`): the deployment is not a fresh installation, and the windows cannot
    /// be judged. Nothing was changed.
    HistoryIncomplete(String),
    /// A pre run of one release while an earlier release's upgrade stopped between its pre
    /// and post stages. Nothing was changed.
    InterruptedUpgrade(String),
    /// What an action found at execution is not what a person approved (a `Manual` run whose
    /// plan carried findings, docs/design.md#findings): it stopped before changing anything.
    FindingsChanged(String),
}

impl Phase {
    /// Whether the run is over.
    pub fn is_terminal(&self) -> bool {
        !matches!(
            self,
            Phase::Waiting(_)
                | Phase::Running(_)
                | Phase::Suspended(_)
                | Phase::AwaitingApproval(_)
        )
    }

    /// Whether the run is stuck until someone acts (`Stalled=True`).
    pub fn is_stalled(&self) -> bool {
        self.is_terminal() && !matches!(self, Phase::Succeeded(_))
    }

    /// The `Ready` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Phase::Waiting(_) => "Waiting",
            Phase::Running(_) => "Running",
            Phase::Succeeded(_) => "Succeeded",
            Phase::Failed(_) => "Failed",
            Phase::Invalid(_) => "Invalid",
            Phase::Suspended(_) => "Suspended",
            Phase::DeclarationsChanged(_) => "DeclarationsChanged",
            Phase::PreflightFailed(_) => "PreflightFailed",
            Phase::HistoryUnreadable(_) => "HistoryUnreadable",
            Phase::AwaitingApproval(_) => "AwaitingApproval",
            Phase::Terminating(_) => "Terminating",
            Phase::PreRunFailed(_) => "PreRunFailed",
            Phase::PreRunOutdated(_) => "PreRunOutdated",
            Phase::HistoryIncomplete(_) => "HistoryIncomplete",
            Phase::InterruptedUpgrade(_) => "InterruptedUpgrade",
            Phase::FindingsChanged(_) => "FindingsChanged",
        }
    }

    /// The conditions' message.
    pub fn message(&self) -> &str {
        match self {
            Phase::Waiting(m)
            | Phase::Running(m)
            | Phase::Succeeded(m)
            | Phase::Failed(m)
            | Phase::Invalid(m)
            | Phase::Suspended(m)
            | Phase::DeclarationsChanged(m)
            | Phase::PreflightFailed(m)
            | Phase::HistoryUnreadable(m)
            | Phase::AwaitingApproval(m)
            | Phase::Terminating(m)
            | Phase::PreRunFailed(m)
            | Phase::PreRunOutdated(m)
            | Phase::HistoryIncomplete(m)
            | Phase::InterruptedUpgrade(m)
            | Phase::FindingsChanged(m) => m,
        }
    }
}

/// Every reason a run's or a Migration's conditions carry ([`Phase::reason`], `Malformed`
/// for an object that does not decode, `Valid` for a Migration without problems): each has
/// its page in docs/runbook.md, under a heading that is the reason
/// (`operator/tests/doc_citations.rs` checks it).
pub const REASONS: [&str; 18] = [
    "Waiting",
    "Running",
    "Succeeded",
    "Failed",
    "Invalid",
    "Suspended",
    "DeclarationsChanged",
    "PreflightFailed",
    "HistoryUnreadable",
    "AwaitingApproval",
    "Terminating",
    "PreRunFailed",
    "PreRunOutdated",
    "HistoryIncomplete",
    "InterruptedUpgrade",
    "FindingsChanged",
    "Malformed",
    "Valid",
];

/// The runbook, whose headings are the reasons.
const RUNBOOK: &str = "docs/runbook.md";

/// The runbook page of `reason`: the runbook with the anchor of its heading, the reason in
/// lower case (`docs/runbook.md#preflightfailed`).
pub fn runbook_page(reason: &str) -> String {
    format!("{RUNBOOK}#{}", reason.to_ascii_lowercase())
}

/// A `Stalled=True` message: `message` (cut to fit), ending with the reason's runbook page
/// (`...; runbook: docs/runbook.md#preflightfailed`).
pub fn stalled_message(reason: &str, message: &str) -> String {
    let page = format!("; runbook: {}", runbook_page(reason));
    format!(
        "{}{page}",
        bounded(message, MAX_MESSAGE_BYTES.saturating_sub(page.len()))
    )
}

/// The most bytes a condition's message holds (metav1.Condition's `maxLength`): a message
/// built from the input (a declaration problem quoting a 1 MiB value, a server's answer
/// quoting a 1 MiB name) is cut there, so that the status write that reports it is never
/// refused for its size. Four conditions carry the message.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024;

/// The most bytes an action's summary or a declaration problem's message holds in status.
pub const MAX_DETAIL_BYTES: usize = 4 * 1024;

/// The most problems `status.problems` lists; the conditions' message counts them all.
pub const MAX_PROBLEMS: usize = 100;

/// `text`, or, when it is longer than `max` bytes, its start (cut at a character boundary)
/// and how long it was: `... [cut: 1048620 bytes in all]`.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let note = format!("... [cut: {} bytes in all]", text.len());
    let mut end = max.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

/// The first [`MAX_PROBLEMS`] problems, each text at most [`MAX_DETAIL_BYTES`] (a field path
/// holds the declaration's keys, an id what was declared), for `status.problems`.
pub fn bounded_problems(problems: &[stagehand_config::Problem]) -> Vec<stagehand_config::Problem> {
    let cut = |t: &Option<String>| t.as_deref().map(|t| bounded(t, MAX_DETAIL_BYTES));
    problems
        .iter()
        .take(MAX_PROBLEMS)
        .map(|p| stagehand_config::Problem {
            code: p.code,
            stage: p.stage,
            index: p.index,
            id: cut(&p.id),
            field: cut(&p.field),
            message: bounded(&p.message, MAX_DETAIL_BYTES),
        })
        .collect()
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    // lastTransitionTime only moves when the status does.
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: bounded(message, MAX_MESSAGE_BYTES),
        observed_generation: generation,
        last_transition_time,
    }
}

/// The four conditions of a run in `phase`.
pub fn run_conditions(
    phase: &Phase,
    generation: Option<i64>,
    previous: &[Condition],
) -> Vec<Condition> {
    let reason = phase.reason();
    let message = phase.message();
    let done = phase.is_terminal();
    let succeeded = matches!(phase, Phase::Succeeded(_));
    let stalled = phase.is_stalled();
    let stalled_says = if stalled {
        stalled_message(reason, message)
    } else {
        message.to_string()
    };
    let mut out = vec![
        condition("Ready", succeeded, reason, message, generation, previous),
        condition("Reconciling", !done, reason, message, generation, previous),
        condition(
            "Stalled",
            stalled,
            reason,
            &stalled_says,
            generation,
            previous,
        ),
    ];
    if done {
        out.push(condition(
            "Succeeded",
            succeeded,
            reason,
            message,
            generation,
            previous,
        ));
    }
    out
}

/// The conditions of a Migration: `Ready` when its declarations are valid and its history
/// readable, `Stalled` with every problem otherwise (reason `Invalid` or `HistoryUnreadable`).
pub fn migration_conditions(
    reason: &str,
    problems: &[String],
    generation: Option<i64>,
    previous: &[Condition],
) -> Vec<Condition> {
    if problems.is_empty() {
        vec![
            condition(
                "Ready",
                true,
                "Valid",
                "the declarations of both stages are valid",
                generation,
                previous,
            ),
            condition("Stalled", false, "Valid", "", generation, previous),
        ]
    } else {
        let message = format!("{} problem(s): {}", problems.len(), problems.join("; "));
        vec![
            condition("Ready", false, reason, &message, generation, previous),
            condition(
                "Stalled",
                true,
                reason,
                &stalled_message(reason, &message),
                generation,
                previous,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
        c.iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t}"))
    }

    #[test]
    fn kstatus_shapes() {
        let running = run_conditions(&Phase::Running("action 1/3".into()), Some(1), &[]);
        assert_eq!(get(&running, "Ready").status, "False");
        assert_eq!(get(&running, "Ready").reason, "Running");
        assert_eq!(get(&running, "Reconciling").status, "True");
        assert_eq!(get(&running, "Stalled").status, "False");
        assert!(running.iter().all(|c| c.type_ != "Succeeded"));
        let ok = run_conditions(&Phase::Succeeded("done".into()), Some(1), &running);
        assert_eq!(get(&ok, "Ready").status, "True");
        assert_eq!(get(&ok, "Reconciling").status, "False");
        assert_eq!(get(&ok, "Succeeded").status, "True");
        let failed = run_conditions(&Phase::Failed("workload_scale: boom".into()), Some(2), &[]);
        assert_eq!(get(&failed, "Stalled").status, "True");
        assert_eq!(get(&failed, "Stalled").reason, "Failed");
        assert_eq!(get(&failed, "Succeeded").status, "False");
        assert_eq!(get(&failed, "Ready").observed_generation, Some(2));
        let invalid = run_conditions(&Phase::Invalid("2 problems".into()), None, &[]);
        assert_eq!(get(&invalid, "Ready").reason, "Invalid");
    }

    #[test]
    fn new_reasons_have_their_contracted_shapes() {
        for phase in [
            Phase::DeclarationsChanged("x".into()),
            Phase::PreflightFailed("x".into()),
            Phase::HistoryUnreadable("x".into()),
            Phase::PreRunFailed("x".into()),
            Phase::PreRunOutdated("x".into()),
            Phase::HistoryIncomplete("x".into()),
            Phase::InterruptedUpgrade("x".into()),
        ] {
            let c = run_conditions(&phase, Some(1), &[]);
            let reason = phase.reason();
            assert_eq!(
                (
                    get(&c, "Stalled").status.as_str(),
                    get(&c, "Stalled").reason.as_str()
                ),
                ("True", reason)
            );
            assert_eq!(
                (
                    get(&c, "Ready").status.as_str(),
                    get(&c, "Ready").reason.as_str()
                ),
                ("False", reason)
            );
            assert_eq!(get(&c, "Reconciling").status, "False", "{reason}");
            assert_eq!(get(&c, "Succeeded").status, "False", "{reason}");
        }
        let suspended = run_conditions(&Phase::Suspended("held".into()), Some(1), &[]);
        assert_eq!(
            (
                get(&suspended, "Ready").status.as_str(),
                get(&suspended, "Ready").reason.as_str()
            ),
            ("False", "Suspended")
        );
        assert_eq!(get(&suspended, "Reconciling").status, "True");
        assert_eq!(get(&suspended, "Stalled").status, "False");
        assert!(suspended.iter().all(|c| c.type_ != "Succeeded"), "not over");
        let awaiting = run_conditions(&Phase::AwaitingApproval("approve".into()), Some(1), &[]);
        assert_eq!(
            (
                get(&awaiting, "Ready").status.as_str(),
                get(&awaiting, "Ready").reason.as_str(),
                get(&awaiting, "Reconciling").status.as_str(),
                get(&awaiting, "Stalled").status.as_str()
            ),
            ("False", "AwaitingApproval", "True", "False"),
            "kstatus: InProgress"
        );
        assert!(awaiting.iter().all(|c| c.type_ != "Succeeded"), "not over");
    }

    #[test]
    fn a_stalled_message_ends_with_its_reason_s_runbook_page() {
        let phases = [
            Phase::Waiting(String::new()),
            Phase::Running(String::new()),
            Phase::Succeeded(String::new()),
            Phase::Failed(String::new()),
            Phase::Invalid(String::new()),
            Phase::Suspended(String::new()),
            Phase::DeclarationsChanged(String::new()),
            Phase::PreflightFailed(String::new()),
            Phase::HistoryUnreadable(String::new()),
            Phase::AwaitingApproval(String::new()),
            Phase::Terminating(String::new()),
            Phase::PreRunFailed(String::new()),
            Phase::PreRunOutdated(String::new()),
            Phase::HistoryIncomplete(String::new()),
            Phase::InterruptedUpgrade(String::new()),
            Phase::FindingsChanged(String::new()),
        ];
        for phase in &phases {
            let reason = phase.reason();
            assert!(
                REASONS.contains(&reason),
                "{reason} has no runbook page listed"
            );
            // Every way a run can end exists at 0 in the run series the alerts read.
            let result = reason.to_ascii_lowercase();
            assert_eq!(
                crate::metrics::RUN_RESULTS.contains(&result.as_str()),
                phase.is_terminal(),
                "{reason}: metrics::RUN_RESULTS lists exactly the terminal reasons"
            );
        }
        let c = run_conditions(&Phase::PreflightFailed("no Secret s".into()), Some(1), &[]);
        assert_eq!(
            get(&c, "Stalled").message,
            "no Secret s; runbook: docs/runbook.md#preflightfailed"
        );
        assert_eq!(
            get(&c, "Ready").message,
            "no Secret s",
            "only Stalled names it"
        );
        let running = run_conditions(&Phase::Running("action 0".into()), Some(1), &[]);
        assert_eq!(get(&running, "Stalled").message, "action 0");
        let long = run_conditions(&Phase::Failed("x".repeat(1 << 20)), Some(1), &[]);
        let message = &get(&long, "Stalled").message;
        assert!(message.len() <= MAX_MESSAGE_BYTES);
        assert!(
            message.ends_with("; runbook: docs/runbook.md#failed"),
            "cut before the page"
        );
        let invalid = migration_conditions("Invalid", &["bad".into()], None, &[]);
        assert!(
            get(&invalid, "Stalled")
                .message
                .ends_with("; runbook: docs/runbook.md#invalid")
        );
    }

    #[test]
    fn long_messages_are_cut_with_their_length() {
        assert_eq!(bounded("short", 10), "short");
        let long = "é".repeat(600_000);
        let cut = bounded(&long, MAX_MESSAGE_BYTES);
        assert!(cut.len() <= MAX_MESSAGE_BYTES, "{}", cut.len());
        assert!(
            cut.ends_with("... [cut: 1200000 bytes in all]"),
            "{}",
            &cut[cut.len() - 40..]
        );
        let c = run_conditions(&Phase::Invalid(long), Some(1), &[]);
        assert!(c.iter().all(|c| c.message.len() <= MAX_MESSAGE_BYTES));
        let problem = stagehand_config::Problem {
            code: stagehand_config::ProblemCode::UnknownAction,
            stage: None,
            index: None,
            id: None,
            field: None,
            message: "x".repeat(1 << 20),
        };
        let problems = bounded_problems(&vec![problem; 1000]);
        assert_eq!(problems.len(), MAX_PROBLEMS);
        assert!(problems.iter().all(|p| p.message.len() <= MAX_DETAIL_BYTES));
    }

    #[test]
    fn terminating_is_over_and_stalled() {
        let c = run_conditions(&Phase::Terminating("deleted".into()), Some(1), &[]);
        assert_eq!(get(&c, "Ready").reason, "Terminating");
        assert_eq!(get(&c, "Stalled").status, "True");
        assert_eq!(get(&c, "Reconciling").status, "False");
        assert_eq!(get(&c, "Succeeded").status, "False");
    }

    #[test]
    fn transition_time_is_kept_while_status_stays() {
        let first = run_conditions(&Phase::Waiting("x".into()), None, &[]);
        let mut old = first.clone();
        for c in &mut old {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        let second = run_conditions(&Phase::Running("y".into()), None, &old);
        assert_eq!(
            get(&second, "Ready").last_transition_time,
            Time(Timestamp::UNIX_EPOCH),
            "Ready stayed False"
        );
    }
}
