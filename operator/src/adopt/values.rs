//! openDesk's `migrations:` values translated into a Migration `spec` (pure).
//!
//! `releaseVersion`, `actions`, `actionsSkip` and `secretFiles` mean the same in both and are
//! carried over as written (validation then judges them exactly as `stagehand validate`
//! does). `objectStore` is translated key by key from openDesk's keys
//! (`shared/reference/opendesk-addendum.md`) to Stagehand's fields; what has no counterpart is
//! a finding that says what to do, never dropped silently.

use serde_json::{Map, Value, json};
use stagehand_actions::clients::tls::{ca_bundle_issue, is_inline_pem};
use stagehand_config::{Finding, Problem, Stage, Warning};

/// The keys of openDesk's `migrations:` block.
pub const BLOCK_KEYS: [&str; 5] = [
    "releaseVersion",
    "actions",
    "actionsSkip",
    "secretFiles",
    "objectStore",
];

/// The keys of openDesk's `migrations.objectStore`.
pub const STORE_KEYS: [&str; 10] = [
    "endpoint",
    "bucket",
    "username",
    "region",
    "port",
    "useSSL",
    "pathStyle",
    "requestTimeoutSeconds",
    "verifySSL",
    "caBundle",
];

/// The `secretFiles` name openDesk mounts the migrations bucket's secret key under.
pub const STORE_SECRET_FILE: &str = "objectstore-migrations-secret-key";

/// The request timeout of Stagehand's object store client, in seconds
/// ([`stagehand_actions::clients::s3::DEFAULT_TIMEOUT`]).
pub fn store_timeout_seconds() -> u64 {
    stagehand_actions::clients::s3::DEFAULT_TIMEOUT.as_secs()
}

/// What the import found that `stagehand validate` has no code for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ImportCode {
    /// A key of the values that Stagehand does not know.
    UnknownKey,
    /// A value that cannot be translated as it is; the message says what to do.
    Untranslatable,
    /// A value with no counterpart in Stagehand that does not change what runs.
    NotCarriedOver,
    /// A file path carried over that the operator reads from its own pod: it must be mounted
    /// there.
    MountRequired,
}

impl std::fmt::Display for ImportCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One finding, located in the values file (`migrations.actions.pre[3].versions.form`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValuesFinding {
    /// The code: a validation code (`InvalidVersion`, ...) or an [`ImportCode`].
    pub code: String,
    /// Whether it fails the import (a problem) or not (a warning).
    pub error: bool,
    /// The path in the values file.
    pub path: String,
    /// The action id, when the finding is about an action.
    pub id: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl ValuesFinding {
    fn import(code: ImportCode, error: bool, path: String, message: String) -> Self {
        Self {
            code: code.to_string(),
            error,
            path,
            id: None,
            message,
        }
    }
}

/// Where the `migrations:` block was found.
#[derive(Debug, Clone)]
pub struct Block<'a> {
    /// The block.
    pub map: &'a Map<String, Value>,
    /// The path prefix of its keys in the file (`migrations.` or empty).
    pub prefix: &'static str,
}

/// Why a values file cannot be used at all (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// Neither a `migrations:` key nor the block's own keys.
    #[error(
        "no migrations block: expected the rendered helmfile values (with a top-level key migrations:) or the migrations: block itself (with releaseVersion and actions)"
    )]
    NoBlock,
    /// `migrations:` is not a mapping.
    #[error("migrations is not a mapping")]
    NotAMapping,
}

/// Finds the `migrations:` block in a values document.
pub fn locate(doc: &Value) -> Result<Block<'_>, BlockError> {
    let root = doc.as_object().ok_or(BlockError::NoBlock)?;
    if let Some(block) = root.get("migrations") {
        return block
            .as_object()
            .map(|map| Block {
                map,
                prefix: "migrations.",
            })
            .ok_or(BlockError::NotAMapping);
    }
    if root.contains_key("releaseVersion") || root.contains_key("actions") {
        return Ok(Block {
            map: root,
            prefix: "",
        });
    }
    Err(BlockError::NoBlock)
}

