//! Sections whose types still live here until their components own them:
//! the embedded store and query limits.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// The embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Bytes of B-tree pages kept in memory. The storage engine's own default
    /// (1 GiB) would dominate the daemon's memory.
    pub cache_size_bytes: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            cache_size_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Limits on queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Most points per series one query may return.
    pub max_points: usize,
    /// Point budget of `step=auto` when the reader gives none (capped by
    /// `max_points`).
    pub default_points: usize,
    /// Series per range or latest call.
    pub max_series: usize,
    /// Member series one cross-source aggregate may read when no rollup
    /// serves it.
    pub max_fanout: usize,
    /// Entries per discovery page.
    pub max_page: usize,
    /// Points of all series of one range read (or watch snapshot) together.
    pub max_total_points: usize,
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_points: 100_000,
            default_points: 1_440,
            max_series: 1_000,
            max_fanout: 10_000,
            max_page: 10_000,
            max_total_points: 10_000_000,
        }
    }
}

impl EmbeddedConfig {
    pub(crate) fn check(&self, _: &mut Problems) {}
}

impl QueryConfig {
    pub(crate) fn check(&self, c: &mut Problems) {
        c.at_least(self.max_points, 1, "query.max_points");
        c.at_least(self.default_points, 1, "query.default_points");
        c.at_least(self.max_series, 1, "query.max_series");
        c.at_least(self.max_fanout, 1, "query.max_fanout");
        c.at_least(self.max_page, 1, "query.max_page");
        c.at_least(self.max_total_points, 1, "query.max_total_points");
    }
}
