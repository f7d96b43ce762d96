//! Which Stagehand wrote an installed CRD, and whether its schema is the one this Stagehand
//! writes (docs/deploy.md#crd-policy).
//!
//! `stagehand crds` annotates each CRD with [`SCHEMA_DIGEST_ANNOTATION`] (the SHA-256 of the
//! canonical JSON of its `spec`, see [`schema_digest`]) and [`VERSION_ANNOTATION`] (the Stagehand
//! version that generated it). The API server defaults fields of a CRD's spec, so the digest of
//! an installed CRD cannot be recomputed from what the API server returns: the operator compares
//! the annotations ([`compare`]). A CRD whose schema lags behind the operator's makes the API
//! server drop, without an error, the status fields the safety rules depend on (the frozen plan,
//! the problems); [`Verdict::Stale`] is that case.
//!
//! Everything here is pure: no client, no I/O.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use sha2::{Digest, Sha256};

/// The annotation holding the schema digest, `sha256:<64 hex digits>`.
pub const SCHEMA_DIGEST_ANNOTATION: &str = "stagehand.dev/schema-digest";
/// The annotation holding the version of the Stagehand that generated the CRD.
pub const VERSION_ANNOTATION: &str = "stagehand.dev/version";
/// This Stagehand's version, as [`VERSION_ANNOTATION`] records it.
pub const OWN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `value` serialized with every object's keys sorted and no whitespace: the same JSON value
/// always gives the same bytes, whatever order its maps were built in.
pub fn canonical_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            let fields: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        scalar => scalar.to_string(),
    }
}

/// The schema digest of `crd`: `sha256:` and the hex SHA-256 of the canonical JSON of its
/// `spec` ([`canonical_json`]). Metadata, and so the annotations themselves, do not count.
pub fn schema_digest(crd: &CustomResourceDefinition) -> String {
    // A CRD spec is plain data: serializing it cannot fail; `Null` would still give a digest
    // that matches no real one.
    let spec = serde_json::to_value(&crd.spec).unwrap_or(serde_json::Value::Null);
    let hash = Sha256::digest(canonical_json(&spec).as_bytes());
    format!("sha256:{hash:x}")
}

/// `crd` with [`SCHEMA_DIGEST_ANNOTATION`] and [`VERSION_ANNOTATION`] (this Stagehand's) set.
pub fn annotate(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let digest = schema_digest(&crd);
    let annotations = crd.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(SCHEMA_DIGEST_ANNOTATION.into(), digest);
    annotations.insert(VERSION_ANNOTATION.into(), OWN_VERSION.into());
    crd
}

/// What the operator makes of an installed CRD of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The installed schema is the operator's (same digest).
    Current,
    /// Written by a newer Stagehand: its schema is a superset of this operator's (a version
    /// only ever adds fields, docs/design.md#the-api), so it is accepted, with a warning.
    Newer {
        /// The installed CRD's [`VERSION_ANNOTATION`].
        installed_version: String,
    },
    /// Not known to hold this operator's schema: written by an older Stagehand, by the same
    /// version with another schema, by an unknown one, or without the annotations (by hand, by
    /// a Stagehand before they existed). The API server would drop fields it does not know.
    Stale {
        /// The installed [`SCHEMA_DIGEST_ANNOTATION`], if any.
        installed_digest: Option<String>,
        /// The installed [`VERSION_ANNOTATION`], if any.
        installed_version: Option<String>,
    },
    /// Not installed at all.
    Missing,
}

impl Verdict {
    /// Whether the operator may run its controllers on the CRD.
    pub fn acceptable(&self) -> bool {
        matches!(self, Verdict::Current | Verdict::Newer { .. })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Current => write!(f, "current (schema digest and Stagehand {OWN_VERSION})"),
            Verdict::Newer { installed_version } => write!(
                f,
                "written by a newer Stagehand ({installed_version}, this operator is {OWN_VERSION})"
            ),
            Verdict::Stale {
                installed_digest: None,
                ..
            } => write!(
                f,
                "stale: it has no {SCHEMA_DIGEST_ANNOTATION} annotation (not written by `stagehand crds` of this or a later release)"
            ),
            Verdict::Stale {
                installed_digest: Some(digest),
                installed_version,
            } => write!(
                f,
                "stale: installed schema digest {digest} (Stagehand {}), this operator's differs",
                installed_version.as_deref().unwrap_or("unknown")
            ),
            Verdict::Missing => write!(f, "not installed"),
        }
    }
}

/// Compares an installed CRD's annotations (`None`: the CRD does not exist) with this
/// operator's `own_digest` and `own_version`.
///
/// The same digest is [`Verdict::Current`], whatever the versions say. Another digest with a
/// version strictly newer than `own_version` (semantic versioning, a leading `v` allowed) is
/// [`Verdict::Newer`]; with the same, an older or an unreadable version, or without the
/// annotations, it is [`Verdict::Stale`].
pub fn compare(
    installed: Option<&BTreeMap<String, String>>,
    own_digest: &str,
    own_version: &str,
) -> Verdict {
    let Some(annotations) = installed else {
        return Verdict::Missing;
    };
    let installed_digest = annotations.get(SCHEMA_DIGEST_ANNOTATION).cloned();
    let installed_version = annotations.get(VERSION_ANNOTATION).cloned();
    if installed_digest.as_deref() == Some(own_digest) {
        return Verdict::Current;
    }
    if installed_digest.is_some()
        && let (Some(theirs), Some(ours)) = (
            installed_version.as_deref().and_then(parse_version),
            parse_version(own_version),
        )
        && theirs > ours
    {
        return Verdict::Newer {
            installed_version: installed_version.unwrap_or_default(),
        };
    }
    Verdict::Stale {
        installed_digest,
        installed_version,
    }
}

