//! Adopting a running openDesk deployment (docs/design.md#fresh-installations-and-adoption,
//! docs/adopting-opendesk.md), pure: openDesk's `migrations:` values become a Migration
//! ([`values`]), its `migrations-status` ConfigMap (or `--installed-release` and `--footprint`
//! flags) becomes the history ledger ([`status`], written in the one ledger format of
//! [`crate::run::ledger`]) and `spec.installedRelease`, and the result is validated exactly as
//! `stagehand validate` does. The command line edge is `crate::cli::import`.

pub mod status;
pub mod values;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};
use stagehand_actions::Library;
use stagehand_config::{
    ActionCatalog, Declarations, Deployment, Footprint, ManifestError, PlannedAction, Recorded,
    Release, Stage, declared_footprint, plan_stage, read_manifest, validate,
};
use stagehand_crds::unversioned::HistoryEntry;

use crate::run::history::ledger_object;
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
    /// `--accept-interrupted`: no post declaration is assumed done by an entry without a stage.
    pub accept_interrupted: bool,
    /// Whose pre stage the ConfigMap ends with ([`status::check_interrupted`]): the pre-stage
    /// work of the release being imported, run alone, is recorded as that release's (the
    /// operator then sees no interrupted upgrade in it either).
    pub last_pre: status::LastPre,
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
    /// Every imported entry (history entry or `--footprint`) that matches no declared action
    /// of its stage; `--apply` refuses while there is one, unless `--allow-unmatched`.
    pub unmatched: Vec<Unmatched>,
    /// The plan of both stages with the imported history (what the history makes skip:
    /// `FootprintRecorded`); empty when the Migration is invalid.
    pub plan: Vec<(Stage, Vec<PlannedAction>)>,
}

/// An imported entry that matches no declared action of its stage: whatever it records, no
/// declaration is skipped for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unmatched {
    /// Where it comes from: `history[3]` of the ConfigMap, or `--footprint X`.
    pub source: String,
    /// Its id, where recorded.
    pub id: Option<String>,
    /// Its stage, where recorded.
    pub stage: Option<Stage>,
    /// Its tag.
    pub tag: Option<String>,
    /// Its runMode (`None`: none recorded).
    pub run_mode: Option<String>,
    /// Why nothing matches it.
    pub reason: String,
}

impl std::fmt::Display for Unmatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let none = "none";
        write!(
            f,
            "{} (id {}, stage {}, tag {}, runMode {}) matches no declared action: {}",
            self.source,
            self.id.as_deref().unwrap_or(none),
            self.stage.map_or(none, Stage::as_str),
            self.tag.as_deref().unwrap_or(none),
            self.run_mode.as_deref().unwrap_or(none),
            self.reason
        )
    }
}

/// What the ConfigMap says about post stages, for history entries that record no stage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostStage {
    /// The ConfigMap's last migrated release: the post stage of every release up to it
    /// completed (a release counts as migrated once its migrations-post succeeded).
    pub completed_through: Option<Release>,
    /// `--accept-interrupted` (or a last stage `pre`): no post declaration is assumed done.
    pub interrupted: bool,
}

impl PostStage {
    /// Whether the post stage of the release `entry` belongs to (its `release`, else its tag)
    /// completed; the reason when it did not or cannot be told.
    fn completed(&self, entry: &RecordedEntry) -> Result<(), String> {
        if self.interrupted {
            return Err("the last stage that ran was pre (an interrupted upgrade accepted with --accept-interrupted, or the pre stage of the release being imported run alone), so no post declaration is assumed done".into());
        }
        let release = [entry.release.as_deref(), Some(entry.tag.as_str())]
            .into_iter()
            .flatten()
            .find_map(|r| Release::parse(r).ok());
        let Some(release) = release else {
            return Err(format!(
                "neither its release nor its tag {:?} names a release, so whether that release's post stage completed cannot be told",
                entry.tag
            ));
        };
        match &self.completed_through {
            Some(last) if *last >= release => Ok(()),
            last => Err(format!(
                "the ConfigMap does not say the post stage of release {release} completed (its last migrated release is {})",
                last.as_ref()
                    .map_or_else(|| "none".to_string(), ToString::to_string)
            )),
        }
    }
}

impl Imported {
    /// No problem among the findings.
    pub fn is_valid(&self) -> bool {
        self.findings.iter().all(|f| !f.error)
    }

