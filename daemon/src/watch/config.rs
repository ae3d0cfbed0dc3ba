//! `[watch]`, live subscriptions and slow subscribers: the section's type,
//! its defaults and its checks, kept beside what it configures.

use std::time::Duration;

use crate::validate::Problems;

/// `[watch]`: live subscriptions and how slow subscribers are treated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchConfig {
    pub max_subscribers: usize,
    /// Series per subscription.
    pub max_series: usize,
    /// History sent first, unless the subscriber asks for another.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Updates queued per subscriber before ticks are skipped for it.
    pub buffer: usize,
    /// A subscriber that reads nothing for this long is dropped.
    #[serde(with = "humantime_serde")]
    pub max_lag: Duration,
    /// How often updates go out; fixed for operators (dashboards expect a
    /// second), shorter in tests.
    #[serde(skip)]
    pub tick: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            max_subscribers: 256,
            max_series: 1_000,
            window: Duration::from_secs(3_600),
            buffer: 4,
            max_lag: Duration::from_secs(30),
            tick: Duration::from_secs(1),
        }
    }
}

impl WatchConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.at_least(self.max_series, 1, "watch.max_series");
        p.at_least(self.buffer, 1, "watch.buffer");
        p.positive(self.window, "watch.window");
        p.positive(self.max_lag, "watch.max_lag");
    }
}
