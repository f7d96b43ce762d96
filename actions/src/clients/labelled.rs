//! ConfigMaps and Secrets Stagehand writes for another tool to read (openDesk v1.19's
//! `element-markers` marker and the `element-generated` Secret that matrix-tools owns): the
//! labels that tool insists on, compared with what an existing object carries; the names and
//! keys the API server accepts, checked before a run; a create that may race with another
//! writer; and a refused request's message naming the chart rule to add. Shared by
//! `configmap_create` and `synapse_signing_key_export`.

use std::collections::BTreeMap;
use std::fmt;

use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::action::ActionError;
use crate::text::one_line;

/// A configured label an existing object does not carry as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelLack {
    /// The label's key.
    pub key: String,
    /// The configured value.
    pub want: String,
    /// The value the object carries instead, if any.
    pub have: Option<String>,
}

impl fmt::Display for LabelLack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.have {
            None => write!(f, "{}={} (absent)", self.key, self.want),
            Some(have) => write!(
                f,
                "{}={} (it has {}={})",
                self.key,
                self.want,
                self.key,
                one_line(have, 100)
            ),
        }
    }
}

/// The configured labels (`want`) that `have` lacks or carries with another value; labels
/// that are not configured do not matter. Empty: every configured label is there.
pub fn labels_lacking(
    have: Option<&BTreeMap<String, String>>,
    want: &BTreeMap<String, String>,
) -> Vec<LabelLack> {
    want.iter()
        .filter_map(|(key, value)| {
            let found = have.and_then(|h| h.get(key));
            (found != Some(value)).then(|| LabelLack {
                key: key.clone(),
                want: value.clone(),
                have: found.cloned(),
            })
        })
        .collect()
}

/// `k=v, k2=v2`, or `none`.
pub fn show_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "none".into();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={}", one_line(v, 100)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `kubectl label` command that gives `kind/name` in `namespace` the lacking labels
/// (`--overwrite` when one of them has another value).
pub fn label_command(kind: &str, namespace: &str, name: &str, lacking: &[LabelLack]) -> String {
    let overwrite = if lacking.iter().any(|l| l.have.is_some()) {
        " --overwrite"
    } else {
        ""
    };
    let labels: Vec<String> = lacking
        .iter()
        .map(|l| format!("{}={}", l.key, l.want))
        .collect();
    format!(
        "kubectl -n {namespace} label {kind} {name} {}{overwrite}",
        labels.join(" ")
    )
}

/// Why `name` is not an object name the API server accepts (a DNS-1123 subdomain: at most
/// 253 characters of lower-case letters, digits, `-` and `.`, starting and ending with a
/// letter or digit), or `None`.
pub fn name_issue(name: &str) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name.starts_with(alnum)
        && name.ends_with(alnum);
    (!ok).then(|| {
        format!(
            "{name:?} is not a Kubernetes object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters"
        )
    })
}

/// Why `key` is not a ConfigMap or Secret data key (`[-._a-zA-Z0-9]+`, at most 253
/// characters), or `None`.
pub fn data_key_issue(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    (!ok).then(|| {
        format!(
            "{key:?} is not a ConfigMap or Secret key: letters, digits, '-', '.' and '_', at most 253 characters"
        )
    })
}

/// Why `value` is not a label value (at most 63 letters, digits, `-`, `_`, `.`, starting and
/// ending with a letter or digit, or empty), or `None`.
pub fn label_value_issue(value: &str) -> Option<String> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    (!ok).then(|| {
        format!(
            "{value:?} is not a label value: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    })
}

/// What a create that may race with another writer found.
#[derive(Debug)]
pub enum Created<K> {
    /// The server created it: its answer.
    New(K),
    /// Another writer created it first (409 AlreadyExists): the object read back.
    Existing(K),
}

/// Creates `object` through `api`; when the name is already taken (409 AlreadyExists), reads
/// the object that holds it instead, for the caller to judge. `what` names the object in
/// messages (`ConfigMap opendesk/element-markers`); `rule` says which chart rule grants the
/// request, for a 403.
pub async fn create_or_read<K>(
    api: &Api<K>,
    object: &K,
    what: &str,
    rule: &str,
) -> Result<Created<K>, ActionError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(created) => Ok(Created::New(created)),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let name = object.name_any();
            match api.get_opt(&name).await {
                Ok(Some(existing)) => Ok(Created::Existing(existing)),
                Ok(None) => Err(ActionError::Conflict(format!(
                    "creating {what}: the name was taken (409 AlreadyExists) and the object is gone again when read back: another writer is creating and deleting it; find it and run the stage again"
                ))),
                Err(e) => Err(refused_or(
                    e,
                    &format!("reading {what} back after a 409 AlreadyExists"),
                    rule,
                )),
            }
        }
        Err(e) => Err(refused_or(e, &format!("creating {what}"), rule)),
    }
}

/// A kube error of `doing`: a 403 is [`ActionError::Refused`] naming the chart `rule` to add,
/// anything else [`ActionError::Kubernetes`].
pub fn refused_or(e: kube::Error, doing: &str, rule: &str) -> ActionError {
    match e {
        kube::Error::Api(status) if status.code == 403 => ActionError::Refused(format!(
            "{doing}: the operator is not allowed to (403 Forbidden: {}): {rule}",
            one_line(&status.message, 300)
        )),
        source => ActionError::Kubernetes {
            context: doing.to_string(),
            source,
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn only_configured_labels_count() {
        let want = map(&[("app.kubernetes.io/managed-by", "matrix-tools-init-secrets")]);
        let have = map(&[
            ("app.kubernetes.io/managed-by", "matrix-tools-init-secrets"),
            ("team", "chat"),
        ]);
        assert!(labels_lacking(Some(&have), &want).is_empty());
        assert!(labels_lacking(None, &BTreeMap::new()).is_empty());
        let lacking = labels_lacking(None, &want);
        assert_eq!(
            lacking[0].to_string(),
            "app.kubernetes.io/managed-by=matrix-tools-init-secrets (absent)"
        );
        let other = map(&[("app.kubernetes.io/managed-by", "Helm")]);
        let lacking = labels_lacking(Some(&other), &want);
        assert_eq!(
            lacking[0].to_string(),
            "app.kubernetes.io/managed-by=matrix-tools-init-secrets (it has app.kubernetes.io/managed-by=Helm)"
        );
        assert_eq!(
            label_command("secret", "od", "element-generated", &lacking),
            "kubectl -n od label secret element-generated app.kubernetes.io/managed-by=matrix-tools-init-secrets --overwrite"
        );
        assert_eq!(show_labels(&BTreeMap::new()), "none");
        assert_eq!(
            show_labels(&have),
            "app.kubernetes.io/managed-by=matrix-tools-init-secrets, team=chat"
        );
    }

    #[test]
    fn names_keys_and_label_values_the_api_server_accepts() {
        assert_eq!(name_issue("element-markers"), None);
        assert_eq!(name_issue("a.b-1"), None);
        assert!(name_issue("Element").unwrap().contains("\"Element\""));
        assert!(name_issue("-x").is_some());
        assert!(name_issue("").is_some());
        assert_eq!(data_key_issue("MATRIX_STACK_MSC3861"), None);
        assert_eq!(data_key_issue("a.b-c_d"), None);
        assert!(data_key_issue("a/b").is_some());
        assert!(data_key_issue("").is_some());
        assert_eq!(label_value_issue("matrix-tools-deployment-markers"), None);
        assert_eq!(label_value_issue(""), None);
        assert!(label_value_issue("a b").is_some());
        assert!(label_value_issue(&"x".repeat(64)).is_some());
    }
}
