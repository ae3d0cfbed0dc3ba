//! The command line: the flags that override the common settings, and how
//! each flag maps to a dotted key so errors name the flag the operator typed.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use figment::value::Value;
use serde::Serialize;

use super::error::parse_error;
use super::{ConfigError, LogFormat, StoreKind};

/// Dotted key each flag overrides, so errors about a flag's value name the
/// flag the operator typed; tests tie each entry to a real key and to --help.
pub(super) const FLAG_KEYS: &[(&str, &str)] = &[
    ("grpc_listen", "--grpc-listen"),
    ("http_listen", "--http-listen"),
    ("store", "--store"),
    ("data_dir", "--data-dir"),
    ("mongodb.uri", "--mongodb-uri"),
    ("log_level", "--log-level"),
    ("log_format", "--log-format"),
];

const HELP_FOOTER: &str = "\
Every setting can also be set by an environment variable named
TALLYD_<SECTION>_<KEY> in upper case, for example TALLYD_FLUSH_INTERVAL=500ms,
TALLYD_MONGODB_URI or TALLYD_GRPC_LISTEN. A TALLYD_ variable that names no
setting is an error.

Precedence: flag, then environment, then config file, then default.
config/tallyd.toml lists every key with its default.";

/// Tally: time-series ingestion daemon.
///
/// Agents push metrics over gRPC; Tally folds them into pre-allocated hour
/// and day documents with one slot per minute.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "tallyd", version, after_long_help = HELP_FOOTER)]
pub struct Cli {
    /// TOML config file; every key in it is optional [env: TALLYD_CONFIG]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address of the gRPC ingest and query services [default: 127.0.0.1:4317]
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,

    /// Address of the HTTP API, /metrics and health checks [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    pub http_listen: Option<SocketAddr>,

    /// Where aggregates are stored [default: embedded]
    #[arg(long, value_enum, value_name = "STORE")]
    pub store: Option<StoreKind>,

    /// Directory for the embedded store and other local state [default: ./tally-data]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// MongoDB connection string, used with --store mongodb [default: mongodb://127.0.0.1:27017]
    #[arg(long, value_name = "URI")]
    pub mongodb_uri: Option<String>,

    /// Log filter, e.g. "info" or "info,tally::flush=debug" [default: info]
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Log line format [default: text]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,

    /// Without a command, tallyd runs the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What `tallyd` does besides running the daemon; each takes the same
/// settings (flags, environment, `--config`) as the daemon it works for.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// The parts of flushes the store refused, kept in the data directory
    /// (docs/operations.md, "Dead letters")
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLettersCommand),
    /// Where the embedded store file's bytes go, table by table, against
    /// the documents it holds; with tallyd stopped, as it reads every page
    /// (docs/embedded-store.md, "Where the bytes go")
    #[command(name = "store-usage")]
    StoreUsage,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum DeadLettersCommand {
    /// List the dead letters: per refused flush its documents, samples and
    /// the store's errors
    List,
    /// Apply every dead letter to the store again, exactly once, with
    /// tallyd stopped; what the store still refuses stays a dead letter
    Replay,
    /// Delete dead letters for good: those of the given flushes, or all
    Drop {
        /// Flush ids, as `list` shows them
        #[arg(long = "flush", value_name = "ID")]
        flushes: Vec<u64>,
        /// Delete every dead letter
        #[arg(long, conflicts_with = "flushes")]
        all: bool,
    },
}

impl Cli {
    pub(super) fn overrides(&self) -> Result<Vec<(String, Value)>, ConfigError> {
        fn put<T: Serialize>(
            out: &mut Vec<(String, Value)>,
            key: &str,
            value: Option<&T>,
        ) -> Result<(), ConfigError> {
            let Some(value) = value else { return Ok(()) };
            let value = Value::serialize(value)
                .map_err(|e| parse_error(key, Some(flag_origin(key)), e.kind.to_string()))?;
            out.push((key.to_string(), value));
            Ok(())
        }
        let mut out = Vec::new();
        put(&mut out, "grpc_listen", self.grpc_listen.as_ref())?;
        put(&mut out, "http_listen", self.http_listen.as_ref())?;
        put(&mut out, "store", self.store.as_ref())?;
        put(&mut out, "data_dir", self.data_dir.as_ref())?;
        put(&mut out, "mongodb.uri", self.mongodb_uri.as_ref())?;
        put(&mut out, "log_level", self.log_level.as_ref())?;
        put(&mut out, "log_format", self.log_format.as_ref())?;
        Ok(out)
    }
}

pub(super) fn flag_origin(key: &str) -> String {
    match FLAG_KEYS.iter().find(|(k, _)| *k == key) {
        Some((_, flag)) => format!("flag {flag}"),
        None => "command line".to_string(),
    }
}
