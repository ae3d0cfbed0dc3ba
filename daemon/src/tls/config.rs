//! `[tls]`, certificate files and handshake bounds: the section's type, its
//! defaults and its checks, kept beside what it configures.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[tls]`: certificate files and handshake bounds of the gRPC and HTTP
/// listeners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first; empty serves plain text.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM CA certificates; when set, clients must present a certificate
    /// issued by one of them.
    pub client_ca_file: PathBuf,
    /// A client that has not finished its whole handshake by then is
    /// dropped.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// Handshakes in progress per listener; at the cap a new connection
    /// takes the place of the handshake that has waited longest on its
    /// client.
    pub max_handshakes: usize,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
            client_ca_file: PathBuf::new(),
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
        }
    }
}

impl TlsConfig {
    /// Whether the listeners speak TLS.
    pub fn enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty()
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        let key = !self.key_file.as_os_str().is_empty();
        p.require(
            !self.enabled() || key,
            "tls.key_file",
            "must be set when tls.cert_file is",
        );
        p.require(
            self.enabled() || !key,
            "tls.cert_file",
            "must be set when tls.key_file is",
        );
        p.require(
            self.enabled() || self.client_ca_file.as_os_str().is_empty(),
            "tls.client_ca_file",
            "needs tls.cert_file and tls.key_file: client certificates are only asked for over TLS",
        );
        p.positive(self.handshake_timeout, "tls.handshake_timeout");
        p.at_least(self.max_handshakes, 1, "tls.max_handshakes");
    }
}
