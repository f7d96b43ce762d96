//! The history ledger's format (pure): the ConfigMap data that is the record of truth of a
//! deployment's footprints and last migrated release (docs/api.md, "The history ledger").
//!
//! ```text
//! format: stagehand.dev/history/v1
//! lastMigratedRelease: v1.18.0                      (once a post run succeeded)
//! footprint.<stage>.<id>.<tag>.<runMode>: {"stage":"pre","id":...,"tag":...,"runMode":...,
//!                                          "release":...,"runName":...,"completedAt":...}
//! ```
//!
//! Parsing is strict: a ledger with `format` missing or unknown, a footprint value that is not
//! such an object, or a key outside this scheme is malformed, and the operator never rewrites
//! a malformed ledger.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};
use stagehand_config::{Footprint, Release, Stage};
use stagehand_crds::unversioned::{HistoryEntry, MigrationStatus};

/// The `format` value of this version of the ledger.
pub const FORMAT: &str = "stagehand.dev/history/v1";
/// The key of the format.
pub const FORMAT_KEY: &str = "format";
/// The key of the last migrated release.
pub const RELEASE_KEY: &str = "lastMigratedRelease";
/// The prefix of every footprint key.
pub const FOOTPRINT_PREFIX: &str = "footprint.";

/// The name of a Migration's ledger: `spec.historyConfigMap`, or `<migration>-history`.
pub fn ledger_name(migration: &str, explicit: Option<&str>) -> String {
    explicit
        .filter(|n| !n.is_empty())
        .map_or_else(|| format!("{migration}-history"), str::to_string)
}

/// What is wrong with a ledger's data; the ledger is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// `format` is missing.
    #[error("it has no key {FORMAT_KEY:?} (expected {FORMAT:?})")]
    NoFormat,
    /// `format` is another version.
    #[error("its format is {0:?}, which this Stagehand does not read (it reads {FORMAT:?})")]
    UnknownFormat(String),
    /// A key outside the scheme.
    #[error(
        "key {0:?} is not part of the format (expected {FORMAT_KEY}, {RELEASE_KEY} or footprint.<stage>.<id>.<tag>.<runMode>)"
    )]
    UnknownKey(String),
    /// A footprint value that is not a footprint object.
    #[error("the value of {key:?} is not a footprint object: {why}")]
    BadFootprint {
        /// The key.
        key: String,
        /// What is wrong.
        why: String,
    },
    /// `lastMigratedRelease` is not a release.
    #[error("{RELEASE_KEY} {0:?} is not a release")]
    BadRelease(String),
}

/// A ledger's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    /// The last migrated release, once a post run succeeded.
    pub last_migrated_release: Option<String>,
    /// Every footprint, by key.
    pub footprints: BTreeMap<String, HistoryEntry>,
}

