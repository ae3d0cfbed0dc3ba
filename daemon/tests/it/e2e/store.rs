//! The store a daemon under test runs on, for the suite's tests that run
//! on more than one: how to start `tallyd` on it, and what reached it,
//! read without the daemon.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{doc, Document};
use tally_testkit::mongo::{mongo_target, MongoTarget, Standin};
use tally_testkit::{Daemon, DaemonOpts};

use super::check::Expect;
use crate::tallyd;

const HOURS: &str = "metrics_by_hour";
const DAYS: &str = "metrics_by_day";
const WRITER: &str = "e2e-writer";

/// Which store a test runs on: MongoDB is `MONGODB_URI` when set, else
/// the stand-in ([`Store::mongodb`] takes any target).
#[derive(Debug, Clone, Copy)]
pub(super) enum StoreKind {
    Embedded,
    MongoDb,
}

/// The store of one test: the embedded store (in the daemon's temporary
/// data directory), or a MongoDB target with a database of its own.
pub(super) struct Store {
    mongodb: Option<MongoTarget>,
}

impl Store {
    pub(super) async fn new(kind: StoreKind) -> Store {
        let mongodb = match kind {
            StoreKind::Embedded => None,
            StoreKind::MongoDb => Some(mongo_target().await),
        };
        Store { mongodb }
    }

    /// MongoDB on `target`.
    pub(super) fn mongodb(target: MongoTarget) -> Store {
        Store {
            mongodb: Some(target),
        }
    }

    /// The MongoDB target, when the store is MongoDB.
    pub(super) fn target(&self) -> Option<&MongoTarget> {
        self.mongodb.as_ref()
    }

    /// `tallyd` on this store, flushing every `flush_interval`. On MongoDB
    /// it retries failed flushes at least every 500 ms, and on a server the
    /// harness started, server selection gives up after 2 s instead of 5 s,
    /// so a daemon started while MongoDB is down, and each flush attempt
    /// while it is down, fail (and retry) sooner. On FerretDB it runs with
    /// the target's smaller commands and longer deadline
    /// ([`MongoTarget::daemon_env`]).
    pub(super) fn opts(&self, flush_interval: &str) -> DaemonOpts {
        let opts = tallyd().flush_interval(flush_interval);
        let Some(target) = &self.mongodb else {
            return opts;
        };
        let opts = opts
            .mongodb(&target.uri_selecting_within(2_000), &target.database)
            .env("TALLYD_WRITER_ID", WRITER)
            .env("TALLYD_FLUSH_RETRY_MAX_BACKOFF", "500ms");
        target
            .daemon_env()
            .iter()
            .fold(opts, |opts, &(name, value)| opts.env(name, value))
    }

    /// Starts `tallyd` on this store with [`Store::opts`].
    pub(super) async fn start(&self, flush_interval: &str) -> Daemon {
        Daemon::start_async(self.opts(flush_interval)).await
    }

    /// How long a flush may take to settle: MongoDB (the stand-in, in
    /// Python; FerretDB, slower still) is slower than the embedded store.
    pub(super) fn flush_timeout(&self) -> Duration {
        self.mongodb
            .as_ref()
            .map_or(Duration::from_secs(15), MongoTarget::flush_timeout)
    }

    /// The stand-in behind this store, for fault injection; `None` (after
    /// printing a note) on the embedded store or a real MongoDB server.
    pub(super) fn standin_or_skip(&self) -> Option<&Standin> {
        let standin = self.mongodb.as_ref().and_then(MongoTarget::standin);
        if standin.is_none() {
            println!(
                "note: fault injection needs the MongoDB stand-in; skipped against MONGODB_URI"
            );
        }
        standin
    }

    /// On MongoDB, the documents of every expected series hold exactly its
    /// samples, each written once, in the hour tier. The embedded store is
    /// only read through the daemon, so there this checks nothing.
    pub(super) async fn check_stored(&self, expects: &[Expect]) {
        if let Some(target) = &self.mongodb {
            check_stored(target, expects, false).await;
        }
    }

    /// [`Store::check_stored`] in the day tier too, once a daemon stopped
    /// since the samples were flushed: a clean stop seals the open hours.
    pub(super) async fn check_sealed(&self, expects: &[Expect]) {
        if let Some(target) = &self.mongodb {
            check_stored(target, expects, true).await;
        }
    }

    /// Drops the test's MongoDB database on a real server.
    pub(super) async fn cleanup(&self) {
        if let Some(target) = &self.mongodb {
            target.cleanup().await;
        }
    }
}

/// Running totals `(n, sum)` per series (source, metric), added up over
/// its hour documents (`[0]`) and over its day documents (`[1]`).
type StoredTotals = BTreeMap<(String, String), [(i64, f64); 2]>;

/// Every document of both collections, read with the driver.
async fn stored_totals(target: &MongoTarget) -> StoredTotals {
    let db = target.db().await;
    let mut out = StoredTotals::new();
    for (i, coll) in [HOURS, DAYS].into_iter().enumerate() {
        let mut cursor = db
            .collection::<Document>(coll)
            .find(doc! {})
            .await
            .unwrap_or_else(|e| panic!("find in {coll}: {e}"));
        while let Some(d) = cursor.try_next().await.expect("reading documents") {
            let field = |name: &str| {
                d.get_str(name)
                    .unwrap_or_else(|e| panic!("{coll} document without {name} ({e}): {d}"))
                    .to_string()
            };
            let total = d
                .get_document("total")
                .unwrap_or_else(|e| panic!("{coll} document without total ({e}): {d}"));
            let entry = out.entry((field("s"), field("m"))).or_default();
            entry[i].0 += total.get_i64("n").expect("total.n is an Int64");
            entry[i].1 += total.get_f64("sum").expect("total.sum is a Double");
        }
    }
    out
}

/// The documents of every expected series hold exactly its samples: each
/// written once, in the hour tier and, when `sealed`, in the day tier. This
/// waits a while, for flushes in flight.
async fn check_stored(target: &MongoTarget, expects: &[Expect], sealed: bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stored = stored_totals(target).await;
        let wrong: Vec<String> = expects
            .iter()
            .filter_map(|e| {
                let n = e.stored.len() as i64;
                let sum: f64 = e.stored.iter().map(|s| s.1).sum();
                let got = stored
                    .get(&(e.source.clone(), e.metric.clone()))
                    .copied()
                    .unwrap_or_default();
                let tiers = if sealed { 2 } else { 1 };
                (got[..tiers] != [(n, sum); 2][..tiers]).then(|| {
                    format!(
                        "{}/{}: (n, sum) of the hour and the day documents are {got:?}, want {:?}",
                        e.source,
                        e.metric,
                        [(n, sum); 2]
                    )
                })
            })
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "documents in MongoDB:\n{}",
            wrong.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
