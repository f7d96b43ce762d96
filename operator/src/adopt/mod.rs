//! Adopting a running openDesk deployment (SPEC 4.5, 6a `stagehand import-opendesk`), pure:
//! openDesk's `migrations:` values become a Migration ([`values`]), its `migrations-status`
//! ConfigMap (or `--installed-release` and `--footprint` flags) becomes the history ledger
//! ([`status`], written in the one ledger format of [`crate::run::ledger`]) and
//! `spec.installedRelease`, and the result is validated exactly as `stagehand validate` does.
//! The command line edge is `crate::cli::import`.

pub mod status;
pub mod values;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use stagehand_actions::Library;
use stagehand_config::{
    Declarations, Deployment, Footprint, ManifestError, Recorded, Release, Stage, read_manifest,
    validate,
};
use stagehand_crds::unversioned::HistoryEntry;

use crate::run::history::{MANAGED_BY, MIGRATION_LABEL};
use crate::run::ledger::{Ledger, ledger_name};
use status::{RecordedEntry, RecordedStatus};
use values::{ValuesFinding, from_problem, from_warning, locate, translate};

/// The annotation of the ledger that keeps the imported ConfigMap's `.data`, as JSON.
pub const RAW_ANNOTATION: &str = "stagehand.dev/imported-migrations-status";
/// The field manager of `--apply`.
pub const FIELD_MANAGER: &str = "stagehand-import";

/// What to import.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    /// The values document (rendered helmfile values or the `migrations:` block).
    pub values: Option<&'a Value>,
    /// The Migration's name.
    pub name: &'a str,
    /// The Migration's namespace, when known.
    pub namespace: Option<&'a str>,
    /// What `migrations-status` records (already checked for an interrupted upgrade).
    pub status: Option<&'a RecordedStatus>,
    /// The ConfigMap's `.data`, kept in the ledger's annotation.
    pub status_data: Option<&'a BTreeMap<String, String>>,
    /// `--installed-release`.
    pub installed_release: Option<&'a str>,
    /// `--footprint` flags.
    pub footprints: &'a [String],
    /// `--history-configmap`.
    pub history_config_map: Option<&'a str>,
    /// The PEM text of `--ca-bundle`.
    pub ca_bundle: Option<&'a str>,
}

/// Why nothing can be imported (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The values hold no usable block.
    #[error(transparent)]
    Block(#[from] values::BlockError),
    /// No values.
    #[error("--values is required")]
    NoValues,
    /// A `--footprint` flag that cannot be read.
    #[error("--footprint {flag:?}: {why}")]
    Footprint {
        /// The flag as given.
        flag: String,
        /// What is wrong.
        why: String,
    },
    /// `--installed-release` is not a release.
    #[error("--installed-release {given:?} is not a release: {why}")]
    InstalledRelease {
        /// The flag as given.
        given: String,
        /// Why.
        why: String,
    },
    /// `--installed-release` and the ConfigMap disagree.
    #[error(
        "--installed-release {flag} differs from the last migrated release {recorded} the migrations-status ConfigMap records: leave the flag out, or correct the ConfigMap"
    )]
    ReleaseConflict {
        /// The flag.
        flag: String,
        /// The ConfigMap's.
        recorded: String,
    },
    /// The ConfigMap cannot be imported.
    #[error(transparent)]
    Status(#[from] status::StatusRefusal),
    /// Footprints without a release.
    #[error(
        "--footprint needs the release the deployment runs (--installed-release vX.Y.Z, or a migrations-status ConfigMap): without one it is a fresh installation, whose runs execute nothing"
    )]
    FootprintsWithoutRelease,
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The Migration manifest.
    pub migration: Value,
    /// The ledger, when there is a history to write (a release or footprints).
    pub ledger: Option<Ledger>,
    /// The ledger's ConfigMap name.
    pub ledger_name: String,
    /// The imported ConfigMap's data as JSON (the ledger's annotation).
    pub raw_status: Option<String>,
    /// Every finding, located in the values file; any `error` fails the import.
    pub findings: Vec<ValuesFinding>,
    /// How each history entry was mapped to footprints.
    pub notes: Vec<String>,
}

