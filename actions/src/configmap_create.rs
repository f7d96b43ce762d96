//! `configmap_create` (openDesk v1.19, pre): creates a ConfigMap with the configured data and
//! labels in the Migration's namespace — openDesk's `element-markers`, which tells the Element
//! chart that an upgraded Matrix deployment runs legacy authentication. An existing ConfigMap
//! is never changed: the same data with the configured labels is success, anything else a
//! failure naming what differs ([`Mismatch`]). Planning and the preflight read it, and prove a
//! create with a server-side dry run when it is absent.

use std::collections::BTreeMap;
use std::fmt;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::ConfigIssue;

use crate::action::{Action, ActionConfig, ActionContext, ActionError, Outcome};
use crate::clients::labelled::{
    Created, LabelLack, create_or_read, data_key_issue, label_command, label_value_issue,
    labels_lacking, name_issue, refused_or, show_labels,
};
use crate::text::one_line;

/// The action's config (openDesk v1.19 renders `configmap.name: element-markers`,
/// `data: {MATRIX_STACK_MSC3861: legacy_auth}`, `labels: {app.kubernetes.io/managed-by:
/// matrix-tools-deployment-markers}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The ConfigMap to create.
    pub configmap: Wanted,
}

/// The ConfigMap as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Wanted {
    /// Its name, in the Migration's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Its data, key by key.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// Labels it must carry (others may be there too).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl ActionConfig for Config {
    const ID: &'static str = "configmap_create";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let c = &self.configmap;
        let mut issues = Vec::new();
        if let Some(message) = name_issue(&c.name) {
            issues.push(ConfigIssue {
                path: "configmap.name".into(),
                message,
            });
        }
        for key in c.data.keys() {
            if let Some(message) = data_key_issue(key) {
                issues.push(ConfigIssue {
                    path: format!("configmap.data.{key}"),
                    message,
                });
            }
        }
        for (key, value) in &c.labels {
            if let Some(message) = label_value_issue(value) {
                issues.push(ConfigIssue {
                    path: format!("configmap.labels.{key}"),
                    message,
                });
            }
        }
        issues
    }
}

/// How one data key of an existing ConfigMap differs from the config. Values are shown: a
/// marker holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataDiff {
    /// The configured key is not there.
    Missing {
        /// The key.
        key: String,
        /// Its configured value.
        want: String,
    },
    /// The ConfigMap holds a key the config does not have.
    Extra {
        /// The key.
        key: String,
        /// Its value there (`<binary, N bytes>` for `binaryData`).
        have: String,
    },
    /// The key holds another value.
    Other {
        /// The key.
        key: String,
        /// Its value there.
        have: String,
        /// Its configured value.
        want: String,
    },
}

impl DataDiff {
    fn key(&self) -> &str {
        match self {
            DataDiff::Missing { key, .. }
            | DataDiff::Extra { key, .. }
            | DataDiff::Other { key, .. } => key,
        }
    }
}

fn quoted(value: &str) -> String {
    format!("{:?}", one_line(value, 120))
}

impl fmt::Display for DataDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataDiff::Missing { key, want } => {
                write!(f, "{key} is missing (configured {})", quoted(want))
            }
            DataDiff::Extra { key, have } => {
                write!(f, "{key} is not configured (it holds {})", quoted(have))
            }
            DataDiff::Other { key, have, want } => {
                write!(f, "{key} is {}, configured {}", quoted(have), quoted(want))
            }
        }
    }
}

