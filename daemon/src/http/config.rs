//! `[http]`: what one client may hold of the HTTP listener, so that idle or
//! slow clients cannot exhaust it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// Limits of the HTTP listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Connections open at once; one more is answered 503 and closed.
    /// Keep it below the process's open-file limit.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers, counted
    /// from when it opened or its previous response ended: a client that
    /// sends nothing (or sends slowly) is disconnected after it, and so is
    /// an idle keep-alive connection.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers), in bytes; a larger
    /// one is answered 431.
    pub max_header_bytes: usize,
    /// Largest request body, in bytes (form-encoded Prometheus queries); a
    /// larger one is answered 413.
    pub max_body_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_connections: 1_024,
            header_read_timeout: secs(30),
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
        p.min_duration(
            self.header_read_timeout,
            Duration::from_millis(100),
            "http.header_read_timeout",
        );
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
            header_read_timeout: Duration::ZERO,
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
                "http.max_header_bytes",
                "http.max_body_bytes"
            ]
        );
    }
}
