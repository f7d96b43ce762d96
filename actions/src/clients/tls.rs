//! The one TLS story of every client (LDAP, Redis, PostgreSQL; the HTTP clients and S3 to
//! follow): the server's certificate is checked against the public web roots (Mozilla's list
//! as webpki-roots ships it), the system's store (the image's Debian `ca-certificates`, or the
//! file `SSL_CERT_FILE` names) and the client's optional `caBundle`; `insecureSkipTlsVerify`
//! turns the check off, and whoever uses that reports it as a warning of the run
//! ([`insecure_warning`], [`crate::action::Warnings`]).
//!
//! A `caBundle` value is a PEM **file path** (what openDesk mounts with `trust.secret.mount`:
//! `/etc/opendesk/trust/ca-certificates.crt`); for compatibility with earlier configs a value
//! whose first non-blank characters are `-----BEGIN` is the PEM text itself. The file is read
//! when the client is built, which every action does in its preflight, before the first
//! change; errors name the key, the path and the problem.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::action::ActionError;

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

/// Whether a `caBundle` value is the PEM text itself (its first non-blank characters are
/// `-----BEGIN`) rather than the path of a PEM file.
pub fn is_inline_pem(value: &str) -> bool {
    value.trim_start().starts_with("-----BEGIN")
}

/// Why a client's TLS cannot be set up. Messages name the config key (`ldap.caBundle`) and,
/// for a file, its path; never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The file is not there.
    #[error(
        "{key} {path:?}: no such file in the operator's pod (mount the CA bundle there, e.g. openDesk's trust Secret, or fix the path)"
    )]
    Missing {
        /// `ldap.caBundle`.
        key: String,
        /// The path.
        path: String,
    },
    /// The file cannot be read (permissions, a directory).
    #[error("{key} {path:?} cannot be read: {message}")]
    Unreadable {
        /// `ldap.caBundle`.
        key: String,
        /// The path.
        path: String,
        /// The operating system's reason.
        message: String,
    },
    /// The bundle (a file or inline text) holds no usable certificate.
    #[error("{key} {what} {problem}")]
    Bundle {
        /// `ldap.caBundle`.
        key: String,
        /// `"/etc/opendesk/trust/ca-certificates.crt"` or `(inline PEM)`.
        what: String,
        /// What is wrong with it.
        problem: CaBundleError,
    },
    /// A certificate rustls cannot use as a trust anchor.
    #[error("{key} {what} holds a certificate that cannot be used as a trust anchor: {message}")]
    Anchor {
        /// `ldap.caBundle`.
        key: String,
        /// The path or `(inline PEM)`.
        what: String,
        /// rustls' reason.
        message: String,
    },
    /// rustls refuses the set-up (no protocol version in common with the provider).
    #[error("TLS set-up: {0}")]
    Setup(String),
}

impl From<TlsError> for ActionError {
    fn from(e: TlsError) -> Self {
        match e {
            TlsError::Missing { .. } => ActionError::NotFound(e.to_string()),
            _ => ActionError::Failed(e.to_string()),
        }
    }
}

/// What is wrong with a `caBundle` value at config time (no file is read): inline PEM that
/// does not parse, or a path that is not absolute.
pub fn ca_bundle_issue(value: &str) -> Option<String> {
    if is_inline_pem(value) {
        return parse_ca_bundle(value).err().map(|e| e.to_string());
    }
    if !Path::new(value).is_absolute() {
        return Some(format!(
            "{value:?} is neither the absolute path of a PEM file (openDesk mounts its CA at /etc/opendesk/trust/ca-certificates.crt) nor PEM text starting with -----BEGIN CERTIFICATE-----"
        ));
    }
    None
}

