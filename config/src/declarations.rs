//! The declarations of a Migration, read leniently from its JSON form so that every problem
//! can be reported at once instead of stopping at the first that a strict parser meets.

use serde_json::{Map, Value};

use crate::fingerprint::{ActionDigest, Fingerprint, digest};
use crate::problems::{Problem, ProblemCode};
use crate::series::{Release, Series};
use crate::vocabulary::{Footprint, Stage};

/// The keys a `versions` mapping must hold, exactly.
pub const VERSIONS_KEYS: [&str; 3] = ["minimum", "from", "to"];
/// The keys an action declaration may hold.
pub const DECLARATION_KEYS: [&str; 5] = ["id", "tag", "runMode", "versions", "config"];
/// The keys an `actionsSkip` entry may hold.
pub const SKIP_KEYS: [&str; 2] = ["id", "tag"];
/// The keys a Migration spec may hold (both served versions).
pub const SPEC_KEYS: [&str; 10] = [
    "releaseVersion",
    "actions",
    "actionsSkip",
    "secretFiles",
    "objectStore",
    "installedRelease",
    "suspend",
    "historyConfigMap",
    "runHistoryLimit",
    "serviceAccountName",
];

/// The document is not a Migration at all, so there is nothing to validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The document is not a mapping.
    #[error("the document is not a mapping")]
    NotAMapping,
    /// `apiVersion`/`kind` are not a served Migration version.
    #[error(
        "apiVersion {api_version:?} kind {kind:?} is not a Migration: expected kind Migration in stagehand.dev/v1beta1 or stagehand.dev/v1alpha1"
    )]
    NotAMigration {
        /// What the document says.
        api_version: String,
        /// What the document says.
        kind: String,
    },
    /// A part of the document has the wrong shape.
    #[error("{path}: {message}")]
    Shape {
        /// Where, e.g. `spec.actions.pre`.
        path: String,
        /// What shape was expected.
        message: String,
    },
}

/// One action declaration as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    /// Its position in `actions.<stage>`.
    pub index: usize,
    /// The action id, when there is one.
    pub id: Option<String>,
    /// The tag, when there is one.
    pub tag: Option<String>,
    /// The runMode, when there is one.
    pub run_mode: Option<String>,
    /// The bounds that parsed, in the order minimum, from, to.
    pub minimum: Option<Series>,
    /// See [`Declaration::minimum`].
    pub from: Option<Series>,
    /// See [`Declaration::minimum`].
    pub to: Option<Series>,
    /// The action's config (an empty object when left out).
    pub config: Value,
    /// The digest of the declaration as written (what a run freezes).
    pub digest: String,
}

/// One `actionsSkip` entry as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipEntry {
    /// Its position in `actionsSkip.<stage>`.
    pub index: usize,
    /// The id it skips, when there is one.
    pub id: Option<String>,
    /// The tag it skips (`None`: an untagged declaration).
    pub tag: Option<String>,
}

/// The declarations and opt-outs of one stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageDeclarations {
    /// The actions, in order.
    pub actions: Vec<Declaration>,
    /// The opt-outs.
    pub skips: Vec<SkipEntry>,
    /// The digest of the stage's `actionsSkip` as written.
    pub skips_digest: String,
}

/// The declarations of a Migration's spec, with the problems found while reading them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declarations {
    /// The release being deployed, when it parsed.
    pub release_version: Option<Release>,
    /// The adopted release, when one is given and it parsed.
    pub installed_release: Option<Release>,
    /// The `pre` stage.
    pub pre: StageDeclarations,
    /// The `post` stage.
    pub post: StageDeclarations,
    /// The `name` of every `secretFiles` entry, in order.
    pub secret_files: Vec<String>,
    /// The `objectStore`, when one is declared.
    pub object_store: Option<ObjectStoreRef>,
    /// The digests of `releaseVersion`, `secretFiles` and `objectStore` as written.
    pub spec_digests: [String; 3],
    /// Problems met while reading (missing ids, versions keys, invalid versions, ...).
    pub problems: Vec<Problem>,
}

