//! The MongoDB store end to end, through the real `mongodb` driver: against
//! the stand-in (`tests/mongo-standin`) by default, or against the real
//! server in `MONGODB_URI` (each test in a fresh database; the
//! fault-injection tests then print a note and return early).
//!
//! * The same fold property as the embedded store (`support::conformance`).
//! * Pre-allocated documents: every slot, the right empty values, and
//!   updates that never add a slot.
//! * Exactly once across ambiguous failures (the reply lost after the write).
//! * MongoDB down at start and in the middle; TTL indexes; statement counts.
//! * The series catalog: the contract shared with the embedded store
//!   (`support::catalog_conformance`), its documents, commands and TTL index.

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use support::catalog_conformance;
use support::conformance;
use support::standin::{mongo_target, MongoTarget};
use tally::config::MongoDbConfig;
use tally::model::{
    DocKey, FlushBatch, FlushId, Resolution, SampleKind, SeriesId, SeriesMinutes, SeriesUpdate,
    Slot, Tier, DAY_S, HOUR_S, MINUTE_S,
};
use tally::store::mongodb::MongoStore;
use tally::store::{CatalogEntry, DocRead, ReadQuery, Store, StoreError};

/// Long enough that no test document expires while a test runs (the
/// conformance data is from March 2026), and below a TTL index's limit.
const LONG_RETENTION: (u64, u64) = (50 * 365 * 86_400, 50 * 365 * 86_400);
const WRITER: &str = "test-writer";
const HOURS: &str = "metrics_by_hour";
const DAYS: &str = "metrics_by_day";
const SERIES: &str = "tally_series";

fn config(target: &MongoTarget, database: &str) -> MongoDbConfig {
    MongoDbConfig {
        uri: target.uri.clone(),
        database: database.to_string(),
        timeout: Duration::from_secs(10),
        ..MongoDbConfig::default()
    }
}

async fn connect(target: &MongoTarget) -> MongoStore {
    MongoStore::connect(&config(target, &target.database), LONG_RETENTION, WRITER)
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
        minutes.entry(t.div_euclid(MINUTE_S)).or_default().add(v);
    }
    SeriesMinutes {
        series: Arc::new(SeriesId::new(source, metric)),
        kind: SampleKind::Gauge,
        minutes: minutes.into_iter().collect(),
    }
}

fn batch(id: u64, series: &[SeriesMinutes]) -> FlushBatch {
    FlushBatch {
        id: FlushId(id),
        series: series.iter().map(SeriesUpdate::from_minutes).collect(),
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
    Slot { n, sum, min, max }
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

fn assert_empty_slot(v: &Bson, what: &str) {
    let s = v.as_document().unwrap_or_else(|| panic!("{what}: {v:?}"));
    assert_eq!(s.get("n"), Some(&Bson::Int64(0)), "{what}: {s}");
    assert_eq!(s.get("sum"), Some(&Bson::Double(0.0)), "{what}: {s}");
    assert_eq!(
        s.get("min"),
        Some(&Bson::Double(f64::INFINITY)),
        "{what}: {s}"
    );
    assert_eq!(
        s.get("max"),
        Some(&Bson::Double(f64::NEG_INFINITY)),
        "{what}: {s}"
    );
    assert_eq!(s.len(), 4, "{what}: {s}");
}

/// The TTL of the `{t: 1}` index; `None` without one (or without the
/// collection).
async fn ttl_of(target: &MongoTarget, coll: &str) -> Option<i64> {
    ttl_of_field(target, coll, "t").await
}

/// The TTL of the `{<field>: 1}` index.
async fn ttl_of_field(target: &MongoTarget, coll: &str, field: &str) -> Option<i64> {
    let mut cursor = target
        .db()
        .await
        .collection::<Document>(coll)
        .list_indexes()
        .await
        .ok()?;
    while let Some(ix) = cursor.try_next().await.unwrap() {
        if ix.keys == doc! { field: 1 } {
            return ix
                .options
                .and_then(|o| o.expire_after)
                .map(|d| d.as_secs() as i64);
        }
    }
    None
}

/// Retries `apply` until it lands (after the stand-in comes back, the
/// driver needs a moment to rediscover it).
async fn apply_eventually(store: &MongoStore, b: &FlushBatch) -> tally::store::ApplyStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.apply(b).await {
            Ok(stats) => return stats,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => panic!("apply did not recover: {e:?}"),
        }
    }
}

