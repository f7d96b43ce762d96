//! The committed CRD manifests are the generated ones, and the generated CRDs keep the
//! promises of docs/design.md#the-api.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use stagehand_crds::generate::{crds, to_yaml, v1alpha1_only_crds};

const COMMITTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/crds/stagehand-crds.yaml"
);

#[test]
fn committed_crds_are_up_to_date() {
    let generated = to_yaml(&crds().unwrap()).unwrap();
    let committed =
        std::fs::read_to_string(COMMITTED).expect("deploy/crds/stagehand-crds.yaml exists");
    assert!(
        generated == committed,
        "deploy/crds/stagehand-crds.yaml is stale: regenerate it with\n  cargo run -p stagehand -- crds > deploy/crds/stagehand-crds.yaml"
    );
}

fn crd(kind: &str) -> CustomResourceDefinition {
    crds()
        .unwrap()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap()
}

fn version<'a>(
    crd: &'a CustomResourceDefinition,
    name: &str,
) -> &'a CustomResourceDefinitionVersion {
    crd.spec.versions.iter().find(|v| v.name == name).unwrap()
}

fn schema(v: &CustomResourceDefinitionVersion) -> &JSONSchemaProps {
    v.schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap()
}

fn prop<'a>(s: &'a JSONSchemaProps, path: &[&str]) -> &'a JSONSchemaProps {
    path.iter().fold(s, |s, key| {
        s.properties
            .as_ref()
            .and_then(|p| p.get(*key))
            .unwrap_or_else(|| panic!("no property {key}"))
    })
}

#[test]
fn both_kinds_serve_two_versions_storing_v1beta1() {
    for kind in ["Migration", "MigrationRun"] {
        let c = crd(kind);
        assert_eq!(c.spec.group, "stagehand.dev");
        assert_eq!(c.spec.scope, "Namespaced");
        let alpha = version(&c, "v1alpha1");
        let beta = version(&c, "v1beta1");
        assert!(
            alpha.served && !alpha.storage,
            "{kind} v1alpha1 served, not storage"
        );
        assert!(
            beta.served && beta.storage,
            "{kind} v1beta1 served and storage"
        );
        assert_eq!(alpha.deprecated, Some(true));
        assert!(
            alpha
                .deprecation_warning
                .as_deref()
                .unwrap()
                .contains("v1beta1"),
            "the warning names v1beta1"
        );
        assert_ne!(beta.deprecated, Some(true));
        assert_eq!(
            c.spec.names.categories.as_deref(),
            Some(&["stagehand".to_string()][..])
        );
        for v in [alpha, beta] {
            assert!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{kind} {} has a status subresource",
                v.name
            );
        }
    }
    assert_eq!(
        crd("Migration").spec.names.short_names.as_deref(),
        Some(&["mig".to_string()][..])
    );
    assert_eq!(
        crd("MigrationRun").spec.names.short_names.as_deref(),
        Some(&["migrun".to_string()][..])
    );
}

#[test]
fn run_printer_columns() {
    let c = crd("MigrationRun");
    for v in ["v1alpha1", "v1beta1"] {
        let columns = version(&c, v).additional_printer_columns.as_ref().unwrap();
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Stage", "Release", "Ready", "Reason", "Progress", "Age", "Phase"
            ],
            "{v}"
        );
        // The running action's phase line is long: `kubectl get -o wide` only.
        let phase = columns.iter().find(|c| c.name == "Phase").unwrap();
        assert_eq!(phase.priority, Some(1), "{v}");
        assert_eq!(phase.json_path, ".status.currentPhase", "{v}");
        let progress = columns.iter().find(|c| c.name == "Progress").unwrap();
        assert_eq!(progress.priority, None, "{v}");
    }
}

/// Every property path under `s` (`spec.actions.pre[].id`), with whether it has a default.
fn paths(s: &JSONSchemaProps, prefix: &str, out: &mut std::collections::BTreeMap<String, bool>) {
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &s.items {
        paths(item, &format!("{prefix}[]"), out);
    }
    for (key, sub) in s.properties.iter().flatten() {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        out.insert(path.clone(), sub.default.is_some());
        paths(sub, &path, out);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(sub)) = &s.additional_properties {
        paths(sub, &format!("{prefix}{{}}"), out);
    }
}