/// What validation needs of the declared `objectStore`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectStoreRef {
    /// The `secretFiles` name of the store identity's secret key, when given.
    pub secret_key_file: Option<String>,
}

/// What a Migration's status has recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The release whose post stage last succeeded.
    pub last_migrated: Option<Release>,
    /// Every recorded footprint.
    pub history: Vec<Footprint>,
    /// Problems with what is recorded (an invalid `lastMigratedRelease`).
    pub problems: Vec<Problem>,
}

impl Declarations {
    /// The declarations of one stage.
    pub fn stage(&self, stage: Stage) -> &StageDeclarations {
        match stage {
            Stage::Pre => &self.pre,
            Stage::Post => &self.post,
        }
    }

    /// What a run of `stage` freezes (see [`crate::fingerprint`]).
    pub fn fingerprint(&self, stage: Stage) -> Fingerprint {
        let decls = self.stage(stage);
        let [release, secrets, store] = self.spec_digests.clone();
        Fingerprint {
            fields: [release, secrets, store, decls.skips_digest.clone()],
            actions: decls
                .actions
                .iter()
                .map(|d| ActionDigest {
                    index: d.index,
                    id: d.id.clone(),
                    digest: d.digest.clone(),
                })
                .collect(),
        }
    }

    /// Reads a Migration `spec` (as JSON).
    pub fn from_spec(spec: &Value) -> Result<Self, ManifestError> {
        let spec = as_object(spec, "spec")?;
        let mut out = Declarations::default();
        let written = |key: &str| digest(spec.get(key).unwrap_or(&Value::Null));
        out.spec_digests = [
            written("releaseVersion"),
            written("secretFiles"),
            written("objectStore"),
        ];
        if let Some(files) = spec.get("secretFiles").and_then(Value::as_array) {
            out.secret_files = files
                .iter()
                .filter_map(|f| f.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
        }
        if let Some(store) = spec.get("objectStore").filter(|v| !v.is_null()) {
            out.object_store = Some(ObjectStoreRef {
                secret_key_file: store
                    .get("secretKeyFile")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            });
        }
        match spec.get("releaseVersion") {
            None | Some(Value::Null) => out.problems.push(Problem::top(
                ProblemCode::InvalidVersion,
                "releaseVersion",
                "releaseVersion is missing: set it to the release being deployed, e.g. \"v1.18.0\"",
            )),
            Some(v) => out.release_version = release_field(v, "releaseVersion", &mut out.problems),
        }
        if let Some(v) = spec.get("installedRelease").filter(|v| !v.is_null()) {
            out.installed_release = release_field(v, "installedRelease", &mut out.problems);
        }
        for key in spec.keys().filter(|k| !SPEC_KEYS.contains(&k.as_str())) {
            // A misspelled list would silently drop declarations or opt-outs.
            let code = if key.to_ascii_lowercase().contains("skip") {
                ProblemCode::MistypedSkip
            } else {
                ProblemCode::InvalidConfig
            };
            out.problems.push(Problem::top(
                code,
                key.clone(),
                format!(
                    "unknown key {key:?} in the spec: expected {}",
                    SPEC_KEYS.join(", ")
                ),
            ));
        }
        let actions = optional_object(spec, "actions", "spec.actions")?;
        let skips = optional_object(spec, "actionsSkip", "spec.actionsSkip")?;
        for (list, map, code) in [
            ("actions", actions, ProblemCode::InvalidConfig),
            ("actionsSkip", skips, ProblemCode::MistypedSkip),
        ] {
            let stages = Stage::ALL.map(Stage::as_str);
            for key in map
                .into_iter()
                .flat_map(|m| m.keys())
                .filter(|k| !stages.contains(&k.as_str()))
            {
                out.problems.push(Problem::top(
                    code,
                    format!("{list}.{key}"),
                    format!("unknown stage {key:?} in {list}: the stages are pre and post"),
                ));
            }
        }
        for stage in Stage::ALL {
            let problems = &mut out.problems;
            let decls =
                read_stage_list(actions, "spec.actions", stage, problems, read_declaration)?;
            let skip_entries =
                read_stage_list(skips, "spec.actionsSkip", stage, problems, read_skip)?;
            let target = match stage {
                Stage::Pre => &mut out.pre,
                Stage::Post => &mut out.post,
            };
            target.actions = decls;
            target.skips = skip_entries;
            target.skips_digest = digest(
                skips
                    .and_then(|m| m.get(stage.as_str()))
                    .unwrap_or(&Value::Null),
            );
        }
        Ok(out)
    }
}

impl Recorded {
    /// Reads what a Migration `status` (as JSON) has recorded; a missing status records nothing.
    pub fn from_status(status: Option<&Value>) -> Result<Self, ManifestError> {
        let Some(status) = status.filter(|s| !s.is_null()) else {
            return Ok(Self::default());
        };
        let status = as_object(status, "status")?;
        let mut problems = Vec::new();
        let last_migrated = match status.get("lastMigratedRelease") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(v) => release_field(v, "status.lastMigratedRelease", &mut problems),
        };
        let mut history = Vec::new();
        if let Some(entries) = status.get("history").filter(|v| !v.is_null()) {
            let entries = entries.as_array().ok_or_else(|| ManifestError::Shape {
                path: "status.history".into(),
                message: "must be a list".into(),
            })?;
            for (i, entry) in entries.iter().enumerate() {
                let path = format!("status.history[{i}]");
                let entry = as_object(entry, &path)?;
                let stage = match entry.get("stage").and_then(Value::as_str) {
                    Some("pre") => Stage::Pre,
                    Some("post") => Stage::Post,
                    _ => {
                        return Err(ManifestError::Shape {
                            path: format!("{path}.stage"),
                            message: "must be pre or post".into(),
                        });
                    }
                };
                let id = entry.get("id").and_then(Value::as_str).ok_or_else(|| {
                    ManifestError::Shape {
                        path: format!("{path}.id"),
                        message: "must be a string".into(),
                    }
                })?;
                history.push(Footprint {
                    stage,
                    id: id.to_string(),
                    tag: entry.get("tag").and_then(Value::as_str).map(str::to_string),
                    run_mode: entry
                        .get("runMode")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                });
            }
        }
        Ok(Self {
            last_migrated,
            history,
            problems,
        })
    }
}

