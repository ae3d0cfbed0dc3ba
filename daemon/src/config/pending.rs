//! Sections whose types still live here until their components own them:
//! the embedded store.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// The embedded store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Bytes of B-tree pages kept in memory. The storage engine's own default
    /// (1 GiB) would dominate the daemon's memory.
    pub cache_size_bytes: usize,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            cache_size_bytes: 64 * 1024 * 1024,
        }
    }
}

impl EmbeddedConfig {
    pub(crate) fn check(&self, _: &mut Problems) {}
}