/// The translated spec and the findings of the translation itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    /// The Migration `spec` (without `installedRelease`).
    pub spec: Map<String, Value>,
    /// What could not be carried over as it is.
    pub findings: Vec<ValuesFinding>,
}

/// Translates the block into a Migration spec. `ca_bundle` is the PEM text of the store's CA
/// (the `--ca-bundle` file); without it openDesk's `caBundle` (a path inside its pod) is
/// carried over as the path, which the operator's pod must then mount.
pub fn translate(block: &Block<'_>, ca_bundle: Option<&str>) -> Translated {
    let p = block.prefix;
    let mut spec = Map::new();
    let mut findings = Vec::new();
    for (key, value) in block.map {
        match key.as_str() {
            "releaseVersion" | "secretFiles" => {
                spec.insert(key.clone(), value.clone());
            }
            "actions" | "actionsSkip" => {
                spec.insert(key.clone(), without_null_stages(value));
            }
            "objectStore" => {
                if let Some(store) = translate_store(value, p, ca_bundle, &mut findings) {
                    spec.insert(key.clone(), store);
                }
            }
            "actionOptions" => action_options(block, value, &mut findings),
            "namespace" | "loglevel" | "cleanup" | "stage" | "job" => {
                findings.push(ValuesFinding::import(
                    ImportCode::NotCarriedOver,
                    false,
                    format!("{p}{key}"),
                    not_carried_over(key, value),
                ));
            }
            other => findings.push(ValuesFinding::import(
                ImportCode::UnknownKey,
                true,
                format!("{p}{other}"),
                format!(
                    "openDesk's migrations block has no key {other:?} that Stagehand knows (expected {}): remove it, or correct its spelling",
                    BLOCK_KEYS.join(", ")
                ),
            )),
        }
    }
    Translated { spec, findings }
}

/// Why a key openDesk renders for its Job has no counterpart in a Migration, and what
/// Stagehand does instead.
fn not_carried_over(key: &str, value: &Value) -> String {
    match key {
        "namespace" => format!(
            "openDesk runs its migrations in namespace {value}; a Migration's actions act in the Migration's own namespace: import and apply it there (-n)"
        ),
        "loglevel" => "the log level is the operator's (the chart's logLevel), not a Migration's".into(),
        "cleanup" => "Stagehand keeps no Job pods to clean up: each run, its actions' reports and findings stay as objects (spec.runHistoryLimit)".into(),
        "stage" => "a Migration declares both stages; a MigrationRun names the one it runs".into(),
        _ => "the Job's timeouts and output retention are the operator's: a run's waitTimeoutSeconds and the Migration's runHistoryLimit".into(),
    }
}

/// The option keys of `actionOptions.synapseDeactivateOrphanedUsers`.
const SYNAPSE_OPTIONS: [&str; 2] = ["dryRun", "maxOrphanPercent"];

