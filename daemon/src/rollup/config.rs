//! `[rollup]`: which groups the daemon keeps rollups for, and their bounds.

use serde::{Deserialize, Serialize};

use super::Rollups;
use crate::validate::Problems;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollupConfig {
    /// Keep the `all` group: every source.
    pub all: bool,
    /// Group sources by their prefix up to this one character (`-` puts
    /// `web-042` in group `web`); empty for none.
    pub prefix_delimiter: String,
    /// Named groups: `[[rollup.groups]]` with `name` and `sources` (globs).
    pub groups: Vec<GroupRule>,
    /// At most this many rollup series (groups × metrics) are kept; samples
    /// for further ones are left out of the rollups (and counted).
    pub max_series: usize,
    /// Honour the groups agents declare for their sources
    /// (`SourceBatch.groups`).
    pub agent_groups: bool,
    /// Distinct group names agents may declare; further names are ignored
    /// (and counted) until idle sources free some.
    pub max_agent_groups: usize,
}

/// A named group of sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupRule {
    pub name: String,
    /// Source globs (`web-*`); a source in any of them is a member.
    pub sources: Vec<String>,
}

impl Default for RollupConfig {
    fn default() -> Self {
        RollupConfig {
            all: true,
            prefix_delimiter: String::new(),
            groups: Vec::new(),
            max_series: 100_000,
            agent_groups: true,
            max_agent_groups: 10_000,
        }
    }
}

impl RollupConfig {
    /// No group at all, and no room for one: the drain passes through.
    pub fn none() -> RollupConfig {
        RollupConfig {
            all: false,
            prefix_delimiter: String::new(),
            groups: Vec::new(),
            max_series: 0,
            agent_groups: false,
            max_agent_groups: 0,
        }
    }

    /// The prefix delimiter as the single character it must be.
    pub fn prefix_char(&self) -> Option<char> {
        self.prefix_delimiter.chars().next()
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        p.require(
            self.prefix_delimiter.chars().count() <= 1,
            "rollup.prefix_delimiter",
            "must be one character, or empty for no prefix groups",
        );
        if let Err(e) = Rollups::new(self.clone()) {
            p.fail("rollup.groups", e.to_string());
        }
        p.at_least(self.max_series, 1, "rollup.max_series");
        p.at_least(self.max_agent_groups, 1, "rollup.max_agent_groups");
    }
}
