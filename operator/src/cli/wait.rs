//! `stagehand wait`: follows MigrationRuns until they are done, for CI pipelines, Helm 3 hook
//! Jobs and people at a terminal. One line per action as it starts and ends, one per change
//! of the run's state; exit 0 when the run succeeded, 1 as soon as it stalls or fails, 2 on
//! timeout or usage error.
//!
//! What counts as done is [`verdict`], a pure function of one run: a run counts only once the
//! operator has observed its generation (a run it has not seen yet is pending, never done),
//! then `Stalled=True` is a failure and `Ready=True` a success. [`Follower`] turns successive
//! snapshots of a run into the lines to print; [`newest_per_stage`] picks, for
//! `--for-release`, the run of each stage that the deployment waits on: a dry run changed
//! nothing, so it does not count unless `--include-dry-runs` is given. Only [`run`] talks to
//! the cluster.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use stagehand_crds::MigrationRun;
use stagehand_crds::unversioned::{ActionDecision, Stage};

use super::output::{EXIT_INVALID, EXIT_OK, EXIT_USAGE};

/// `stagehand wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The run to wait for: `migrationrun/NAME` (also `migrationruns/`, `migrun/`,
    /// `migrationrun.stagehand.dev/`). With `--for-release`, it names the Migration whose
    /// release to wait for (that run's; or `migration/NAME`).
    #[arg(required_unless_present = "for_release")]
    pub target: Option<String>,
    /// Wait for both stages of this release: the newest pre and the newest post run of every
    /// Migration that has a run for it (`spec.release`), or only of the target's Migration.
    #[arg(long, value_name = "RELEASE")]
    pub for_release: Option<String>,
    /// With `--for-release`: only the runs of this Migration.
    #[arg(long, requires = "for_release", value_name = "NAME")]
    pub migration: Option<String>,
    /// With `--for-release`: count dry runs (`spec.dryRun: true`) too. Without it, a stage
    /// whose newest run is a dry run is not done: a dry run changed nothing.
    #[arg(long, requires = "for_release")]
    pub include_dry_runs: bool,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// How long to wait: `90s`, `30m`, `1h30m` or seconds.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// What one run's status says about its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not done: not yet observed by the operator, waiting or running. Carries what it is
    /// doing (`Reason: message`).
    Pending(String),
    /// `Ready=True` for the run's current generation.
    Succeeded(String),
    /// `Stalled=True` for the run's current generation: the message says why.
    Failed(String),
}

/// Whether `run` is done, from its conditions. A run whose current generation the operator
/// has not observed yet (no status, `observedGeneration: -1`, or an older generation) is
/// pending whatever its conditions say.
pub fn verdict(run: &MigrationRun) -> Verdict {
    let status = run.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation);
    let generation = run.metadata.generation;
    if observed.is_none() || observed < Some(0) || (generation.is_some() && observed != generation)
    {
        return Verdict::Pending(format!(
            "NotObserved: the operator has not reconciled generation {} yet",
            generation.unwrap_or(0)
        ));
    }
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    let said = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
        format!("{}: {}", c.reason, c.message)
    };
    if let Some(c) = find("Stalled").filter(|c| c.status == "True") {
        return Verdict::Failed(said(c));
    }
    match find("Ready") {
        Some(c) if c.status == "True" => Verdict::Succeeded(said(c)),
        Some(c) => Verdict::Pending(said(c)),
        None => Verdict::Pending("NoConditions: the operator has written no condition yet".into()),
    }
}

/// Turns successive snapshots of one run into the lines to print, each said once.
#[derive(Debug, Default)]
pub struct Follower {
    started: HashMap<u32, ()>,
    ended: HashMap<u32, ()>,
    last_state: Option<String>,
    missing_said: bool,
    last_progress: Option<String>,
}

