//! `[query]`: the limits that keep one read from taking the daemon's
//! memory or the store's time.
//!
//! The engine's own settings type is also the configuration section, so a
//! new limit is declared, defaulted and checked in one place.

use serde::{Deserialize, Serialize};

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

impl QueryConfig {
    /// Settings out of range, as (key, message): every limit must allow at
    /// least one.
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        [
            (self.max_points, "query.max_points"),
            (self.default_points, "query.default_points"),
            (self.max_series, "query.max_series"),
            (self.max_fanout, "query.max_fanout"),
            (self.max_page, "query.max_page"),
            (self.max_total_points, "query.max_total_points"),
        ]
        .into_iter()
        .filter(|(value, _)| *value < 1)
        .map(|(_, key)| (key, "must be at least 1".to_string()))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_must_allow_one() {
        assert!(QueryConfig::default().problems().is_empty());
        let zero = QueryConfig {
            max_fanout: 0,
            max_total_points: 0,
            ..QueryConfig::default()
        };
        assert_eq!(
            zero.problems(),
            vec![
                ("query.max_fanout", "must be at least 1".to_string()),
                ("query.max_total_points", "must be at least 1".to_string()),
            ]
        );
    }
}