    /// The ledger as a ConfigMap manifest: built as the operator builds it (its labels and
    /// the GitOps annotations), plus the raw data of the imported ConfigMap in
    /// [`RAW_ANNOTATION`].
    pub fn ledger_manifest(&self, namespace: Option<&str>) -> Option<Value> {
        let ledger = self.ledger.as_ref()?;
        let migration = self.migration["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let mut cm = ledger_object(&self.ledger_name, namespace, migration, ledger);
        if let Some(raw) = &self.raw_status {
            cm.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(RAW_ANNOTATION.to_string(), raw.clone());
        }
        serde_json::to_value(cm).ok()
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
    // An object store that no declared action uses (openDesk v1.19 still renders one, and no
    // longer mounts its key): not carried over, and nothing about it can fail the import.
    if spec.contains_key("objectStore") && !uses_object_store(&spec) {
        spec.remove("objectStore");
        let store = format!("{prefix}objectStore");
        findings.retain(|f| !f.path.starts_with(&store));
        findings.push(ValuesFinding {
            code: values::ImportCode::NotCarriedOver.to_string(),
            error: false,
            path: store,
            id: None,
            message: "no declared action hands work over in the object store, so the Migration declares none; declare spec.objectStore again when a release's actions need it".into(),
        });
    }
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
                unmatched: Vec::new(),
                plan: Vec::new(),
            });
        }
    };

    let mut ledger = Ledger {
        last_migrated_release: release.as_ref().map(ToString::to_string),
        ..Ledger::default()
    };
    let mut notes = Vec::new();
    let mut unmatched = Vec::new();
    if let Some(status) = req.status {
        let post = PostStage {
            completed_through: status.last_migrated_release.clone(),
            interrupted: req.accept_interrupted || status.last_stage == Some(Stage::Pre),
        };
        let review = match &req.last_pre {
            status::LastPre::Importing { release, entries } => {
                notes.push(format!(
                    "the last stage that ran is the pre stage of release {release} being imported, run alone (openDesk's review, history[{}]): not an interrupted upgrade; its entries are recorded as release {release}'s work, and the post stage has still to run",
                    entries
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("], history[")
                ));
                Some((release, entries))
            }
            _ => None,
        };
        for entry in &status.history {
            let placed = place(entry, &declarations, &post);
            for mut e in placed.entries {
                if let Some((release, entries)) = review
                    && entries.contains(&entry.index)
                    && e.release.is_none()
                {
                    e.release = Some(release.to_string());
                }
                ledger.record(e);
            }
            notes.extend(placed.note);
            unmatched.extend(placed.unmatched);
        }
    }
    for flag in req.footprints {
        let print = parse_footprint_flag(flag, &declarations)?;
        if !is_declared(&print, &declarations) {
            unmatched.push(Unmatched {
                source: format!("--footprint {flag}"),
                id: Some(print.id.clone()),
                stage: Some(print.stage),
                tag: print.tag.clone(),
                run_mode: print.run_mode.clone(),
                reason: near_misses(
                    &[print.stage],
                    Some(&print.id),
                    print.tag.as_deref().unwrap_or_default(),
                    print.run_mode.as_deref(),
                    &declarations,
                ),
            });
        }
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
    let plan = if report.is_valid() {
        Stage::ALL
            .into_iter()
            .map(|stage| (stage, plan_stage(&declarations, stage, &context).actions))
            .collect()
    } else {
        Vec::new()
    };

    Ok(Imported {
        migration,
        ledger: (!ledger.is_empty()).then_some(ledger),
        ledger_name: ledger_name(req.name, req.history_config_map),
        raw_status: req
            .status_data
            .map(|d| serde_json::to_string(d).unwrap_or_default()),
        findings,
        notes,
        unmatched,
        plan,
    })
}

