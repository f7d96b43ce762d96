#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property tests of the declaration reader, validator and planner (docs/design.md#reliability:
//! the declaration validator is fuzzed): arbitrary JSON never panics, and generated specs — a mix
//! of valid and broken declarations of both stages — produce exactly the problems an independent
//! oracle expects, located at the right entry, and plans that follow docs/design.md#planning.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use stagehand_config::{
    ActionCatalog, ConfigIssue, Decision, Declarations, Deployment, Footprint, ProblemCode, Reason,
    Release, Series, Stage, plan_stage, validate,
};

/// `scale` needs `replicas`; `noop` accepts anything.
struct FakeCatalog;

impl ActionCatalog for FakeCatalog {
    fn config_issues(&self, id: &str, config: &Value) -> Option<Vec<ConfigIssue>> {
        match id {
            "scale" if config.get("replicas").is_none() => Some(vec![ConfigIssue {
                path: "replicas".into(),
                message: "required".into(),
            }]),
            "scale" | "noop" => Some(Vec::new()),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Arbitrary JSON never panics
// ---------------------------------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1.0e6f64..1.0e6).prop_map(Value::from),
        prop_oneof![
            Just("v1.15".to_string()),
            Just("v1.18.0".to_string()),
            Just("pre".to_string()),
            Just("scale".to_string()),
            "[a-z0-9.v*-]{0,8}",
        ]
        .prop_map(Value::from),
    ];
    let keys = prop_oneof![
        Just("releaseVersion"),
        Just("installedRelease"),
        Just("actions"),
        Just("actionsSkip"),
        Just("pre"),
        Just("post"),
        Just("id"),
        Just("tag"),
        Just("runMode"),
        Just("versions"),
        Just("minimum"),
        Just("from"),
        Just("to"),
        Just("config"),
        Just("x"),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn reading_validating_and_planning_arbitrary_json_never_panics(
        spec in arb_json(),
        last in prop::option::of(prop_oneof![Just("v1.14.9"), Just("v1.17.3")]),
    ) {
        if let Ok(decls) = Declarations::from_spec(&spec) {
            let context = Deployment {
                last_migrated: last.map(|l| Release::parse(l).expect("a release")),
                history: Vec::new(),
            };
            let report = validate(&decls, &context, &FakeCatalog);
            prop_assert_eq!(report.is_valid(), report.problems.is_empty());
            for stage in Stage::ALL {
                let plan = plan_stage(&decls, stage, &context);
                prop_assert!(plan.actions.len() <= decls.stage(stage).actions.len());
            }
            for p in &report.problems {
                prop_assert!(p.field.as_deref().is_some_and(|f| !f.is_empty()), "{:?}", p);
                prop_assert_eq!(p.stage.is_some(), p.index.is_some(), "{:?}", p);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generated specs against an oracle
// ---------------------------------------------------------------------------------------------

const GOOD_SERIES: [&str; 9] = [
    "v1", "v1.14", "v1.15", "v1.15.2", "v1.16", "1.17", "v1.17", "v1.17.3", "v2",
];
const BAD_SERIES: [&str; 4] = ["v1.18.0-rc1", "1.2.3.4", "", "latest"];

/// One `versions` bound as generated.
#[derive(Debug, Clone)]
enum Bound {
    Missing,
    Good(&'static str),
    Bad(&'static str),
    Number,
}

fn arb_bound() -> impl Strategy<Value = Bound> {
    prop_oneof![
        1 => Just(Bound::Missing),
        8 => prop::sample::select(GOOD_SERIES.to_vec()).prop_map(Bound::Good),
        1 => prop::sample::select(BAD_SERIES.to_vec()).prop_map(Bound::Bad),
        1 => Just(Bound::Number),
    ]
}

/// One action entry as generated.
#[derive(Debug, Clone)]
enum Entry {
    NotAMapping,
    Action {
        id: Option<&'static str>,
        tag: Option<&'static str>,
        run_mode: Option<&'static str>,
        bounds: [Bound; 3],
        extra_versions_key: bool,
        replicas: bool,
    },
}

fn arb_entry() -> impl Strategy<Value = Entry> {
    let action = (
        prop::option::weighted(0.9, prop::sample::select(vec!["scale", "noop", "nope"])),
        prop::option::of(prop::sample::select(vec!["v1.17.0", "v1.18.0"])),
        prop::option::of(prop::sample::select(vec!["apply", "verify"])),
        [arb_bound(), arb_bound(), arb_bound()],
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.9),
    )
        .prop_map(
            |(id, tag, run_mode, bounds, extra_versions_key, replicas)| Entry::Action {
                id,
                tag,
                run_mode,
                bounds,
                extra_versions_key,
                replicas,
            },
        );
    prop_oneof![1 => Just(Entry::NotAMapping), 20 => action]
}

type Skip = (Option<&'static str>, Option<&'static str>);

fn arb_skip() -> impl Strategy<Value = Skip> {
    (
        prop::option::weighted(0.9, prop::sample::select(vec!["scale", "noop", "gone"])),
        prop::option::of(prop::sample::select(vec!["v1.17.0", "v1.18.0"])),
    )
}

const KEYS: [&str; 3] = ["minimum", "from", "to"];

fn entry_json(entry: &Entry) -> Value {
    let Entry::Action {
        id,
        tag,
        run_mode,
        bounds,
        extra_versions_key,
        replicas,
    } = entry
    else {
        return json!("scale");
    };
    let mut versions = Map::new();
    for (key, bound) in KEYS.iter().zip(bounds) {
        match bound {
            Bound::Missing => {}
            Bound::Good(s) | Bound::Bad(s) => {
                versions.insert((*key).into(), json!(s));
            }
            Bound::Number => {
                versions.insert((*key).into(), json!(1.1));
            }
        }
    }
    if *extra_versions_key {
        versions.insert("max".into(), json!("v1.17"));
    }
    let mut out = Map::new();
    if let Some(id) = id {
        out.insert("id".into(), json!(id));
    }
    if let Some(tag) = tag {
        out.insert("tag".into(), json!(tag));
    }
    if let Some(mode) = run_mode {
        out.insert("runMode".into(), json!(mode));
    }
    out.insert("versions".into(), Value::Object(versions));
    if *replicas {
        out.insert("config".into(), json!({"replicas": 1}));
    }
    Value::Object(out)
}

fn skip_json((id, tag): &Skip) -> Value {
    let mut out = Map::new();
    if let Some(id) = id {
        out.insert("id".into(), json!(id));
    }
    if let Some(tag) = tag {
        out.insert("tag".into(), json!(tag));
    }
    Value::Object(out)
}

#[derive(Debug, Clone)]
struct Generated {
    pre: Vec<Entry>,
    post: Vec<Entry>,
    skip_pre: Vec<Skip>,
    skip_post: Vec<Skip>,
    last: Option<&'static str>,
    history: Vec<(
        Stage,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
    )>,
}

impl Generated {
    fn entries(&self, stage: Stage) -> &[Entry] {
        match stage {
            Stage::Pre => &self.pre,
            Stage::Post => &self.post,
        }
    }
    fn skips(&self, stage: Stage) -> &[Skip] {
        match stage {
            Stage::Pre => &self.skip_pre,
            Stage::Post => &self.skip_post,
        }
    }
    fn spec(&self) -> Value {
        json!({
            "releaseVersion": "v1.18.0",
            "actions": {
                "pre": self.pre.iter().map(entry_json).collect::<Vec<_>>(),
                "post": self.post.iter().map(entry_json).collect::<Vec<_>>(),
            },
            "actionsSkip": {
                "pre": self.skip_pre.iter().map(skip_json).collect::<Vec<_>>(),
                "post": self.skip_post.iter().map(skip_json).collect::<Vec<_>>(),
            },
        })
    }
    fn context(&self) -> Deployment {
        Deployment {
            last_migrated: self.last.map(|l| Release::parse(l).expect("a release")),
            history: self
                .history
                .iter()
                .map(|(stage, id, tag, mode)| Footprint {
                    stage: *stage,
                    id: (*id).into(),
                    tag: tag.map(str::to_string),
                    run_mode: mode.map(str::to_string),
                })
                .collect(),
        }
    }
}

fn arb_generated() -> impl Strategy<Value = Generated> {
    let footprint = (
        prop::sample::select(vec![Stage::Pre, Stage::Post]),
        prop::sample::select(vec!["scale", "noop"]),
        prop::option::of(prop::sample::select(vec!["v1.17.0", "v1.18.0"])),
        prop::option::of(prop::sample::select(vec!["apply", "verify"])),
    );
    (
        prop::collection::vec(arb_entry(), 0..6),
        prop::collection::vec(arb_entry(), 0..6),
        prop::collection::vec(arb_skip(), 0..3),
        prop::collection::vec(arb_skip(), 0..3),
        prop::option::weighted(
            0.85,
            prop::sample::select(vec![
                "v1.14.9",
                "v1.15.0-rc.1",
                "v1.15.0",
                "v1.15.2",
                "v1.16.1",
                "v1.17.3",
                "v1.18.0",
                "v2.0.0",
            ]),
        ),
        prop::collection::vec(footprint, 0..4),
    )
        .prop_map(
            |(pre, post, skip_pre, skip_post, last, history)| Generated {
                pre,
                post,
                skip_pre,
                skip_post,
                last,
                history,
            },
        )
}

/// Windows that validate for every generated last migrated release.
const VALID_WINDOWS: [[&str; 3]; 7] = [
    ["v1", "v1.15", "v1.17"],
    ["v1.14", "v1.15", "v1.17"],
    ["v1", "v1.16", "v1.16"],
    ["v1", "v1.15.2", "v1.15"],
    ["v1", "v1.17.3", "v1.17"],
    ["v1", "v1", "v2"],
    ["v1.14", "v1.18", "v1"],
];

fn arb_valid_entry() -> impl Strategy<Value = Entry> {
    (
        prop::sample::select(vec!["scale", "noop"]),
        prop::option::of(prop::sample::select(vec!["v1.17.0", "v1.18.0"])),
        prop::option::of(prop::sample::select(vec!["apply", "verify"])),
        prop::sample::select(VALID_WINDOWS.to_vec()),
    )
        .prop_map(|(id, tag, run_mode, [m, f, t])| Entry::Action {
            id: Some(id),
            tag,
            run_mode,
            bounds: [Bound::Good(m), Bound::Good(f), Bound::Good(t)],
            extra_versions_key: false,
            replicas: true,
        })
}

/// Opt-outs that match a declared (id, tag) exactly, or name an id nobody declares.
fn valid_skips(entries: &[Entry], picks: &[(prop::sample::Index, bool)]) -> Vec<Skip> {
    picks
        .iter()
        .map(|(pick, gone)| match entries {
            _ if *gone || entries.is_empty() => (Some("gone"), None),
            _ => match &entries[pick.index(entries.len())] {
                Entry::Action { id, tag, .. } => (*id, *tag),
                Entry::NotAMapping => (Some("gone"), None),
            },
        })
        .collect()
}

fn arb_valid_generated() -> impl Strategy<Value = Generated> {
    let footprint = (
        prop::sample::select(vec![Stage::Pre, Stage::Post]),
        prop::sample::select(vec!["scale", "noop"]),
        prop::option::of(prop::sample::select(vec!["v1.17.0", "v1.18.0"])),
        prop::option::of(prop::sample::select(vec!["apply", "verify"])),
    );
    let picks = prop::collection::vec(
        (any::<prop::sample::Index>(), prop::bool::weighted(0.2)),
        0..3,
    );
    (
        prop::collection::vec(arb_valid_entry(), 0..6),
        prop::collection::vec(arb_valid_entry(), 0..6),
        picks.clone(),
        picks,
        prop::option::weighted(
            0.85,
            prop::sample::select(vec![
                "v1.14.9",
                "v1.15.0-rc.1",
                "v1.15.0",
                "v1.15.2",
                "v1.16.1",
                "v1.17.3",
                "v1.18.0",
                "v2.0.0",
            ]),
        ),
        prop::collection::vec(footprint, 0..6),
    )
        .prop_map(|(pre, post, pick_pre, pick_post, last, history)| {
            let pre = without_duplicate_footprints(pre);
            let post = without_duplicate_footprints(post);
            Generated {
                skip_pre: valid_skips(&pre, &pick_pre),
                skip_post: valid_skips(&post, &pick_post),
                pre,
                post,
                last,
                history,
            }
        })
}

type Key = (ProblemCode, Stage, usize, Option<String>, String);

/// Whether two entries record the same footprint: both tagged, same id, tag and runMode.
fn same_footprint(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (
            Entry::Action {
                id: Some(a_id),
                tag: Some(a_tag),
                run_mode: a_mode,
                ..
            },
            Entry::Action {
                id: Some(b_id),
                tag: Some(b_tag),
                run_mode: b_mode,
                ..
            },
        ) => a_id == b_id && a_tag == b_tag && a_mode == b_mode,
        _ => false,
    }
}

/// The entries without those that repeat an earlier entry's footprint (`DuplicateFootprint`).
fn without_duplicate_footprints(entries: Vec<Entry>) -> Vec<Entry> {
    let mut kept: Vec<Entry> = Vec::new();
    for entry in entries {
        if !kept.iter().any(|k| same_footprint(k, &entry)) {
            kept.push(entry);
        }
    }
    kept
}

/// What docs/design.md#validation says validation reports for the generated spec, computed without
/// the crate's validator (the release-series arithmetic of `Series` is trusted: it has its own
/// tests).
fn oracle(g: &Generated) -> Vec<Key> {
    use ProblemCode::*;
    let last = g.last.map(|l| Release::parse(l).expect("a release"));
    let mut out = Vec::new();
    for stage in Stage::ALL {
        for (index, entry) in g.entries(stage).iter().enumerate() {
            let Entry::Action {
                id,
                tag,
                bounds,
                extra_versions_key,
                replicas,
                ..
            } = entry
            else {
                out.push((MissingId, stage, index, None, "id".into()));
                continue;
            };
            let ids = id.map(str::to_string);
            let mut at =
                |code, field: &str| out.push((code, stage, index, ids.clone(), field.into()));
            if id.is_some()
                && tag.is_some()
                && g.entries(stage)[..index]
                    .iter()
                    .any(|earlier| same_footprint(earlier, entry))
            {
                at(DuplicateFootprint, "tag");
            }
            match id {
                None => at(MissingId, "id"),
                Some("nope") => at(UnknownAction, "id"),
                Some("scale") if !replicas => at(InvalidConfig, "config.replicas"),
                _ => {}
            }
            if *extra_versions_key {
                at(UnknownVersionsKey, "versions.max");
            }
            let mut parsed = [None, None, None];
            for ((key, bound), slot) in KEYS.iter().zip(bounds).zip(parsed.iter_mut()) {
                let field = format!("versions.{key}");
                match bound {
                    Bound::Missing => at(MissingVersionsKey, &field),
                    Bound::Bad(_) | Bound::Number => at(InvalidVersion, &field),
                    Bound::Good(s) => *slot = Some(Series::parse(s).expect("a series")),
                }
            }
            let [minimum, from, to] = parsed;
            if let (Some(m), Some(f)) = (minimum, from)
                && f.start() < m.start()
            {
                at(FromBelowMinimum, "versions.from");
            }
            if let (Some(f), Some(t)) = (from, to)
                && !t.covers_up_to(&f.start())
            {
                at(ToBeforeFrom, "versions.to");
            }
            if let (Some(m), Some(l)) = (minimum, &last)
                && *l < m.start()
            {
                at(BelowMinimum, "versions.minimum");
            }
        }
        for (index, (id, tag)) in g.skips(stage).iter().enumerate() {
            let Some(id) = id else {
                out.push((MissingId, stage, index, None, "actionsSkip.id".into()));
                continue;
            };
            let declared: Vec<Option<&str>> = g
                .entries(stage)
                .iter()
                .filter_map(|e| match e {
                    Entry::Action {
                        id: Some(d), tag, ..
                    } if d == id => Some(*tag),
                    _ => None,
                })
                .collect();
            let other = match stage {
                Stage::Pre => Stage::Post,
                Stage::Post => Stage::Pre,
            };
            let elsewhere = g
                .entries(other)
                .iter()
                .any(|e| matches!(e, Entry::Action { id: Some(d), .. } if d == id));
            if declared.is_empty() && elsewhere {
                out.push((
                    SkipInWrongStage,
                    stage,
                    index,
                    Some((*id).into()),
                    "actionsSkip.id".into(),
                ));
            }
            if !declared.is_empty() && !declared.contains(tag) {
                out.push((
                    MistypedSkip,
                    stage,
                    index,
                    Some((*id).into()),
                    "actionsSkip.tag".into(),
                ));
            }
        }
    }
    out.sort_by_key(|k| format!("{k:?}"));
    out
}

/// What docs/design.md#planning says the planner decides for a valid spec.
fn expected_plan(g: &Generated, stage: Stage) -> Vec<(usize, String, Decision, Reason)> {
    let context = g.context();
    g.entries(stage)
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let Entry::Action {
                id: Some(id),
                tag,
                run_mode,
                bounds: [Bound::Good(_), Bound::Good(f), Bound::Good(t)],
                ..
            } = entry
            else {
                unreachable!("a valid spec has ids and windows: {entry:?}")
            };
            let from = Series::parse(f).expect("a series");
            let to = Series::parse(t).expect("a series");
            let reason = if g.skips(stage).contains(&(Some(*id), *tag)) {
                Reason::OptedOut
            } else if let Some(last) = &context.last_migrated {
                if !(*last >= from.start() && to.covers_up_to(last)) {
                    Reason::OutsideWindow
                } else if tag.is_some() && g.history.contains(&(stage, *id, *tag, *run_mode)) {
                    Reason::FootprintRecorded
                } else {
                    Reason::InWindow
                }
            } else {
                Reason::FreshInstallation
            };
            let decision = if reason == Reason::InWindow {
                Decision::Run
            } else {
                Decision::Skip
            };
            (index, (*id).to_string(), decision, reason)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn validation_reports_exactly_the_oracles_problems(g in arb_generated()) {
        let decls = Declarations::from_spec(&g.spec()).expect("generated specs are well-shaped");
        let report = validate(&decls, &g.context(), &FakeCatalog);
        let mut got: Vec<Key> = report
            .problems
            .iter()
            .map(|p| {
                (
                    p.code,
                    p.stage.expect("every generated problem is in a stage"),
                    p.index.expect("and at an entry"),
                    p.id.clone(),
                    p.field.clone().expect("with a field"),
                )
            })
            .collect();
        got.sort_by_key(|k| format!("{k:?}"));
        prop_assert_eq!(got, oracle(&g));
        prop_assert_eq!(report.is_valid(), report.problems.is_empty());
        // Every warning is an opt-out of an id no stage declares.
        let declared_in = |s: Stage, id: Option<&str>| {
            g.entries(s).iter().any(
                |e| matches!(e, Entry::Action { id: Some(d), .. } if Some(*d) == id),
            )
        };
        for w in &report.warnings {
            let stage = w.stage.expect("a stage");
            let (id, _) = g.skips(stage)[w.index.expect("an index")];
            prop_assert_eq!(w.id.as_deref(), id);
            let declared = g.entries(stage).iter().any(
                |e| matches!(e, Entry::Action { id: Some(d), .. } if Some(*d) == id),
            );
            prop_assert!(!declared, "{:?} is declared", id);
        }
        let expected_warnings = Stage::ALL
            .iter()
            .flat_map(|s| g.skips(*s).iter().map(move |k| (*s, k)))
            .filter(|(_, (id, _))| {
                id.is_some() && Stage::ALL.iter().all(|other| !declared_in(*other, *id))
            })
            .count();
        prop_assert_eq!(report.warnings.len(), expected_warnings);
    }

    #[test]
    fn each_stage_is_validated_on_its_own(g in arb_generated()) {
        // All problems at once: the problems of one stage do not depend on the other stage,
        // but for an opt-out naming an action only the other stage declares.
        let full = validate(
            &Declarations::from_spec(&g.spec()).expect("well-shaped"),
            &g.context(),
            &FakeCatalog,
        );
        let mut only_pre = g.clone();
        only_pre.post.clear();
        only_pre.skip_post.clear();
        let pre = validate(
            &Declarations::from_spec(&only_pre.spec()).expect("well-shaped"),
            &g.context(),
            &FakeCatalog,
        );
        let full_pre: Vec<_> = full
            .problems
            .iter()
            .filter(|p| p.stage == Some(Stage::Pre) && p.code != ProblemCode::SkipInWrongStage)
            .cloned()
            .collect();
        prop_assert_eq!(full_pre, pre.problems);
    }

    #[test]
    fn valid_specs_plan_as_spec_4_3_says(g in arb_valid_generated()) {
        let decls = Declarations::from_spec(&g.spec()).expect("well-shaped");
        let context = g.context();
        let report = validate(&decls, &context, &FakeCatalog);
        prop_assert!(report.is_valid(), "{:#?}", report);
        for stage in Stage::ALL {
            let plan = plan_stage(&decls, stage, &context);
            let got: Vec<_> = plan
                .actions
                .iter()
                .map(|a| (a.index, a.id.clone(), a.decision, a.reason))
                .collect();
            prop_assert_eq!(got, expected_plan(&g, stage), "{:?}", stage);
            for (a, e) in plan.actions.iter().zip(g.entries(stage)) {
                let Entry::Action { tag, run_mode, .. } = e else { unreachable!() };
                prop_assert_eq!(a.tag.as_deref(), *tag);
                prop_assert_eq!(a.run_mode.as_deref(), *run_mode);
            }
        }
    }
}