impl Imported {
    /// No problem among the findings.
    pub fn is_valid(&self) -> bool {
        self.findings.iter().all(|f| !f.error)
    }

    /// The ledger as a ConfigMap manifest (labels as the engine writes them, the raw data of
    /// the imported ConfigMap in [`RAW_ANNOTATION`]).
    pub fn ledger_manifest(&self, namespace: Option<&str>) -> Option<Value> {
        let ledger = self.ledger.as_ref()?;
        let migration = self.migration["metadata"]["name"].clone();
        let mut metadata = json!({
            "name": self.ledger_name,
            "labels": {MANAGED_BY.0: MANAGED_BY.1, MIGRATION_LABEL: migration},
        });
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        if let Some(raw) = &self.raw_status {
            metadata["annotations"] = json!({RAW_ANNOTATION: raw});
        }
        Some(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": ledger.to_data(),
        }))
    }
}

/// Runs the import: translate, map the history, validate.
pub fn import(req: &Request<'_>) -> Result<Imported, ImportError> {
    let doc = req.values.ok_or(ImportError::NoValues)?;
    let block = locate(doc)?;
    let prefix = block.prefix;
    let translated = translate(&block, req.ca_bundle);
    let mut findings = translated.findings;
    let mut spec = translated.spec;
    if let Some(name) = req.history_config_map {
        spec.insert("historyConfigMap".into(), json!(name));
    }

    // The release the deployment runs: the ConfigMap's, or the flag's (they must agree).
    let flag_release = req
        .installed_release
        .map(|r| {
            Release::parse(r).map_err(|e| ImportError::InstalledRelease {
                given: r.into(),
                why: e.to_string(),
            })
        })
        .transpose()?;
    let recorded_release = req.status.and_then(|s| s.last_migrated_release.clone());
    if let (Some(flag), Some(recorded)) = (&flag_release, &recorded_release)
        && flag != recorded
    {
        return Err(ImportError::ReleaseConflict {
            flag: flag.to_string(),
            recorded: recorded.to_string(),
        });
    }
    let release = recorded_release.or(flag_release);
    if req.status.is_some() && release.is_none() {
        return Err(ImportError::Status(status::StatusRefusal::NoRelease {
            keys: status::RELEASE_KEYS.join(", "),
        }));
    }
    if release.is_none() && !req.footprints.is_empty() {
        return Err(ImportError::FootprintsWithoutRelease);
    }

    let mut metadata = json!({"name": req.name});
    if let Some(ns) = req.namespace {
        metadata["namespace"] = json!(ns);
    }
    let manifest = |spec: &Map<String, Value>| {
        json!({
            "apiVersion": "stagehand.dev/v1beta1",
            "kind": "Migration",
            "metadata": metadata,
            "spec": spec,
        })
    };

    // The declarations, to place history entries that name no id or stage.
    let declarations = match read_manifest(&manifest(&spec)) {
        Ok((d, _)) => d,
        Err(e) => {
            findings.push(shape_finding(&e, prefix));
            return Ok(Imported {
                migration: manifest(&spec),
                ledger: None,
                ledger_name: ledger_name(req.name, req.history_config_map),
                raw_status: None,
                findings,
                notes: Vec::new(),
            });
        }
    };

    let mut ledger = Ledger {
        last_migrated_release: release.as_ref().map(ToString::to_string),
        ..Ledger::default()
    };
    let mut notes = Vec::new();
    if let Some(status) = req.status {
        for entry in &status.history {
            let (entries, note) = place(entry, &declarations);
            for e in entries {
                ledger.record(e);
            }
            notes.extend(note);
        }
    }
    for flag in req.footprints {
        let print = parse_footprint_flag(flag, &declarations)?;
        ledger.record(HistoryEntry {
            stage: Some(print.stage),
            id: print.id,
            tag: print.tag,
            run_mode: print.run_mode,
            release: None,
            run_name: None,
            completed_at: None,
        });
    }
    if let Some(r) = &release {
        spec.insert("installedRelease".into(), json!(r.to_string()));
    }
    let migration = manifest(&spec);

    // Validated exactly as `stagehand validate` would, with the imported history.
    let declarations = match read_manifest(&migration) {
        Ok((d, _)) => d,
        Err(e) => {
            findings.push(shape_finding(&e, prefix));
            Declarations::default()
        }
    };
    let recorded = Recorded {
        last_migrated: release.clone(),
        history: ledger.prints(),
        problems: Vec::new(),
    };
    let context = Deployment::new(&declarations, &recorded, None);
    let report = validate(&declarations, &context, &Library);
    findings.extend(report.problems.iter().map(|p| from_problem(p, prefix)));
    findings.extend(report.warnings.iter().map(|w| from_warning(w, prefix)));

    Ok(Imported {
        migration,
        ledger: (!ledger.is_empty()).then_some(ledger),
        ledger_name: ledger_name(req.name, req.history_config_map),
        raw_status: req
            .status_data
            .map(|d| serde_json::to_string(d).unwrap_or_default()),
        findings,
        notes,
    })
}

