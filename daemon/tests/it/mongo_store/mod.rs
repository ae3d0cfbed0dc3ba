//! The MongoDB store end to end, through the real `mongodb` driver. Every
//! test but the fault-injection ones runs once per MongoDB target (the
//! stand-in, FerretDB on SQLite and on PostgreSQL, `MONGODB_URI`; see the
//! crate docs); those use the
//! stand-in, or print a note and return against `MONGODB_URI`.
//!
//! * Here: the same fold property as the embedded store (`conformance`,
//!   replayed flushes included), and the series catalog's contract shared
//!   with the embedded store (`catalog_conformance`).
//! * `documents`: pre-allocated documents (every slot, the right empty
//!   values for the server, updates that never add a slot), statement
//!   counts, and corrupt documents.
//! * `seals`: day documents sealed from their hours: statement counts in
//!   steady state and at hour and day boundaries, the day document's
//!   minutes equal to the hour document's once an hour closes, after a late
//!   sample, a close, a crash and the restart after it, two writers of one
//!   series, and lost replies.
//! * `faults`: exactly once across ambiguous failures (the reply lost after
//!   the write); MongoDB down at start and in the middle.
//! * `last`: the minute's last sample kept newest across late flushes,
//!   replays and seals, NaN included.
//! * `baselines`: the one-time move of cumulative counters' `first_seen`
//!   off their baseline minute (from hour or day documents, over pages,
//!   resumed from its marker, never run twice).
//! * `expiry`: TTL indexes (or, where the server has none, plain indexes
//!   and the store's own retention deletes), and the catalog's documents,
//!   commands and expiry.

mod baselines;
mod documents;
mod expiry;
mod faults;
mod last;
mod seals;
mod upkeep;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use tally_testkit::mongo::{mongo_target_of, MongoTarget, TargetKind};

use crate::catalog_conformance;
use crate::conformance;
use tally::config::MongoDbConfig;
use tally::model::{
    FlushBatch, FlushId, Resolution, SampleKind, SeriesId, SeriesMinutes, Slot, Tier, DAY_S,
    HOUR_S, MINUTE_S,
};
use tally::store::mongodb::{Feature, MongoStore};
use tally::store::{DocRead, ReadQuery, Store};

/// Long enough that no test document expires while a test runs (the
/// conformance data is from March 2026), and below a TTL index's limit.
const LONG_RETENTION: (u64, u64) = (50 * 365 * 86_400, 50 * 365 * 86_400);
const WRITER: &str = "test-writer";
const HOURS: &str = "metrics_by_hour";
const DAYS: &str = "metrics_by_day";
const SERIES: &str = "tally_series";
/// `mongodb.statements_per_batch` on FerretDB on PostgreSQL: see [`config`].
const PG_STATEMENTS_PER_BATCH: usize = 10;

/// The store's settings on `target`. FerretDB gets a minute per command:
/// it takes up to a few hundred milliseconds per update of a day document,
/// more while the rest of the suite runs beside it. On PostgreSQL its
/// `update` holds a connection of its pool per statement until the command
/// ends, so commands there are as short as a daemon's
/// ([`MongoTarget::daemon_env`]): with a thousand statements one command
/// would wait for connections it holds itself.
fn config(target: &MongoTarget, database: &str) -> MongoDbConfig {
    let defaults = MongoDbConfig::default();
    let (timeout, statements_per_batch) = match target.kind {
        TargetKind::FerretDb => (Duration::from_secs(60), defaults.statements_per_batch),
        TargetKind::FerretDbPg => (Duration::from_secs(60), PG_STATEMENTS_PER_BATCH),
        TargetKind::Standin | TargetKind::Uri => {
            (Duration::from_secs(10), defaults.statements_per_batch)
        }
    };
    MongoDbConfig {
        uri: target.uri.clone(),
        database: database.to_string(),
        timeout,
        statements_per_batch,
        ..defaults
    }
}

async fn connect(target: &MongoTarget) -> MongoStore {
    MongoStore::connect(&config(target, &target.database), LONG_RETENTION, WRITER)
        .await
        .unwrap()
}

