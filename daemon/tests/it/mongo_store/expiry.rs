//! Expiry: the TTL indexes follow the configured retention, and the series
//! catalog's documents, commands and TTL index.

use mongodb::bson::{doc, Document};
use tally::config::MongoDbConfig;
use tally::model::{Resolution, SampleKind, SeriesId, Tier, DAY_S, HOUR_S, MINUTE_S};
use tally::store::mongodb::{Feature, MongoStore};
use tally::store::{CatalogEntry, ReadQuery, Store, StoreError};
use tally_testkit::mongo::MongoTarget;

use super::{assert_retention_index, batch, config, raw_doc, series, DAYS, HOURS, SERIES, WRITER};

per_mongo_target!(
    ttl_indexes_follow_the_configured_retention,
    catalog_documents_commands_and_ttl_index
);

async fn ttl_indexes_follow_the_configured_retention(target: MongoTarget) {
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
    assert_retention_index(&target, &store, HOURS, "t", 3 * 3600).await;
    assert_retention_index(&target, &store, DAYS, "t", 40 * 86_400).await;

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
    assert_retention_index(&target, &store, HOURS, "t", 2 * 3600).await;
    assert_retention_index(&target, &store, DAYS, "t", 400 * 86_400).await;
    let names: Vec<String> = target
        .db()
        .await
        .collection::<Document>(HOURS)
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(names.len(), 2, "{names:?}: _id and the TTL index only");

    // The hour document of five hours ago is past its retention: the
    // stand-in's TTL monitor deletes it, or the store itself where the
    // server has no TTL (a real server's monitor runs once a minute).
    if expire(&target, &store, now, (2 * 3600, 400 * 86_400)).await {
        let docs = store.read(&q).await.unwrap();
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![recent]
        );
    }
    target.cleanup().await;
}

/// Runs what deletes documents past `retention` now, where a test can: the
/// stand-in's TTL monitor (the store's own sweep must then delete nothing),
/// or the store's sweep where the server has no TTL. False against a real
/// server's TTL monitor, which runs when it will.
async fn expire(
    target: &MongoTarget,
    store: &MongoStore,
    now: i64,
    (hour_s, day_s): (i64, i64),
) -> bool {
    if store.missing_features().contains(&Feature::TtlIndex) {
        let deleted = store.expire(now, hour_s, day_s).await.unwrap();
        assert!(deleted >= 1, "{deleted}");
        return true;
    }
    assert_eq!(store.expire(now, hour_s, day_s).await.unwrap(), 0);
    match target.standin() {
        Some(standin) => {
            let deleted = standin.ttl_pass();
            assert!(deleted >= 1, "{deleted}");
            true
        }
        None => false,
    }
}

async fn catalog_documents_commands_and_ttl_index(target: MongoTarget) {
    const ENTRIES: usize = 250;
    const PER_BATCH: usize = 100;
    let mut cfg = config(&target, &target.database);
    cfg.statements_per_batch = PER_BATCH;
    let store = MongoStore::connect(&cfg, (3 * 3600, 40 * 86_400), WRITER)
        .await
        .unwrap();
    let now = chrono::Utc::now().timestamp().div_euclid(MINUTE_S) * MINUTE_S;
    let entries: Vec<CatalogEntry> = (0..ENTRIES)
        .map(|i| CatalogEntry {
            series: SeriesId::new(&format!("db-{:03}", i / 10), &format!("m{}", i % 10)).into(),
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

    check_catalog_document_and_its_merge(&store, &target, now).await;
    let store = check_catalog_ttl_index_follows_retention(&store, &cfg, &target).await;

    check_catalog_expiry_and_corruption(&store, &target, now, ENTRIES).await;

    // MongoDB down: listings fail retryably (upserts go through the same
    // command path as every other write).
    let Some(standin) = target.standin() else {
        target.cleanup().await;
        return;
    };
    let mut q = crate::catalog_conformance::query();
    q.limit = 10;
    standin.set_down(true);
    assert!(store.catalog_list(&q).await.unwrap_err().is_retryable());
    standin.set_down(false);
    target.cleanup().await;
}

/// The document of `db-001/m2` as the first upsert wrote it at `now`; then
/// $min / $max on dates, $set of the kind, $setOnInsert left alone.
async fn check_catalog_document_and_its_merge(store: &MongoStore, target: &MongoTarget, now: i64) {
    let d = raw_doc(target, SERIES, "db-001|m2").await.unwrap();
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
    store
        .catalog_upsert(&[CatalogEntry {
            series: SeriesId::new("db-001", "m2").into(),
            kind: SampleKind::Gauge,
            first_seen: now - 70 * DAY_S,
            last_seen: now - DAY_S,
        }])
        .await
        .unwrap();
    let d = raw_doc(target, SERIES, "db-001|m2").await.unwrap();
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
}

/// The TTL index is on last_seen, with the day retention; a daemon
/// restarted with another retention changes it in place. Returns the
/// restarted store.
async fn check_catalog_ttl_index_follows_retention(
    store: &MongoStore,
    cfg: &MongoDbConfig,
    target: &MongoTarget,
) -> MongoStore {
    assert_retention_index(target, store, SERIES, "last_seen", 40 * 86_400).await;
    let store = MongoStore::connect(cfg, (3 * 3600, 30 * 86_400), WRITER)
        .await
        .unwrap();
    let mut q = crate::catalog_conformance::query();
    q.limit = 5;
    assert_eq!(store.catalog_list(&q).await.unwrap().len(), 5);
    assert_retention_index(target, &store, SERIES, "last_seen", 30 * 86_400).await;
    let names: Vec<String> = target
        .db()
        .await
        .collection::<Document>(SERIES)
        .list_index_names()
        .await
        .unwrap();
    let mut names = names;
    names.sort();
    assert_eq!(
        names,
        ["_id_", "last_seen_1", "metric_1__id_1"],
        "_id, the TTL index and the index by metric"
    );
    store
}

/// The entry last seen 50 days ago expires (of `entries`), where the test
/// can make expiry run now; a document that is not what Tally writes is
/// Corrupt, not a panic.
async fn check_catalog_expiry_and_corruption(
    store: &MongoStore,
    target: &MongoTarget,
    now: i64,
    entries: usize,
) {
    let mut q = crate::catalog_conformance::query();
    q.limit = 1000;
    if expire(target, store, now, (3 * 3600, 30 * 86_400)).await {
        let left = store.catalog_list(&q).await.unwrap();
        assert_eq!(left.len(), entries - 1);
        assert_eq!(*left[0].series, SeriesId::new("db-000", "m1"));
    }

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
}
