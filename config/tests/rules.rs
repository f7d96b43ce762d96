#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every validation rule (docs/design.md#validation), problem and warning code and every planning
//! reason (docs/design.md#problem-codes-and-reasons, docs/design.md#planning), through the crate's
//! public API, with a small fake action catalog.
//!
//! Findings are compared as exact lists of `(code, stage, index, id, field)`, so a test fails
//! both when a finding is missing and when an unexpected one appears.

use serde_json::{Value, json};
use stagehand_config::{
    ActionCatalog, ConfigIssue, Decision, Declarations, Deployment, Finding, Footprint,
    ManifestError, Plan, ProblemCode, Reason, Recorded, Release, Report, Stage, WarningCode,
    plan_stage, read_manifest, validate,
};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A library of two actions: `scale` needs `replicas`, `noop` takes no config at all.
struct FakeCatalog;

impl ActionCatalog for FakeCatalog {
    fn config_issues(&self, id: &str, config: &Value) -> Option<Vec<ConfigIssue>> {
        match id {
            "scale" => Some(if config.get("replicas").is_some() {
                Vec::new()
            } else {
                vec![ConfigIssue {
                    path: "replicas".into(),
                    message: "replicas is required".into(),
                }]
            }),
            "noop" => Some(if config.as_object().is_some_and(|m| m.is_empty()) {
                Vec::new()
            } else {
                vec![ConfigIssue {
                    path: String::new(),
                    message: "noop takes no config".into(),
                }]
            }),
            _ => None,
        }
    }
}

/// A valid declaration of `id` (with a config the fake catalog accepts) and the given window.
fn decl(id: &str, [minimum, from, to]: [&str; 3]) -> Value {
    let config = if id == "scale" {
        json!({"replicas": 0})
    } else {
        json!({})
    };
    json!({
        "id": id,
        "versions": {"minimum": minimum, "from": from, "to": to},
        "config": config,
    })
}

/// The window openDesk v1.18 declares.
const W: [&str; 3] = ["v1.15", "v1.15", "v1.17"];

/// `decl` with a tag.
fn tagged(id: &str, tag: &str, window: [&str; 3]) -> Value {
    set(decl(id, window), "tag", json!(tag))
}

/// Sets (or replaces) a key of a mapping.
fn set(mut v: Value, key: &str, value: Value) -> Value {
    v.as_object_mut()
        .expect("a mapping")
        .insert(key.into(), value);
    v
}

/// Removes a key of a mapping.
fn unset(mut v: Value, key: &str) -> Value {
    v.as_object_mut().expect("a mapping").remove(key);
    v
}

/// Sets one `versions` bound.
fn bound(mut v: Value, key: &str, value: Value) -> Value {
    v["versions"]
        .as_object_mut()
        .expect("versions")
        .insert(key.into(), value);
    v
}

/// A spec deploying v1.18.0 with the given actions.
fn spec(pre: Vec<Value>, post: Vec<Value>) -> Value {
    json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": pre, "post": post},
    })
}

/// A spec with actions and opt-outs.
fn spec_with_skips(
    pre: Vec<Value>,
    post: Vec<Value>,
    skip_pre: Vec<Value>,
    skip_post: Vec<Value>,
) -> Value {
    set(
        spec(pre, post),
        "actionsSkip",
        json!({"pre": skip_pre, "post": skip_post}),
    )
}

fn read(spec: &Value) -> Declarations {
    Declarations::from_spec(spec).expect("the spec has the shape of a Migration spec")
}

fn rel(text: &str) -> Release {
    Release::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn ctx(last: Option<&str>) -> Deployment {
    Deployment {
        last_migrated: last.map(rel),
        history: Vec::new(),
    }
}

fn check(spec: &Value, last: Option<&str>) -> Report {
    validate(&read(spec), &ctx(last), &FakeCatalog)
}

/// A finding's location, as compared by the tests.
type Key<C> = (
    C,
    Option<Stage>,
    Option<usize>,
    Option<String>,
    Option<String>,
);

fn keys<C: Copy>(findings: &[Finding<C>]) -> Vec<Key<C>> {
    findings
        .iter()
        .map(|f| (f.code, f.stage, f.index, f.id.clone(), f.field.clone()))
        .collect()
}

/// The expected key of a finding about an entry.
fn at<C>(code: C, stage: Stage, index: usize, id: Option<&str>, field: &str) -> Key<C> {
    (
        code,
        Some(stage),
        Some(index),
        id.map(str::to_string),
        Some(field.to_string()),
    )
}

/// The expected key of a finding about a spec field.
fn top<C>(code: C, field: &str) -> Key<C> {
    (code, None, None, None, Some(field.to_string()))
}

/// Asserts the report's problems are exactly `expected` (in order) and there is no warning.
#[track_caller]
fn assert_problems(report: &Report, expected: &[Key<ProblemCode>]) {
    assert_eq!(keys(&report.problems), expected, "{report:#?}");
    assert!(report.warnings.is_empty(), "{report:#?}");
    assert_eq!(report.is_valid(), expected.is_empty());
}

/// Asserts the report's problems equal `expected` regardless of order.
#[track_caller]
fn assert_problem_set(report: &Report, expected: &[Key<ProblemCode>]) {
    let mut got = keys(&report.problems);
    let mut want = expected.to_vec();
    let order = |k: &Key<ProblemCode>| format!("{k:?}");
    got.sort_by_key(order);
    want.sort_by_key(order);
    assert_eq!(got, want, "{report:#?}");
}

/// Whether `message` tells the user to quote the value (the word "quote", not "unquoted").
fn says_quote(message: &str) -> bool {
    message
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| w.eq_ignore_ascii_case("quote"))
}

use ProblemCode::*;
use Stage::{Post, Pre};

// ---------------------------------------------------------------------------------------------
// A valid spec is valid
// ---------------------------------------------------------------------------------------------

#[test]
fn a_valid_spec_has_no_problem_and_no_warning() {
    let s = spec_with_skips(
        vec![decl("scale", W), tagged("noop", "v1.18.0", W)],
        vec![tagged("scale", "v1.18.0", ["v1", "v1.15", "v1"])],
        vec![json!({"id": "noop", "tag": "v1.18.0"})],
        vec![],
    );
    for last in [None, Some("v1.15.0"), Some("v1.17.3"), Some("v1.18.0")] {
        assert_problems(&check(&s, last), &[]);
    }
}

// ---------------------------------------------------------------------------------------------
// MissingId
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_id_for_an_action_entry_without_id() {
    let s = spec(vec![decl("noop", W), unset(decl("noop", W), "id")], vec![]);
    assert_problems(&check(&s, None), &[at(MissingId, Pre, 1, None, "id")]);
}

#[test]
fn missing_id_for_an_empty_or_non_string_id() {
    for id in [
        json!(""),
        json!("   "),
        json!(null),
        json!(7),
        json!(["scale"]),
    ] {
        let s = spec(vec![], vec![set(decl("noop", W), "id", id.clone())]);
        assert_problems(&check(&s, None), &[at(MissingId, Post, 0, None, "id")]);
    }
}

#[test]
fn missing_id_for_a_non_mapping_entry() {
    let s = spec(
        vec![json!("scale"), decl("noop", W), json!(42), json!(null)],
        vec![json!(["noop"])],
    );
    assert_problems(
        &check(&s, None),
        &[
            at(MissingId, Pre, 0, None, "id"),
            at(MissingId, Pre, 2, None, "id"),
            at(MissingId, Pre, 3, None, "id"),
            at(MissingId, Post, 0, None, "id"),
        ],
    );
}

#[test]
fn missing_id_for_a_skip_entry_without_id() {
    let s = spec_with_skips(
        vec![tagged("noop", "v1.18.0", W)],
        vec![tagged("noop", "v1.18.0", W)],
        vec![
            json!({"id": "noop", "tag": "v1.18.0"}),
            json!({"tag": "v1.18.0"}),
        ],
        vec![json!("noop"), json!({"id": ""})],
    );
    assert_problems(
        &check(&s, None),
        &[
            at(MissingId, Pre, 1, None, "actionsSkip.id"),
            at(MissingId, Post, 0, None, "actionsSkip.id"),
            at(MissingId, Post, 1, None, "actionsSkip.id"),
        ],
    );
}