/// Reads a whole Migration manifest: checks apiVersion and kind, then reads spec and status.
pub fn read_manifest(doc: &Value) -> Result<(Declarations, Recorded), ManifestError> {
    let obj = doc.as_object().ok_or(ManifestError::NotAMapping)?;
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let served = matches!(
        api_version,
        "stagehand.dev/v1beta1" | "stagehand.dev/v1alpha1"
    );
    if !served || kind != "Migration" {
        return Err(ManifestError::NotAMigration {
            api_version: api_version.into(),
            kind: kind.into(),
        });
    }
    let spec = obj.get("spec").ok_or_else(|| ManifestError::Shape {
        path: "spec".into(),
        message: "is missing".into(),
    })?;
    let mut declarations = Declarations::from_spec(spec)?;
    let recorded = Recorded::from_status(obj.get("status"))?;
    declarations
        .problems
        .extend(recorded.problems.iter().cloned());
    Ok((declarations, recorded))
}

fn as_object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ManifestError> {
    v.as_object().ok_or_else(|| ManifestError::Shape {
        path: path.into(),
        message: "must be a mapping".into(),
    })
}

fn optional_object<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Map<String, Value>>, ManifestError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_object(v, path).map(Some),
    }
}

/// The entries of the list of `stage` in `parent` (at `path`, `spec.actions` or
/// `spec.actionsSkip`), each read with `read`; a missing list has none.
fn read_stage_list<T>(
    parent: Option<&Map<String, Value>>,
    path: &str,
    stage: Stage,
    problems: &mut Vec<Problem>,
    read: fn(Stage, usize, &Value, &mut Vec<Problem>) -> T,
) -> Result<Vec<T>, ManifestError> {
    let list = optional_list(parent, stage.as_str(), &format!("{path}.{stage}"))?;
    Ok(list
        .iter()
        .enumerate()
        .map(|(index, entry)| read(stage, index, entry, problems))
        .collect())
}

