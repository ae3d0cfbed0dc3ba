//! The fleet-wide CPU graph of every node_exporter dashboard through the
//! PromQL engine: `sum by (mode) (rate(node_cpu_seconds_total[5m]))` over
//! 16,000 series (1,000 hosts × 2 CPUs × 8 modes), 24 hours at a 60 s
//! step, on the embedded store.
//!
//! ```text
//! cargo bench -p tallyd --bench promql
//! ```
//!
//! The store is filled through the daemon's path (drained minutes, group
//! rollups added, applied as flush batches, catalogued): 24 hours of every
//! series, one batch an hour, each minute as a 15 s scrape folds it (four
//! samples, their increases, the last raw value). Measured:
//! * the query as a dashboard sends it: no source matcher, so the `all`
//!   group's 16 rollup series (one per CPU and mode) serve it;
//! * the same query fanned out to the 16,000 members (a source matcher
//!   `instance=~"host-.*"` is not a rollup group), with `query.max_fanout`
//!   and `query.max_total_points` raised so it is admitted.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally::aggregator::{Aggregator, AggregatorConfig};
use tally::flush::{FlushConfig, Pipeline};
use tally::ingest::IngestConfig;
use tally::labels::Labels;
use tally::model::{FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, Slot};
use tally::promql::{evaluate, Context, Data, LabelScheme, NameCache, Request};
use tally::query::{QueryConfig, QueryEngine};
use tally::rollup::{RollupConfig, Rollups};
use tally::store::embedded::{EmbeddedConfig, EmbeddedStore};
use tally::store::{CatalogEntry, Store};

const HOSTS: usize = 1_000;
const CPUS: usize = 2;
const MODES: [&str; 8] = [
    "idle", "user", "system", "iowait", "irq", "softirq", "steal", "nice",
];
const HOURS: i64 = 24;
const ROLLUP_RUNS: usize = 20;
const FAN_OUT_RUNS: usize = 3;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A minute of a counter rising `per_s` a second from `base`, scraped
/// every 15 s.
fn minute(minute: i64, base: f64, per_s: f64) -> Slot {
    let inc = per_s * 15.0;
    Slot {
        n: 4,
        sum: 4.0 * inc,
        min: inc,
        max: inc,
        last: base + per_s * ((minute * 60 + 45) as f64),
        last_ms: minute * 60_000 + 45_000,
    }
}

/// 24 hours of every series, one flush batch an hour with its rollups;
/// returns the rollups, which know the label sets of their series.
async fn fill(store: &EmbeddedStore, end_minute: i64) -> Rollups {
    let rollups = Rollups::new(RollupConfig {
        all: true,
        max_series: 100_000,
        ..RollupConfig::default()
    })
    .unwrap();
    let sets: Vec<(Labels, f64)> = (0..CPUS)
        .flat_map(|c| {
            MODES.iter().enumerate().map(move |(m, mode)| {
                let labels =
                    Labels::from_pairs([("cpu", c.to_string().as_str()), ("mode", mode)], 16)
                        .unwrap();
                (labels, 1.0 / (m as f64 + 1.0))
            })
        })
        .collect();
    let ids: Vec<(Arc<SeriesId>, f64)> = (0..HOSTS)
        .flat_map(|h| {
            sets.iter().map(move |(l, per_s)| {
                let id = SeriesId::with_labels(
                    &format!("host-{h:04}"),
                    "node_cpu_seconds_total",
                    l.clone(),
                );
                (Arc::new(id), per_s * (1.0 + h as f64 / HOSTS as f64))
            })
        })
        .collect();
    let started = Instant::now();
    let first = end_minute - HOURS * 60;
    for hour in 0..HOURS {
        let minutes = first + hour * 60..first + (hour + 1) * 60;
        let drained: Vec<SeriesMinutes> = ids
            .iter()
            .map(|(id, per_s)| SeriesMinutes {
                catalog: tally::model::CatalogDue::Unknown,
                series: id.clone(),
                kind: SampleKind::CumulativeCounter,
                minutes: minutes
                    .clone()
                    .map(|m| (m, minute(m, 1e6, *per_s)))
                    .collect(),
            })
            .collect();
        let expanded = rollups.expand(drained);
        let batch = FlushBatch {
            hashes: Vec::new(),
            resumable: true,
            id: FlushId(hour as u64 + 1),
            series: expanded,
        };
        store.apply(&batch).await.unwrap();
        if hour == HOURS - 1 {
            let entries: Vec<CatalogEntry> = batch
                .series
                .iter()
                .map(|s| CatalogEntry {
                    series: s.series.clone(),
                    kind: s.kind,
                    first_seen: first * 60,
                    last_seen: end_minute * 60,
                })
                .collect();
            for part in entries.chunks(20_000) {
                store.catalog_upsert(part).await.unwrap();
            }
        }
    }
    println!(
        "filled: {} series x {HOURS} h of minutes and their rollups, in {:.1?}",
        ids.len(),
        started.elapsed()
    );
    rollups
}

