//! `[graphite]`: the Graphite plaintext listener, off unless `listen` is set.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems};

/// The Graphite plaintext listener and how its lines map to sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GraphiteConfig {
    /// `host:port` to listen on (Graphite's conventional port is 2003);
    /// empty turns the listener off.
    pub listen: String,
    /// Which component of a path (1-based) names the source; the others
    /// are the metric.
    pub source_component: usize,
    /// Longest line, in bytes; a longer one is cut there and the rest of
    /// it discarded, unread.
    pub max_line_bytes: usize,
    /// Connections open at once; another is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Lines of one connection admitted together, at most.
    pub batch_lines: usize,
    /// How long a connection's lines may wait before they are admitted.
    #[serde(with = "humantime_serde")]
    pub batch_delay: Duration,
}

impl Default for GraphiteConfig {
    fn default() -> Self {
        GraphiteConfig {
            listen: String::new(),
            source_component: 1,
            max_line_bytes: 8 * 1024,
            max_connections: 1_024,
            idle_timeout: secs(300),
            batch_lines: 5_000,
            batch_delay: Duration::from_millis(200),
        }
    }
}

impl GraphiteConfig {
    /// The address to listen on; None when the listener is off.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listen.trim().parse().ok()
    }

    pub(crate) fn check(&self, max_batch_samples: usize, p: &mut Problems) {
        let listen = self.listen.trim();
        p.require(
            listen.is_empty() || listen.parse::<SocketAddr>().is_ok(),
            "graphite.listen",
            format!("{listen:?} is not host:port (e.g. 127.0.0.1:2003), nor empty (off)"),
        );
        p.at_least(self.source_component, 1, "graphite.source_component");
        p.at_least(self.max_line_bytes, 64, "graphite.max_line_bytes");
        p.at_least(self.max_connections, 1, "graphite.max_connections");
        p.min_duration(
            self.idle_timeout,
            Duration::from_secs(1),
            "graphite.idle_timeout",
        );
        // Only a listener that is on is bound by the batch limit: lowering
        // ingest.max_batch_samples must not require a setting for an unused
        // protocol.
        p.require(
            listen.is_empty() || (1..=max_batch_samples).contains(&self.batch_lines),
            "graphite.batch_lines",
            format!("must be between 1 and ingest.max_batch_samples ({max_batch_samples})"),
        );
        p.min_duration(
            self.batch_delay,
            Duration::from_millis(1),
            "graphite.batch_delay",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default_and_checked() {
        let cfg = GraphiteConfig::default();
        assert_eq!(cfg.addr(), None);
        let mut p = Problems::default();
        cfg.check(100_000, &mut p);
        assert!(p.into_vec().is_empty());
        let bad = GraphiteConfig {
            listen: "nowhere".into(),
            source_component: 0,
            batch_lines: 200_000,
            ..GraphiteConfig::default()
        };
        let mut p = Problems::default();
        bad.check(100_000, &mut p);
        let keys: Vec<&str> = p.into_vec().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "graphite.listen",
                "graphite.source_component",
                "graphite.batch_lines"
            ]
        );
        let on = GraphiteConfig {
            listen: "127.0.0.1:2003".into(),
            ..GraphiteConfig::default()
        };
        assert_eq!(on.addr(), Some(SocketAddr::from(([127, 0, 0, 1], 2003))));
    }
}
