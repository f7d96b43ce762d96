//! The Stagehand objects the tests apply, built in code instead of repeated YAML: a
//! [`Migration`] with its [`Action`]s, and a [`MigrationRun`]. `to_yaml()` gives the text for
//! [`crate::apply`] or `kubectl_stdin`.
//!
//! What nearly every test shares is the default (the Migration `opendesk`, release `v1.18.0`,
//! an action window `v1.15` to `v1.17`, a run of `opendesk` for `v1.18.0`), so a test's calls
//! name only what is special about its objects. A field is written only when a call sets it;
//! what is left out is what the CRDs default (no actions, no secret files, `suspend: false`).
//!
//! ```text
//! let migration = Migration::new("ns")
//!     .installed("v1.17.3")
//!     .secret_file("redis-password", "cache-intercom-service-password", "password")
//!     .pre(Action::scale("ox-connector", 0).tag("v1.18.0"))
//!     .post(Action::new("flush_intercom_sessions").config(json!({"redis": {"port": 6379}})))
//!     .to_yaml();
//! let run = MigrationRun::new("ns", "pre", "pre").dry_run(true).to_yaml();
//! ```

use serde_json::{Map, Value, json};

/// The API group of Stagehand's objects.
const GROUP: &str = "stagehand.dev";
/// The version the tests write unless they say otherwise ([`Migration::api_version`]).
const VERSION: &str = "v1beta1";
/// The release every Migration declares and every run is for, unless a test says otherwise.
pub const RELEASE: &str = "v1.18.0";
/// The Migration's name unless a test names another ([`Migration::name`]).
pub const MIGRATION: &str = "opendesk";

/// The Migration `opendesk` declaring release v1.18.0, with what a test adds.
#[derive(Debug, Clone)]
pub struct Migration {
    version: String,
    namespace: String,
    name: String,
    spec: Map<String, Value>,
    secret_files: Vec<Value>,
    skips: Vec<(String, Value)>,
    pre: Vec<Action>,
    post: Vec<Action>,
}

impl Migration {
    /// `opendesk` in `namespace`: `releaseVersion: v1.18.0` and nothing else (a fresh
    /// installation, no actions).
    pub fn new(namespace: &str) -> Self {
        let mut spec = Map::new();
        spec.insert("releaseVersion".into(), RELEASE.into());
        Self {
            version: VERSION.into(),
            namespace: namespace.into(),
            name: MIGRATION.into(),
            spec,
            secret_files: Vec::new(),
            skips: Vec::new(),
            pre: Vec::new(),
            post: Vec::new(),
        }
    }

    /// Another name than `opendesk`.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Written through another API version than v1beta1 (e.g. `v1alpha1`).
    pub fn api_version(mut self, version: &str) -> Self {
        self.version = version.into();
        self
    }

    /// `installedRelease`: the release deployed before (adopting an installation).
    pub fn installed(self, release: &str) -> Self {
        self.spec_field("installedRelease", release.into())
    }

    /// `suspend`.
    pub fn suspend(self, suspend: bool) -> Self {
        self.spec_field("suspend", suspend.into())
    }

    /// `runHistoryLimit`.
    pub fn run_history_limit(self, limit: u32) -> Self {
        self.spec_field("runHistoryLimit", limit.into())
    }

    /// `serviceAccountName`: the ServiceAccount the runs impersonate.
    pub fn service_account(self, name: &str) -> Self {
        self.spec_field("serviceAccountName", name.into())
    }

    /// One more `secretFiles` entry: the credential `name` from key `key` of Secret `secret`.
    pub fn secret_file(mut self, name: &str, secret: &str, key: &str) -> Self {
        self.secret_files
            .push(json!({"name": name, "secret": {"name": secret, "key": key}}));
        self
    }

    /// `objectStore` (the handover store's endpoint, bucket, identity).
    pub fn object_store(self, store: Value) -> Self {
        self.spec_field("objectStore", store)
    }

    /// One more `actionsSkip` entry of `stage` (`pre` or `post`): the opt-out of action `id`
    /// tagged `tag`.
    pub fn skip(mut self, stage: &str, id: &str, tag: &str) -> Self {
        self.skips
            .push((stage.into(), json!({"id": id, "tag": tag})));
        self
    }

    /// One more action of the pre stage.
    pub fn pre(mut self, action: Action) -> Self {
        self.pre.push(action);
        self
    }

    /// One more action of the post stage.
    pub fn post(mut self, action: Action) -> Self {
        self.post.push(action);
        self
    }

    /// The object.
    pub fn to_value(&self) -> Value {
        let mut spec = self.spec.clone();
        if !self.secret_files.is_empty() {
            spec.insert("secretFiles".into(), self.secret_files.clone().into());
        }
        let mut skips = Map::new();
        for (stage, skip) in &self.skips {
            if let Value::Array(list) = skips.entry(stage).or_insert_with(|| json!([])) {
                list.push(skip.clone());
            }
        }
        if !skips.is_empty() {
            spec.insert("actionsSkip".into(), skips.into());
        }
        let mut actions = Map::new();
        for (stage, list) in [("pre", &self.pre), ("post", &self.post)] {
            if !list.is_empty() {
                actions.insert(stage.into(), list.iter().map(|a| a.0.clone()).collect());
            }
        }
        if !actions.is_empty() {
            spec.insert("actions".into(), actions.into());
        }
        json!({
            "apiVersion": format!("{GROUP}/{}", self.version),
            "kind": "Migration",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        })
    }

