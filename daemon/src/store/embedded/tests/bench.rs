//! A timing run of the flush path, ignored by default.

use std::time::{Duration, Instant};

use super::*;
use crate::model::{DocKey, FlushBatch, SampleKind, SeriesId, Tier, DAY_S, HOUR_S};
use crate::store::Store;

const SERIES: usize = 20_000;

/// The `i`-th of the run's series.
fn bench_series(i: usize) -> SeriesId {
    SeriesId::new(
        &format!("db-{:05}", i / 20),
        &format!("metric_{:02}", i % 20),
    )
}

/// Flush `id`: one sample for every series, in minute `minute` after `t0`.
fn bench_batch(id: u64, t0: i64, minute: i64) -> FlushBatch {
    batch(
        id,
        (0..SERIES)
            .map(|i| {
                let s = bench_series(i);
                series(
                    &s.source,
                    &s.metric,
                    SampleKind::Gauge,
                    &[(t0 + 60 * minute, i as f64)],
                )
            })
            .collect(),
    )
}

/// Every series' next hour and next day document.
fn bench_prealloc_keys(t0: i64) -> Vec<DocKey> {
    (0..SERIES)
        .flat_map(|i| {
            let series = bench_series(i);
            [
                DocKey {
                    series: series.clone(),
                    tier: Tier::Hour,
                    period_start: t0 + HOUR_S,
                },
                DocKey {
                    series,
                    tier: Tier::Day,
                    period_start: t0 - 10 * HOUR_S + DAY_S,
                },
            ]
        })
        .collect()
}

fn report(what: &str, d: Duration) {
    println!(
        "{what:<58} {:>8.1} ms  {:>6.2} µs/series",
        d.as_secs_f64() * 1e3,
        d.as_secs_f64() * 1e6 / SERIES as f64
    );
}

/// Flush cost per active series. Run with
/// `cargo test --release -p tallyd --lib store::embedded::tests::bench -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn bench_apply_20k_series_one_minute() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let t0 = ts(2026, 3, 14, 10, 0);
    let make = |id: u64, minute: i64| bench_batch(id, t0, minute);
    let keys = bench_prealloc_keys(t0);

    let file_mb = || {
        std::fs::metadata(store.path())
            .map(|m| m.len())
            .unwrap_or(0) as f64
            / 1e6
    };
    let b = make(1, 0);
    let start = Instant::now();
    let _ = b.clone();
    report("clone of the batch (part of apply)", start.elapsed());

    let start = Instant::now();
    let stats = store.apply(&b).await.unwrap();
    report(
        "apply #1: creates 20k hour + 20k day docs (non-durable)",
        start.elapsed(),
    );
    assert_eq!(stats.documents_written, 2 * SERIES);
    store.sync().unwrap();
    println!("file after #1 + sync: {:.0} MB", file_mb());
    for id in 2..=5 {
        let b = make(id, id as i64);
        let start = Instant::now();
        store.apply(&b).await.unwrap();
        report(
            &format!("apply #{id}: updates, key order (non-durable)"),
            start.elapsed(),
        );
    }
    println!("file after 4 non-durable applies: {:.0} MB", file_mb());
    let start = Instant::now();
    store.sync().unwrap();
    report("durable empty commit (fsync of the above)", start.elapsed());
    for id in 6..=9 {
        let mut b = make(id, id as i64);
        rand::seq::SliceRandom::shuffle(&mut b.series[..], &mut rand::rng());
        let start = Instant::now();
        store.apply(&b).await.unwrap();
        report(
            &format!("apply #{id}: updates, random order (non-durable)"),
            start.elapsed(),
        );
    }
    let b = make(10, 10);
    let start = Instant::now();
    store.inner.apply(&std::sync::Arc::new(b)).unwrap();
    let d = start.elapsed();
    let start = Instant::now();
    store.sync().unwrap();
    report("apply #10 without clone/spawn_blocking", d);
    report("apply #10 then durable commit", d + start.elapsed());
    println!("file after 10 applies: {:.0} MB", file_mb());

    let start = Instant::now();
    let stats = store.preallocate(&keys).await.unwrap();
    report("preallocate next hour + next day summary", start.elapsed());
    assert_eq!(stats.created, 2 * SERIES);
    let start = Instant::now();
    store.sync().unwrap();
    report("durable commit after preallocate", start.elapsed());
    println!("file after preallocate: {:.0} MB", file_mb());
}
