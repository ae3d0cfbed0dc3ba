//! `[ui]`, the built-in dashboard: the section's type, its defaults and its
//! checks, kept beside what it configures.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[ui]`: the built-in dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiConfig {
    /// Serve the dashboard at `/` on the HTTP listener.
    pub enabled: bool,
    /// The fleet view marks a source stale when its newest sample is older
    /// than this (a reader may pass its own `stale_after`).
    #[serde(with = "humantime_serde")]
    pub stale_after: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: true,
            stale_after: Duration::from_secs(300),
        }
    }
}

impl UiConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.min_duration(self.stale_after, Duration::from_secs(1), "ui.stale_after");
    }
}
