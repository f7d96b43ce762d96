//! Reading openDesk's `migrations-status` ConfigMap (pure): the last migrated release, the
//! recorded footprints and the last stage that ran, or a refusal that names the key it could
//! not read and says how to adopt by hand instead.
//!
//! openDesk does not publish the key layout of the ConfigMap. What its documentation says it
//! holds (`shared/reference/opendesk-automated-migrations.txt`): "the release that was
//! migrated successfully last - recorded in the ConfigMap migrations-status" (line 44), and
//! "the action's footprint - the pair of tag and runMode - is recorded in the history of the
//! ConfigMap migrations-status" (line 56); the two Jobs `migrations-pre` and
//! `migrations-post` (lines 7-8) write it. The reader accepts exactly those facts, under the
//! spellings of the values file (camelCase, as `releaseVersion`, `runMode`, `actionsSkip`) or
//! of the image's Python runner (snake_case, as its action ids), in two layouts:
//!
//! * **one key per fact**: `lastMigratedRelease`, `history` (a YAML or JSON list of entries),
//!   `lastStage` (`pre` or `post`);
//! * **one document**: a single key whose value is a YAML or JSON mapping of those same keys.
//!
//! A history entry holds `tag` (required: only tagged actions leave a footprint), `runMode`,
//! and, where present, `id`, `stage`, `release` and `completedAt`. Anything else — another key,
//! a value of another shape, `binaryData` — is refused, never guessed at.

use std::collections::BTreeMap;

use serde_json::Value;
use stagehand_config::{Release, Stage};

/// The name of openDesk's ConfigMap.
pub const STATUS_CONFIGMAP: &str = "migrations-status";

/// The spellings accepted for the last migrated release.
pub const RELEASE_KEYS: [&str; 2] = ["lastMigratedRelease", "last_migrated_release"];
/// The spellings accepted for the history.
pub const HISTORY_KEYS: [&str; 1] = ["history"];
/// The spellings accepted for the last stage that ran.
pub const STAGE_KEYS: [&str; 2] = ["lastStage", "last_stage"];

/// How to adopt without the ConfigMap, appended to every refusal.
pub const BY_HAND: &str = "To adopt by hand instead, read the ConfigMap yourself and pass the last migrated release and every recorded footprint: stagehand import-opendesk --values FILE --installed-release vX.Y.Z --footprint [stage:]id:tag:runMode ... (docs/adopting-opendesk.md)";

/// Why the ConfigMap is not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusRefusal {
    /// A key of the layout this reader does not know.
    #[error(
        "cannot read key {key:?} of the migrations-status ConfigMap: it is not one of the keys this import understands ({known}). Nothing was imported. {BY_HAND}"
    )]
    UnknownKey {
        /// The key (a dotted path inside a document or a history entry).
        key: String,
        /// The keys understood there.
        known: String,
    },
    /// A known key whose value has another shape.
    #[error(
        "cannot read key {key:?} of the migrations-status ConfigMap: {why}. Nothing was imported. {BY_HAND}"
    )]
    BadValue {
        /// The key (a dotted path).
        key: String,
        /// What is wrong.
        why: String,
    },
    /// Nothing in it.
    #[error(
        "the migrations-status ConfigMap has no data: nothing records a migrated release. A fresh installation needs no import; otherwise {BY_HAND}"
    )]
    Empty,
    /// Footprints or a stage but no release.
    #[error(
        "the migrations-status ConfigMap records no last migrated release (none of {keys}), so which release the deployment runs cannot be told from it. Pass it with --installed-release vX.Y.Z (the release the deployment runs now) together with the ConfigMap. {BY_HAND}"
    )]
    NoRelease {
        /// The keys looked for.
        keys: String,
    },
    /// The last stage that ran is `pre`, no `post` after it, and that pre stage is not the
    /// release being imported's.
    #[error(
        "the migrations-status ConfigMap says the last stage that ran was pre (key {key:?}) and no post ran after it, and {why}: an upgrade was interrupted between migrations-pre and migrations-post. Finish it with openDesk's Jobs first (deploy the release again until migrations-post succeeds), or repair it by hand (docs/runbook.md), then export the ConfigMap again. If you know the pre stage's work is complete and want Stagehand to run the post stage, pass --accept-interrupted. (A pre stage whose recorded work carries the tag of the release being imported is that release's migrations-pre run alone, openDesk's review, and is imported without it.)"
    )]
    Interrupted {
        /// The key that says so.
        key: String,
        /// Why the pre stage is not the release being imported's.
        why: String,
    },
}

