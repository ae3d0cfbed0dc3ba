//! `[grpc]`: what one client connection may hold of the gRPC listener, how
//! many connections it takes, and how silent, idle and dead connections are
//! found and closed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// Limits of the gRPC listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Connections open at once. At the cap a new connection takes the
    /// place of one that keeps the daemon waiting (silent, no call yet, or
    /// no call for a second); when every connection has a call in progress
    /// it is closed. Keep it, with `http.max_connections`, below the
    /// process's open-file limit (checked at start).
    pub max_connections: usize,
    /// Calls (HTTP/2 streams) one connection may have open at once, Watch
    /// streams included; the client queues further calls.
    pub max_concurrent_streams: u32,
    /// How long a connection may take to send the HTTP/2 preface, counted
    /// from its accept (or, with TLS, its handshake's end).
    #[serde(with = "humantime_serde")]
    pub preface_timeout: Duration,
    /// A connection with no call in progress for this long is closed
    /// (GOAWAY); clients reconnect on their next call.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// How often the server pings a connection, so that a peer that went
    /// away without closing is noticed.
    #[serde(with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    #[serde(with = "humantime_serde")]
    pub keepalive_timeout: Duration,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            max_connections: 1_024,
            max_concurrent_streams: 1_024,
            preface_timeout: secs(10),
            idle_timeout: secs(5 * 60),
            keepalive_interval: secs(60),
            keepalive_timeout: secs(20),
        }
    }
}

impl GrpcConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_least(self.max_connections, 1, "grpc.max_connections");
        p.at_least(
            self.max_concurrent_streams as usize,
            1,
            "grpc.max_concurrent_streams",
        );
        p.min_duration(
            self.preface_timeout,
            Duration::from_millis(100),
            "grpc.preface_timeout",
        );
        p.min_duration(self.idle_timeout, secs(1), "grpc.idle_timeout");
        p.min_duration(self.keepalive_interval, secs(1), "grpc.keepalive_interval");
        p.min_duration(self.keepalive_timeout, secs(1), "grpc.keepalive_timeout");
    }
}
