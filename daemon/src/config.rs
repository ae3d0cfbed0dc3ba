//! The daemon's configuration: every setting, where each one comes from, and
//! the checks that run before anything binds a port or opens a store.
//!
//! Sources, strongest first: command-line flags ([`Cli`]), `TALLYD_*`
//! environment variables, the TOML file named by `--config` (or
//! `TALLYD_CONFIG`), built-in defaults. A misspelt key or variable is a
//! startup error, not a silently ignored setting: a typo in
//! `retention.hour` or `TALLYD_MONGODB_URI` would otherwise surface only as
//! lost data or a daemon writing somewhere unexpected.
//!
//! `config/tallyd.toml` is the reference for every key.

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use figment::error::Kind;
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

/// Prefix shared by every environment variable the daemon reads.
pub const ENV_PREFIX: &str = "TALLYD_";

/// Names the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "TALLYD_CONFIG";

/// `TALLYD_*` variables that are ours but are not settings, so the
/// unknown-variable check must let them through.
const ENV_ALLOW_LIST: &[&str] = &[CONFIG_ENV];

/// Dotted key each flag overrides, so errors about a flag's value name the
/// flag the operator typed; tests tie each entry to a real key and to --help.
const FLAG_KEYS: &[(&str, &str)] = &[
    ("grpc_listen", "--grpc-listen"),
    ("http_listen", "--http-listen"),
    ("store", "--store"),
    ("data_dir", "--data-dir"),
    ("mongodb.uri", "--mongodb-uri"),
    ("log_level", "--log-level"),
    ("log_format", "--log-format"),
];

// Metadata names of our own providers; error rendering matches on them to
// name the exact variable or flag instead of a generic source.
const ENV_SOURCE: &str = "environment";
const FLAG_SOURCE: &str = "command line";

/// MongoDB refuses larger write batches (`maxWriteBatchSize`).
const MONGODB_MAX_BATCH: usize = 100_000;
/// MongoDB stores a TTL index's `expireAfterSeconds` as a 32-bit integer.
const TTL_MAX: Duration = Duration::from_secs(i32::MAX as u64);
/// Protobuf cannot encode a message of 2 GiB or more.
const PROTOBUF_MAX_MESSAGE: usize = i32::MAX as usize;

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
}

/// Which store backs the daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// Local on-disk store under data_dir; needs no database
    #[default]
    Embedded,
    /// MongoDB at mongodb.uri; run several daemons against one (sharded) cluster
    #[value(name = "mongodb")]
    Mongodb,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines
    #[default]
    Text,
    /// One JSON object per line, for log shippers
    Json,
}

/// The complete daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listener (ingest, query, health, reflection).
    pub grpc_listen: SocketAddr,
    /// HTTP listener (`/metrics`, `/healthz`, `/readyz`, `/api/v1/`).
    pub http_listen: SocketAddr,
    pub store: StoreKind,
    /// Embedded store and other local state; relative paths are resolved
    /// against the working directory.
    pub data_dir: PathBuf,
    /// Identity stamped on this daemon's flushes; empty means the daemon
    /// derives one at startup.
    pub writer_id: String,
    pub log_format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive.
    pub log_level: String,
    pub ingest: IngestConfig,
    pub aggregator: AggregatorConfig,
    pub flush: FlushConfig,
    pub prealloc: PreallocConfig,
    pub retention: RetentionConfig,
    pub mongodb: MongoDbConfig,
    pub embedded: EmbeddedConfig,
    pub query: QueryConfig,
    pub rollup: RollupConfig,
    pub watch: WatchConfig,
    pub catalog: CatalogConfig,
}

/// Limits on what the ingest service accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest gRPC request, in bytes.
    pub max_message_bytes: usize,
    /// Most samples in one request.
    pub max_batch_samples: usize,
    /// Most per-sample rejection reasons returned in one response.
    pub max_rejections_reported: usize,
    /// How far in the past a sample may be and still be accepted.
    #[serde(with = "duration")]
    pub lateness_window: Duration,
    /// How far ahead of the daemon's clock a sample may be.
    #[serde(with = "duration")]
    pub max_future_skew: Duration,
    /// Most distinct series held in memory.
    pub max_series: usize,
    /// Most in-memory minute accumulators; beyond it ingest answers
    /// `RESOURCE_EXHAUSTED` so memory stays bounded.
    pub max_pending_slots: usize,
    /// A series with no samples for this long has its in-memory state
    /// dropped.
    #[serde(with = "duration")]
    pub series_idle_timeout: Duration,
}

/// The in-memory aggregator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AggregatorConfig {
    /// Number of independently locked shards; 0 means one per CPU. Use
    /// [`AggregatorConfig::effective_shards`] for the number to run.
    pub shards: usize,
}

/// The flush pipeline from memory to the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlushConfig {
    #[serde(with = "duration")]
    pub interval: Duration,
    /// Flushes that may wait for the store before the aggregator stops
    /// handing off new ones.
    pub queue_depth: usize,
    #[serde(with = "duration")]
    pub retry_initial_backoff: Duration,
    #[serde(with = "duration")]
    pub retry_max_backoff: Duration,
    /// How long shutdown waits for the last flushes to land.
    #[serde(with = "duration")]
    pub shutdown_deadline: Duration,
}

/// Pre-allocation of the next period's documents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PreallocConfig {
    pub enabled: bool,
    /// Next hour's documents are inserted at random moments within this
    /// long before the hour starts.
    #[serde(with = "duration")]
    pub hour_window: Duration,
    /// Same for the next day's documents.
    #[serde(with = "duration")]
    pub day_window: Duration,
    /// Ceiling on pre-allocation inserts per second.
    pub max_per_second: u32,
}

/// How long documents are kept (TTL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    #[serde(with = "duration")]
    pub hour: Duration,
    #[serde(with = "duration")]
    pub day: Duration,
}

/// The MongoDB store; read only when `store = "mongodb"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MongoDbConfig {
    pub uri: String,
    pub database: String,
    pub hour_collection: String,
    pub day_collection: String,
    /// The series catalog (discovery): one small document per series.
    pub series_collection: String,
    /// Update statements per bulk write.
    pub statements_per_batch: usize,
    /// Bulk writes in flight at once.
    pub max_concurrent_batches: usize,
    /// Deadline for each database operation.
    #[serde(with = "duration")]
    pub timeout: Duration,
}

pub use crate::store::embedded::EmbeddedConfig;

/// Limits on queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueryConfig {
    /// Most points per series one query may return.
    pub max_points: usize,
    /// Point budget of `step=auto` when the reader gives none (capped by
    /// `max_points`).
    pub default_points: usize,
    /// Series per range or latest call.
    pub max_series: usize,
    /// Member series one cross-source aggregate may read when no rollup
    /// serves it.
    pub max_fanout: usize,
    /// Entries per discovery page.
    pub max_page: usize,
    /// Points of all series of one range read (or watch snapshot) together.
    pub max_total_points: usize,
}

