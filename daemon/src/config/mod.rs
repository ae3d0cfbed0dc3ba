//! The daemon's configuration: every setting, where each one comes from, and
//! the checks that run before anything binds a port or opens a store.
//!
//! Each component owns its section's type, defaults and checks (the
//! aggregator's `[aggregator]`, the flush pipeline's `[flush]`, …); this
//! module composes them into [`Config`], loads it in layers
//! ([`load`](Config::load)) and runs every component's checks at once.
//!
//! Sources, strongest first: command-line flags ([`Cli`]), `TALLYD_*`
//! environment variables, the TOML file named by `--config` (or
//! `TALLYD_CONFIG`), built-in defaults. A misspelt key or variable is a
//! startup error, not a silently ignored setting: a typo in
//! `retention.hour` or `TALLYD_MONGODB_URI` would otherwise surface only as
//! lost data or a daemon writing somewhere unexpected.
//!
//! `config/tallyd.toml` is the reference for every key.

mod cli;
mod error;
mod load;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

pub use crate::promql::PrometheusConfig;
pub use crate::query::QueryConfig;
pub use crate::store::embedded::EmbeddedConfig;
pub use crate::store::mongodb::MongoDbConfig;
pub use cli::{Cli, Command, DeadLettersCommand};
pub use error::{ConfigError, SettingError, UnknownEnvVar};
pub use load::{env_var_names, CONFIG_ENV, ENV_PREFIX};

use crate::aggregator::AggregatorConfig;
use crate::auth::AuthConfig;
use crate::catalog::CatalogConfig;
use crate::flush::FlushConfig;
use crate::graphite::GraphiteConfig;
use crate::grpc::GrpcConfig;
use crate::http::{HttpConfig, UiConfig};
use crate::ingest::influx::InfluxConfig;
use crate::ingest::otlp::OtlpConfig;
use crate::ingest::remote_write::RemoteWriteConfig;
use crate::ingest::IngestConfig;
use crate::maintenance::PreallocConfig;
use crate::rollup::RollupConfig;
use crate::store::RetentionConfig;
use crate::tls::TlsConfig;
use crate::validate::Problems;
use crate::wal::WalConfig;
use crate::watch::WatchConfig;

/// The complete daemon configuration: the daemon's own settings and one
/// section per component.
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
    pub grpc: GrpcConfig,
    pub http: HttpConfig,
    pub ingest: IngestConfig,
    pub otlp: OtlpConfig,
    pub remote_write: RemoteWriteConfig,
    pub influx: InfluxConfig,
    pub graphite: GraphiteConfig,
    pub aggregator: AggregatorConfig,
    pub flush: FlushConfig,
    pub wal: WalConfig,
    pub prealloc: PreallocConfig,
    pub retention: RetentionConfig,
    pub mongodb: MongoDbConfig,
    pub embedded: EmbeddedConfig,
    pub query: QueryConfig,
    pub prometheus: PrometheusConfig,
    pub rollup: RollupConfig,
    pub watch: WatchConfig,
    pub catalog: CatalogConfig,
    pub tls: TlsConfig,
    pub auth: AuthConfig,
    pub ui: UiConfig,
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
            grpc: GrpcConfig::default(),
            http: HttpConfig::default(),
            ingest: IngestConfig::default(),
            otlp: OtlpConfig::default(),
            remote_write: RemoteWriteConfig::default(),
            influx: InfluxConfig::default(),
            graphite: GraphiteConfig::default(),
            aggregator: AggregatorConfig::default(),
            flush: FlushConfig::default(),
            wal: WalConfig::default(),
            prealloc: PreallocConfig::default(),
            retention: RetentionConfig::default(),
            mongodb: MongoDbConfig::default(),
            embedded: EmbeddedConfig::default(),
            query: QueryConfig::default(),
            prometheus: PrometheusConfig::default(),
            rollup: RollupConfig::default(),
            watch: WatchConfig::default(),
            catalog: CatalogConfig::default(),
            tls: TlsConfig::default(),
            auth: AuthConfig::default(),
            ui: UiConfig::default(),
        }
    }
}

impl Config {
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

    /// Every problem of every section, in the order of the reference file.
    fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Problems::default();
        self.check_own(&mut p);
        self.grpc.check(&mut p);
        self.http.check(&mut p);
        self.ingest.check(self.retention.hour, &mut p);
        self.otlp.check(&mut p);
        self.remote_write.check(&mut p);
        self.influx.check(&mut p);
        self.graphite.check(self.ingest.max_batch_samples, &mut p);
        self.aggregator.check(&mut p);
        self.flush.check(&mut p);
        self.wal.check(&mut p);
        self.prealloc.check(&mut p);
        self.retention.check(&mut p);
        self.mongodb.check(&mut p);
        self.query.check(&mut p);
        self.prometheus.check(&mut p);
        self.rollup.check(&mut p);
        self.watch.check(&mut p);
        self.catalog.check(&mut p);
        self.embedded.check(&mut p);
        self.tls.check(&mut p);
        self.auth.check(&mut p);
        self.ui.check(&mut p);
        p.into_vec()
    }

    /// The top-level settings: listeners, data directory, logging.
    fn check_own(&self, p: &mut Problems) {
        p.require(
            !listeners_clash(self.grpc_listen, self.http_listen),
            "http_listen",
            format!(
                "{} clashes with grpc_listen {}; use another port",
                self.http_listen, self.grpc_listen
            ),
        );
        if let Some(graphite) = self.graphite.addr() {
            p.require(
                !listeners_clash(graphite, self.grpc_listen)
                    && !listeners_clash(graphite, self.http_listen),
                "graphite.listen",
                format!("{graphite} clashes with grpc_listen or http_listen; use another port"),
            );
        }
        p.require(
            !self.data_dir.as_os_str().is_empty(),
            "data_dir",
            "must not be empty",
        );
        if self.log_level.trim().is_empty() {
            p.fail(
                "log_level",
                "must not be empty; \"info\" is the usual choice",
            );
        } else if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_level) {
            p.fail("log_level", format!("not a valid filter directive: {e}"));
        }
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