/// The certificates of the `caBundle` value at `key`: the PEM text itself, or the PEM file
/// it names, read now.
pub fn load_ca_bundle(key: &str, value: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let (pem, what) = if is_inline_pem(value) {
        (value.to_string(), "(inline PEM)".to_string())
    } else {
        let read = std::fs::read(value).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TlsError::Missing {
                key: key.to_string(),
                path: value.to_string(),
            },
            _ => TlsError::Unreadable {
                key: key.to_string(),
                path: value.to_string(),
                message: e.to_string(),
            },
        })?;
        (
            String::from_utf8_lossy(&read).into_owned(),
            format!("{value:?}"),
        )
    };
    parse_ca_bundle(&pem).map_err(|problem| TlsError::Bundle {
        key: key.to_string(),
        what,
        problem,
    })
}

/// The system's CA certificates (`SSL_CERT_FILE`/`SSL_CERT_DIR` when set, else the
/// platform's store), read once per process; those rustls cannot use are skipped.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// The trust anchors of a client: the public web roots, the system's store and the
/// `caBundle` value at `key` (read now).
pub fn root_store(key: &str, ca_bundle: Option<&str>) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for cert in system_roots() {
        let _ = roots.add(cert.clone());
    }
    if let Some(value) = ca_bundle {
        let what = if is_inline_pem(value) {
            "(inline PEM)".to_string()
        } else {
            format!("{value:?}")
        };
        for cert in load_ca_bundle(key, value)? {
            roots.add(cert).map_err(|e| TlsError::Anchor {
                key: key.to_string(),
                what: what.clone(),
                message: e.to_string(),
            })?;
        }
    }
    Ok(roots)
}

/// How a client checks the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The chain against the trust anchors, and the host name.
    Full,
    /// The chain, not the host name (libpq's `verify-ca`).
    ChainOnly,
    /// Nothing (`insecureSkipTlsVerify`; libpq's `require`): the channel is encrypted, the
    /// server not authenticated. The caller reports it ([`insecure_warning`]).
    Nothing,
}

/// The rustls client config (ring) of a client whose settings are at `key` (`ldap`,
/// `redis`): [`root_store`] and `verify`. With [`Verify::Nothing`] the bundle is not read.
pub fn client_config(
    key: &str,
    ca_bundle: Option<&str>,
    verify: Verify,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    if verify == Verify::Nothing {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
            .with_no_client_auth());
    }
    let roots = root_store(&format!("{key}.caBundle"), ca_bundle)?;
    if verify == Verify::Full {
        return Ok(builder.with_root_certificates(roots).with_no_client_auth());
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(verifier)))
        .with_no_client_auth())
}

/// The warning of a client that does not check the server's certificate: `setting` (e.g.
/// `ldap.insecureSkipTlsVerify`) and the server (`ldaps://ldap:636`).
pub fn insecure_warning(setting: &str, target: &str) -> String {
    format!(
        "{setting} is set: the TLS certificate of {target} is not verified, so anyone on the network path can pose as the server and read the credentials sent to it; trust its CA with caBundle instead"
    )
}

/// What to do about a failed handshake, from the error's text (rustls' `invalid peer
/// certificate: UnknownIssuer`, ...); `key` is the client's config key (`ldap`). `None`
/// when the text names no certificate problem.
pub fn certificate_hint(key: &str, error: &str) -> Option<String> {
    let hint = if error.contains("UnknownIssuer") || error.contains("UnknownCA") {
        format!(
            "the server's certificate is issued by a CA that is not trusted (untrusted issuer): add that CA to {key}.caBundle (a PEM file path, e.g. openDesk's /etc/opendesk/trust/ca-certificates.crt)"
        )
    } else if error.contains("NotValidForName") {
        format!(
            "the server's certificate is not valid for the host name in {key}'s address: connect with a name the certificate carries"
        )
    } else if error.contains("Expired") || error.contains("NotValidYet") {
        "the server's certificate is expired or not yet valid (check its dates and the clocks)"
            .to_string()
    } else if error.contains("invalid peer certificate") || error.contains("InvalidCertificate") {
        format!(
            "the server's certificate was refused: it must be valid for the host name and issued by a CA in the public web roots, the system's store or {key}.caBundle"
        )
    } else {
        return None;
    };
    Some(hint)
}

