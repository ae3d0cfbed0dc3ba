//! Aggregator throughput (samples/s on one core) and flush cost per active
//! series. Run with `cargo bench -p tallyd --bench aggregator`; figures and
//! the machine they came from are in BENCHMARKS.md.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tally::aggregator::{Aggregator, AggregatorConfig, BaselineLog, RecentWanted, SeriesBatch};
use tally::ingest::IngestConfig;
use tally::model::{FlushBatch, FlushId, SampleKind, SeriesRef};
use tally::rollup::{RollupConfig, Rollups};
use tally::store::embedded::EmbeddedStore;
use tally::store::Store;

const SOURCES: usize = 1_000;
const METRICS: usize = 20;
/// 2026-11-22T00:00:00Z in milliseconds.
const T0: i64 = 1_795_305_600_000;

struct Fleet {
    names: Vec<(String, String, SampleKind)>,
    /// Each series' label encoding (empty when unlabelled).
    labels: Vec<String>,
}

impl Fleet {
    /// A third of the metrics are cumulative counters when `cumulative`;
    /// otherwise gauges and delta counters alternate. (A benchmark that
    /// replays the same timestamps cannot feed a cumulative counter more
    /// than one sample per round without going back in time.)
    fn new(cumulative: bool) -> Fleet {
        let kinds = if cumulative {
            [
                SampleKind::Gauge,
                SampleKind::DeltaCounter,
                SampleKind::CumulativeCounter,
            ]
        } else {
            [
                SampleKind::Gauge,
                SampleKind::DeltaCounter,
                SampleKind::Gauge,
            ]
        };
        let names = (0..SOURCES)
            .flat_map(|s| {
                (0..METRICS).map(move |m| {
                    (
                        format!("server-{s:05}"),
                        format!("metric_{m:02}"),
                        kinds[m % 3],
                    )
                })
            })
            .collect();
        Fleet {
            labels: vec![String::new(); SOURCES * METRICS],
            names,
        }
    }

    /// W2's shape: 500 sources × 20 metrics × 10 label sets (`cpu` × `mode`)
    /// = 100,000 series, gauges and delta counters.
    fn labelled() -> Fleet {
        let mut names = Vec::new();
        let mut labels = Vec::new();
        for s in 0..500 {
            for m in 0..METRICS {
                for l in 0..10 {
                    let kind = [SampleKind::Gauge, SampleKind::DeltaCounter][m % 2];
                    names.push((format!("server-{s:05}"), format!("metric_{m:02}"), kind));
                    labels.push(format!("cpu=\"{}\",mode=\"m{}\"", l / 5, l % 5));
                }
            }
        }
        Fleet { names, labels }
    }
}

/// One request per second of the whole fleet: `per_series` samples of every
/// series, `step_ms` apart, starting at `t0`.
fn requests(fleet: &Fleet, per_series: usize, t0: i64) -> Vec<(Vec<i64>, Vec<f64>)> {
    fleet
        .names
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let ts: Vec<i64> = (0..per_series).map(|k| t0 + k as i64 * 1000).collect();
            let vs: Vec<f64> = (0..per_series).map(|k| (i * 7 + k * 13) as f64).collect();
            (ts, vs)
        })
        .collect()
}

fn batches<'a>(fleet: &'a Fleet, data: &'a [(Vec<i64>, Vec<f64>)]) -> Vec<SeriesBatch<'a>> {
    fleet
        .names
        .iter()
        .zip(data)
        .enumerate()
        .map(|(i, ((s, m, k), (ts, vs)))| SeriesBatch {
            labels: &fleet.labels[i],
            source: s,
            metric: m,
            kind: Some(*k),
            timestamps_ms: ts,
            values: vs,
            start_times_ms: &[],
            source_index: (i / METRICS) as u32,
            series_index: (i % METRICS) as u32,
        })
        .collect()
}