async fn run(
    engine: &QueryEngine,
    q: &str,
    end_ms: i64,
    runs: usize,
) -> (Vec<Duration>, Vec<String>) {
    let (names, scheme) = (NameCache::new(), LabelScheme::new("instance"));
    let ctx = Context {
        engine,
        names: &names,
        scheme: &scheme,
    };
    let req = Request {
        query: q.to_string(),
        start_ms: end_ms - HOURS * 3_600_000,
        end_ms,
        step_ms: 60_000,
        lookback_ms: 300_000,
    };
    let mut t = Vec::with_capacity(runs);
    let mut rollups = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let a = evaluate(ctx, &req).await.unwrap();
        t.push(started.elapsed());
        let Data::Matrix(m) = a.data else {
            panic!("not a matrix")
        };
        assert_eq!(m.len(), MODES.len(), "one series per mode");
        // Every step but the first, whose window (the five minutes before
        // the data begin) holds nothing: Prometheus too has no rate there.
        assert!(
            m.iter().all(|(_, p)| p.len() == 1_440),
            "every step but the first: {:?}",
            m.iter()
                .map(|(_, p)| (p.len(), p.first().map(|x| x.0), p.last().map(|x| x.0)))
                .collect::<Vec<_>>()
        );
        rollups = a.rollups;
    }
    t.sort();
    (t, rollups)
}

fn report(what: &str, t: &[Duration], rollups: &[String]) {
    let served = if rollups.is_empty() {
        "fan-out".to_string()
    } else {
        format!("rollup {}", rollups.join(","))
    };
    println!(
        "{what} [{served}]: n={} p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        t.len(),
        percentile(t, 0.5).as_secs_f64() * 1e3,
        percentile(t, 0.99).as_secs_f64() * 1e3,
        t.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(EmbeddedStore::open_with(dir.path(), EmbeddedConfig::default()).unwrap());
        let end_minute = chrono::Utc::now().timestamp().div_euclid(60);
        let rollups = Arc::new(fill(&store, end_minute).await);
        let store: Arc<dyn Store> = store;
        let agg = Arc::new(Aggregator::new(
            &AggregatorConfig::default(),
            &IngestConfig::default(),
        ));
        let pipeline = Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 1);
        let engine = |limits| {
            QueryEngine::new(
                store.clone(),
                agg.clone(),
                rollups.clone(),
                pipeline.inflight().clone(),
                limits,
                14 * 86_400,
            )
        };
        let end_ms = end_minute * 60_000;
        let dashboard = engine(QueryConfig::default());
        let q = "sum by (mode) (rate(node_cpu_seconds_total[5m]))";
        let (t, served) = run(&dashboard, q, end_ms, ROLLUP_RUNS).await;
        report(q, &t, &served);
        assert_eq!(served, ["all"]);
        let wide = engine(QueryConfig {
            max_fanout: 20_000,
            max_total_points: 50_000_000,
            ..QueryConfig::default()
        });
        let q = "sum by (mode) (rate(node_cpu_seconds_total{instance=~\"host-.*\"}[5m]))";
        let (t, served) = run(&wide, q, end_ms, FAN_OUT_RUNS).await;
        report(q, &t, &served);
        assert!(served.is_empty());
    });
}
