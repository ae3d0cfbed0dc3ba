//! Why a configuration could not be loaded, with the key, the origin of
//! the bad value and what is wrong, for every problem at once.

use std::fmt;
use std::path::PathBuf;

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` or `TALLYD_CONFIG` could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `TALLYD_*` variables that name no setting.
    #[error("{}", join(.0))]
    UnknownEnv(Vec<UnknownEnvVar>),
    /// A `TALLYD_*` variable whose value is not UTF-8.
    #[error("environment variable {name} is not valid UTF-8")]
    EnvNotUnicode { name: String },
    /// Values that could not be read: bad syntax, wrong type, unknown key.
    #[error("{}", join(.0))]
    Parse(Vec<SettingError>),
    /// Values that were read but are out of range or contradict each other.
    #[error("{}", join(.0))]
    Invalid(Vec<SettingError>),
}

/// One bad setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// Dotted key such as `flush.interval`; empty when the problem is the
    /// whole file (e.g. a TOML syntax error).
    pub key: String,
    /// Where the offending value came from, such as
    /// `environment variable TALLYD_FLUSH_INTERVAL`, when known.
    pub origin: Option<String>,
    pub message: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.key.is_empty(), &self.origin) {
            (true, Some(origin)) => write!(f, "{origin}: {}", self.message),
            (true, None) => f.write_str(&self.message),
            (false, Some(origin)) => write!(f, "{}: {} (from {origin})", self.key, self.message),
            (false, None) => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

/// A `TALLYD_*` variable that names no setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEnvVar {
    pub name: String,
    /// The closest real variable name, when one is close.
    pub suggestion: Option<String>,
}

impl fmt::Display for UnknownEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown environment variable {}", self.name)?;
        match &self.suggestion {
            Some(s) => write!(f, " (did you mean {s}?)"),
            None => write!(f, " (no setting has that name)"),
        }
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(super) fn parse_error(key: &str, origin: Option<String>, message: String) -> ConfigError {
    ConfigError::Parse(vec![SettingError {
        key: key.to_string(),
        origin,
        message,
    }])
}