/// Conversion `None` serves one stored object in both versions: both must declare the same
/// fields, or an object a v1alpha1 client wrote cannot be server-side applied on Kubernetes
/// 1.37 (crds/src/v1alpha1.rs "Same fields"). Only v1beta1 has the defaults that make a
/// storage-version rewrite observable.
#[test]
fn both_versions_declare_the_same_fields_only_v1beta1_adds_defaults() {
    for kind in ["Migration", "MigrationRun"] {
        let c = crd(kind);
        let (mut alpha, mut beta) = (Default::default(), Default::default());
        paths(schema(version(&c, "v1alpha1")), "", &mut alpha);
        paths(schema(version(&c, "v1beta1")), "", &mut beta);
        let only_beta: Vec<&String> = beta.keys().filter(|k| !alpha.contains_key(*k)).collect();
        let only_alpha: Vec<&String> = alpha.keys().filter(|k| !beta.contains_key(*k)).collect();
        assert!(
            only_beta.is_empty() && only_alpha.is_empty(),
            "{kind}: fields only v1beta1 declares: {only_beta:?}; only v1alpha1: {only_alpha:?}"
        );
    }
    for (kind, field, default) in [
        ("Migration", "suspend", serde_json::json!(false)),
        (
            "MigrationRun",
            "waitTimeoutSeconds",
            serde_json::json!(3600),
        ),
    ] {
        let c = crd(kind);
        assert_eq!(
            prop(schema(version(&c, "v1alpha1")), &["spec", field]).default,
            None,
            "{kind} v1alpha1 {field} has a default"
        );
        assert_eq!(
            prop(schema(version(&c, "v1beta1")), &["spec", field])
                .default
                .as_ref()
                .map(|d| d.0.clone()),
            Some(default),
            "{kind} v1beta1 {field}"
        );
    }
}

#[test]
fn run_spec_is_immutable_and_stage_is_an_enum() {
    let r = crd("MigrationRun");
    for v in ["v1alpha1", "v1beta1"] {
        let spec = prop(schema(version(&r, v)), &["spec"]);
        // One transition rule per field (see v1beta1.rs for why not one on spec).
        for (field, sub) in spec.properties.as_ref().unwrap() {
            let rules = sub
                .x_kubernetes_validations
                .as_ref()
                .unwrap_or_else(|| panic!("{v}: no CEL rule on spec.{field}"));
            assert!(
                rules.iter().any(|r| r.rule == "self == oldSelf"),
                "{v}: spec.{field} immutable"
            );
        }
        let stage = prop(spec, &["stage"]);
        let values: Vec<serde_json::Value> = stage
            .enum_
            .as_ref()
            .unwrap()
            .iter()
            .map(|j| j.0.clone())
            .collect();
        assert_eq!(
            values,
            [serde_json::json!("pre"), serde_json::json!("post")]
        );
    }
}

#[test]
fn versions_keys_are_required_closed_and_patterned() {
    let m = crd("Migration");
    for v in ["v1alpha1", "v1beta1"] {
        let items = prop(schema(version(&m, v)), &["spec", "actions", "pre"])
            .items
            .as_ref()
            .unwrap();
        let decl = match items {
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(s) => s,
            other => panic!("unexpected items {other:?}"),
        };
        let versions = prop(decl, &["versions"]);
        let mut required = versions.required.clone().unwrap();
        required.sort();
        assert_eq!(required, ["from", "minimum", "to"]);
        let keys: Vec<&String> = versions.properties.as_ref().unwrap().keys().collect();
        assert_eq!(
            keys.len(),
            3,
            "no other versions key is in the schema (unknown keys are rejected by strict field validation)"
        );
        for key in ["minimum", "from", "to"] {
            assert_eq!(
                prop(versions, &[key]).pattern.as_deref(),
                Some(r"^v?[0-9]+(\.[0-9]+){0,2}$")
            );
        }
        assert_eq!(
            prop(decl, &["config"]).x_kubernetes_preserve_unknown_fields,
            Some(true)
        );
    }
}

