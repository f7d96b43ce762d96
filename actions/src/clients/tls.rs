//! CA bundles: the PEM certificates a Migration adds to the public web roots for a server with
//! a private CA (the object store's `caBundle`, Redis' `redis.caBundle`).

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Why a CA bundle cannot be used; the message completes "`<field>` ...".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaBundleError {
    /// No `-----BEGIN CERTIFICATE-----` block.
    #[error(
        "holds no PEM certificate (expected one or more \"-----BEGIN CERTIFICATE-----\" blocks)"
    )]
    Empty,
    /// A block that does not parse.
    #[error("is not a readable PEM certificate bundle: {0}")]
    Unreadable(String),
}

/// The certificates of a PEM bundle; an error when there is none or one does not parse.
pub fn parse_ca_bundle(pem: &str) -> Result<Vec<CertificateDer<'static>>, CaBundleError> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect();
    match certs {
        Ok(certs) if certs.is_empty() => Err(CaBundleError::Empty),
        Ok(certs) => Ok(certs),
        Err(e) => Err(CaBundleError::Unreadable(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_needs_a_readable_certificate() {
        assert_eq!(parse_ca_bundle("not pem"), Err(CaBundleError::Empty));
        assert!(matches!(
            parse_ca_bundle("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(CaBundleError::Unreadable(_))
        ));
    }
}
