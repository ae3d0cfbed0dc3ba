//! `[query]`: the limits that keep one read from taking the daemon's
//! memory or the store's time, and the budget all reads share.
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
    /// Longest PromQL query text, in bytes.
    pub max_promql_bytes: usize,
    /// Deepest nesting of a PromQL expression (a lone number is 1).
    pub max_promql_depth: usize,
    /// Most nodes (operators, calls, selectors, numbers) of a PromQL
    /// expression.
    pub max_promql_nodes: usize,
    /// Longest glob list or regular expression a reader may give, in bytes.
    pub max_pattern_bytes: usize,
    /// Largest compiled form of one glob list or regular expression, in
    /// bytes: a short pattern such as `(.*){9999}` compiles to a large
    /// program, and matching time grows with it.
    pub max_pattern_compiled_bytes: usize,
    /// Memory all reads in progress may hold together (estimated before
    /// each read starts), in bytes.
    pub read_budget_bytes: u64,
    /// How long a read waits for its share of `read_budget_bytes` before it
    /// is refused as busy.
    #[serde(with = "humantime_serde")]
    pub read_budget_wait: std::time::Duration,
}

/// Above these, a PromQL expression could overflow a worker thread's stack
/// in the parser or the planner, whatever the configuration says.
const PROMQL_DEPTH_CAP: usize = 256;
const PROMQL_NODES_CAP: usize = 8_000;

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_points: 100_000,
            default_points: 1_440,
            max_series: 1_000,
            max_fanout: 10_000,
            max_page: 10_000,
            max_total_points: 10_000_000,
            max_promql_bytes: 64 * 1024,
            max_promql_depth: 64,
            max_promql_nodes: 2_048,
            max_pattern_bytes: 16 * 1024,
            max_pattern_compiled_bytes: 1 << 20,
            read_budget_bytes: 1 << 30,
            read_budget_wait: std::time::Duration::from_secs(10),
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
        p.at_least(self.max_promql_bytes, 1, "query.max_promql_bytes");
        p.at_least(self.max_promql_depth, 1, "query.max_promql_depth");
        p.require(
            self.max_promql_depth <= PROMQL_DEPTH_CAP,
            "query.max_promql_depth",
            format!(
                "must be at most {PROMQL_DEPTH_CAP}: deeper expressions could overflow the stack"
            ),
        );
        p.at_least(self.max_promql_nodes, 1, "query.max_promql_nodes");
        p.require(
            self.max_promql_nodes <= PROMQL_NODES_CAP,
            "query.max_promql_nodes",
            format!(
                "must be at most {PROMQL_NODES_CAP}: larger expressions could overflow the stack"
            ),
        );
        p.at_least(self.max_pattern_bytes, 1, "query.max_pattern_bytes");
        p.at_least(
            self.max_pattern_compiled_bytes,
            1024,
            "query.max_pattern_compiled_bytes",
        );
        p.require(
            self.read_budget_bytes >= 16 << 20,
            "query.read_budget_bytes",
            "must be at least 16 MiB (16777216)",
        );
    }

    /// The bounds on readers' name patterns.
    pub fn pattern_limits(&self) -> crate::selector::PatternLimits {
        crate::selector::PatternLimits {
            max_bytes: self.max_pattern_bytes,
            max_compiled_bytes: self.max_pattern_compiled_bytes,
        }
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
        let huge = QueryConfig {
            max_promql_depth: 10_000,
            ..QueryConfig::default()
        };
        assert_eq!(problems(&huge)[0].0, "query.max_promql_depth");
    }
}
