//! The embedded store's settings: the `[embedded]` section of the
//! configuration, plus the commit cadence, which is not a setting. One type
//! for both, so that opening the store takes exactly what the configuration
//! holds and nothing is copied field by field on the way.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Bytes of B-tree pages kept in memory. The storage engine's own default
    /// (1 GiB) would dominate the daemon's memory.
    pub cache_size_bytes: usize,
    /// A commit is made durable (fsync) when at least this long has passed
    /// since the last durable commit. Not a setting: the default is the
    /// trade-off described in the store's `db.rs`; tests set their own.
    #[serde(skip)]
    pub(crate) durable_interval: Duration,
    /// ... or when this many commits have been made since it. 1 makes every
    /// commit durable. Not a setting, as above.
    #[serde(skip)]
    pub(crate) durable_every_flushes: u32,
    /// ... or when the writes kept in memory since it (for a reopen after
    /// an I/O error) would take more than about this many bytes. Not a
    /// setting, as above.
    #[serde(skip)]
    pub(crate) redo_max_bytes: usize,
    /// How often the minutes flushed since the last checkpoint are written
    /// to the store file (see `checkpoint.rs`). Between checkpoints only the
    /// write-ahead log holds them, so a crash replays at most about this
    /// much of it at start.
    #[serde(with = "humantime_serde")]
    pub checkpoint_interval: Duration,
    /// Memory the minutes waiting for their fold into documents may take.
    /// Past it the series waiting longest are folded early; below it each
    /// series is folded once its hour has closed. 0 folds every series at
    /// each flush (the most writes).
    pub pending_max_bytes: usize,
    /// Once an hour has closed, the series pending since before it are
    /// folded over this long, so that the fleet's documents are not all
    /// written in one transaction. Not a setting, as above.
    #[serde(skip)]
    pub(crate) fold_spread: Duration,
    /// Writes every flush straight into its documents, with no pending
    /// minutes and no checkpoints: what a flush does without the store's
    /// pending minutes, for tests that compare with it. Not a setting.
    #[serde(skip)]
    pub(crate) write_through: bool,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            cache_size_bytes: 64 * 1024 * 1024,
            durable_interval: Duration::from_secs(5),
            durable_every_flushes: 8,
            redo_max_bytes: 4 * 1024 * 1024,
            checkpoint_interval: Duration::from_secs(60),
            pending_max_bytes: 256 << 20,
            fold_spread: Duration::from_secs(300),
            write_through: false,
        }
    }
}

impl EmbeddedConfig {
    pub(crate) fn check(&self, p: &mut crate::validate::Problems) {
        p.min_duration(
            self.checkpoint_interval,
            Duration::from_secs(1),
            "embedded.checkpoint_interval",
        );
        p.at_most(
            self.checkpoint_interval,
            Duration::from_secs(3600),
            "embedded.checkpoint_interval",
        );
    }
}
