//! The protocol clients the actions share. Each speaks one system's wire protocol, names the
//! request in its errors and never the credential:
//!
//! * [`http`]: the one HTTP client builder and the REST helper (the Provisioning API, UDM);
//! * [`tls`]: CA bundles (PEM) read for rustls;
//! * [`ldap`]: the IAM's directory, directly or through `ldapmodify` in its pod;
//! * [`ox`]: OX App Suite's SOAP API;
//! * [`udm`]: the UDM REST API;
//! * [`s3`]: the object store the stages hand work over in;
//! * [`redis`]: a Redis connection that scans and unlinks keys;
//! * [`workload`]: Kubernetes StatefulSets and Deployments, scaled and waited for.

pub mod http;
pub mod ldap;
pub mod ox;
pub mod redis;
pub mod s3;
pub mod tls;
pub mod udm;
pub mod workload;

/// The IAM's object identifier: the directory attribute (and the UDM property of the same name)
/// that the OX Connector links objects by, that `ldap_entryuuid_to_object_identifier` sets to
/// `entryUUID` and that `ox_names_to_object_identifier` renames OX objects to.
pub const IDENTIFIER: &str = "univentionObjectIdentifier";