impl Follower {
    /// The lines `run` adds to what was printed before: its state when the reason changed
    /// (`Waiting`, `Running`, ...), then each action that started or ended since.
    pub fn observe(&mut self, run: &MigrationRun) -> Vec<String> {
        let name = run.name_any();
        let mut lines = Vec::new();
        let state = match verdict(run) {
            Verdict::Pending(s) | Verdict::Succeeded(s) | Verdict::Failed(s) => s,
        };
        let reason = state.split(':').next().unwrap_or_default().to_string();
        if self.last_state.as_deref() != Some(reason.as_str()) {
            lines.push(format!("{name}: {state}"));
            self.last_state = Some(reason);
        }
        let actions = run
            .status
            .as_ref()
            .map(|s| s.actions.as_slice())
            .unwrap_or_default();
        let total = actions.len();
        for (position, a) in actions.iter().enumerate() {
            let label = match &a.tag {
                Some(tag) => format!("{name}: [{}/{total}] {} ({tag})", position + 1, a.id),
                None => format!("{name}: [{}/{total}] {}", position + 1, a.id),
            };
            let summary = a
                .summary
                .as_deref()
                .map(|s| format!(": {s}"))
                .unwrap_or_default();
            if a.start_time.is_some() && self.started.insert(a.index, ()).is_none() {
                lines.push(format!("{label} started"));
            }
            let end = match a.decision {
                ActionDecision::Run => None,
                ActionDecision::Skipped => Some(format!("{label} skipped ({}){summary}", a.reason)),
                ActionDecision::Succeeded => Some(format!("{label} succeeded{summary}")),
                ActionDecision::Failed => Some(format!("{label} failed ({}){summary}", a.reason)),
            };
            if let Some(end) = end
                && self.ended.insert(a.index, ()).is_none()
            {
                lines.push(end);
            }
        }
        lines
    }

    /// The running action's progress (`status.actions[i].progress`) when it changed since
    /// the last call: `pre: [1/2] ox_functional_accounts_export: deleting Functional Accounts
    /// from the IAM: 2,100/5,000 accounts`. `None` when it did not change or no action reports
    /// any.
    pub fn progress(&mut self, run: &MigrationRun) -> Option<String> {
        let name = run.name_any();
        let actions = run
            .status
            .as_ref()
            .map(|s| s.actions.as_slice())
            .unwrap_or_default();
        let line = actions.iter().enumerate().find_map(|(position, a)| {
            let running = a.decision == ActionDecision::Run
                && a.start_time.is_some()
                && a.completion_time.is_none();
            let figure = a.progress.as_ref().filter(|_| running)?;
            Some(format!(
                "{name}: [{}/{}] {}: {}",
                position + 1,
                actions.len(),
                a.id,
                crate::run::progress::snapshot_of(figure).line()
            ))
        })?;
        if self.last_progress.as_deref() == Some(line.as_str()) {
            return None;
        }
        self.last_progress = Some(line.clone());
        Some(line)
    }

    /// The line for a run that does not exist (yet), said once.
    pub fn missing(&mut self, name: &str) -> Option<String> {
        if self.missing_said {
            return None;
        }
        self.missing_said = true;
        Some(format!(
            "{name}: not found yet; waiting for it to be created"
        ))
    }
}

/// Which runs `--for-release` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DryRuns {
    /// Real runs only (the default): a dry run changed nothing.
    Left,
    /// Real and dry runs (`--include-dry-runs`).
    Counted,
    /// Dry runs only (what was left out, to say so).
    Only,
}

/// For `--for-release`: the newest run (by creation time, then name) of each Migration and
/// stage among `runs` that are for `release` (and of `migration`, when given) and that `dry`
/// counts, keyed by (Migration, stage).
pub fn newest_per_stage<'a>(
    runs: impl IntoIterator<Item = &'a MigrationRun>,
    release: &str,
    migration: Option<&str>,
    dry: DryRuns,
) -> BTreeMap<(String, Stage), &'a MigrationRun> {
    let same = |a: &str| a.trim_start_matches('v') == release.trim_start_matches('v');
    let counted = |r: &MigrationRun| match dry {
        DryRuns::Left => !r.spec.dry_run,
        DryRuns::Counted => true,
        DryRuns::Only => r.spec.dry_run,
    };
    let mut out: BTreeMap<(String, Stage), &MigrationRun> = BTreeMap::new();
    for run in runs {
        if !same(&run.spec.release)
            || migration.is_some_and(|m| m != run.spec.migration_ref)
            || !counted(run)
        {
            continue;
        }
        let key = (run.spec.migration_ref.clone(), run.spec.stage);
        let newer = |old: &MigrationRun| {
            (run.creation_timestamp(), run.name_any()) > (old.creation_timestamp(), old.name_any())
        };
        match out.get(&key) {
            Some(old) if !newer(old) => {}
            _ => {
                out.insert(key, run);
            }
        }
    }
    out
}

