//! Tally: a time-series ingestion daemon that folds pushed samples into
//! pre-allocated per-hour and per-day documents with a slot per minute, and
//! serves graphs from them in O(1) documents per series and range.
//!
//! # Data path
//!
//! ```text
//!  agents
//!    │  grpc: tally.v1, OTLP     http: OTLP/HTTP, remote-write, InfluxDB     tcp: Graphite
//!    ▼
//!  ingest ──────── admission: limits, tokens, labels, backpressure, the gate
//!    │  1. append the request ─────────────────▶ wal ◀── recovery: replay at start
//!    │  2. fold it, then acknowledge
//!    ▼
//!  aggregator ──── one slot per (series, minute) in memory; counter deltas
//!    │  drained every flush.interval (the cut's marker goes into the wal)
//!    ▼
//!  flush ───────── numbered batch + rollup series ──apply──▶ store
//!    │                                                      ├ embedded (redb)
//!    └── catalog: new series, last_seen ──────────────────▶ └ mongodb
//!
//!  query ◀──────── the store + the batches in flight + the aggregator's slots
//!    │
//!    ▼
//!  grpc::query, http::api, http::prometheus, watch ──▶ dashboards
//!
//!  maintenance ─── pre-allocation, retention sweep, idle series (beside the path)
//! ```
//!
//! Every protocol's request becomes a `tally.v1` request and passes one
//! admission; it is written to the write-ahead log, then folded into the
//! aggregator, and only then acknowledged. Every `flush.interval` the flush
//! pipeline drains the aggregator into a batch with its own id (its marker
//! goes into the log), merges group rollups into it and applies it to the
//! store, whose per-document watermarks make a retried or replayed batch
//! count once. Reads merge what the store has with the batches in flight
//! and the slots still in memory, so a graph is fresh to the second.
//!
//! # Layout
//!
//! | module | role |
//! |---|---|
//! | [`model`] | series ids, slots, kinds, periods: the document model's vocabulary |
//! | [`labels`] | label sets: their rules and the canonical encoding series keys use |
//! | [`ingest`] | admission every protocol shares: `[ingest]` limits, backpressure, the shutdown gate; requests read as borrowed columns; what OTLP, remote-write, InfluxDB line protocol and Graphite mean in Tally's model |
//! | [`aggregator`] | the in-memory fold per (series, minute), counter deltas, sample checks |
//! | [`flush`] | drains the aggregator into batches, applies them, retries, backpressure |
//! | [`rollup`] | group rollups merged into each drained batch |
//! | [`catalog`] | which series exist, recorded after each applied batch |
//! | [`datadir`] | the data directory's lock: one process at a time |
//! | [`deadletter`] | the parts of flushes the store refused for good, kept in the data directory until replayed |
//! | [`metadata`] | what agents say their metric families are: type, help, unit |
//! | [`store`] | the [`store::Store`] trait; [`store::embedded`] and [`store::mongodb`] behind it |
//! | [`query`] | ranges, latest values, cross-source aggregates, discovery, the read budget |
//! | [`promql`] | PromQL over the minute slots: the engine behind the Prometheus API |
//! | [`watch`] | live subscriptions fed once a second from the query engine |
//! | [`fleet`] | every source with its series, newest sample and samples per second, for the dashboard |
//! | [`maintenance`] | pre-allocation, retention sweep, idle-series eviction |
//! | [`wal`] | the write-ahead log: segments, records, group commit, counter baselines |
//! | [`recovery`] | replaying the write-ahead log at start, exactly once |
//! | [`grpc`] | the gRPC server: ingest, OTLP and query services, health, reflection |
//! | [`http`] | the HTTP server: native API, operations endpoints, OTLP/HTTP, remote-write and InfluxDB line protocol, Prometheus-compatible API, the built-in dashboard |
//! | [`graphite`] | the Graphite plaintext TCP listener: bounded connections, lines batched into admission |
//! | [`selector`] | source, metric and label matchers (names, lists, globs, regular expressions) |
//! | `table` | the hash table of what the daemon keeps per series: the aggregator's series, the embedded store's pending minutes, the catalog writer's record of the series the aggregator does not track (rollup series) |
//! | [`listen`] | the accept loop of the gRPC and HTTP listeners: connection caps and eviction, the HTTP reserve, handshakes, write deadlines, the open-file limit |
//! | [`tls`] | TLS for the gRPC and HTTP listeners: certificate files, reload, the handshake |
//! | [`auth`] | bearer tokens, roles and source globs; the gRPC interceptor and HTTP middleware |
//! | [`security`] | loads and reloads (SIGHUP) TLS and tokens together; exposure warnings |
//! | [`config`] | command line, layered loading and composition of every section |
//! | [`validate`] | the checks each section's config type runs |
//! | [`telemetry`] | logging and the daemon's own metrics |
//! | [`allocator`] | the allocator's one run-time setting |
//! | `fuzz` | tests only: random-input harnesses of the front doors; `scripts/fuzz` runs millions |
//!
//! `main.rs` only wires these together and runs the shutdown sequence. The
//! same map, with each module's main files, is `docs/architecture.md`; a
//! test keeps the two listing the same modules and this diagram.

// Input and I/O must not reach a panic: production code answers with an
// error instead. Tests may unwrap.
// A function over 80 lines of code (clippy.toml) is split: tests may be longer.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)
)]

pub mod aggregator;
pub mod allocator;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod datadir;
pub mod deadletter;
pub mod fleet;
pub mod flush;
#[cfg(test)]
mod fuzz;
pub mod graphite;
pub mod grpc;
pub mod http;
pub mod ingest;
pub mod labels;
pub mod listen;
pub mod maintenance;
pub mod metadata;
pub mod model;
pub mod promql;
pub mod query;
pub mod recovery;
pub mod rollup;
pub mod security;
pub mod selector;
pub mod store;
mod table;
pub mod telemetry;
pub mod tls;
pub mod validate;
pub mod wal;
pub mod watch;
