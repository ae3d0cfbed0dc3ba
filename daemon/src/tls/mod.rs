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
mod config;
mod conn;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

pub use certs::TlsError;
pub use config::TlsConfig;
pub use conn::{handshake, Conn, Io};

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