fn aggregator() -> Aggregator {
    Aggregator::new(
        &AggregatorConfig { shards: 8 },
        &IngestConfig {
            lateness_window: std::time::Duration::from_millis((i64::MAX / 4) as u64),
            max_future_skew: std::time::Duration::from_millis((i64::MAX / 4) as u64),
            ..IngestConfig::default()
        },
    )
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    g.measurement_time(Duration::from_secs(5));
    for per_series in [1usize, 10] {
        let fleet = Fleet::new(per_series == 1);
        let data = requests(&fleet, per_series, T0);
        let b = batches(&fleet, &data);
        let samples = (fleet.names.len() * per_series) as u64;
        g.throughput(Throughput::Elements(samples));
        for read in [false, true] {
            // A warm aggregator: every series known, as in steady state;
            // with `read`, each series read once by PromQL's kind of read,
            // so its recent samples are kept (as for the series live
            // dashboards and rules ask for).
            let agg = aggregator();
            agg.ingest(&b, T0);
            if read {
                for (s, m, _) in &fleet.names {
                    agg.pending_and_recent(SeriesRef::new(s, m), RecentWanted::Yes);
                }
            }
            let name = format!("20k_series_x{per_series}_samples");
            let name = if read { format!("{name}_read") } else { name };
            g.bench_function(name, |bench| {
                bench.iter(|| {
                    let out = agg.ingest(&b, T0);
                    assert_eq!(out.rejected, 0);
                    // Keep memory flat across iterations.
                    if agg.pending_slots() > 1_000_000 {
                        agg.drain(None);
                    }
                })
            });
        }
    }
    // W2's fleet in requests of 5,000 series, as the load generator sends
    // it: the series table (100,000 entries) outgrows the caches.
    let fleet = Fleet::labelled();
    let data = requests(&fleet, 1, T0);
    let b = batches(&fleet, &data);
    g.throughput(Throughput::Elements(fleet.names.len() as u64));
    let agg = aggregator();
    agg.ingest(&b, T0);
    g.bench_function("100k_labelled_series_x1_samples", |bench| {
        bench.iter(|| {
            for request in b.chunks(5_000) {
                let out = agg.ingest(request, T0);
                assert_eq!(out.rejected, 0);
            }
            if agg.pending_slots() > 1_000_000 {
                agg.drain(None);
            }
        })
    });
    g.finish();
}

fn flush(c: &mut Criterion) {
    let fleet = Fleet::new(true);
    let data = requests(&fleet, 1, T0);
    let b = batches(&fleet, &data);
    let series = fleet.names.len() as u64;
    let mut g = c.benchmark_group("flush");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(series));

    // What a flush tick costs before the store: the drain (the store
    // groups the minutes into document updates itself, as it writes).
    g.bench_function("drain_20k_series", |bench| {
        let agg = aggregator();
        bench.iter_batched(
            || {
                agg.ingest(&b, T0);
            },
            |()| agg.drain(None),
            BatchSize::PerIteration,
        )
    });

    // W2's fleet drained and summed into the `all` group's rollup series
    // (one per metric and label set: 200), as every flush does by default.
    let labelled = Fleet::labelled();
    let data = requests(&labelled, 1, T0);
    let agg = aggregator();
    agg.ingest(&batches(&labelled, &data), T0);
    let drained = agg.drain(None);
    let rollups = Rollups::new(RollupConfig::default()).unwrap();
    g.throughput(Throughput::Elements(drained.len() as u64));
    g.bench_function("rollup_expand_100k_labelled_series", |bench| {
        bench.iter_batched(
            || drained.clone(),
            |d| rollups.expand(d),
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Elements(series));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).expect("open store"));
    let agg = aggregator();
    let mut id = 0u64;
    g.bench_function("embedded_apply_20k_series", |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                agg.ingest(&b, T0);
                id += 1;
                // Drained with the series' hashes, as a flush is.
                let mut hashes = Vec::new();
                let series = agg.drain_into(Vec::new(), BaselineLog::Skip, 0, Some(&mut hashes));
                let batch = FlushBatch {
                    hashes,
                    id: FlushId(id),
                    series,
                    resumable: true,
                };
                let started = Instant::now();
                rt.block_on(store.apply(&batch)).expect("apply");
                total += started.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, ingest, flush);
criterion_main!(benches);