/// openDesk's `actionOptions` (per-deployment options the shared values render into the
/// declarations): nothing to carry over, the declarations already hold them. The options of
/// `synapse_deactivate_orphaned_users` are checked against its declaration — `dryRun` is its
/// `runMode` (`dry-run`/`apply`) and `config.synapse.dryRun`, `maxOrphanPercent` its
/// `config.safety.maxOrphanPercent` — so that values edited after rendering do not import one
/// thing while saying another.
fn action_options(block: &Block<'_>, value: &Value, findings: &mut Vec<ValuesFinding>) {
    let p = block.prefix;
    let Some(options) = value.as_object() else {
        if !value.is_null() {
            findings.push(ValuesFinding::import(
                ImportCode::Untranslatable,
                true,
                format!("{p}actionOptions"),
                format!("actionOptions must be a mapping of option groups, not {value}"),
            ));
        }
        return;
    };
    for (group, values) in options {
        let at = format!("{p}actionOptions.{group}");
        if group != "synapseDeactivateOrphanedUsers" {
            findings.push(ValuesFinding::import(
                ImportCode::NotCarriedOver,
                false,
                at,
                "a per-deployment option the values already rendered into the declarations; a Migration has no options: change the declarations themselves".into(),
            ));
            continue;
        }
        let declared: Vec<(String, &Value)> = ["pre", "post"]
            .iter()
            .flat_map(|stage| {
                block
                    .map
                    .get("actions")
                    .and_then(|a| a.get(*stage))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .filter(|(_, d)| {
                        d.get("id").and_then(Value::as_str)
                            == Some("synapse_deactivate_orphaned_users")
                    })
                    .map(move |(i, d)| (format!("{p}actions.{stage}[{i}]"), d))
            })
            .collect();
        let mismatch = |path: String, message: String| ValuesFinding {
            id: Some("synapse_deactivate_orphaned_users".into()),
            ..ValuesFinding::import(ImportCode::Untranslatable, true, path, message)
        };
        let Some(values) = values.as_object() else {
            findings.push(mismatch(
                at,
                format!(
                    "must be a mapping of {}, not {values}",
                    SYNAPSE_OPTIONS.join(", ")
                ),
            ));
            continue;
        };
        for (key, v) in values {
            let path = format!("{at}.{key}");
            match key.as_str() {
                "dryRun" => {
                    let Some(dry) = v.as_bool() else {
                        findings.push(mismatch(path, format!("dryRun must be true or false, not {v}")));
                        continue;
                    };
                    let mode = if dry { "dry-run" } else { "apply" };
                    for (d_at, d) in &declared {
                        let run_mode = d.get("runMode").and_then(Value::as_str);
                        let config_dry = d
                            .pointer("/config/synapse/dryRun")
                            .and_then(Value::as_bool)
                            .unwrap_or(true);
                        if run_mode != Some(mode) || config_dry != dry {
                            findings.push(mismatch(
                                path.clone(),
                                format!(
                                    "dryRun {dry} renders runMode {mode:?} and config.synapse.dryRun {dry}, but {d_at} declares runMode {} and config.synapse.dryRun {config_dry}: the values were edited after rendering. Render them again (helmfile write-values) and import those",
                                    run_mode.map_or_else(|| "(none)".to_string(), |m| format!("{m:?}"))
                                ),
                            ));
                        }
                    }
                }
                "maxOrphanPercent" => {
                    for (d_at, d) in &declared {
                        let declared_max = d.pointer("/config/safety/maxOrphanPercent");
                        if declared_max.and_then(Value::as_f64) != v.as_f64() {
                            findings.push(mismatch(
                                path.clone(),
                                format!(
                                    "maxOrphanPercent {v} differs from {d_at}.config.safety.maxOrphanPercent ({}): the values were edited after rendering. Render them again (helmfile write-values) and import those",
                                    declared_max.map_or_else(|| "not set".to_string(), ToString::to_string)
                                ),
                            ));
                        }
                    }
                }
                other => findings.push(ValuesFinding::import(
                    ImportCode::UnknownKey,
                    true,
                    path,
                    format!(
                        "synapseDeactivateOrphanedUsers has no option {other:?} (expected {}): remove it, or correct its spelling",
                        SYNAPSE_OPTIONS.join(", ")
                    ),
                )),
            }
        }
        if declared.is_empty() {
            findings.push(ValuesFinding::import(
                ImportCode::NotCarriedOver,
                false,
                at,
                "no synapse_deactivate_orphaned_users is declared (it needs element and nubus enabled): its options change nothing".into(),
            ));
        } else if findings.iter().all(|f| !f.path.starts_with(&at)) {
            findings.push(ValuesFinding::import(
                ImportCode::NotCarriedOver,
                false,
                at,
                "already rendered into synapse_deactivate_orphaned_users (its runMode, config.synapse.dryRun and config.safety.maxOrphanPercent), which the Migration carries: to flip dryRun later, change the runMode and config.synapse.dryRun of that declaration together (docs/declarations.md)".into(),
            ));
        }
    }
}

