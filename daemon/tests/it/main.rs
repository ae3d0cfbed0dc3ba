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
//! load generator, two daemons on one server, the last not on SQLite) run
//! once per MongoDB target: `<test>::mongodb_standin`,
//! `<test>::mongodb_ferretdb` (FerretDB on SQLite, when Go is present),
//! `<test>::mongodb_ferretdb_pg` (FerretDB on PostgreSQL 15, when Go and
//! PostgreSQL are present) and `<test>::mongodb_uri` (when `MONGODB_URI` is
//! set); a target that is not available prints why and passes. The other
//! MongoDB tests use `MONGODB_URI` when set and the stand-in otherwise.

// A failed expectation panics: that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// Inside a scenario's module: the tests `mongodb_standin`,
/// `mongodb_ferretdb`, `mongodb_ferretdb_pg` and `mongodb_uri`, each calling
/// `super::<scenario>(<wrap>(target))` on a target of its kind, or printing
/// why that kind is not available here and passing.
///
/// Every scenario runs on FerretDB on PostgreSQL: its 20 tests took 409 s
/// on their own (`cargo test -p tallyd --test it mongodb_ferretdb_pg`, two
/// test threads, 2-core machine, 2026-11-27), within the suite's budget for
/// the target, so none is left out. The longest, the store's conformance
/// property, takes as long there as on SQLite (6–8 minutes for 3 cases).
macro_rules! mongo_target_tests {
    ($scenario:ident, $wrap:path) => {
        async fn on(kind: tally_testkit::mongo::TargetKind) {
            if let Some(target) = tally_testkit::mongo::mongo_target_of(kind).await {
                super::$scenario($wrap(target)).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn mongodb_standin() {
            on(tally_testkit::mongo::TargetKind::Standin).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn mongodb_ferretdb() {
            on(tally_testkit::mongo::TargetKind::FerretDb).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn mongodb_ferretdb_pg() {
            on(tally_testkit::mongo::TargetKind::FerretDbPg).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn mongodb_uri() {
            on(tally_testkit::mongo::TargetKind::Uri).await;
        }
    };
}

/// Runs each `async fn <name>(target: MongoTarget)` once per MongoDB
/// target, as the tests `<name>::mongodb_standin`, `<name>::mongodb_ferretdb`,
/// `<name>::mongodb_ferretdb_pg` and `<name>::mongodb_uri` (see the crate
/// docs).
macro_rules! per_mongo_target {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            mongo_target_tests!($scenario, std::convert::identity);
        }
    )*};
}

mod agents;
mod catalog_conformance;
mod catalog_embedded;
mod conformance;
mod crash_loop;
mod dashboard_reads;
mod dashboards;
mod e2e;
mod fleet_dashboard;
mod fold_property;
mod full_disk;
mod labelled_reads;
mod mongo_outage;
mod mongo_standin;
mod mongo_store;
mod prometheus_api;
mod promql_memory_fuzz;
mod promql_oracle;
mod robustness;
mod security;
mod soak;
mod statement_budget;
mod two_daemons;
mod wal_damage;
mod web;

use tally_testkit::DaemonOpts;

/// Options to start the `tallyd` Cargo built for these tests.
fn tallyd() -> DaemonOpts {
    DaemonOpts::new(env!("CARGO_BIN_EXE_tallyd"))
}
