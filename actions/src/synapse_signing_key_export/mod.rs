//! `synapse_signing_key_export` (openDesk v1.19, pre): copies the signing key the old Synapse
//! generated onto its volume into the Secret the Element chart reads, so that the homeserver
//! keeps its identity. The key file is read by exec in the old Synapse pod (`source`) and parsed
//! as Synapse reads it ([`key_file`]); the Secret (`target`) is created with the configured
//! labels and the file as Synapse wrote it, or given the key when it carries those labels and
//! lacks it. An equal key already there is success; a different one is a failure that changes
//! nothing ([`Config::decide`]). The key's value goes nowhere but into the Secret: it is held as a
//! [`SecretValue`], and summaries and errors name keys by algorithm and key id only.

pub mod key_file;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stagehand_config::ConfigIssue;

use crate::action::{Action, ActionConfig, ActionContext, ActionError, Outcome, SecretValue};
use crate::clients::labelled::{
    Created, LabelLack, create_or_read, data_key_issue, label_command, label_value_issue,
    labels_lacking, name_issue, refused_or,
};
use crate::clients::ldap::LdapError;
use crate::clients::ldap::exec::preflight::ExecProblem;
use crate::clients::ldap::exec::{CommandRunner, KubeExec};
use crate::text::one_line;
use key_file::{KeyFile, KeyFileError};

/// The action's config; every key defaults to what openDesk v1.19 renders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Where the old Synapse keeps its key file.
    #[serde(default)]
    pub source: Source,
    /// The Secret the key goes to.
    #[serde(default)]
    pub target: Target,
}

/// The key file in the old Synapse pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Source {
    /// The pod, in the Migration's namespace.
    #[serde(default = "default_pod")]
    #[schemars(length(min = 1))]
    pub pod: String,
    /// Its container that sees the file.
    #[serde(default = "default_container")]
    #[schemars(length(min = 1))]
    pub container: String,
    /// The file's absolute path in that container.
    #[serde(default = "default_path")]
    #[schemars(length(min = 1))]
    pub path: String,
}

/// The Secret and its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Target {
    /// The Secret, in the Migration's namespace.
    #[serde(default = "default_secret")]
    #[schemars(length(min = 1))]
    pub secret: String,
    /// The key of its data that holds the key file.
    #[serde(default = "default_key")]
    #[schemars(length(min = 1))]
    pub key: String,
    /// Labels the Secret must carry: a created one gets them, an existing one without them is
    /// not written to.
    #[serde(default = "default_labels")]
    pub labels: BTreeMap<String, String>,
}

fn default_pod() -> String {
    "opendesk-synapse-0".into()
}
fn default_container() -> String {
    "synapse".into()
}
fn default_path() -> String {
    "/media/generatedSecrets/signingKey".into()
}
fn default_secret() -> String {
    "element-generated".into()
}
fn default_key() -> String {
    "SYNAPSE_SIGNING_KEY".into()
}
fn default_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "matrix-tools-init-secrets".to_string(),
    )])
}

impl Default for Source {
    fn default() -> Self {
        Self {
            pod: default_pod(),
            container: default_container(),
            path: default_path(),
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Self {
            secret: default_secret(),
            key: default_key(),
            labels: default_labels(),
        }
    }
}

impl ActionConfig for Config {
    const ID: &'static str = "synapse_signing_key_export";

    fn semantic_issues(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        let mut push = |path: String, message: Option<String>| {
            if let Some(message) = message {
                issues.push(ConfigIssue { path, message });
            }
        };
        push("source.pod".into(), name_issue(&self.source.pod));
        push(
            "source.path".into(),
            (!self.source.path.starts_with('/'))
                .then(|| format!("{:?} is not an absolute path", self.source.path)),
        );
        push("target.secret".into(), name_issue(&self.target.secret));
        push("target.key".into(), data_key_issue(&self.target.key));
        for (key, value) in &self.target.labels {
            push(format!("target.labels.{key}"), label_value_issue(value));
        }
        issues
    }
}

/// How long reading the key file by exec may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The key file read from the pod: as Synapse wrote it (what goes into the Secret), and parsed.
#[derive(Debug)]
struct Read {
    content: SecretValue,
    keys: KeyFile,
}

/// What to do with the Secret, given the key file and what the cluster holds (see [`Config::decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The Secret does not exist: create it with the labels and the key.
    Create,
    /// It holds an equal key: nothing to do.
    Nothing,
    /// It carries the labels and lacks the key: add the key.
    AddKey,
}

