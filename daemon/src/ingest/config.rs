//! `[ingest]`: the limits every protocol's requests are held to.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{format_duration, secs, Problems, DAY, HOUR, MINUTE};

/// Protobuf cannot encode a message of 2 GiB or more.
const PROTOBUF_MAX_MESSAGE: usize = i32::MAX as usize;
/// Upper bound of `ingest.max_labels`: more would only make series keys
/// longer than [`crate::labels::MAX_SERIES_KEY_LEN`] anyway.
const MAX_LABELS_LIMIT: usize = 64;

/// `[ingest]`: what the daemon accepts, whatever the protocol. The request
/// limits are checked by the protocol front doors, the sample limits by the
/// aggregator, the idle timeout by maintenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest gRPC request, in bytes.
    pub max_message_bytes: usize,
    /// Most samples in one request.
    pub max_batch_samples: usize,
    /// Most per-sample rejection reasons returned in one response.
    pub max_rejections_reported: usize,
    /// How far in the past a sample may be and still be accepted.
    #[serde(with = "humantime_serde")]
    pub lateness_window: Duration,
    /// How far ahead of the daemon's clock a sample may be.
    #[serde(with = "humantime_serde")]
    pub max_future_skew: Duration,
    /// Most distinct series held in memory.
    pub max_series: usize,
    /// Most distinct series of one source held in memory, so that one agent
    /// sending a label with unbounded values cannot take the whole
    /// `max_series` budget.
    pub max_series_per_source: usize,
    /// Most labels on one series (pairs with an empty value do not count).
    pub max_labels: usize,
    /// Most in-memory minute accumulators; beyond it ingest answers
    /// `RESOURCE_EXHAUSTED` so memory stays bounded.
    pub max_pending_slots: usize,
    /// A series not pushed for this long (whatever its samples' times) has
    /// its in-memory state dropped; a cumulative counter's baseline is kept
    /// for [`IngestConfig::baseline_keep`].
    #[serde(with = "humantime_serde")]
    pub series_idle_timeout: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_message_bytes: 16 * 1024 * 1024,
            max_batch_samples: 100_000,
            max_rejections_reported: 100,
            lateness_window: secs(HOUR),
            max_future_skew: secs(5 * MINUTE),
            max_series: 1_000_000,
            max_series_per_source: 100_000,
            max_labels: 16,
            max_pending_slots: 4_000_000,
            series_idle_timeout: secs(2 * HOUR),
        }
    }
}

impl IngestConfig {
    /// How long a cumulative counter's baseline is kept, in memory and in
    /// the write-ahead log, after the series was last pushed: the longer of
    /// `series_idle_timeout` and `lateness_window`, so that an agent that
    /// buffered through an outage as long as the lateness window, and then
    /// sends what it buffered, has every increase counted.
    pub fn baseline_keep(&self) -> Duration {
        self.series_idle_timeout.max(self.lateness_window)
    }

    /// `hour_retention` is `retention.hour`: a late sample must not land in
    /// an hour document that has already expired.
    pub(crate) fn check(&self, hour_retention: Duration, p: &mut Problems) {
        p.require(
            (1024..=PROTOBUF_MAX_MESSAGE).contains(&self.max_message_bytes),
            "ingest.max_message_bytes",
            format!("must be between 1024 and {PROTOBUF_MAX_MESSAGE} (protobuf's limit)"),
        );
        p.at_least(self.max_batch_samples, 1, "ingest.max_batch_samples");
        p.positive(self.lateness_window, "ingest.lateness_window");
        p.require(
            self.lateness_window < hour_retention,
            "ingest.lateness_window",
            format!(
                "{} must be shorter than retention.hour ({}), or late samples would land \
                 in hour documents that have already expired",
                format_duration(self.lateness_window),
                format_duration(hour_retention)
            ),
        );
        p.at_most(self.max_future_skew, secs(DAY), "ingest.max_future_skew");
        p.at_least(self.max_series, 1, "ingest.max_series");
        p.at_least(
            self.max_series_per_source,
            1,
            "ingest.max_series_per_source",
        );
        p.require(
            self.max_labels <= MAX_LABELS_LIMIT,
            "ingest.max_labels",
            format!("must be at most {MAX_LABELS_LIMIT}"),
        );
        p.at_least(self.max_pending_slots, 1, "ingest.max_pending_slots");
        p.positive(self.series_idle_timeout, "ingest.series_idle_timeout");
    }
}
