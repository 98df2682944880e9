//! HTTPS for `kbdb serve --tls-cert PEM --tls-key PEM` (rustls with the ring provider).

use std::path::PathBuf;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::error::{KbError, Result};

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The TLS acceptor for `files`; a file that cannot be read or used is named in the error.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<std::result::Result<_, _>>())
        .map_err(|e| {
            KbError::invalid(
                "tls-cert",
                format!(
                    "{}: not a readable PEM certificate file ({e})",
                    files.cert.display()
                ),
            )
        })?;
    if certs.is_empty() {
        return Err(KbError::invalid(
            "tls-cert",
            format!("{}: holds no PEM certificate", files.cert.display()),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        KbError::invalid(
            "tls-key",
            format!(
                "{}: not a readable PEM private key ({e})",
                files.key.display()
            ),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| KbError::invalid("tls-cert", format!("TLS setup failed: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            KbError::invalid(
                "tls-key",
                format!("does not fit the certificate or is not usable: {e}"),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
