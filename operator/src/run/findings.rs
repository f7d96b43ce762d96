//! Findings kept (docs/design.md#findings): the list an action reports (the objects it found
//! and would change, or changed) is written to ConfigMaps in the run's namespace that outlive
//! the run, its pod and the next deployment — owned by the Migration (deleted with it, never
//! with the run), labelled with the run and the Migration, named `<run>-findings`, then
//! `<run>-findings-2`, ... when the JSON would not fit one (about 900 KiB each). Each action
//! index has its keys: `action-<index>.plan.json` (found planning a `Manual` run before its
//! approval: what a person approves) and `action-<index>.json` (found by the action as it ran,
//! dry runs included). The first ConfigMap counts the parts (annotation
//! `stagehand.dev/findings-parts`), so that a shorter list written later never reads stale
//! parts. The packing and the digest a person approves are pure; [`Keeper::keep`] and [`read`] talk
//! to the API server.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use stagehand_actions::action::Findings;
use stagehand_crds::unversioned::FindingsStatus;

/// The most bytes of keys and values one ConfigMap holds (the API server refuses objects over
/// 1 MiB; the rest is left for the metadata).
pub const MAX_CONFIGMAP_BYTES: usize = 900 * 1024;

/// The label naming the run whose findings a ConfigMap holds.
pub const RUN_LABEL: &str = "stagehand.dev/run";
/// The label naming the Migration of that run.
pub const MIGRATION_LABEL: &str = "stagehand.dev/migration";
/// The label every findings ConfigMap carries (`stagehand.dev/findings=true`).
pub const FINDINGS_LABEL: &str = "stagehand.dev/findings";
/// The annotation of the first ConfigMap: how many ConfigMaps hold the run's findings.
pub const PARTS_ANNOTATION: &str = "stagehand.dev/findings-parts";

/// The phase of findings found planning a `Manual` run, before its approval.
pub const PLAN: &str = "Plan";
/// The phase of findings found by the action as it ran.
pub const EXECUTION: &str = "Execution";

/// Why findings could not be kept or read. Messages name the ConfigMap.
#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    /// The API server refused or could not answer.
    #[error("{what} ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// `reading` or `writing`.
        what: &'static str,
        /// The namespace.
        namespace: String,
        /// The ConfigMap.
        name: String,
        /// The answer.
        source: Box<kube::Error>,
    },
    /// A part the first ConfigMap counts is missing.
    #[error(
        "ConfigMap {namespace}/{name} is missing: {first} says the findings are kept in {parts} ConfigMaps; the findings of this run can no longer be read in full"
    )]
    MissingPart {
        /// The namespace.
        namespace: String,
        /// The missing part.
        name: String,
        /// The first part.
        first: String,
        /// How many parts it counts.
        parts: usize,
    },
    /// A key does not hold findings.
    #[error(
        "ConfigMap {namespace}/{name}, key {key}: not the findings Stagehand wrote ({source}); the findings of this run can no longer be read"
    )]
    Malformed {
        /// The namespace.
        namespace: String,
        /// The ConfigMap holding (the first chunk of) the key.
        name: String,
        /// The key.
        key: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// The ConfigMap holding part `part` (1-based) of `run`'s findings: `<run>-findings`, then
/// `<run>-findings-<part>`. A name that would be longer than a ConfigMap's name may be is cut
/// and ends in the digest of the whole name.
pub fn config_map_name(run: &str, part: usize) -> String {
    let suffix = if part <= 1 {
        "-findings".to_string()
    } else {
        format!("-findings-{part}")
    };
    let name = format!("{run}{suffix}");
    if name.len() <= 253 {
        return name;
    }
    let hash = stagehand_config::fingerprint::digest(&serde_json::Value::String(run.into()));
    let short = &hash["sha256:".len().."sha256:".len() + 10];
    let mut end = 253 - suffix.len() - short.len() - 1;
    while !run.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}-{short}{suffix}",
        run[..end].trim_end_matches(['-', '.'])
    )
}

