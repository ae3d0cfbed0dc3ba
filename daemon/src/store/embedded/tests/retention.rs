//! The retention sweep, directly and through the `Store` trait.

use super::*;
use crate::model::{DocKey, Resolution, SampleKind, SeriesId, Tier, DAY_S, HOUR_S};
use crate::store::embedded::retention::Retention;
use crate::store::Store;

#[tokio::test]
async fn expire_through_the_store_trait_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let old = ts(2026, 3, 1, 10, 0);
    let b = batch(1, vec![series("a", "m", SampleKind::Gauge, &[(old, 1.0)])]);
    store.apply(&b).await.unwrap();
    // The sweep deletes stored documents; minutes still pending are
    // folded first here, as they are within a minute in a daemon.
    store.fold_all().unwrap();
    let dyn_store: &dyn Store = &store;
    // Ten days later, with 1 h / 2 d retention: the hour and day docs go.
    let gone = dyn_store
        .expire(old + 10 * DAY_S, HOUR_S, 2 * DAY_S)
        .await
        .unwrap();
    assert!(gone >= 2, "{gone}");
    assert_eq!(
        dyn_store
            .expire(old + 10 * DAY_S, HOUR_S, 2 * DAY_S)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn sweep_expired_deletes_only_old_docs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let now = ts(2026, 3, 14, 12, 0);
    let mut samples = Vec::new();
    // Samples on 03-10 .. 03-14, at 10:00 and 11:00 each day.
    for d in 10..=14 {
        samples.push((ts(2026, 3, d, 10, 0), 1.0));
        samples.push((ts(2026, 3, d, 11, 0), 1.0));
    }
    let b = batch(
        1,
        vec![
            series("a", "m", SampleKind::Gauge, &samples),
            series("b", "m", SampleKind::Gauge, &samples),
            series("b", "n", SampleKind::Gauge, &samples[samples.len() - 2..]),
        ],
    );
    store.apply(&b).await.unwrap();
    store.fold_all().unwrap();
    store
        .preallocate(&[DocKey {
            series: SeriesId::new("c", "m"),
            tier: Tier::Day,
            period_start: ts(2026, 3, 1, 0, 0),
        }])
        .await
        .unwrap();
    // Keep hour docs starting at or after 11:00 today (1 h + slack), and
    // day docs starting at or after 03-12.
    let retention = Retention {
        hour_s: HOUR_S,
        day_s: 2 * DAY_S + 12 * HOUR_S,
    };
    let deleted = store.sweep_expired(now, retention).unwrap();
    // Hour docs: a and b have 10 each, 1 kept; b/n has 2, 1 kept.
    // Day docs: a and b have 5 each, 3 kept; b/n has 1, kept; c has 1, gone.
    assert_eq!(deleted, (9 + 9 + 1) + (2 + 2 + 1));
    for s in ["a", "b"] {
        let mut q = query(
            Tier::Hour,
            Resolution::Hour,
            ts(2026, 3, 1, 0, 0),
            now + DAY_S,
        );
        q.series = SeriesId::new(s, "m");
        let hours = read(&store, q.clone()).await;
        assert_eq!(
            hours.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![ts(2026, 3, 14, 11, 0)]
        );
        q.tier = Tier::Day;
        let days = read(&store, q.clone()).await;
        assert_eq!(
            days.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![
                ts(2026, 3, 12, 0, 0),
                ts(2026, 3, 13, 0, 0),
                ts(2026, 3, 14, 0, 0)
            ]
        );
        for day in [10, 11] {
            assert!(raw_blocks(&store, s, "m", ts(2026, 3, day, 0, 0)).is_empty());
        }
        assert_eq!(raw_blocks(&store, s, "m", ts(2026, 3, 12, 0, 0)).len(), 2);
    }
    assert!(raw_blocks(&store, "c", "m", ts(2026, 3, 1, 0, 0)).is_empty());
    // Nothing more to do the second time.
    assert_eq!(store.sweep_expired(now, retention).unwrap(), 0);
    // The kept documents still hold their data.
    let mut q = query(Tier::Day, Resolution::Minute, ts(2026, 3, 14, 0, 0), now);
    q.series = SeriesId::new("b", "n");
    assert_eq!(read(&store, q).await[0].slots.len(), 2);
}

/// The daemon's sweep every minute looks only when a period may have
/// expired since its last look, which is at least hourly: a document a late
/// sample made in an expired period waits for that, then goes.
#[tokio::test]
async fn the_minutely_sweep_looks_only_when_a_period_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_direct(&dir);
    let retention = Retention {
        hour_s: HOUR_S,
        day_s: 10 * DAY_S,
    };
    let id = std::cell::Cell::new(0);
    let hour_doc = |s: &str, start: i64| {
        id.set(id.get() + 1);
        let b = batch(
            id.get(),
            vec![series(s, "m", SampleKind::Gauge, &[(start, 1.0)])],
        );
        store.inner.apply(&std::sync::Arc::new(b)).unwrap();
    };
    let (ten, eleven) = (ts(2026, 3, 14, 10, 0), ts(2026, 3, 14, 11, 0));
    hour_doc("a", ten);
    // 11:30 with 1 h retention: the 10:00 hour has expired.
    let now = ts(2026, 3, 14, 11, 30);
    assert_eq!(
        store
            .swept
            .sweep_if_due(&store.inner, now, retention)
            .unwrap(),
        1
    );
    // A late sample for 10:00, and one for 11:00, which has not expired.
    hour_doc("b", ten);
    hour_doc("c", eleven);
    for later in [60, 1_740] {
        assert_eq!(
            store
                .swept
                .sweep_if_due(&store.inner, now + later, retention)
                .unwrap(),
            0
        );
    }
    // 12:00:01: the 11:00 hour has expired too, so the sweep looks.
    let deleted = store
        .swept
        .sweep_if_due(&store.inner, now + 1_801, retention)
        .unwrap();
    assert_eq!(deleted, 2, "b's 10:00 and c's 11:00");
    assert_eq!(
        store
            .swept
            .sweep_if_due(&store.inner, now + 1_861, retention)
            .unwrap(),
        0
    );
    // What the skipped looks would have found is all gone.
    assert_eq!(store.sweep_expired(now + 1_861, retention).unwrap(), 0);
}