/// [`config`]: flushes write hour documents, and seals (at the latest on
/// close) the day documents.
fn direct_config(target: &MongoTarget, database: &str) -> MongoDbConfig {
    config(target, database)
}

async fn connect_direct(target: &MongoTarget) -> MongoStore {
    MongoStore::connect(
        &direct_config(target, &target.database),
        LONG_RETENTION,
        WRITER,
    )
    .await
    .unwrap()
}

/// 2026-11-02 10:00 UTC plus `minutes`.
fn at(minutes: i64) -> i64 {
    1_793_613_600 + minutes * MINUTE_S
}

fn series(source: &str, metric: &str, samples: &[(i64, f64)]) -> SeriesMinutes {
    let mut minutes: std::collections::BTreeMap<i64, Slot> = Default::default();
    for &(t, v) in samples {
        minutes
            .entry(t.div_euclid(MINUTE_S))
            .or_default()
            .add_value(v);
    }
    SeriesMinutes {
        catalog: tally::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new(source, metric)),
        kind: SampleKind::Gauge,
        minutes: minutes.into_iter().collect(),
    }
}

fn batch(id: u64, series: &[SeriesMinutes]) -> FlushBatch {
    FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: FlushId(id),
        series: series.to_vec(),
    }
}

async fn read(
    store: &dyn Store,
    source: &str,
    metric: &str,
    tier: Tier,
    resolution: Resolution,
    from: i64,
    to: i64,
) -> Vec<DocRead> {
    store
        .read(&ReadQuery {
            series: SeriesId::new(source, metric),
            tier,
            resolution,
            from,
            to,
        })
        .await
        .unwrap()
}

/// Every non-empty slot of a series at one tier and resolution, over a day
/// around [`at`].
async fn points(store: &dyn Store, source: &str, tier: Tier, res: Resolution) -> Vec<(i64, Slot)> {
    let from = at(0) - 10 * HOUR_S;
    read(store, source, "m", tier, res, from, from + 2 * DAY_S)
        .await
        .into_iter()
        .flat_map(|d| d.slots)
        .collect()
}

fn slot(n: u64, sum: f64, min: f64, max: f64) -> Slot {
    Slot::summary(n, sum, min, max)
}

async fn raw_doc(target: &MongoTarget, coll: &str, id: &str) -> Option<Document> {
    target
        .db()
        .await
        .collection::<Document>(coll)
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
}

/// Dotted paths of every leaf (a slot counts as a leaf) of a document.
fn slot_paths(d: &Document, prefix: &str, out: &mut BTreeSet<String>) {
    for (k, v) in d {
        let p = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Bson::Document(sub) if !sub.is_empty() && !sub.contains_key("n") => {
                slot_paths(sub, &p, out)
            }
            _ => {
                out.insert(p);
            }
        }
    }
}

/// An empty slot's `min` and `max` on this store's server: the
/// infinities, or the largest finite doubles where the server refuses
/// infinities.
fn empty_bounds(store: &MongoStore) -> (f64, f64) {
    if store.missing_features().contains(&Feature::Infinity) {
        (f64::MAX, -f64::MAX)
    } else {
        (f64::INFINITY, f64::NEG_INFINITY)
    }
}

fn assert_empty_slot(v: &Bson, what: &str, (min, max): (f64, f64)) {
    let s = v.as_document().unwrap_or_else(|| panic!("{what}: {v:?}"));
    assert_eq!(s.get("n"), Some(&Bson::Int64(0)), "{what}: {s}");
    assert_eq!(s.get("sum"), Some(&Bson::Double(0.0)), "{what}: {s}");
    assert_eq!(s.get("min"), Some(&Bson::Double(min)), "{what}: {s}");
    assert_eq!(s.get("max"), Some(&Bson::Double(max)), "{what}: {s}");
    // Every slot but an hour document's running one has the empty last
    // sample.
    let has_last = what != "hour total";
    if has_last {
        let last = s
            .get_document("last")
            .unwrap_or_else(|_| panic!("{what}: {s}"));
        assert_eq!(last.get("t"), Some(&Bson::Int64(i64::MIN)), "{what}: {s}");
        assert_eq!(last.get("v"), Some(&Bson::Double(0.0)), "{what}: {s}");
    }
    assert_eq!(s.len(), 4 + usize::from(has_last), "{what}: {s}");
}

