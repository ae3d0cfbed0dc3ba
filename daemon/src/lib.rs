//! Tally: a time-series ingestion daemon.
//!
//! Agents push samples over gRPC ([`grpc`]); the [`aggregator`] folds them
//! per (series, minute) in memory; the [`flush`] pipeline turns the folded
//! minutes into hour- and day-document updates and hands them to a
//! [`store::Store`]; [`query`] answers range reads from the store merged with
//! what is still in memory; [`http`] serves the JSON API and operations
//! endpoints. [`config`] holds every setting; `main.rs` only wires these.

pub mod aggregator;
pub mod catalog;
pub mod config;
pub mod flush;
pub mod grpc;
pub mod http;
pub mod ingest;
pub mod maintenance;
pub mod model;
pub mod query;
pub mod rollup;
pub mod selector;
pub mod store;
pub mod telemetry;
pub mod watch;