/// The verdict over a release's runs: failed as soon as one fails; succeeded when every
/// Migration with a run for the release has a succeeded pre and post run; pending otherwise.
/// `dry` holds the newest dry runs left out (empty with `--include-dry-runs`): a stage that
/// has only those is not done, and the verdict says why.
pub fn release_verdict(
    newest: &BTreeMap<(String, Stage), &MigrationRun>,
    dry: &BTreeMap<(String, Stage), &MigrationRun>,
) -> Verdict {
    let mut pending = Vec::new();
    let only_dry = |migration: &str, stage: Stage| {
        dry.get(&(migration.to_string(), stage)).map(|run| {
            format!(
                "Migration {migration}: no {stage} run yet ({} is a dry run, which changed nothing and does not count: pass --include-dry-runs to count it)",
                run.name_any()
            )
        })
    };
    // A Migration with dry runs only is part of the release too: both its stages wait.
    for (migration, stage) in dry.keys() {
        if !newest.keys().any(|(m, _)| m == migration)
            && let Some(line) = only_dry(migration, *stage)
        {
            pending.push(line);
        }
    }
    for ((migration, stage), run) in newest {
        match verdict(run) {
            Verdict::Failed(m) => {
                return Verdict::Failed(format!("{}: {m}", run.name_any()));
            }
            Verdict::Pending(m) => pending.push(format!("{}: {m}", run.name_any())),
            Verdict::Succeeded(_) => {}
        }
        let other = match stage {
            Stage::Pre => Stage::Post,
            Stage::Post => Stage::Pre,
        };
        if !newest.contains_key(&(migration.clone(), other)) {
            pending.push(
                only_dry(migration, other)
                    .unwrap_or_else(|| format!("Migration {migration}: no {other} run yet")),
            );
        }
    }
    if newest.is_empty() && dry.is_empty() {
        return Verdict::Pending("NotFound: no run for this release yet".into());
    }
    if pending.is_empty() {
        Verdict::Succeeded(format!("{} runs succeeded", newest.len()))
    } else {
        Verdict::Pending(pending.join("; "))
    }
}

/// Parses `90s`, `30m`, `1h30m`, `2h`, `1500ms` or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}: use e.g. 90s, 30m, 1h30m or seconds");
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut number = String::new();
    let mut chars = s.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().map_err(|_| bad())?;
        number.clear();
        let unit = match c {
            'h' => Duration::from_secs(3600),
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                Duration::from_millis(1)
            }
            'm' => Duration::from_secs(60),
            's' => Duration::from_secs(1),
            _ => return Err(bad()),
        };
        total += unit * u32::try_from(n).map_err(|_| bad())?;
        any = true;
    }
    if !number.is_empty() || !any {
        return Err(bad());
    }
    Ok(total)
}

/// What `KIND/NAME` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// A MigrationRun.
    Run(String),
    /// A Migration (only with `--for-release`).
    Migration(String),
}

/// Parses `migrationrun/NAME` (and the kind's other spellings) or `migration/NAME`.
pub fn parse_target(target: &str) -> Result<Named, String> {
    let (kind, name) = target
        .split_once('/')
        .ok_or_else(|| format!("{target:?}: name the run as migrationrun/NAME"))?;
    if name.is_empty() {
        return Err(format!("{target:?}: the name is missing"));
    }
    match kind.to_ascii_lowercase().as_str() {
        "migrationrun"
        | "migrationruns"
        | "migrun"
        | "migrationrun.stagehand.dev"
        | "migrationruns.stagehand.dev" => Ok(Named::Run(name.to_string())),
        "migration"
        | "migrations"
        | "mig"
        | "migration.stagehand.dev"
        | "migrations.stagehand.dev" => Ok(Named::Migration(name.to_string())),
        _ => Err(format!(
            "{target:?}: stagehand wait follows MigrationRuns; name one as migrationrun/NAME"
        )),
    }
}

/// What to follow.
enum Target {
    Run(String),
    Release {
        release: String,
        /// Only this Migration's runs.
        migration: Option<String>,
        /// Only the runs of this run's Migration (known once the run is seen).
        of_run: Option<String>,
        /// Whether dry runs count.
        dry: DryRuns,
    },
}

