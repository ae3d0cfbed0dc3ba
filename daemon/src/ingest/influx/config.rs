//! `[influx]`, how line-protocol lines map to sources: the section's type,
//! its defaults and its checks, kept beside what it configures.

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[influx]`: how line-protocol lines map to sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InfluxConfig {
    /// The tag that names a line's source; it is taken off the labels.
    pub source_tag: String,
    /// Longest line, in bytes; a longer one is refused unparsed.
    pub max_line_bytes: usize,
}

impl Default for InfluxConfig {
    fn default() -> Self {
        InfluxConfig {
            source_tag: "host".into(),
            max_line_bytes: 64 * 1024,
        }
    }
}

impl InfluxConfig {
    pub(crate) fn check(&self, p: &mut Problems) {
        p.require(
            !self.source_tag.is_empty(),
            "influx.source_tag",
            "must name a tag",
        );
        p.at_least(self.max_line_bytes, 64, "influx.max_line_bytes");
    }
}