/// Group rollups maintained at ingest (see `rollup` in the crate docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollupConfig {
    /// Keep the `all` group: every source.
    pub all: bool,
    /// Group sources by their prefix up to this one character (`-` puts
    /// `web-042` in group `web`); empty for none.
    pub prefix_delimiter: String,
    /// Named groups: `[[rollup.groups]]` with `name` and `sources` (globs).
    pub groups: Vec<RollupGroup>,
    /// Most rollup series (groups x metrics) kept.
    pub max_series: usize,
    /// Keep rollups for the groups agents declare (`SourceBatch.groups`).
    pub agent_groups: bool,
    /// Distinct group names agents may declare.
    pub max_agent_groups: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollupGroup {
    pub name: String,
    pub sources: Vec<String>,
}

/// Live watch subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchConfig {
    pub max_subscribers: usize,
    /// Series per subscription.
    pub max_series: usize,
    /// History sent first, unless the subscriber asks for another.
    #[serde(with = "duration")]
    pub window: Duration,
    /// Updates queued per subscriber before ticks are skipped for it.
    pub buffer: usize,
    /// A subscriber that reads nothing for this long is dropped.
    #[serde(with = "duration")]
    pub max_lag: Duration,
}

/// The series catalog (discovery).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CatalogConfig {
    /// How far a series' `last_seen` may lag before it is written again.
    #[serde(with = "duration")]
    pub refresh: Duration,
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

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            max_subscribers: 256,
            max_series: 1_000,
            window: secs(HOUR),
            buffer: 4,
            max_lag: secs(30),
        }
    }
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            refresh: secs(10 * MINUTE),
        }
    }
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3_600;
const DAY: u64 = 86_400;

impl Default for Config {
    fn default() -> Self {
        Config {
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 4317)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            store: StoreKind::default(),
            data_dir: PathBuf::from("./tally-data"),
            writer_id: String::new(),
            log_format: LogFormat::default(),
            log_level: "info".to_string(),
            ingest: IngestConfig::default(),
            aggregator: AggregatorConfig::default(),
            flush: FlushConfig::default(),
            prealloc: PreallocConfig::default(),
            retention: RetentionConfig::default(),
            mongodb: MongoDbConfig::default(),
            embedded: EmbeddedConfig::default(),
            query: QueryConfig::default(),
            rollup: RollupConfig::default(),
            watch: WatchConfig::default(),
            catalog: CatalogConfig::default(),
        }
    }
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_message_bytes: 16 * 1024 * 1024,
            max_batch_samples: 100_000,
            max_rejections_reported: 100,
            lateness_window: secs(HOUR),
            max_future_skew: secs(5 * MINUTE),
            max_series: 1_000_000,
            max_pending_slots: 4_000_000,
            series_idle_timeout: secs(2 * HOUR),
        }
    }
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            interval: secs(1),
            queue_depth: 2,
            retry_initial_backoff: Duration::from_millis(100),
            retry_max_backoff: secs(10),
            shutdown_deadline: secs(30),
        }
    }
}

impl Default for PreallocConfig {
    fn default() -> Self {
        PreallocConfig {
            enabled: true,
            hour_window: secs(10 * MINUTE),
            day_window: secs(2 * HOUR),
            max_per_second: 2000,
        }
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            hour: secs(14 * DAY),
            day: secs(400 * DAY),
        }
    }
}

impl Default for MongoDbConfig {
    fn default() -> Self {
        MongoDbConfig {
            uri: "mongodb://127.0.0.1:27017".to_string(),
            database: "tally".to_string(),
            hour_collection: "metrics_by_hour".to_string(),
            day_collection: "metrics_by_day".to_string(),
            series_collection: "tally_series".to_string(),
            statements_per_batch: 1000,
            max_concurrent_batches: 4,
            timeout: secs(10),
        }
    }
}

impl Default for QueryConfig {
    fn default() -> Self {
        QueryConfig {
            max_points: 100_000,
            default_points: 1_440,
            max_series: 1_000,
            max_fanout: 10_000,
            max_page: 10_000,
            max_total_points: 10_000_000,
        }
    }
}

impl AggregatorConfig {
    /// The shard count to run: `shards`, or one per available CPU when 0.
    pub fn effective_shards(&self) -> usize {
        if self.shards > 0 {
            return self.shards;
        }
        std::thread::available_parallelism()
            .map_or(1, NonZeroUsize::get)
            .min(MAX_SHARDS)
    }
}

const MAX_SHARDS: usize = 1024;

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