/// What the command line asks to follow, or why it is a usage error.
fn target_of(args: &WaitArgs) -> Result<Target, String> {
    let named = args.target.as_deref().map(parse_target).transpose()?;
    match (named, &args.for_release) {
        (Some(Named::Run(name)), None) => Ok(Target::Run(name)),
        (Some(Named::Migration(_)), None) => Err(
            "a Migration is waited for with --for-release RELEASE; a run as migrationrun/NAME"
                .into(),
        ),
        (named, Some(release)) => {
            let (of_run, migration) = match named {
                Some(Named::Run(run)) => (Some(run), args.migration.clone()),
                Some(Named::Migration(m)) => {
                    if args.migration.as_ref().is_some_and(|other| *other != m) {
                        return Err(format!(
                            "migration/{m} and --migration {} disagree",
                            args.migration.as_deref().unwrap_or_default()
                        ));
                    }
                    (None, Some(m))
                }
                None => (None, args.migration.clone()),
            };
            Ok(Target::Release {
                release: release.clone(),
                migration,
                of_run,
                dry: if args.include_dry_runs {
                    DryRuns::Counted
                } else {
                    DryRuns::Left
                },
            })
        }
        (None, None) => Err("name a run (migrationrun/NAME) or --for-release RELEASE".into()),
    }
}

/// Runs `stagehand wait`; the exit code.
pub fn run(args: WaitArgs) -> u8 {
    let target = match target_of(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("stagehand wait: {e}");
            return EXIT_USAGE;
        }
    };
    let timeout = args.timeout;
    let namespace = args.namespace.clone();
    super::cluster::with_client("wait", |client| async move {
        follow(client, namespace, target, timeout).await
    })
}

async fn follow(
    client: Client,
    namespace: Option<String>,
    target: Target,
    timeout: Duration,
) -> u8 {
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let api: Api<MigrationRun> = Api::namespaced(client, &ns);
    let config = match &target {
        Target::Run(name) => watcher::Config::default().fields(&format!("metadata.name={name}")),
        Target::Release { .. } => watcher::Config::default(),
    };
    let what = match &target {
        Target::Run(name) => format!("migrationrun/{name}"),
        Target::Release { release, .. } => format!("release {release}"),
    };
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut runs: BTreeMap<String, MigrationRun> = BTreeMap::new();
    let mut followers: HashMap<String, Follower> = HashMap::new();
    let mut synced = false;
    let mut last_error: Option<String> = None;
    let mut last_state = String::from("nothing observed yet");
    let deadline = tokio::time::Instant::now() + timeout;
    let mut printer = Printer::new(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    loop {
        let event = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => {
                eprintln!("stagehand wait: the watch of {what} ended");
                return EXIT_USAGE;
            }
            Err(_) => {
                eprintln!(
                    "stagehand wait: timed out after {} waiting for {what}: {last_state}",
                    humanize(timeout)
                );
                return EXIT_USAGE;
            }
        };
        match event {
            Ok(Event::Init) => {}
            Ok(Event::InitApply(run) | Event::Apply(run)) => {
                runs.insert(run.name_any(), run);
            }
            Ok(Event::Delete(run)) => {
                if let Target::Run(name) = &target
                    && *name == run.name_any()
                {
                    eprintln!("stagehand wait: {what} was deleted before it finished");
                    return EXIT_INVALID;
                }
                runs.remove(&run.name_any());
            }
            Ok(Event::InitDone) => synced = true,
            Err(e) => {
                let e = e.to_string();
                if last_error.as_deref() != Some(e.as_str()) {
                    eprintln!("stagehand wait: watching {what} in namespace {ns}: {e} (retrying)");
                    last_error = Some(e);
                }
                continue;
            }
        }
        if !synced {
            continue;
        }
        let verdict = match &target {
            Target::Run(name) => {
                let follower = followers.entry(name.clone()).or_default();
                match runs.get(name) {
                    Some(run) => {
                        show(&mut printer, follower, run);
                        verdict(run)
                    }
                    None => {
                        if let Some(line) = follower.missing(name) {
                            say(&printer.line(&line));
                        }
                        Verdict::Pending("NotFound: the run does not exist".into())
                    }
                }
            }
            Target::Release {
                release,
                migration,
                of_run,
                dry,
            } => {
                let of_run_migration = of_run
                    .as_ref()
                    .and_then(|name| runs.get(name))
                    .map(|r| r.spec.migration_ref.clone());
                if let Some(name) = of_run
                    && of_run_migration.is_none()
                {
                    let follower = followers.entry(name.clone()).or_default();
                    if let Some(line) = follower.missing(name) {
                        say(&printer.line(&line));
                    }
                    last_state = format!("NotFound: migrationrun/{name} does not exist");
                    continue;
                }
                let only = migration.as_deref().or(of_run_migration.as_deref());
                let newest = newest_per_stage(runs.values(), release, only, *dry);
                let left_out = if *dry == DryRuns::Left {
                    newest_per_stage(runs.values(), release, only, DryRuns::Only)
                } else {
                    BTreeMap::new()
                };
                for run in newest.values() {
                    let follower = followers.entry(run.name_any()).or_default();
                    show(&mut printer, follower, run);
                }
                release_verdict(&newest, &left_out)
            }
        };
        match verdict {
            Verdict::Succeeded(m) => {
                say(&printer.line(&format!("{what}: succeeded ({m})")));
                return EXIT_OK;
            }
            Verdict::Failed(m) => {
                say(&printer.line(&format!("{what}: failed: {m}")));
                eprintln!("stagehand wait: {what} failed: {m}");
                return EXIT_INVALID;
            }
            Verdict::Pending(m) => last_state = m,
        }
    }
}

