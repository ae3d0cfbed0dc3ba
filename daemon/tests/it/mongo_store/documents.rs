//! What the MongoDB store writes: pre-allocated documents with every slot
//! and the right empty values, updates that never add a slot, statements
//! that follow active series rather than samples, and documents it cannot
//! read reported as corrupt rather than a panic.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mongodb::bson::{doc, Bson, Document};
use tally::model::{DocKey, FlushBatch, Resolution, SeriesId, SeriesMinutes, Slot, Tier, HOUR_S};
use tally::store::mongodb::{day_doc_bson_size, MongoStore};
use tally::store::{ReadQuery, Store, StoreError};
use tally_testkit::mongo::MongoTarget;

use super::{
    assert_empty_slot, at, batch, config, connect, connect_direct, direct_config, empty_bounds,
    points, raw_doc, read, series, slot, slot_paths, DAYS, HOURS, LONG_RETENTION, WRITER,
};

/// The id of the hour document of `db-01/m` at `at(0)`.
const HOUR_DOC: &str = "db-01|m|2026110210";
/// The id of the day document of `db-01/m` at `at(0)`.
const DAY_DOC: &str = "db-01|m|20261102";

per_mongo_target!(
    preallocated_documents_have_every_slot_and_updates_add_none,
    statements_follow_active_series_not_samples,
    preallocation_larger_than_a_command_lands_whole,
    bad_documents_read_as_corrupt_not_a_panic
);

async fn preallocated_documents_have_every_slot_and_updates_add_none(target: MongoTarget) {
    let store = connect_direct(&target).await;
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

    let bounds = empty_bounds(&store);
    let preallocated =
        check_preallocated_documents_have_every_slot(&target, hour, day, bounds).await;
    check_update_adds_only_watermark_and_kind(&store, &target, hour, &preallocated).await;
    let want_minutes = check_updated_slots_read_back(&store, &target, hour, day).await;
    check_preallocating_again_changes_nothing(&store, &target, &keys, &want_minutes).await;
    check_missing_document_is_upserted_with_written_slots_only(&store, &target, hour).await;
    target.cleanup().await;
}

/// Slot paths of a freshly pre-allocated hour and day document.
struct PreallocatedPaths {
    hour: BTreeSet<String>,
    day: BTreeSet<String>,
}