/// Accepts any certificate whose handshake signature verifies ([`Verify::Nothing`]).
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Checks the chain, and not the host name ([`Verify::ChainOnly`]).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (generated once with openssl for these tests).
    const CA_PEM: &str = include_str!("tls_test_ca.pem");

    #[test]
    fn a_bundle_needs_a_readable_certificate() {
        assert_eq!(parse_ca_bundle("not pem"), Err(CaBundleError::Empty));
        assert!(matches!(
            parse_ca_bundle("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"),
            Err(CaBundleError::Unreadable(_))
        ));
    }

    #[test]
    fn a_value_is_inline_pem_or_an_absolute_path() {
        assert!(is_inline_pem(&format!("\n  {CA_PEM}")));
        assert!(!is_inline_pem("/etc/opendesk/trust/ca-certificates.crt"));
        assert_eq!(ca_bundle_issue(CA_PEM), None);
        assert_eq!(
            ca_bundle_issue("/etc/opendesk/trust/ca-certificates.crt"),
            None
        );
        assert!(ca_bundle_issue("ca.crt").unwrap().contains("absolute path"));
        assert!(
            ca_bundle_issue("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
                .unwrap()
                .contains("not a readable PEM")
        );
    }

    #[test]
    fn a_bundle_file_is_read_and_its_problems_name_key_and_path() {
        let dir = std::env::temp_dir().join(format!("sh-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("ca.crt");
        std::fs::write(&good, CA_PEM).unwrap();
        let good = good.to_string_lossy().into_owned();
        assert_eq!(load_ca_bundle("ldap.caBundle", &good).unwrap().len(), 1);
        assert_eq!(load_ca_bundle("ldap.caBundle", CA_PEM).unwrap().len(), 1);
        assert!(client_config("ldap", Some(&good), Verify::Full).is_ok());
        assert!(client_config("ldap", Some(&good), Verify::ChainOnly).is_ok());

        let missing = dir.join("absent.crt").to_string_lossy().into_owned();
        let e = load_ca_bundle("ldap.caBundle", &missing).unwrap_err();
        assert!(matches!(e, TlsError::Missing { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with("ldap.caBundle"), "{text}");
        assert!(
            text.contains(&missing) && text.contains("no such file"),
            "{text}"
        );
        assert!(matches!(ActionError::from(e), ActionError::NotFound(_)));

        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "no certificate here").unwrap();
        let empty = empty.to_string_lossy().into_owned();
        let text = client_config("redis", Some(&empty), Verify::Full)
            .unwrap_err()
            .to_string();
        assert!(text.starts_with("redis.caBundle"), "{text}");
        assert!(
            text.contains(&empty) && text.contains("holds no PEM"),
            "{text}"
        );

        let text = load_ca_bundle("ldap.caBundle", dir.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(text.contains("cannot be read"), "{text}");
        // Skipping the check reads no bundle.
        assert!(client_config("ldap", Some(&missing), Verify::Nothing).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_hint_names_the_ca_problem_and_the_key() {
        let hint =
            certificate_hint("ldap", "TLS: invalid peer certificate: UnknownIssuer").unwrap();
        assert!(hint.contains("untrusted issuer"), "{hint}");
        assert!(hint.contains("ldap.caBundle"), "{hint}");
        assert!(
            certificate_hint("ldap", "NotValidForNameContext { .. }")
                .unwrap()
                .contains("host name")
        );
        assert_eq!(certificate_hint("ldap", "connection refused"), None);
        let warning = insecure_warning("ldap.insecureSkipTlsVerify", "ldaps://ldap:636");
        assert!(
            warning.starts_with("ldap.insecureSkipTlsVerify is set"),
            "{warning}"
        );
        assert!(warning.contains("ldaps://ldap:636"), "{warning}");
    }
}