/// Writes what `stagehand wait` says: the lines of [`Follower::observe`] one per line, and the
/// running action's progress ([`Follower::progress`]) as it changes. On a terminal the progress
/// is one live line, rewritten in place (`\r`) and cleared before the next line; elsewhere (a
/// CI log, a hook Job's log) each change is a line of its own.
#[derive(Debug)]
pub struct Printer {
    terminal: bool,
    live: bool,
}

impl Printer {
    /// A printer for a terminal (`terminal`) or a log.
    pub fn new(terminal: bool) -> Self {
        Self {
            terminal,
            live: false,
        }
    }

    /// The text for a line said once.
    pub fn line(&mut self, line: &str) -> String {
        let clear = if std::mem::take(&mut self.live) {
            "\r\x1b[2K"
        } else {
            ""
        };
        format!("{clear}{line}\n")
    }

    /// The text for a progress line.
    pub fn progress(&mut self, line: &str) -> String {
        if self.terminal {
            self.live = true;
            format!("\r\x1b[2K{line}")
        } else {
            format!("{line}\n")
        }
    }
}

/// Says what `run` adds since `follower` last saw it: its lines, then its progress.
fn show(printer: &mut Printer, follower: &mut Follower, run: &MigrationRun) {
    for line in follower.observe(run) {
        say(&printer.line(&line));
    }
    if let Some(line) = follower.progress(run) {
        say(&printer.progress(&line));
    }
}

