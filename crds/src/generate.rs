//! CRD generation: the served versions of each kind merged into one manifest.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;
use kube::core::crd::{MergeError, merge_crds};

use crate::{STORAGE_VERSION, v1alpha1, v1beta1};

/// Why the CRD manifests could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The per-version CRDs of a kind do not agree (a bug in the type definitions).
    #[error("cannot merge the versions of {kind}: {source}")]
    Merge {
        /// The kind whose versions disagree.
        kind: &'static str,
        /// What kube reported.
        source: MergeError,
    },
    /// The manifests could not be rendered as YAML.
    #[error("cannot render the CRDs as YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
}

/// The `status.observedGeneration` of an object no controller has reconciled yet.
///
/// Every version's `status` has the structural default `{observedGeneration: -1}`. The API
/// server drops `status` on create and applies the default whenever it reads the object
/// back, so from the instant a Migration or MigrationRun exists until the operator first
/// writes its status, it reads `observedGeneration: -1` while `metadata.generation` is 1 or
/// more. kstatus (and so Helm 4's watcher and Flux) then reports it InProgress
/// ("generation is 1, but latest observed generation is -1") instead of Current, which it
/// reports for an object without status.
pub const UNOBSERVED_GENERATION: i64 = -1;

/// The `format`s the API server knows (apiextensions-apiserver's supported formats and the
/// OpenAPI number formats). Any other format, such as `uint` or `uint32` that schemars
/// writes for unsigned integers, makes every `kubectl apply` print
/// `Warning: unrecognized format`; such formats are dropped (their `minimum: 0` stays).
pub const KNOWN_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "date-time",
    "int32",
    "int64",
    "float",
    "double",
];

/// Applies what every generated version needs beyond its Rust types: the status default
/// ([`UNOBSERVED_GENERATION`]), only [`KNOWN_FORMATS`], and null in nullable enums.
fn finish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        finish_schema(schema);
        if let Some(status) = schema.properties.as_mut().and_then(|p| p.get_mut("status")) {
            status.default = Some(JSON(serde_json::json!({
                "observedGeneration": UNOBSERVED_GENERATION
            })));
        }
    }
    crd
}

/// Drops unknown formats (see [`KNOWN_FORMATS`]) and lets a nullable enum hold null: the API
/// server checks `enum` before `nullable`, so `{enum: [pre, post], nullable: true}` refuses the
/// `null` that a finding without a stage carries unless `null` is one of the values.
fn finish_schema(schema: &mut JSONSchemaProps) {
    if schema.nullable == Some(true)
        && let Some(values) = schema.enum_.as_mut()
        && !values.iter().any(|v| v.0.is_null())
    {
        values.push(JSON(serde_json::Value::Null));
    }
    if schema
        .format
        .as_deref()
        .is_some_and(|f| !KNOWN_FORMATS.contains(&f))
    {
        schema.format = None;
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        finish_schema(child);
    }
    for child in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of]
        .into_iter()
        .flatten()
        .flatten()
    {
        finish_schema(child);
    }
    if let Some(not) = schema.not.as_deref_mut() {
        finish_schema(not);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => finish_schema(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(finish_schema),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(extra)) = schema.additional_properties.as_mut() {
        finish_schema(extra);
    }
}

/// The current CRDs: every served version of `Migration` and `MigrationRun`, storing `v1beta1`,
/// annotated with their schema digest and this Stagehand's version ([`crate::digest::annotate`]).
pub fn crds() -> Result<Vec<CustomResourceDefinition>, GenerateError> {
    let crds = vec![
        merged(
            "Migration",
            vec![v1alpha1::Migration::crd(), v1beta1::Migration::crd()],
            STORAGE_VERSION,
        )?,
        merged(
            "MigrationRun",
            vec![v1alpha1::MigrationRun::crd(), v1beta1::MigrationRun::crd()],
            STORAGE_VERSION,
        )?,
    ];
    Ok(crds
        .into_iter()
        .map(finish)
        .map(crate::digest::annotate)
        .collect())
}

/// The CRDs of Stagehand's first release: `v1alpha1` only, served and stored. Used to
/// reproduce, against a real API server, a cluster that still stores `v1alpha1` objects.
pub fn v1alpha1_only_crds() -> Result<Vec<CustomResourceDefinition>, GenerateError> {
    Ok(vec![
        merged("Migration", vec![v1alpha1::Migration::crd()], "v1alpha1")?,
        merged(
            "MigrationRun",
            vec![v1alpha1::MigrationRun::crd()],
            "v1alpha1",
        )?,
    ])
}

/// The versions of one kind's CRD merged into one, storing `storage`.
fn merged(
    kind: &'static str,
    versions: Vec<CustomResourceDefinition>,
    storage: &str,
) -> Result<CustomResourceDefinition, GenerateError> {
    merge_crds(versions, storage).map_err(|source| GenerateError::Merge { kind, source })
}

/// Renders CRDs as one multi-document YAML stream, each document introduced by `---`.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, GenerateError> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(crd)?);
    }
    Ok(out)
}