/// Whether an action declared in `spec` hands work over in the object store (the library's
/// [`stagehand_config::Needs`], as validation reads them).
fn uses_object_store(spec: &Map<String, Value>) -> bool {
    Stage::ALL.into_iter().any(|stage| {
        spec.get("actions")
            .and_then(|a| a.get(stage.as_str()))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|d| {
                let id = d.get("id").and_then(Value::as_str).unwrap_or_default();
                let config = d.get("config").cloned().unwrap_or_else(|| json!({}));
                Library.needs(id, &config).handover.is_some()
            })
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

/// What one recorded entry stands for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placed {
    /// The footprints to record.
    pub entries: Vec<HistoryEntry>,
    /// How it was placed, when it had to be.
    pub note: Option<String>,
    /// Set when it matches no declared action of its stage.
    pub unmatched: Option<Unmatched>,
}

/// The footprints one recorded entry stands for, whether it matches a declaration, and a note
/// when it had to be placed. Matching is the planner's ([`declared_footprint`]): an entry
/// matches a declaration whose footprint `(stage, id, tag, runMode)` equals the entry's.
///
/// An entry with `id` and `stage` is that footprint, recorded whether or not it matches. An
/// entry lacking either stands, as openDesk reads its history (a recorded tag and runMode
/// pair skips the action declared with it, reference line 56), for every action the values
/// declare with that tag and runMode (and that id or stage, where given) — but for a post
/// declaration only when `post` says the post stage of the entry's release completed. An
/// entry that matches nothing declared is [`Placed::unmatched`]; without an id and a stage it
/// cannot be keyed and stays only in the ledger's annotation.
pub fn place(entry: &RecordedEntry, declarations: &Declarations, post: &PostStage) -> Placed {
    let make = |stage: Stage, id: &str| HistoryEntry {
        stage: Some(stage),
        id: id.to_string(),
        tag: Some(entry.tag.clone()),
        run_mode: entry.run_mode.clone(),
        release: entry.release.clone(),
        run_name: Some(format!("migrations-{stage}")),
        completed_at: entry.completed_at.clone(),
    };
    let stages: Vec<Stage> = Stage::ALL
        .into_iter()
        .filter(|s| entry.stage.is_none_or(|e| e == *s))
        .collect();
    let mut matches = Vec::new();
    let mut withheld = Vec::new();
    for &stage in &stages {
        for d in &declarations.stage(stage).actions {
            let Some(id) = d.id.as_deref() else { continue };
            if entry.id.as_deref().is_some_and(|e| e != id) {
                continue;
            }
            let print = Footprint {
                stage,
                id: id.to_string(),
                tag: Some(entry.tag.clone()),
                run_mode: entry.run_mode.clone(),
            };
            if declared_footprint(stage, d).as_ref() != Some(&print) {
                continue;
            }
            if entry.stage.is_none()
                && stage == Stage::Post
                && let Err(why) = post.completed(entry)
            {
                withheld.push((id.to_string(), why));
                continue;
            }
            matches.push(make(stage, id));
        }
    }
    let source = format!("history[{}]", entry.index);
    let unmatched = |reason: String| Unmatched {
        source: source.clone(),
        id: entry.id.clone(),
        stage: entry.stage,
        tag: Some(entry.tag.clone()),
        run_mode: entry.run_mode.clone(),
        reason,
    };
    let withheld_text = || {
        let ids: Vec<&str> = withheld.iter().map(|(id, _)| id.as_str()).collect();
        let why = withheld
            .first()
            .map(|(_, w)| w.as_str())
            .unwrap_or_default();
        format!(
            "it records no stage, and is not taken for post {}: {why}",
            ids.join(", ")
        )
    };
    if let (Some(id), Some(stage)) = (&entry.id, entry.stage) {
        return Placed {
            entries: vec![make(stage, id)],
            note: None,
            unmatched: matches.is_empty().then(|| {
                unmatched(near_misses(
                    &[stage],
                    Some(id),
                    &entry.tag,
                    entry.run_mode.as_deref(),
                    declarations,
                ))
            }),
        };
    }
    if matches.is_empty() {
        let reason = if withheld.is_empty() {
            near_misses(
                &stages,
                entry.id.as_deref(),
                &entry.tag,
                entry.run_mode.as_deref(),
                declarations,
            )
        } else {
            withheld_text()
        };
        return Placed {
            entries: Vec::new(),
            note: Some(format!(
                "{source}: without an id and a stage it cannot be recorded as a footprint and is kept only in the ledger's annotation {RAW_ANNOTATION}"
            )),
            unmatched: Some(unmatched(reason)),
        };
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
    let mut note = format!(
        "{source} (tag {}, runMode {}) is recorded for every action declared with that tag and runMode: {}",
        entry.tag,
        entry.run_mode.as_deref().unwrap_or("none"),
        names.join(", ")
    );
    if !withheld.is_empty() {
        note.push_str(&format!("; {}", withheld_text()));
    }
    Placed {
        entries: matches,
        note: Some(note),
        unmatched: None,
    }
}

/// Whether a declaration of the footprint's stage leaves exactly this footprint.
fn is_declared(print: &Footprint, declarations: &Declarations) -> bool {
    declarations
        .stage(print.stage)
        .actions
        .iter()
        .any(|d| declared_footprint(print.stage, d).as_ref() == Some(print))
}

/// Why an entry `(id?, tag, runMode)` of `stages` matches no declaration there: how the
/// declarations closest to it are written.
fn near_misses(
    stages: &[Stage],
    id: Option<&str>,
    tag: &str,
    run_mode: Option<&str>,
    declarations: &Declarations,
) -> String {
    let mode =
        |m: Option<&str>| m.map_or_else(|| "no runMode".to_string(), |m| format!("runMode {m}"));
    let mut why = Vec::new();
    for &stage in stages {
        for d in &declarations.stage(stage).actions {
            let Some(did) = d.id.as_deref() else { continue };
            let same_id = id.is_some_and(|i| i == did);
            if id.is_some() && !same_id {
                continue;
            }
            match d.tag.as_deref() {
                None if same_id => why.push(format!(
                    "{stage} {did} is declared without a tag (it runs every time; no footprint skips it)"
                )),
                Some(t) if t == tag => why.push(format!(
                    "{stage} {did} is declared with tag {t} and {} (the history says {})",
                    mode(d.run_mode.as_deref()),
                    mode(run_mode)
                )),
                Some(t) if same_id => why.push(format!(
                    "{stage} {did} is declared with tag {t} (the history says {tag})"
                )),
                _ => {}
            }
        }
    }
    if let Some(id) = id {
        for other in Stage::ALL.into_iter().filter(|s| !stages.contains(s)) {
            let print = Footprint {
                stage: other,
                id: id.to_string(),
                tag: Some(tag.to_string()),
                run_mode: run_mode.map(str::to_string),
            };
            if is_declared(&print, declarations) {
                why.push(format!(
                    "{id} with that tag and runMode is declared in stage {other}, not {}",
                    stages
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
        }
    }
    if why.is_empty() {
        let where_ = stages
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" or ");
        why.push(match id {
            Some(id) => format!(
                "the values declare no action {id} in stage {where_} (the work of an earlier release, or a misspelled id)"
            ),
            None => format!("the values declare no action with tag {tag} in stage {where_}"),
        });
    }
    why.join("; ")
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

    /// What `import` makes of [`values`] and a status ConfigMap of this history and release.
    fn import_with_status(name: &str, history: &str, release: &str) -> Imported {
        let s = status(history, release);
        import(&Request {
            values: Some(&values()),
            name,
            status: Some(&s),
            ..Request::default()
        })
        .unwrap()
    }

    #[test]
    fn a_history_becomes_the_ledger_and_installed_release() {
        let out = import_with_status(
            "opendesk",
            "- {id: ldap_entryuuid_to_object_identifier, stage: pre, tag: v1.18.0, runMode: apply}\n- {id: ox_connector_restart, stage: post, tag: v1.17.0, runMode: default}\n",
            "1.17.3",
        );
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
        let out = import_with_status(
            "opendesk",
            "- {tag: v1.18.0, runMode: apply}\n- {tag: v1.16.0}\n",
            "v1.17.3",
        );
        let ledger = out.ledger.unwrap();
        assert_eq!(ledger.footprints.len(), 1);
        assert!(ledger.prints()[0].id == "ldap_entryuuid_to_object_identifier");
        assert_eq!(out.notes.len(), 2, "{:?}", out.notes);
        assert!(out.notes[1].contains("kept only in the ledger's annotation"));
        assert_eq!(out.unmatched.len(), 1, "{:?}", out.unmatched);
        assert_eq!(out.unmatched[0].source, "history[1]");
        assert_eq!(
            out.unmatched[0].reason,
            "the values declare no action with tag v1.16.0 in stage pre or post"
        );
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
        let out = import_with_status("od", "[]", "v1.14.0");
        assert!(
            out.findings.iter().any(|f| f.code == "BelowMinimum"),
            "{:?}",
            out.findings
        );
    }
}
