//! Reads of every tier and resolution, across period boundaries.

use super::*;
use crate::model::{Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S};
use crate::store::embedded::{EmbeddedStore, READS_PER_CPU};
use crate::store::{Store, StoreError};

/// Starts of [`sample_batch`]'s hours 10:00 and 11:00 and of its day.
fn sample_periods() -> (i64, i64, i64) {
    (
        ts(2026, 3, 14, 10, 0),
        ts(2026, 3, 14, 11, 0),
        ts(2026, 3, 14, 0, 0),
    )
}

/// [`sample_batch`]'s minutes 10:05, 10:59 and 11:00.
fn sample_minutes() -> (Slot, Slot, Slot) {
    (
        with_last(slot(2, 6.0, 2.0, 4.0), ts(2026, 3, 14, 10, 5) + 30, 4.0),
        with_last(slot(1, -1.0, -1.0, -1.0), h10_last(), -1.0),
        with_last(slot(1, 10.0, 10.0, 10.0), ts(2026, 3, 14, 11, 0), 10.0),
    )
}

/// When [`sample_batch`]'s hour 10:00 has its last sample.
fn h10_last() -> i64 {
    ts(2026, 3, 14, 10, 59) + 59
}

/// A store holding [`sample_batch`] as flush 1.
async fn sample_store(dir: &tempfile::TempDir) -> EmbeddedStore {
    let store = open(dir);
    store.apply(&sample_batch(1)).await.unwrap();
    store
}

#[tokio::test]
async fn apply_then_read_the_hour_tier() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    assert_eq!(store.name(), "embedded");
    let stats = store.apply(&sample_batch(1)).await.unwrap();
    // Two hour docs and one day doc.
    assert_eq!(stats.documents_written, 3);
    assert_eq!(stats.documents_skipped, 0);
    store.checkpoint().unwrap();
    assert_eq!(store.last_flush_id().await.unwrap(), 1);

    let (h10, h11, day) = sample_periods();
    let (m5, m59, m60) = sample_minutes();

    // Hour tier, minutes.
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, h10, h11 + HOUR_S),
    )
    .await;
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].period_start, h10);
    assert_eq!(docs[0].kind, Some(SampleKind::Gauge));
    assert_eq!(docs[0].watermark, 1);
    assert_eq!(docs[0].slots, vec![(h10 + 300, m5), (h10 + 59 * 60, m59)]);
    assert_eq!(docs[1].slots, vec![(h11, m60)]);

    // Hour tier, hours: the running slots.
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Hour, h10, h11 + HOUR_S),
    )
    .await;
    let h10_slot = with_last(slot(3, 5.0, -1.0, 4.0), h10_last(), -1.0);
    assert_eq!(docs[0].slots, vec![(h10, h10_slot)]);
    assert_eq!(docs[1].slots, vec![(h11, m60)]);

    // Hour tier, days: refused.
    let err = store
        .read(&query(Tier::Hour, Resolution::Day, day, day + DAY_S))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn apply_then_read_the_day_tier() {
    let dir = tempfile::tempdir().unwrap();
    let store = sample_store(&dir).await;
    let (h10, h11, day) = sample_periods();
    let (m5, m59, m60) = sample_minutes();

    // Day tier, minutes.
    let docs = read_day(&store, Tier::Day, Resolution::Minute, day).await;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].period_start, day);
    assert_eq!(docs[0].watermark, 1);
    assert_eq!(docs[0].kind, Some(SampleKind::Gauge));
    assert_eq!(
        docs[0].slots,
        vec![(h10 + 300, m5), (h10 + 59 * 60, m59), (h11, m60)]
    );

    // Day tier, hours.
    let docs = read_day(&store, Tier::Day, Resolution::Hour, day).await;
    assert_eq!(
        docs[0].slots,
        vec![
            (h10, with_last(slot(3, 5.0, -1.0, 4.0), h10_last(), -1.0)),
            (h11, m60)
        ]
    );

    // Day tier, days.
    let docs = read_day(&store, Tier::Day, Resolution::Day, day).await;
    assert_eq!(
        docs[0].slots,
        vec![(day, with_last(slot(4, 15.0, -1.0, 10.0), h11, 10.0))]
    );
}