/// The key of an action's findings in `phase` ([`PLAN`] or [`EXECUTION`]).
pub fn key(index: u32, phase: &str) -> String {
    if phase == PLAN {
        format!("action-{index}.plan.json")
    } else {
        format!("action-{index}.json")
    }
}

/// The digest a `Manual` run's approval names when actions reported findings before it: one
/// digest over the plan's digest and each action's findings digest, by index (pure).
pub fn approval_digest<'a>(
    plan_digest: &str,
    findings: impl IntoIterator<Item = (u32, &'a str)>,
) -> String {
    let findings: serde_json::Map<String, serde_json::Value> = findings
        .into_iter()
        .map(|(i, d)| (i.to_string(), serde_json::Value::String(d.to_string())))
        .collect();
    stagehand_config::fingerprint::digest(&serde_json::json!({
        "plan": plan_digest,
        "findings": findings,
    }))
}

/// `text` cut into chunks of at most `max` bytes, at character boundaries (pure).
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut end = max;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out.push(rest);
    out
}

/// The data of each ConfigMap, in order (pure): the keys in order, each whole when it fits,
/// else cut into `<key>.part-0001`, `<key>.part-0002`, ...; a ConfigMap is closed when the
/// next entry would take it over `max` bytes. Always at least one (maybe empty) ConfigMap.
pub fn pack(entries: &BTreeMap<String, String>, max: usize) -> Vec<BTreeMap<String, String>> {
    let mut parts: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    let mut size = 0;
    for (key, value) in entries {
        // Room for the key of a chunk: `.part-0001`.
        let room = max.saturating_sub(key.len() + 10).max(1);
        let pieces = chunks(value, room);
        let named: Vec<(String, &str)> = if pieces.len() == 1 {
            vec![(key.clone(), value.as_str())]
        } else {
            pieces
                .iter()
                .enumerate()
                .map(|(n, p)| (format!("{key}.part-{:04}", n + 1), *p))
                .collect()
        };
        for (k, v) in named {
            let len = k.len() + v.len();
            if size > 0 && size + len > max {
                parts.push(BTreeMap::new());
                size = 0;
            }
            size += len;
            if let Some(last) = parts.last_mut() {
                last.insert(k, v.to_string());
            }
        }
    }
    parts
}