fn optional_list<'a>(
    parent: Option<&'a Map<String, Value>>,
    key: &str,
    path: &str,
) -> Result<&'a [Value], ManifestError> {
    match parent.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(ManifestError::Shape {
            path: path.into(),
            message: "must be a list".into(),
        }),
    }
}

/// Describes a non-string version value, with the YAML-number hint where it applies.
fn not_a_string(v: &Value) -> String {
    match v {
        Value::Number(n) => format!(
            "is the number {n}, not a version: YAML reads an unquoted version as a number (1.10 becomes 1.1); quote the version as written, e.g. \"v1.10\""
        ),
        other => format!("must be a quoted version string, not {other}"),
    }
}

fn release_field(v: &Value, field: &str, problems: &mut Vec<Problem>) -> Option<Release> {
    let message = match v {
        Value::String(s) => match Release::parse(s) {
            Ok(r) => return Some(r),
            Err(e) => e.to_string(),
        },
        other => not_a_string(other),
    };
    problems.push(Problem::top(
        ProblemCode::InvalidVersion,
        field,
        format!("{field} {message}"),
    ));
    None
}

fn string_key(
    entry: &Map<String, Value>,
    key: &str,
    stage: Stage,
    index: usize,
    id: Option<&str>,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let message = match entry.get(key) {
        None | Some(Value::Null) => return None,
        Some(Value::String(s)) if !s.trim().is_empty() => return Some(s.clone()),
        Some(Value::String(_)) => format!(
            "{key} is empty: leave the key out instead (an empty {key} is still a value and would be recorded)"
        ),
        Some(other) => format!("{key} must be a string, not {other}; quote it"),
    };
    problems.push(Problem::at(
        ProblemCode::InvalidConfig,
        stage,
        index,
        id,
        key,
        message,
    ));
    None
}

fn read_declaration(
    stage: Stage,
    index: usize,
    entry: &Value,
    problems: &mut Vec<Problem>,
) -> Declaration {
    let mut decl = Declaration {
        index,
        id: None,
        tag: None,
        run_mode: None,
        minimum: None,
        from: None,
        to: None,
        config: Value::Object(Map::new()),
        digest: digest(entry),
    };
    let missing_id = |problems: &mut Vec<Problem>, message: String| {
        problems.push(Problem::at(
            ProblemCode::MissingId,
            stage,
            index,
            None,
            "id",
            message,
        ));
    };
    let Some(entry) = entry.as_object() else {
        missing_id(
            problems,
            format!("the entry is {entry}, not a mapping with an id, versions and config"),
        );
        return decl;
    };
    decl.id = match entry.get("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        _ => {
            missing_id(
                problems,
                "the entry has no id: name the action to run, e.g. id: workload_scale".into(),
            );
            None
        }
    };
    let id = decl.id.clone();
    let id = id.as_deref();
    decl.tag = string_key(entry, "tag", stage, index, id, problems);
    decl.run_mode = string_key(entry, "runMode", stage, index, id, problems);
    for key in entry
        .keys()
        .filter(|k| !DECLARATION_KEYS.contains(&k.as_str()))
    {
        problems.push(Problem::at(
            ProblemCode::InvalidConfig,
            stage,
            index,
            id,
            key.clone(),
            format!(
                "unknown key {key:?} in the declaration: expected {}",
                DECLARATION_KEYS.join(", ")
            ),
        ));
    }
    match entry.get("config") {
        None | Some(Value::Null) => {}
        Some(v @ Value::Object(_)) => decl.config = v.clone(),
        Some(other) => problems.push(Problem::at(
            ProblemCode::InvalidConfig,
            stage,
            index,
            id,
            "config",
            format!("config must be a mapping, not {other}"),
        )),
    }
    let versions = entry.get("versions").and_then(Value::as_object);
    if let Some(v) = entry.get("versions").filter(|v| !v.is_object()) {
        problems.push(Problem::at(
            ProblemCode::MissingVersionsKey,
            stage,
            index,
            id,
            "versions",
            format!("versions must be a mapping with minimum, from and to, not {v}"),
        ));
    }
    if let Some(versions) = versions {
        for key in versions
            .keys()
            .filter(|k| !VERSIONS_KEYS.contains(&k.as_str()))
        {
            let hint = closest_versions_key(key)
                .map(|k| format!(" (did you mean {k}?)"))
                .unwrap_or_default();
            problems.push(Problem::at(
                ProblemCode::UnknownVersionsKey,
                stage,
                index,
                id,
                format!("versions.{key}"),
                format!("unknown versions key {key:?}{hint}: versions holds exactly minimum, from and to"),
            ));
        }
    }
    let mut bounds = [None, None, None];
    for (slot, key) in bounds.iter_mut().zip(VERSIONS_KEYS) {
        let field = format!("versions.{key}");
        match versions.and_then(|v| v.get(key)) {
            None | Some(Value::Null) => {
                if versions.is_some() || entry.get("versions").is_none() {
                    problems.push(Problem::at(
                        ProblemCode::MissingVersionsKey,
                        stage,
                        index,
                        id,
                        field,
                        format!(
                            "versions.{key} is missing: every action states minimum, from and to"
                        ),
                    ));
                }
            }
            Some(Value::String(s)) => match Series::parse(s) {
                Ok(series) => *slot = Some(series),
                Err(e) => problems.push(Problem::at(
                    ProblemCode::InvalidVersion,
                    stage,
                    index,
                    id,
                    field.clone(),
                    format!("{field} {}", e),
                )),
            },
            Some(other) => problems.push(Problem::at(
                ProblemCode::InvalidVersion,
                stage,
                index,
                id,
                field.clone(),
                format!("{field} {}", not_a_string(other)),
            )),
        }
    }
    [decl.minimum, decl.from, decl.to] = bounds;
    decl
}

