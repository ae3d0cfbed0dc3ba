//! `[flush]`, how often memory is drained and failed flushes retried: the
//! section's type, its defaults and its checks, kept beside what it
//! configures.

use std::time::Duration;

/// `[flush]`: how often memory is drained to the store and how failed
/// flushes are retried.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlushConfig {
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Flushes that may wait for the store before the aggregator stops
    /// handing off new ones.
    pub queue_depth: usize,
    #[serde(with = "humantime_serde")]
    pub retry_initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max_backoff: Duration,
    /// How long shutdown waits for the last flushes to land.
    #[serde(with = "humantime_serde")]
    pub shutdown_deadline: Duration,
    /// The most bytes `data_dir/dead-letters/` may take: a flush whose
    /// dead letters would pass it is held (see `apply.rs`), never dropped.
    pub dead_letters_max_bytes: u64,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            interval: Duration::from_secs(1),
            queue_depth: 1,
            retry_initial_backoff: Duration::from_millis(100),
            retry_max_backoff: Duration::from_secs(10),
            shutdown_deadline: Duration::from_secs(30),
            dead_letters_max_bytes: 1 << 30,
        }
    }
}

impl FlushConfig {
    pub(crate) fn check(&self, p: &mut crate::validate::Problems) {
        p.min_duration(self.interval, Duration::from_millis(10), "flush.interval");
        p.at_least(self.queue_depth, 1, "flush.queue_depth");
        p.positive(self.retry_initial_backoff, "flush.retry_initial_backoff");
        p.require(
            self.retry_max_backoff >= self.retry_initial_backoff,
            "flush.retry_max_backoff",
            format!(
                "must be at least flush.retry_initial_backoff ({})",
                crate::validate::format_duration(self.retry_initial_backoff)
            ),
        );
        p.positive(self.shutdown_deadline, "flush.shutdown_deadline");
        // No "0 = no bound": a store refusing for days would fill the disk
        // the write-ahead log and the store need.
        p.require(
            self.dead_letters_max_bytes > 0,
            "flush.dead_letters_max_bytes",
            "must be greater than 0",
        );
    }
}
