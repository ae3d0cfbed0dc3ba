//! `[http]`: what one client may hold of the HTTP listener, so that idle,
//! silent or slow clients cannot exhaust it: a deadline on every state a
//! connection can wait in (the request head, idle keep-alive, the body, a
//! response the client does not read), a cap on connections with a small
//! reserve for health checks beyond it, and bounds on sizes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// Limits of the HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Connections served at once. At the cap a new connection takes the
    /// place of one that keeps the daemon waiting (silent, trickling, or
    /// stalled for a second); when none does, it goes to the reserve.
    /// Keep it, with the reserve and `grpc.max_connections`, below the
    /// process's open-file limit (checked at start).
    pub max_connections: usize,
    /// Connections beyond `max_connections` that may only ask for
    /// `/healthz`, `/readyz` or `/metrics` (anything else is answered 503
    /// naming `http.max_connections`): one request each, its head within
    /// [`RESERVE_HEADER_TIMEOUT`], so that probes and a scrape get through
    /// a full listener. Beyond them a connection is answered 503 and closed.
    pub reserved_connections: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from when it opened or its previous response ended: a client that
    /// sends nothing (or sends slowly) is disconnected after it, and so is
    /// an idle keep-alive connection.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a request's whole body may take to arrive, counted from the
    /// end of its headers; a slower one is answered 408 and the connection
    /// closed.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// How long a response may wait for the client to take any of it (a
    /// client that stops reading); then the connection is closed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Largest request head (request line and headers), in bytes; a larger
    /// one is answered 431.
    pub max_header_bytes: usize,
    /// Largest request body, in bytes (form-encoded Prometheus queries); a
    /// larger one is answered 413.
    pub max_body_bytes: usize,
}

/// The head deadline of a connection served from the reserve.
pub const RESERVE_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_connections: 1_024,
            reserved_connections: 8,
            header_read_timeout: secs(30),
            body_read_timeout: secs(30),
            write_timeout: secs(30),
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1024 * 1024,
        }
    }
}

/// The smallest buffer hyper accepts for a request head.
const MIN_HEADER_BYTES: usize = 8 * 1024;

impl HttpConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_least(self.max_connections, 1, "http.max_connections");
        for (value, key) in [
            (self.header_read_timeout, "http.header_read_timeout"),
            (self.body_read_timeout, "http.body_read_timeout"),
            (self.write_timeout, "http.write_timeout"),
        ] {
            p.min_duration(value, Duration::from_millis(100), key);
        }
        p.at_least(
            self.max_header_bytes,
            MIN_HEADER_BYTES,
            "http.max_header_bytes",
        );
        p.at_least(self.max_body_bytes, 1, "http.max_body_bytes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_zeroes_do_not() {
        let mut p = Problems::default();
        HttpConfig::default().check(&mut p);
        assert!(p.into_vec().is_empty());
        let mut p = Problems::default();
        HttpConfig {
            max_connections: 0,
            reserved_connections: 0,
            header_read_timeout: Duration::ZERO,
            body_read_timeout: Duration::from_millis(99),
            write_timeout: Duration::ZERO,
            max_header_bytes: 100,
            max_body_bytes: 0,
        }
        .check(&mut p);
        let keys: Vec<&str> = p.into_vec().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "http.max_connections",
                "http.header_read_timeout",
                "http.body_read_timeout",
                "http.write_timeout",
                "http.max_header_bytes",
                "http.max_body_bytes"
            ]
        );
    }
}