/// Every field of every version has a description (it becomes `kubectl explain`).
#[test]
fn every_field_is_documented() {
    fn walk(path: &str, s: &JSONSchemaProps, missing: &mut Vec<String>) {
        if let Some(props) = &s.properties {
            for (key, sub) in props {
                let p = format!("{path}.{key}");
                if sub.description.as_deref().unwrap_or("").trim().is_empty()
                    && !["apiVersion", "kind", "metadata"].contains(&key.as_str())
                {
                    missing.push(p.clone());
                }
                walk(&p, sub, missing);
            }
        }
        if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) = &s.items {
            walk(&format!("{path}[]"), items, missing);
        }
    }
    let mut missing = Vec::new();
    for c in crds()
        .unwrap()
        .iter()
        .chain(v1alpha1_only_crds().unwrap().iter())
    {
        for v in &c.spec.versions {
            walk(
                &format!("{}/{}", c.spec.names.kind, v.name),
                schema(v),
                &mut missing,
            );
        }
    }
    assert!(
        missing.is_empty(),
        "fields without a doc comment: {missing:#?}"
    );
}

#[test]
fn v1alpha1_only_crds_store_v1alpha1() {
    for c in v1alpha1_only_crds().unwrap() {
        assert_eq!(c.spec.versions.len(), 1);
        assert_eq!(c.spec.versions[0].name, "v1alpha1");
        assert!(c.spec.versions[0].storage && c.spec.versions[0].served);
    }
}

/// Every schema of a CRD version, depth first.
fn walk<'a>(s: &'a JSONSchemaProps, out: &mut Vec<&'a JSONSchemaProps>) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray;
    out.push(s);
    for child in s.properties.iter().flat_map(|p| p.values()) {
        walk(child, out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &s.items {
        walk(item, out);
    }
}

#[test]
fn the_api_server_knows_every_format_and_nullable_enums_take_null() {
    for c in crds().unwrap() {
        for v in &c.spec.versions {
            let mut all = Vec::new();
            walk(schema(v), &mut all);
            for s in all {
                if let Some(f) = &s.format {
                    assert!(
                        stagehand_crds::generate::KNOWN_FORMATS.contains(&f.as_str()),
                        "{} {}: format {f:?} makes kubectl apply warn",
                        c.spec.names.kind,
                        v.name
                    );
                }
                if s.nullable == Some(true)
                    && let Some(values) = &s.enum_
                {
                    assert!(
                        values.iter().any(|j| j.0.is_null()),
                        "{} {}: a nullable enum without null refuses a finding without a stage",
                        c.spec.names.kind,
                        v.name
                    );
                }
            }
        }
    }
}

#[test]
fn every_version_defaults_status_to_not_observed() {
    for c in crds().unwrap() {
        for v in &c.spec.versions {
            assert_eq!(
                prop(schema(v), &["status"])
                    .default
                    .as_ref()
                    .map(|d| d.0.clone()),
                Some(serde_json::json!({
                    "observedGeneration": stagehand_crds::generate::UNOBSERVED_GENERATION
                })),
                "{} {}",
                c.spec.names.kind,
                v.name
            );
        }
    }
    assert_eq!(stagehand_crds::generate::UNOBSERVED_GENERATION, -1);
}

#[test]
fn the_validator_knows_every_spec_field_of_a_migration() {
    // A spec field the CRD has but validation does not know is reported as an unknown key,
    // which stalls every Migration that sets it.
    let spec = stagehand_crds::MigrationSpec {
        release_version: "v1.18.0".into(),
        object_store: Some(Default::default()),
        installed_release: Some("v1.17.3".into()),
        history_config_map: Some("h".into()),
        run_history_limit: Some(3),
        service_account_name: Some("tenant".into()),
        ..Default::default()
    };
    let value = serde_json::to_value(&spec).unwrap();
    for key in value.as_object().unwrap().keys() {
        assert!(
            stagehand_config::declarations::SPEC_KEYS.contains(&key.as_str()),
            "spec.{key} is not in SPEC_KEYS"
        );
    }
}
