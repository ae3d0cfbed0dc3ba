//! The MongoDB store across failures, through the stand-in's fault
//! injection: ambiguous failures (the write applied, its reply lost) count
//! once, and MongoDB down fails retryably and recovers.

use std::time::{Duration, Instant};

use tally::model::{FlushBatch, Resolution, SampleKind, SeriesId, Slot, Tier, HOUR_S};
use tally::store::mongodb::MongoStore;
use tally::store::{ReadQuery, Store, StoreError};
use tally_testkit::mongo::{mongo_target, Standin};

use super::{
    at, batch, connect, connect_direct, points, read, series, slot, ttl_of, DAYS, HOURS,
    LONG_RETENTION,
};

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
    standin: &Standin,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_failures_count_once() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let store = connect_direct(&target).await;
    // Warm-up: indexes made, flush ids reserved, so the next writes are the
    // data's own.
    store
        .apply(&batch(1, &[series("warm", "m", &[(at(0), 1.0)])]))
        .await
        .unwrap();

    // 1. Lost reply of the upserts that create new documents (a flush
    // sends its own statements only): applied, so the retry skips them.
    let a = batch(
        2,
        &[
            series("db-01", "m", &[(at(1), 1.0), (at(2), 2.0)]),
            series("db-02", "m", &[(at(1), 10.0)]),
        ],
    );
    let stats = lose_reply_then_retry(&store, standin, &a).await;
    assert_eq!(
        stats.documents_written + stats.documents_skipped,
        2,
        "{stats:?}"
    );
    assert!(stats.documents_skipped >= 1, "{stats:?}");
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
    assert_eq!(stats.documents_written + stats.documents_skipped, 2);

    // 3. A refused write (not applied) is retryable too.
    let c = batch(4, &[series("db-01", "m", &[(at(3), 16.0)])]);
    standin.fail_next(1, 10107);
    let err = store.apply(&c).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let stats = apply_eventually(&store, &c).await;
    assert_eq!(stats.documents_written + stats.documents_skipped, 1);

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
    // The close seals the day documents from the hour documents.
    store.close().await.unwrap();
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