impl Ledger {
    /// Reads a ledger's ConfigMap data.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, LedgerError> {
        match data.get(FORMAT_KEY) {
            None => return Err(LedgerError::NoFormat),
            Some(f) if f != FORMAT => return Err(LedgerError::UnknownFormat(f.clone())),
            Some(_) => {}
        }
        let mut out = Ledger::default();
        for (key, value) in data {
            if key == FORMAT_KEY {
                continue;
            }
            if key == RELEASE_KEY {
                if Release::parse(value).is_err() {
                    return Err(LedgerError::BadRelease(value.clone()));
                }
                out.last_migrated_release = Some(value.clone());
                continue;
            }
            if !key.starts_with(FOOTPRINT_PREFIX) {
                return Err(LedgerError::UnknownKey(key.clone()));
            }
            let entry = parse_footprint(value).map_err(|why| LedgerError::BadFootprint {
                key: key.clone(),
                why,
            })?;
            out.footprints.insert(key.clone(), entry);
        }
        Ok(out)
    }

    /// The ConfigMap data of this ledger.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        data.insert(FORMAT_KEY.to_string(), FORMAT.to_string());
        if let Some(release) = &self.last_migrated_release {
            data.insert(RELEASE_KEY.to_string(), release.clone());
        }
        for (key, entry) in &self.footprints {
            data.insert(key.clone(), footprint_value(entry));
        }
        data
    }

    /// A ledger written from what a Migration's status recorded (a Migration created before
    /// the ledger existed): its footprints (tagged ones with a stage) and last migrated release.
    pub fn from_status(status: &MigrationStatus) -> Self {
        let mut out = Ledger {
            last_migrated_release: status
                .last_migrated_release
                .clone()
                .filter(|r| !r.is_empty()),
            footprints: BTreeMap::new(),
        };
        for entry in &status.history {
            out.record(entry.clone());
        }
        out
    }

    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.last_migrated_release.is_none() && self.footprints.is_empty()
    }

    /// Records a footprint unless the same footprint is recorded; returns whether it added
    /// it. Entries without a stage cannot be keyed and are left out.
    pub fn record(&mut self, entry: HistoryEntry) -> bool {
        let Some(print) = footprint_of(&entry) else {
            return false;
        };
        if self.contains(&print) {
            return false;
        }
        let base = footprint_key(&print);
        let mut key = base.clone();
        let mut n = 2;
        while self.footprints.contains_key(&key) {
            key = format!("{base}.{n}");
            n += 1;
        }
        self.footprints.insert(key, entry);
        true
    }

    /// Whether `print` is recorded.
    pub fn contains(&self, print: &Footprint) -> bool {
        self.footprints
            .values()
            .filter_map(footprint_of)
            .any(|f| &f == print)
    }

    /// The recorded footprints, in key order.
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.footprints.values().cloned().collect()
    }

    /// Writes this ledger into a Migration's status. The mirror never drops anything the
    /// status holds:
    /// - `history` becomes the union of both: the ledger's entries (in key order), then every
    ///   entry of the status whose footprint ([`footprint_of`]: stage, id, tag, runMode) the
    ///   ledger lacks, in the status's order — entries without a stage, which the ledger cannot
    ///   key, included. For the same footprint the ledger's entry wins.
    /// - `lastMigratedRelease` becomes the ledger's; a ledger with none leaves the status's.
    ///
    /// Mirroring twice changes nothing more than mirroring once.
    pub fn mirror_into(&self, status: &mut MigrationStatus) {
        let recorded: HashSet<Footprint> = self.prints().into_iter().collect();
        let kept = std::mem::take(&mut status.history)
            .into_iter()
            .filter(|entry| footprint_of(entry).is_none_or(|print| !recorded.contains(&print)));
        status.history = self.history().into_iter().chain(kept).collect();
        if let Some(release) = &self.last_migrated_release {
            status.last_migrated_release = Some(release.clone());
        }
    }

    /// The footprints as the planner sees them.
    pub fn prints(&self) -> Vec<Footprint> {
        self.footprints.values().filter_map(footprint_of).collect()
    }
}

/// The footprint identity of a history entry (the one place it is compared:
/// [`stagehand_config::Footprint`]'s equality).
pub fn footprint_of(entry: &HistoryEntry) -> Option<Footprint> {
    Some(Footprint {
        stage: entry.stage?,
        id: entry.id.clone(),
        tag: entry.tag.clone(),
        run_mode: entry.run_mode.clone(),
    })
}

/// `footprint.<stage>.<id>.<tag>.<runMode>`, each part limited to the characters a ConfigMap
/// key allows (others written as `_xHH`).
pub fn footprint_key(print: &Footprint) -> String {
    let part = |s: Option<&str>| -> String {
        let mut out = String::new();
        for byte in s.unwrap_or_default().bytes() {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.') {
                out.push(char::from(byte));
            } else {
                out.push_str(&format!("_x{byte:02X}"));
            }
        }
        out
    };
    format!(
        "{FOOTPRINT_PREFIX}{}.{}.{}.{}",
        print.stage,
        part(Some(&print.id)),
        part(print.tag.as_deref()),
        part(print.run_mode.as_deref())
    )
}

fn footprint_value(entry: &HistoryEntry) -> String {
    let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
    let mut map = Map::new();
    map.insert(
        "stage".into(),
        entry
            .stage
            .map_or(Value::Null, |s| Value::String(s.to_string())),
    );
    map.insert("id".into(), Value::String(entry.id.clone()));
    map.insert("tag".into(), text(&entry.tag));
    map.insert("runMode".into(), text(&entry.run_mode));
    map.insert("release".into(), text(&entry.release));
    map.insert("runName".into(), text(&entry.run_name));
    map.insert("completedAt".into(), text(&entry.completed_at));
    Value::Object(map).to_string()
}

