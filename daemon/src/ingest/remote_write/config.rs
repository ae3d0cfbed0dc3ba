//! `[remote_write]`, how remote-write series map to sources: the section's
//! type, its defaults and its checks, kept beside what it configures.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[remote_write]`: how remote-write series map to sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteWriteConfig {
    /// Labels that name a series' source; the first present wins and is
    /// taken off the labels.
    pub source_labels: Vec<String>,
}

impl Default for RemoteWriteConfig {
    fn default() -> Self {
        RemoteWriteConfig {
            source_labels: vec!["instance".into()],
        }
    }
}

impl RemoteWriteConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.require(
            !self.source_labels.is_empty(),
            "remote_write.source_labels",
            "must name at least one label",
        );
    }
}
