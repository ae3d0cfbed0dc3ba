//! TLS for the gRPC and HTTP listeners (rustls, ring provider): the
//! certificate chain and key come from PEM files, optionally with a CA whose
//! client certificates the listeners then require. Off by default.
//!
//! Certificates are replaced without a restart: [`ServerTls::reload`] (run
//! on SIGHUP) reads the files again and swaps the whole rustls
//! `ServerConfig`, so every connection accepted afterwards uses the new
//! certificate and client CA while established ones keep theirs. If any file
//! is bad the old configuration stays in force; a daemon never ends up
//! serving without TLS or with half of a rotation.
//!
//! * `certs`: reading the PEM files and building the rustls configurations.
//! * `conn`: the handshake, and the connection type both servers take (the
//!   accept loop that runs it is [`crate::listen`]).

mod certs;
mod conn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

pub use certs::TlsError;
pub use conn::{handshake, Conn, Io};

use crate::validate::Problems;

/// `[tls]`: certificate files and handshake bounds of both listeners.
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

/// Which listener a configuration is for; they differ in the application
/// protocols offered (ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC: HTTP/2 only, which gRPC clients insist on seeing negotiated.
    Grpc,
    /// HTTP: HTTP/2 or HTTP/1.1, whichever the client prefers.
    Http,
}

/// The TLS settings in force, replaced whole on reload.
pub struct ServerTls {
    files: TlsConfig,
    current: RwLock<Arc<certs::Configs>>,
}

impl ServerTls {
    /// Reads the files named in `files`; `None` when TLS is off.
    pub fn load(files: &TlsConfig) -> Result<Option<Arc<ServerTls>>, TlsError> {
        if !files.enabled() {
            return Ok(None);
        }
        let configs = certs::Configs::load(files)?;
        Ok(Some(Arc::new(ServerTls {
            files: files.clone(),
            current: RwLock::new(Arc::new(configs)),
        })))
    }

    /// Reads the files again and, if they are all good, uses them for new
    /// connections; otherwise keeps the configuration in force. Returns the
    /// new leaf certificate's fingerprint (SHA-256, hex) for the log.
    pub fn reload(&self) -> Result<String, TlsError> {
        let configs = certs::Configs::load(&self.files)?;
        let fingerprint = configs.fingerprint.clone();
        *self.current.write() = Arc::new(configs);
        Ok(fingerprint)
    }

    /// Fingerprint (SHA-256, hex) of the leaf certificate in force.
    pub fn fingerprint(&self) -> String {
        self.current.read().fingerprint.clone()
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certs(&self) -> bool {
        !self.files.client_ca_file.as_os_str().is_empty()
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.files.handshake_timeout
    }

    pub(crate) fn max_handshakes(&self) -> usize {
        self.files.max_handshakes
    }

    /// An acceptor with the configuration in force now.
    pub(crate) fn acceptor(&self, protocol: Protocol) -> tokio_rustls::TlsAcceptor {
        let configs = self.current.read();
        tokio_rustls::TlsAcceptor::from(configs.for_protocol(protocol))
    }
}

#[cfg(test)]
mod tests;