// ---------------------------------------------------------------------------

/// The fold property of `fold_property`, on each MongoDB target. Fewer
/// cases: each runs dozens of flushes through the server, and on FerretDB,
/// whose SQLite backend takes a few hundred milliseconds per update of a
/// day document, a case takes about 30 s.
fn store_equals_reference(kind: TargetKind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some(target) = rt.block_on(mongo_target_of(kind)) else {
        return;
    };
    let cases = AtomicUsize::new(0);
    let started = Instant::now();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: if kind.is_ferretdb() { 3 } else { 8 },
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&conformance::case(), |case| {
        // A fresh database per case: the property starts from an empty store.
        let n = cases.fetch_add(1, Ordering::Relaxed);
        let database = format!("{}_case{n}", target.database);
        rt.block_on(async {
            let store = MongoStore::connect(&config(&target, &database), LONG_RETENTION, WRITER)
                .await
                .unwrap();
            let client = store.client().clone();
            let store: Arc<dyn Store> = Arc::new(store);
            conformance::check(store, &case).await;
            if target.is_real_server() {
                let _ = client.database(&database).drop().await;
            }
        });
        Ok(())
    });
    println!(
        "conformance on {}: {} cases (incl. shrinking) in {:.1?}",
        kind.name(),
        cases.load(Ordering::Relaxed),
        started.elapsed()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

mod mongodb_store_equals_reference {
    use tally_testkit::mongo::TargetKind;

    #[test]
    fn mongodb_standin() {
        super::store_equals_reference(TargetKind::Standin);
    }

    #[test]
    fn mongodb_ferretdb() {
        super::store_equals_reference(TargetKind::FerretDb);
    }

    #[test]
    fn mongodb_ferretdb_pg() {
        super::store_equals_reference(TargetKind::FerretDbPg);
    }

    #[test]
    fn mongodb_uri() {
        super::store_equals_reference(TargetKind::Uri);
    }
}

per_mongo_target!(catalog_contract);

/// The series catalog's contract shared with the embedded store.
async fn catalog_contract(target: MongoTarget) {
    let store = connect(&target).await;
    catalog_conformance::check(Arc::new(store)).await;
    target.cleanup().await;
}

/// The TTL of the `{t: 1}` index; `None` without one (or without the
/// collection).
async fn ttl_of(target: &MongoTarget, coll: &str) -> Option<i64> {
    ttl_of_field(target, coll, "t").await
}

/// The TTL of the `{<field>: 1}` index.
async fn ttl_of_field(target: &MongoTarget, coll: &str, field: &str) -> Option<i64> {
    index_ttl(target, coll, field).await.flatten()
}

/// The `{<field>: 1}` index, if there is one, with its TTL in seconds.
async fn index_ttl(target: &MongoTarget, coll: &str, field: &str) -> Option<Option<i64>> {
    let mut cursor = target
        .db()
        .await
        .collection::<Document>(coll)
        .list_indexes()
        .await
        .ok()?;
    while let Some(ix) = cursor.try_next().await.unwrap() {
        if ix.keys == doc! { field: 1 } {
            return Some(
                ix.options
                    .and_then(|o| o.expire_after)
                    .map(|d| d.as_secs() as i64),
            );
        }
    }
    None
}

/// The index on `field` expires after `ttl` seconds, or, where the server
/// has no TTL indexes, is a plain index (for the retention sweep).
async fn assert_retention_index(
    target: &MongoTarget,
    store: &MongoStore,
    coll: &str,
    field: &str,
    ttl: i64,
) {
    let found = index_ttl(target, coll, field).await;
    if store.missing_features().contains(&Feature::TtlIndex) {
        assert_eq!(found, Some(None), "{coll}: a plain index on {field}");
    } else {
        assert_eq!(found, Some(Some(ttl)), "{coll}: the TTL index on {field}");
    }
}
