//! `[grpc]`: what one client connection may hold of the gRPC listener, and
//! how dead connections are found.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// Limits of the gRPC listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// Calls (HTTP/2 streams) one connection may have open at once, Watch
    /// streams included; the client queues further calls.
    pub max_concurrent_streams: u32,
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
            max_concurrent_streams: 1_024,
            keepalive_interval: secs(60),
            keepalive_timeout: secs(20),
        }
    }
}

impl GrpcConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_least(
            self.max_concurrent_streams as usize,
            1,
            "grpc.max_concurrent_streams",
        );
        p.min_duration(self.keepalive_interval, secs(1), "grpc.keepalive_interval");
        p.min_duration(self.keepalive_timeout, secs(1), "grpc.keepalive_timeout");
    }
}