#[test]
fn an_entry_without_id_still_reports_its_other_problems() {
    let entry = bound(unset(decl("noop", W), "id"), "to", json!("soon"));
    let s = spec(vec![unset(entry, "config")], vec![]);
    assert_problems(
        &check(&s, None),
        &[
            at(MissingId, Pre, 0, None, "id"),
            at(InvalidVersion, Pre, 0, None, "versions.to"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// UnknownAction
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_action() {
    let s = spec(
        vec![decl("scale", W)],
        vec![decl("noop", W), decl("scael", W)],
    );
    let report = check(&s, None);
    assert_problems(&report, &[at(UnknownAction, Post, 1, Some("scael"), "id")]);
    assert!(report.problems[0].message.contains("scael"), "{report:#?}");
}

#[test]
fn unknown_action_is_not_also_asked_about_its_config() {
    let s = spec(
        vec![set(decl("nope", W), "config", json!({"x": 1}))],
        vec![],
    );
    assert_problems(
        &check(&s, None),
        &[at(UnknownAction, Pre, 0, Some("nope"), "id")],
    );
}

// ---------------------------------------------------------------------------------------------
// MissingVersionsKey / UnknownVersionsKey
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_versions_key_for_each_key() {
    for key in ["minimum", "from", "to"] {
        let mut entry = decl("noop", W);
        entry["versions"]
            .as_object_mut()
            .expect("versions")
            .remove(key);
        let s = spec(vec![decl("noop", W)], vec![decl("noop", W), entry]);
        assert_problems(
            &check(&s, None),
            &[at(
                MissingVersionsKey,
                Post,
                1,
                Some("noop"),
                &format!("versions.{key}"),
            )],
        );
    }
}

#[test]
fn a_null_versions_key_is_missing() {
    for key in ["minimum", "from", "to"] {
        let s = spec(vec![bound(decl("noop", W), key, Value::Null)], vec![]);
        assert_problems(
            &check(&s, None),
            &[at(
                MissingVersionsKey,
                Pre,
                0,
                Some("noop"),
                &format!("versions.{key}"),
            )],
        );
    }
}

#[test]
fn versions_missing_entirely_gives_three_problems() {
    let s = spec(vec![unset(decl("scale", W), "versions")], vec![]);
    assert_problems(
        &check(&s, None),
        &[
            at(
                MissingVersionsKey,
                Pre,
                0,
                Some("scale"),
                "versions.minimum",
            ),
            at(MissingVersionsKey, Pre, 0, Some("scale"), "versions.from"),
            at(MissingVersionsKey, Pre, 0, Some("scale"), "versions.to"),
        ],
    );
}

#[test]
fn versions_that_is_not_a_mapping_is_reported() {
    let s = spec(
        vec![set(decl("noop", W), "versions", json!("v1.15"))],
        vec![],
    );
    let report = check(&s, None);
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    assert_eq!(report.problems[0].code, MissingVersionsKey);
    assert_eq!(report.problems[0].stage, Some(Pre));
    assert_eq!(report.problems[0].index, Some(0));
    assert_eq!(report.problems[0].id.as_deref(), Some("noop"));
    assert!(
        report.problems[0]
            .field
            .as_deref()
            .is_some_and(|f| f.starts_with("versions")),
        "{report:#?}"
    );
}

#[test]
fn misspelled_from_is_unknown_and_from_is_missing() {
    let entry = json!({
        "id": "noop",
        "versions": {"minimum": "v1.15", "form": "v1.15", "to": "v1.17"},
    });
    let report = check(&spec(vec![entry], vec![]), None);
    assert_problem_set(
        &report,
        &[
            at(UnknownVersionsKey, Pre, 0, Some("noop"), "versions.form"),
            at(MissingVersionsKey, Pre, 0, Some("noop"), "versions.from"),
        ],
    );
    let unknown = report
        .problems
        .iter()
        .find(|p| p.code == UnknownVersionsKey)
        .expect("UnknownVersionsKey");
    assert!(unknown.message.contains("form"), "{unknown:#?}");
}

#[test]
fn an_extra_versions_key_is_unknown_even_when_all_three_are_there() {
    for key in ["max", "From", "until"] {
        let s = spec(vec![], vec![bound(decl("noop", W), key, json!("v1.17"))]);
        assert_problems(
            &check(&s, None),
            &[at(
                UnknownVersionsKey,
                Post,
                0,
                Some("noop"),
                &format!("versions.{key}"),
            )],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// InvalidVersion
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_version_for_a_suffixed_bound() {
    for key in ["minimum", "from", "to"] {
        let s = spec(
            vec![bound(decl("noop", W), key, json!("v1.18.0-rc1"))],
            vec![],
        );
        let report = check(&s, None);
        assert_problems(
            &report,
            &[at(
                InvalidVersion,
                Pre,
                0,
                Some("noop"),
                &format!("versions.{key}"),
            )],
        );
        assert!(
            report.problems[0].message.contains("v1.18.0-rc1"),
            "{report:#?}"
        );
    }
}

#[test]
fn invalid_version_for_bounds_that_are_not_a_series() {
    for bad in [
        "v1.17.0.1",
        "1.2.3.4",
        "",
        "v",
        "latest",
        "v1.x",
        "1.17.",
        "-1",
        "v1.17+build",
        "99999999999999999999999",
    ] {
        let s = spec(vec![], vec![bound(decl("noop", W), "from", json!(bad))]);
        assert_problems(
            &check(&s, None),
            &[at(InvalidVersion, Post, 0, Some("noop"), "versions.from")],
        );
    }
}

#[test]
fn invalid_version_for_a_yaml_number_says_to_quote_it() {
    for number in [json!(1.1), json!(1), json!(1.17)] {
        let s = spec(vec![bound(decl("noop", W), "to", number.clone())], vec![]);
        let report = check(&s, None);
        assert_problems(
            &report,
            &[at(InvalidVersion, Pre, 0, Some("noop"), "versions.to")],
        );
        assert!(
            says_quote(&report.problems[0].message),
            "{number}: {report:#?}"
        );
    }
}

#[test]
fn invalid_version_for_a_bound_of_another_type() {
    for value in [json!(true), json!(["v1.15"]), json!({"v": 1})] {
        let s = spec(vec![bound(decl("noop", W), "minimum", value)], vec![]);
        assert_problems(
            &check(&s, None),
            &[at(InvalidVersion, Pre, 0, Some("noop"), "versions.minimum")],
        );
    }
}

#[test]
fn invalid_release_version() {
    for bad in [
        json!("v1.18.0.1"),
        json!("eighteen"),
        json!(""),
        json!(1.18),
    ] {
        let s = set(
            spec(vec![decl("noop", W)], vec![]),
            "releaseVersion",
            bad.clone(),
        );
        let report = check(&s, None);
        assert_problems(&report, &[top(InvalidVersion, "releaseVersion")]);
        assert!(read(&s).release_version.is_none());
        if bad.is_number() {
            assert!(says_quote(&report.problems[0].message), "{report:#?}");
        }
    }
}

#[test]
fn missing_release_version() {
    let s = unset(spec(vec![decl("noop", W)], vec![]), "releaseVersion");
    assert_problems(&check(&s, None), &[top(InvalidVersion, "releaseVersion")]);
}

#[test]
fn valid_release_versions() {
    for (text, expected) in [
        ("v1.18.0", rel("1.18.0")),
        ("1.18.0", rel("v1.18.0")),
        ("v1.18.0-rc.1", rel("1.18.0-rc.1")),
    ] {
        let s = set(spec(vec![], vec![]), "releaseVersion", json!(text));
        assert_problems(&check(&s, None), &[]);
        assert_eq!(read(&s).release_version, Some(expected));
    }
}

#[test]
fn invalid_installed_release() {
    for bad in [json!("v1.17.x"), json!("1.17.0.0"), json!(1.17)] {
        let s = set(spec(vec![decl("noop", W)], vec![]), "installedRelease", bad);
        assert_problems(&check(&s, None), &[top(InvalidVersion, "installedRelease")]);
        assert!(read(&s).installed_release.is_none());
    }
}

#[test]
fn a_valid_installed_release_is_read() {
    let s = set(spec(vec![], vec![]), "installedRelease", json!("v1.17.3"));
    assert_problems(&check(&s, None), &[]);
    assert_eq!(read(&s).installed_release, Some(rel("1.17.3")));
}

// ---------------------------------------------------------------------------------------------
// FromBelowMinimum / ToBeforeFrom
// ---------------------------------------------------------------------------------------------

#[test]
fn from_below_minimum() {
    for window in [
        ["v1.16", "v1.15", "v1.17"],
        ["v1.15.2", "v1.15", "v1.17"],
        ["v1.15.2", "v1.15.1", "v1.17"],
        ["v2", "v1.17", "v2"],
        ["v1.15", "v1", "v1.17"],
    ] {
        let s = spec(vec![decl("noop", W)], vec![decl("noop", window)]);
        assert_problems(
            &check(&s, None),
            &[at(FromBelowMinimum, Post, 0, Some("noop"), "versions.from")],
        );
    }
}

#[test]
fn from_at_or_above_minimum_is_fine() {
    for window in [
        ["v1.15", "v1.15", "v1.17"],
        ["v1.15", "v1.15.0", "v1.17"],
        ["v1.15.0", "v1.15", "v1.17"],
        ["v1", "v1.15", "v1.17"],
        ["v1.15", "v1.16.4", "v1.17"],
        ["v1.15", "v2", "v2"],
    ] {
        let s = spec(vec![decl("noop", window)], vec![]);
        assert_problems(&check(&s, None), &[]);
    }
}

#[test]
fn to_before_from() {
    for window in [
        ["v1.15", "v1.16", "v1.15"],
        ["v1.15", "v1.15.3", "v1.15.2"],
        ["v1", "v2", "v1.17"],
        ["v1", "v1.16.0", "v1.15.9"],
        ["v1", "v2.0", "v1"],
    ] {
        let s = spec(vec![decl("noop", window)], vec![decl("noop", W)]);
        assert_problems(
            &check(&s, None),
            &[at(ToBeforeFrom, Pre, 0, Some("noop"), "versions.to")],
        );
    }
}

#[test]
fn to_ending_at_or_after_the_start_of_from_is_fine() {
    for window in [
        // The reference's edge: from v1.15.2 to v1.15 (v1.15 still covers v1.15.2).
        ["v1.15", "v1.15.2", "v1.15"],
        ["v1.15", "v1.15", "v1.15.0"],
        ["v1.15", "v1.15", "v1"],
        ["v1.15", "v1.15.2", "v1.15.2"],
        ["v1", "v1", "v1"],
    ] {
        let s = spec(vec![decl("noop", window)], vec![]);
        assert_problems(&check(&s, None), &[]);
    }
}

#[test]
fn from_below_minimum_and_to_before_from_together() {
    let s = spec(vec![decl("noop", ["v1.16", "v1.15.3", "v1.15.2"])], vec![]);
    assert_problems(
        &check(&s, None),
        &[
            at(FromBelowMinimum, Pre, 0, Some("noop"), "versions.from"),
            at(ToBeforeFrom, Pre, 0, Some("noop"), "versions.to"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// BelowMinimum
// ---------------------------------------------------------------------------------------------

#[test]
fn below_minimum_is_reported_for_actions_of_both_stages() {
    let s = spec(
        vec![decl("noop", ["v1.14", "v1.14", "v1.17"]), decl("scale", W)],
        vec![decl("noop", W), decl("noop", ["v1", "v1.14", "v1.17"])],
    );
    let report = check(&s, Some("v1.14.9"));
    assert_problems(
        &report,
        &[
            at(BelowMinimum, Pre, 1, Some("scale"), "versions.minimum"),
            at(BelowMinimum, Post, 0, Some("noop"), "versions.minimum"),
        ],
    );
    assert!(
        report.problems[0].message.contains("v1.14.9"),
        "{report:#?}"
    );
}

#[test]
fn below_minimum_is_reported_for_an_opted_out_action() {
    let s = spec_with_skips(
        vec![tagged("noop", "v1.18.0", W)],
        vec![decl("scale", W)],
        vec![json!({"id": "noop", "tag": "v1.18.0"})],
        vec![json!({"id": "scale"})],
    );
    assert_problems(
        &check(&s, Some("v1.13.0")),
        &[
            at(BelowMinimum, Pre, 0, Some("noop"), "versions.minimum"),
            at(BelowMinimum, Post, 0, Some("scale"), "versions.minimum"),
        ],
    );
}

#[test]
fn below_minimum_is_not_reported_on_a_fresh_installation() {
    let s = spec(
        vec![decl("noop", ["v9", "v9", "v9"])],
        vec![decl("noop", W)],
    );
    assert_problems(&check(&s, None), &[]);
}

#[test]
fn below_minimum_boundaries() {
    let s = spec(vec![decl("noop", ["v1.15", "v1.15", "v1.17"])], vec![]);
    // The minimum's series start is supported.
    assert_problems(&check(&s, Some("v1.15.0")), &[]);
    // A release newer than any window is not below the minimum.
    assert_problems(&check(&s, Some("v1.19.0")), &[]);
    // A pre-release of the minimum orders before it (semver).
    assert_problems(
        &check(&s, Some("v1.15.0-rc.1")),
        &[at(BelowMinimum, Pre, 0, Some("noop"), "versions.minimum")],
    );
    assert_problems(
        &check(&s, Some("v1.14.99")),
        &[at(BelowMinimum, Pre, 0, Some("noop"), "versions.minimum")],
    );
}

#[test]
fn below_minimum_uses_installed_release_through_context_new() {
    let s = set(
        spec(vec![decl("noop", W)], vec![]),
        "installedRelease",
        json!("v1.14.0"),
    );
    let d = read(&s);
    let report = validate(
        &d,
        &Deployment::new(&d, &Recorded::default(), None),
        &FakeCatalog,
    );
    assert_problems(
        &report,
        &[at(BelowMinimum, Pre, 0, Some("noop"), "versions.minimum")],
    );
}

// ---------------------------------------------------------------------------------------------
// MistypedSkip and SkipMatchesNothing
// ---------------------------------------------------------------------------------------------

#[test]
fn mistyped_skip_when_the_id_is_declared_only_under_another_tag() {
    let s = spec_with_skips(
        vec![decl("noop", W), tagged("scale", "v1.17.0", W)],
        vec![],
        vec![
            json!({"id": "noop"}),
            json!({"id": "scale", "tag": "v1.18.0"}),
        ],
        vec![],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[at(MistypedSkip, Pre, 1, Some("scale"), "actionsSkip.tag")],
    );
    let message = &report.problems[0].message;
    assert!(
        message.contains("v1.18.0") && message.contains("v1.17.0"),
        "{message}"
    );
}

#[test]
fn mistyped_skip_without_tag_when_the_declaration_has_one() {
    let s = spec_with_skips(
        vec![],
        vec![tagged("noop", "v1.18.0", W)],
        vec![],
        vec![json!({"id": "noop"})],
    );
    assert_problems(
        &check(&s, None),
        &[at(MistypedSkip, Post, 0, Some("noop"), "actionsSkip.tag")],
    );
    // An explicit null tag is the absence of a tag.
    let s = spec_with_skips(
        vec![],
        vec![tagged("noop", "v1.18.0", W)],
        vec![],
        vec![json!({"id": "noop", "tag": null})],
    );
    assert_problems(
        &check(&s, None),
        &[at(MistypedSkip, Post, 0, Some("noop"), "actionsSkip.tag")],
    );
}

#[test]
fn mistyped_skip_with_tag_when_the_declaration_has_none() {
    let s = spec_with_skips(
        vec![decl("scale", W)],
        vec![],
        vec![json!({"id": "scale", "tag": "v1.18.0"})],
        vec![],
    );
    assert_problems(
        &check(&s, None),
        &[at(MistypedSkip, Pre, 0, Some("scale"), "actionsSkip.tag")],
    );
}

#[test]
fn a_skip_matching_one_of_several_declarations_of_its_id_is_fine() {
    let s = spec_with_skips(
        vec![
            decl("scale", W),
            tagged("scale", "v1.17.0", W),
            tagged("scale", "v1.18.0", W),
        ],
        vec![],
        vec![
            json!({"id": "scale", "tag": "v1.18.0"}),
            json!({"id": "scale"}),
        ],
        vec![],
    );
    assert_problems(&check(&s, None), &[]);
}

#[test]
fn a_skip_is_checked_against_its_own_stage_only() {
    // Declared untagged in pre, tagged in post: a tagged opt-out in pre is mistyped.
    let s = spec_with_skips(
        vec![decl("scale", W)],
        vec![tagged("scale", "v1.18.0", W)],
        vec![json!({"id": "scale", "tag": "v1.18.0"})],
        vec![],
    );
    assert_problems(
        &check(&s, None),
        &[at(MistypedSkip, Pre, 0, Some("scale"), "actionsSkip.tag")],
    );
}

#[test]
fn skip_matches_nothing_is_a_warning() {
    let s = spec_with_skips(
        vec![decl("scale", W)],
        vec![],
        vec![
            json!({"id": "scale"}),
            json!({"id": "ox_old_action", "tag": "v1.16.0"}),
        ],
        vec![json!({"id": "gone"})],
    );
    let report = check(&s, None);
    assert!(report.problems.is_empty(), "{report:#?}");
    assert!(report.is_valid());
    assert_eq!(
        keys(&report.warnings),
        vec![
            at(
                WarningCode::SkipMatchesNothing,
                Pre,
                1,
                Some("ox_old_action"),
                "actionsSkip.id"
            ),
            at(
                WarningCode::SkipMatchesNothing,
                Post,
                0,
                Some("gone"),
                "actionsSkip.id"
            ),
        ]
    );
}

#[test]
fn an_opt_out_of_an_action_the_other_stage_declares_is_in_the_wrong_stage() {
    // Each opt-out names an action only the other stage declares: a mistake (the action it
    // was meant for would run), not an opt-out whose release is behind you.
    let s = spec_with_skips(
        vec![tagged("noop", "v1.18.0", W)],
        vec![decl("scale", W)],
        vec![json!({"id": "scale"}), json!({"id": "gone"})],
        vec![json!({"id": "noop", "tag": "v1.18.0"})],
    );
    let report = check(&s, None);
    assert_eq!(
        keys(&report.problems),
        vec![
            at(SkipInWrongStage, Pre, 0, Some("scale"), "actionsSkip.id"),
            at(SkipInWrongStage, Post, 0, Some("noop"), "actionsSkip.id"),
        ]
    );
    assert_eq!(
        report.problems[0].message,
        "the pre stage declares no action \"scale\", the post stage does (actions.post[0]): this opt-out skips nothing and scale would run; move it to actionsSkip.post"
    );
    // An id no stage declares still only warns.
    assert_eq!(
        keys(&report.warnings),
        vec![at(
            WarningCode::SkipMatchesNothing,
            Pre,
            1,
            Some("gone"),
            "actionsSkip.id"
        )]
    );
    // Declared in both stages: the stage's own declaration is the one judged.
    let both = spec_with_skips(
        vec![decl("scale", W)],
        vec![decl("scale", W)],
        vec![json!({"id": "scale"})],
        vec![],
    );
    assert!(check(&both, None).problems.is_empty());
}

#[test]
fn warnings_do_not_make_a_report_invalid_but_problems_do() {
    let report = Report {
        problems: Vec::new(),
        warnings: check(
            &spec_with_skips(vec![], vec![], vec![json!({"id": "x"})], vec![]),
            None,
        )
        .warnings,
    };
    assert_eq!(report.warnings.len(), 1);
    assert!(report.is_valid());

    // The same warning next to a problem: invalid, and both are still reported.
    let s = spec_with_skips(
        vec![decl("nope", W)],
        vec![],
        vec![json!({"id": "x"})],
        vec![],
    );
    let report = check(&s, None);
    assert!(!report.is_valid());
    assert_eq!(
        keys(&report.problems),
        vec![at(UnknownAction, Pre, 0, Some("nope"), "id")]
    );
    assert_eq!(
        keys(&report.warnings),
        vec![at(
            WarningCode::SkipMatchesNothing,
            Pre,
            0,
            Some("x"),
            "actionsSkip.id"
        )]
    );
}

// ---------------------------------------------------------------------------------------------
// InvalidConfig
// ---------------------------------------------------------------------------------------------

#[test]
fn invalid_config_from_the_catalog_is_prefixed_with_config() {
    let s = spec(
        vec![decl("scale", W), set(decl("scale", W), "config", json!({}))],
        vec![unset(decl("scale", W), "config")],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[
            at(InvalidConfig, Pre, 1, Some("scale"), "config.replicas"),
            at(InvalidConfig, Post, 0, Some("scale"), "config.replicas"),
        ],
    );
    assert!(
        report.problems[0].message.contains("replicas is required"),
        "{report:#?}"
    );
}

#[test]
fn invalid_config_about_the_whole_config_is_at_config() {
    let s = spec(
        vec![set(decl("noop", W), "config", json!({"a": 1}))],
        vec![],
    );
    assert_problems(
        &check(&s, None),
        &[at(InvalidConfig, Pre, 0, Some("noop"), "config")],
    );
}

#[test]
fn invalid_config_when_config_is_not_a_mapping() {
    for config in [json!("replicas: 0"), json!([1]), json!(3)] {
        let s = spec(vec![set(decl("noop", W), "config", config)], vec![]);
        assert_problems(
            &check(&s, None),
            &[at(InvalidConfig, Pre, 0, Some("noop"), "config")],
        );
    }
}

#[test]
fn invalid_config_for_an_unknown_declaration_key() {
    let s = spec(
        vec![],
        vec![
            decl("noop", W),
            set(decl("noop", W), "confg", json!({})),
            set(decl("noop", W), "run_mode", json!("apply")),
        ],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[
            at(InvalidConfig, Post, 1, Some("noop"), "confg"),
            at(InvalidConfig, Post, 2, Some("noop"), "run_mode"),
        ],
    );
    assert!(report.problems[0].message.contains("confg"), "{report:#?}");
}

#[test]
fn invalid_config_for_a_tag_or_run_mode_that_is_not_a_string() {
    let s = spec(
        vec![
            set(decl("noop", W), "tag", json!(1.18)),
            set(decl("noop", W), "runMode", json!(true)),
        ],
        vec![],
    );
    assert_problems(
        &check(&s, None),
        &[
            at(InvalidConfig, Pre, 0, Some("noop"), "tag"),
            at(InvalidConfig, Pre, 1, Some("noop"), "runMode"),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// DuplicateFootprint
// ---------------------------------------------------------------------------------------------

/// `tagged` with a runMode.
fn tagged_mode(id: &str, tag: &str, run_mode: &str) -> Value {
    set(tagged(id, tag, W), "runMode", json!(run_mode))
}

#[test]
fn a_duplicate_footprint_is_reported_once_on_the_later_entry_naming_both() {
    // Two `scale` with tag v1.18.0 and no runMode, an unrelated action between them.
    let s = spec(
        vec![
            tagged("scale", "v1.18.0", W),
            tagged("noop", "v1.18.0", W),
            set(
                tagged("scale", "v1.18.0", W),
                "config",
                json!({"replicas": 3}),
            ),
        ],
        vec![],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[at(DuplicateFootprint, Pre, 2, Some("scale"), "tag")],
    );
    let message = &report.problems[0].message;
    assert_eq!(
        message,
        "scale has the same id, tag \"v1.18.0\" and runMode (none) as actions.pre[0], so both \
         record one footprint: after the first succeeded, this one would be marked \
         FootprintRecorded without running; give each a distinct tag or runMode, or merge them \
         into one declaration"
    );
    assert_eq!(
        report.problems[0].location(),
        "actions.pre[2] (scale) tag",
        "the location names the later entry, the message the earlier one"
    );

    // The same with a runMode, in the post stage.
    let s = spec(
        vec![],
        vec![
            tagged_mode("scale", "v1.18.0", "apply"),
            tagged_mode("scale", "v1.18.0", "apply"),
        ],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[at(DuplicateFootprint, Post, 1, Some("scale"), "tag")],
    );
    let message = &report.problems[0].message;
    assert!(message.contains("runMode \"apply\""), "{message}");
    assert!(message.contains("actions.post[0]"), "{message}");
    assert_eq!(report.problems[0].code.to_string(), "DuplicateFootprint");
}

#[test]
fn a_third_declaration_of_a_footprint_is_reported_too_naming_the_first() {
    let s = spec(
        vec![
            tagged("noop", "v1.18.0", W),
            tagged("noop", "v1.18.0", W),
            tagged("noop", "v1.18.0", W),
        ],
        vec![],
    );
    let report = check(&s, None);
    assert_problems(
        &report,
        &[
            at(DuplicateFootprint, Pre, 1, Some("noop"), "tag"),
            at(DuplicateFootprint, Pre, 2, Some("noop"), "tag"),
        ],
    );
    for p in &report.problems {
        assert!(p.message.contains("as actions.pre[0],"), "{}", p.message);
    }
}

#[test]
fn declarations_that_differ_in_run_mode_tag_or_stage_or_are_untagged_are_not_duplicates() {
    for (what, pre, post) in [
        (
            "different runMode",
            vec![
                tagged_mode("scale", "v1.18.0", "apply"),
                tagged_mode("scale", "v1.18.0", "verify"),
            ],
            vec![],
        ),
        (
            "a runMode and none",
            vec![
                tagged("scale", "v1.18.0", W),
                tagged_mode("scale", "v1.18.0", "apply"),
            ],
            vec![],
        ),
        (
            "different tag",
            vec![
                tagged("scale", "v1.18.0", W),
                tagged("scale", "v1.18.0-fix", W),
            ],
            vec![],
        ),
        (
            "different id",
            vec![tagged("scale", "v1.18.0", W), tagged("noop", "v1.18.0", W)],
            vec![],
        ),
        (
            "different stage",
            vec![tagged("scale", "v1.18.0", W)],
            vec![tagged("scale", "v1.18.0", W)],
        ),
        (
            "both untagged",
            vec![decl("scale", W), decl("scale", W)],
            vec![],
        ),
        (
            "both untagged with the same runMode",
            vec![
                set(decl("scale", W), "runMode", json!("apply")),
                set(decl("scale", W), "runMode", json!("apply")),
            ],
            vec![],
        ),
        (
            "one tagged, one untagged",
            vec![tagged("scale", "v1.18.0", W), decl("scale", W)],
            vec![],
        ),
    ] {
        let report = check(&spec(pre, post), None);
        assert!(report.is_valid(), "{what}: {report:#?}");
    }
}

#[test]
fn a_duplicate_footprint_is_reported_alongside_the_other_problems() {
    let s = spec_with_skips(
        vec![
            tagged("scale", "v1.18.0", W),
            decl("flush_everything", W), // UnknownAction
            set(
                tagged("scale", "v1.18.0", ["v1.15", "v1.17", "v1.16"]),
                "config",
                json!({}),
            ), // DuplicateFootprint, ToBeforeFrom, InvalidConfig
        ],
        vec![
            tagged_mode("noop", "v1.18.0", "apply"),
            tagged_mode("noop", "v1.18.0", "apply"), // DuplicateFootprint
        ],
        vec![json!({"id": "scale", "tag": "v1.17.0"})], // MistypedSkip
        vec![],
    );
    let report = check(&s, Some("v1.14.0")); // BelowMinimum for all six
    assert_problem_set(
        &report,
        &[
            at(BelowMinimum, Pre, 0, Some("scale"), "versions.minimum"),
            at(UnknownAction, Pre, 1, Some("flush_everything"), "id"),
            at(
                BelowMinimum,
                Pre,
                1,
                Some("flush_everything"),
                "versions.minimum",
            ),
            at(InvalidConfig, Pre, 2, Some("scale"), "config.replicas"),
            at(ToBeforeFrom, Pre, 2, Some("scale"), "versions.to"),
            at(BelowMinimum, Pre, 2, Some("scale"), "versions.minimum"),
            at(DuplicateFootprint, Pre, 2, Some("scale"), "tag"),
            at(MistypedSkip, Pre, 0, Some("scale"), "actionsSkip.tag"),
            at(BelowMinimum, Post, 0, Some("noop"), "versions.minimum"),
            at(BelowMinimum, Post, 1, Some("noop"), "versions.minimum"),
            at(DuplicateFootprint, Post, 1, Some("noop"), "tag"),
        ],
    );
    assert!(!report.is_valid());
}

// ---------------------------------------------------------------------------------------------
// All problems at once
// ---------------------------------------------------------------------------------------------

#[test]
fn all_problems_of_both_stages_are_reported_at_once() {
    let s = json!({
        "releaseVersion": "v1.18",
        "installedRelease": "v1.13.0.0",
        "actions": {
            "pre": [
                decl("scale", W),                                   // fine
                unset(decl("noop", W), "id"),                       // MissingId
                decl("flush_everything", W),                        // UnknownAction
                unset(decl("noop", W), "versions"),                 // 3x MissingVersionsKey
                bound(decl("noop", W), "from", json!(1.15)),        // InvalidVersion
                tagged("scale", "v1.17.0", ["v1.16", "v1.15", "v1.17"]), // FromBelowMinimum
            ],
            "post": [
                json!("noop"),                                      // MissingId
                json!({"id": "noop", "versions":
                    {"minimum": "v1.15", "form": "v1.15", "to": "v1.17"}}), // Unknown + Missing
                decl("noop", ["v1.15", "v1.17", "v1.16"]),          // ToBeforeFrom
                set(decl("scale", W), "config", json!({})),         // InvalidConfig
                set(decl("noop", W), "extra", json!(1)),            // InvalidConfig (key)
            ],
        },
        "actionsSkip": {
            "pre": [{"id": "scale", "tag": "v1.18.0"}, {"id": "old"}],
            "post": [{"tag": "v1.18.0"}],
        },
    });
    let report = check(&s, None);
    assert_problem_set(
        &report,
        &[
            top(InvalidVersion, "installedRelease"),
            at(MissingId, Pre, 1, None, "id"),
            at(UnknownAction, Pre, 2, Some("flush_everything"), "id"),
            at(MissingVersionsKey, Pre, 3, Some("noop"), "versions.minimum"),
            at(MissingVersionsKey, Pre, 3, Some("noop"), "versions.from"),
            at(MissingVersionsKey, Pre, 3, Some("noop"), "versions.to"),
            at(InvalidVersion, Pre, 4, Some("noop"), "versions.from"),
            at(FromBelowMinimum, Pre, 5, Some("scale"), "versions.from"),
            at(MistypedSkip, Pre, 0, Some("scale"), "actionsSkip.tag"),
            at(MissingId, Post, 0, None, "id"),
            at(UnknownVersionsKey, Post, 1, Some("noop"), "versions.form"),
            at(MissingVersionsKey, Post, 1, Some("noop"), "versions.from"),
            at(ToBeforeFrom, Post, 2, Some("noop"), "versions.to"),
            at(InvalidConfig, Post, 3, Some("scale"), "config.replicas"),
            at(InvalidConfig, Post, 4, Some("noop"), "extra"),
            at(MissingId, Post, 0, None, "actionsSkip.id"),
        ],
    );
    assert_eq!(
        keys(&report.warnings),
        vec![at(
            WarningCode::SkipMatchesNothing,
            Pre,
            1,
            Some("old"),
            "actionsSkip.id"
        )]
    );

    // With a last migrated release below the minimum, BelowMinimum joins every other problem,
    // for every action whose minimum parsed, in both stages.
    let with_last = check(&s, Some("v1.14.0"));
    let below: Vec<_> = keys(&with_last.problems)
        .into_iter()
        .filter(|k| k.0 == BelowMinimum)
        .collect();
    assert_eq!(
        below,
        vec![
            at(BelowMinimum, Pre, 0, Some("scale"), "versions.minimum"),
            at(BelowMinimum, Pre, 1, None, "versions.minimum"),
            at(
                BelowMinimum,
                Pre,
                2,
                Some("flush_everything"),
                "versions.minimum"
            ),
            at(BelowMinimum, Pre, 4, Some("noop"), "versions.minimum"),
            at(BelowMinimum, Pre, 5, Some("scale"), "versions.minimum"),
            at(BelowMinimum, Post, 1, Some("noop"), "versions.minimum"),
            at(BelowMinimum, Post, 2, Some("noop"), "versions.minimum"),
            at(BelowMinimum, Post, 3, Some("scale"), "versions.minimum"),
            at(BelowMinimum, Post, 4, Some("noop"), "versions.minimum"),
        ]
    );
    assert_eq!(
        with_last.problems.len(),
        report.problems.len() + below.len()
    );
}

#[test]
fn problems_and_warnings_are_listed_in_document_order() {
    // Spec fields first, then per stage its actions and then its opt-outs, each by index.
    let s = json!({
        "releaseVersion": "soon",
        "actions": {
            "pre": [decl("noop", W), decl("nope", W), unset(decl("noop", W), "id")],
            "post": [bound(decl("scale", W), "to", json!("x"))],
        },
        "actionsSkip": {
            "pre": [{"id": "gone"}, {}],
            "post": [{"id": "scale", "tag": "v1"}, {"id": "gone"}],
        },
    });
    let report = check(&s, None);
    assert_eq!(
        keys(&report.problems),
        vec![
            top(InvalidVersion, "releaseVersion"),
            at(UnknownAction, Pre, 1, Some("nope"), "id"),
            at(MissingId, Pre, 2, None, "id"),
            at(MissingId, Pre, 1, None, "actionsSkip.id"),
            at(InvalidVersion, Post, 0, Some("scale"), "versions.to"),
            at(MistypedSkip, Post, 0, Some("scale"), "actionsSkip.tag"),
        ]
    );
    assert_eq!(
        keys(&report.warnings),
        vec![
            at(
                WarningCode::SkipMatchesNothing,
                Pre,
                0,
                Some("gone"),
                "actionsSkip.id"
            ),
            at(
                WarningCode::SkipMatchesNothing,
                Post,
                1,
                Some("gone"),
                "actionsSkip.id"
            ),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Planning
// ---------------------------------------------------------------------------------------------

/// `(index, id, tag, decision, reason)` of every planned action.
fn decisions(plan: &Plan) -> Vec<(usize, String, Option<String>, Decision, Reason)> {
    plan.actions
        .iter()
        .map(|a| (a.index, a.id.clone(), a.tag.clone(), a.decision, a.reason))
        .collect()
}

fn d(
    index: usize,
    id: &str,
    tag: Option<&str>,
    reason: Reason,
) -> (usize, String, Option<String>, Decision, Reason) {
    let decision = if reason == Reason::InWindow {
        Decision::Run
    } else {
        Decision::Skip
    };
    (index, id.into(), tag.map(str::to_string), decision, reason)
}

/// Plans `stage` of a valid spec.
fn plan(spec: &Value, stage: Stage, context: &Deployment) -> Plan {
    let decls = read(spec);
    let report = validate(&decls, context, &FakeCatalog);
    assert!(report.is_valid(), "the fixture must validate: {report:#?}");
    let plan = plan_stage(&decls, stage, context);
    assert_eq!(plan.stage, stage);
    plan
}

fn fp(stage: Stage, id: &str, tag: Option<&str>, run_mode: Option<&str>) -> Footprint {
    Footprint {
        stage,
        id: id.into(),
        tag: tag.map(str::to_string),
        run_mode: run_mode.map(str::to_string),
    }
}

fn with_history(last: &str, history: Vec<Footprint>) -> Deployment {
    Deployment {
        last_migrated: Some(rel(last)),
        history,
    }
}

use Reason::{FootprintRecorded, FreshInstallation, InWindow, OptedOut, OutsideWindow};

#[test]
fn in_window_runs() {
    let s = spec(vec![decl("scale", W)], vec![tagged("noop", "v1.18.0", W)]);
    for last in ["v1.15.0", "v1.16.2", "v1.17.0", "v1.17.3"] {
        assert_eq!(
            decisions(&plan(&s, Pre, &ctx(Some(last)))),
            vec![d(0, "scale", None, InWindow)]
        );
        assert_eq!(
            decisions(&plan(&s, Post, &ctx(Some(last)))),
            vec![d(0, "noop", Some("v1.18.0"), InWindow)]
        );
    }
}

#[test]
fn opted_out_matches_id_and_tag_exactly_including_no_tag() {
    let s = spec_with_skips(
        vec![
            decl("scale", W),
            tagged("scale", "v1.18.0", W),
            decl("noop", W),
            tagged("noop", "v1.18.0", W),
        ],
        vec![],
        vec![
            json!({"id": "scale"}),
            json!({"id": "noop", "tag": "v1.18.0"}),
        ],
        vec![],
    );
    assert_eq!(
        decisions(&plan(&s, Pre, &ctx(Some("v1.17.0")))),
        vec![
            d(0, "scale", None, OptedOut),
            d(1, "scale", Some("v1.18.0"), InWindow),
            d(2, "noop", None, InWindow),
            d(3, "noop", Some("v1.18.0"), OptedOut),
        ]
    );
}

#[test]
fn a_skip_entry_without_tag_does_not_match_a_tagged_declaration() {
    // Validation calls the entry mistyped; planning must still not treat it as a match.
    let s = spec_with_skips(
        vec![tagged("scale", "v1.18.0", W)],
        vec![],
        vec![json!({"id": "scale"})],
        vec![],
    );
    let decls = read(&s);
    let plan = plan_stage(&decls, Pre, &ctx(Some("v1.17.0")));
    assert_eq!(
        decisions(&plan),
        vec![d(0, "scale", Some("v1.18.0"), InWindow)]
    );
    // A skip entry with a tag does not match the untagged declaration either.
    let s = spec_with_skips(
        vec![decl("scale", W)],
        vec![],
        vec![json!({"id": "scale", "tag": "v1.18.0"})],
        vec![],
    );
    let plan = plan_stage(&read(&s), Pre, &ctx(Some("v1.17.0")));
    assert_eq!(decisions(&plan), vec![d(0, "scale", None, InWindow)]);
}

#[test]
fn an_opt_out_applies_to_its_own_stage_only() {
    let s = spec_with_skips(
        vec![decl("scale", W)],
        vec![decl("scale", W)],
        vec![],
        vec![json!({"id": "scale"})],
    );
    let c = ctx(Some("v1.17.0"));
    assert_eq!(
        decisions(&plan(&s, Pre, &c)),
        vec![d(0, "scale", None, InWindow)]
    );
    assert_eq!(
        decisions(&plan(&s, Post, &c)),
        vec![d(0, "scale", None, OptedOut)]
    );
}

#[test]
fn opted_out_ignores_the_run_mode() {
    let s = spec_with_skips(
        vec![set(tagged("noop", "v1.18.0", W), "runMode", json!("apply"))],
        vec![],
        vec![json!({"id": "noop", "tag": "v1.18.0"})],
        vec![],
    );
    assert_eq!(
        decisions(&plan(&s, Pre, &ctx(Some("v1.17.0")))),
        vec![d(0, "noop", Some("v1.18.0"), OptedOut)]
    );
}

#[test]
fn outside_window_below_from_and_above_to() {
    let s = spec(vec![decl("noop", ["v1.14", "v1.15", "v1.17"])], vec![]);
    for last in [
        "v1.14.0",
        "v1.14.9",
        "v1.15.0-rc.1",
        "v1.18.0",
        "v1.18.0-rc.1",
        "v2.0.0",
    ] {
        assert_eq!(
            decisions(&plan(&s, Pre, &ctx(Some(last)))),
            vec![d(0, "noop", None, OutsideWindow)],
            "{last}"
        );
    }
}

#[test]
fn to_v1_17_covers_v1_17_3() {
    let s = spec(vec![decl("noop", W)], vec![]);
    for last in ["v1.17.0", "v1.17.3", "v1.17.99", "v1.17.3-rc.1"] {
        assert_eq!(
            decisions(&plan(&s, Pre, &ctx(Some(last)))),
            vec![d(0, "noop", None, InWindow)],
            "{last}"
        );
    }
}

#[test]
fn from_v1_15_starts_at_v1_15_0() {
    let s = spec(vec![decl("noop", ["v1.14", "v1.15", "v1.17"])], vec![]);
    assert_eq!(
        decisions(&plan(&s, Pre, &ctx(Some("v1.14.9")))),
        vec![d(0, "noop", None, OutsideWindow)]
    );
    assert_eq!(
        decisions(&plan(&s, Pre, &ctx(Some("v1.15.0")))),
        vec![d(0, "noop", None, InWindow)]
    );
}

#[test]
fn a_patch_level_window_is_that_one_release() {
    let s = spec(vec![decl("noop", ["v1.17", "v1.17.2", "v1.17.2"])], vec![]);
    for (last, reason) in [
        ("v1.17.1", OutsideWindow),
        ("v1.17.2", InWindow),
        ("v1.17.3", OutsideWindow),
    ] {
        assert_eq!(
            decisions(&plan(&s, Pre, &ctx(Some(last)))),
            vec![d(0, "noop", None, reason)],
            "{last}"
        );
    }
}

#[test]
fn footprint_recorded_skips_a_tagged_action() {
    let s = spec(
        vec![set(
            tagged("scale", "v1.18.0", W),
            "runMode",
            json!("apply"),
        )],
        vec![],
    );
    let recorded = with_history(
        "v1.17.0",
        vec![fp(Pre, "scale", Some("v1.18.0"), Some("apply"))],
    );
    assert_eq!(
        decisions(&plan(&s, Pre, &recorded)),
        vec![d(0, "scale", Some("v1.18.0"), FootprintRecorded)]
    );
    // Any other footprint of the same id does not.
    for other in [
        fp(Pre, "scale", Some("v1.17.0"), Some("apply")),
        fp(Pre, "scale", None, Some("apply")),
        fp(Pre, "noop", Some("v1.18.0"), Some("apply")),
    ] {
        assert_eq!(
            decisions(&plan(
                &s,
                Pre,
                &with_history("v1.17.0", vec![other.clone()])
            )),
            vec![d(0, "scale", Some("v1.18.0"), InWindow)],
            "{other:?}"
        );
    }
}

#[test]
fn footprint_without_run_mode_is_a_footprint_too() {
    let s = spec(vec![tagged("noop", "v1.18.0", W)], vec![]);
    let recorded = with_history("v1.17.0", vec![fp(Pre, "noop", Some("v1.18.0"), None)]);
    assert_eq!(
        decisions(&plan(&s, Pre, &recorded)),
        vec![d(0, "noop", Some("v1.18.0"), FootprintRecorded)]
    );
}

#[test]
fn an_untagged_action_with_a_run_mode_is_not_run_once() {
    let s = spec(
        vec![set(decl("scale", W), "runMode", json!("apply"))],
        vec![],
    );
    let recorded = with_history("v1.17.0", vec![fp(Pre, "scale", None, Some("apply"))]);
    let p = plan(&s, Pre, &recorded);
    assert_eq!(decisions(&p), vec![d(0, "scale", None, InWindow)]);
    assert_eq!(p.actions[0].run_mode.as_deref(), Some("apply"));
    assert_eq!(p.actions[0].footprint(Pre), None);
}

#[test]
fn a_new_run_mode_of_a_tagged_action_runs_it_once_more() {
    let recorded = with_history(
        "v1.17.0",
        vec![fp(Pre, "scale", Some("v1.18.0"), Some("apply"))],
    );
    let s = spec(
        vec![set(
            tagged("scale", "v1.18.0", W),
            "runMode",
            json!("verify"),
        )],
        vec![],
    );
    let p = plan(&s, Pre, &recorded);
    assert_eq!(
        decisions(&p),
        vec![d(0, "scale", Some("v1.18.0"), InWindow)]
    );
    assert_eq!(
        p.actions[0].footprint(Pre),
        Some(fp(Pre, "scale", Some("v1.18.0"), Some("verify")))
    );
    // Dropping the runMode is a different footprint as well.
    let s = spec(vec![tagged("scale", "v1.18.0", W)], vec![]);
    assert_eq!(
        decisions(&plan(&s, Pre, &recorded)),
        vec![d(0, "scale", Some("v1.18.0"), InWindow)]
    );
}

#[test]
fn a_footprint_recorded_in_the_other_stage_does_not_skip() {
    let s = spec(
        vec![tagged("noop", "v1.18.0", W)],
        vec![tagged("noop", "v1.18.0", W)],
    );
    let recorded = with_history("v1.17.0", vec![fp(Post, "noop", Some("v1.18.0"), None)]);
    assert_eq!(
        decisions(&plan(&s, Pre, &recorded)),
        vec![d(0, "noop", Some("v1.18.0"), InWindow)]
    );
    assert_eq!(
        decisions(&plan(&s, Post, &recorded)),
        vec![d(0, "noop", Some("v1.18.0"), FootprintRecorded)]
    );
}

#[test]
fn outside_window_wins_over_a_recorded_footprint() {
    let s = spec(vec![tagged("noop", "v1.18.0", W)], vec![]);
    let recorded = with_history("v1.18.0", vec![fp(Pre, "noop", Some("v1.18.0"), None)]);
    assert_eq!(
        decisions(&plan(&s, Pre, &recorded)),
        vec![d(0, "noop", Some("v1.18.0"), OutsideWindow)]
    );
}

#[test]
fn a_fresh_installation_runs_nothing() {
    let s = spec_with_skips(
        vec![
            decl("scale", W),
            tagged("noop", "v1.18.0", ["v1", "v1", "v9"]),
        ],
        vec![decl("noop", W)],
        vec![json!({"id": "scale"})],
        vec![],
    );
    let fresh = ctx(None);
    assert!(fresh.is_fresh_installation());
    assert_eq!(
        decisions(&plan(&s, Pre, &fresh)),
        vec![
            d(0, "scale", None, OptedOut),
            d(1, "noop", Some("v1.18.0"), FreshInstallation),
        ]
    );
    assert_eq!(
        decisions(&plan(&s, Post, &fresh)),
        vec![d(0, "noop", None, FreshInstallation)]
    );
}

#[test]
fn decisions_keep_the_declared_order() {
    let s = spec_with_skips(
        vec![
            tagged("noop", "v1.18.0", W),                     // footprint recorded
            decl("scale", ["v1.15", "v1.16", "v1.16"]),       // outside
            decl("noop", W),                                  // run
            tagged("scale", "v1.18.0", W),                    // opted out
            set(decl("scale", W), "runMode", json!("apply")), // run
        ],
        vec![],
        vec![json!({"id": "scale", "tag": "v1.18.0"})],
        vec![],
    );
    let recorded = with_history("v1.17.1", vec![fp(Pre, "noop", Some("v1.18.0"), None)]);
    let p = plan(&s, Pre, &recorded);
    assert_eq!(
        decisions(&p),
        vec![
            d(0, "noop", Some("v1.18.0"), FootprintRecorded),
            d(1, "scale", None, OutsideWindow),
            d(2, "noop", None, InWindow),
            d(3, "scale", Some("v1.18.0"), OptedOut),
            d(4, "scale", None, InWindow),
        ]
    );
    let run_modes: Vec<_> = p.actions.iter().map(|a| a.run_mode.as_deref()).collect();
    assert_eq!(run_modes, vec![None, None, None, None, Some("apply")]);
}

#[test]
fn reasons_are_spelled_as_the_cli_contract_says() {
    let names: Vec<_> = [
        InWindow,
        OptedOut,
        OutsideWindow,
        FootprintRecorded,
        FreshInstallation,
    ]
    .into_iter()
    .map(|r| (r.as_str(), serde_json::to_value(r).expect("serializes")))
    .collect();
    assert_eq!(
        names,
        vec![
            ("InWindow", json!("InWindow")),
            ("OptedOut", json!("OptedOut")),
            ("OutsideWindow", json!("OutsideWindow")),
            ("FootprintRecorded", json!("FootprintRecorded")),
            ("FreshInstallation", json!("FreshInstallation")),
        ]
    );
    assert_eq!(
        serde_json::to_value(Decision::Run).expect("serializes"),
        json!("run")
    );
    assert_eq!(
        serde_json::to_value(Decision::Skip).expect("serializes"),
        json!("skip")
    );
}

// ---------------------------------------------------------------------------------------------
// Deployment::new
// ---------------------------------------------------------------------------------------------

#[test]
fn context_new_precedence() {
    let with_installed = set(spec(vec![], vec![]), "installedRelease", json!("v1.15.0"));
    let without = spec(vec![], vec![]);
    let status = json!({
        "lastMigratedRelease": "v1.16.1",
        "history": [{"stage": "pre", "id": "noop", "tag": "v1.16.0", "runMode": "apply"}],
    });
    let recorded = Recorded::from_status(Some(&status)).expect("status reads");
    let nothing = Recorded::default();

    let decls = read(&with_installed);
    // The override wins over everything.
    let c = Deployment::new(&decls, &recorded, Some(rel("v1.17.2")));
    assert_eq!(c.last_migrated, Some(rel("v1.17.2")));
    assert_eq!(
        c.history,
        vec![fp(Pre, "noop", Some("v1.16.0"), Some("apply"))]
    );
    // The recorded release wins over installedRelease.
    let c = Deployment::new(&decls, &recorded, None);
    assert_eq!(c.last_migrated, Some(rel("v1.16.1")));
    // installedRelease when nothing is recorded.
    let c = Deployment::new(&decls, &nothing, None);
    assert_eq!(c.last_migrated, Some(rel("v1.15.0")));
    assert!(!c.is_fresh_installation());
    assert!(c.history.is_empty());
    // The override also wins over installedRelease alone.
    let c = Deployment::new(&decls, &nothing, Some(rel("v1.14.0")));
    assert_eq!(c.last_migrated, Some(rel("v1.14.0")));

    // Nothing at all: a fresh installation.
    let c = Deployment::new(&read(&without), &nothing, None);
    assert_eq!(c.last_migrated, None);
    assert!(c.is_fresh_installation());
    // An empty recorded release counts as none.
    let empty = Recorded::from_status(Some(&json!({"lastMigratedRelease": ""}))).expect("reads");
    let c = Deployment::new(&read(&without), &empty, None);
    assert!(c.is_fresh_installation());
    let c = Deployment::new(&decls, &empty, None);
    assert_eq!(c.last_migrated, Some(rel("v1.15.0")));
}

// ---------------------------------------------------------------------------------------------
// read_manifest / Recorded::from_status
// ---------------------------------------------------------------------------------------------

fn manifest(api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "opendesk"},
        "spec": spec(vec![decl("scale", W)], vec![tagged("noop", "v1.18.0", W)]),
    })
}

#[test]
fn read_manifest_accepts_both_served_versions() {
    for api_version in ["stagehand.dev/v1alpha1", "stagehand.dev/v1beta1"] {
        let (decls, recorded) =
            read_manifest(&manifest(api_version, "Migration")).expect("a Migration");
        assert_eq!(decls.release_version, Some(rel("v1.18.0")));
        assert_eq!(decls.pre.actions.len(), 1);
        assert_eq!(decls.post.actions[0].tag.as_deref(), Some("v1.18.0"));
        assert!(decls.problems.is_empty());
        assert_eq!(recorded, Recorded::default());
    }
}

#[test]
fn read_manifest_rejects_other_kinds_and_api_versions() {
    for (api_version, kind) in [
        ("stagehand.dev/v1beta1", "MigrationRun"),
        ("stagehand.dev/v1alpha1", "migration"),
        ("stagehand.dev/v1", "Migration"),
        ("stagehand.dev/v1beta2", "Migration"),
        ("example.com/v1beta1", "Migration"),
        ("v1", "ConfigMap"),
        ("", ""),
    ] {
        let err = read_manifest(&manifest(api_version, kind)).expect_err(kind);
        assert_eq!(
            err,
            ManifestError::NotAMigration {
                api_version: api_version.into(),
                kind: kind.into()
            }
        );
    }
    let mut no_kind = manifest("stagehand.dev/v1beta1", "Migration");
    no_kind.as_object_mut().expect("mapping").remove("kind");
    assert!(matches!(
        read_manifest(&no_kind),
        Err(ManifestError::NotAMigration { .. })
    ));
    assert_eq!(
        read_manifest(&json!(["Migration"])),
        Err(ManifestError::NotAMapping)
    );
    assert_eq!(
        read_manifest(&json!("Migration")),
        Err(ManifestError::NotAMapping)
    );
}

#[test]
fn read_manifest_requires_a_spec() {
    let m = unset(manifest("stagehand.dev/v1beta1", "Migration"), "spec");
    assert!(matches!(read_manifest(&m), Err(ManifestError::Shape { path, .. }) if path == "spec"));
}

#[test]
fn read_manifest_reads_the_status() {
    let m = set(
        manifest("stagehand.dev/v1beta1", "Migration"),
        "status",
        json!({
            "lastMigratedRelease": "v1.17.3",
            "history": [
                {"stage": "pre", "id": "noop", "tag": "v1.17.0", "runMode": "apply",
                 "release": "v1.17.0", "runName": "r1", "completedAt": "2026-01-01T00:00:00Z"},
                {"stage": "post", "id": "scale"},
            ],
        }),
    );
    let (_, recorded) = read_manifest(&m).expect("a Migration");
    assert_eq!(recorded.last_migrated, Some(rel("v1.17.3")));
    assert_eq!(
        recorded.history,
        vec![
            fp(Pre, "noop", Some("v1.17.0"), Some("apply")),
            fp(Post, "scale", None, None),
        ]
    );
}

#[test]
fn from_status_rejects_a_malformed_status() {
    assert_eq!(Recorded::from_status(None), Ok(Recorded::default()));
    assert_eq!(
        Recorded::from_status(Some(&Value::Null)),
        Ok(Recorded::default())
    );
    for (status, path) in [
        (json!([]), "status"),
        (json!({"history": {}}), "status.history"),
        (
            json!({"history": [{"stage": "during", "id": "x"}]}),
            "status.history[0].stage",
        ),
        (
            json!({"history": [{"stage": "pre"}]}),
            "status.history[0].id",
        ),
    ] {
        match Recorded::from_status(Some(&status)) {
            Err(ManifestError::Shape { path: got, .. }) => assert_eq!(got, path, "{status}"),
            other => panic!("{status}: {other:?}"),
        }
    }
}

#[test]
fn from_spec_rejects_lists_of_the_wrong_shape() {
    for (s, path) in [
        (
            json!({"releaseVersion": "v1.18.0", "actions": []}),
            "spec.actions",
        ),
        (
            json!({"releaseVersion": "v1.18.0", "actions": {"pre": {}}}),
            "spec.actions.pre",
        ),
        (
            json!({"releaseVersion": "v1.18.0", "actionsSkip": {"post": "noop"}}),
            "spec.actionsSkip.post",
        ),
    ] {
        match Declarations::from_spec(&s) {
            Err(ManifestError::Shape { path: got, .. }) => assert_eq!(got, path, "{s}"),
            other => panic!("{s}: {other:?}"),
        }
    }
}

/// An invalid recorded release is a problem like any other (collected, not a read error).
#[test]
fn an_invalid_recorded_release_is_an_invalid_version_problem() {
    for value in [json!(1.17), json!("yesterday")] {
        let recorded = Recorded::from_status(Some(&json!({"lastMigratedRelease": value}))).unwrap();
        assert_eq!(recorded.last_migrated, None);
        let got: Vec<_> = recorded
            .problems
            .iter()
            .map(|p| (p.code, p.stage, p.index, p.field.clone()))
            .collect();
        assert_eq!(
            got,
            [(
                ProblemCode::InvalidVersion,
                None,
                None,
                Some("status.lastMigratedRelease".to_string())
            )],
            "{value}"
        );
    }
    let manifest = json!({
        "apiVersion": "stagehand.dev/v1beta1", "kind": "Migration",
        "spec": {"releaseVersion": "v1.18.0"},
        "status": {"lastMigratedRelease": "yesterday"},
    });
    let (decls, _) = read_manifest(&manifest).unwrap();
    assert!(
        decls
            .problems
            .iter()
            .any(|p| p.code == ProblemCode::InvalidVersion
                && p.field.as_deref() == Some("status.lastMigratedRelease"))
    );
}

// ---------------------------------------------------------------------------------------------
// Formerly suspected bugs, now fixed: misspelled keys are problems, never silently dropped.
// ---------------------------------------------------------------------------------------------

/// Whether a spec is rejected one way or another: unreadable, or with at least one problem.
fn rejected(spec: &Value, last: Option<&str>) -> bool {
    match Declarations::from_spec(spec) {
        Err(_) => true,
        Ok(decls) => !validate(&decls, &ctx(last), &FakeCatalog).is_valid(),
    }
}

#[test]

fn a_misspelled_stage_or_list_key_is_not_silently_ignored() {
    // `actionsSkip.Pre`: the opt-out is dropped and the action it excluded runs (InWindow).
    let skip_typo = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [tagged("noop", "v1.18.0", W)]},
        "actionsSkip": {"Pre": [{"id": "noop", "tag": "v1.18.0"}]},
    });
    assert!(
        rejected(&skip_typo, Some("v1.17.0")),
        "actionsSkip.Pre is ignored: {:?}",
        plan_stage(&read(&skip_typo), Pre, &ctx(Some("v1.17.0")))
    );
    // `actions.pree`: every declaration of the stage is dropped, and the spec is "valid".
    let actions_typo = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pree": [decl("noop", W)]},
    });
    assert!(
        rejected(&actions_typo, Some("v1.17.0")),
        "actions.pree is ignored"
    );
    // `actionSkip` (no s): every opt-out is dropped.
    let spec_typo = json!({
        "releaseVersion": "v1.18.0",
        "actions": {"pre": [decl("noop", W)]},
        "actionSkip": {"pre": [{"id": "noop"}]},
    });
    assert!(
        rejected(&spec_typo, Some("v1.17.0")),
        "actionSkip is ignored"
    );
}

#[test]

fn a_misspelled_tag_key_in_a_skip_entry_is_not_silently_ignored() {
    // The user meant {id: noop, tag: v1.18.0}; the declaration is untagged, so this is a
    // mistyped opt-out (MistypedSkip). Instead the entry reads as `{id: noop}` and opts out the
    // untagged declaration without any problem.
    let s = spec_with_skips(
        vec![decl("noop", W)],
        vec![],
        vec![json!({"id": "noop", "tga": "v1.18.0"})],
        vec![],
    );
    assert!(
        rejected(&s, Some("v1.17.0")),
        "{:?}",
        plan_stage(&read(&s), Pre, &ctx(Some("v1.17.0")))
    );
}

/// An empty tag or runMode is a mistake (a template rendering "" for "none"), not a value.
#[test]
fn empty_tag_or_run_mode_is_a_problem() {
    for key in ["tag", "runMode"] {
        let mut entry = decl("noop", W);
        entry[key] = json!("");
        let s = json!({"releaseVersion": "v1.18.0", "actions": {"pre": [entry]}});
        let d = read(&s);
        let got: Vec<_> = d
            .problems
            .iter()
            .map(|p| (p.code, p.index, p.field.clone()))
            .collect();
        assert_eq!(
            got,
            [(ProblemCode::InvalidConfig, Some(0), Some(key.to_string()))],
            "{key}"
        );
    }
    let s = spec_with_skips(
        vec![tagged("noop", "v1.18.0", W)],
        vec![],
        vec![json!({"id": "noop", "tag": ""})],
        vec![],
    );
    let r = validate(&read(&s), &ctx(Some("v1.17.0")), &FakeCatalog);
    let got: Vec<_> = r
        .problems
        .iter()
        .map(|p| (p.code, p.field.clone()))
        .collect();
    assert_eq!(
        got,
        [(
            ProblemCode::MistypedSkip,
            Some("actionsSkip.tag".to_string())
        )]
    );
}

/// openDesk v1.19's derived runMode with Stagehand's dry-run rule (docs/declarations.md,
/// "A runMode derived from an option"), as the planner decides each deploy. `scale` stands
/// for `synapse_deactivate_orphaned_users` (runMode `dry-run` or `apply` from the option),
/// `noop` for the literal-`apply` pre actions and the post action (window to v1). What each
/// run recorded is what the engine records: nothing for the dry run (its config is a dry run),
/// `(tag, runMode)` for every applied tagged action.
#[test]
fn a_run_mode_derived_from_an_option_and_the_dry_run_rule() {
    const V119: [&str; 3] = ["v1.18", "v1.18", "v1.18"];
    let synapse = |mode: &str| set(tagged("scale", "v1.19.0", V119), "runMode", json!(mode));
    let marker = set(tagged("noop", "v1.19.0", V119), "runMode", json!("apply"));
    let hashes = set(
        tagged("noop", "v1.19.0", ["v1.18", "v1.18", "v1"]),
        "runMode",
        json!("apply"),
    );
    let v1_19 = |mode: &str| {
        set(
            spec(vec![synapse(mode), marker.clone()], vec![hashes.clone()]),
            "releaseVersion",
            json!("v1.19.0"),
        )
    };
    let (dry, apply) = (v1_19("dry-run"), v1_19("apply"));
    let marker_done = fp(Pre, "noop", Some("v1.19.0"), Some("apply"));
    let synapse_done = fp(Pre, "scale", Some("v1.19.0"), Some("apply"));
    let run = |mode| {
        vec![
            d(0, "scale", Some("v1.19.0"), InWindow),
            d(1, "noop", Some("v1.19.0"), mode),
        ]
    };

    // Dry-run deploy (the pre stage alone): both run; the dry run records nothing.
    let first = plan(&dry, Pre, &with_history("v1.18.2", vec![]));
    assert_eq!(decisions(&first), run(InWindow));
    assert_eq!(
        first.actions[0].footprint(Pre),
        Some(fp(Pre, "scale", Some("v1.19.0"), Some("dry-run"))),
        "the footprint it would have; the engine does not record a dry run's"
    );
    // Dry-run deploy again: the dry run runs again (nothing recorded), the marker is skipped.
    let after_review = with_history("v1.18.2", vec![marker_done.clone()]);
    assert_eq!(
        decisions(&plan(&dry, Pre, &after_review)),
        run(FootprintRecorded)
    );
    // The option flipped: the apply runs, once.
    let flipped = plan(&apply, Pre, &after_review);
    assert_eq!(decisions(&flipped), run(FootprintRecorded));
    assert_eq!(
        flipped.actions[0].footprint(Pre),
        Some(synapse_done.clone())
    );
    let applied = with_history("v1.18.2", vec![marker_done.clone(), synapse_done.clone()]);
    assert_eq!(
        decisions(&plan(&apply, Pre, &applied)),
        vec![
            d(0, "scale", Some("v1.19.0"), FootprintRecorded),
            d(1, "noop", Some("v1.19.0"), FootprintRecorded),
        ]
    );
    // Apply directly: everything runs once.
    assert_eq!(
        decisions(&plan(&apply, Pre, &with_history("v1.18.2", vec![]))),
        run(InWindow)
    );
    assert_eq!(
        decisions(&plan(&apply, Post, &applied)),
        vec![d(0, "noop", Some("v1.19.0"), InWindow)]
    );
    // After the first post run that records v1.19.0: the pre windows (to v1.18) are closed
    // for good, whatever the option says; the post action's window (to v1) stays open and
    // its footprint skips it.
    let hashes_done = fp(Post, "noop", Some("v1.19.0"), Some("apply"));
    let migrated = with_history("v1.19.0", vec![marker_done, synapse_done, hashes_done]);
    for s in [&dry, &apply] {
        assert_eq!(
            decisions(&plan(s, Pre, &migrated)),
            vec![
                d(0, "scale", Some("v1.19.0"), OutsideWindow),
                d(1, "noop", Some("v1.19.0"), OutsideWindow),
            ]
        );
        assert_eq!(
            decisions(&plan(s, Post, &migrated)),
            vec![d(0, "noop", Some("v1.19.0"), FootprintRecorded)]
        );
    }
    // A deployment at v1.17.x: refused before anything runs.
    let report = validate(&read(&dry), &ctx(Some("v1.17.3")), &FakeCatalog);
    assert!(
        !report.is_valid() && report.problems.iter().all(|p| p.code == BelowMinimum),
        "{report:#?}"
    );
    assert_eq!(report.problems.len(), 3, "{report:#?}");
}