fn shape_finding(e: &ManifestError, prefix: &str) -> ValuesFinding {
    let (path, message) = match e {
        ManifestError::Shape { path, message } => (
            format!("{prefix}{}", path.strip_prefix("spec.").unwrap_or(path)),
            message.clone(),
        ),
        other => (prefix.trim_end_matches('.').to_string(), other.to_string()),
    };
    ValuesFinding {
        code: "InvalidConfig".into(),
        error: true,
        path,
        id: None,
        message,
    }
}

/// The footprints one recorded entry stands for, and a note when it had to be placed.
///
/// An entry with `id` and `stage` is that footprint. An entry lacking either stands, as
/// openDesk reads its history (a recorded tag and runMode pair skips the action declared with
/// it, reference line 56), for every action the values declare with that tag and runMode (and
/// that id or stage, where given). An entry that matches nothing declared cannot be keyed: it
/// is noted and stays only in the ledger's annotation.
pub fn place(
    entry: &RecordedEntry,
    declarations: &Declarations,
) -> (Vec<HistoryEntry>, Option<String>) {
    let make = |stage: Stage, id: &str| HistoryEntry {
        stage: Some(stage),
        id: id.to_string(),
        tag: Some(entry.tag.clone()),
        run_mode: entry.run_mode.clone(),
        release: entry.release.clone(),
        run_name: Some(format!("migrations-{stage}")),
        completed_at: entry.completed_at.clone(),
    };
    if let (Some(id), Some(stage)) = (&entry.id, entry.stage) {
        return (vec![make(stage, id)], None);
    }
    let mut matches = Vec::new();
    for stage in Stage::ALL {
        if entry.stage.is_some_and(|s| s != stage) {
            continue;
        }
        for d in &declarations.stage(stage).actions {
            let Some(id) = d.id.as_deref() else { continue };
            if entry.id.as_deref().is_some_and(|e| e != id) {
                continue;
            }
            if d.tag.as_deref() == Some(entry.tag.as_str()) && d.run_mode == entry.run_mode {
                matches.push(make(stage, id));
            }
        }
    }
    let what = format!(
        "history[{}] (tag {}, runMode {}{}{})",
        entry.index,
        entry.tag,
        entry.run_mode.as_deref().unwrap_or("none"),
        entry
            .id
            .as_deref()
            .map(|i| format!(", id {i}"))
            .unwrap_or_default(),
        entry
            .stage
            .map(|s| format!(", stage {s}"))
            .unwrap_or_default(),
    );
    if matches.is_empty() {
        return (
            matches,
            Some(format!(
                "{what} matches no action the values declare with that tag and runMode; without an id and a stage it cannot be recorded as a footprint and is kept only in the ledger's annotation {RAW_ANNOTATION}"
            )),
        );
    }
    let names: Vec<String> = matches
        .iter()
        .map(|m| {
            format!(
                "{} {}",
                m.stage.map(Stage::as_str).unwrap_or_default(),
                m.id
            )
        })
        .collect();
    let note = format!(
        "{what} is recorded for every action declared with that tag and runMode: {}",
        names.join(", ")
    );
    (matches, Some(note))
}