/// Why the Secret cannot take the key. Names keys by algorithm and key id only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It holds another key.
    #[error(
        "Secret {secret} already holds another signing key under {key}: {have} there, {want} in {source_file}. Nothing was changed: a new key would change the homeserver's identity. Find out which key this homeserver signs with (its /_matrix/key/v2/server names the key id); if the Secret's is right, skip this action for the release (actionsSkip), otherwise remove the key from the Secret and run the stage again"
    )]
    DifferentKey {
        /// `namespace/name`.
        secret: String,
        /// The data key.
        key: String,
        /// The Secret's keys (`ed25519:a_x`).
        have: String,
        /// The file's keys.
        want: String,
        /// Where the file was read.
        source_file: String,
    },
    /// Its value under the key is not a key file.
    #[error(
        "Secret {secret} holds something under {key} that is not a Synapse signing key ({problem}). Nothing was changed: remove that key from the Secret (or correct it) and run the stage again"
    )]
    Unreadable {
        /// `namespace/name`.
        secret: String,
        /// The data key.
        key: String,
        /// What is wrong with it (line number and kind, never content).
        problem: KeyFileError,
    },
    /// It lacks a configured label.
    #[error(
        "Secret {secret} lacks the label {lacking}: matrix-tools init-secrets refuses a Secret without its managed-by label, and Stagehand does not write to a Secret it did not create without it. Nothing was changed: if it is the right Secret, add the label ({command}) and run the stage again"
    )]
    Labels {
        /// `namespace/name`.
        secret: String,
        /// The labels lacking.
        lacking: String,
        /// The `kubectl label` command adding them.
        command: String,
    },
}

impl From<Refusal> for ActionError {
    fn from(r: Refusal) -> Self {
        ActionError::Conflict(r.to_string())
    }
}

impl Config {
    fn source_file(&self, namespace: &str) -> String {
        format!(
            "{} in container {} of pod {namespace}/{}",
            self.source.path, self.source.container, self.source.pod
        )
    }

    fn secret_name(&self, namespace: &str) -> String {
        format!("{namespace}/{}", self.target.secret)
    }

    fn rule(&self) -> String {
        format!(
            "add {} to rbac.signingKeySecrets in the chart values (Role rules: secrets get and update by name, secrets create)",
            self.target.secret
        )
    }

