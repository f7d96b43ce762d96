//! CRD generation: the served versions of each kind merged into one manifest.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
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
    Yaml(#[from] serde_yaml::Error),
}

/// The current CRDs: every served version of `Migration` and `MigrationRun`, storing `v1beta1`.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, GenerateError> {
    Ok(vec![
        merge_crds(
            vec![v1alpha1::Migration::crd(), v1beta1::Migration::crd()],
            STORAGE_VERSION,
        )
        .map_err(|source| GenerateError::Merge {
            kind: "Migration",
            source,
        })?,
        merge_crds(
            vec![v1alpha1::MigrationRun::crd(), v1beta1::MigrationRun::crd()],
            STORAGE_VERSION,
        )
        .map_err(|source| GenerateError::Merge {
            kind: "MigrationRun",
            source,
        })?,
    ])
}

/// The CRDs of Stagehand's first release: `v1alpha1` only, served and stored. Used to
/// reproduce, against a real API server, a cluster that still stores `v1alpha1` objects.
pub fn v1alpha1_only_crds() -> Result<Vec<CustomResourceDefinition>, GenerateError> {
    Ok(vec![
        merge_crds(vec![v1alpha1::Migration::crd()], "v1alpha1").map_err(|source| {
            GenerateError::Merge {
                kind: "Migration",
                source,
            }
        })?,
        merge_crds(vec![v1alpha1::MigrationRun::crd()], "v1alpha1").map_err(|source| {
            GenerateError::Merge {
                kind: "MigrationRun",
                source,
            }
        })?,
    ])
}

/// Renders CRDs as one multi-document YAML stream, each document introduced by `---`.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> Result<String, GenerateError> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(crd)?);
    }
    Ok(out)
}
