//! What the listeners need to face a network: TLS ([`crate::tls`]) and
//! bearer tokens ([`crate::auth`]), loaded together at startup, reloaded
//! together on SIGHUP, and the startup warnings about a listener that is
//! reachable from other hosts without them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::auth::{AuthConfig, Authenticator, TokensError};
use crate::listen::{Limits, Listener};
use crate::tls::{Protocol, ServerTls, TlsConfig, TlsError};

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("[tls] {0}")]
    Tls(#[from] TlsError),
    #[error("[auth] {0}")]
    Tokens(#[from] TokensError),
}

/// TLS and tokens in force.
pub struct Security {
    tls: Option<Arc<ServerTls>>,
    auth: Authenticator,
}

impl Security {
    /// Reads the certificate and tokens files the configuration names.
    pub fn load(tls: &TlsConfig, auth: &AuthConfig) -> Result<Security, SecurityError> {
        let security = Security {
            tls: ServerTls::load(tls)?,
            auth: Authenticator::load(auth)?,
        };
        if let Some(tls) = &security.tls {
            info!(
                certificate = %tls.fingerprint(),
                client_certificates = tls.requires_client_certs(),
                "TLS on"
            );
        }
        if security.auth.enabled() {
            info!(tokens = ?security.auth.token_names(), "bearer tokens required");
        }
        Ok(security)
    }

    pub fn auth(&self) -> &Authenticator {
        &self.auth
    }

    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    /// Wraps a bound socket so its connections are served within `limits`,
    /// over TLS when it is on.
    pub fn listener(
        &self,
        tcp: TcpListener,
        protocol: Protocol,
        limits: Limits,
    ) -> std::io::Result<Listener> {
        Listener::new(tcp, self.tls.clone().map(|t| (t, protocol)), limits)
    }

    /// Warns about each listener other hosts can reach with no tokens or
    /// no TLS.
    pub fn warn_exposure(&self, listeners: &[(&str, SocketAddr)]) {
        for warning in self.exposure(listeners) {
            warn!("{warning}");
        }
    }

    fn exposure(&self, listeners: &[(&str, SocketAddr)]) -> Vec<String> {
        let mut warnings = Vec::new();
        for (key, addr) in listeners {
            if addr.ip().is_loopback() {
                continue;
            }
            if !self.auth.enabled() {
                warnings.push(format!(
                    "{key} {addr} is reachable from other hosts and auth.tokens_file is not set: anyone who reaches it can push and read everything"
                ));
            }
            if self.tls.is_none() {
                warnings.push(format!(
                    "{key} {addr} is reachable from other hosts without TLS: samples, queries and bearer tokens cross the network in clear"
                ));
            }
        }
        warnings
    }

    /// Reads the certificate and tokens files again; whatever fails to load
    /// keeps what was in force, with an error in the log.
    pub fn reload(&self) {
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(fingerprint) => {
                    count_reload("tls", "ok");
                    info!(certificate = %fingerprint, "TLS certificate reloaded");
                }
                Err(e) => {
                    count_reload("tls", "error");
                    error!(error = %e, "TLS reload failed; the previous certificate stays in use");
                }
            }
        }
        if self.auth.enabled() {
            match self.auth.reload() {
                Ok(names) => {
                    count_reload("tokens", "ok");
                    info!(tokens = ?names, "tokens reloaded");
                }
                Err(e) => {
                    count_reload("tokens", "error");
                    error!(error = %e, "tokens reload failed; the previous tokens stay in force");
                }
            }
        }
        if self.tls.is_none() && !self.auth.enabled() {
            info!("SIGHUP received; no TLS or tokens file to reload");
        }
    }

    /// Reloads on every SIGHUP until `stop`. Without this handler SIGHUP
    /// would end the process, so it runs even when there is nothing to
    /// reload.
    pub async fn reload_on_sighup(self: Arc<Self>, stop: CancellationToken) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let mut hup = match signal(SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    error!(error = %e, "cannot listen for SIGHUP; certificates and tokens will not reload");
                    return;
                }
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = hup.recv() => {
                        let this = self.clone();
                        // File reads and key parsing stay off the async workers.
                        if let Err(e) = tokio::task::spawn_blocking(move || this.reload()).await {
                            error!(error = %e, "reload task failed");
                        }
                    }
                }
            }
        }
        #[cfg(not(unix))]
        stop.cancelled().await;
    }
}

fn count_reload(what: &'static str, outcome: &'static str) {
    metrics::counter!("tally_reloads_total", "what" => what, "outcome" => outcome).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listeners_other_hosts_reach_are_warned_about() {
        let open = Security::load(&TlsConfig::default(), &AuthConfig::default()).unwrap();
        let loopback: SocketAddr = "127.0.0.1:4317".parse().unwrap();
        let loopback6: SocketAddr = "[::1]:8080".parse().unwrap();
        assert!(open
            .exposure(&[("grpc_listen", loopback), ("http_listen", loopback6)])
            .is_empty());

        let any: SocketAddr = "0.0.0.0:4317".parse().unwrap();
        let warnings = open.exposure(&[("grpc_listen", any), ("http_listen", loopback)]);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("grpc_listen 0.0.0.0:4317")
                && warnings[0].contains("auth.tokens_file")
        );
        assert!(warnings[1].contains("without TLS"));
    }
}