/// The versions key a misspelling was most likely meant to be.
fn closest_versions_key(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    VERSIONS_KEYS.into_iter().find(|k| {
        let mut a: Vec<char> = lower.chars().collect();
        let mut b: Vec<char> = k.chars().collect();
        a.sort_unstable();
        b.sort_unstable();
        a == b || lower.starts_with(&k[..2.min(k.len())]) || edit_distance(&lower, k) <= 2
    })
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

fn read_skip(stage: Stage, index: usize, entry: &Value, problems: &mut Vec<Problem>) -> SkipEntry {
    let obj = entry.as_object();
    let id = obj
        .and_then(|o| o.get("id"))
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string);
    let mut skip = SkipEntry {
        index,
        id: None,
        tag: None,
    };
    let Some(id) = id else {
        problems.push(Problem::at(
            ProblemCode::MissingId,
            stage,
            index,
            None,
            "actionsSkip.id",
            "the opt-out has no id: name the declared action to skip (and its tag, if it has one)",
        ));
        return skip;
    };
    let mut mistyped = |field: String, message: String| {
        problems.push(Problem::at(
            ProblemCode::MistypedSkip,
            stage,
            index,
            Some(&id),
            field,
            message,
        ));
    };
    let mut readable = true;
    let entry = obj.into_iter().flatten();
    for (key, value) in entry {
        match (key.as_str(), value) {
            ("id", _) | ("tag", Value::Null) => {}
            ("tag", Value::String(t)) if !t.trim().is_empty() => skip.tag = Some(t.clone()),
            ("tag", Value::String(_)) => {
                readable = false;
                mistyped(
                    "actionsSkip.tag".into(),
                    "tag is empty: leave it out to skip an untagged declaration".into(),
                );
            }
            ("tag", other) => {
                readable = false;
                mistyped(
                    "actionsSkip.tag".into(),
                    format!("tag must be a quoted string, not {other}"),
                );
            }
            (other, _) => {
                readable = false;
                mistyped(
                    format!("actionsSkip.{other}"),
                    format!(
                        "unknown key {other:?} in the opt-out: it holds only id and tag, and a misspelled tag would skip another declaration"
                    ),
                );
            }
        }
    }
    // An entry with a mistake skips nothing and is not matched again (one problem per mistake).
    if readable {
        skip.id = Some(id);
    }
    skip
}