#[tokio::test]
async fn reads_of_part_of_a_document_and_of_empty_and_unbounded_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let store = sample_store(&dir).await;
    let (h10, h11, day) = sample_periods();
    let (_, m59, m60) = sample_minutes();

    // Sub-ranges: a `from` inside a document still finds it, and `to` is
    // exclusive.
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, h10 + 30 * 60, h11),
    )
    .await;
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].slots, vec![(h10 + 59 * 60, m59)]);
    let docs = read(
        &store,
        query(Tier::Day, Resolution::Minute, h10 + 6 * 60, h11 + 60),
    )
    .await;
    assert_eq!(docs[0].slots, vec![(h10 + 59 * 60, m59), (h11, m60)]);
    let docs = read(&store, query(Tier::Day, Resolution::Hour, h11, day + DAY_S)).await;
    assert_eq!(docs[0].slots, vec![(h11, m60)]);
    // A daily read starting mid-day returns the document (its watermark)
    // but not its day slot, which starts before `from`.
    let docs = read(&store, query(Tier::Day, Resolution::Day, h10, day + DAY_S)).await;
    assert_eq!(docs.len(), 1);
    assert!(docs[0].slots.is_empty());

    // Unbounded ranges.
    for (tier, res) in [
        (Tier::Hour, Resolution::Minute),
        (Tier::Day, Resolution::Minute),
        (Tier::Day, Resolution::Hour),
        (Tier::Day, Resolution::Day),
    ] {
        let docs = read(&store, query(tier, res, i64::MIN, i64::MAX)).await;
        let n: usize = docs.iter().map(|d| d.slots.len()).sum();
        assert!(n >= 1, "{tier:?} {res:?}");
    }

    // Empty range, and a series that does not exist.
    assert!(
        read(&store, query(Tier::Hour, Resolution::Minute, h11, h10))
            .await
            .is_empty()
    );
    let mut q = query(Tier::Day, Resolution::Minute, day, day + DAY_S);
    q.series = SeriesId::new("db-01", "op_counte");
    assert!(read(&store, q).await.is_empty());
}

