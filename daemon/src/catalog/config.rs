//! `[catalog]`, how the series catalog is kept: the section's type, its
//! defaults and its checks, kept beside what it configures.

use crate::validate::Problems;

/// `[catalog]`: how the series catalog is kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// How far a series' `last_seen` may lag before it is written again.
    #[serde(with = "humantime_serde")]
    pub refresh: std::time::Duration,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            refresh: std::time::Duration::from_secs(600),
        }
    }
}

impl CatalogConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.positive(self.refresh, "catalog.refresh");
    }
}