    /// What to do with `secret` (as read, `None` when absent) for the key file `file` (pure):
    /// the rule of this action.
    pub fn decide(
        &self,
        namespace: &str,
        file: &KeyFile,
        secret: Option<&Secret>,
    ) -> Result<Step, Refusal> {
        let Some(secret) = secret else {
            return Ok(Step::Create);
        };
        let lacking: Vec<LabelLack> =
            labels_lacking(secret.metadata.labels.as_ref(), &self.target.labels);
        let held = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&self.target.key))
            .map(|b| b.0.as_slice())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(&self.target.key))
                    .map(|s| s.as_bytes())
            });
        if let Some(held) = held {
            let have = key_file::parse(held).map_err(|problem| Refusal::Unreadable {
                secret: self.secret_name(namespace),
                key: self.target.key.clone(),
                problem,
            })?;
            if &have != file {
                return Err(Refusal::DifferentKey {
                    secret: self.secret_name(namespace),
                    key: self.target.key.clone(),
                    have: have.to_string(),
                    want: file.to_string(),
                    source_file: self.source_file(namespace),
                });
            }
        }
        if !lacking.is_empty() {
            return Err(Refusal::Labels {
                secret: self.secret_name(namespace),
                lacking: lacking
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                command: label_command("secret", namespace, &self.target.secret, &lacking),
            });
        }
        Ok(if held.is_some() {
            Step::Nothing
        } else {
            Step::AddKey
        })
    }

    /// Proves the pod, its container and the exec right, then reads and parses the key file.
    async fn read_key(&self, ctx: &ActionContext) -> Result<Read, ActionError> {
        let runner = KubeExec::new(
            ctx.client.clone(),
            &ctx.namespace,
            &self.source.pod,
            &self.source.container,
        );
        runner
            .check_target()
            .await
            .map_err(|p| self.source_problem(p))?;
        let argv: Vec<String> = ["cat", "--", &self.source.path]
            .iter()
            .map(|s| (*s).to_string())
            .collect();
        let where_ = self.source_file(&ctx.namespace);
        let out = match tokio::time::timeout(READ_TIMEOUT, runner.run(&argv, None)).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                let message = match e {
                    LdapError::Exec { message, .. } => message,
                    other => other.to_string(),
                };
                return Err(ActionError::Failed(format!(
                    "reading the signing key file {where_}: {message}"
                )));
            }
            Err(_) => {
                return Err(ActionError::Unavailable(format!(
                    "reading the signing key file {where_}: no answer within {} s: check the pod (kubectl -n {} describe pod {})",
                    READ_TIMEOUT.as_secs(),
                    ctx.namespace,
                    self.source.pod
                )));
            }
        };
        if !out.success {
            let stderr = one_line(&String::from_utf8_lossy(&out.stderr), 300);
            let missing = stderr.contains("No such file");
            let message = format!(
                "reading the signing key file {where_} failed ({}){}{}",
                out.status,
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {stderr}")
                },
                if missing {
                    ": set source.path to the key file of the old Synapse (its homeserver.yaml names it as signing_key_path), and keep that Synapse running until the export succeeded"
                } else {
                    ""
                }
            );
            return Err(if missing {
                ActionError::NotFound(message)
            } else {
                ActionError::Failed(message)
            });
        }
        let keys = key_file::parse(&out.stdout).map_err(|e| {
            ActionError::InvalidAnswer(format!(
                "the file {where_} is not a Synapse signing key file: {e}; set source.path to the old Synapse's signing key (its homeserver.yaml names it as signing_key_path)"
            ))
        })?;
        // Parsing proved it UTF-8.
        let content = SecretValue::new(String::from_utf8_lossy(&out.stdout).into_owned());
        Ok(Read { content, keys })
    }

    /// The exec transport's proof, in this action's words (its keys, its chart value).
    fn source_problem(&self, problem: ExecProblem) -> ActionError {
        let hint = format!(
            "add {} to rbac.synapseExecPods in the chart values (Role rules: pods get and pods/exec create, resourceNames)",
            self.source.pod
        );
        match problem {
            ExecProblem::PodNotFound { namespace, pod } => ActionError::NotFound(format!(
                "pod {namespace}/{pod} not found: set source.pod to the old Synapse's pod (kubectl -n {namespace} get pods); the key can only be exported while it still runs"
            )),
            ExecProblem::PodForbidden {
                namespace,
                pod,
                answer,
            } => ActionError::Refused(format!(
                "the operator may not read pod {namespace}/{pod} (403 Forbidden: {answer}): {hint}"
            )),
            ExecProblem::ExecForbidden {
                namespace,
                pod,
                reason,
            } => ActionError::Refused(format!(
                "the operator may not create pods/exec on pod {namespace}/{pod} ({reason}): {hint}"
            )),
            ExecProblem::PodNotRunning {
                namespace,
                pod,
                state,
            } => ActionError::Failed(format!(
                "pod {namespace}/{pod} is {state}, not Running: the key file is read from the running old Synapse; start the stage while it runs (kubectl -n {namespace} get pod {pod})"
            )),
            ExecProblem::ContainerMissing {
                namespace,
                pod,
                container,
                containers,
            } => ActionError::NotFound(format!(
                "pod {namespace}/{pod} has no container {container} (it has: {containers}): set source.container to Synapse's container"
            )),
            ExecProblem::ContainerNotRunning {
                namespace,
                pod,
                container,
                state,
            } => ActionError::Failed(format!(
                "container {container} of pod {namespace}/{pod} is not running ({state}): wait until Synapse runs (kubectl -n {namespace} describe pod {pod}) and start the run again"
            )),
            other => ActionError::Failed(other.to_string()),
        }
    }

    fn api(ctx: &ActionContext) -> Api<Secret> {
        Api::namespaced(ctx.client.clone(), &ctx.namespace)
    }

    async fn read_secret(&self, ctx: &ActionContext) -> Result<Option<Secret>, ActionError> {
        Self::api(ctx)
            .get_opt(&self.target.secret)
            .await
            .map_err(|e| {
                refused_or(
                    e,
                    &format!("reading Secret {}", self.secret_name(&ctx.namespace)),
                    &self.rule(),
                )
            })
    }

    /// The Secret to create.
    fn new_secret(&self, namespace: &str, content: &SecretValue) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.target.secret.clone()),
                namespace: Some(namespace.to_string()),
                labels: (!self.target.labels.is_empty()).then(|| self.target.labels.clone()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                self.target.key.clone(),
                ByteString(content.expose().as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    /// `secret` with the key added (its resourceVersion kept: the update is refused when the
    /// Secret changed since it was read).
    fn with_key(&self, mut secret: Secret, content: &SecretValue) -> Secret {
        secret.data.get_or_insert_with(BTreeMap::new).insert(
            self.target.key.clone(),
            ByteString(content.expose().as_bytes().to_vec()),
        );
        secret
    }

    /// Everything apply needs, read-only: the key file, the Secret, the rule's decision, and the
    /// write it would make accepted by a server-side dry run.
    async fn inspect(&self, ctx: &ActionContext) -> Result<(Read, Step), ActionError> {
        let read = self.read_key(ctx).await?;
        let secret = self.read_secret(ctx).await?;
        let step = self.decide(&ctx.namespace, &read.keys, secret.as_ref())?;
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let what = format!("Secret {}", self.secret_name(&ctx.namespace));
        match (&step, secret) {
            (Step::Create, _) => {
                Self::api(ctx)
                    .create(&dry, &self.new_secret(&ctx.namespace, &read.content))
                    .await
                    .map_err(|e| {
                        refused_or(
                            e,
                            &format!("creating {what} (server-side dry run)"),
                            &self.rule(),
                        )
                    })?;
            }
            (Step::AddKey, Some(secret)) => {
                Self::api(ctx)
                    .replace(
                        &self.target.secret,
                        &dry,
                        &self.with_key(secret, &read.content),
                    )
                    .await
                    .map_err(|e| {
                        refused_or(
                            e,
                            &format!("adding {} to {what} (server-side dry run)", self.target.key),
                            &self.rule(),
                        )
                    })?;
            }
            _ => {}
        }
        Ok((read, step))
    }

    fn done(&self, ns: &str, keys: &KeyFile, how: &str, version: Option<&str>) -> Outcome {
        Outcome::new(format!(
            "Secret {} {how} (resourceVersion {}): signing key {} under {}, read from {}",
            self.secret_name(ns),
            version.unwrap_or("?"),
            keys,
            self.target.key,
            self.source_file(ns)
        ))
    }
}

/// How often apply reads the Secret again when another writer changed it in between.
const ATTEMPTS: usize = 3;

impl Action for Config {
    fn plan<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ns = &ctx.namespace;
            let (read, step) = self.inspect(ctx).await?;
            let what = match step {
                Step::Create => format!(
                    "Secret {} would be created with the labels and the signing key {} under {}",
                    self.secret_name(ns),
                    read.keys,
                    self.target.key
                ),
                Step::AddKey => format!(
                    "the signing key {} would be added to Secret {} under {}",
                    read.keys,
                    self.secret_name(ns),
                    self.target.key
                ),
                Step::Nothing => format!(
                    "Secret {} already holds the signing key {} under {}: nothing to do",
                    self.secret_name(ns),
                    read.keys,
                    self.target.key
                ),
            };
            let proved = if step == Step::Nothing {
                ""
            } else {
                " (a server-side dry run accepted it)"
            };
            Ok(Outcome::new(format!(
                "{what}{proved}; read from {}",
                self.source_file(ns)
            )))
        })
    }

    fn apply<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<Outcome, ActionError>> {
        Box::pin(async move {
            let ns = &ctx.namespace;
            let read = self.read_key(ctx).await?;
            let api = Self::api(ctx);
            let what = format!("Secret {}", self.secret_name(ns));
            let mut secret = self.read_secret(ctx).await?;
            for _ in 0..ATTEMPTS {
                match self.decide(ns, &read.keys, secret.as_ref())? {
                    Step::Nothing => {
                        let version = secret
                            .as_ref()
                            .and_then(|s| s.metadata.resource_version.clone());
                        return Ok(self.done(
                            ns,
                            &read.keys,
                            "already holds it, nothing changed",
                            version.as_deref(),
                        ));
                    }
                    Step::Create => {
                        match create_or_read(
                            &api,
                            &self.new_secret(ns, &read.content),
                            &what,
                            &self.rule(),
                        )
                        .await?
                        {
                            Created::New(s) => {
                                return Ok(self.done(
                                    ns,
                                    &read.keys,
                                    "created with the labels",
                                    s.metadata.resource_version.as_deref(),
                                ));
                            }
                            Created::Existing(s) => secret = Some(s),
                        }
                    }
                    Step::AddKey => {
                        let Some(current) = secret.take() else {
                            continue;
                        };
                        match api
                            .replace(
                                &self.target.secret,
                                &PostParams::default(),
                                &self.with_key(current, &read.content),
                            )
                            .await
                        {
                            Ok(s) => {
                                return Ok(self.done(
                                    ns,
                                    &read.keys,
                                    "given the key",
                                    s.metadata.resource_version.as_deref(),
                                ));
                            }
                            // Changed since it was read: judge it again as it is now.
                            Err(kube::Error::Api(status)) if status.code == 409 => {
                                secret = self.read_secret(ctx).await?;
                            }
                            Err(e) => {
                                return Err(refused_or(
                                    e,
                                    &format!("adding {} to {what}", self.target.key),
                                    &self.rule(),
                                ));
                            }
                        }
                    }
                }
            }
            Err(ActionError::Conflict(format!(
                "{what} kept changing while the signing key was being written ({ATTEMPTS} attempts): another writer is changing it; find it and run the stage again"
            )))
        })
    }

    /// The same reading as planning: the pod, the container and the exec right, the key file
    /// read and parsed, the Secret judged (another key or a missing label fails here), and the
    /// write accepted by a server-side dry run.
    fn preflight<'a>(&'a self, ctx: &'a ActionContext) -> BoxFuture<'a, Result<(), ActionError>> {
        Box::pin(async move { self.inspect(ctx).await.map(|_| ()) })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(id: &str, seed: u8) -> KeyFile {
        key_file::parse(key_file::line(id, &[seed; 32]).as_bytes()).unwrap()
    }

    fn secret(key: Option<&str>, labelled: bool) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("element-generated".into()),
                labels: labelled.then(default_labels),
                ..ObjectMeta::default()
            },
            data: key.map(|k| {
                BTreeMap::from([(
                    "SYNAPSE_SIGNING_KEY".to_string(),
                    ByteString(k.as_bytes().to_vec()),
                )])
            }),
            ..Secret::default()
        }
    }

    #[test]
    fn the_defaults_are_what_opendesk_renders() {
        let c: Config = serde_json::from_value(serde_json::json!({})).unwrap();
        let v4: Config = serde_json::from_value(serde_json::json!({
            "source": {"pod": "opendesk-synapse-0", "container": "synapse", "path": "/media/generatedSecrets/signingKey"},
            "target": {"secret": "element-generated", "key": "SYNAPSE_SIGNING_KEY",
                       "labels": {"app.kubernetes.io/managed-by": "matrix-tools-init-secrets"}}
        }))
        .unwrap();
        assert_eq!(c, v4);
        assert!(c.semantic_issues().is_empty());
        let bad: Config = serde_json::from_value(serde_json::json!({
            "source": {"path": "signingKey"}, "target": {"key": "a/b"}
        }))
        .unwrap();
        let paths: Vec<String> = bad.semantic_issues().into_iter().map(|i| i.path).collect();
        assert_eq!(paths, vec!["source.path", "target.key"]);
    }

    #[test]
    fn the_rule_absent_equal_different_unlabelled() {
        let c = Config {
            source: Source::default(),
            target: Target::default(),
        };
        let f = file("a_VPhV", 1);
        let same = key_file::line("a_VPhV", &[1; 32]);
        assert_eq!(c.decide("od", &f, None), Ok(Step::Create));
        // Trailing whitespace does not make another key.
        let padded = format!("{same}  \n\n");
        assert_eq!(
            c.decide("od", &f, Some(&secret(Some(&padded), true))),
            Ok(Step::Nothing)
        );
        assert_eq!(
            c.decide("od", &f, Some(&secret(None, true))),
            Ok(Step::AddKey)
        );
        let other = key_file::line("a_Othr", &[2; 32]);
        let e = c
            .decide("od", &f, Some(&secret(Some(&other), true)))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Secret od/element-generated already holds another signing key under SYNAPSE_SIGNING_KEY: ed25519:a_Othr there, ed25519:a_VPhV in /media/generatedSecrets/signingKey in container synapse of pod od/opendesk-synapse-0. Nothing was changed"),
            "{e}"
        );
        // The same key id with another seed is another key, named by id only.
        let reseeded = key_file::line("a_VPhV", &[3; 32]);
        let e = c
            .decide("od", &f, Some(&secret(Some(&reseeded), true)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ed25519:a_VPhV there, ed25519:a_VPhV in"), "{e}");
        for seed in [&same, &other, &reseeded] {
            let b64 = seed.split_whitespace().nth(2).unwrap();
            assert!(!e.contains(b64), "{e}");
        }
        let e = c
            .decide("od", &f, Some(&secret(None, false)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "Secret od/element-generated lacks the label app.kubernetes.io/managed-by=matrix-tools-init-secrets (absent): matrix-tools init-secrets refuses a Secret without its managed-by label, and Stagehand does not write to a Secret it did not create without it. Nothing was changed: if it is the right Secret, add the label (kubectl -n od label secret element-generated app.kubernetes.io/managed-by=matrix-tools-init-secrets) and run the stage again"
        );
        // An equal key in a Secret without the label: matrix-tools would refuse it.
        assert!(matches!(
            c.decide("od", &f, Some(&secret(Some(&same), false))),
            Err(Refusal::Labels { .. })
        ));
        let e = c
            .decide("od", &f, Some(&secret(Some("ed25519 a_x"), true)))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("Secret od/element-generated holds something under SYNAPSE_SIGNING_KEY that is not a Synapse signing key (line 1: 2 whitespace-separated fields"),
            "{e}"
        );
    }

    #[test]
    fn what_is_written_is_the_file_as_synapse_wrote_it() {
        let c = Config {
            source: Source::default(),
            target: Target::default(),
        };
        let content = SecretValue::new(format!("{}\n", key_file::line("a_1", &[9; 32])));
        let s = c.new_secret("od", &content);
        assert_eq!(
            s.data.as_ref().unwrap()["SYNAPSE_SIGNING_KEY"].0,
            content.expose().as_bytes()
        );
        assert_eq!(s.metadata.labels, Some(default_labels()));
        let debug = format!(
            "{:?}",
            Read {
                content: content.clone(),
                keys: file("a_1", 9)
            }
        );
        assert!(
            !debug.contains(&key_file::line("a_1", &[9; 32])[14..]),
            "{debug}"
        );
    }
}