/// Writes `text` to standard output now (a live line has no newline to flush it).
fn say(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{condition, migration_run};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use stagehand_crds::unversioned::{ActionStatus, MigrationRunStatus};

    fn run(
        name: &str,
        stage: Stage,
        observed: Option<i64>,
        conditions: Vec<Condition>,
    ) -> MigrationRun {
        let mut r = migration_run(name, stage, "v1.18.0");
        r.metadata.generation = Some(1);
        r.status = Some(MigrationRunStatus {
            observed_generation: observed,
            conditions,
            ..Default::default()
        });
        r
    }

    /// A run the operator has seen (generation 1), with one condition.
    fn seen(name: &str, stage: Stage, condition: Condition) -> MigrationRun {
        run(name, stage, Some(1), vec![condition])
    }

    fn ready(name: &str, stage: Stage) -> MigrationRun {
        seen(name, stage, condition("Ready", true, "Succeeded", "2/2"))
    }

    #[test]
    fn a_run_the_operator_has_not_seen_is_pending_whatever_it_says() {
        let conditions = vec![condition("Ready", true, "Succeeded", "done")];
        for observed in [None, Some(-1), Some(0)] {
            let r = run("r", Stage::Pre, observed, conditions.clone());
            assert!(matches!(verdict(&r), Verdict::Pending(_)), "{observed:?}");
        }
        let mut no_status = run("r", Stage::Pre, None, vec![]);
        no_status.status = None;
        assert!(matches!(verdict(&no_status), Verdict::Pending(_)));
        assert!(matches!(
            verdict(&run("r", Stage::Pre, Some(1), conditions)),
            Verdict::Succeeded(_)
        ));
    }

    #[test]
    fn stalled_fails_with_its_message_and_reconciling_is_pending() {
        for (stage, second, reason, message, expected) in [
            (
                Stage::Pre,
                "Stalled",
                "Failed",
                "workload_scale: boom",
                Verdict::Failed("Failed: workload_scale: boom".into()),
            ),
            (
                Stage::Post,
                "Reconciling",
                "Waiting",
                "for the pre run",
                Verdict::Pending("Waiting: for the pre run".into()),
            ),
        ] {
            let r = run(
                "r",
                stage,
                Some(1),
                vec![
                    condition("Ready", false, reason, message),
                    condition(second, true, reason, message),
                ],
            );
            assert_eq!(verdict(&r), expected);
        }
    }

    #[test]
    fn follower_says_each_start_and_end_once() {
        let running = condition("Ready", false, "Running", "action 1/2");
        let mut r = seen("r", Stage::Pre, running);
        let action =
            |index: u32, id: &str, decision, started: bool, summary: Option<&str>| ActionStatus {
                index,
                id: id.into(),
                tag: Some("v1.18.0".into()),
                run_mode: None,
                decision,
                reason: "InWindow".into(),
                start_time: started.then(|| "2026-12-02T00:00:00Z".into()),
                completion_time: None,
                summary: summary.map(Into::into),
                digest: None,
                findings: None,
                progress: None,
            };
        let mut f = Follower::default();
        r.status.as_mut().unwrap().actions = vec![
            action(0, "workload_scale", ActionDecision::Run, true, None),
            action(
                1,
                "flush_intercom_sessions",
                ActionDecision::Run,
                false,
                None,
            ),
        ];
        assert_eq!(
            f.observe(&r),
            vec![
                "r: Running: action 1/2".to_string(),
                "r: [1/2] workload_scale (v1.18.0) started".to_string()
            ]
        );
        assert!(f.observe(&r).is_empty(), "nothing new, nothing said");
        r.status.as_mut().unwrap().actions[0] = action(
            0,
            "workload_scale",
            ActionDecision::Succeeded,
            true,
            Some("scaled to 0"),
        );
        assert_eq!(
            f.observe(&r),
            vec!["r: [1/2] workload_scale (v1.18.0) succeeded: scaled to 0".to_string()]
        );
    }

    #[test]
    fn the_running_action_s_progress_is_said_when_it_changes_and_live_on_a_terminal() {
        let running = condition("Ready", false, "Running", "action 0 x");
        let mut r = seen("pre", Stage::Pre, running);
        let figure = |done: u64| stagehand_crds::unversioned::ActionProgress {
            phase: "deleting Functional Accounts from the IAM".into(),
            done,
            total: Some(5_000),
            unit: "accounts".into(),
        };
        let action = |progress: Option<u64>, decision| ActionStatus {
            index: 0,
            id: "ox_functional_accounts_export".into(),
            tag: None,
            run_mode: None,
            decision,
            reason: "InWindow".into(),
            start_time: Some("2026-12-02T00:00:00Z".into()),
            completion_time: (decision != ActionDecision::Run)
                .then(|| "2026-12-02T00:01:00Z".into()),
            summary: None,
            digest: None,
            findings: None,
            progress: progress.map(figure),
        };
        let mut f = Follower::default();
        r.status.as_mut().unwrap().actions = vec![action(None, ActionDecision::Run)];
        assert_eq!(f.progress(&r), None, "nothing reported yet");
        r.status.as_mut().unwrap().actions = vec![action(Some(2_100), ActionDecision::Run)];
        let line = "pre: [1/1] ox_functional_accounts_export: deleting Functional Accounts from the IAM: 2,100/5,000 accounts";
        assert_eq!(f.progress(&r).as_deref(), Some(line));
        assert_eq!(f.progress(&r), None, "unchanged: said once");
        r.status.as_mut().unwrap().actions = vec![action(Some(4_200), ActionDecision::Run)];
        assert!(f.progress(&r).unwrap().ends_with("4,200/5,000 accounts"));
        r.status.as_mut().unwrap().actions = vec![action(Some(5_000), ActionDecision::Succeeded)];
        assert_eq!(
            f.progress(&r),
            None,
            "an action that ended shows no progress"
        );

        let mut log = Printer::new(false);
        assert_eq!(log.progress("a 1/2"), "a 1/2\n");
        assert_eq!(log.progress("a 2/2"), "a 2/2\n");
        assert_eq!(log.line("done"), "done\n");
        let mut tty = Printer::new(true);
        assert_eq!(tty.line("started"), "started\n", "no live line to clear");
        assert_eq!(tty.progress("a 1/2"), "\r\x1b[2Ka 1/2");
        assert_eq!(
            tty.progress("a 2/2"),
            "\r\x1b[2Ka 2/2",
            "rewritten in place"
        );
        assert_eq!(
            tty.line("succeeded"),
            "\r\x1b[2Ksucceeded\n",
            "the live line is cleared"
        );
        assert_eq!(tty.line("next"), "next\n");
    }

    #[test]
    fn for_release_waits_for_the_newest_run_of_both_stages() {
        let mut old_failed = seen(
            "pre-1",
            Stage::Pre,
            condition("Stalled", true, "Failed", "boom"),
        );
        old_failed.metadata.creation_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let mut pre = ready("pre-2", Stage::Pre);
        pre.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        let runs = [old_failed, pre.clone()];
        let newest = newest_per_stage(runs.iter(), "1.18.0", None, DryRuns::Left);
        assert_eq!(newest.len(), 1);
        assert!(
            matches!(release_verdict(&newest, &BTreeMap::new()), Verdict::Pending(m) if m.contains("no post run")),
            "only the pre run: pending, and the failed older run is superseded"
        );
        let post = ready("post-1", Stage::Post);
        let runs = [pre.clone(), post];
        let newest = newest_per_stage(runs.iter(), "v1.18.0", Some("opendesk"), DryRuns::Left);
        assert!(matches!(
            release_verdict(&newest, &BTreeMap::new()),
            Verdict::Succeeded(_)
        ));
        assert!(newest_per_stage(runs.iter(), "v1.18.0", Some("other"), DryRuns::Left).is_empty());
        assert!(newest_per_stage(runs.iter(), "v1.19.0", None, DryRuns::Left).is_empty());
    }

    #[test]
    fn for_release_counts_a_dry_run_only_when_asked() {
        let pre = ready("pre", Stage::Pre);
        let mut dry_post = ready("post-dry", Stage::Post);
        dry_post.spec.dry_run = true;
        let runs = [pre, dry_post];
        let newest = newest_per_stage(runs.iter(), "v1.18.0", None, DryRuns::Left);
        let left_out = newest_per_stage(runs.iter(), "v1.18.0", None, DryRuns::Only);
        assert_eq!(
            release_verdict(&newest, &left_out),
            Verdict::Pending("Migration opendesk: no post run yet (post-dry is a dry run, which changed nothing and does not count: pass --include-dry-runs to count it)".into())
        );
        let all = newest_per_stage(runs.iter(), "v1.18.0", None, DryRuns::Counted);
        assert!(matches!(
            release_verdict(&all, &BTreeMap::new()),
            Verdict::Succeeded(_)
        ));
        // Dry runs only: pending, saying so for each stage.
        let mut dry_pre = ready("pre-dry", Stage::Pre);
        dry_pre.spec.dry_run = true;
        let runs = [dry_pre, runs[1].clone()];
        let newest = newest_per_stage(runs.iter(), "v1.18.0", None, DryRuns::Left);
        let left_out = newest_per_stage(runs.iter(), "v1.18.0", None, DryRuns::Only);
        assert!(newest.is_empty());
        assert!(
            matches!(release_verdict(&newest, &left_out), Verdict::Pending(m)
                if m.contains("no pre run yet (pre-dry is a dry run") && m.contains("no post run yet (post-dry is a dry run")),
        );
    }

    #[test]
    fn durations_and_targets() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        for bad in ["", "m", "10x", "1h30"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_target("migrationrun/x"), Ok(Named::Run("x".into())));
        assert_eq!(
            parse_target("MigrationRuns.stagehand.dev/y"),
            Ok(Named::Run("y".into()))
        );
        assert_eq!(
            parse_target("migration/opendesk"),
            Ok(Named::Migration("opendesk".into()))
        );
        assert!(parse_target("pod/x").is_err());
        assert!(parse_target("x").is_err());
        assert!(parse_target("migrationrun/").is_err());
    }
}