/// The differences between an existing ConfigMap's data and `want`, by key (`binaryData`
/// keys count as data the config does not have). Empty: the same data.
pub fn data_diff(existing: &ConfigMap, want: &BTreeMap<String, String>) -> Vec<DataDiff> {
    let mut have: BTreeMap<String, String> = existing.data.clone().unwrap_or_default();
    for (key, bytes) in existing.binary_data.iter().flatten() {
        have.insert(key.clone(), format!("<binary, {} bytes>", bytes.0.len()));
    }
    let mut diffs: Vec<DataDiff> = Vec::new();
    for (key, want) in want {
        match have.get(key) {
            None => diffs.push(DataDiff::Missing {
                key: key.clone(),
                want: want.clone(),
            }),
            Some(value) if value != want => diffs.push(DataDiff::Other {
                key: key.clone(),
                have: value.clone(),
                want: want.clone(),
            }),
            Some(_) => {}
        }
    }
    for (key, value) in &have {
        if !want.contains_key(key) {
            diffs.push(DataDiff::Extra {
                key: key.clone(),
                have: value.clone(),
            });
        }
    }
    diffs.sort_by(|a, b| a.key().cmp(b.key()));
    diffs
}

/// Why an existing ConfigMap is not the configured one: its data differ, or it lacks a
/// configured label. Stagehand never changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// `namespace/name`.
    pub object: String,
    /// Its data, key by key.
    pub data: Vec<DataDiff>,
    /// Its labels.
    pub labels: Vec<LabelLack>,
    /// The `kubectl label` command adding the labels.
    pub label_command: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.data.is_empty() {
            let diffs: Vec<String> = self.data.iter().map(ToString::to_string).collect();
            parts.push(format!(
                "ConfigMap {} already exists with other data: {}",
                self.object,
                diffs.join("; ")
            ));
        }
        if !self.labels.is_empty() {
            let lacking: Vec<String> = self.labels.iter().map(ToString::to_string).collect();
            parts.push(format!(
                "ConfigMap {} lacks the label {} that the tool reading it requires (matrix-tools refuses a marker without its managed-by label)",
                self.object,
                lacking.join(", ")
            ));
        }
        write!(
            f,
            "{}. Stagehand never overwrites an existing ConfigMap: find out who wrote it (kubectl -n {} get configmap {} -o yaml)",
            parts.join("; "),
            self.object.split('/').next().unwrap_or_default(),
            self.object.split('/').nth(1).unwrap_or_default()
        )?;
        if self.data.is_empty() {
            write!(
                f,
                "; if it is the right object, add the label ({}) and run the stage again",
                self.label_command
            )
        } else {
            f.write_str("; if it is right for this deployment (for openDesk's element-markers: the deployment was already migrated to MAS), skip this action for the release (actionsSkip); otherwise correct or delete it and run the stage again")
        }
    }
}

/// What the cluster holds under the configured name.
enum Found {
    /// Nothing.
    Absent,
    /// The configured ConfigMap (same data, configured labels).
    Same(Box<ConfigMap>),
}

impl Config {
    fn object(&self, namespace: &str) -> String {
        format!("{namespace}/{}", self.configmap.name)
    }