/// The pre-allocated hour document has its series, its start, no writer
/// and no kind, and 60 empty minute slots plus an empty total; the day
/// document 24 hours of the same plus an empty total.
async fn check_preallocated_documents_have_every_slot(
    target: &MongoTarget,
    hour: i64,
    day: i64,
    bounds: (f64, f64),
) -> PreallocatedPaths {
    let h = raw_doc(target, HOURS, HOUR_DOC).await.unwrap();
    assert_eq!(h.get_str("s").unwrap(), "db-01");
    assert_eq!(h.get_str("m").unwrap(), "m");
    assert_eq!(h.get_datetime("t").unwrap().timestamp_millis(), hour * 1000);
    assert!(h.get_document("w").unwrap().is_empty());
    assert!(!h.contains_key("k"), "no kind before the first write");
    assert_empty_slot(h.get("total").unwrap(), "hour total", bounds);
    let values = h.get_document("values").unwrap();
    let keys_found: Vec<&str> = values.keys().map(String::as_str).collect();
    let expected: Vec<String> = (0..60).map(|m| m.to_string()).collect();
    assert_eq!(
        keys_found,
        expected.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for (m, v) in values {
        assert_empty_slot(v, &format!("values.{m}"), bounds);
    }

    let d = raw_doc(target, DAYS, DAY_DOC).await.unwrap();
    assert_eq!(d.get_datetime("t").unwrap().timestamp_millis(), day * 1000);
    assert_empty_slot(d.get("total").unwrap(), "day total", bounds);
    let hours = d.get_document("values").unwrap();
    assert_eq!(hours.len(), 24);
    for (hk, entry) in hours {
        let entry = entry.as_document().unwrap();
        assert_eq!(entry.len(), 61, "values.{hk}");
        assert_empty_slot(
            entry.get("total").unwrap(),
            &format!("values.{hk}.total"),
            bounds,
        );
        for m in 0..60 {
            assert_empty_slot(
                entry.get(m.to_string()).unwrap(),
                &format!("values.{hk}.{m}"),
                bounds,
            );
        }
    }
    let mut hour_paths = BTreeSet::new();
    slot_paths(&h, "", &mut hour_paths);
    let mut day_paths = BTreeSet::new();
    slot_paths(&d, "", &mut day_paths);
    assert_eq!(hour_paths.len(), 6 + 60);
    assert_eq!(day_paths.len(), 6 + 24 * 61);
    PreallocatedPaths {
        hour: hour_paths,
        day: day_paths,
    }
}

/// Updates fill slots that are there: the only new paths are the writer's
/// watermark and the kind in the hour document, and the kind in the day
/// document, which the close seals.
async fn check_update_adds_only_watermark_and_kind(
    store: &MongoStore,
    target: &MongoTarget,
    hour: i64,
    preallocated: &PreallocatedPaths,
) {
    let b = batch(
        7,
        &[series(
            "db-01",
            "m",
            &[(hour + 5, 2.0), (hour + 65, -3.0), (hour + 3599, 8.0)],
        )],
    );
    let stats = store.apply(&b).await.unwrap();
    assert_eq!((stats.documents_written, stats.documents_skipped), (1, 0));
    assert_eq!(
        store.stats().first_sighting_documents,
        0,
        "already pre-allocated"
    );
    store.close().await.unwrap();
    let watermark = format!("w.{WRITER}");
    for (coll, id, before, want_added, want_removed) in [
        (
            HOURS,
            HOUR_DOC,
            &preallocated.hour,
            vec!["k", watermark.as_str()],
            vec!["w"],
        ),
        (DAYS, DAY_DOC, &preallocated.day, vec!["k"], vec![]),
    ] {
        let after = raw_doc(target, coll, id).await.unwrap();
        let mut paths = BTreeSet::new();
        slot_paths(&after, "", &mut paths);
        let added: Vec<_> = paths.difference(before).cloned().collect();
        let removed: Vec<_> = before.difference(&paths).cloned().collect();
        assert_eq!(added, want_added, "{coll}");
        assert_eq!(removed, want_removed, "{coll}: w is no longer empty");
        assert_eq!(after.get_str("k").unwrap(), "gauge");
        if coll == HOURS {
            assert_eq!(
                after.get_document("w").unwrap().get(WRITER),
                Some(&Bson::Int64(7))
            );
        }
    }
}

/// The slots the update filled hold its samples, and read back at every
/// tier and resolution; returns the minute slots written.
async fn check_updated_slots_read_back(
    store: &MongoStore,
    target: &MongoTarget,
    hour: i64,
    day: i64,
) -> Vec<(i64, Slot)> {
    let after = raw_doc(target, HOURS, HOUR_DOC).await.unwrap();
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
        points(store, "db-01", Tier::Hour, Resolution::Minute).await,
        want_minutes
    );
    assert_eq!(
        points(store, "db-01", Tier::Day, Resolution::Minute).await,
        want_minutes
    );
    let total = slot(3, 7.0, -3.0, 8.0);
    assert_eq!(
        points(store, "db-01", Tier::Hour, Resolution::Hour).await,
        vec![(hour, total)]
    );
    assert_eq!(
        points(store, "db-01", Tier::Day, Resolution::Hour).await,
        vec![(hour, total)]
    );
    assert_eq!(
        points(store, "db-01", Tier::Day, Resolution::Day).await,
        vec![(day, total)]
    );
    want_minutes
}