fn parse_version(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.strip_prefix('v').unwrap_or(v)).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn annotations(digest: Option<&str>, version: Option<&str>) -> BTreeMap<String, String> {
        let mut a = BTreeMap::new();
        if let Some(d) = digest {
            a.insert(SCHEMA_DIGEST_ANNOTATION.to_string(), d.to_string());
        }
        if let Some(v) = version {
            a.insert(VERSION_ANNOTATION.to_string(), v.to_string());
        }
        a
    }

    #[test]
    fn the_same_digest_is_current_whatever_the_versions() {
        for version in [
            Some("0.1.0"),
            Some("9.0.0"),
            Some("0.0.1"),
            Some("junk"),
            None,
        ] {
            assert_eq!(
                compare(
                    Some(&annotations(Some("sha256:a"), version)),
                    "sha256:a",
                    "1.2.0"
                ),
                Verdict::Current
            );
        }
    }

    #[test]
    fn another_digest_is_stale_unless_a_newer_stagehand_wrote_it() {
        let own = ("sha256:mine", "1.2.0");
        let cases = [
            (Some("1.1.9"), false),
            (Some("1.2.0"), false),
            (Some("1.2.0-rc.1"), false),
            (Some("1.2.1"), true),
            (Some("v1.3.0"), true),
            (Some("2.0.0-alpha.1"), true),
            (Some("not a version"), false),
            (None, false),
        ];
        for (version, newer) in cases {
            let verdict = compare(
                Some(&annotations(Some("sha256:theirs"), version)),
                own.0,
                own.1,
            );
            assert_eq!(
                verdict.acceptable(),
                newer,
                "installed {version:?}: {verdict:?}"
            );
            assert_eq!(
                matches!(verdict, Verdict::Newer { .. }),
                newer,
                "{verdict:?}"
            );
        }
    }

    #[test]
    fn no_digest_is_stale_even_from_a_newer_version_and_no_crd_is_missing() {
        let verdict = compare(
            Some(&annotations(None, Some("99.0.0"))),
            "sha256:a",
            "1.0.0",
        );
        assert_eq!(
            verdict,
            Verdict::Stale {
                installed_digest: None,
                installed_version: Some("99.0.0".into())
            }
        );
        assert!(verdict.to_string().contains(SCHEMA_DIGEST_ANNOTATION));
        assert_eq!(compare(None, "sha256:a", "1.0.0"), Verdict::Missing);
        assert!(!Verdict::Missing.acceptable());
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a = serde_json::json!({"b": 1, "a": {"d": [{"y": 1, "x": 2}], "c": null}});
        let b = serde_json::json!({"a": {"c": null, "d": [{"x": 2, "y": 1}]}, "b": 1});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"d":[{"x":2,"y":1}]},"b":1}"#
        );
        assert_ne!(
            canonical_json(&serde_json::json!(["a", "b"])),
            canonical_json(&serde_json::json!(["b", "a"])),
            "the order of a list counts"
        );
    }

    #[test]
    fn the_digest_covers_the_spec_and_not_the_annotations() {
        let crds = crate::generate::crds().unwrap();
        let crd = &crds[0];
        let digest = crd
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(SCHEMA_DIGEST_ANNOTATION)
            .unwrap()
            .clone();
        assert_eq!(digest, schema_digest(crd), "annotated with its own digest");
        assert!(
            digest.starts_with("sha256:") && digest.len() == 7 + 64,
            "{digest}"
        );
        let mut relabelled = crd.clone();
        relabelled.metadata.annotations = None;
        assert_eq!(schema_digest(&relabelled), digest);
        let mut changed = crd.clone();
        changed.spec.versions[0].served = !changed.spec.versions[0].served;
        assert_ne!(
            schema_digest(&changed),
            digest,
            "a schema change changes it"
        );
        assert_ne!(schema_digest(&crds[1]), digest, "each CRD has its own");
    }

    fn version() -> impl Strategy<Value = String> {
        (0u64..4, 0u64..4, 0u64..4, proptest::option::of(0u64..3)).prop_map(|(a, b, c, pre)| {
            match pre {
                Some(p) => format!("{a}.{b}.{c}-rc.{p}"),
                None => format!("{a}.{b}.{c}"),
            }
        })
    }

    proptest! {
        /// Two Stagehands looking at each other's CRD: the same digest is current for both;
        /// another digest is accepted by at most one of them (the older one, as newer), so a
        /// CRD older than its operator is never accepted.
        #[test]
        fn at_most_one_of_two_stagehands_accepts_the_other_s_crd(
            v1 in version(), v2 in version(), d1 in "[ab]", d2 in "[ab]",
        ) {
            let one = compare(Some(&annotations(Some(&d2), Some(&v2))), &d1, &v1);
            let two = compare(Some(&annotations(Some(&d1), Some(&v1))), &d2, &v2);
            if d1 == d2 {
                prop_assert_eq!(&one, &Verdict::Current);
                prop_assert_eq!(&two, &Verdict::Current);
            } else {
                prop_assert!(!(one.acceptable() && two.acceptable()), "{:?} {:?}", one, two);
                let (p1, p2) = (parse_version(&v1).unwrap(), parse_version(&v2).unwrap());
                prop_assert_eq!(one.acceptable(), p2 > p1);
                prop_assert_eq!(two.acceptable(), p1 > p2);
            }
        }
    }
}
