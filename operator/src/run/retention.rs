//! Which finished runs are deleted (pure): a Migration keeps the newest
//! `spec.runHistoryLimit` finished runs of each stage (default
//! [`DEFAULT_RUN_HISTORY_LIMIT`]), like a CronJob keeps its Jobs. A deployment creates a new
//! MigrationRun each time (a run runs once), so without this they pile up. A run that has not
//! finished is never deleted, and neither is the run that just finished: the tool waiting on
//! it must see it end.
//!
//! Nor is a pre run that a post run may still need: the newest succeeded real
//! (`spec.dryRun: false`) pre run of a release, as long as no post run of the same Migration
//! and release created at or after it (a post run follows the newest pre run created at or
//! before it, see [`super::gate::pre_run_of`]) has succeeded. Dry runs do not push it out:
//! with `runHistoryLimit: 1`, a real pre run followed by two dry pre runs keeps the real one
//! until its post run succeeded. Such a run is simply left out of the expired ones: it still
//! takes its place among the newest `runHistoryLimit`, so at most one run per release is kept
//! beyond the limit.

use kube::ResourceExt;
use stagehand_config::Stage;
use stagehand_crds::MigrationRun;

use super::gate::{same_release, succeeded, terminal};

/// Finished runs kept per Migration and stage when `spec.runHistoryLimit` is not set.
pub const DEFAULT_RUN_HISTORY_LIMIT: u32 = 10;

/// The finished runs of `migration`'s `stage` beyond the newest `keep` (by creation time,
/// then name), oldest first, never `finished` itself nor a pre run a post run may still need
/// (`awaits_its_post_run`). `runs` are the runs of the Migration, of both stages.
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
    done.sort_by_key(|r| std::cmp::Reverse(age(r)));
    let keep = usize::try_from(keep.max(1)).unwrap_or(usize::MAX);
    let mut out: Vec<&MigrationRun> = done
        .into_iter()
        .skip(keep)
        .filter(|r| r.name_any() != finished && !awaits_its_post_run(r, runs))
        .collect();
    out.reverse();
    out
}

/// A run's place in time, oldest first: by creation, then (creation times have one-second
/// resolution, and a tool creates runs within a second) by when it started and ended, then by
/// name.
type Age = (
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    Option<Option<k8s_openapi::jiff::Timestamp>>,
    Option<Option<k8s_openapi::jiff::Timestamp>>,
    String,
);

fn age(r: &MigrationRun) -> Age {
    let status = r.status.as_ref();
    (
        r.creation_timestamp(),
        status.and_then(|s| s.start_time.as_deref().map(parse_time)),
        status.and_then(|s| s.completion_time.as_deref().map(parse_time)),
        r.name_any(),
    )
}

/// Whether `pre` is the newest succeeded real (not dry) pre run of its Migration and release
/// among `runs`, and no post run of that Migration and release created at or after it has
/// succeeded yet: a post run may still follow it, so it must stay.
fn awaits_its_post_run(pre: &MigrationRun, runs: &[MigrationRun]) -> bool {
    let real_success = |r: &MigrationRun| {
        r.spec.stage == Stage::Pre
            && !r.spec.dry_run
            && r.spec.migration_ref == pre.spec.migration_ref
            && same_release(&r.spec.release, &pre.spec.release)
            && r.status.as_ref().is_some_and(succeeded)
    };
    if !real_success(pre) {
        return false;
    }
    let created = |r: &MigrationRun| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
    // A newer one being deleted will not be there for the post run.
    let superseded = runs
        .iter()
        .any(|r| real_success(r) && r.metadata.deletion_timestamp.is_none() && age(r) > age(pre));
    let followed = runs.iter().any(|r| {
        r.spec.stage == Stage::Post
            && r.spec.migration_ref == pre.spec.migration_ref
            && same_release(&r.spec.release, &pre.spec.release)
            && created(r) >= created(pre)
            && r.status.as_ref().is_some_and(succeeded)
    });
    !superseded && !followed
}

/// An RFC 3339 time as the operator writes it; unparsable ones sort first (oldest).
fn parse_time(s: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    s.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::{condition, migration_run};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use stagehand_crds::unversioned::MigrationRunStatus;

    fn run(name: &str, stage: Stage, created: i64, finished: bool) -> MigrationRun {
        let mut r = migration_run(name, stage, "v1.18.0");
        r.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(created).unwrap_or(Timestamp::UNIX_EPOCH),
        ));
        let conditions = if finished {
            vec![condition("Succeeded", true, "Succeeded", "")]
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

    fn dry(mut r: MigrationRun) -> MigrationRun {
        r.spec.dry_run = true;
        r
    }

    fn release(mut r: MigrationRun, release: &str) -> MigrationRun {
        r.spec.release = release.into();
        r
    }

    fn ended(mut r: MigrationRun, succeeded: bool) -> MigrationRun {
        let s = r.status.get_or_insert_with(Default::default);
        s.conditions = vec![condition("Succeeded", succeeded, "Failed", "")];
        r
    }

    #[test]
    fn dry_runs_never_push_out_the_real_pre_run_a_post_run_still_needs() {
        let mut runs = vec![
            run("pre-old", Stage::Pre, 90, true),
            run("pre-real", Stage::Pre, 100, true),
            run("post", Stage::Post, 105, false),
            dry(run("dry-1", Stage::Pre, 110, true)),
            dry(run("dry-2", Stage::Pre, 120, true)),
        ];
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 1, "dry-2")),
            ["pre-old", "dry-1"],
            "the post run has not succeeded: the real pre run stays (an older one does not)"
        );
        // A failed post run, or a succeeded one of another release or created before the
        // pre run, does not free it either.
        runs[2] = ended(run("post", Stage::Post, 105, false), false);
        runs.push(release(
            run("post-other", Stage::Post, 130, true),
            "v1.19.0",
        ));
        runs.push(run("post-earlier", Stage::Post, 95, true));
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 1, "dry-2")),
            ["pre-old", "dry-1"]
        );
        // Once a post run of its release (written either way) succeeded, it may go.
        runs.push(release(run("post-retry", Stage::Post, 140, true), "1.18.0"));
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 1, "dry-2")),
            ["pre-old", "pre-real", "dry-1"]
        );
    }

    #[test]
    fn each_release_keeps_its_own_real_pre_run() {
        let runs = vec![
            release(run("pre-18", Stage::Pre, 100, true), "v1.18.0"),
            release(run("pre-19", Stage::Pre, 110, true), "v1.19.0"),
            dry(release(run("dry-19", Stage::Pre, 120, true), "v1.19.0")),
        ];
        assert_eq!(
            names(expired(&runs, "opendesk", Stage::Pre, 1, "dry-19")),
            Vec::<String>::new(),
            "neither release's post run succeeded"
        );
    }
}
