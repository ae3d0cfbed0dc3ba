//! A fleet-wide aggregate grouped by a label over workload W2's shape,
//! answered from the group rollup: 500 sources × 20 metrics × 10 label
//! sets (`mode="m0"`..`"m9"`) = 100,000 series in the embedded store, and
//! the `all` group's rollup, one series per metric and label set.
//!
//! ```text
//! cargo bench -p tallyd --bench label_rollups
//! ```
//!
//! The store is filled through the daemon's path (drained minutes, group
//! rollups added, applied as flush batches): the last hour of every series,
//! one flush. The measured read is what `sum by (mode)
//! (rate(m_00[1m]))` over the fleet asks the engine for: the aggregate of
//! one metric across the `all` group, per minute over the last hour,
//! grouped by `mode` (`/api/v1/aggregate?group=all&by=mode`). It reads the
//! ten rollup series of the metric, whatever the number of sources.

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally::aggregator::{Aggregator, AggregatorConfig};
use tally::flush::{FlushConfig, Pipeline};
use tally::ingest::IngestConfig;
use tally::labels::Labels;
use tally::model::{FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, Slot};
use tally::query::{Aggregate, AggregateQuery, QueryConfig, QueryEngine, Sources, Step, StepSpec};
use tally::rollup::{RollupConfig, Rollups};
use tally::store::embedded::{EmbeddedConfig, EmbeddedStore};
use tally::store::{CatalogEntry, Store};

const SOURCES: usize = 500;
const METRICS: usize = 20;
const LABEL_SETS: usize = 10;
const ITERATIONS: usize = 1_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One flush of the last hour of every series, rollups added; returns the
/// rollups, which know the label sets of their series.
async fn fill(store: &EmbeddedStore, now_minute: i64) -> Rollups {
    let rollups = Rollups::new(RollupConfig {
        all: true,
        max_series: 100_000,
        ..RollupConfig::default()
    })
    .unwrap();
    let modes: Vec<Labels> = (0..LABEL_SETS)
        .map(|k| Labels::from_pairs([("mode", format!("m{k}").as_str())], 16).unwrap())
        .collect();
    let mut drained = Vec::with_capacity(SOURCES * METRICS * LABEL_SETS);
    for i in 0..SOURCES {
        for j in 0..METRICS {
            for (k, mode) in modes.iter().enumerate() {
                let id = SeriesId::with_labels(
                    &format!("node-{i:03}"),
                    &format!("m_{j:02}"),
                    mode.clone(),
                );
                drained.push(SeriesMinutes {
                    catalog: tally::model::CatalogDue::Unknown,
                    series: Arc::new(id),
                    kind: SampleKind::DeltaCounter,
                    minutes: (now_minute - 60..now_minute)
                        .map(|m| (m, Slot::of(((i + j + k) % 7) as f64 + 1.0)))
                        .collect(),
                });
            }
        }
    }
    let started = Instant::now();
    let expanded = rollups.expand(drained);
    let batch = FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: FlushId(1),
        series: expanded.clone(),
    };
    store.apply(&batch).await.unwrap();
    let entries: Vec<CatalogEntry> = expanded
        .iter()
        .map(|s| CatalogEntry {
            series: s.series.clone(),
            kind: s.kind,
            first_seen: s.minutes[0].0 * 60,
            last_seen: s.minutes[s.minutes.len() - 1].0 * 60,
        })
        .collect();
    store.catalog_upsert(&entries).await.unwrap();
    println!(
        "filled: {} series x 1 h and their {} rollup series, in {:.1?}",
        SOURCES * METRICS * LABEL_SETS,
        METRICS * LABEL_SETS,
        started.elapsed()
    );
    rollups
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open_with(dir.path(), EmbeddedConfig::default()).unwrap());
        let now_minute = chrono::Utc::now().timestamp().div_euclid(60);
        let rollups = fill(&store, now_minute).await;
        let store: Arc<dyn Store> = store;
        let agg = Arc::new(Aggregator::new(&AggregatorConfig::default(), &IngestConfig::default()));
        let pipeline = Pipeline::new(agg.clone(), store.clone(), FlushConfig::default(), 1);
        let engine = QueryEngine::new(
            store,
            agg,
            Arc::new(rollups),
            pipeline.inflight().clone(),
            QueryConfig::default(),
            14 * 86_400,
        );
        let q = |j: usize| AggregateQuery {
            metric: format!("m_{j:02}"),
            sources: Sources::Group("all".into()),
            from: now_minute * 60 - 3600,
            to: now_minute * 60,
            step: StepSpec::Fixed(Step::MINUTE),
            aggregates: vec![Aggregate::Rate],
            use_rollup: true,
            labels: Vec::new(),
            by: vec!["mode".into()],
        };
        let first = engine.aggregate(&q(0)).await.unwrap();
        assert_eq!(first.rollup.as_deref(), Some("all"));
        assert_eq!(first.groups.len(), LABEL_SETS);
        assert!(first.groups.iter().all(|g| g.points.len() == 60));
        let mut t = Vec::with_capacity(ITERATIONS);
        for n in 0..ITERATIONS {
            let started = Instant::now();
            let r = engine.aggregate(&q(n % METRICS)).await.unwrap();
            t.push(started.elapsed());
            assert_eq!(r.groups.len(), LABEL_SETS);
        }
        t.sort();
        println!(
            "fleet-wide rate by mode, 1 h per minute, from the rollup (10 series of 500 sources): n={ITERATIONS} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            percentile(&t, 0.5).as_secs_f64() * 1e3,
            percentile(&t, 0.99).as_secs_f64() * 1e3,
            t.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        );
    });
}
