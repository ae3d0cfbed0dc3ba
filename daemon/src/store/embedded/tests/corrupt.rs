//! Damaged or foreign values: reported as corrupt, never a panic.

use super::*;
use crate::model::{Resolution, SampleKind, SeriesId, Tier, DAY_S, HOUR_S};
use crate::store::embedded::codec::{empty_value, encode_catalog, put_header};
use crate::store::embedded::layout::{
    HourDoc, DAY_MINUTES, DAY_SUMMARY, DAY_SUMMARY_LEN, HEADER_LEN, HOUR_DOCS, SERIES_CATALOG,
};
use crate::store::embedded::retention::Retention;
use crate::store::{CatalogEntry, CatalogQuery, Store, StoreError};

#[tokio::test]
async fn bad_catalog_values_are_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let list = CatalogQuery::everything(10);
    write_raw(&store, SERIES_CATALOG, "a|m", &[1, 2, 3]);
    for err in [
        store.catalog_list(&list).await.unwrap_err(),
        store
            .catalog_upsert(&[CatalogEntry {
                series: SeriesId::new("a", "m").into(),
                kind: SampleKind::Gauge,
                first_seen: 0,
                last_seen: 0,
            }])
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(&err, StoreError::Corrupt { doc, .. } if doc.contains("a|m")),
            "{err:?}"
        );
    }
    // The sweep keeps what it cannot read, for listings to report.
    store
        .sweep_expired(
            i64::MAX / 2,
            Retention {
                hour_s: 1,
                day_s: 1,
            },
        )
        .unwrap();
    assert!(store.catalog_list(&list).await.is_err());

    let mut bad_kind = encode_catalog(SampleKind::Gauge, 0, 0);
    bad_kind[0] = 9;
    write_raw(&store, SERIES_CATALOG, "a|m", &bad_kind);
    let err = store.catalog_list(&list).await.unwrap_err();
    assert!(matches!(&err, StoreError::Corrupt { reason, .. } if reason.contains("kind")));
    write_raw(
        &store,
        SERIES_CATALOG,
        "no-separator",
        &encode_catalog(SampleKind::Gauge, 0, 0),
    );
    write_raw(
        &store,
        SERIES_CATALOG,
        "a|m",
        &encode_catalog(SampleKind::Gauge, 0, 0),
    );
    let err = store.catalog_list(&list).await.unwrap_err();
    assert!(matches!(&err, StoreError::Corrupt { doc, .. } if doc.contains("no-separator")));
}

#[tokio::test]
async fn wrong_value_length_is_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_direct(&dir);
    let h10 = ts(2026, 3, 14, 10, 0);
    let day = ts(2026, 3, 14, 0, 0);
    write_raw(&store, HOUR_DOCS, (h10, "db-01", "op_counter"), &[1, 2, 3]);
    let err = store
        .read(&query(Tier::Hour, Resolution::Minute, h10, h10 + HOUR_S))
        .await
        .unwrap_err();
    match &err {
        StoreError::Corrupt { doc, reason } => {
            assert!(
                doc.contains("hours_by_period") && doc.contains("db-01/op_counter"),
                "{doc}"
            );
            assert!(reason.contains("3 bytes"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(matches!(
        store.apply(&sample_batch(1)).await,
        Err(StoreError::Corrupt { .. })
    ));

    // Day summary one byte too long.
    write_raw(
        &store,
        DAY_SUMMARY,
        (day, "db-02", "m"),
        &[0u8; DAY_SUMMARY_LEN + 1],
    );
    let mut q = query(Tier::Day, Resolution::Day, day, day + DAY_S);
    q.series = SeriesId::new("db-02", "m");
    assert!(matches!(
        store.read(&q).await,
        Err(StoreError::Corrupt { .. })
    ));

    // A minute block cut short: the summary is fine, the block is not.
    let b = batch(
        2,
        vec![series("db-03", "m", SampleKind::Gauge, &[(h10, 1.0)])],
    );
    store.apply(&b).await.unwrap();
    write_raw(&store, DAY_MINUTES, (day, 10, "db-03", "m"), &[0u8; 100]);
    let mut q = query(Tier::Day, Resolution::Minute, day, day + DAY_S);
    q.series = SeriesId::new("db-03", "m");
    match store.read(&q).await {
        Err(StoreError::Corrupt { doc, .. }) => assert!(doc.contains("day_minutes"), "{doc}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // The hourly read does not touch the block, so it still works.
    q.resolution = Resolution::Hour;
    assert_eq!(read(&store, q).await[0].slots.len(), 1);
    let b = batch(
        3,
        vec![series("db-03", "m", SampleKind::Gauge, &[(h10, 1.0)])],
    );
    assert!(matches!(
        store.apply(&b).await,
        Err(StoreError::Corrupt { .. })
    ));

    // An unknown kind code.
    let mut bad: HourDoc = empty_value(HEADER_LEN);
    put_header(&mut bad, 9, 1);
    write_raw(&store, HOUR_DOCS, (h10, "db-04", "m"), &bad);
    let mut q = query(Tier::Hour, Resolution::Hour, h10, h10 + HOUR_S);
    q.series = SeriesId::new("db-04", "m");
    assert!(matches!(
        store.read(&q).await,
        Err(StoreError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn a_corrupt_file_or_a_failed_operation_fails_the_store_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    assert!(store.health().await.is_ok());
    assert_eq!(store.fault(), None);
    // One document's bad value is that document's problem, not the store's.
    store.inner.note(&Err::<(), _>(StoreError::Corrupt {
        doc: "a|m|2026".into(),
        reason: "bad value".into(),
    }));
    assert_eq!(store.fault(), None);
    // The file itself: the store cannot be trusted any more.
    store.inner.note(&Err::<(), _>(StoreError::Corrupt {
        doc: crate::store::embedded::layout::FILE_NAME.into(),
        reason: "page checksum".into(),
    }));
    assert!(store.fault().is_some_and(|f| f.contains("page checksum")));
    assert!(store.health().await.is_err(), "unready from then on");
}

#[test]
fn an_empty_store_file_is_refused_not_reinitialised() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(crate::store::embedded::layout::FILE_NAME),
        b"",
    )
    .unwrap();
    let err = crate::store::embedded::EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { reason, .. } if reason.contains("empty (0 bytes)")),
        "{err:?}"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(crate::store::embedded::layout::FILE_NAME))
            .unwrap()
            .len(),
        0,
        "left as it was"
    );
}