#[tokio::test]
async fn reads_across_hour_day_month_and_year_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // 2026-01-31 23:58 .. 2026-02-01 00:01, and a year boundary.
    let jan31_2358 = ts(2026, 1, 31, 23, 58);
    let mut samples: Vec<(i64, f64)> = (0..4)
        .map(|i| (jan31_2358 + 60 * i, i as f64 + 1.0))
        .collect();
    let dec31_2359 = ts(2025, 12, 31, 23, 59);
    samples.insert(0, (dec31_2359, 100.0));
    samples.insert(1, (dec31_2359 + 60, 200.0));
    let b = batch(
        1,
        vec![series(
            "db-01",
            "op_counter",
            SampleKind::DeltaCounter,
            &samples,
        )],
    );
    store.apply(&b).await.unwrap();

    let feb1 = ts(2026, 2, 1, 0, 0);
    let jan31 = ts(2026, 1, 31, 0, 0);
    let last_hour = with_last(slot(2, 3.0, 1.0, 2.0), feb1 - 60, 2.0);
    let first_hour = with_last(slot(2, 7.0, 3.0, 4.0), feb1 + 60, 4.0);
    // Minutes across the hour/day/month boundary, from the hour tier.
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, jan31_2358, feb1 + 120),
    )
    .await;
    assert_eq!(
        docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
        vec![feb1 - HOUR_S, feb1]
    );
    let all: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
    assert_eq!(
        all,
        (0..4)
            .map(|i| {
                let (t, v) = (jan31_2358 + 60 * i, i as f64 + 1.0);
                (t, with_last(Slot::of(v), t, v))
            })
            .collect::<Vec<_>>()
    );
    assert!(docs
        .iter()
        .all(|d| d.kind == Some(SampleKind::DeltaCounter)));
    // ... and from the day tier.
    let docs = read(
        &store,
        query(Tier::Day, Resolution::Minute, jan31_2358, feb1 + 120),
    )
    .await;
    assert_eq!(
        docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
        vec![jan31, feb1]
    );
    let all2: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
    assert_eq!(all2, all);
    // Hours across the day boundary.
    let docs = read(
        &store,
        query(Tier::Day, Resolution::Hour, feb1 - HOUR_S, feb1 + HOUR_S),
    )
    .await;
    assert_eq!(docs[0].slots, vec![(feb1 - HOUR_S, last_hour)]);
    assert_eq!(docs[1].slots, vec![(feb1, first_hour)]);
    // Days across the month boundary.
    let docs = read(
        &store,
        query(Tier::Day, Resolution::Day, jan31, feb1 + DAY_S),
    )
    .await;
    assert_eq!(docs[0].slots, vec![(jan31, last_hour)]);
    assert_eq!(docs[1].slots, vec![(feb1, first_hour)]);
    // Days across the year boundary, over a long range (two months)
    // reading only the summaries.
    let dec31 = ts(2025, 12, 31, 0, 0);
    let jan1 = ts(2026, 1, 1, 0, 0);
    let docs = read(
        &store,
        query(
            Tier::Day,
            Resolution::Day,
            ts(2025, 12, 1, 0, 0),
            ts(2026, 3, 1, 0, 0),
        ),
    )
    .await;
    let days: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
    assert_eq!(
        days,
        vec![
            (dec31, with_last(Slot::of(100.0), dec31_2359, 100.0)),
            (jan1, with_last(Slot::of(200.0), dec31_2359 + 60, 200.0)),
            (jan31, last_hour),
            (feb1, first_hour),
        ]
    );
}

#[tokio::test]
async fn pre_epoch_periods_sort_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let t = -90; // 1969-12-31 23:58:30
    let b = batch(
        1,
        vec![series(
            "db-01",
            "op_counter",
            SampleKind::Gauge,
            &[(t, 1.0), (30, 2.0)],
        )],
    );
    store.apply(&b).await.unwrap();
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, -HOUR_S, HOUR_S),
    )
    .await;
    assert_eq!(
        docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
        vec![-HOUR_S, 0]
    );
    assert_eq!(
        docs[0].slots,
        vec![(-120, with_last(Slot::of(1.0), t, 1.0))]
    );
    let docs = read(&store, query(Tier::Day, Resolution::Minute, -119, 60)).await;
    assert_eq!(
        docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
        vec![-DAY_S, 0]
    );
    assert!(docs[0].slots.is_empty(), "bucket -120 starts before from");
    assert_eq!(docs[1].slots, vec![(0, with_last(Slot::of(2.0), 30, 2.0))]);
}

/// Reads beyond the bound wait for a running one instead of each taking
/// a blocking thread (and its allocator heap) of its own.
#[tokio::test]
async fn reads_beyond_the_bound_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let store = sample_store(&dir).await;
    let (h10, h11, _) = sample_periods();
    let q = query(Tier::Hour, Resolution::Minute, h10, h11 + HOUR_S);
    let bound = store.reads.available_permits();
    assert!(bound >= READS_PER_CPU, "{bound}");
    // Every permit taken, as by `bound` reads in progress.
    let held = store.reads.acquire_many(bound as u32).await.unwrap();
    let waiting = tokio::time::timeout(std::time::Duration::from_millis(200), store.read(&q));
    assert!(waiting.await.is_err(), "a read ran beyond the bound");
    drop(held);
    let reads = (0..3 * bound).map(|_| store.read(&q));
    for docs in futures::future::join_all(reads).await {
        assert_eq!(docs.unwrap().len(), 2);
    }
    assert_eq!(store.reads.available_permits(), bound);
}