impl Config {
    /// Loads the configuration from `cli`, the process environment, the
    /// config file and defaults, then validates it.
    pub fn load(cli: &Cli) -> Result<Config, ConfigError> {
        let mut env = Vec::new();
        // `std::env::vars` panics on non-UTF-8 entries; only ours are our
        // business, everyone else's odd variables must not stop the daemon.
        for (name, value) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if !name.starts_with(ENV_PREFIX) {
                continue;
            }
            match value.into_string() {
                Ok(value) => env.push((name, value)),
                Err(_) => return Err(ConfigError::EnvNotUnicode { name }),
            }
        }
        Config::load_from(cli, env)
    }

    /// [`Config::load`] with the environment given explicitly, so callers
    /// (and tests) need not touch the process environment.
    pub fn load_from(
        cli: &Cli,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let leaves = default_leaves().map_err(|e| parse_error("", None, e))?;

        let mut env_overrides = Vec::new();
        let mut unknown = Vec::new();
        let mut config_env = None;
        for (name, raw) in env {
            if !name.starts_with(ENV_PREFIX) {
                continue;
            }
            if name == CONFIG_ENV {
                config_env = Some(raw);
                continue;
            }
            if ENV_ALLOW_LIST.contains(&name.as_str()) {
                continue;
            }
            match leaves.iter().find(|(key, _)| env_name(key) == name) {
                Some((key, default)) => env_overrides.push((key.clone(), env_value(default, raw))),
                None => unknown.push(name),
            }
        }
        if !unknown.is_empty() {
            unknown.sort();
            unknown.dedup();
            let known: Vec<String> = leaves.iter().map(|(key, _)| env_name(key)).collect();
            let unknown = unknown
                .into_iter()
                .map(|name| UnknownEnvVar {
                    suggestion: closest(&name, &known),
                    name,
                })
                .collect();
            return Err(ConfigError::UnknownEnv(unknown));
        }

        // An empty TALLYD_CONFIG is how shells "unset" it in a one-off
        // command, so treat it as absent rather than as a file named "".
        let config_path = cli
            .config
            .clone()
            .or_else(|| config_env.filter(|p| !p.is_empty()).map(PathBuf::from));

        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = config_path {
            // Read it ourselves: figment treats a missing file as empty, but
            // a file the operator named and we cannot read must stop startup.
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::File {
                path: path.clone(),
                source,
            })?;
            figment = figment.merge(TomlFile { path, text });
        }
        figment = figment
            .merge(Overrides {
                kind: OverrideKind::Env,
                entries: env_overrides,
            })
            .merge(Overrides {
                kind: OverrideKind::Flag,
                entries: cli.overrides()?,
            });

        let config: Config = figment
            .extract()
            .map_err(|e| ConfigError::Parse(setting_errors(&figment, e)))?;

        let problems: Vec<SettingError> = config
            .problems()
            .into_iter()
            .map(|(key, message)| SettingError {
                key: key.to_string(),
                origin: describe_origin(figment.find_metadata(key), key),
                message,
            })
            .collect();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// Checks ranges and cross-setting consistency of a configuration built
    /// in code; [`Config::load_from`] already runs these checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems: Vec<SettingError> = self
            .problems()
            .into_iter()
            .map(|(key, message)| SettingError {
                key: key.to_string(),
                origin: None,
                message,
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The configuration as TOML, for logging at startup. The MongoDB
    /// password is masked because these lines end up in log storage.
    pub fn effective_toml(&self) -> String {
        let mut shown = self.clone();
        shown.mongodb.uri = redact_uri(&shown.mongodb.uri);
        match Serialized::defaults(&shown).data() {
            Ok(data) => {
                let mut out = String::new();
                if let Some(root) = data.get(&Profile::Default) {
                    render_table(&mut out, "", root);
                }
                out
            }
            Err(e) => format!("# configuration could not be rendered: {e}\n"),
        }
    }

    fn problems(&self) -> Vec<(&'static str, String)> {
        let mut c = Checks::default();

        c.require(
            !listeners_clash(self.grpc_listen, self.http_listen),
            "http_listen",
            format!(
                "{} clashes with grpc_listen {}; use another port",
                self.http_listen, self.grpc_listen
            ),
        );
        c.require(
            !self.data_dir.as_os_str().is_empty(),
            "data_dir",
            "must not be empty",
        );
        if self.log_level.trim().is_empty() {
            c.fail(
                "log_level",
                "must not be empty; \"info\" is the usual choice",
            );
        } else if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            c.fail("log_level", format!("not a valid filter directive: {e}"));
        }

        let i = &self.ingest;
        c.require(
            (1024..=PROTOBUF_MAX_MESSAGE).contains(&i.max_message_bytes),
            "ingest.max_message_bytes",
            format!("must be between 1024 and {PROTOBUF_MAX_MESSAGE} (protobuf's limit)"),
        );
        c.at_least(i.max_batch_samples, 1, "ingest.max_batch_samples");
        c.positive(i.lateness_window, "ingest.lateness_window");
        c.require(
            i.lateness_window < self.retention.hour,
            "ingest.lateness_window",
            format!(
                "{} must be shorter than retention.hour ({}), or late samples would land \
                 in hour documents that have already expired",
                format_duration(i.lateness_window),
                format_duration(self.retention.hour)
            ),
        );
        c.at_most(i.max_future_skew, secs(DAY), "ingest.max_future_skew");
        c.at_least(i.max_series, 1, "ingest.max_series");
        c.at_least(i.max_pending_slots, 1, "ingest.max_pending_slots");
        c.positive(i.series_idle_timeout, "ingest.series_idle_timeout");

        c.require(
            self.aggregator.shards <= MAX_SHARDS,
            "aggregator.shards",
            format!("must be at most {MAX_SHARDS} (0 means one per CPU)"),
        );

        let f = &self.flush;
        c.min_duration(f.interval, Duration::from_millis(10), "flush.interval");
        c.at_least(f.queue_depth, 1, "flush.queue_depth");
        c.positive(f.retry_initial_backoff, "flush.retry_initial_backoff");
        c.require(
            f.retry_max_backoff >= f.retry_initial_backoff,
            "flush.retry_max_backoff",
            format!(
                "must be at least flush.retry_initial_backoff ({})",
                format_duration(f.retry_initial_backoff)
            ),
        );
        c.positive(f.shutdown_deadline, "flush.shutdown_deadline");

        let p = &self.prealloc;
        c.positive(p.hour_window, "prealloc.hour_window");
        c.shorter_than(p.hour_window, secs(HOUR), "prealloc.hour_window", "an hour");
        c.positive(p.day_window, "prealloc.day_window");
        c.shorter_than(p.day_window, secs(DAY), "prealloc.day_window", "a day");
        c.at_least(p.max_per_second as usize, 1, "prealloc.max_per_second");

        let r = &self.retention;
        c.min_duration(r.hour, secs(HOUR), "retention.hour");
        c.at_most(r.hour, TTL_MAX, "retention.hour");
        c.min_duration(r.day, secs(DAY), "retention.day");
        c.at_most(r.day, TTL_MAX, "retention.day");

        let m = &self.mongodb;
        c.require(
            m.uri.starts_with("mongodb://") || m.uri.starts_with("mongodb+srv://"),
            "mongodb.uri",
            "must start with mongodb:// or mongodb+srv://",
        );
        if let Err(why) = check_database_name(&m.database) {
            c.fail("mongodb.database", why);
        }
        if let Err(why) = check_collection_name(&m.hour_collection) {
            c.fail("mongodb.hour_collection", why);
        }
        if let Err(why) = check_collection_name(&m.day_collection) {
            c.fail("mongodb.day_collection", why);
        }
        c.require(
            m.hour_collection != m.day_collection,
            "mongodb.day_collection",
            "must differ from mongodb.hour_collection: the two document shapes cannot share a collection",
        );
        if let Err(why) = check_collection_name(&m.series_collection) {
            c.fail("mongodb.series_collection", why);
        }
        c.require(
            ![&m.hour_collection, &m.day_collection].contains(&&m.series_collection)
                && m.series_collection != crate::store::mongodb::WRITERS_COLLECTION,
            "mongodb.series_collection",
            format!(
                "must differ from mongodb.hour_collection, mongodb.day_collection and {}: catalog entries cannot share a collection",
                crate::store::mongodb::WRITERS_COLLECTION
            ),
        );
        c.require(
            (1..=MONGODB_MAX_BATCH).contains(&m.statements_per_batch),
            "mongodb.statements_per_batch",
            format!("must be between 1 and {MONGODB_MAX_BATCH} (MongoDB's write batch limit)"),
        );
        c.at_least(
            m.max_concurrent_batches,
            1,
            "mongodb.max_concurrent_batches",
        );
        c.positive(m.timeout, "mongodb.timeout");

        c.at_least(self.query.max_points, 1, "query.max_points");
        c.at_least(self.query.default_points, 1, "query.default_points");
        c.at_least(self.query.max_series, 1, "query.max_series");
        c.at_least(self.query.max_fanout, 1, "query.max_fanout");
        c.at_least(self.query.max_page, 1, "query.max_page");
        c.at_least(self.query.max_total_points, 1, "query.max_total_points");

        let r = &self.rollup;
        c.require(
            r.prefix_delimiter.chars().count() <= 1,
            "rollup.prefix_delimiter",
            "must be one character, or empty for no prefix groups",
        );
        if let Err(e) = crate::rollup::Rollups::new(self.rollup_config()) {
            c.fail("rollup.groups", e.to_string());
        }
        c.at_least(r.max_series, 1, "rollup.max_series");
        c.at_least(r.max_agent_groups, 1, "rollup.max_agent_groups");

        let w = &self.watch;
        c.at_least(w.max_series, 1, "watch.max_series");
        c.at_least(w.buffer, 1, "watch.buffer");
        c.positive(w.window, "watch.window");
        c.positive(w.max_lag, "watch.max_lag");
        c.positive(self.catalog.refresh, "catalog.refresh");

        c.0
    }
}

