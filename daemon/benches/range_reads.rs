//! Read latency of a 24 h per-minute range of one series, on every store
//! this machine has, side by side in one run: the embedded store, FerretDB
//! 1.24 on SQLite (when Go is present; started as the tests start it), and
//! the server in `MONGODB_URI` when that is set.
//!
//! ```text
//! cargo bench -p tallyd --bench range_reads
//! TALLY_BENCH_SERIES=20 TALLY_BENCH_READS=300 cargo bench -p tallyd --bench range_reads
//! ```
//!
//! Each store gets `TALLY_BENCH_SERIES` series (default 10) with every
//! minute of 24 hours filled, written as the daemon writes them (one flush
//! per hour of data). A read is what the query engine asks the store for a
//! 24 h graph at 1-minute steps: the 25 hour documents the range touches,
//! every minute slot of them (`Store::read` at the hour tier, minute
//! resolution). Reads rotate over the series; p50 and p99 over
//! `TALLY_BENCH_READS` reads (default 200) are printed per store.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tally::config::MongoDbConfig;
use tally::model::{
    FlushBatch, FlushId, Resolution, SampleKind, SeriesId, SeriesMinutes, Slot, Tier, HOUR_S,
    MINUTE_S,
};
use tally::store::embedded::{EmbeddedConfig, EmbeddedStore};
use tally::store::mongodb::MongoStore;
use tally::store::{ReadQuery, Store};
use tally_testkit::mongo::{target_of_blocking, TargetKind};

/// 2026-11-22T00:00:00Z: the 24 h end at the next midnight.
const DAY0: i64 = 1_795_305_600;
const RETENTION: (u64, u64) = (50 * 365 * 86_400, 50 * 365 * 86_400);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn series(i: usize) -> SeriesId {
    SeriesId::new(&format!("src-{i:03}"), "m_00")
}

/// One flush per hour of data, every series' sixty minutes in it.
fn batches(n: usize) -> Vec<FlushBatch> {
    (0..24)
        .map(|h| {
            let series = (0..n)
                .map(|i| {
                    let first = (DAY0 + h * HOUR_S) / MINUTE_S;
                    let minutes = (first..first + 60)
                        .map(|m| (m, Slot::of((i as i64 + m % 60) as f64)))
                        .collect();
                    SeriesMinutes {
                        catalog: tally::model::CatalogDue::Unknown,
                        series: std::sync::Arc::new(series(i)),
                        kind: SampleKind::Gauge,
                        minutes,
                    }
                })
                .collect();
            FlushBatch {
                hashes: Vec::new(),
                resumable: true,
                id: FlushId(h as u64 + 1),
                series,
            }
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn bench(name: &str, store: &dyn Store, n: usize, reads: usize) {
    let started = Instant::now();
    for b in batches(n) {
        store.apply(&b).await.unwrap();
    }
    let fill = started.elapsed();
    let mut times = Vec::with_capacity(reads);
    for r in 0..reads {
        let q = ReadQuery {
            series: series(r % n),
            tier: Tier::Hour,
            resolution: Resolution::Minute,
            from: DAY0 + 30 * MINUTE_S,
            to: DAY0 + 86_400 + 30 * MINUTE_S,
        };
        let t = Instant::now();
        let docs = store.read(&q).await.unwrap();
        times.push(t.elapsed());
        let slots: usize = docs.iter().map(|d| d.slots.len()).sum();
        assert_eq!(slots, 24 * 60 - 30, "{name}: every minute of the range");
    }
    times.sort();
    println!(
        "{name:<10} fill {n} series × 24 h: {:>8.1} s   24 h per-minute read: p50 {:>8.3} ms  p99 {:>8.3} ms  (n={reads})",
        fill.as_secs_f64(),
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
    );
}

async fn mongo(kind: TargetKind, name: &str, n: usize, reads: usize) {
    let Some(target) = tokio::task::spawn_blocking(move || target_of_blocking(kind))
        .await
        .unwrap()
    else {
        println!("{name:<10} skipped (see above)");
        return;
    };
    let cfg = MongoDbConfig {
        uri: target.uri.clone(),
        database: target.database.clone(),
        timeout: Duration::from_secs(120),
        ..MongoDbConfig::default()
    };
    let store = MongoStore::connect(&cfg, RETENTION, "bench").await.unwrap();
    bench(name, &store, n, reads).await;
    target.cleanup().await;
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // and must not run a minutes-long measurement.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (n, reads) = (
        env_or("TALLY_BENCH_SERIES", 10),
        env_or("TALLY_BENCH_READS", 200),
    );
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedStore::open_with(dir.path(), EmbeddedConfig::default()).unwrap();
        bench("embedded", &embedded, n, reads).await;
        mongo(TargetKind::FerretDb, "ferretdb", n, reads).await;
        if std::env::var_os("MONGODB_URI").is_some() {
            mongo(TargetKind::Uri, "mongodb", n, reads).await;
        }
    });
}