/// Pre-allocating again changes nothing, from this store or a new one
/// that does not remember the documents.
async fn check_preallocating_again_changes_nothing(
    store: &MongoStore,
    target: &MongoTarget,
    keys: &[DocKey],
    want_minutes: &[(i64, Slot)],
) {
    let before = raw_doc(target, DAYS, DAY_DOC).await.unwrap();
    let stats = store.preallocate(keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (0, 2));
    let fresh = connect(target).await;
    let stats = fresh.preallocate(keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (0, 2));
    assert_eq!(fresh.stats().insert_statements, 0, "looked up, not re-sent");
    assert_eq!(raw_doc(target, DAYS, DAY_DOC).await.unwrap(), before);
    assert_eq!(
        points(&fresh, "db-01", Tier::Day, Resolution::Minute).await,
        want_minutes
    );
}

/// A document that is not there (here: deleted behind the store's back
/// after it was known) is created by the fallback upsert with only the
/// written slots, and reads the same.
async fn check_missing_document_is_upserted_with_written_slots_only(
    store: &MongoStore,
    target: &MongoTarget,
    hour: i64,
) {
    let coll = target.db().await.collection::<Document>(HOURS);
    coll.delete_one(doc! { "_id": HOUR_DOC }).await.unwrap();
    let b = batch(8, &[series("db-01", "m", &[(hour + 125, 4.0)])]);
    store.apply(&b).await.unwrap();
    assert_eq!(store.stats().fallback_upserts, 1);
    let sparse = raw_doc(target, HOURS, HOUR_DOC).await.unwrap();
    assert_eq!(sparse.get_document("values").unwrap().len(), 1, "{sparse}");
    assert_eq!(sparse.get_str("s").unwrap(), "db-01");
    assert_eq!(
        points(store, "db-01", Tier::Hour, Resolution::Minute).await,
        vec![(hour + 120, Slot::of(4.0))]
    );
}

/// Scaled down on FerretDB, whose SQLite backend takes ~160 ms per update
/// of an 86 KB day document (and scans a collection for an `_id` `$in`):
/// the counts follow the series either way.
async fn statements_follow_active_series_not_samples(target: MongoTarget) {
    let (n_series, per_batch) = if target.kind.is_ferretdb() {
        (50, 10)
    } else {
        (2_500, 500)
    };
    let mut cfg = direct_config(&target, &target.database);
    cfg.statements_per_batch = per_batch;
    cfg.timeout = Duration::from_secs(120);
    let store = MongoStore::connect(&cfg, LONG_RETENTION, WRITER)
        .await
        .unwrap();

    let started = Instant::now();
    let before = store.stats();
    let stats = store
        .apply(&many_series_batch(1, 0, n_series))
        .await
        .unwrap();
    let first = store.stats();
    println!(
        "first flush, {n_series} series into fresh documents: {:.1?}",
        started.elapsed()
    );
    assert_eq!(stats.documents_written, n_series);
    let updates = first.update_statements - before.update_statements;
    assert_eq!(
        updates, n_series as u64,
        "one upsert per hour document; day documents are sealed when the hour closes"
    );
    assert_eq!(
        first.update_round_trips - before.update_round_trips,
        n_series.div_ceil(per_batch) as u64
    );
    // The flush sent its own statements and nothing else: the hour
    // documents it found unknown were upserted.
    assert_eq!(first.insert_statements, 0, "no insert on the flush path");
    assert_eq!(first.lookup_round_trips, 0, "no look-up on the flush path");
    assert_eq!(first.fallback_upserts, n_series as u64);
    // The upkeep beside the flushes makes the day documents exist, a
    // bounded share a call: one existence look-up and pre-allocated
    // inserts, cut by the 12 MiB bound (or seals make them first).
    let shares = n_series.div_ceil(500) as u64;
    for _ in 0..shares {
        store.upkeep().await.unwrap();
    }
    let first = store.stats();
    assert_eq!(
        first.lookup_round_trips, shares,
        "one existence look-up a share"
    );
    assert!(first.first_sighting_documents > 0, "{first:?}");
    assert_eq!(first.insert_statements, first.first_sighting_documents);
    let days = target.db().await.collection::<Document>(DAYS);
    assert_eq!(
        days.count_documents(doc! {}).await.unwrap(),
        n_series as u64
    );

    let started = Instant::now();
    let stats = store
        .apply(&many_series_batch(2, 1, n_series))
        .await
        .unwrap();
    let second = store.stats();
    println!(
        "second flush, {n_series} series into known documents: {:.1?}",
        started.elapsed()
    );
    assert_eq!(stats.documents_written, n_series);
    assert_eq!(
        second.update_statements - first.update_statements,
        n_series as u64
    );
    assert_eq!(
        second.update_round_trips - first.update_round_trips,
        n_series.div_ceil(per_batch) as u64
    );
    assert_eq!(
        second.insert_statements, first.insert_statements,
        "no inserts"
    );
    assert_eq!(
        second.lookup_round_trips, first.lookup_round_trips,
        "no look-ups"
    );
    assert_eq!(stats.statements, n_series);
    assert_eq!(stats.round_trips, n_series.div_ceil(per_batch));
    println!("stats: {second:?}");

    check_last_series_has_both_flushes(&store, n_series).await;
    target.cleanup().await;
}