/// `pre: ~` (an empty stage as helm renders it) becomes `pre: []`.
fn without_null_stages(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if v.is_null() { json!([]) } else { v.clone() };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn translate_store(
    value: &Value,
    p: &str,
    ca_bundle: Option<&str>,
    findings: &mut Vec<ValuesFinding>,
) -> Option<Value> {
    let at = |key: &str| format!("{p}objectStore.{key}");
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| {
        problems.push(ValuesFinding::import(
            ImportCode::Untranslatable,
            true,
            path,
            message,
        ));
    };
    let store = match value {
        Value::Null => return None,
        Value::Object(map) => map,
        other => {
            problem(
                format!("{p}objectStore"),
                format!(
                    "must be a mapping of {}, not {other}",
                    STORE_KEYS.join(", ")
                ),
            );
            return None;
        }
    };
    let mut out = Map::new();
    let text = |key: &str| store.get(key).and_then(Value::as_str).map(str::trim);
    let flag = |key: &str| store.get(key).and_then(Value::as_bool);
    // A non-empty string `key` copied to `to`; `false` when it is missing or empty.
    let copied = |out: &mut Map<String, Value>, key: &str, to: &str| {
        text(key)
            .filter(|v| !v.is_empty())
            .map(|v| out.insert(to.into(), Value::String(v.into())))
            .is_some()
    };
    let mut unknown = Vec::new();
    for (key, v) in store {
        if !STORE_KEYS.contains(&key.as_str()) {
            unknown.push(key.clone());
            continue;
        }
        let wrong = match key.as_str() {
            "useSSL" | "pathStyle" | "verifySSL" => !v.is_boolean() && !v.is_null(),
            "port" | "requestTimeoutSeconds" => !v.is_u64() && !v.is_null(),
            _ => !v.is_string() && !v.is_null(),
        };
        if wrong {
            let expected = match key.as_str() {
                "useSSL" | "pathStyle" | "verifySSL" => "true or false",
                "port" | "requestTimeoutSeconds" => "a whole number",
                _ => "a string",
            };
            problem(at(key), format!("{key} must be {expected}, not {v}"));
        }
    }
    for key in unknown {
        findings.push(ValuesFinding::import(
            ImportCode::UnknownKey,
            true,
            at(&key),
            format!(
                "openDesk's objectStore has no key {key:?} that Stagehand knows (expected {}): remove it, or correct its spelling",
                STORE_KEYS.join(", ")
            ),
        ));
    }
    // endpoint + useSSL + port -> one URL.
    let use_ssl = flag("useSSL").unwrap_or(true);
    let scheme = if use_ssl { "https" } else { "http" };
    match text("endpoint").filter(|e| !e.is_empty()) {
        None => problem(
            at("endpoint"),
            "the object store's endpoint is missing: set it to the store's host (the one the deployment's other consumers use)".into(),
        ),
        Some(endpoint) => {
            let (given_scheme, rest) = match endpoint.split_once("://") {
                Some((s, rest)) => (Some(s), rest),
                None => (None, endpoint),
            };
            let rest = rest.trim_end_matches('/');
            if let Some(s) = given_scheme
                && s != scheme
            {
                problem(
                    at("endpoint"),
                    format!(
                        "endpoint {endpoint:?} says {s}:// but useSSL is {use_ssl}: make them agree"
                    ),
                );
            }
            let default_port = if use_ssl { 443 } else { 80 };
            let port = store.get("port").and_then(Value::as_u64);
            let has_port = rest
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()));
            let url = match port {
                Some(port) if !has_port && port != default_port => {
                    format!("{scheme}://{rest}:{port}")
                }
                Some(port) if has_port && !rest.ends_with(&format!(":{port}")) => {
                    problem(
                        at("port"),
                        format!(
                            "port {port} differs from the port in endpoint {endpoint:?}: make them agree"
                        ),
                    );
                    format!("{scheme}://{rest}")
                }
                _ => format!("{scheme}://{rest}"),
            };
            out.insert("endpoint".into(), Value::String(url));
        }
    }
    if !copied(&mut out, "bucket", "bucket") {
        problem(
            at("bucket"),
            "the bucket is missing: set it to the deployment's migrations bucket (openDesk: \"migrations\")".into(),
        );
    }
    copied(&mut out, "region", "region");
    if let Some(path_style) = flag("pathStyle") {
        out.insert("pathStyle".into(), Value::Bool(path_style));
    }
    if flag("verifySSL") == Some(false) {
        out.insert("insecureSkipTlsVerify".into(), Value::Bool(true));
        findings.push(ValuesFinding::import(
            ImportCode::NotCarriedOver,
            false,
            at("verifySSL"),
            "verifySSL: false becomes insecureSkipTlsVerify: true: the store's certificate is not checked. Only for test deployments; trust the store's CA with caBundle instead".into(),
        ));
    }
    match (text("caBundle").filter(|c| !c.is_empty()), ca_bundle) {
        (_, Some(pem)) => {
            out.insert("caBundle".into(), Value::String(pem.to_string()));
        }
        (Some(bundle), None) => match ca_bundle_issue(bundle) {
            Some(issue) => problem(
                at("caBundle"),
                format!(
                    "caBundle {issue}: set it to the path the CA is mounted at, or pass the CA's PEM file with --ca-bundle FILE"
                ),
            ),
            None => {
                out.insert("caBundle".into(), Value::String(bundle.to_string()));
                if !is_inline_pem(bundle) {
                    findings.push(ValuesFinding::import(
                        ImportCode::MountRequired,
                        false,
                        at("caBundle"),
                        format!(
                            "caBundle {bundle:?} is carried over as the path of the store's CA: the operator reads it from its own pod, so mount the Secret or ConfigMap openDesk mounts there (trust.secret.mount) into the operator's pod at the same path (chart values extraVolumes/extraVolumeMounts, docs/deploy.md#tls), or pass the CA's PEM file with --ca-bundle FILE to carry the certificate itself"
                        ),
                    ));
                }
            }
        },
        (None, None) => {}
    }
    if !copied(&mut out, "username", "accessKeyId") {
        problem(
            at("username"),
            "the bucket identity's username (the access key id) is missing: set it (openDesk: \"migration_user\")".into(),
        );
    }
    if let Some(seconds) = store.get("requestTimeoutSeconds").and_then(Value::as_u64)
        && seconds != store_timeout_seconds()
    {
        findings.push(ValuesFinding::import(
            ImportCode::NotCarriedOver,
            false,
            at("requestTimeoutSeconds"),
            format!(
                "requestTimeoutSeconds {seconds} is not carried over: every request of Stagehand's object store client times out after {}s",
                store_timeout_seconds()
            ),
        ));
    }
    out.insert(
        "secretKeyFile".into(),
        Value::String(STORE_SECRET_FILE.into()),
    );
    findings.extend(problems);
    Some(Value::Object(out))
}

