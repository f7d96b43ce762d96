//! The Migration's object store (`spec.objectStore`): one type for the CRD schema, the
//! declaration checks and the actions that hand work over through it, so that a field added
//! here reaches all three.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The region requests are signed for when the settings name none.
pub const DEFAULT_REGION: &str = "us-east-1";

/// The S3-compatible object store the stages hand work over in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// The store's URL, e.g. `https://objectstore.example.org`.
    #[schemars(length(min = 1))]
    pub endpoint: String,
    /// The bucket handover objects are written to.
    #[schemars(length(min = 1))]
    pub bucket: String,
    /// The region to sign requests for; `us-east-1` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Address the bucket in the path (`endpoint/bucket/key`) instead of the host name;
    /// `true` when left out (MinIO, Ceph RGW and AWS all accept it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_style: Option<bool>,
    /// Skip verification of the store's TLS certificate. Off unless set; only for tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// PEM certificates of the CAs to trust for the store's TLS, in addition to the system's
    /// (a store with a private CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// The access key id of the bucket identity.
    #[schemars(length(min = 1))]
    pub access_key_id: String,
    /// The `secretFiles` name holding the identity's secret key
    /// (e.g. `objectstore-migrations-secret-key`).
    #[schemars(length(min = 1))]
    pub secret_key_file: String,
}

impl ObjectStore {
    /// The region requests are signed for: `region`, or [`DEFAULT_REGION`] when it is left out
    /// or blank.
    pub fn region(&self) -> &str {
        match self.region.as_deref() {
            Some(r) if !r.trim().is_empty() => r.trim(),
            _ => DEFAULT_REGION,
        }
    }

    /// Whether the bucket is addressed in the path (the default) or in the host name.
    pub fn path_style(&self) -> bool {
        self.path_style.unwrap_or(true)
    }

    /// Whether TLS verification is skipped (only when explicitly set).
    pub fn insecure_skip_tls_verify(&self) -> bool {
        self.insecure_skip_tls_verify.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_only_to_what_is_left_out() {
        let left_out = ObjectStore::default();
        assert_eq!(left_out.region(), DEFAULT_REGION);
        assert!(left_out.path_style());
        assert!(!left_out.insecure_skip_tls_verify());
        let set = ObjectStore {
            region: Some(" eu-central-1 ".into()),
            path_style: Some(false),
            insecure_skip_tls_verify: Some(true),
            ..ObjectStore::default()
        };
        assert_eq!(set.region(), "eu-central-1");
        assert!(!set.path_style());
        assert!(set.insecure_skip_tls_verify());
    }
}