    /// The object as YAML.
    pub fn to_yaml(&self) -> String {
        yaml(&self.to_value())
    }

    fn spec_field(mut self, key: &str, value: Value) -> Self {
        self.spec.insert(key.into(), value);
        self
    }
}

/// One action a Migration declares: an `id`, the window `v1.15`/`v1.15`/`v1.17` unless
/// [`versions`](Self::versions) says otherwise, and what a test adds. Serializes as the
/// declaration (for Helm values that hold one).
#[derive(Debug, Clone)]
pub struct Action(Value);

impl Action {
    /// Action `id` in the window v1.15 to v1.17, untagged, without config.
    pub fn new(id: &str) -> Self {
        Self(json!({
            "id": id,
            "versions": {"minimum": "v1.15", "from": "v1.15", "to": "v1.17"},
        }))
    }

    /// `workload_scale` of StatefulSet `sts` to `replicas`, waiting at most 60 s for the pods.
    pub fn scale(sts: &str, replicas: u32) -> Self {
        Self::new("workload_scale").config(json!({"workload": {
            "kind": "StatefulSet", "name": sts, "replicas": replicas, "timeoutSeconds": 60,
        }}))
    }

    /// `workload_scale` of StatefulSet `sts` to `replicas` with the action's default timeout
    /// (for declarations whose action is skipped or fails before it waits).
    pub fn scale_without_timeout(sts: &str, replicas: u32) -> Self {
        Self::new("workload_scale").config(json!({"workload": {
            "kind": "StatefulSet", "name": sts, "replicas": replicas,
        }}))
    }

    /// `tag` (a tagged action runs once per tag: its footprint is recorded).
    pub fn tag(self, tag: &str) -> Self {
        self.field("tag", tag.into())
    }

    /// `runMode`.
    pub fn run_mode(self, mode: &str) -> Self {
        self.field("runMode", mode.into())
    }

    /// Another `versions` window (any object: the schema tests give malformed ones).
    pub fn versions(self, window: Value) -> Self {
        self.field("versions", window)
    }

    /// `config`, the action's parameters.
    pub fn config(self, config: Value) -> Self {
        self.field("config", config)
    }

    fn field(mut self, key: &str, value: Value) -> Self {
        if let Some(fields) = self.0.as_object_mut() {
            fields.insert(key.into(), value);
        }
        self
    }
}

impl serde::Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A MigrationRun of `opendesk` for release v1.18.0, with what a test adds.
#[derive(Debug, Clone)]
pub struct MigrationRun {
    version: String,
    metadata: Map<String, Value>,
    spec: Map<String, Value>,
}

impl MigrationRun {
    /// Run `name` in `namespace` of stage `stage` (`pre` or `post`; the schema tests give
    /// others).
    pub fn new(namespace: &str, name: &str, stage: &str) -> Self {
        Self::with_metadata(json!({"name": name, "namespace": namespace}), stage)
    }

    /// A run whose name the API server generates from `prefix` (`kubectl create`), as an Argo
    /// CD hook or a pipeline creates one on every deployment.
    pub fn generated(namespace: &str, prefix: &str, stage: &str) -> Self {
        Self::with_metadata(
            json!({"generateName": prefix, "namespace": namespace}),
            stage,
        )
    }

    fn with_metadata(metadata: Value, stage: &str) -> Self {
        let mut spec = Map::new();
        spec.insert("migrationRef".into(), MIGRATION.into());
        spec.insert("stage".into(), stage.into());
        spec.insert("release".into(), RELEASE.into());
        Self {
            version: VERSION.into(),
            metadata: match metadata {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            spec,
        }
    }

    /// A run of another Migration than `opendesk`.
    pub fn of(self, migration: &str) -> Self {
        self.spec_field("migrationRef", migration.into())
    }

    /// For another release than v1.18.0.
    pub fn release(self, release: &str) -> Self {
        self.spec_field("release", release.into())
    }

    /// `dryRun`.
    pub fn dry_run(self, dry_run: bool) -> Self {
        self.spec_field("dryRun", dry_run.into())
    }

    /// `waitTimeoutSeconds`.
    pub fn wait_timeout_seconds(self, seconds: u64) -> Self {
        self.spec_field("waitTimeoutSeconds", seconds.into())
    }

    /// `approval` (`Manual`: the run waits for its plan to be approved).
    pub fn approval(self, approval: &str) -> Self {
        self.spec_field("approval", approval.into())
    }

    /// Written through another API version than v1beta1 (e.g. `v1alpha1`).
    pub fn api_version(mut self, version: &str) -> Self {
        self.version = version.into();
        self
    }

    /// The object.
    pub fn to_value(&self) -> Value {
        json!({
            "apiVersion": format!("{GROUP}/{}", self.version),
            "kind": "MigrationRun",
            "metadata": self.metadata,
            "spec": self.spec,
        })
    }

    /// The object as YAML.
    pub fn to_yaml(&self) -> String {
        yaml(&self.to_value())
    }

    fn spec_field(mut self, key: &str, value: Value) -> Self {
        self.spec.insert(key.into(), value);
        self
    }
}

/// `value` as a YAML document.
pub fn yaml(value: &Value) -> String {
    match serde_norway::to_string(value) {
        Ok(text) => text,
        Err(e) => panic!("cannot write {value} as YAML: {e}"),
    }
}