/// Where a validation finding is in the values file: `migrations.actions.pre[3].versions.form`.
pub fn values_path<C>(finding: &Finding<C>, prefix: &str) -> String {
    let field = finding.field.as_deref().unwrap_or("");
    let (Some(stage), Some(index)) = (finding.stage, finding.index) else {
        return match field {
            "objectStore.secretKeyFile" => format!("{prefix}secretFiles"),
            "objectStore.accessKeyId" => format!("{prefix}objectStore.username"),
            "installedRelease" => {
                "installedRelease (from the migrations-status ConfigMap or --installed-release)"
                    .into()
            }
            "" => prefix.trim_end_matches('.').to_string(),
            f => format!("{prefix}{f}"),
        };
    };
    if field == "actionsSkip" || field == "secretFiles" {
        // Reported on an action, about a list of the block.
        return format!("{prefix}{field}{}", stage_suffix(field, stage));
    }
    let (list, rest) = match field.strip_prefix("actionsSkip.") {
        Some(rest) => ("actionsSkip", rest),
        None => ("actions", field),
    };
    let mut out = format!("{prefix}{list}.{stage}[{index}]");
    if !rest.is_empty() {
        out.push('.');
        out.push_str(rest);
    }
    out
}

fn stage_suffix(field: &str, stage: Stage) -> String {
    if field == "actionsSkip" {
        format!(".{stage}")
    } else {
        String::new()
    }
}

