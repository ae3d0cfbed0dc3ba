//! `[retention]`, how long each tier is kept: the section's type, its
//! defaults and its checks, kept beside what it configures.

use std::time::Duration;

use crate::validate::{secs, Problems, DAY, HOUR};

/// MongoDB stores a TTL index's `expireAfterSeconds` as a 32-bit integer.
const TTL_MAX: Duration = Duration::from_secs(i32::MAX as u64);

/// `[retention]`: how long documents are kept. MongoDB enforces it with TTL
/// indexes, the embedded store with the maintenance sweep.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    #[serde(with = "humantime_serde")]
    pub hour: Duration,
    #[serde(with = "humantime_serde")]
    pub day: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            hour: secs(14 * DAY),
            day: secs(400 * DAY),
        }
    }
}

impl RetentionConfig {
    /// (hour, day) retention in whole seconds.
    pub fn seconds(&self) -> (i64, i64) {
        (self.hour.as_secs() as i64, self.day.as_secs() as i64)
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        p.min_duration(self.hour, secs(HOUR), "retention.hour");
        p.at_most(self.hour, TTL_MAX, "retention.hour");
        p.min_duration(self.day, secs(DAY), "retention.day");
        p.at_most(self.day, TTL_MAX, "retention.day");
    }
}
