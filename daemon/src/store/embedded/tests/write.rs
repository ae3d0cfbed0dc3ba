//! Flushes and pre-allocation: what `apply` and `preallocate` write, and
//! that a replayed flush counts once.

use redb::ReadableDatabase;

use super::*;
use crate::model::{DocKey, Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S};
use crate::store::embedded::codec::{document, header, slot_at};
use crate::store::embedded::layout::{
    DAY_MINUTES_LEN, DAY_SUMMARY, DAY_SUMMARY_LEN, HEADER_LEN, HOUR_DOCS, HOUR_DOC_LEN,
};
use crate::store::{PreallocStats, Store, StoreError};

#[tokio::test]
async fn same_batch_twice_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let b = sample_batch(7);
    store.apply(&b).await.unwrap();
    let day = ts(2026, 3, 14, 0, 0);
    let before_h = read_day(&store, Tier::Hour, Resolution::Minute, day).await;
    let before_d = read_day(&store, Tier::Day, Resolution::Minute, day).await;

    let stats = store.apply(&b).await.unwrap();
    assert_eq!(stats.documents_written, 0);
    assert_eq!(stats.documents_skipped, b.document_count());
    assert_eq!(stats.statements, 0);
    assert_eq!(stats.round_trips, 0);
    assert_eq!(
        read_day(&store, Tier::Hour, Resolution::Minute, day).await,
        before_h
    );
    assert_eq!(
        read_day(&store, Tier::Day, Resolution::Minute, day).await,
        before_d
    );
    store.checkpoint().unwrap();
    assert_eq!(store.last_flush_id().await.unwrap(), 7);
}

#[tokio::test]
async fn later_flush_applies_and_older_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.apply(&sample_batch(1)).await.unwrap();
    let stats = store.apply(&sample_batch(2)).await.unwrap();
    assert_eq!(stats.documents_written, 3);
    assert_eq!(stats.documents_skipped, 0);
    let day = ts(2026, 3, 14, 0, 0);
    let docs = read_day(&store, Tier::Day, Resolution::Day, day).await;
    let day_slot = with_last(slot(8, 30.0, -1.0, 10.0), ts(2026, 3, 14, 11, 0), 10.0);
    assert_eq!(docs[0].slots, vec![(day, day_slot)]);
    assert_eq!(docs[0].watermark, 2);
    let h10 = ts(2026, 3, 14, 10, 0);
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, h10, h10 + HOUR_S),
    )
    .await;
    let m5 = with_last(slot(4, 12.0, 2.0, 4.0), h10 + 330, 4.0);
    assert_eq!(docs[0].slots[0], (h10 + 300, m5));

    // A replay of flush 1 now changes nothing.
    let stats = store.apply(&sample_batch(1)).await.unwrap();
    assert_eq!((stats.documents_written, stats.documents_skipped), (0, 3));
    let docs = read_day(&store, Tier::Day, Resolution::Day, day).await;
    let day_slot = with_last(slot(8, 30.0, -1.0, 10.0), ts(2026, 3, 14, 11, 0), 10.0);
    assert_eq!(docs[0].slots, vec![(day, day_slot)]);
    // last_flush_id never goes down.
    store.checkpoint().unwrap();
    assert_eq!(store.last_flush_id().await.unwrap(), 2);

    // A flush touching one new document and one already-applied one
    // writes only the new one.
    let mut b = sample_batch(3);
    b.series.push(series(
        "db-02",
        "op_counter",
        SampleKind::DeltaCounter,
        &[(h10, 1.0)],
    ));
    store.apply(&b).await.unwrap();
    let mut b4 = b.clone();
    b4.id = crate::model::FlushId(3);
    b4.series[1] = series(
        "db-03",
        "op_counter",
        SampleKind::DeltaCounter,
        &[(h10, 1.0)],
    );
    let stats = store.apply(&b4).await.unwrap();
    assert_eq!((stats.documents_written, stats.documents_skipped), (2, 3));
}

#[tokio::test]
async fn flush_id_zero_and_malformed_updates_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let err = store.apply(&sample_batch(0)).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");

    // Minutes out of order are an error, not a panic, and the batch is not
    // applied at all (the good document before it is rolled back).
    let mut b = sample_batch(1);
    let mut bad = series(
        "db-09",
        "m",
        SampleKind::Gauge,
        &[(ts(2026, 3, 14, 10, 0), 1.0), (ts(2026, 3, 14, 10, 1), 1.0)],
    );
    bad.minutes.reverse();
    b.series.push(bad);
    let err = store.apply(&b).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let day = ts(2026, 3, 14, 0, 0);
    assert!(read_day(&store, Tier::Hour, Resolution::Minute, day)
        .await
        .is_empty());
    assert_eq!(store.last_flush_id().await.unwrap(), 0);

    // So is a minute listed twice.
    let mut b = sample_batch(1);
    let twice = b.series[0].minutes[0];
    b.series[0].minutes.insert(0, twice);
    assert!(matches!(store.apply(&b).await, Err(StoreError::Invalid(_))));
}

