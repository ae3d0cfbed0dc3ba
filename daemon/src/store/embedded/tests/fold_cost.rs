//! What a fold writes to the file, measured: an ignored run.

use std::time::Instant;

use std::sync::Arc;

use super::*;
use crate::model::{SampleKind, SeriesId, SeriesMinutes, HOUR_S};
use crate::store::Store;

/// Bytes this process has handed to storage so far (`/proc/self/io`; the
/// whole process, so run this test alone).
fn written_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").expect("/proc/self/io (Linux only)");
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("write_bytes in /proc/self/io")
}

/// Bytes written per folded series against how many series one fold
/// transaction takes, on a file that already holds an hour of the
/// fleet's documents, and on one that does not. The difference is about
/// two pages per series, most likely the neighbours' rewritten: a new
/// document's key sorts beside its series' previous one, and one such
/// value fills a B-tree page, so inserting it splits that page. Run with
/// `cargo test --release -p tallyd --lib store::embedded::tests::fold_cost -- --ignored --nocapture`
/// (alone: it counts the process's writes; a tmpfs counts none).
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn fold_bytes_per_series_by_transaction_size() {
    const FLEET: usize = 100_000;
    let t0 = ts(2026, 3, 14, 10, 0);
    let fleet_batch = |id: u64, t: i64| {
        batch(
            id,
            (0..FLEET)
                .map(|i| {
                    series(
                        &format!("src-{:06}", i / 20),
                        &format!("m_{:04}", i % 20),
                        SampleKind::Gauge,
                        &[(t, i as f64 + 0.5)],
                    )
                })
                .collect(),
        )
    };
    // The last run folds onto a file without the hour before: what a
    // fold's inserts cost when no document of the series sits beside them.
    for (per_txn, hour_before) in [(333, true), (2_000, true), (10_000, true), (2_000, false)] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        if hour_before {
            store.apply(&fleet_batch(1, t0 - HOUR_S)).await.unwrap();
            store.fold_all().unwrap();
        }
        for m in 0..5 {
            store
                .apply(&fleet_batch(2 + m as u64, t0 + 60 * m))
                .await
                .unwrap();
        }
        store.sync().unwrap();
        let before = written_bytes();
        let start = Instant::now();
        for _ in 0..FLEET.div_ceil(per_txn) {
            store.inner.fold_some(per_txn).unwrap();
        }
        store.sync().unwrap();
        let bytes = written_bytes() - before;
        println!(
            "{per_txn:>6} series a fold{}: {:>7.0} bytes written per series, {:>5.1} s, file {:.0} MB",
            if hour_before { "" } else { ", no hour before" },
            bytes as f64 / FLEET as f64,
            start.elapsed().as_secs_f64(),
            std::fs::metadata(store.path()).map_or(0, |m| m.len()) as f64 / 1e6
        );
    }
}

/// The file against its documents after a full hour of a fleet of gauges
/// (`gauge_minute`: 60 samples a minute at full precision), flushed a
/// minute at a time with the store's default settings (so folds to bring
/// memory down come too) and folded as a close folds them: what the
/// folds wrote, and what `tallyd store-usage` prints. Run as above.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn a_full_hour_of_a_fleet_on_file() {
    const FLEET: u64 = 100_000;
    let t0 = ts(2026, 3, 14, 10, 0);
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let names: Vec<_> = (0..FLEET)
        .map(|i| {
            Arc::new(SeriesId::new(
                &format!("src-{:06}", i / 20),
                &format!("m_{:04}", i % 20),
            ))
        })
        .collect();
    let started = Instant::now();
    for m in 0..60 {
        let series = names
            .iter()
            .zip(0..)
            .map(|(name, i)| SeriesMinutes {
                series: name.clone(),
                kind: SampleKind::Gauge,
                minutes: [(t0 / 60 + m as i64, gauge_minute(i, t0, m))]
                    .into_iter()
                    .collect(),
                catalog: crate::model::CatalogDue::Unknown,
            })
            .collect();
        store.apply(&batch(1 + m, series)).await.unwrap();
    }
    store.sync().unwrap();
    let before = written_bytes();
    store.fold_all().unwrap();
    store.sync().unwrap();
    let folds = written_bytes() - before;
    store.close().await.unwrap();
    drop(store);
    let usage = crate::store::embedded::file_usage(dir.path()).unwrap();
    println!(
        "{:.0} s; the close's folds wrote {:.0} bytes per series\n{usage}",
        started.elapsed().as_secs_f64(),
        folds as f64 / FLEET as f64
    );
}

/// Bytes written per new series when a fleet is first catalogued, in two
/// flushes' upserts (two thirds, then the rest), each in the flush
/// pipeline's parts: the entries in a drain's hash order, and in series
/// order as `CatalogWriter::due` gives them. Run as above.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn catalog_bytes_per_new_series() {
    use crate::flush::CATALOG_WRITE_ENTRIES;
    use crate::model::SeriesId;
    use crate::store::CatalogEntry;
    const FLEET: usize = 300_000;
    let t0 = ts(2026, 3, 14, 10, 0);
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    for sorted in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let mut entries: Vec<CatalogEntry> = (0..FLEET)
            .map(|i| CatalogEntry {
                series: SeriesId::new(&format!("src-{:06}", i / 20), &format!("m_{:04}", i % 20))
                    .into(),
                kind: SampleKind::Gauge,
                first_seen: t0,
                last_seen: t0,
            })
            .collect();
        entries.sort_by_key(|e| hasher.hash_one(&e.series));
        let (mut first, mut second): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .enumerate()
            .partition(|(i, _)| i % 3 != 0);
        if sorted {
            first.sort_by(|a, b| a.1.series.cmp(&b.1.series));
            second.sort_by(|a, b| a.1.series.cmp(&b.1.series));
        }
        let mut total = 0;
        for part in [first, second] {
            let part: Vec<CatalogEntry> = part.into_iter().map(|(_, e)| e).collect();
            store.sync().unwrap();
            let before = written_bytes();
            for chunk in part.chunks(CATALOG_WRITE_ENTRIES) {
                store.catalog_upsert(chunk).await.unwrap();
            }
            store.sync().unwrap();
            total += written_bytes() - before;
        }
        println!(
            "{}: {:.0} bytes written per new series, file {:.0} MB",
            if sorted { "series order" } else { "hash order" },
            total as f64 / FLEET as f64,
            std::fs::metadata(store.path()).map_or(0, |m| m.len()) as f64 / 1e6
        );
    }
}
