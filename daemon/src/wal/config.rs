//! `[wal]`, the write-ahead log: the section's type, its defaults and its
//! checks, kept beside what it configures.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SyncMode;
use crate::validate::Problems;

/// `[wal]`: the write-ahead log under `data_dir/wal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalConfig {
    /// Off: acknowledged samples live only in memory until their flush is
    /// durable (faster; a crash loses up to a few seconds of them).
    pub enabled: bool,
    pub sync: SyncMode,
    /// With `sync = "fsync"`: how long a group waits for more appends to
    /// share its sync.
    #[serde(with = "humantime_serde")]
    pub fsync_interval: Duration,
    /// A segment is closed and a new one begun past this size.
    pub segment_bytes: u64,
    /// Appends waiting for the writer; beyond it ingest waits.
    pub queue: usize,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            enabled: true,
            sync: SyncMode::Os,
            fsync_interval: Duration::from_millis(2),
            segment_bytes: 64 << 20,
            queue: 4096,
        }
    }
}

impl WalConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_most(
            self.fsync_interval,
            Duration::from_secs(1),
            "wal.fsync_interval",
        );
        p.require(
            (1 << 20..=1 << 34).contains(&self.segment_bytes),
            "wal.segment_bytes",
            "must be between 1 MiB and 16 GiB",
        );
        p.at_least(self.queue, 1, "wal.queue");
    }
}
