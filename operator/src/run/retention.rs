//! Which finished runs are deleted (pure): a Migration keeps the newest
//! `spec.runHistoryLimit` finished runs of each stage (default
//! [`DEFAULT_RUN_HISTORY_LIMIT`]), like a CronJob keeps its Jobs. A deployment creates a new
//! MigrationRun each time (a run runs once), so without this they pile up. A run that has not
//! finished is never deleted, and neither is the run that just finished: the tool waiting on
//! it must see it end.

use kube::ResourceExt;
use stagehand_config::Stage;
use stagehand_crds::MigrationRun;

use super::gate::terminal;

/// Finished runs kept per Migration and stage when `spec.runHistoryLimit` is not set.
pub const DEFAULT_RUN_HISTORY_LIMIT: u32 = 10;

/// The finished runs of `migration`'s `stage` beyond the newest `keep` (by creation time,
/// then name), oldest first, never `finished` itself.
pub fn expired<'a>(
    runs: &'a [MigrationRun],
    migration: &str,
    stage: Stage,
    keep: u32,
    finished: &str,
) -> Vec<&'a MigrationRun> {
    let mut done: Vec<&MigrationRun> = runs
        .iter()
        .filter(|r| {
            r.spec.migration_ref == migration
                && r.spec.stage == stage
                && r.metadata.deletion_timestamp.is_none()
                && r.status.as_ref().is_some_and(terminal)
        })
        .collect();
    // Newest first: by creation, then (creation times have one-second resolution, and a
    // tool creates runs within a second) by when they started and ended, then by name.
    let key = |r: &MigrationRun| {
        let status = r.status.as_ref();
        (
            r.creation_timestamp(),
            status.and_then(|s| s.start_time.as_deref().map(parse_time)),
            status.and_then(|s| s.completion_time.as_deref().map(parse_time)),
            r.name_any(),
        )
    };
    done.sort_by_key(|r| std::cmp::Reverse(key(r)));
    let keep = usize::try_from(keep.max(1)).unwrap_or(usize::MAX);
    let mut out: Vec<&MigrationRun> = done
        .into_iter()
        .skip(keep)
        .filter(|r| r.name_any() != finished)
        .collect();
    out.reverse();
    out
}

/// An RFC 3339 time as the operator writes it; unparsable ones sort first (oldest).
fn parse_time(s: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    s.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use stagehand_crds::MigrationRunSpec;
    use stagehand_crds::unversioned::MigrationRunStatus;

    fn run(name: &str, stage: Stage, created: i64, finished: bool) -> MigrationRun {
        let mut r = MigrationRun::new(
            name,
            MigrationRunSpec {
                migration_ref: "opendesk".into(),
                stage,
                release: "v1.18.0".into(),
                ..Default::default()
            },
        );
        r.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(created).unwrap_or(Timestamp::UNIX_EPOCH),
        ));
        let conditions = if finished {
            vec![Condition {
                type_: "Succeeded".into(),
                status: "True".into(),
                reason: "Succeeded".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }]
        } else {
            Vec::new()
        };
        r.status = Some(MigrationRunStatus {
            conditions,
            ..Default::default()
        });
        r
    }

    fn names(v: Vec<&MigrationRun>) -> Vec<String> {
        v.into_iter().map(ResourceExt::name_any).collect()
    }

    #[test]
    fn keeps_the_newest_finished_runs_of_each_stage() {
        let mut runs: Vec<MigrationRun> = (0..5)
            .map(|i| run(&format!("pre-{i}"), Stage::Pre, 100 + i, true))
            .collect();
        runs.push(run("post-0", Stage::Post, 50, true));
        runs.push(run("pre-running", Stage::Pre, 10, false));
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 2, "pre-4")),
            ["pre-0", "pre-1", "pre-2"],
            "oldest first; the unfinished run and the other stage stay"
        );
        assert!(expired(&runs, "opendesk", Stage::Post, 1, "x").is_empty());
        assert!(expired(&runs, "other", Stage::Pre, 1, "x").is_empty());
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 0, "pre-4")),
            ["pre-0", "pre-1", "pre-2", "pre-3"],
            "a limit of 0 counts as 1"
        );
    }

    #[test]
    fn never_the_run_that_just_finished() {
        // Created before the others (e.g. a clock skew or a name tie), it finishes last.
        let runs = vec![
            run("late", Stage::Pre, 1, true),
            run("a", Stage::Pre, 5, true),
            run("b", Stage::Pre, 6, true),
        ];
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 1, "late")),
            ["a"]
        );
    }

    #[test]
    fn runs_created_in_the_same_second_are_ordered_by_when_they_ran() {
        let ran = |name: &str, start: &str| {
            let mut r = run(name, Stage::Pre, 100, true);
            let s = r.status.as_mut().unwrap();
            s.start_time = Some(start.into());
            s.completion_time = Some(start.into());
            r
        };
        // The names sort against the order they ran in.
        let runs = vec![
            ran("z-first", "2026-12-02T00:00:01.100Z"),
            ran("m-second", "2026-12-02T00:00:01.500Z"),
            ran("a-third", "2026-12-02T00:00:01.900Z"),
        ];
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 2, "a-third")),
            ["z-first"]
        );
    }
}
