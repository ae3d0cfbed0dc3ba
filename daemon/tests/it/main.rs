//! The daemon's integration tests, as one test binary: it links once, and
//! its tests share one pool of test threads (`--test-threads`, by default
//! one per CPU) instead of running binary after binary.
//!
//! One module per area. What the daemon's tests share with the load
//! generator's (running `tallyd` and the MongoDB stand-in, clients, waits)
//! is in the `tally-testkit` crate; the store conformance suites, which
//! drive the library directly, are here.
//!
//! `cargo test -p tallyd --test it -- e2e::` runs one area; the end-to-end
//! suite runs once per store, e.g. `-- e2e::per_store::` and `::mongodb`.
//! With `MONGODB_URI` set, MongoDB tests use that server instead of the
//! stand-in.

// A failed expectation panics: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod catalog_conformance;
mod catalog_embedded;
mod conformance;
mod dashboard_reads;
mod dashboards;
mod e2e;
mod fleet_dashboard;
mod fold_property;
mod mongo_standin;
mod mongo_store;
mod prometheus_api;
mod robustness;
mod security;

use tally_testkit::DaemonOpts;

/// Options to start the `tallyd` Cargo built for these tests.
fn tallyd() -> DaemonOpts {
    DaemonOpts::new(env!("CARGO_BIN_EXE_tallyd"))
}