/// Applies `b` with the stand-in dropping the reply, so the outcome is
/// unknown to the store, then retries until it lands.
async fn lose_reply_then_retry(
    store: &MongoStore,
    standin: &support::standin::Standin,
    b: &FlushBatch,
) -> tally::store::ApplyStats {
    standin.drop_after_apply(1).await;
    let err = store.apply(b).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Ambiguous(_) | StoreError::Unavailable(_)),
        "{err:?}"
    );
    apply_eventually(store, b).await
}

// ---------------------------------------------------------------------------

/// The fold property of `fold_property.rs`, on MongoDB. Fewer cases: each
/// runs dozens of flushes through the stand-in.
#[test]
fn mongodb_store_equals_reference() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let target = rt.block_on(mongo_target());
    let cases = AtomicUsize::new(0);
    let started = Instant::now();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 8,
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
        "conformance: {} cases (incl. shrinking) in {:.1?}",
        cases.load(Ordering::Relaxed),
        started.elapsed()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preallocated_documents_have_every_slot_and_updates_add_none() {
    let target = mongo_target().await;
    let store = connect(&target).await;
    let hour = at(0);
    let day = hour - 10 * HOUR_S;
    let s = SeriesId::new("db-01", "m");
    let keys = vec![
        DocKey {
            series: s.clone(),
            tier: Tier::Hour,
            period_start: hour,
        },
        DocKey {
            series: s.clone(),
            tier: Tier::Day,
            period_start: day,
        },
    ];
    let stats = store.preallocate(&keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (2, 0));

    let h = raw_doc(&target, HOURS, "db-01|m|2026110210").await.unwrap();
    assert_eq!(h.get_str("s").unwrap(), "db-01");
    assert_eq!(h.get_str("m").unwrap(), "m");
    assert_eq!(h.get_datetime("t").unwrap().timestamp_millis(), hour * 1000);
    assert!(h.get_document("w").unwrap().is_empty());
    assert!(!h.contains_key("k"), "no kind before the first write");
    assert_empty_slot(h.get("total").unwrap(), "hour total");
    let values = h.get_document("values").unwrap();
    let keys_found: Vec<&str> = values.keys().map(String::as_str).collect();
    let expected: Vec<String> = (0..60).map(|m| m.to_string()).collect();
    assert_eq!(
        keys_found,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for (m, v) in values {
        assert_empty_slot(v, &format!("values.{m}"));
    }

    let d = raw_doc(&target, DAYS, "db-01|m|20261102").await.unwrap();
    assert_eq!(d.get_datetime("t").unwrap().timestamp_millis(), day * 1000);
    assert_empty_slot(d.get("total").unwrap(), "day total");
    let hours = d.get_document("values").unwrap();
    assert_eq!(hours.len(), 24);
    for (hk, entry) in hours {
        let entry = entry.as_document().unwrap();
        assert_eq!(entry.len(), 61, "values.{hk}");
        assert_empty_slot(entry.get("total").unwrap(), &format!("values.{hk}.total"));
        for m in 0..60 {
            assert_empty_slot(
                entry.get(m.to_string()).unwrap(),
                &format!("values.{hk}.{m}"),
            );
        }
    }
    let mut hour_paths = BTreeSet::new();
    slot_paths(&h, "", &mut hour_paths);
    let mut day_paths = BTreeSet::new();
    slot_paths(&d, "", &mut day_paths);
    assert_eq!(hour_paths.len(), 6 + 60);
    assert_eq!(day_paths.len(), 6 + 24 * 61);

    // Updates fill slots that are there: the only new paths are the
    // writer's watermark and the kind.
    let b = batch(
        7,
        &[series(
            "db-01",
            "m",
            &[(hour + 5, 2.0), (hour + 65, -3.0), (hour + 3599, 8.0)],
        )],
    );
    let stats = store.apply(&b).await.unwrap();
    assert_eq!((stats.documents_written, stats.documents_skipped), (2, 0));
    assert_eq!(
        store.stats().first_sighting_documents,
        0,
        "already pre-allocated"
    );
    for (coll, id, before) in [
        (HOURS, "db-01|m|2026110210", &hour_paths),
        (DAYS, "db-01|m|20261102", &day_paths),
    ] {
        let after = raw_doc(&target, coll, id).await.unwrap();
        let mut paths = BTreeSet::new();
        slot_paths(&after, "", &mut paths);
        let added: Vec<_> = paths.difference(before).cloned().collect();
        let removed: Vec<_> = before.difference(&paths).cloned().collect();
        assert_eq!(
            added,
            vec!["k".to_string(), format!("w.{WRITER}")],
            "{coll}"
        );
        assert_eq!(
            removed,
            vec!["w".to_string()],
            "{coll}: w is no longer empty"
        );
        assert_eq!(after.get_str("k").unwrap(), "gauge");
        assert_eq!(
            after.get_document("w").unwrap().get(WRITER),
            Some(&Bson::Int64(7))
        );
    }
    let after = raw_doc(&target, HOURS, "db-01|m|2026110210").await.unwrap();
    let m1 = after
        .get_document("values")
        .unwrap()
        .get_document("1")
        .unwrap();
    assert_eq!(m1.get("n"), Some(&Bson::Int64(1)));
    assert_eq!(m1.get("min"), Some(&Bson::Double(-3.0)));
    let want_minutes = vec![
        (hour, Slot::of(2.0)),
        (hour + 60, Slot::of(-3.0)),
        (hour + 3540, Slot::of(8.0)),
    ];
    assert_eq!(
        points(&store, "db-01", Tier::Hour, Resolution::Minute).await,
        want_minutes
    );
    assert_eq!(
        points(&store, "db-01", Tier::Day, Resolution::Minute).await,
        want_minutes
    );
    let total = slot(3, 7.0, -3.0, 8.0);
    assert_eq!(
        points(&store, "db-01", Tier::Hour, Resolution::Hour).await,
        vec![(hour, total)]
    );
    assert_eq!(
        points(&store, "db-01", Tier::Day, Resolution::Hour).await,
        vec![(hour, total)]
    );
    assert_eq!(
        points(&store, "db-01", Tier::Day, Resolution::Day).await,
        vec![(day, total)]
    );

    // Pre-allocating again changes nothing, from this store or a new one
    // that does not remember the documents.
    let before = raw_doc(&target, DAYS, "db-01|m|20261102").await.unwrap();
    let stats = store.preallocate(&keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (0, 2));
    let fresh = connect(&target).await;
    let stats = fresh.preallocate(&keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (0, 2));
    assert_eq!(fresh.stats().insert_statements, 0, "looked up, not re-sent");
    assert_eq!(
        raw_doc(&target, DAYS, "db-01|m|20261102").await.unwrap(),
        before
    );
    assert_eq!(
        points(&fresh, "db-01", Tier::Day, Resolution::Minute).await,
        want_minutes
    );

    // A document that is not there (here: deleted behind the store's back
    // after it was known) is created by the fallback upsert with only the
    // written slots, and reads the same.
    let coll = target.db().await.collection::<Document>(HOURS);
    coll.delete_one(doc! { "_id": "db-01|m|2026110210" })
        .await
        .unwrap();
    let b = batch(8, &[series("db-01", "m", &[(hour + 125, 4.0)])]);
    store.apply(&b).await.unwrap();
    assert_eq!(store.stats().fallback_upserts, 1);
    let sparse = raw_doc(&target, HOURS, "db-01|m|2026110210").await.unwrap();
    assert_eq!(sparse.get_document("values").unwrap().len(), 1, "{sparse}");
    assert_eq!(sparse.get_str("s").unwrap(), "db-01");
    assert_eq!(
        points(&store, "db-01", Tier::Hour, Resolution::Minute).await,
        vec![(hour + 120, Slot::of(4.0))]
    );
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_failures_count_once() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let store = connect(&target).await;
    // Warm-up: indexes made, flush ids reserved, so the next writes are the
    // data's own.
    store
        .apply(&batch(1, &[series("warm", "m", &[(at(0), 1.0)])]))
        .await
        .unwrap();

    // 1. Lost reply of the first-sighting insert of new documents.
    let a = batch(
        2,
        &[
            series("db-01", "m", &[(at(1), 1.0), (at(2), 2.0)]),
            series("db-02", "m", &[(at(1), 10.0)]),
        ],
    );
    let stats = lose_reply_then_retry(&store, standin, &a).await;
    assert_eq!(stats.documents_written, 4);
    assert_eq!(store.stats().preallocated_documents, 0);

    // 2. Lost reply of an update: it was applied, the retry must skip it.
    let b = batch(
        3,
        &[
            series("db-01", "m", &[(at(1), 4.0), (at(3), 8.0)]),
            series("db-02", "m", &[(at(2), 20.0)]),
        ],
    );
    let stats = lose_reply_then_retry(&store, standin, &b).await;
    assert!(stats.documents_skipped >= 1, "{stats:?}");
    assert_eq!(stats.documents_written + stats.documents_skipped, 4);

    // 3. A refused write (not applied) is retryable too.
    let c = batch(4, &[series("db-01", "m", &[(at(3), 16.0)])]);
    standin.fail_next(1, 10107);
    let err = store.apply(&c).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    // The other collection's command may have gone through meanwhile.
    let stats = apply_eventually(&store, &c).await;
    assert_eq!(stats.documents_written + stats.documents_skipped, 2);

    // 4. A replay of everything is skipped whole.
    for b in [&a, &b, &c] {
        let stats = store.apply(b).await.unwrap();
        assert_eq!(stats.documents_written, 0, "{stats:?}");
    }

    let want1 = vec![
        (at(1), slot(2, 5.0, 1.0, 4.0)),
        (at(2), Slot::of(2.0)),
        (at(3), slot(2, 24.0, 8.0, 16.0)),
    ];
    let want2 = vec![(at(1), Slot::of(10.0)), (at(2), Slot::of(20.0))];
    for tier in [Tier::Hour, Tier::Day] {
        assert_eq!(
            points(&store, "db-01", tier, Resolution::Minute).await,
            want1
        );
        assert_eq!(
            points(&store, "db-02", tier, Resolution::Minute).await,
            want2
        );
    }
    assert_eq!(
        points(&store, "db-01", Tier::Day, Resolution::Day).await,
        vec![(at(0) - 10 * HOUR_S, slot(5, 31.0, 1.0, 16.0))]
    );
    let docs = read(
        &store,
        "db-01",
        "m",
        Tier::Hour,
        Resolution::Hour,
        at(0),
        at(60),
    )
    .await;
    assert_eq!(docs[0].watermark, 4);
    assert_eq!(docs[0].kind, Some(SampleKind::Gauge));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_down_fails_retryably_and_recovers() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };

    // Down at start: the store is created all the same.
    standin.set_down(true);
    let store = connect(&target).await;
    assert_eq!(
        store.last_flush_id().await.unwrap(),
        0,
        "unknown while down"
    );
    let b1 = batch(1, &[series("db-01", "m", &[(at(0), 1.0)])]);
    let started = Instant::now();
    let err = store.apply(&b1).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(store.health().await.is_err());

    standin.set_down(false);
    assert!(ttl_of(&target, HOURS).await.is_none());
    apply_eventually(&store, &b1).await;
    store.health().await.unwrap();
    // The first apply that reached the server made the indexes.
    assert_eq!(ttl_of(&target, HOURS).await, Some(LONG_RETENTION.0 as i64));
    assert_eq!(ttl_of(&target, DAYS).await, Some(LONG_RETENTION.1 as i64));

    // Down in the middle.
    standin.set_down(true);
    let b2 = batch(2, &[series("db-01", "m", &[(at(1), 2.0)])]);
    let err = store.apply(&b2).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let err = store.health().await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let q = ReadQuery {
        series: SeriesId::new("db-01", "m"),
        tier: Tier::Hour,
        resolution: Resolution::Minute,
        from: at(0),
        to: at(60),
    };
    assert!(store.read(&q).await.unwrap_err().is_retryable());
    standin.set_down(false);
    apply_eventually(&store, &b2).await;
    store.health().await.unwrap();
    assert_eq!(
        points(&store, "db-01", Tier::Hour, Resolution::Minute).await,
        vec![(at(0), Slot::of(1.0)), (at(1), Slot::of(2.0))]
    );
    // A restarted daemon continues above every id this writer used.
    let again = connect(&target).await;
    assert!(again.last_flush_id().await.unwrap() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_indexes_follow_the_configured_retention() {
    let target = mongo_target().await;
    let cfg = config(&target, &target.database);
    let store = MongoStore::connect(&cfg, (3 * 3600, 40 * 86_400), WRITER)
        .await
        .unwrap();
    let now = chrono::Utc::now().timestamp();
    let old = (now - 5 * HOUR_S).div_euclid(HOUR_S) * HOUR_S;
    let recent = now.div_euclid(HOUR_S) * HOUR_S;
    store
        .apply(&batch(
            1,
            &[series("db-01", "m", &[(old, 1.0), (recent, 2.0)])],
        ))
        .await
        .unwrap();
    assert_eq!(ttl_of(&target, HOURS).await, Some(3 * 3600));
    assert_eq!(ttl_of(&target, DAYS).await, Some(40 * 86_400));

    // A daemon restarted with another retention changes the index in place.
    let store = MongoStore::connect(&cfg, (2 * 3600, 400 * 86_400), WRITER)
        .await
        .unwrap();
    let q = ReadQuery {
        series: SeriesId::new("db-01", "m"),
        tier: Tier::Hour,
        resolution: Resolution::Minute,
        from: old,
        to: recent + HOUR_S,
    };
    assert_eq!(store.read(&q).await.unwrap().len(), 2);
    assert_eq!(ttl_of(&target, HOURS).await, Some(2 * 3600));
    assert_eq!(ttl_of(&target, DAYS).await, Some(400 * 86_400));
    let names: Vec<String> = target
        .db()
        .await
        .collection::<Document>(HOURS)
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(names.len(), 2, "{names:?}: _id and the TTL index only");

    // The hour document of five hours ago is past its retention.
    if let Some(standin) = target.standin() {
        let deleted = standin.ttl_pass();
        assert!(deleted >= 1, "{deleted}");
        let docs = store.read(&q).await.unwrap();
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![recent]
        );
    }
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_follow_active_series_not_samples() {
    const SERIES: usize = 2_500;
    const PER_BATCH: usize = 500;
    let target = mongo_target().await;
    let mut cfg = config(&target, &target.database);
    cfg.statements_per_batch = PER_BATCH;
    cfg.timeout = Duration::from_secs(120);
    let store = MongoStore::connect(&cfg, LONG_RETENTION, WRITER)
        .await
        .unwrap();
    let make = |id: u64, minute: i64| {
        let all: Vec<SeriesMinutes> = (0..SERIES)
            .map(|i| {
                // Several samples per series: the statement count must not
                // follow them.
                let t = at(minute);
                series(
                    &format!("db-{:04}", i / 10),
                    &format!("metric_{}", i % 10),
                    &[(t, i as f64), (t + 20, 1.0), (t + 40, 2.0)],
                )
            })
            .collect();
        batch(id, &all)
    };

    let started = Instant::now();
    let before = store.stats();
    let stats = store.apply(&make(1, 0)).await.unwrap();
    let first = store.stats();
    println!(
        "first flush, {SERIES} series into fresh documents: {:.1?}",
        started.elapsed()
    );
    assert_eq!(stats.documents_written, 2 * SERIES);
    let updates = first.update_statements - before.update_statements;
    assert_eq!(
        updates,
        2 * SERIES as u64,
        "one upsert per hour and day document"
    );
    assert_eq!(
        first.update_round_trips - before.update_round_trips,
        (2 * SERIES).div_ceil(PER_BATCH) as u64
    );
    assert_eq!(first.first_sighting_documents, 2 * SERIES as u64);
    assert_eq!(first.insert_statements, 2 * SERIES as u64);
    // Hour documents go 500 to a command; day documents (~86 KB) are cut
    // by the 12 MiB bound.
    assert!(
        first.insert_round_trips >= (SERIES / PER_BATCH) as u64 + 2,
        "{first:?}"
    );
    assert_eq!(
        first.lookup_round_trips, 2,
        "one existence look-up per tier"
    );
    assert_eq!(first.fallback_upserts, 0, "every update found its document");

    let started = Instant::now();
    let stats = store.apply(&make(2, 1)).await.unwrap();
    let second = store.stats();
    println!(
        "second flush, {SERIES} series into known documents: {:.1?}",
        started.elapsed()
    );
    assert_eq!(stats.documents_written, 2 * SERIES);
    assert_eq!(
        second.update_statements - first.update_statements,
        2 * SERIES as u64
    );
    assert_eq!(
        second.update_round_trips - first.update_round_trips,
        (2 * SERIES).div_ceil(PER_BATCH) as u64
    );
    assert_eq!(
        second.insert_statements, first.insert_statements,
        "no inserts"
    );
    assert_eq!(
        second.lookup_round_trips, first.lookup_round_trips,
        "no look-ups"
    );
    assert_eq!(stats.statements, 2 * SERIES);
    assert_eq!(stats.round_trips, (2 * SERIES).div_ceil(PER_BATCH));
    println!("stats: {second:?}");

    let docs = read(
        &store,
        "db-0249",
        "metric_9",
        Tier::Hour,
        Resolution::Minute,
        at(0),
        at(60),
    )
    .await;
    assert_eq!(
        docs[0].slots,
        vec![
            (at(0), slot(3, 2499.0 + 3.0, 1.0, 2499.0)),
            (at(1), slot(3, 2499.0 + 3.0, 1.0, 2499.0)),
        ]
    );
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_documents_read_as_corrupt_not_a_panic() {
    let target = mongo_target().await;
    let store = connect(&target).await;
    let hour = at(0);
    store
        .apply(&batch(1, &[series("db-01", "m", &[(hour, 1.0)])]))
        .await
        .unwrap();
    let coll = target.db().await.collection::<Document>(HOURS);
    coll.update_one(
        doc! { "_id": "db-01|m|2026110210" },
        doc! { "$set": { "values.0.n": "many" } },
    )
    .await
    .unwrap();
    let q = ReadQuery {
        series: SeriesId::new("db-01", "m"),
        tier: Tier::Hour,
        resolution: Resolution::Minute,
        from: hour,
        to: hour + HOUR_S,
    };
    match store.read(&q).await {
        Err(StoreError::Corrupt { doc, reason }) => {
            assert!(doc.contains("db-01|m|2026110210"), "{doc}");
            assert!(reason.contains("values.0.n"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The hourly read does not look at minute slots.
    let mut hourly = q.clone();
    hourly.resolution = Resolution::Hour;
    assert_eq!(
        store.read(&hourly).await.unwrap()[0].slots,
        vec![(hour, Slot::of(1.0))]
    );

    // Reads never reach into a neighbouring series: `db-01/m` is a prefix
    // of neither `db-01/m2` nor `db-01.x/m` in the id space.
    store
        .apply(&batch(
            2,
            &[
                series("db-01", "m2", &[(hour, 5.0)]),
                series("db-01.x", "m", &[(hour, 6.0)]),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(store.read(&hourly).await.unwrap().len(), 1);

    // Requests the store refuses.
    let mut daily = q.clone();
    daily.resolution = Resolution::Day;
    assert!(matches!(
        store.read(&daily).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store
            .apply(&batch(0, &[series("db-01", "m", &[(hour, 1.0)])]))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store
            .apply(&batch(9, &[series("db|01", "m", &[(hour, 1.0)])]))
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        MongoStore::connect(&config(&target, &target.database), LONG_RETENTION, "a.b").await,
        Err(StoreError::Invalid(_))
    ));
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_conformance() {
    let target = mongo_target().await;
    let store = connect(&target).await;
    catalog_conformance::check(Arc::new(store)).await;
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_documents_commands_and_ttl_index() {
    const ENTRIES: usize = 250;
    const PER_BATCH: usize = 100;
    let target = mongo_target().await;
    let mut cfg = config(&target, &target.database);
    cfg.statements_per_batch = PER_BATCH;
    let store = MongoStore::connect(&cfg, (3 * 3600, 40 * 86_400), WRITER)
        .await
        .unwrap();
    let now = chrono::Utc::now().timestamp().div_euclid(MINUTE_S) * MINUTE_S;
    let entries: Vec<CatalogEntry> = (0..ENTRIES)
        .map(|i| CatalogEntry {
            series: SeriesId::new(&format!("db-{:03}", i / 10), &format!("m{}", i % 10)),
            kind: SampleKind::DeltaCounter,
            first_seen: now - 60 * DAY_S,
            // The first one was last seen past the day retention.
            last_seen: if i == 0 { now - 50 * DAY_S } else { now },
        })
        .collect();

    // One statement per series, in commands of at most PER_BATCH.
    let before = store.stats();
    store.catalog_upsert(&entries).await.unwrap();
    let after = store.stats();
    assert_eq!(
        after.catalog_statements - before.catalog_statements,
        ENTRIES as u64
    );
    assert_eq!(
        after.catalog_round_trips - before.catalog_round_trips,
        ENTRIES.div_ceil(PER_BATCH) as u64
    );
    assert_eq!(after.update_statements, 0, "no document writes");

    // The document.
    let d = raw_doc(&target, SERIES, "db-001|m2").await.unwrap();
    assert_eq!(d.get_str("source").unwrap(), "db-001");
    assert_eq!(d.get_str("metric").unwrap(), "m2");
    assert_eq!(d.get_str("kind").unwrap(), "delta_counter");
    assert_eq!(
        d.get_datetime("first_seen").unwrap().timestamp_millis(),
        (now - 60 * DAY_S) * 1000
    );
    assert_eq!(
        d.get_datetime("last_seen").unwrap().timestamp_millis(),
        now * 1000
    );
    assert_eq!(d.len(), 6, "{d}");
    // $min / $max on dates, $set of the kind, $setOnInsert left alone.
    store
        .catalog_upsert(&[CatalogEntry {
            series: SeriesId::new("db-001", "m2"),
            kind: SampleKind::Gauge,
            first_seen: now - 70 * DAY_S,
            last_seen: now - DAY_S,
        }])
        .await
        .unwrap();
    let d = raw_doc(&target, SERIES, "db-001|m2").await.unwrap();
    assert_eq!(d.get_str("kind").unwrap(), "gauge");
    assert_eq!(
        d.get_datetime("first_seen").unwrap().timestamp_millis(),
        (now - 70 * DAY_S) * 1000
    );
    assert_eq!(
        d.get_datetime("last_seen").unwrap().timestamp_millis(),
        now * 1000
    );
    assert_eq!(d.get_str("source").unwrap(), "db-001");

    // The TTL index: on last_seen, with the day retention.
    assert_eq!(
        ttl_of_field(&target, SERIES, "last_seen").await,
        Some(40 * 86_400)
    );
    // A daemon restarted with another retention changes it in place.
    let store = MongoStore::connect(&cfg, (3 * 3600, 30 * 86_400), WRITER)
        .await
        .unwrap();
    let mut q = catalog_conformance::query();
    q.limit = 5;
    assert_eq!(store.catalog_list(&q).await.unwrap().len(), 5);
    assert_eq!(
        ttl_of_field(&target, SERIES, "last_seen").await,
        Some(30 * 86_400)
    );
    let names: Vec<String> = target
        .db()
        .await
        .collection::<Document>(SERIES)
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(names.len(), 2, "{names:?}: _id and the TTL index only");

    let Some(standin) = target.standin() else {
        target.cleanup().await;
        return;
    };
    // The entry last seen 50 days ago is past the retention.
    standin.ttl_pass();
    q.limit = 1000;
    let left = store.catalog_list(&q).await.unwrap();
    assert_eq!(left.len(), ENTRIES - 1);
    assert_eq!(left[0].series, SeriesId::new("db-000", "m1"));

    // A document that is not what Tally writes is Corrupt, not a panic.
    target
        .db()
        .await
        .collection::<Document>(SERIES)
        .update_one(doc! { "_id": "db-003|m3" }, doc! { "$set": { "kind": 5 } })
        .await
        .unwrap();
    match store.catalog_list(&q).await {
        Err(StoreError::Corrupt { doc, reason }) => {
            assert!(doc.contains("db-003|m3"), "{doc}");
            assert!(reason.contains("kind"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Listings that stop before it do not see it.
    q.limit = 10;
    assert_eq!(store.catalog_list(&q).await.unwrap().len(), 10);

    // MongoDB down: listings fail retryably (upserts go through the same
    // command path as every other write).
    standin.set_down(true);
    assert!(store.catalog_list(&q).await.unwrap_err().is_retryable());
    standin.set_down(false);
}