/// The documents [`sample_batch`] writes first: db-01/op_counter's hour at
/// 2026-03-14 10:00 and its day 2026-03-14.
fn sample_doc_keys() -> Vec<DocKey> {
    let id = SeriesId::new("db-01", "op_counter");
    vec![
        DocKey {
            series: id.clone(),
            tier: Tier::Hour,
            period_start: ts(2026, 3, 14, 10, 0),
        },
        DocKey {
            series: id,
            tier: Tier::Day,
            period_start: ts(2026, 3, 14, 0, 0),
        },
    ]
}

#[tokio::test]
async fn preallocate_creates_empty_docs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let (h10, day) = (ts(2026, 3, 14, 10, 0), ts(2026, 3, 14, 0, 0));
    let keys = sample_doc_keys();
    let stats = store.preallocate(&keys).await.unwrap();
    assert_eq!(
        stats,
        PreallocStats {
            created: 2,
            already_present: 0
        }
    );

    // Sizes and contents on disk: the empty hour packed to almost nothing.
    let packed = raw_len(&store, HOUR_DOCS, (h10, "db-01", "op_counter")).unwrap();
    assert!(packed < 64, "{packed}");
    assert_eq!(
        raw_len(&store, DAY_SUMMARY, (day, "db-01", "op_counter")),
        Some(DAY_SUMMARY_LEN)
    );
    assert_eq!(
        (HOUR_DOC_LEN, DAY_SUMMARY_LEN, DAY_MINUTES_LEN),
        (2944, 1216, 2880)
    );
    // No minute blocks: absent ones read as empty (the reads below).
    assert!(raw_blocks(&store, "db-01", "op_counter", day).is_empty());
    {
        let txn = store.inner.database().unwrap().begin_read().unwrap();
        let t = txn.open_table(HOUR_DOCS).unwrap();
        let v = t.get((h10, "db-01", "op_counter")).unwrap().unwrap();
        let v: [u8; HOUR_DOC_LEN] = document(v.value(), String::new).unwrap();
        let v = &v[..];
        assert_eq!(header(v), (0, 0));
        assert_eq!(&v[1..8], &[0u8; 7]);
        for i in 0..61 {
            assert_eq!(slot_at(v, HEADER_LEN, i), Slot::EMPTY);
        }
    }

    // Reads see the documents, unknown kind, watermark 0, no slots.
    for (tier, res) in EVERY_READ {
        let docs = read(&store, query(tier, res, day, day + DAY_S)).await;
        assert_eq!(docs.len(), 1, "{tier:?} {res:?}");
        assert_eq!(docs[0].kind, None);
        assert_eq!(docs[0].watermark, 0);
        assert!(docs[0].slots.is_empty());
    }
}

#[tokio::test]
async fn preallocate_never_modifies_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let id = SeriesId::new("db-01", "op_counter");
    let (h10, day) = (ts(2026, 3, 14, 10, 0), ts(2026, 3, 14, 0, 0));
    let keys = sample_doc_keys();
    store.preallocate(&keys).await.unwrap();

    // Apply into the pre-allocated documents, then pre-allocate again:
    // nothing changes.
    store.apply(&sample_batch(1)).await.unwrap();
    store.fold_all().unwrap();
    let h_before = read_day(&store, Tier::Hour, Resolution::Minute, day).await;
    let d_before = read_day(&store, Tier::Day, Resolution::Minute, day).await;
    let s_before = read_day(&store, Tier::Day, Resolution::Hour, day).await;
    assert_eq!(d_before[0].kind, Some(SampleKind::Gauge));
    let mut more = keys.clone();
    // 11:00 was created by apply, not pre-allocated.
    more.push(DocKey {
        series: id.clone(),
        tier: Tier::Hour,
        period_start: h10 + HOUR_S,
    });
    let stats = store.preallocate(&more).await.unwrap();
    assert_eq!(
        stats,
        PreallocStats {
            created: 0,
            already_present: 3
        }
    );
    assert_eq!(
        read_day(&store, Tier::Hour, Resolution::Minute, day).await,
        h_before
    );
    assert_eq!(
        read_day(&store, Tier::Day, Resolution::Minute, day).await,
        d_before
    );
    assert_eq!(
        read_day(&store, Tier::Day, Resolution::Hour, day).await,
        s_before
    );
}

#[tokio::test]
async fn preallocate_leaves_an_applied_day_as_it_is_and_refuses_misaligned_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    store.apply(&sample_batch(1)).await.unwrap();
    let id = SeriesId::new("db-01", "op_counter");
    let (h10, day) = (ts(2026, 3, 14, 10, 0), ts(2026, 3, 14, 0, 0));

    // A day created by apply has only its touched blocks; pre-allocating
    // it does not fill in the rest (absent blocks read as empty).
    let other = series("db-02", "m", SampleKind::Gauge, &[(h10, 1.0)]);
    store.apply(&batch(2, vec![other])).await.unwrap();
    store.fold_all().unwrap();
    assert_eq!(raw_blocks(&store, "db-02", "m", day).len(), 1);
    let stats = store
        .preallocate(&[DocKey {
            series: SeriesId::new("db-02", "m"),
            tier: Tier::Day,
            period_start: day,
        }])
        .await
        .unwrap();
    assert_eq!(stats.already_present, 1);
    assert_eq!(raw_blocks(&store, "db-02", "m", day).len(), 1);

    // A misaligned key is refused.
    let err = store
        .preallocate(&[DocKey {
            series: id,
            tier: Tier::Day,
            period_start: h10,
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
}