/// One history entry as the ConfigMap recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEntry {
    /// Its position in the history.
    pub index: usize,
    /// The action id, where recorded.
    pub id: Option<String>,
    /// The stage, where recorded.
    pub stage: Option<Stage>,
    /// The tag.
    pub tag: String,
    /// The runMode (`None`: declared without one).
    pub run_mode: Option<String>,
    /// The release whose migration ran it, where recorded.
    pub release: Option<String>,
    /// When it completed, where recorded.
    pub completed_at: Option<String>,
}

/// What the ConfigMap records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedStatus {
    /// The last migrated release (normalized `vX.Y.Z`).
    pub last_migrated_release: Option<Release>,
    /// The last stage that ran, when recorded.
    pub last_stage: Option<Stage>,
    /// The history, in order.
    pub history: Vec<RecordedEntry>,
    /// Which layout it was read in (for the report).
    pub layout: Layout,
}

/// The layouts accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// One key per fact.
    #[default]
    KeyPerFact,
    /// One key holding a document.
    Document,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::KeyPerFact => "one key per fact",
            Layout::Document => "one document",
        })
    }
}

fn known_top() -> String {
    RELEASE_KEYS
        .iter()
        .chain(&HISTORY_KEYS)
        .chain(&STAGE_KEYS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_known_top(key: &str) -> bool {
    RELEASE_KEYS.contains(&key) || HISTORY_KEYS.contains(&key) || STAGE_KEYS.contains(&key)
}

/// Reads the `.data` of a `migrations-status` ConfigMap; `binary_keys` are the keys of its
/// `.binaryData`, which is never understood. Does not judge an interrupted upgrade (see
/// [`check_interrupted`]).
pub fn read(
    data: &BTreeMap<String, String>,
    binary_keys: &[String],
) -> Result<RecordedStatus, StatusRefusal> {
    if let Some(key) = binary_keys.first() {
        return Err(StatusRefusal::UnknownKey {
            key: format!("binaryData.{key}"),
            known: known_top(),
        });
    }
    if data.is_empty() {
        return Err(StatusRefusal::Empty);
    }
    let (fields, layout, prefix): (BTreeMap<String, Value>, Layout, String) =
        if data.keys().all(|k| is_known_top(k)) {
            let fields = data
                .iter()
                .map(|(k, v)| {
                    let value = if HISTORY_KEYS.contains(&k.as_str()) {
                        parse_yaml(k, v)?
                    } else {
                        Value::String(v.clone())
                    };
                    Ok((k.clone(), value))
                })
                .collect::<Result<_, StatusRefusal>>()?;
            (fields, Layout::KeyPerFact, String::new())
        } else if data.len() == 1 {
            let (key, text) = data.iter().next().ok_or(StatusRefusal::Empty)?;
            match parse_yaml(key, text) {
                Ok(Value::Object(map)) => (
                    map.into_iter().collect(),
                    Layout::Document,
                    format!("{key}."),
                ),
                _ => {
                    return Err(StatusRefusal::UnknownKey {
                        key: key.clone(),
                        known: format!(
                            "{}, or a single key holding a YAML mapping of them",
                            known_top()
                        ),
                    });
                }
            }
        } else {
            let key = data
                .keys()
                .find(|k| !is_known_top(k))
                .cloned()
                .unwrap_or_default();
            return Err(StatusRefusal::UnknownKey {
                key,
                known: known_top(),
            });
        };
    let mut out = RecordedStatus {
        layout,
        ..RecordedStatus::default()
    };
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for (key, value) in &fields {
        let path = format!("{prefix}{key}");
        let fact = if RELEASE_KEYS.contains(&key.as_str()) {
            "release"
        } else if HISTORY_KEYS.contains(&key.as_str()) {
            "history"
        } else if STAGE_KEYS.contains(&key.as_str()) {
            "stage"
        } else {
            return Err(StatusRefusal::UnknownKey {
                key: path,
                known: known_top(),
            });
        };
        if let Some(other) = seen.insert(fact, path.clone()) {
            return Err(StatusRefusal::BadValue {
                key: path,
                why: format!("it says the same as {other:?}; which one holds cannot be told"),
            });
        }
        match fact {
            "release" => {
                let text = as_text(value, &path)?;
                let release = Release::parse(&text).map_err(|e| StatusRefusal::BadValue {
                    key: path.clone(),
                    why: format!("{text:?} is not a release: {e}"),
                })?;
                out.last_migrated_release = Some(release);
            }
            "stage" => {
                let text = as_text(value, &path)?;
                out.last_stage = Some(stage_of(&text).ok_or_else(|| StatusRefusal::BadValue {
                    key: path.clone(),
                    why: format!("{text:?} is not a stage (pre or post)"),
                })?);
            }
            _ => out.history = read_history(value, &path)?,
        }
    }
    Ok(out)
}

/// The release an import is for, as its values declare it: what the work a pre stage recorded
/// must carry for that pre stage to be this release's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Importing {
    /// The values' `releaseVersion`.
    pub release: Option<Release>,
    /// The tags of the values' pre-stage declarations.
    pub pre_tags: Vec<String>,
}

impl Importing {
    /// Read from openDesk's values (the rendered helmfile values or the `migrations:` block);
    /// nothing when the block cannot be found (the import reports that itself).
    pub fn from_values(doc: &Value) -> Self {
        let Ok(block) = super::values::locate(doc) else {
            return Self::default();
        };
        let release = block
            .map
            .get("releaseVersion")
            .and_then(Value::as_str)
            .and_then(|r| Release::parse(r).ok());
        let pre_tags = block
            .map
            .get("actions")
            .and_then(|a| a.get("pre"))
            .and_then(Value::as_array)
            .map(|pre| {
                pre.iter()
                    .filter_map(|d| d.get("tag").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Self { release, pre_tags }
    }
}

/// Whose pre stage a status records as its last stage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LastPre {
    /// The last stage is not `pre`.
    #[default]
    NotPre,
    /// The pre stage of the release being imported, run alone (openDesk's review: deploy
    /// `migrations-pre` alone, then the whole upgrade): every history entry newer than the last
    /// migrated release (not recorded as post) carries that release (its `release`, else its
    /// tag is the release's or a tag its pre stage declares). Not an interrupted upgrade.
    Importing {
        /// The release being imported.
        release: Release,
        /// The positions of those entries in the history.
        entries: Vec<usize>,
    },
    /// An older release's pre stage, or whose cannot be told: an interrupted upgrade. Says why.
    Interrupted(String),
}

/// Whose pre stage `status` ends with (pure): the ConfigMap names no release for it, so it is
/// told from the work it recorded (see [`LastPre::Importing`]).
pub fn last_pre(status: &RecordedStatus, importing: &Importing) -> LastPre {
    if status.last_stage != Some(Stage::Pre) {
        return LastPre::NotPre;
    }
    let Some(current) = &importing.release else {
        return LastPre::Interrupted(
            "the values name no releaseVersion, so whose pre stage it was cannot be told".into(),
        );
    };
    let last = status.last_migrated_release.as_ref();
    let owner = |e: &RecordedEntry| {
        e.release
            .as_deref()
            .and_then(|r| Release::parse(r).ok())
            .or_else(|| Release::parse(&e.tag).ok())
    };
    let work: Vec<(&RecordedEntry, Release)> = status
        .history
        .iter()
        .filter(|e| e.stage != Some(Stage::Post))
        .filter_map(|e| owner(e).map(|r| (e, r)))
        .filter(|(_, r)| last.is_none_or(|l| r > l))
        .collect();
    if work.is_empty() {
        return LastPre::Interrupted(format!(
            "no history entry newer than the last migrated release {} records what that pre stage did, so whose pre stage it was cannot be told",
            last.map_or_else(|| "(none)".to_string(), ToString::to_string)
        ));
    }
    for (e, r) in &work {
        let ours = match &e.release {
            Some(_) => r == current,
            None => r == current || importing.pre_tags.contains(&e.tag),
        };
        if !ours {
            let (what, value) = match &e.release {
                Some(release) => ("release", release.as_str()),
                None => ("tag", e.tag.as_str()),
            };
            return LastPre::Interrupted(format!(
                "its recorded pre-stage work history[{}] ({}) carries {what} {value}, not the release being imported ({current}) nor a tag its pre stage declares",
                e.index,
                e.id.as_deref().unwrap_or("no id"),
            ));
        }
    }
    LastPre::Importing {
        release: current.clone(),
        entries: work.iter().map(|(e, _)| e.index).collect(),
    }
}

/// Refuses a status whose last stage is `pre` of another release than the one imported (an
/// upgrade interrupted between the two Jobs), unless `accept` is given; says whose pre stage
/// it is.
pub fn check_interrupted(
    status: &RecordedStatus,
    accept: bool,
    importing: &Importing,
) -> Result<LastPre, StatusRefusal> {
    let owner = last_pre(status, importing);
    if let LastPre::Interrupted(why) = &owner
        && !accept
    {
        let key = match status.layout {
            Layout::KeyPerFact => STAGE_KEYS[0].to_string(),
            Layout::Document => format!("<document>.{}", STAGE_KEYS[0]),
        };
        return Err(StatusRefusal::Interrupted {
            key,
            why: why.clone(),
        });
    }
    Ok(owner)
}

fn parse_yaml(key: &str, text: &str) -> Result<Value, StatusRefusal> {
    let yaml: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| StatusRefusal::BadValue {
            key: key.to_string(),
            why: format!("not YAML or JSON ({e})"),
        })?;
    serde_json::to_value(yaml).map_err(|e| StatusRefusal::BadValue {
        key: key.to_string(),
        why: format!("cannot be read as data ({e})"),
    })
}

fn as_text(value: &Value, path: &str) -> Result<String, StatusRefusal> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        other => Err(StatusRefusal::BadValue {
            key: path.to_string(),
            why: format!("expected a non-empty string, found {other}"),
        }),
    }
}