/// The keys and whole values the ConfigMaps' data hold (pure): chunks joined in order.
pub fn unpack<'a>(
    parts: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut chunked: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for data in parts {
        for (k, v) in data {
            match k.rsplit_once(".part-") {
                Some((key, n)) if n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()) => {
                    chunked
                        .entry(key.to_string())
                        .or_default()
                        .insert(n.to_string(), v.clone());
                }
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    for (key, pieces) in chunked {
        out.insert(key, pieces.into_values().collect::<String>());
    }
    out
}

/// The ConfigMaps (by name) that hold `key` in `parts`, as [`pack`] laid them out.
pub fn holders(run: &str, parts: &[BTreeMap<String, String>], key: &str) -> Vec<String> {
    let chunk = format!("{key}.part-");
    parts
        .iter()
        .enumerate()
        .filter(|(_, data)| data.keys().any(|k| k == key || k.starts_with(&chunk)))
        .map(|(n, _)| config_map_name(run, n + 1))
        .collect()
}

/// The status an action's findings get (pure).
pub fn status(findings: &Findings, config_maps: Vec<String>, phase: &str) -> FindingsStatus {
    FindingsStatus {
        config_maps,
        counts: findings.counts.clone(),
        digest: findings.digest(),
        rows: findings.rows.len() as u64,
        phase: phase.to_string(),
    }
}

/// Where a run's findings are written: its namespace, its name and its Migration (owner).
#[derive(Clone, Debug)]
pub struct Keeper {
    /// ConfigMaps of the run's namespace.
    pub api: Api<ConfigMap>,
    /// The namespace.
    pub namespace: String,
    /// The run.
    pub run: String,
    /// The run's Migration.
    pub migration: String,
    /// The Migration as owner (its uid).
    pub owner: Option<OwnerReference>,
}

/// The owner reference naming `migration` (kept with it, deleted with it).
pub fn owner_of(migration: &stagehand_crds::Migration) -> Option<OwnerReference> {
    use kube::Resource;
    migration.controller_owner_ref(&()).map(|mut o| {
        // Not the controller of the ConfigMap: nothing reconciles it.
        o.controller = None;
        o.block_owner_deletion = None;
        o
    })
}

/// Reads every part of `run`'s findings: the keys and their whole values (empty when none
/// were kept).
pub async fn read(
    api: &Api<ConfigMap>,
    namespace: &str,
    run: &str,
) -> Result<BTreeMap<String, String>, FindingsError> {
    let first_name = config_map_name(run, 1);
    let get = |name: String| async move {
        api.get_opt(&name)
            .await
            .map_err(|source| FindingsError::Api {
                what: "reading",
                namespace: namespace.to_string(),
                name: name.clone(),
                source: Box::new(source),
            })
    };
    let Some(first) = get(first_name.clone()).await? else {
        return Ok(BTreeMap::new());
    };
    let parts = first
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PARTS_ANNOTATION))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1);
    let mut datas = vec![first.data.unwrap_or_default()];
    for part in 2..=parts {
        let name = config_map_name(run, part);
        match get(name.clone()).await? {
            Some(cm) => datas.push(cm.data.unwrap_or_default()),
            None => {
                return Err(FindingsError::MissingPart {
                    namespace: namespace.to_string(),
                    name,
                    first: first_name,
                    parts,
                });
            }
        }
    }
    Ok(unpack(&datas))
}

/// The findings of action `index` in `phase` among what [`read`] returned.
pub fn parse(
    entries: &BTreeMap<String, String>,
    namespace: &str,
    run: &str,
    index: u32,
    phase: &str,
) -> Result<Option<Findings>, FindingsError> {
    let key = key(index, phase);
    let Some(text) = entries.get(&key) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|source| FindingsError::Malformed {
            namespace: namespace.to_string(),
            name: config_map_name(run, 1),
            key,
            source,
        })
}

impl Keeper {
    /// Keeps `findings` of action `index` in `phase` with the run's other findings, and
    /// returns the status that names where.
    pub async fn keep(
        &self,
        index: u32,
        phase: &str,
        findings: &Findings,
    ) -> Result<FindingsStatus, FindingsError> {
        let mut entries = read(&self.api, &self.namespace, &self.run).await?;
        let key = key(index, phase);
        let text = serde_json::to_string(findings).map_err(|source| FindingsError::Malformed {
            namespace: self.namespace.clone(),
            name: config_map_name(&self.run, 1),
            key: key.clone(),
            source,
        })?;
        entries.insert(key.clone(), text);
        let parts = pack(&entries, MAX_CONFIGMAP_BYTES);
        for (n, data) in parts.iter().enumerate() {
            self.write(n + 1, parts.len(), data.clone()).await?;
        }
        Ok(status(findings, holders(&self.run, &parts, &key), phase))
    }