    /// The chart rule a refused request needs.
    fn rule() -> &'static str {
        "the chart's Role grants configmaps get and create for configmap_create (deploy/charts/stagehand/templates/rbac.yaml, docs/deploy.md)"
    }

    /// Judges an existing ConfigMap (pure): `Ok` when it is the configured one.
    pub fn judge(&self, namespace: &str, existing: &ConfigMap) -> Result<(), Mismatch> {
        let want = &self.configmap;
        let data = data_diff(existing, &want.data);
        let labels = labels_lacking(existing.metadata.labels.as_ref(), &want.labels);
        if data.is_empty() && labels.is_empty() {
            return Ok(());
        }
        Err(Mismatch {
            object: self.object(namespace),
            label_command: label_command("configmap", namespace, &want.name, &labels),
            data,
            labels,
        })
    }

    /// The ConfigMap to create.
    fn desired(&self, namespace: &str) -> ConfigMap {
        let want = &self.configmap;
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(want.name.clone()),
                namespace: Some(namespace.to_string()),
                labels: (!want.labels.is_empty()).then(|| want.labels.clone()),
                ..ObjectMeta::default()
            },
            data: Some(want.data.clone()),
            ..ConfigMap::default()
        }
    }

    /// Reads the ConfigMap and judges it; when absent, proves the create with a server-side
    /// dry run. Changes nothing.
    async fn inspect(&self, ctx: &ActionContext) -> Result<Found, ActionError> {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let what = format!("ConfigMap {}", self.object(&ctx.namespace));
        let existing = api
            .get_opt(&self.configmap.name)
            .await
            .map_err(|e| refused_or(e, &format!("reading {what}"), Self::rule()))?;
        match existing {
            Some(cm) => {
                self.judge(&ctx.namespace, &cm)
                    .map_err(|m| ActionError::Conflict(m.to_string()))?;
                Ok(Found::Same(Box::new(cm)))
            }
            None => {
                let dry = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                api.create(&dry, &self.desired(&ctx.namespace))
                    .await
                    .map_err(|e| {
                        refused_or(
                            e,
                            &format!("creating {what} (server-side dry run)"),
                            Self::rule(),
                        )
                    })?;
                Ok(Found::Absent)
            }
        }
    }

    /// `KEY=value, ...` of the configured data and the labels, for summaries.
    fn contents(data: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> String {
        let data: Vec<String> = data
            .iter()
            .map(|(k, v)| format!("{k}={}", one_line(v, 120)))
            .collect();
        let data = if data.is_empty() {
            "no data".to_string()
        } else {
            data.join(", ")
        };
        format!("{data}; labels {}", show_labels(labels))
    }

    fn already(&self, ns: &str, cm: &ConfigMap, how: &str) -> Outcome {
        Outcome::new(format!(
            "ConfigMap {} {how} with the configured data and labels (resourceVersion {}): nothing changed",
            self.object(ns),
            cm.metadata.resource_version.as_deref().unwrap_or("?")
        ))
    }
}

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ns = &ctx.namespace;
            Ok(match self.inspect(ctx).await? {
                Found::Same(cm) => self.already(ns, &cm, "is already present"),
                Found::Absent => Outcome::new(format!(
                    "ConfigMap {} would be created with {} (a server-side dry run accepted it)",
                    self.object(ns),
                    Self::contents(&self.configmap.data, &self.configmap.labels)
                )),
            })
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ns = &ctx.namespace;
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
            let what = format!("ConfigMap {}", self.object(ns));
            let existing = api
                .get_opt(&self.configmap.name)
                .await
                .map_err(|e| refused_or(e, &format!("reading {what}"), Self::rule()))?;
            if let Some(cm) = existing {
                self.judge(ns, &cm)
                    .map_err(|m| ActionError::Conflict(m.to_string()))?;
                return Ok(self.already(ns, &cm, "is already present"));
            }
            match create_or_read(&api, &self.desired(ns), &what, Self::rule()).await? {
                Created::New(cm) => Ok(Outcome::new(format!(
                    "ConfigMap {} created (resourceVersion {}): {}",
                    self.object(ns),
                    cm.metadata.resource_version.as_deref().unwrap_or("?"),
                    Self::contents(
                        &cm.data.clone().unwrap_or_default(),
                        &cm.metadata.labels.clone().unwrap_or_default()
                    )
                ))),
                Created::Existing(cm) => {
                    self.judge(ns, &cm).map_err(|m| {
                        ActionError::Conflict(format!(
                            "{m} (it was created by another writer while this run created it)"
                        ))
                    })?;
                    Ok(self.already(ns, &cm, "was created concurrently by another writer"))
                }
            }
        })
    }

    /// The same reading as planning: the ConfigMap absent (and a create accepted by a
    /// server-side dry run) or present as configured; one that would fail the apply fails
    /// the stage before its first change.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move { self.inspect(ctx).await.map(|_| ()) })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn config() -> Config {
        serde_json::from_value(serde_json::json!({"configmap": {
            "name": "element-markers",
            "data": {"MATRIX_STACK_MSC3861": "legacy_auth"},
            "labels": {"app.kubernetes.io/managed-by": "matrix-tools-deployment-markers"}
        }}))
        .unwrap()
    }

    fn existing(data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
        let map = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("element-markers".into()),
                labels: Some(map(labels)),
                ..ObjectMeta::default()
            },
            data: Some(map(data)),
            ..ConfigMap::default()
        }
    }

    const LABEL: (&str, &str) = (
        "app.kubernetes.io/managed-by",
        "matrix-tools-deployment-markers",
    );

    #[test]
    fn the_same_data_and_the_configured_labels_are_success_other_labels_do_not_matter() {
        let c = config();
        assert_eq!(
            c.judge(
                "od",
                &existing(
                    &[("MATRIX_STACK_MSC3861", "legacy_auth")],
                    &[LABEL, ("helm.sh/chart", "x")]
                )
            ),
            Ok(())
        );
    }

    #[test]
    fn other_data_names_every_key_that_differs_with_its_values() {
        let c = config();
        let m = c
            .judge(
                "od",
                &existing(
                    &[("MATRIX_STACK_MSC3861", "delegated_auth"), ("EXTRA", "1")],
                    &[LABEL],
                ),
            )
            .unwrap_err();
        let text = m.to_string();
        assert!(
            text.starts_with("ConfigMap od/element-markers already exists with other data: EXTRA is not configured (it holds \"1\"); MATRIX_STACK_MSC3861 is \"delegated_auth\", configured \"legacy_auth\". Stagehand never overwrites an existing ConfigMap: find out who wrote it (kubectl -n od get configmap element-markers -o yaml)"),
            "{text}"
        );
        assert!(text.contains("actionsSkip"), "{text}");
        let missing = c.judge("od", &existing(&[], &[LABEL])).unwrap_err();
        assert_eq!(
            missing.data,
            vec![DataDiff::Missing {
                key: "MATRIX_STACK_MSC3861".into(),
                want: "legacy_auth".into()
            }]
        );
        assert!(
            missing
                .to_string()
                .contains("MATRIX_STACK_MSC3861 is missing (configured \"legacy_auth\")")
        );
    }

    #[test]
    fn binary_data_counts_as_data_the_config_does_not_have() {
        let mut cm = existing(&[("MATRIX_STACK_MSC3861", "legacy_auth")], &[LABEL]);
        cm.binary_data = Some(BTreeMap::from([(
            "blob".to_string(),
            ByteString(vec![0; 3]),
        )]));
        let m = config().judge("od", &cm).unwrap_err();
        assert_eq!(
            m.data[0].to_string(),
            "blob is not configured (it holds \"<binary, 3 bytes>\")"
        );
    }

    #[test]
    fn a_configmap_without_the_label_is_refused_naming_it_and_the_command() {
        let m = config()
            .judge(
                "od",
                &existing(&[("MATRIX_STACK_MSC3861", "legacy_auth")], &[]),
            )
            .unwrap_err();
        assert!(m.data.is_empty());
        assert_eq!(
            m.to_string(),
            "ConfigMap od/element-markers lacks the label app.kubernetes.io/managed-by=matrix-tools-deployment-markers (absent) that the tool reading it requires (matrix-tools refuses a marker without its managed-by label). Stagehand never overwrites an existing ConfigMap: find out who wrote it (kubectl -n od get configmap element-markers -o yaml); if it is the right object, add the label (kubectl -n od label configmap element-markers app.kubernetes.io/managed-by=matrix-tools-deployment-markers) and run the stage again"
        );
    }

    #[test]
    fn the_config_is_checked_for_names_the_api_server_accepts() {
        let c: Config = serde_json::from_value(serde_json::json!({"configmap": {
            "name": "Element_Markers", "data": {"a/b": "x"}, "labels": {"k": "not ok"}
        }}))
        .unwrap();
        let paths: Vec<String> = c.semantic_issues().into_iter().map(|i| i.path).collect();
        assert_eq!(
            paths,
            vec!["configmap.name", "configmap.data.a/b", "configmap.labels.k"]
        );
        assert!(config().semantic_issues().is_empty());
    }

    #[test]
    fn what_is_created_carries_the_data_and_labels() {
        let cm = config().desired("od");
        assert_eq!(cm.metadata.namespace.as_deref(), Some("od"));
        assert_eq!(config().judge("od", &cm), Ok(()));
    }
}
