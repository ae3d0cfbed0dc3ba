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
//!
//! The MongoDB suites that need no fault injection (the store's conformance,
//! documents and expiry, the end-to-end scenarios, exactly-once under the
//! load generator) run once per MongoDB target: `<test>::mongodb_standin`,
//! `<test>::mongodb_ferretdb` (FerretDB, when Go is present) and
//! `<test>::mongodb_uri` (when `MONGODB_URI` is set); a target that is not
//! available prints why and passes. The other MongoDB tests use
//! `MONGODB_URI` when set and the stand-in otherwise.

// A failed expectation panics: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Runs each `async fn <name>(target: MongoTarget)` once per MongoDB
/// target, as the tests `<name>::mongodb_standin`, `<name>::mongodb_ferretdb`
/// and `<name>::mongodb_uri` (see the crate docs).
macro_rules! per_mongo_target {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use tally_testkit::mongo::{mongo_target_of, TargetKind};

            async fn on(kind: TargetKind) {
                if let Some(target) = mongo_target_of(kind).await {
                    super::$scenario(target).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mongodb_standin() {
                on(TargetKind::Standin).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mongodb_ferretdb() {
                on(TargetKind::FerretDb).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mongodb_uri() {
                on(TargetKind::Uri).await;
            }
        }
    )*};
}

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

use tally_testkit::DaemonOpts;

/// Options to start the `tallyd` Cargo built for these tests.
fn tallyd() -> DaemonOpts {
    DaemonOpts::new(env!("CARGO_BIN_EXE_tallyd"))
}
