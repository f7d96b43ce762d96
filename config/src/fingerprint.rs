//! The fingerprint of one stage's declarations: what a run freezes when it plans, so that it
//! executes exactly what it planned (docs/design.md#a-run-executes-what-it-planned).
//!
//! A run of stage S freezes S's `actions` (each declaration's id, tag, runMode, versions and
//! config, and their order), S's `actionsSkip`, `secretFiles`, `objectStore` and
//! `releaseVersion`. The other stage's declarations, `suspend` and `installedRelease` are not
//! part of it: changing them does not change what this run executes.
//!
//! A plan is decided from more than its declarations: `installedRelease`, the last migrated
//! release and the footprints recorded for the stage's tagged actions ([`Basis`]). The plan's
//! digest ([`plan_digest`], `status.frozenPlan.digest`, the one a person approves) covers
//! both, so that an approval never outlives what the plan was computed from.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::declarations::Declarations;
use crate::deployment::Deployment;
use crate::plan::declared_footprint;
use crate::vocabulary::{Footprint, Stage};

/// The digest of one frozen part, `sha256:<hex>` of its canonical JSON (keys sorted).
pub fn digest(value: &Value) -> String {
    let mut text = String::new();
    canonical(value, &mut text);
    let hash = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// JSON with object keys in sorted order, whatever map the parser used.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The frozen fields of one stage other than its actions, by the name docs/api.md gives them.
pub const FROZEN_FIELDS: [&str; 4] = [
    "releaseVersion",
    "secretFiles",
    "objectStore",
    "actionsSkip",
];

/// What a run of one stage freezes, as digests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    /// The digests of `releaseVersion`, `secretFiles`, `objectStore` and the stage's
    /// `actionsSkip`, in the order of [`FROZEN_FIELDS`].
    pub fields: [String; 4],
    /// One digest per declared action of the stage, in order (id, tag, runMode, versions,
    /// config as written).
    pub actions: Vec<ActionDigest>,
}

/// The digest of one action declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDigest {
    /// Its position in the stage.
    pub index: usize,
    /// Its id, when it has one.
    pub id: Option<String>,
    /// The digest of the declaration as written.
    pub digest: String,
}

/// The first difference between a frozen fingerprint and the current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The declaration at this position differs (or is gone); `id` is the planned one.
    Action {
        /// The position.
        index: usize,
        /// The id the run planned there.
        id: Option<String>,
        /// What happened to it.
        what: &'static str,
    },
    /// A declaration was added after the planned ones.
    Added {
        /// Its position.
        index: usize,
        /// Its id.
        id: Option<String>,
    },
    /// A frozen field other than the actions changed.
    Field(&'static str),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |id: &Option<String>| id.clone().unwrap_or_else(|| "<no id>".into());
        match self {
            Change::Action { index, id, what } => {
                write!(f, "action {index} {} {what}", name(id))
            }
            Change::Added { index, id } => {
                write!(f, "action {index} {} was added", name(id))
            }
            Change::Field(field) => write!(f, "{field} changed"),
        }
    }
}

impl Fingerprint {
    /// One digest over everything frozen (cheap to compare; [`Fingerprint::first_change`]
    /// says what differs).
    pub fn digest(&self) -> String {
        let actions: Vec<Value> = self
            .actions
            .iter()
            .map(|a| Value::String(a.digest.clone()))
            .collect();
        let fields: Vec<Value> = self.fields.iter().cloned().map(Value::String).collect();
        digest(&Value::Array(vec![
            Value::Array(fields),
            Value::Array(actions),
        ]))
    }

