//! `[auth]`, where the tokens file is: the section's type, its defaults and
//! its checks, kept beside what it configures.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::validate::Problems;

/// `[auth]`: who may use the daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The tokens file; empty turns authentication off.
    pub tokens_file: PathBuf,
}

impl AuthConfig {
    pub fn enabled(&self) -> bool {
        !self.tokens_file.as_os_str().is_empty()
    }

    pub(crate) fn check(&self, p: &mut Problems) {
        let text = self.tokens_file.to_string_lossy();
        p.require(
            text.is_empty() || !text.trim().is_empty(),
            "auth.tokens_file",
            "is blank; give a path, or leave it empty to turn authentication off",
        );
    }
}
