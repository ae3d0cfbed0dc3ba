//! Reading the certificate, key and client-CA files into rustls server
//! configurations, one per listener protocol. Every failure names the file
//! and what is wrong with it, so a bad rotation is fixed from the log line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::{Protocol, TlsConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no PEM private key")]
    NoKey { path: PathBuf },
    #[error("{path}: certificate {index} is not usable as a client CA: {reason}")]
    BadCa {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error("tls.client_ca_file {path}: {reason}")]
    Verifier { path: PathBuf, reason: String },
    #[error("tls.cert_file {cert} with tls.key_file {key}: {reason}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

/// The server configurations built from one reading of the files.
pub(super) struct Configs {
    grpc: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
    /// SHA-256 of the leaf certificate, hex: says in the log which
    /// certificate a reload put in force.
    pub(super) fingerprint: String,
}

impl Configs {
    pub(super) fn load(files: &TlsConfig) -> Result<Configs, TlsError> {
        let chain = read_chain(&files.cert_file)?;
        let key = read_key(&files.key_file)?;
        let fingerprint = hex(ring::digest::digest(&ring::digest::SHA256, &chain[0]).as_ref());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let build = |alpn: &[&[u8]]| -> Result<Arc<ServerConfig>, TlsError> {
            let pair = |reason: String| TlsError::Pair {
                cert: files.cert_file.clone(),
                key: files.key_file.clone(),
                reason,
            };
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| pair(e.to_string()))?;
            let builder = if files.client_ca_file.as_os_str().is_empty() {
                builder.with_no_client_auth()
            } else {
                builder.with_client_cert_verifier(client_verifier(
                    &files.client_ca_file,
                    provider.clone(),
                )?)
            };
            let mut config = builder
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(|e| pair(e.to_string()))?;
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(Arc::new(config))
        };
        Ok(Configs {
            grpc: build(&[b"h2"])?,
            // The HTTP server speaks HTTP/1.1 only: its limits (header
            // deadline, header size) are HTTP/1 settings.
            http: build(&[b"http/1.1"])?,
            fingerprint,
        })
    }

    pub(super) fn for_protocol(&self, protocol: Protocol) -> Arc<ServerConfig> {
        match protocol {
            Protocol::Grpc => self.grpc.clone(),
            Protocol::Http => self.http.clone(),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Every certificate in `path`, in file order (leaf first).
fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Read {
            path: path.to_path_buf(),
            reason: format!("not valid PEM: {e}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    // The parser's messages never include key material.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_path_buf(),
        },
        e => TlsError::Read {
            path: path.to_path_buf(),
            reason: format!("not a valid PEM private key: {e}"),
        },
    })
}

fn client_verifier(
    path: &Path,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for (index, ca) in read_chain(path)?.into_iter().enumerate() {
        roots.add(ca).map_err(|e| TlsError::BadCa {
            path: path.to_path_buf(),
            index,
            reason: e.to_string(),
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::Verifier {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            Files {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    fn self_signed(name: &str) -> rcgen::CertifiedKey<rcgen::KeyPair> {
        rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap()
    }

    fn config(files: &Files, cert: &str, key: &str) -> TlsConfig {
        TlsConfig {
            cert_file: files.write("cert.pem", cert),
            key_file: files.write("key.pem", key),
            ..TlsConfig::default()
        }
    }

    #[test]
    fn loads_a_pair_and_offers_the_right_protocols() {
        let files = Files::new();
        let ck = self_signed("localhost");
        let cfg = config(&files, &ck.cert.pem(), &ck.signing_key.serialize_pem());
        let configs = Configs::load(&cfg).unwrap();
        assert_eq!(configs.grpc.alpn_protocols, vec![b"h2".to_vec()]);
        assert_eq!(configs.http.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(configs.fingerprint.len(), 64);
    }

    #[test]
    fn bad_files_name_themselves() {
        let files = Files::new();
        let a = self_signed("a");
        let b = self_signed("b");
        let err = |cfg: &TlsConfig| match Configs::load(cfg) {
            Ok(_) => panic!("loaded a bad configuration"),
            Err(e) => e.to_string(),
        };

        // A key that belongs to another certificate.
        let cfg = config(&files, &a.cert.pem(), &b.signing_key.serialize_pem());
        assert!(err(&cfg).contains("tls.cert_file"), "{}", err(&cfg));

        let cfg = config(&files, "not pem", &a.signing_key.serialize_pem());
        assert!(err(&cfg).contains("holds no PEM certificate"));

        let cfg = config(&files, &a.cert.pem(), &a.cert.pem());
        assert!(err(&cfg).contains("holds no PEM private key"));

        let mut cfg = config(&files, &a.cert.pem(), &a.signing_key.serialize_pem());
        cfg.client_ca_file = files.dir.path().join("missing.pem");
        assert!(err(&cfg).contains("missing.pem"));

        cfg.client_ca_file = files.write("ca.pem", &b.cert.pem());
        assert!(Configs::load(&cfg).is_ok());
    }
}