/// A validation problem as a values finding.
pub fn from_problem(p: &Problem, prefix: &str) -> ValuesFinding {
    ValuesFinding {
        code: p.code.to_string(),
        error: true,
        path: values_path(p, prefix),
        id: p.id.clone(),
        message: p.message.clone(),
    }
}

/// A validation warning as a values finding.
pub fn from_warning(w: &Warning, prefix: &str) -> ValuesFinding {
    ValuesFinding {
        code: w.code.to_string(),
        error: false,
        path: values_path(w, prefix),
        id: w.id.clone(),
        message: w.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use stagehand_config::ProblemCode;

    fn store(v: Value, ca: Option<&str>) -> (Option<Value>, Vec<ValuesFinding>) {
        let mut findings = Vec::new();
        let out = translate_store(&v, "migrations.", ca, &mut findings);
        (out, findings)
    }

    #[test]
    fn opendesk_store_keys_become_stagehand_fields() {
        let (out, findings) = store(
            json!({"endpoint": "objectstore.example.org", "bucket": "migrations",
                   "username": "migration_user", "region": "eu-west-1", "port": 443,
                   "useSSL": true, "pathStyle": true, "requestTimeoutSeconds": 30,
                   "verifySSL": true, "caBundle": ""}),
            None,
        );
        assert_eq!(findings, vec![]);
        assert_eq!(
            out.unwrap(),
            json!({"endpoint": "https://objectstore.example.org", "bucket": "migrations",
                   "region": "eu-west-1", "pathStyle": true, "accessKeyId": "migration_user",
                   "secretKeyFile": "objectstore-migrations-secret-key"})
        );
        let (out, _) = store(
            json!({"endpoint": "minio", "bucket": "b", "username": "u", "port": 9000, "useSSL": false}),
            None,
        );
        assert_eq!(out.unwrap()["endpoint"], "http://minio:9000");
    }

    #[test]
    fn a_ca_bundle_path_is_carried_over_and_must_be_mounted() {
        let path = "/etc/opendesk/trust/ca-certificates.crt";
        let (out, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u", "caBundle": path}),
            None,
        );
        assert_eq!(out.unwrap()["caBundle"], path);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].code, "MountRequired");
        assert!(!findings[0].error);
        assert_eq!(findings[0].path, "migrations.objectStore.caBundle");
        for part in [
            path,
            "extraVolumeMounts",
            "docs/deploy.md#tls",
            "--ca-bundle",
        ] {
            assert!(findings[0].message.contains(part), "{findings:?}");
        }
        // Inline PEM is carried over as it is, with nothing to mount; broken PEM is a problem.
        let pem = include_str!("../../../actions/src/clients/tls_test_ca.pem");
        let (out, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u", "caBundle": pem}),
            None,
        );
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(out.unwrap()["caBundle"], pem.trim());
        let (_, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u",
                   "caBundle": "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"}),
            None,
        );
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].code, "Untranslatable");
        // A relative path is no file the operator can find: a problem.
        let (out, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u", "caBundle": "ca.crt"}),
            None,
        );
        assert!(out.unwrap().get("caBundle").is_none());
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].code, "Untranslatable");
        assert!(findings[0].error);
        assert!(
            findings[0].message.contains("absolute path"),
            "{findings:?}"
        );
    }

    #[test]
    fn what_cannot_be_translated_is_a_finding() {
        // --ca-bundle carries the certificate itself, over the path.
        let (out, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u",
                   "caBundle": "/etc/ssl/certs/custom-ca.pem"}),
            Some("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"),
        );
        assert!(findings.is_empty());
        assert!(out.unwrap()["caBundle"].as_str().unwrap().contains("BEGIN"));
        let (out, findings) = store(
            json!({"endpoint": "s3", "bucket": "b", "username": "u", "verifySSL": false,
                   "requestTimeoutSeconds": 90, "sessionToken": "x"}),
            None,
        );
        assert_eq!(out.unwrap()["insecureSkipTlsVerify"], true);
        let codes: Vec<_> = findings
            .iter()
            .map(|f| (f.code.as_str(), f.error, f.path.as_str()))
            .collect();
        assert!(codes.contains(&("UnknownKey", true, "migrations.objectStore.sessionToken")));
        assert!(codes.contains(&("NotCarriedOver", false, "migrations.objectStore.verifySSL")));
        assert!(codes.contains(&(
            "NotCarriedOver",
            false,
            "migrations.objectStore.requestTimeoutSeconds"
        )));
        let (_, findings) = store(json!({"useSSL": "yes"}), None);
        let paths: Vec<_> = findings.iter().map(|f| f.path.as_str()).collect();
        for p in ["useSSL", "endpoint", "bucket", "username"] {
            assert!(
                paths.contains(&format!("migrations.objectStore.{p}").as_str()),
                "{p}: {paths:?}"
            );
        }
    }

    #[test]
    fn the_block_is_found_in_full_values_or_alone() {
        let full = json!({"global": {}, "migrations": {"releaseVersion": "v1.18.0"}});
        assert_eq!(locate(&full).unwrap().prefix, "migrations.");
        let alone = json!({"releaseVersion": "v1.18.0", "actions": {}});
        assert_eq!(locate(&alone).unwrap().prefix, "");
        assert_eq!(
            locate(&json!({"global": {}})).unwrap_err(),
            BlockError::NoBlock
        );
        let t = translate(
            &locate(&json!({"migrations": {"releaseVersion": "v1.18.0", "actionz": {}}})).unwrap(),
            None,
        );
        assert_eq!(t.findings[0].path, "migrations.actionz");
    }

    #[test]
    fn validation_findings_get_values_paths() {
        let at = |field: &str| {
            Problem::at(
                ProblemCode::UnknownVersionsKey,
                Stage::Pre,
                3,
                Some("x"),
                field,
                "m",
            )
        };
        assert_eq!(
            values_path(&at("versions.form"), "migrations."),
            "migrations.actions.pre[3].versions.form"
        );
        assert_eq!(
            values_path(&at("actionsSkip.tag"), "migrations."),
            "migrations.actionsSkip.pre[3].tag"
        );
        assert_eq!(
            values_path(&at("actionsSkip"), "migrations."),
            "migrations.actionsSkip.pre"
        );
        assert_eq!(values_path(&at(""), ""), "actions.pre[3]");
        let top = Problem::top(
            ProblemCode::MissingSecretFile,
            "objectStore.secretKeyFile",
            "m",
        );
        assert_eq!(values_path(&top, "migrations."), "migrations.secretFiles");
        let top = Problem::top(ProblemCode::InvalidVersion, "releaseVersion", "m");
        assert_eq!(
            values_path(&top, "migrations."),
            "migrations.releaseVersion"
        );
    }
}
