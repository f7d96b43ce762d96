//! The protocol clients the actions share. Each speaks one system's wire protocol, names the
//! request in its errors and never the credential:
//!
//! * [`http`]: the one HTTP client builder and the REST helper (the Provisioning API, UDM);
//! * [`tls`]: CA bundles (PEM) read for rustls;
//! * [`ldap`]: the IAM's directory, directly or through `ldapmodify` in its pod;
//! * [`ox`]: OX App Suite's SOAP API;
//! * [`udm`]: the UDM REST API;
//! * [`s3`]: the object store the stages hand work over in;
//! * [`redis`]: a Redis connection that scans and unlinks keys.
//!
//! `fuzzing` (hidden) hands the cargo-fuzz targets of `e2e/fuzzing` the readers of these
//! clients' answers, so that they are fuzzed without a network.

#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod ldap;
pub mod ox;
pub mod redis;
pub mod s3;
pub mod tls;
pub mod udm;
