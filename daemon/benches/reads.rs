//! Dashboard read latency with the W1 fleet stored (20,000 series) in the
//! embedded store: a 24 h per-minute range of one series, a 30-day
//! per-hour range, a fleet aggregate over 1,000 sources from the group
//! rollup (and, for comparison, fanned out), and watch delivery delay.
//!
//! Run with `cargo bench -p tallyd --bench reads`; figures are in
//! BENCHMARKS.md. The store is filled through the same path the daemon
//! uses (drained minutes, group rollups added, applied as flush batches).

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use tally::catalog::CatalogWriter;
use tally::flush::{FlushConfig, Pipeline};
use tally::ingest::IngestConfig;
use tally::model::{FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, Slot};
use tally::query::{AggregateQuery, QueryConfig, QueryEngine, Selection, Sources, Step, StepSpec};
use tally::rollup::{RollupConfig, Rollups};
use tally::store::embedded::{EmbeddedConfig, EmbeddedStore};
use tally::store::Store;
use tally::watch::{WatchConfig, WatchHub};

const SOURCES: usize = 1_000;
const METRICS: usize = 20;
/// Series that also get 29 more days of history, for the 30-day read.
const LONG_HISTORY: usize = 100;
const ITERATIONS: usize = 500;

fn source(i: usize) -> String {
    format!("src-{i:04}")
}

fn metric(j: usize) -> String {
    format!("m_{j:02}")
}

/// One minute slot as sixty 1 Hz samples would leave it.
fn slot(i: usize, j: usize, minute: i64) -> Slot {
    let base = ((i * 7 + j * 13) as i64 + minute % 97) as f64;
    let mut s = Slot::of(base);
    for k in 1..60 {
        s.add_value(base + k as f64 * 0.5);
    }
    s
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<58} n={:<4} p50 {:>9.3} ms  p99 {:>9.3} ms  max {:>9.3} ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
}

async fn apply(
    store: &EmbeddedStore,
    rollups: &Rollups,
    id: &mut u64,
    minutes: Vec<SeriesMinutes>,
) {
    let expanded = rollups.expand(minutes);
    *id += 1;
    let batch = FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: FlushId(*id),
        series: expanded.clone(),
    };
    store.apply(&batch).await.expect("apply");
    let entries: Vec<_> = expanded
        .iter()
        .filter(|s| !Rollups::is_rollup_source(&s.series.source))
        .map(|s| tally::store::CatalogEntry {
            series: s.series.clone(),
            kind: s.kind,
            first_seen: s.minutes[0].0 * 60,
            last_seen: s.minutes[s.minutes.len() - 1].0 * 60,
        })
        .collect();
    store.catalog_upsert(&entries).await.expect("catalog");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        EmbeddedStore::open_with(dir.path(), EmbeddedConfig::default()).expect("open store"),
    );
    let rollups = Rollups::new(RollupConfig {
        all: true,
        max_series: 100_000,
        ..RollupConfig::default()
    })
    .expect("rollups");
    let now_minute = chrono::Utc::now().timestamp().div_euclid(60);
    let id = fill_store(&store, &rollups, now_minute).await;
    let (agg, pipeline, engine) = serve_reads(store, rollups, id);
    let now = now_minute * 60 + 30;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    bench_ranges(&engine, now, &mut rng).await;
    bench_fleet_aggregates(&engine, now, &mut rng).await;
    bench_watch_delivery(&engine, &agg, &pipeline, &mut rng).await;
}

/// Fills the store with the last 24 hours of all series and 29 more days
/// of some, ending at `now_minute`; returns the last flush id used.
async fn fill_store(store: &EmbeddedStore, rollups: &Rollups, now_minute: i64) -> u64 {
    let day_minutes = 24 * 60;
    let first = now_minute - day_minutes;
    let mut id = 0u64;
    let started = Instant::now();
    // The last 24 hours of all 20,000 series, an hour per flush.
    for hour in 0..24 {
        let lo = first + hour * 60;
        let mut batch = Vec::with_capacity(SOURCES * METRICS);
        for i in 0..SOURCES {
            for j in 0..METRICS {
                batch.push(SeriesMinutes {
                    catalog: tally::model::CatalogDue::Unknown,
                    series: Arc::new(SeriesId::new(&source(i), &metric(j))),
                    kind: SampleKind::Gauge,
                    minutes: (lo..lo + 60).map(|m| (m, slot(i, j, m))).collect(),
                });
            }
        }
        apply(store, rollups, &mut id, batch).await;
    }
    // 29 more days for some series, a day per flush.
    for day in 1..30 {
        let lo = first - day * day_minutes;
        let batch = (0..LONG_HISTORY)
            .map(|i| SeriesMinutes {
                catalog: tally::model::CatalogDue::Unknown,
                series: Arc::new(SeriesId::new(&source(i), &metric(0))),
                kind: SampleKind::Gauge,
                minutes: (lo..lo + day_minutes).map(|m| (m, slot(i, 0, m))).collect(),
            })
            .collect();
        apply(store, rollups, &mut id, batch).await;
    }
    println!(
        "filled: {} series x 24 h, {LONG_HISTORY} series x 30 d, rollup group `all`, in {:.1?}",
        SOURCES * METRICS,
        started.elapsed()
    );
    id
}

