//! `[query]`: the limits that keep one read from taking the daemon's
//! memory or the store's time.
//!
//! The engine's own settings type is also the configuration section, so a
//! new limit is declared, defaulted and checked in one place.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

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
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_least(self.max_points, 1, "query.max_points");
        p.at_least(self.default_points, 1, "query.default_points");
        p.at_least(self.max_series, 1, "query.max_series");
        p.at_least(self.max_fanout, 1, "query.max_fanout");
        p.at_least(self.max_page, 1, "query.max_page");
        p.at_least(self.max_total_points, 1, "query.max_total_points");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(c: &QueryConfig) -> Vec<(&'static str, String)> {
        let mut p = Problems::default();
        c.check(&mut p);
        p.into_vec()
    }

    #[test]
    fn every_limit_must_allow_one() {
        assert!(problems(&QueryConfig::default()).is_empty());
        let zero = QueryConfig {
            max_fanout: 0,
            max_total_points: 0,
            ..QueryConfig::default()
        };
        assert_eq!(
            problems(&zero),
            vec![
                ("query.max_fanout", "must be at least 1".to_string()),
                ("query.max_total_points", "must be at least 1".to_string()),
            ]
        );
    }
}
