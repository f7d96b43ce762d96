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
//! * [`postgres`]: a PostgreSQL connection (the `sslMode`s of libpq, over rustls);
//! * [`synapse`]: Synapse's admin API (shared-secret registration, deactivation);
//! * [`labelled`]: ConfigMaps and Secrets written for another tool (its labels, names, a racing create);
//! * [`workload`]: Kubernetes StatefulSets and Deployments, scaled and waited for.

pub mod http;
pub mod labelled;
pub mod ldap;
pub mod ox;
pub mod postgres;
pub mod redis;
pub mod s3;
pub mod synapse;
pub mod tls;
pub mod udm;
pub mod workload;

/// The IAM's object identifier: the directory attribute (and the UDM property of the same name)
/// that the OX Connector links objects by, that `ldap_entryuuid_to_object_identifier` sets to
/// `entryUUID` and that `ox_names_to_object_identifier` renames OX objects to.
pub const IDENTIFIER: &str = "univentionObjectIdentifier";

/// A UUID's 128 bits from its text (how the actions compare identifiers and OIDC subjects): 32 hex digits, any case, hyphens anywhere, optional
/// braces. `None` when it is not a UUID.
pub fn parse_uuid(text: &str) -> Option<u128> {
    let trimmed = text.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(trimmed);
    let mut value: u128 = 0;
    let mut digits = 0;
    for c in inner.chars() {
        if c == '-' {
            continue;
        }
        let digit = c.to_digit(16)?;
        digits += 1;
        if digits > 32 {
            return None;
        }
        value = (value << 4) | u128::from(digit);
    }
    (digits == 32).then_some(value)
}

/// The canonical text of a UUID: lower case, 8-4-4-4-12.
pub fn format_uuid(uuid: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for i in 0..32 {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        let nibble = (uuid >> (124 - 4 * i)) & 0xf;
        out.push(char::from(HEX[nibble as usize]));
    }
    out
}