const FOOTPRINT_KEYS: [&str; 7] = [
    "stage",
    "id",
    "tag",
    "runMode",
    "release",
    "runName",
    "completedAt",
];

fn parse_footprint(value: &str) -> Result<HistoryEntry, String> {
    let parsed: Value = serde_json::from_str(value).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(map) = parsed else {
        return Err("not a JSON object".into());
    };
    if let Some(key) = map.keys().find(|k| !FOOTPRINT_KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key {key:?}"));
    }
    let text = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(format!("{key} must be a string, not {other}")),
        }
    };
    let stage = match text("stage")?.as_deref() {
        Some("pre") => Stage::Pre,
        Some("post") => Stage::Post,
        other => return Err(format!("stage must be pre or post, not {other:?}")),
    };
    let id = text("id")?
        .filter(|s| !s.is_empty())
        .ok_or("id is missing")?;
    let tag = text("tag")?
        .filter(|s| !s.is_empty())
        .ok_or("tag is missing")?;
    Ok(HistoryEntry {
        stage: Some(stage),
        id,
        tag: Some(tag),
        run_mode: text("runMode")?,
        release: text("release")?,
        run_name: text("runName")?,
        completed_at: text("completedAt")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stage: Stage, id: &str, tag: &str, mode: Option<&str>) -> HistoryEntry {
        HistoryEntry {
            stage: Some(stage),
            id: id.into(),
            tag: Some(tag.into()),
            run_mode: mode.map(str::to_string),
            release: Some("v1.18.0".into()),
            run_name: Some("pre".into()),
            completed_at: Some("2026-12-01T00:00:00Z".into()),
        }
    }

    #[test]
    fn round_trips_with_the_documented_keys() {
        let mut ledger = Ledger::default();
        assert!(ledger.record(entry(
            Stage::Pre,
            "ldap_entryuuid_to_object_identifier",
            "v1.18.0",
            Some("apply")
        )));
        assert!(
            !ledger.record(entry(
                Stage::Pre,
                "ldap_entryuuid_to_object_identifier",
                "v1.18.0",
                Some("apply")
            )),
            "once"
        );
        assert!(
            ledger.record(entry(
                Stage::Pre,
                "ldap_entryuuid_to_object_identifier",
                "v1.18.0",
                None
            )),
            "another runMode is another footprint"
        );
        ledger.last_migrated_release = Some("v1.18.0".into());
        let data = ledger.to_data();
        assert_eq!(data["format"], FORMAT);
        assert_eq!(data["lastMigratedRelease"], "v1.18.0");
        let value: Value = serde_json::from_str(
            &data["footprint.pre.ldap_entryuuid_to_object_identifier.v1.18.0.apply"],
        )
        .unwrap_or_default();
        assert_eq!(value["runMode"], "apply");
        assert_eq!(value["runName"], "pre");
        assert!(data.contains_key("footprint.pre.ldap_entryuuid_to_object_identifier.v1.18.0."));
        assert_eq!(Ledger::parse(&data), Ok(ledger));
    }

    #[test]
    fn odd_characters_are_escaped_in_keys() {
        let print = Footprint {
            stage: Stage::Post,
            id: "x".into(),
            tag: Some("v1 / 2".into()),
            run_mode: Some("a:b".into()),
        };
        assert_eq!(
            footprint_key(&print),
            "footprint.post.x.v1_x20_x2F_x202.a_x3Ab"
        );
    }

    #[test]
    fn malformed_ledgers_are_refused() {
        let good = Ledger::default().to_data();
        assert_eq!(Ledger::parse(&good), Ok(Ledger::default()));
        let mut data = good.clone();
        data.remove("format");
        assert_eq!(Ledger::parse(&data), Err(LedgerError::NoFormat));
        let mut data = good.clone();
        data.insert("format".into(), "stagehand.dev/history/v9".into());
        assert!(matches!(
            Ledger::parse(&data),
            Err(LedgerError::UnknownFormat(_))
        ));
        let mut data = good.clone();
        data.insert("notes".into(), "x".into());
        assert_eq!(
            Ledger::parse(&data),
            Err(LedgerError::UnknownKey("notes".into()))
        );
        for bad in [
            "[]",
            "nope",
            r#"{"stage":"mid","id":"x","tag":"t"}"#,
            r#"{"stage":"pre","tag":"t"}"#,
            r#"{"stage":"pre","id":"x","tag":"t","extra":1}"#,
            r#"{"stage":"pre","id":"x","tag":"t","runMode":3}"#,
        ] {
            let mut data = good.clone();
            data.insert("footprint.pre.x.t.".into(), bad.into());
            assert!(
                matches!(Ledger::parse(&data), Err(LedgerError::BadFootprint { .. })),
                "{bad}"
            );
        }
        let mut data = good;
        data.insert("lastMigratedRelease".into(), "latest".into());
        assert!(matches!(
            Ledger::parse(&data),
            Err(LedgerError::BadRelease(_))
        ));
    }

    #[test]
    fn from_status_keeps_every_footprint_and_the_release() {
        let status = MigrationStatus {
            last_migrated_release: Some("v1.17.3".into()),
            history: vec![
                entry(Stage::Pre, "a", "v1.18.0", Some("apply")),
                entry(Stage::Post, "b", "v1.18.0", None),
                HistoryEntry {
                    stage: None,
                    id: "legacy".into(),
                    ..HistoryEntry::default()
                },
            ],
            ..MigrationStatus::default()
        };
        let ledger = Ledger::from_status(&status);
        assert_eq!(ledger.last_migrated_release.as_deref(), Some("v1.17.3"));
        assert_eq!(ledger.footprints.len(), 2);
        assert!(ledger.contains(&Footprint {
            stage: Stage::Post,
            id: "b".into(),
            tag: Some("v1.18.0".into()),
            run_mode: None
        }));
        assert!(!Ledger::default().contains(&Footprint {
            stage: Stage::Post,
            id: "b".into(),
            tag: Some("v1.18.0".into()),
            run_mode: None
        }));
    }

    #[test]
    fn the_mirror_keeps_what_the_status_holds_and_the_ledger_lacks() {
        let legacy = HistoryEntry {
            stage: None,
            id: "legacy".into(),
            ..HistoryEntry::default()
        };
        let only_in_status = entry(Stage::Pre, "a", "v1.17.0", Some("apply"));
        let mut in_status = entry(Stage::Post, "b", "v1.18.0", None);
        in_status.run_name = Some("as the status has it".into());
        let mut status = MigrationStatus {
            last_migrated_release: Some("v1.17.3".into()),
            history: vec![only_in_status.clone(), in_status, legacy.clone()],
            ..MigrationStatus::default()
        };
        let mut ledger = Ledger::default();
        let in_ledger = entry(Stage::Post, "b", "v1.18.0", None);
        let only_in_ledger = entry(Stage::Pre, "c", "v1.18.0", None);
        ledger.record(in_ledger.clone());
        ledger.record(only_in_ledger.clone());

        // A ledger without a release leaves the status's.
        ledger.mirror_into(&mut status);
        let union = vec![in_ledger, only_in_ledger, only_in_status, legacy];
        assert_eq!(
            status.history, union,
            "the ledger's first, then the status's own"
        );
        assert_eq!(status.last_migrated_release.as_deref(), Some("v1.17.3"));

        ledger.mirror_into(&mut status);
        assert_eq!(status.history, union, "mirroring again changes nothing");

        ledger.last_migrated_release = Some("v1.18.0".into());
        ledger.mirror_into(&mut status);
        assert_eq!(status.last_migrated_release.as_deref(), Some("v1.18.0"));

        // An empty ledger (gone, or not written yet) clears nothing.
        let before = status.clone();
        Ledger::default().mirror_into(&mut status);
        assert_eq!(status, before);
    }

    #[test]
    fn a_status_without_keyable_history_seeds_nothing() {
        assert!(Ledger::from_status(&MigrationStatus::default()).is_empty());
        let status = MigrationStatus {
            last_migrated_release: Some(String::new()),
            history: vec![HistoryEntry {
                stage: None,
                id: "legacy".into(),
                ..HistoryEntry::default()
            }],
            ..MigrationStatus::default()
        };
        assert!(Ledger::from_status(&status).is_empty());
    }
}