/// One flush, numbered `id`, of `count` series (`db-0000/metric_0`,
/// `db-0000/metric_1`, ..., ten metrics a source) with several samples each
/// in minute `minute`: the statement count must not follow the samples.
fn many_series_batch(id: u64, minute: i64, count: usize) -> FlushBatch {
    let all: Vec<SeriesMinutes> = (0..count)
        .map(|i| {
            let t = at(minute);
            series(
                &format!("db-{:04}", i / 10),
                &format!("metric_{}", i % 10),
                &[(t, i as f64), (t + 20, 1.0), (t + 40, 2.0)],
            )
        })
        .collect();
    batch(id, &all)
}

/// The last of `n_series` series of [`many_series_batch`] holds the minutes of
/// both flushes.
async fn check_last_series_has_both_flushes(store: &MongoStore, n_series: usize) {
    let last = n_series - 1;
    let docs = read(
        store,
        &format!("db-{:04}", last / 10),
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
            (at(0), slot(3, last as f64 + 3.0, 1.0, last as f64)),
            (at(1), slot(3, last as f64 + 3.0, 1.0, last as f64)),
        ]
    );
}

/// More day documents than one command carries (each is about 135 KB) are
/// built and sent a command at a time, and every one lands: created once,
/// found present on the next pass.
async fn preallocation_larger_than_a_command_lands_whole(target: MongoTarget) {
    let n = if target.kind.is_ferretdb() { 100 } else { 200 };
    let store = connect_direct(&target).await;
    let day = at(0) - 10 * HOUR_S;
    let keys: Vec<DocKey> = (0..n)
        .map(|i| DocKey {
            series: SeriesId::new(&format!("db-{i:04}"), "m"),
            tier: Tier::Day,
            period_start: day,
        })
        .collect();
    let before = store.stats();
    let stats = store.preallocate(&keys).await.unwrap();
    assert_eq!((stats.created, stats.already_present), (n, 0));
    let after = store.stats();
    let parts = (n * day_doc_bson_size()).div_ceil(12 << 20) as u64;
    let trips = after.insert_round_trips - before.insert_round_trips;
    assert!(trips >= parts, "{n} day documents in {trips} inserts");
    assert_eq!(
        after.preallocated_documents - before.preallocated_documents,
        n as u64
    );
    let again = store.preallocate(&keys).await.unwrap();
    assert_eq!((again.created, again.already_present), (0, n));
    target.cleanup().await;
}

async fn bad_documents_read_as_corrupt_not_a_panic(target: MongoTarget) {
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
    // A series the store cannot name is refused alone, with the others
    // of its flush applied (here there are none).
    let stats = store
        .apply(&batch(9, &[series("db|01", "m", &[(hour, 1.0)])]))
        .await
        .expect("a refusal, not an error");
    assert_eq!(stats.refused.len(), 1, "{stats:?}");
    assert_eq!(stats.refused[0].series, 0);
    assert_eq!(stats.documents_written, 0);
    assert!(matches!(
        MongoStore::connect(&config(&target, &target.database), LONG_RETENTION, "a.b").await,
        Err(StoreError::Invalid(_))
    ));
    target.cleanup().await;
}