/// Reads `--footprint [stage:]id:tag:runMode` (runMode may be empty: declared without one).
/// Without a stage, the stage is the one the values declare `id` in.
pub fn parse_footprint_flag(
    flag: &str,
    declarations: &Declarations,
) -> Result<Footprint, ImportError> {
    let err = |why: String| ImportError::Footprint {
        flag: flag.to_string(),
        why,
    };
    let parts: Vec<&str> = flag.split(':').collect();
    let (stage, id, tag, mode) = match parts.as_slice() {
        [id, tag, mode] => (None, *id, *tag, *mode),
        [stage, id, tag, mode] => (Some(stage.parse::<Stage>().map_err(err)?), *id, *tag, *mode),
        _ => {
            return Err(err(
                "expected id:tag:runMode or stage:id:tag:runMode (runMode may be empty, e.g. workload_scale:v1.18.0:)".into(),
            ));
        }
    };
    if id.is_empty() {
        return Err(err("the id is empty".into()));
    }
    if tag.is_empty() {
        return Err(err(
            "the tag is empty: only a tagged action leaves a footprint".into(),
        ));
    }
    let stage = match stage {
        Some(s) => s,
        None => {
            let declared: Vec<Stage> = Stage::ALL
                .into_iter()
                .filter(|s| {
                    declarations
                        .stage(*s)
                        .actions
                        .iter()
                        .any(|d| d.id.as_deref() == Some(id))
                })
                .collect();
            match declared.as_slice() {
                [one] => *one,
                [] => {
                    return Err(err(format!(
                        "the values declare no action {id:?}, so its stage is unknown: write it as pre:{flag} or post:{flag}"
                    )));
                }
                _ => {
                    return Err(err(format!(
                        "{id:?} is declared in both stages: write it as pre:{flag} or post:{flag}"
                    )));
                }
            }
        }
    };
    let print = Footprint {
        stage,
        id: id.to_string(),
        tag: Some(tag.to_string()),
        run_mode: Some(mode.to_string()).filter(|m| !m.is_empty()),
    };
    Ok(print)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const WINDOW: &str = r#"{"minimum": "v1.15", "from": "v1.15", "to": "v1.17"}"#;

    fn values() -> Value {
        let w: Value = serde_json::from_str(WINDOW).unwrap();
        json!({"migrations": {
            "releaseVersion": "v1.18.0",
            "actions": {
                "pre": [
                    {"id": "workload_scale", "tag": "v1.18.0", "versions": w,
                     "config": {"workload": {"kind": "StatefulSet", "name": "ox-connector", "replicas": 0}}},
                    {"id": "ldap_entryuuid_to_object_identifier", "tag": "v1.18.0", "runMode": "apply", "versions": w,
                     "config": {"ldap": {"pod": "ums-ldap-server-primary-0", "container": "main", "baseDn": "dc=x"}}}
                ],
                "post": null
            },
            "actionsSkip": {"pre": null, "post": null}
        }})
    }

    fn status(history: &str, release: &str) -> RecordedStatus {
        status::read(
            &BTreeMap::from([
                ("lastMigratedRelease".to_string(), release.to_string()),
                ("history".to_string(), history.to_string()),
            ]),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn a_history_becomes_the_ledger_and_installed_release() {
        let v = values();
        let s = status(
            "- {id: ldap_entryuuid_to_object_identifier, stage: pre, tag: v1.18.0, runMode: apply}\n- {id: ox_connector_restart, stage: post, tag: v1.17.0, runMode: default}\n",
            "1.17.3",
        );
        let out = import(&Request {
            values: Some(&v),
            name: "opendesk",
            status: Some(&s),
            ..Request::default()
        })
        .unwrap();
        assert!(out.is_valid(), "{:?}", out.findings);
        assert_eq!(out.migration["spec"]["installedRelease"], "v1.17.3");
        assert_eq!(out.migration["spec"]["actions"]["post"], json!([]));
        let ledger = out.ledger.unwrap();
        assert_eq!(ledger.last_migrated_release.as_deref(), Some("v1.17.3"));
        assert_eq!(
            ledger.footprints.len(),
            2,
            "every recorded footprint, declared or not"
        );
        assert!(ledger.contains(&Footprint {
            stage: Stage::Pre,
            id: "ldap_entryuuid_to_object_identifier".into(),
            tag: Some("v1.18.0".into()),
            run_mode: Some("apply".into()),
        }));
        assert_eq!(out.ledger_name, "opendesk-history");
        // The one ledger format: it parses back.
        assert_eq!(Ledger::parse(&ledger.to_data()).unwrap(), ledger);
    }

    #[test]
    fn entries_without_id_are_placed_on_the_declarations_with_their_pair() {
        let v = values();
        let s = status(
            "- {tag: v1.18.0, runMode: apply}\n- {tag: v1.16.0}\n",
            "v1.17.3",
        );
        let out = import(&Request {
            values: Some(&v),
            name: "opendesk",
            status: Some(&s),
            ..Request::default()
        })
        .unwrap();
        let ledger = out.ledger.unwrap();
        assert_eq!(ledger.footprints.len(), 1);
        assert!(ledger.prints()[0].id == "ldap_entryuuid_to_object_identifier");
        assert_eq!(out.notes.len(), 2, "{:?}", out.notes);
        assert!(out.notes[1].contains("matches no action"));
    }

    #[test]
    fn footprint_flags_adopt_by_hand() {
        let v = values();
        let flags = vec![
            "workload_scale:v1.18.0:".to_string(),
            "pre:ldap_entryuuid_to_object_identifier:v1.18.0:apply".to_string(),
        ];
        let out = import(&Request {
            values: Some(&v),
            name: "od",
            installed_release: Some("v1.17.3"),
            footprints: &flags,
            history_config_map: Some("od-ledger"),
            ..Request::default()
        })
        .unwrap();
        let ledger = out.ledger.unwrap();
        assert_eq!(ledger.footprints.len(), 2);
        assert!(
            ledger
                .footprints
                .contains_key("footprint.pre.workload_scale.v1.18.0.")
        );
        assert_eq!(out.ledger_name, "od-ledger");
        assert_eq!(out.migration["spec"]["historyConfigMap"], "od-ledger");
        let decls = read_manifest(&out.migration).unwrap().0;
        for bad in [
            "x",
            "flush_intercom_sessions:v1.18.0:",
            "workload_scale::",
            "mid:a:b:c",
        ] {
            assert!(parse_footprint_flag(bad, &decls).is_err(), "{bad}");
        }
        let none: Vec<String> = vec!["workload_scale:v1.18.0:".into()];
        assert_eq!(
            import(&Request {
                values: Some(&v),
                name: "od",
                footprints: &none,
                ..Request::default()
            })
            .unwrap_err(),
            ImportError::FootprintsWithoutRelease
        );
        let s = status("[]", "v1.17.3");
        assert!(matches!(
            import(&Request {
                values: Some(&v),
                name: "od",
                status: Some(&s),
                installed_release: Some("v1.16.0"),
                ..Request::default()
            }),
            Err(ImportError::ReleaseConflict { .. })
        ));
    }

    #[test]
    fn validation_problems_are_located_in_the_values() {
        let mut v = values();
        v["migrations"]["actions"]["pre"][1]["versions"] =
            json!({"minimum": "v1.15", "form": "v1.15", "to": "v1.17"});
        let out = import(&Request {
            values: Some(&v),
            name: "od",
            ..Request::default()
        })
        .unwrap();
        assert!(!out.is_valid());
        let paths: Vec<&str> = out
            .findings
            .iter()
            .filter(|f| f.error)
            .map(|f| f.path.as_str())
            .collect();
        assert!(
            paths.contains(&"migrations.actions.pre[1].versions.form"),
            "{paths:?}"
        );
        let s = status("[]", "v1.14.0");
        let out = import(&Request {
            values: Some(&values()),
            name: "od",
            status: Some(&s),
            ..Request::default()
        })
        .unwrap();
        assert!(
            out.findings.iter().any(|f| f.code == "BelowMinimum"),
            "{:?}",
            out.findings
        );
    }
}