    /// Creates or replaces part `part` of `total`.
    async fn write(
        &self,
        part: usize,
        total: usize,
        data: BTreeMap<String, String>,
    ) -> Result<(), FindingsError> {
        let name = config_map_name(&self.run, part);
        let failed = |what: &'static str, source: kube::Error| FindingsError::Api {
            what,
            namespace: self.namespace.clone(),
            name: name.clone(),
            source: Box::new(source),
        };
        let labels: BTreeMap<String, String> = [
            (FINDINGS_LABEL.to_string(), "true".to_string()),
            (RUN_LABEL.to_string(), label_value(&self.run)),
            (MIGRATION_LABEL.to_string(), label_value(&self.migration)),
        ]
        .into_iter()
        .collect();
        let annotations: Option<BTreeMap<String, String>> = (part == 1).then(|| {
            [(PARTS_ANNOTATION.to_string(), total.to_string())]
                .into_iter()
                .collect()
        });
        let existing = self
            .api
            .get_opt(&name)
            .await
            .map_err(|e| failed("reading", e))?;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations,
                owner_references: self.owner.clone().map(|o| vec![o]),
                resource_version: existing
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        let written = if existing.is_some() {
            self.api.replace(&name, &PostParams::default(), &cm).await
        } else {
            self.api.create(&PostParams::default(), &cm).await
        };
        written.map(|_| ()).map_err(|e| failed("writing", e))
    }
}

/// A label value naming `name` (at most 63 characters: a longer name is cut).
fn label_value(name: &str) -> String {
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.', '_'])
        .to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use stagehand_actions::action::FindingRow;

    #[test]
    fn names_follow_the_run_and_stay_valid() {
        assert_eq!(config_map_name("pre-1", 1), "pre-1-findings");
        assert_eq!(config_map_name("pre-1", 3), "pre-1-findings-3");
        let long = "r".repeat(253);
        let name = config_map_name(&long, 12);
        assert!(
            name.len() <= 253 && name.ends_with("-findings-12"),
            "{name}"
        );
        assert_ne!(name, config_map_name(&"r".repeat(252), 12));
    }

    #[test]
    fn long_lists_are_split_across_config_maps_and_read_back_whole() {
        let big = "é".repeat(300);
        let entries: BTreeMap<String, String> = [
            ("action-0.json".to_string(), big.clone()),
            ("action-1.json".to_string(), "small".to_string()),
        ]
        .into_iter()
        .collect();
        let parts = pack(&entries, 200);
        assert!(parts.len() >= 3, "{parts:?}");
        for data in &parts {
            let size: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
            assert!(size <= 200, "{size}: {data:?}");
        }
        assert_eq!(unpack(&parts), entries);
        assert_eq!(
            holders("pre", &parts, "action-1.json"),
            [format!("pre-findings-{}", parts.len())]
        );
        assert!(holders("pre", &parts, "action-0.json").len() >= 2);
        let one = pack(&entries, MAX_CONFIGMAP_BYTES);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0], entries, "what fits is kept whole");
        assert_eq!(pack(&BTreeMap::new(), 10), [BTreeMap::new()]);
    }

    #[test]
    fn the_approval_digest_binds_the_plan_and_each_actions_findings() {
        let base = approval_digest("sha256:plan", [(0, "sha256:a")]);
        assert!(base.starts_with("sha256:"));
        assert_eq!(base, approval_digest("sha256:plan", [(0, "sha256:a")]));
        assert_ne!(base, approval_digest("sha256:other", [(0, "sha256:a")]));
        assert_ne!(base, approval_digest("sha256:plan", [(0, "sha256:b")]));
        assert_ne!(base, approval_digest("sha256:plan", [(1, "sha256:a")]));
        assert_ne!(base, approval_digest("sha256:plan", []));
    }

    #[test]
    fn the_status_counts_and_names_where_they_are() {
        let f = Findings::new(
            &["dn"],
            vec![FindingRow {
                group: "differs".into(),
                values: vec!["uid=a".into()],
            }],
            [("carrying".to_string(), 4)],
        );
        let s = status(&f, vec!["pre-findings".into()], EXECUTION);
        assert_eq!(s.rows, 1);
        assert_eq!(s.counts["carrying"], 4);
        assert_eq!(s.digest, f.digest());
        assert_eq!(s.config_maps, ["pre-findings"]);
        assert_eq!(key(2, PLAN), "action-2.plan.json");
        assert_eq!(key(2, EXECUTION), "action-2.json");
    }
}