    /// The first difference from `frozen` (this is the current fingerprint), in document
    /// order: the actions first, by position, then the other fields. `None`: unchanged.
    pub fn first_change(&self, frozen: &Fingerprint) -> Option<Change> {
        for planned in &frozen.actions {
            match self.actions.iter().find(|a| a.index == planned.index) {
                None => {
                    return Some(Change::Action {
                        index: planned.index,
                        id: planned.id.clone(),
                        what: "was removed",
                    });
                }
                Some(now) if now.digest != planned.digest => {
                    let what = if now.id == planned.id {
                        "was changed"
                    } else {
                        "was replaced by another declaration"
                    };
                    return Some(Change::Action {
                        index: planned.index,
                        id: planned.id.clone(),
                        what,
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(added) = self.actions.get(frozen.actions.len()) {
            return Some(Change::Added {
                index: added.index,
                id: added.id.clone(),
            });
        }
        FROZEN_FIELDS
            .iter()
            .zip(self.fields.iter().zip(&frozen.fields))
            .find(|(_, (now, then))| now != then)
            .map(|(name, _)| Change::Field(name))
    }
}

/// What one stage's decisions were computed from besides its declarations: changing any of
/// it may change which actions run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Basis {
    /// The Migration's `installedRelease`, as the planner read it.
    pub installed_release: Option<String>,
    /// The last migrated release the windows were judged from (the ledger's, else
    /// `installedRelease`); `None`: a fresh installation.
    pub last_migrated_release: Option<String>,
    /// The recorded footprints of the stage's tagged declarations (each makes its action skip
    /// as `FootprintRecorded`), sorted.
    pub footprints: Vec<Footprint>,
}

impl Basis {
    /// The basis of a stage's plan: `installedRelease`, the last migrated release and the
    /// footprints of the stage's tagged declarations that `context` records (sorted, once
    /// each).
    pub fn of(declarations: &Declarations, stage: Stage, context: &Deployment) -> Self {
        let mut footprints: Vec<Footprint> = declarations
            .stage(stage)
            .actions
            .iter()
            .filter_map(|d| declared_footprint(stage, d))
            .filter(|print| context.history.contains(print))
            .collect();
        footprints.sort_by(|a, b| footprint_order(a).cmp(&footprint_order(b)));
        footprints.dedup();
        Self {
            installed_release: declarations
                .installed_release
                .as_ref()
                .map(ToString::to_string),
            last_migrated_release: context.last_migrated.as_ref().map(ToString::to_string),
            footprints,
        }
    }

    /// The first difference from the basis a run froze (`then`; this is the current one), in
    /// words; `None`: unchanged.
    pub fn first_change(&self, then: &Basis) -> Option<String> {
        let release = |r: &Option<String>| r.clone().unwrap_or_else(|| "none".into());
        if self.installed_release != then.installed_release {
            return Some(format!(
                "installedRelease changed from {} to {}",
                release(&then.installed_release),
                release(&self.installed_release)
            ));
        }
        if self.last_migrated_release != then.last_migrated_release {
            return Some(format!(
                "the last migrated release changed from {} to {}",
                release(&then.last_migrated_release),
                release(&self.last_migrated_release)
            ));
        }
        if let Some(gone) = then
            .footprints
            .iter()
            .find(|f| !self.footprints.contains(f))
        {
            return Some(format!(
                "the footprint {} is no longer recorded in the history",
                footprint_text(gone)
            ));
        }
        self.footprints
            .iter()
            .find(|f| !then.footprints.contains(f))
            .map(|new| {
                format!(
                    "the footprint {} is now recorded in the history",
                    footprint_text(new)
                )
            })
    }
}

/// `<stage> <id> <tag> <runMode>` (runMode left out when there is none), as messages and
/// `status.frozenPlan.footprints` name a footprint.
pub fn footprint_text(print: &Footprint) -> String {
    let mut out = format!("{} {}", print.stage, print.id);
    for part in [&print.tag, &print.run_mode].into_iter().flatten() {
        out.push(' ');
        out.push_str(part);
    }
    out
}

fn footprint_order(print: &Footprint) -> (Stage, &str, Option<&str>, Option<&str>) {
    (
        print.stage,
        &print.id,
        print.tag.as_deref(),
        print.run_mode.as_deref(),
    )
}

/// The digest of a plan, the one a person approves: one digest over the stage's declarations
/// (`declarations`, [`Fingerprint::digest`]) and everything the decisions were computed from
/// (`basis`), keys sorted and footprints in order, so that equal inputs give equal digests.
pub fn plan_digest(declarations: &Fingerprint, basis: &Basis) -> String {
    let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
    let footprints: Vec<Value> = basis
        .footprints
        .iter()
        .map(|f| {
            serde_json::json!({
                "stage": f.stage.as_str(),
                "id": f.id,
                "tag": text(&f.tag),
                "runMode": text(&f.run_mode),
            })
        })
        .collect();
    digest(&serde_json::json!({
        "declarations": declarations.digest(),
        "installedRelease": text(&basis.installed_release),
        "lastMigratedRelease": text(&basis.last_migrated_release),
        "footprints": footprints,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn print(actions: &[(&str, Value)], fields: [&str; 4]) -> Fingerprint {
        Fingerprint {
            fields: fields.map(|f| digest(&json!(f))),
            actions: actions
                .iter()
                .enumerate()
                .map(|(index, (id, decl))| ActionDigest {
                    index,
                    id: Some((*id).to_string()),
                    digest: digest(decl),
                })
                .collect(),
        }
    }

    #[test]
    fn the_plan_digest_covers_every_decision_input() {
        let declarations = print(&[("a", json!(1))], ["r", "s", "o", "k"]);
        let foot = |id: &str, tag: &str| Footprint {
            stage: Stage::Pre,
            id: id.into(),
            tag: Some(tag.into()),
            run_mode: None,
        };
        let basis = Basis {
            installed_release: Some("v1.17.3".into()),
            last_migrated_release: Some("v1.17.3".into()),
            footprints: vec![foot("a", "v1.18.0"), foot("b", "v1.18.0")],
        };
        let base = plan_digest(&declarations, &basis);
        assert_eq!(base, plan_digest(&declarations, &basis.clone()));
        assert_ne!(base, declarations.digest(), "more than the declarations");
        let changed = [
            Basis {
                installed_release: Some("v1.16.0".into()),
                ..basis.clone()
            },
            Basis {
                installed_release: None,
                ..basis.clone()
            },
            Basis {
                last_migrated_release: Some("v1.16.2".into()),
                ..basis.clone()
            },
            Basis {
                footprints: vec![foot("a", "v1.18.0")],
                ..basis.clone()
            },
            Basis {
                footprints: vec![foot("a", "v1.18.0"), foot("b", "v1.18.1")],
                ..basis.clone()
            },
        ];
        for other in &changed {
            assert_ne!(plan_digest(&declarations, other), base, "{other:?}");
            assert!(other.first_change(&basis).is_some(), "{other:?}");
        }
        assert_eq!(basis.first_change(&basis.clone()), None);
        let other_declarations = print(&[("a", json!(2))], ["r", "s", "o", "k"]);
        assert_ne!(plan_digest(&other_declarations, &basis), base);
    }

    #[test]
    fn digest_ignores_key_order_but_not_values() {
        let a = json!({"id": "x", "config": {"a": 1, "b": [1, 2]}});
        let b: Value = serde_json::from_str(r#"{"config": {"b": [1, 2], "a": 1}, "id": "x"}"#)
            .unwrap_or_default();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(
            digest(&a),
            digest(&json!({"id": "x", "config": {"a": 1, "b": [2, 1]}}))
        );
        assert!(digest(&a).starts_with("sha256:") && digest(&a).len() == 71);
    }

    #[test]
    fn unchanged_has_no_change() {
        let f = print(&[("a", json!(1)), ("b", json!(2))], ["r", "s", "o", "k"]);
        assert_eq!(f.first_change(&f.clone()), None);
        assert_eq!(f.digest(), f.clone().digest());
    }

    #[test]
    fn names_the_first_changed_action() {
        let then = print(
            &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))],
            ["r", "s", "o", "k"],
        );
        let now = print(
            &[("a", json!(1)), ("b", json!(20)), ("c", json!(30))],
            ["r", "s", "o", "k2"],
        );
        assert_ne!(now.digest(), then.digest());
        assert_eq!(
            now.first_change(&then).map(|c| c.to_string()).as_deref(),
            Some("action 1 b was changed")
        );
    }

    #[test]
    fn reorder_removal_addition_and_fields() {
        let then = print(&[("a", json!(1)), ("b", json!(2))], ["r", "s", "o", "k"]);
        let swapped = print(&[("b", json!(2)), ("a", json!(1))], ["r", "s", "o", "k"]);
        assert_eq!(
            swapped
                .first_change(&then)
                .map(|c| c.to_string())
                .as_deref(),
            Some("action 0 a was replaced by another declaration")
        );
        let shorter = print(&[("a", json!(1))], ["r", "s", "o", "k"]);
        assert_eq!(
            shorter
                .first_change(&then)
                .map(|c| c.to_string())
                .as_deref(),
            Some("action 1 b was removed")
        );
        let longer = print(
            &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))],
            ["r", "s", "o", "k"],
        );
        assert_eq!(
            longer.first_change(&then).map(|c| c.to_string()).as_deref(),
            Some("action 2 c was added")
        );
        let store = print(&[("a", json!(1)), ("b", json!(2))], ["r", "s", "o2", "k"]);
        assert_eq!(
            store.first_change(&then),
            Some(Change::Field("objectStore"))
        );
    }
}
