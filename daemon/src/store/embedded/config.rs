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
    /// Each flush folds the logged minutes of about `1 / fold_over_flushes`
    /// of the pending series into their documents, oldest first, so every
    /// series is folded about once per this many flushes (see the store's
    /// `pending.rs`). 1 folds everything at every flush. Not a setting.
    #[serde(skip)]
    pub(crate) fold_over_flushes: u32,
    /// ... and at least the share of them that makes every series wait
    /// about this long for its fold whatever the flush interval: by flushes
    /// alone, a 10 s interval would keep each series' minutes in memory
    /// for ten minutes. Folding sooner than this costs more than it saves:
    /// a fold rewrites whole documents, and at a million series (5 s
    /// flushes) folding every two minutes instead of five made a flush take
    /// two to three times as long. Not a setting, as above.
    #[serde(skip)]
    pub(crate) fold_period: Duration,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            cache_size_bytes: 64 * 1024 * 1024,
            durable_interval: Duration::from_secs(5),
            durable_every_flushes: 8,
            redo_max_bytes: 4 * 1024 * 1024,
            fold_over_flushes: 60,
            fold_period: Duration::from_secs(300),
        }
    }
}