impl Config {
    /// `[rollup]` in the form the rollup module takes.
    pub fn rollup_config(&self) -> crate::rollup::RollupConfig {
        let r = &self.rollup;
        crate::rollup::RollupConfig {
            all: r.all,
            prefix_delimiter: r.prefix_delimiter.chars().next(),
            groups: r
                .groups
                .iter()
                .map(|g| crate::rollup::GroupRule {
                    name: g.name.clone(),
                    sources: g.sources.clone(),
                })
                .collect(),
            max_series: r.max_series,
            agent_groups: r.agent_groups,
            max_agent_groups: r.max_agent_groups,
        }
    }
}

/// Collects validation failures so an operator sees all of them at once
/// instead of fixing one per restart.
#[derive(Default)]
struct Checks(Vec<(&'static str, String)>);

impl Checks {
    fn fail(&mut self, key: &'static str, message: impl Into<String>) {
        self.0.push((key, message.into()));
    }

    fn require(&mut self, ok: bool, key: &'static str, message: impl Into<String>) {
        if !ok {
            self.fail(key, message);
        }
    }

    fn at_least(&mut self, value: usize, min: usize, key: &'static str) {
        self.require(value >= min, key, format!("must be at least {min}"));
    }

    fn positive(&mut self, value: Duration, key: &'static str) {
        self.require(!value.is_zero(), key, "must be greater than 0");
    }

    fn min_duration(&mut self, value: Duration, min: Duration, key: &'static str) {
        self.require(
            value >= min,
            key,
            format!("must be at least {}", format_duration(min)),
        );
    }

    fn at_most(&mut self, value: Duration, max: Duration, key: &'static str) {
        self.require(
            value <= max,
            key,
            format!("must be at most {}", format_duration(max)),
        );
    }

    fn shorter_than(&mut self, value: Duration, period: Duration, key: &'static str, what: &str) {
        self.require(
            value < period,
            key,
            format!("must be shorter than {what} ({})", format_duration(period)),
        );
    }
}

/// Whether binding both addresses would fail with "address in use". Port 0
/// asks the OS for a free port, so it never clashes; a wildcard address
/// takes the port on every interface, so it clashes with any address.
fn listeners_clash(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

// MongoDB's own naming rules; checking them here turns a failure on the
// first write into a startup error that names the setting.
fn check_database_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() >= 64 {
        return Err("must be shorter than 64 bytes".into());
    }
    match name.chars().find(|c| "/\\. \"$*<>:|?\0".contains(*c)) {
        Some(c) => Err(format!("must not contain {c:?}")),
        None => Ok(()),
    }
}

fn check_collection_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.starts_with("system.") {
        return Err("must not start with \"system.\" (reserved by MongoDB)".into());
    }
    match name.chars().find(|c| "$\0".contains(*c)) {
        Some(c) => Err(format!("must not contain {c:?}")),
        None => Ok(()),
    }
}

impl Cli {
    fn overrides(&self) -> Result<Vec<(String, Value)>, ConfigError> {
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

fn parse_error(key: &str, origin: Option<String>, message: String) -> ConfigError {
    ConfigError::Parse(vec![SettingError {
        key: key.to_string(),
        origin,
        message,
    }])
}

/// Every `TALLYD_*` variable the daemon reads, sorted: one per setting plus
/// `TALLYD_CONFIG`.
pub fn env_var_names() -> Vec<String> {
    let mut names: Vec<String> = default_leaves()
        .unwrap_or_default()
        .iter()
        .map(|(key, _)| env_name(key))
        .chain(ENV_ALLOW_LIST.iter().map(|s| s.to_string()))
        .collect();
    names.sort();
    names
}

/// `flush.interval` -> `TALLYD_FLUSH_INTERVAL`.
fn env_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.replace('.', "_").to_ascii_uppercase())
}

fn flag_origin(key: &str) -> String {
    match FLAG_KEYS.iter().find(|(k, _)| *k == key) {
        Some((_, flag)) => format!("flag {flag}"),
        None => "command line".to_string(),
    }
}

/// Dotted key and default value of every setting, read off the serialized
/// defaults so the list cannot drift from the structs.
// A String error: figment::Error is too large to pass around by value, and
// this can only fail if Config itself stops being serializable.
fn default_leaves() -> Result<Vec<(String, Value)>, String> {
    fn walk(prefix: &str, dict: &Dict, out: &mut Vec<(String, Value)>) {
        for (name, value) in dict {
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match value {
                Value::Dict(_, inner) => walk(&key, inner, out),
                leaf => out.push((key, leaf.clone())),
            }
        }
    }
    let data = Serialized::defaults(Config::default())
        .data()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    if let Some(root) = data.get(&Profile::Default) {
        walk("", root, &mut out);
    }
    Ok(out)
}

/// Reads an environment value with the type its setting expects.
fn env_value(default: &Value, raw: String) -> Value {
    match default {
        // Without this, a database named "2024" or a writer id "7" would be
        // parsed as a number and then rejected as "expected a string".
        Value::String(..) => Value::from(raw),
        _ => match raw.parse::<Value>() {
            Ok(value) => value,
            Err(never) => match never {},
        },
    }
}

/// The known name nearest to `name`, if it is close enough to be a typo.
fn closest(name: &str, known: &[String]) -> Option<String> {
    known
        .iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            cur.push(substitute.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The config file, read by us so a missing file is an error, but still
/// named in figment's metadata so errors point at it.
struct TomlFile {
    path: PathBuf,
    text: String,
}

impl Provider for TomlFile {
    fn metadata(&self) -> Metadata {
        Metadata::from("config file", figment::Source::File(self.path.clone()))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.text).data()
    }
}

#[derive(Clone, Copy)]
enum OverrideKind {
    Env,
    Flag,
}

/// Values from the environment or the command line, keyed by dotted path.
struct Overrides {
    kind: OverrideKind,
    entries: Vec<(String, Value)>,
}

impl Provider for Overrides {
    fn metadata(&self) -> Metadata {
        // The interpolater is what turns a failing key back into the exact
        // variable or flag the operator typed.
        match self.kind {
            OverrideKind::Env => Metadata::named(ENV_SOURCE).interpolater(|_, keys| {
                format!("environment variable {}", env_name(&keys.join(".")))
            }),
            OverrideKind::Flag => {
                Metadata::named(FLAG_SOURCE).interpolater(|_, keys| flag_origin(&keys.join(".")))
            }
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        fn insert(dict: &mut Dict, key: &str, value: Value) {
            match key.split_once('.') {
                None => {
                    dict.insert(key.to_string(), value);
                }
                Some((head, rest)) => {
                    let entry = dict
                        .entry(head.to_string())
                        .or_insert_with(|| Value::from(Dict::new()));
                    if let Value::Dict(_, inner) = entry {
                        insert(inner, rest, value);
                    }
                }
            }
        }
        let mut root = Dict::new();
        for (key, value) in &self.entries {
            insert(&mut root, key, value.clone());
        }
        let mut data = Map::new();
        data.insert(Profile::Default, root);
        Ok(data)
    }
}

/// Names the file, variable or flag that supplied `key`; `None` for a
/// built-in default, where there is nothing for the operator to go and fix.
fn describe_origin(metadata: Option<&Metadata>, key: &str) -> Option<String> {
    let md = metadata?;
    if md.name == ENV_SOURCE || md.name == FLAG_SOURCE {
        let path: Vec<&str> = key.split('.').collect();
        return Some(md.interpolate(&Profile::Default, &path));
    }
    let file = md.source.as_ref().and_then(figment::Source::file_path)?;
    Some(format!("config file {}", file.display()))
}

/// Turns figment's errors into ones that name the dotted key and the exact
/// file, variable or flag that supplied the bad value.
fn setting_errors(figment: &Figment, error: figment::Error) -> Vec<SettingError> {
    error
        .into_iter()
        .map(|e| {
            let mut path = e.path.clone();
            let (message, metadata) = match &e.kind {
                Kind::UnknownField(field, expected) => {
                    // figment already appends the unknown name to the path;
                    // the enclosing table is what precedes it.
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                    let table = &path[..path.len() - 1];
                    let place = if table.is_empty() {
                        "at top level".to_string()
                    } else {
                        format!("in {}", table.join("."))
                    };
                    let message = format!(
                        "unknown field `{field}` {place}; expected {}",
                        one_of(expected)
                    );
                    // The error carries the enclosing table's metadata, which
                    // for a merged table is the defaults; the unknown key's
                    // own value knows which file it came from.
                    (message, figment.find_metadata(&path.join(".")))
                }
                // figment's own wording doubles the backticks here.
                Kind::UnknownVariant(value, expected) => (
                    format!("unknown value `{value}`; expected {}", one_of(expected)),
                    e.metadata.as_ref(),
                ),
                kind => (kind.to_string(), e.metadata.as_ref()),
            };
            let key = path.join(".");
            SettingError {
                origin: describe_origin(metadata, &key),
                key,
                message,
            }
        })
        .collect()
}

fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.as_slice() {
        [] => "nothing".to_string(),
        [only] => only.clone(),
        [first, second] => format!("{first} or {second}"),
        _ => format!("one of {}", quoted.join(", ")),
    }
}

/// Masks the password in a MongoDB connection string. Anything that looks
/// like `user:secret@` is masked, erring towards hiding too much.
fn redact_uri(uri: &str) -> String {
    let Some(scheme_end) = uri.find("://") else {
        return uri.to_string();
    };
    let rest_start = scheme_end + 3;
    let rest = &uri[rest_start..];
    let Some(at) = rest.rfind('@') else {
        return uri.to_string();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &uri[..rest_start],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => uri.to_string(),
    }
}

fn render_table(out: &mut String, header: &str, dict: &Dict) {
    for (name, value) in dict {
        if !matches!(value, Value::Dict(..)) {
            let _ = writeln!(out, "{name} = {}", render_value(value));
        }
    }
    for (name, value) in dict {
        if let Value::Dict(_, inner) = value {
            let header = if header.is_empty() {
                name.clone()
            } else {
                format!("{header}.{name}")
            };
            let _ = writeln!(out, "\n[{header}]");
            render_table(out, &header, inner);
        }
    }
}

fn render_value(value: &Value) -> String {
    match value {
        Value::String(_, s) => toml_string(s),
        Value::Char(_, c) => toml_string(&c.to_string()),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => match (n.to_u128(), n.to_i128(), n.to_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => format!("{f:?}"),
            _ => "0".to_string(),
        },
        // TOML has no null; nothing in Config serializes to one.
        Value::Empty(..) => "\"\"".to_string(),
        Value::Array(_, items) => {
            let items: Vec<String> = items.iter().map(render_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Dict(_, dict) => {
            let items: Vec<String> = dict
                .iter()
                .map(|(k, v)| format!("{k} = {}", render_value(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Formats in the largest unit that divides evenly, so the defaults print
/// as "14d" or "90m" rather than humantime's "1year 1month ..." spellings.
fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        let s = d.as_secs();
        for (unit, size) in [("d", DAY), ("h", HOUR), ("m", MINUTE)] {
            if s != 0 && s.is_multiple_of(size) {
                return format!("{}{unit}", s / size);
            }
        }
        return format!("{s}s");
    }
    let nanos = d.as_nanos();
    for (unit, size) in [("ms", 1_000_000), ("us", 1_000)] {
        if nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    format!("{nanos}ns")
}

/// Durations as humantime strings ("500ms", "2h", "14d").
mod duration {
    use std::fmt;
    use std::time::Duration;

    use serde::{de, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        deserializer.deserialize_str(Visitor)
    }

    struct Visitor;

    impl de::Visitor<'_> for Visitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string such as \"500ms\", \"30s\", \"90m\" or \"14d\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            humantime::parse_duration(v)
                .map_err(|e| E::custom(format!("invalid duration {v:?}: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::io::Write as _;

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let mut file = match tempfile::NamedTempFile::new() {
            Ok(f) => f,
            Err(e) => panic!("temp file: {e}"),
        };
        if let Err(e) = file.write_all(text.as_bytes()) {
            panic!("write temp file: {e}");
        }
        file
    }

    fn cli_with_file(file: &tempfile::NamedTempFile) -> Cli {
        Cli {
            config: Some(file.path().to_path_buf()),
            ..Cli::default()
        }
    }

    fn cli(args: &[&str]) -> Cli {
        let argv = std::iter::once("tallyd").chain(args.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli,
            Err(e) => panic!("{e}"),
        }
    }

    fn load_err(cli: &Cli, env: Vec<(String, String)>) -> String {
        match Config::load_from(cli, env) {
            Ok(config) => panic!("expected an error, loaded {config:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults() {
        let config = Config::load_from(&Cli::default(), no_env()).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.grpc_listen, "127.0.0.1:4317".parse().unwrap());
        assert_eq!(config.http_listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.store, StoreKind::Embedded);
        assert_eq!(config.data_dir, PathBuf::from("./tally-data"));
        assert_eq!(config.writer_id, "");
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.log_level, "info");
        assert_eq!(config.ingest.max_message_bytes, 16 << 20);
        assert_eq!(config.ingest.lateness_window, Duration::from_secs(3600));
        assert_eq!(config.ingest.max_pending_slots, 4_000_000);
        assert_eq!(
            config.flush.retry_initial_backoff,
            Duration::from_millis(100)
        );
        assert_eq!(config.prealloc.hour_window, Duration::from_secs(600));
        assert_eq!(config.retention.day, Duration::from_secs(400 * 86_400));
        assert_eq!(config.mongodb.hour_collection, "metrics_by_hour");
        assert_eq!(config.query.max_points, 100_000);
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn partial_sections_fill_in_defaults() {
        let file = toml_file("[flush]\ninterval = \"250ms\"\n");
        let config = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
        assert_eq!(config.flush.interval, Duration::from_millis(250));
        assert_eq!(config.flush.queue_depth, 2);
        assert_eq!(config.ingest, IngestConfig::default());
    }

    #[test]
    fn file_overrides_default() {
        let file = toml_file(
            r#"
            grpc_listen = "0.0.0.0:4317"
            store = "mongodb"
            log_format = "json"
            [ingest]
            max_series = 5_000
            lateness_window = "90m"
            [prealloc]
            enabled = false
            [mongodb]
            database = "metrics"
            "#,
        );
        let config = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
        assert_eq!(config.grpc_listen, "0.0.0.0:4317".parse().unwrap());
        assert_eq!(config.store, StoreKind::Mongodb);
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.ingest.max_series, 5_000);
        assert_eq!(config.ingest.lateness_window, Duration::from_secs(90 * 60));
        assert!(!config.prealloc.enabled);
        assert_eq!(config.mongodb.database, "metrics");
        assert_eq!(config.http_listen, Config::default().http_listen);
    }

    #[test]
    fn config_path_from_env() {
        let file = toml_file("[query]\nmax_points = 7\n");
        let path = file.path().to_string_lossy().into_owned();
        let config = Config::load_from(&Cli::default(), env(&[("TALLYD_CONFIG", &path)])).unwrap();
        assert_eq!(config.query.max_points, 7);

        // The flag names the file when both are given.
        let other = toml_file("[query]\nmax_points = 9\n");
        let config =
            Config::load_from(&cli_with_file(&other), env(&[("TALLYD_CONFIG", &path)])).unwrap();
        assert_eq!(config.query.max_points, 9);
    }

    #[test]
    fn env_overrides_file() {
        let file = toml_file(
            r#"
            [flush]
            interval = "5s"
            [mongodb]
            uri = "mongodb://file:27017"
            [ingest]
            max_series = 10
            "#,
        );
        let config = Config::load_from(
            &cli_with_file(&file),
            env(&[
                ("TALLYD_FLUSH_INTERVAL", "2s"),
                ("TALLYD_MONGODB_URI", "mongodb://env:27017"),
                ("TALLYD_INGEST_MAX_SERIES", "20"),
                ("TALLYD_PREALLOC_HOUR_WINDOW", "15m"),
                ("TALLYD_PREALLOC_ENABLED", "false"),
                ("TALLYD_GRPC_LISTEN", "0.0.0.0:9999"),
                ("TALLYD_STORE", "mongodb"),
                // Digits stay a string for string settings.
                ("TALLYD_MONGODB_DATABASE", "2024"),
                ("TALLYD_WRITER_ID", "7"),
                ("PATH", "/usr/bin"),
            ]),
        )
        .unwrap();
        assert_eq!(config.flush.interval, Duration::from_secs(2));
        assert_eq!(config.mongodb.uri, "mongodb://env:27017");
        assert_eq!(config.ingest.max_series, 20);
        assert_eq!(config.prealloc.hour_window, Duration::from_secs(15 * 60));
        assert!(!config.prealloc.enabled);
        assert_eq!(config.grpc_listen, "0.0.0.0:9999".parse().unwrap());
        assert_eq!(config.store, StoreKind::Mongodb);
        assert_eq!(config.mongodb.database, "2024");
        assert_eq!(config.writer_id, "7");
    }

    #[test]
    fn flag_overrides_env() {
        let file = toml_file("data_dir = \"/from/file\"\nlog_level = \"warn\"\n");
        let mut cli = cli(&[
            "--grpc-listen",
            "0.0.0.0:1111",
            "--store",
            "embedded",
            "--mongodb-uri",
            "mongodb://flag:27017",
            "--log-format",
            "json",
        ]);
        cli.config = Some(file.path().to_path_buf());
        let config = Config::load_from(
            &cli,
            env(&[
                ("TALLYD_GRPC_LISTEN", "0.0.0.0:2222"),
                ("TALLYD_HTTP_LISTEN", "0.0.0.0:3333"),
                ("TALLYD_STORE", "mongodb"),
                ("TALLYD_MONGODB_URI", "mongodb://env:27017"),
                ("TALLYD_LOG_LEVEL", "debug"),
            ]),
        )
        .unwrap();
        assert_eq!(config.grpc_listen, "0.0.0.0:1111".parse().unwrap());
        assert_eq!(config.store, StoreKind::Embedded);
        assert_eq!(config.mongodb.uri, "mongodb://flag:27017");
        assert_eq!(config.log_format, LogFormat::Json);
        // Flags not given leave env and file in charge.
        assert_eq!(config.http_listen, "0.0.0.0:3333".parse().unwrap());
        assert_eq!(config.log_level, "debug");
        assert_eq!(config.data_dir, PathBuf::from("/from/file"));
    }

    #[test]
    fn missing_config_file_is_an_error() {
        let cli = Cli {
            config: Some(PathBuf::from("/nonexistent/tallyd.toml")),
            ..Cli::default()
        };
        let err = Config::load_from(&cli, no_env()).unwrap_err();
        assert!(matches!(err, ConfigError::File { .. }), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/tallyd.toml"),
            "{err}"
        );
    }

    #[test]
    fn unknown_file_key_names_key() {
        let file = toml_file("[flush]\nintervall = \"1s\"\n");
        let err = Config::load_from(&cli_with_file(&file), no_env()).unwrap_err();
        let ConfigError::Parse(problems) = &err else {
            panic!("unexpected error {err}");
        };
        assert_eq!(problems[0].key, "flush.intervall");
        let text = err.to_string();
        assert!(
            text.contains("unknown field `intervall` in flush"),
            "{text}"
        );
        assert!(text.contains("`interval`"), "{text}");
        assert!(text.contains(&file.path().display().to_string()), "{text}");

        let file = toml_file("flsh = 1\n");
        let text = load_err(&cli_with_file(&file), no_env());
        assert!(text.contains("unknown field `flsh` at top level"), "{text}");

        let file = toml_file("[flussh]\ninterval = \"1s\"\n");
        let text = load_err(&cli_with_file(&file), no_env());
        assert!(text.contains("flussh"), "{text}");
    }

    #[test]
    fn toml_syntax_error_names_file() {
        let file = toml_file("[flush\ninterval = 1s\n");
        let text = load_err(&cli_with_file(&file), no_env());
        assert!(text.contains(&file.path().display().to_string()), "{text}");
    }

    #[test]
    fn unknown_env_var_names_it() {
        let err = Config::load_from(
            &Cli::default(),
            env(&[("TALLYD_FLUSH_INTERVL", "1s"), ("TALLYD_BOGUS", "x")]),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("unknown environment variable TALLYD_BOGUS"),
            "{text}"
        );
        assert!(
            text.contains("TALLYD_FLUSH_INTERVL (did you mean TALLYD_FLUSH_INTERVAL?)"),
            "{text}"
        );
        // Section and key are joined by one underscore, not figment's two.
        let text = load_err(&Cli::default(), env(&[("TALLYD_INGEST__MAX_SERIES", "1")]));
        assert!(
            text.contains("did you mean TALLYD_INGEST_MAX_SERIES?"),
            "{text}"
        );
        // Unprefixed look-alikes are someone else's business.
        assert!(Config::load_from(&Cli::default(), env(&[("TALLY_BOGUS", "x")])).is_ok());
    }

    #[test]
    fn bad_values_name_key_and_source() {
        let text = load_err(&Cli::default(), env(&[("TALLYD_FLUSH_INTERVAL", "5x")]));
        assert!(text.contains("flush.interval"), "{text}");
        assert!(text.contains("TALLYD_FLUSH_INTERVAL"), "{text}");
        assert!(text.contains("invalid duration \"5x\""), "{text}");

        let text = load_err(
            &Cli::default(),
            env(&[("TALLYD_INGEST_MAX_SERIES", "lots")]),
        );
        assert!(text.contains("ingest.max_series"), "{text}");
        assert!(text.contains("TALLYD_INGEST_MAX_SERIES"), "{text}");

        let text = load_err(&Cli::default(), env(&[("TALLYD_GRPC_LISTEN", "localhost")]));
        assert!(text.contains("TALLYD_GRPC_LISTEN"), "{text}");

        let text = load_err(&Cli::default(), env(&[("TALLYD_STORE", "postgres")]));
        assert!(text.contains("TALLYD_STORE"), "{text}");
        assert!(
            text.contains("unknown value `postgres`; expected `embedded` or `mongodb`"),
            "{text}"
        );

        let file = toml_file("[retention]\nday = \"1 fortnight\"\n");
        let text = load_err(&cli_with_file(&file), no_env());
        assert!(text.contains("retention.day"), "{text}");
        assert!(text.contains(&file.path().display().to_string()), "{text}");

        // A bare number is ambiguous (seconds? milliseconds?), so refuse it.
        let file = toml_file("[flush]\ninterval = 5\n");
        let text = load_err(&cli_with_file(&file), no_env());
        assert!(text.contains("flush.interval"), "{text}");
        assert!(text.contains("duration string"), "{text}");
    }

    #[test]
    fn validation_errors_name_keys() {
        let file = toml_file(
            r#"
            [flush]
            interval = "1ms"
            queue_depth = 0
            [aggregator]
            shards = 5000
            [prealloc]
            hour_window = "1h"
            day_window = "25h"
            [retention]
            hour = "30m"
            day = "12h"
            [mongodb]
            statements_per_batch = 100001
            hour_collection = "same"
            day_collection = "same"
            [query]
            max_points = 0
            "#,
        );
        let err = Config::load_from(&cli_with_file(&file), no_env()).unwrap_err();
        let ConfigError::Invalid(problems) = &err else {
            panic!("unexpected error {err}");
        };
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        for key in [
            "flush.interval",
            "flush.queue_depth",
            "aggregator.shards",
            "prealloc.hour_window",
            "prealloc.day_window",
            "retention.hour",
            "retention.day",
            "mongodb.statements_per_batch",
            "mongodb.day_collection",
            "query.max_points",
            // 1h of lateness outlives 30m of hour retention.
            "ingest.lateness_window",
        ] {
            assert!(keys.contains(&key), "{key} missing from {err}");
        }
        let text = err.to_string();
        assert!(
            text.contains("flush.interval: must be at least 10ms"),
            "{text}"
        );
        assert!(
            text.contains("retention.day: must be at least 1d"),
            "{text}"
        );
        assert!(text.contains("(from config file"), "{text}");
        // Only the bad settings are reported.
        assert!(!keys.contains(&"mongodb.uri"), "{text}");
    }

    #[test]
    fn validation_error_names_env_origin() {
        let text = load_err(&Cli::default(), env(&[("TALLYD_FLUSH_QUEUE_DEPTH", "0")]));
        assert!(
            text.contains(
                "flush.queue_depth: must be at least 1 (from environment variable TALLYD_FLUSH_QUEUE_DEPTH)"
            ),
            "{text}"
        );
        let text = load_err(&cli(&["--http-listen", "127.0.0.1:4317"]), no_env());
        assert!(
            text.contains("http_listen: 127.0.0.1:4317 clashes with grpc_listen"),
            "{text}"
        );
        assert!(text.contains("flag --http-listen"), "{text}");
    }

    #[test]
    fn series_collection_is_validated() {
        let mut c = Config::default();
        assert_eq!(c.mongodb.series_collection, "tally_series");
        for bad in [
            "",
            "system.series",
            "a$b",
            "metrics_by_hour",
            "metrics_by_day",
            "tally_writers",
        ] {
            c.mongodb.series_collection = bad.into();
            let Err(ConfigError::Invalid(problems)) = c.validate() else {
                panic!("{bad:?} accepted");
            };
            assert!(
                problems
                    .iter()
                    .any(|p| p.key == "mongodb.series_collection"),
                "{bad:?}: {problems:?}"
            );
        }
    }

    #[test]
    fn more_validation() {
        let mut c = Config::default();
        c.mongodb.uri = "http://x".into();
        c.mongodb.database = "a.b".into();
        c.mongodb.hour_collection = String::new();
        c.mongodb.day_collection = "system.x".into();
        c.flush.retry_max_backoff = Duration::from_millis(1);
        c.ingest.max_message_bytes = 10;
        c.log_level = "info,foo=loudest".into();
        c.retention.day = Duration::from_secs(100 * 365 * 86_400);
        let Err(ConfigError::Invalid(problems)) = c.validate() else {
            panic!("expected validation errors");
        };
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        for key in [
            "mongodb.uri",
            "mongodb.database",
            "mongodb.hour_collection",
            "mongodb.day_collection",
            "flush.retry_max_backoff",
            "ingest.max_message_bytes",
            "log_level",
            "retention.day",
        ] {
            assert!(keys.contains(&key), "{key} missing from {keys:?}");
        }
        // Port 0 asks the OS for a free port, so two listeners may share it.
        let mut c = Config::default();
        c.grpc_listen = "127.0.0.1:0".parse().unwrap();
        c.http_listen = c.grpc_listen;
        assert!(c.validate().is_ok());
        c.grpc_listen = "0.0.0.0:9000".parse().unwrap();
        c.http_listen = "127.0.0.1:9000".parse().unwrap();
        assert!(c.validate().is_err());
        c.http_listen = "127.0.0.2:9000".parse().unwrap();
        c.grpc_listen = "127.0.0.1:9000".parse().unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn example_config_loads_and_equals_defaults() {
        let path = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../config/tallyd.toml"
        ));
        let cli = Cli {
            config: Some(path.clone()),
            ..Cli::default()
        };
        let config = Config::load_from(&cli, no_env()).unwrap();
        assert_eq!(config, Config::default());

        // Every key must appear uncommented, so the file really is the
        // reference and not just a sample.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut section = String::new();
        let mut found = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
            } else if let Some((key, _)) = line.split_once('=') {
                if !line.starts_with('#') {
                    let key = key.trim();
                    found.push(if section.is_empty() {
                        key.to_string()
                    } else {
                        format!("{section}.{key}")
                    });
                }
            }
        }
        let expected: Vec<String> = default_leaves()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for key in &expected {
            assert!(found.contains(key), "config/tallyd.toml lacks {key}");
        }
    }

    #[test]
    fn env_names_follow_keys() {
        let names = env_var_names();
        for name in [
            "TALLYD_CONFIG",
            "TALLYD_GRPC_LISTEN",
            "TALLYD_FLUSH_INTERVAL",
            "TALLYD_MONGODB_URI",
            "TALLYD_INGEST_MAX_SERIES",
            "TALLYD_PREALLOC_HOUR_WINDOW",
            "TALLYD_RETENTION_DAY",
            "TALLYD_QUERY_MAX_POINTS",
            "TALLYD_AGGREGATOR_SHARDS",
        ] {
            assert!(names.contains(&name.to_string()), "{name} missing");
        }
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "two keys share an env name");
        // Every leaf of the default config has a variable.
        assert_eq!(
            names.len(),
            default_leaves().unwrap().len() + ENV_ALLOW_LIST.len()
        );
    }

    #[test]
    fn every_setting_settable_from_env() {
        // Round-trip each default through its variable: proves the mapping
        // and the type-aware parsing for every key, not just a sample.
        for (key, default) in default_leaves().unwrap() {
            let raw = match &default {
                Value::String(_, s) => s.clone(),
                other => render_value(other),
            };
            let result = Config::load_from(&Cli::default(), vec![(env_name(&key), raw)]);
            assert_eq!(result.ok(), Some(Config::default()), "{key}");
        }
    }

    #[test]
    fn effective_toml_round_trips_and_hides_password() {
        let mut config = Config::default();
        config.mongodb.uri = "mongodb://tally:s3cret@db1:27017,db2:27017/?replicaSet=rs".into();
        config.writer_id = "w \"1\"\\".into();
        config.flush.interval = Duration::from_millis(1500);
        let text = config.effective_toml();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.contains("mongodb://tally:***@db1:27017,db2:27017/?replicaSet=rs"),
            "{text}"
        );
        assert!(text.contains("[flush]"), "{text}");
        assert!(text.contains("interval = \"1500ms\""), "{text}");
        assert!(text.contains("day = \"400d\""), "{text}");

        let file = toml_file(&text);
        let loaded = Config::load_from(&cli_with_file(&file), no_env()).unwrap();
        let mut expected = config.clone();
        expected.mongodb.uri = "mongodb://tally:***@db1:27017,db2:27017/?replicaSet=rs".into();
        assert_eq!(loaded, expected);

        let plain = Config::default().effective_toml();
        assert!(
            plain.contains("uri = \"mongodb://127.0.0.1:27017\""),
            "{plain}"
        );
    }

    #[test]
    fn redaction() {
        assert_eq!(redact_uri("mongodb://h:1"), "mongodb://h:1");
        assert_eq!(redact_uri("mongodb://u@h"), "mongodb://u@h");
        assert_eq!(redact_uri("mongodb://u:p@h"), "mongodb://u:***@h");
        assert_eq!(
            redact_uri("mongodb+srv://u:p%40x@h/db"),
            "mongodb+srv://u:***@h/db"
        );
        assert_eq!(redact_uri("not a uri"), "not a uri");
    }

    #[test]
    fn duration_format() {
        for (d, s) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(5400), "90m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(400 * 86_400), "400d"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1500), "1500us"),
            (Duration::from_nanos(7), "7ns"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(humantime::parse_duration(s).unwrap(), d, "{s}");
        }
    }

    #[test]
    fn cli_parses_and_help_reads_well() {
        Cli::command().debug_assert();
        let cli = cli(&[
            "--config",
            "/etc/tallyd.toml",
            "--http-listen",
            "0.0.0.0:8080",
            "--data-dir",
            "/var/lib/tally",
            "--store",
            "mongodb",
            "--log-level",
            "debug",
        ]);
        assert_eq!(cli.config, Some(PathBuf::from("/etc/tallyd.toml")));
        assert_eq!(cli.store, Some(StoreKind::Mongodb));
        assert_eq!(cli.grpc_listen, None);
        assert!(Cli::try_parse_from(["tallyd", "--store", "postgres"]).is_err());
        assert!(Cli::try_parse_from(["tallyd", "--grpc-listen", "nope"]).is_err());

        // The defaults quoted in --help must be the real ones.
        let help = Cli::command().render_long_help().to_string();
        let d = Config::default();
        for shown in [
            d.grpc_listen.to_string(),
            d.http_listen.to_string(),
            d.data_dir.display().to_string(),
            d.mongodb.uri.clone(),
            d.log_level.clone(),
            "TALLYD_CONFIG".to_string(),
            "TALLYD_<SECTION>_<KEY>".to_string(),
        ] {
            assert!(help.contains(&shown), "--help lacks {shown}:\n{help}");
        }
        // Every flag maps to a real key.
        let keys: Vec<String> = default_leaves()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for (key, flag) in FLAG_KEYS {
            assert!(keys.contains(&key.to_string()), "{key}");
            assert!(help.contains(flag), "{flag}");
        }
    }

    #[test]
    fn effective_shards() {
        assert_eq!(AggregatorConfig { shards: 3 }.effective_shards(), 3);
        let auto = AggregatorConfig { shards: 0 }.effective_shards();
        assert!((1..=MAX_SHARDS).contains(&auto));
    }
}
