//! `[prealloc]`, pre-allocating the next period's documents: the section's
//! type, its defaults and its checks, kept beside what it configures.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::{secs, Problems, DAY, HOUR, MINUTE};

/// `[prealloc]`: inserting the next period's documents ahead of the
/// boundary, spread over the end of the current period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreallocConfig {
    pub enabled: bool,
    /// Next hour's documents are inserted at random moments within this
    /// long before the hour starts.
    #[serde(with = "humantime_serde")]
    pub hour_window: Duration,
    /// Same for the next day's documents.
    #[serde(with = "humantime_serde")]
    pub day_window: Duration,
    /// Ceiling on pre-allocation inserts per second, to keep them from
    /// competing with flushes.
    pub max_per_second: u32,
}

impl Default for PreallocConfig {
    fn default() -> Self {
        PreallocConfig {
            enabled: true,
            hour_window: secs(10 * MINUTE),
            day_window: secs(2 * HOUR),
            max_per_second: 2000,
        }
    }
}

impl PreallocConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.positive(self.hour_window, "prealloc.hour_window");
        p.shorter_than(
            self.hour_window,
            secs(HOUR),
            "prealloc.hour_window",
            "an hour",
        );
        p.positive(self.day_window, "prealloc.day_window");
        p.shorter_than(self.day_window, secs(DAY), "prealloc.day_window", "a day");
        p.at_least(self.max_per_second as usize, 1, "prealloc.max_per_second");
    }
}
