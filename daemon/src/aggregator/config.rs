//! `[aggregator]`, how the in-memory state is laid out: the section's type,
//! its defaults and its checks, kept beside what it configures.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[aggregator]`: how the in-memory state is laid out. What it accepts is
/// governed by `[ingest]` ([`IngestConfig`](crate::ingest::config::IngestConfig)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AggregatorConfig {
    /// Number of independently locked shards; 0 means four per CPU. Use
    /// [`AggregatorConfig::effective_shards`] for the number to run.
    pub shards: usize,
}

pub(super) const MAX_SHARDS: usize = 1024;

impl AggregatorConfig {
    /// The shard count to run: `shards`, or four per available CPU when 0
    /// (more shards than cores keeps two requests from meeting on one lock
    /// even when their series hash close together).
    pub fn effective_shards(&self) -> usize {
        if self.shards > 0 {
            return self.shards;
        }
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        (4 * cpus).min(MAX_SHARDS)
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        p.require(
            self.shards <= MAX_SHARDS,
            "aggregator.shards",
            format!("must be at most {MAX_SHARDS} (0 means four per CPU)"),
        );
    }
}