/// The aggregator, flush pipeline and query engine over the filled store,
/// wired as the daemon wires them; the pipeline goes on from flush `id`.
fn serve_reads(
    store: Arc<EmbeddedStore>,
    rollups: Rollups,
    id: u64,
) -> (Arc<Aggregator>, Arc<Pipeline>, Arc<QueryEngine>) {
    let agg = Arc::new(Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig::default(),
    ));
    let store_dyn: Arc<dyn Store> = store;
    let rollups = Arc::new(rollups);
    let pipeline = Arc::new(
        Pipeline::new(agg.clone(), store_dyn.clone(), FlushConfig::default(), id)
            .with_rollups(rollups.clone())
            .with_catalog(Arc::new(CatalogWriter::new(Duration::from_secs(600)))),
    );
    let engine = Arc::new(QueryEngine::new(
        store_dyn,
        agg.clone(),
        rollups,
        pipeline.inflight().clone(),
        QueryConfig::default(),
        14 * 86_400,
    ));
    (agg, pipeline, engine)
}

/// A fixed pseudo-random sequence, so that every run reads the same series.
struct XorShift(u64);

impl XorShift {
    /// The next number below `n`.
    fn pick(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Ranges of one random series: 24 h per minute, and 30 d per hour.
async fn bench_ranges(engine: &QueryEngine, now: i64, rng: &mut XorShift) {
    let mut t = Vec::new();
    for _ in 0..ITERATIONS {
        let (i, j) = (rng.pick(SOURCES), rng.pick(METRICS));
        let sel = Selection::exact(&source(i), &metric(j));
        let s = Instant::now();
        let r = engine
            .range(&sel, now - 86_400, now, StepSpec::Fixed(Step::MINUTE), &[])
            .await
            .expect("range");
        t.push(s.elapsed());
        assert!(r.series[0].points.len() >= 1_439);
    }
    report("range 24 h per minute, one series", t);

    let mut t = Vec::new();
    for _ in 0..ITERATIONS {
        let sel = Selection::exact(&source(rng.pick(LONG_HISTORY)), &metric(0));
        let s = Instant::now();
        let r = engine
            .range(
                &sel,
                now - 30 * 86_400,
                now,
                StepSpec::Fixed(Step::HOUR),
                &[],
            )
            .await
            .expect("range");
        t.push(s.elapsed());
        assert!(r.series[0].points.len() >= 719);
    }
    report("range 30 d per hour, one series", t);
}

/// A fleet aggregate over group `all`, from the rollup and fanned out over
/// every source, and a check that both give the same points.
async fn bench_fleet_aggregates(engine: &QueryEngine, now: i64, rng: &mut XorShift) {
    let fleet = |j: usize, use_rollup: bool| AggregateQuery {
        metric: metric(j),
        sources: Sources::Group("all".into()),
        from: now - 86_400,
        to: now,
        step: StepSpec::Fixed(Step::MINUTE),
        aggregates: vec![],
        use_rollup,
        labels: Vec::new(),
        by: Vec::new(),
    };
    let mut t = Vec::new();
    for _ in 0..ITERATIONS {
        let s = Instant::now();
        let r = engine
            .aggregate(&fleet(rng.pick(METRICS), true))
            .await
            .expect("aggregate");
        t.push(s.elapsed());
        assert!(r.rollup.is_some() && r.points.len() >= 1_439);
    }
    report(
        "fleet aggregate, 1,000 sources, 24 h per minute (rollup)",
        t,
    );

    let mut t = Vec::new();
    let mut check = None;
    for k in 0..10 {
        let s = Instant::now();
        let r = engine.aggregate(&fleet(0, false)).await.expect("aggregate");
        t.push(s.elapsed());
        assert_eq!(r.fanned_out, Some(SOURCES));
        if k == 0 {
            check = Some(r.points);
        }
    }
    report(
        "fleet aggregate, 1,000 sources, 24 h per minute (fan-out)",
        t,
    );
    let rolled = engine
        .aggregate(&fleet(0, true))
        .await
        .expect("aggregate")
        .points;
    let fanned = check.unwrap_or_default();
    let same = rolled.len() == fanned.len()
        && rolled.iter().zip(&fanned).all(|(a, b)| {
            a.t == b.t && a.n == b.n && (a.sum.unwrap_or(0.0) - b.sum.unwrap_or(0.0)).abs() < 1e-6
        });
    println!("rollup and fan-out agree on every point: {same}");
    assert!(same);
}

/// Watch delivery: a sample into the aggregator, until the subscriber has it.
async fn bench_watch_delivery(
    engine: &Arc<QueryEngine>,
    agg: &Aggregator,
    pipeline: &Pipeline,
    rng: &mut XorShift,
) {
    let hub = Arc::new(WatchHub::new(engine.clone(), WatchConfig::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let hub_task = tokio::spawn(hub.clone().run(stop.clone()));
    let mut sub = hub
        .subscribe(Selection::exact("live-1", "m_live"), 5)
        .await
        .expect("subscribe");
    let _snapshot = sub.events.recv().await;
    let mut t = Vec::new();
    for k in 0..40 {
        tokio::time::sleep(Duration::from_millis(rng.pick(1000) as u64)).await;
        let ts = chrono::Utc::now().timestamp_millis();
        let v = k as f64 + 1000.0;
        agg.ingest(
            &[SeriesBatch {
                labels: "",
                source: "live-1",
                metric: "m_live",
                kind: Some(SampleKind::Gauge),
                timestamps_ms: &[ts],
                values: &[v],
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            }],
            ts,
        );
        let s = Instant::now();
        loop {
            let ev = sub.events.recv().await.expect("watch event");
            if ev
                .series
                .iter()
                .flat_map(|s| &s.points)
                .any(|p| p.max == Some(v))
            {
                break;
            }
        }
        t.push(s.elapsed());
        // Keep the aggregator small: flush what is pending.
        if let Some(b) = pipeline.cut_batch() {
            let give_up = tokio_util::sync::CancellationToken::new();
            pipeline.apply(&b, &give_up).await;
        }
    }
    report("watch delivery delay (sample ingested -> subscriber)", t);
    stop.cancel();
    let _ = hub_task.await;
}