/// `pre`/`post`, also as the Jobs are named (`migrations-pre`, `migrations-post`).
fn stage_of(text: &str) -> Option<Stage> {
    match text {
        "pre" | "migrations-pre" => Some(Stage::Pre),
        "post" | "migrations-post" => Some(Stage::Post),
        _ => None,
    }
}

const ENTRY_KEYS: [&str; 8] = [
    "id",
    "stage",
    "tag",
    "runMode",
    "run_mode",
    "release",
    "completedAt",
    "completed_at",
];

fn read_history(value: &Value, path: &str) -> Result<Vec<RecordedEntry>, StatusRefusal> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(StatusRefusal::BadValue {
                key: path.to_string(),
                why: format!("expected a list of entries, found {other}"),
            });
        }
    };
    let known = ENTRY_KEYS.join(", ");
    let mut out = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = format!("{path}[{index}]");
        let Value::Object(map) = item else {
            return Err(StatusRefusal::BadValue {
                key: at,
                why: format!("expected a mapping with tag and runMode, found {item}"),
            });
        };
        if let Some(key) = map.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
            return Err(StatusRefusal::UnknownKey {
                key: format!("{at}.{key}"),
                known: known.clone(),
            });
        }
        let text = |keys: &[&str]| -> Result<Option<String>, StatusRefusal> {
            let mut found = None;
            for key in keys {
                match map.get(*key) {
                    None | Some(Value::Null) => {}
                    Some(Value::String(s)) => {
                        if found.is_some() {
                            return Err(StatusRefusal::BadValue {
                                key: format!("{at}.{key}"),
                                why: format!("given twice (as {})", keys.join(" and ")),
                            });
                        }
                        found = Some(s.clone());
                    }
                    Some(other) => {
                        return Err(StatusRefusal::BadValue {
                            key: format!("{at}.{key}"),
                            why: format!(
                                "expected a string, found {other} (an unquoted version is a YAML number)"
                            ),
                        });
                    }
                }
            }
            Ok(found)
        };
        let tag = text(&["tag"])?
            .filter(|t| !t.is_empty())
            .ok_or_else(|| StatusRefusal::BadValue {
                key: format!("{at}.tag"),
                why: "the entry has no tag: only a tagged action leaves a footprint (its tag and runMode)".into(),
            })?;
        let stage = match text(&["stage"])? {
            None => None,
            Some(s) => Some(stage_of(&s).ok_or_else(|| StatusRefusal::BadValue {
                key: format!("{at}.stage"),
                why: format!("{s:?} is not a stage (pre or post)"),
            })?),
        };
        out.push(RecordedEntry {
            index,
            id: text(&["id"])?.filter(|s| !s.is_empty()),
            stage,
            tag,
            run_mode: text(&["runMode", "run_mode"])?.filter(|s| !s.is_empty()),
            release: text(&["release"])?,
            completed_at: text(&["completedAt", "completed_at"])?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const HISTORY: &str = r#"
- {id: workload_scale, stage: pre, tag: "v1.18.0"}
- {id: ldap_entryuuid_to_object_identifier, stage: pre, tag: "v1.18.0", runMode: apply, release: "v1.18.0", completedAt: "2026-01-01T00:00:00Z"}
- {tag: "v1.17.0", runMode: default}
"#;

    #[test]
    fn key_per_fact_is_read() {
        let s = read(
            &data(&[
                ("lastMigratedRelease", "v1.17.3"),
                ("history", HISTORY),
                ("lastStage", "post"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(s.layout, Layout::KeyPerFact);
        assert_eq!(
            s.last_migrated_release.clone().unwrap().to_string(),
            "v1.17.3"
        );
        assert_eq!(s.last_stage, Some(Stage::Post));
        assert_eq!(s.history.len(), 3);
        assert_eq!(s.history[0].run_mode, None);
        assert_eq!(s.history[1].run_mode.as_deref(), Some("apply"));
        assert_eq!(
            s.history[1].completed_at.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(s.history[2].id, None);
        assert_eq!(s.history[2].stage, None);
        assert_eq!(
            check_interrupted(&s, false, &Importing::default()),
            Ok(LastPre::NotPre)
        );
    }

    #[test]
    fn snake_case_and_a_document_are_read() {
        let s = read(
            &data(&[
                ("last_migrated_release", "1.17.3"),
                ("last_stage", "migrations-post"),
                (
                    "history",
                    r#"[{"id":"x","stage":"migrations-pre","tag":"t","run_mode":"apply"}]"#,
                ),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(s.history[0].stage, Some(Stage::Pre));
        assert_eq!(s.history[0].run_mode.as_deref(), Some("apply"));
        let doc = format!(
            "lastMigratedRelease: v1.17.3\nlastStage: post\nhistory:\n{}",
            HISTORY.replace("\n-", "\n  -")
        );
        let s = read(&data(&[("status.yaml", &doc)]), &[]).unwrap();
        assert_eq!(s.layout, Layout::Document);
        assert_eq!(s.history.len(), 3);
    }

    #[test]
    fn what_is_not_understood_is_refused_naming_the_key() {
        let refused = |d: BTreeMap<String, String>| read(&d, &[]).unwrap_err();
        let (unknown, bad) = (true, false);
        let v = "v1.17.3";
        let h = |history| vec![("lastMigratedRelease", v), ("history", history)];
        let document = "lastMigratedRelease: v1.17.3\nrun: 3\n";
        for (entries, is_unknown, expected_key) in [
            (
                vec![("lastMigratedRelease", v), ("migrations", "x")],
                unknown,
                "migrations",
            ),
            (vec![("run_3", "done")], unknown, "run_3"),
            (
                vec![("lastMigratedRelease", "latest")],
                bad,
                "lastMigratedRelease",
            ),
            (
                h("- {id: x, tag: t, when: yesterday}"),
                unknown,
                "history[0].when",
            ),
            (h("- {id: x}"), bad, "history[0].tag"),
            (h("- {tag: 1.18}"), bad, "history[0].tag"),
            (h("x: 1"), bad, "history"),
            (
                vec![("lastStage", "mid"), ("lastMigratedRelease", v)],
                bad,
                "lastStage",
            ),
            (vec![("notes", "just text")], unknown, "notes"),
            (vec![("status.yaml", document)], unknown, "status.yaml.run"),
        ] {
            let e = refused(data(&entries));
            let key = match &e {
                StatusRefusal::UnknownKey { key, .. } if is_unknown => key,
                StatusRefusal::BadValue { key, .. } if !is_unknown => key,
                other => panic!("{entries:?}: {other:?}"),
            };
            assert_eq!(key, expected_key, "{e}");
            assert!(e.to_string().contains("--footprint"), "{e}");
            assert!(e.to_string().contains("--installed-release"), "{e}");
        }
        assert_eq!(
            read(&data(&[("lastStage", "post")]), &[])
                .unwrap()
                .last_migrated_release,
            None
        );
        let e = refused(data(&[
            ("lastMigratedRelease", v),
            ("last_migrated_release", v),
        ]));
        assert!(matches!(e, StatusRefusal::BadValue { .. }));
        assert_eq!(refused(BTreeMap::new()), StatusRefusal::Empty);
        let e = read(
            &data(&[("lastMigratedRelease", "v1.17.3")]),
            &["blob".into()],
        )
        .unwrap_err();
        assert!(matches!(&e, StatusRefusal::UnknownKey { key, .. } if key == "binaryData.blob"));
    }

    #[test]
    fn an_interrupted_upgrade_is_refused_unless_accepted() {
        let s = read(
            &data(&[("lastMigratedRelease", "v1.17.3"), ("lastStage", "pre")]),
            &[],
        )
        .unwrap();
        let v119 = Importing {
            release: Release::parse("v1.19.0").ok(),
            pre_tags: vec!["v1.19.0".into()],
        };
        let e = check_interrupted(&s, false, &v119).unwrap_err();
        assert!(matches!(e, StatusRefusal::Interrupted { .. }));
        assert!(e.to_string().contains("--accept-interrupted"));
        assert!(
            e.to_string()
                .contains("no history entry newer than the last migrated release v1.17.3"),
            "{e}"
        );
        assert!(check_interrupted(&s, true, &v119).is_ok());
    }

    /// openDesk's review: `migrations-pre` of the release being imported ran alone. Its work
    /// carries that release's tag (no release is recorded for the pre stage); work of an older
    /// release's pre stage is an interrupted upgrade.
    #[test]
    fn a_pre_stage_of_the_release_imported_is_no_interrupted_upgrade() {
        let status = |history: &str| {
            read(
                &data(&[
                    ("lastMigratedRelease", "v1.18.2"),
                    ("lastStage", "pre"),
                    ("history", history),
                ]),
                &[],
            )
            .unwrap()
        };
        let v1191 = Importing {
            release: Release::parse("v1.19.1").ok(),
            pre_tags: vec!["v1.19.0".into()],
        };
        let review = status(
            r#"
- {id: ldap_entryuuid_to_object_identifier, stage: pre, tag: "v1.18.0", runMode: apply}
- {id: synapse_deactivate_orphaned_users, stage: pre, tag: "v1.19.0", runMode: dry-run}
- {id: configmap_create, tag: "v1.19.0", runMode: apply}
"#,
        );
        assert_eq!(
            check_interrupted(&review, false, &v1191),
            Ok(LastPre::Importing {
                release: Release::parse("v1.19.1").unwrap(),
                entries: vec![1, 2]
            }),
            "a tag the imported pre stage declares (v1.19.0 of v1.19.1), the v1.18.0 entry migrated"
        );
        // The same ConfigMap imported with the v1.20.0 values, which declare no v1.19.0 action.
        let v120 = Importing {
            release: Release::parse("v1.20.0").ok(),
            pre_tags: vec!["v1.20.0".into()],
        };
        let e = check_interrupted(&review, false, &v120).unwrap_err();
        assert!(
            e.to_string().contains("history[1] (synapse_deactivate_orphaned_users) carries tag v1.19.0, not the release being imported (v1.20.0)"),
            "{e}"
        );
        // A recorded release wins over the tag.
        let older =
            status(r#"- {id: configmap_create, stage: pre, tag: "v1.19.0", release: "v1.19.0"}"#);
        let e = check_interrupted(&older, false, &v1191).unwrap_err();
        assert!(e.to_string().contains("carries release v1.19.0"), "{e}");
        assert!(matches!(
            check_interrupted(&older, true, &v1191),
            Ok(LastPre::Interrupted(_))
        ));
    }
}
