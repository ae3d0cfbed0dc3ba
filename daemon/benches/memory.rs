//! What one tracked series costs in memory, component by component: the
//! aggregator's series table, a drained flush batch (what stays in flight
//! until the store applies it), what the catalog writer keeps once the
//! store holds a flush's entries (of the aggregator's series, nothing:
//! their marks are in the series table), the group rollups' state, and
//! what the aggregator keeps more for a series once a read asks for it.
//!
//! ```text
//! cargo bench -p tallyd --bench memory
//! TALLY_BENCH_SERIES=1000000 cargo bench -p tallyd --bench memory
//! ```
//!
//! Live heap bytes are counted by an instrumented global allocator around
//! the system's (`stats_alloc`): each figure is the growth of live bytes across one step,
//! divided by the series. The daemon itself runs on jemalloc, whose
//! size classes and retained pages come on top (peak RSS in the real
//! time benchmark includes them, the write-ahead log, the store and the
//! gRPC buffers). Fleet: `src-NNNNNN` sources of 20 gauge metrics, one
//! sample each, unlabelled, or with `TALLY_BENCH_LABELS=1` a `mode` label
//! of 10 values per metric (W2's shape).

// A benchmark that cannot set up panics: there is nothing to measure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tally::aggregator::{Aggregator, AggregatorConfig, RecentWanted, SeriesBatch};
use tally::catalog::CatalogWriter;
use tally::ingest::IngestConfig;
use tally::labels::Labels;
use tally::model::{SampleKind, SeriesRef};
use tally::rollup::{RollupConfig, Rollups};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes now.
fn live() -> isize {
    let s = Region::new(GLOBAL).initial();
    // A reallocation's growth is in `bytes_allocated` (and its shrinking
    // in `bytes_deallocated`) already; `bytes_reallocated` repeats it.
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

const METRICS: usize = 20;
/// 2026-11-22T10:10:00Z.
const NOW_MS: i64 = 1_795_342_200_000;

fn main() {
    let series: usize = std::env::var("TALLY_BENCH_SERIES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            400_000
        } else {
            2_000
        });
    let labelled = std::env::var("TALLY_BENCH_LABELS").is_ok_and(|v| v == "1");
    let per = |bytes: isize| bytes as f64 / series as f64;

    // The fleet's names, built before anything is measured.
    let combos = if labelled { 10 } else { 1 };
    let names: Vec<(String, String, String)> = (0..series)
        .map(|i| {
            let labels = if labelled {
                let value = format!("m{}", i % combos);
                Labels::from_pairs([("mode", value.as_str())], 16)
                    .expect("valid labels")
                    .as_str()
                    .to_string()
            } else {
                String::new()
            };
            (
                format!("src-{:06}", i / (METRICS * combos)),
                format!("metric_{:02}", (i / combos) % METRICS),
                labels,
            )
        })
        .collect();
    let ts = [NOW_MS];
    let values = [1.0];

    let before = live();
    // With each series' catalog mark, as the daemon runs.
    let agg = Aggregator::new(
        &AggregatorConfig::default(),
        &IngestConfig {
            max_series: series * 2,
            max_series_per_source: series * 2,
            lateness_window: Duration::from_secs(3600),
            ..IngestConfig::default()
        },
    )
    .with_catalog(Duration::from_secs(600));
    for chunk in names.chunks(5_000) {
        let batches: Vec<SeriesBatch<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, (s, m, l))| SeriesBatch {
                labels: l,
                source: s,
                metric: m,
                kind: Some(SampleKind::Gauge),
                timestamps_ms: &ts,
                values: &values,
                start_times_ms: &[],
                source_index: 0,
                series_index: i as u32,
            })
            .collect();
        let out = agg.ingest(&batches, NOW_MS);
        assert_eq!(out.accepted, chunk.len() as u64);
    }
    let aggregator = live() - before;

    let before = live();
    let drained = agg.drain(None);
    assert_eq!(drained.len(), series);
    let batch = live() - before;

    let before = live();
    let catalog = CatalogWriter::new(Duration::from_secs(600));
    let due = catalog.due(&drained);
    catalog.recorded(due);
    let catalog_bytes = live() - before;

    // The rollups take the batch and give it back with their series added;
    // what they keep is what is left once that is dropped, counted against
    // the batch they took.
    let before = live();
    let rollups = Rollups::new(RollupConfig::default()).expect("default rollups");
    let expanded = rollups.expand(drained);
    let rollup_series = expanded.len() - series;
    drop(expanded);
    let rollup_bytes = live() - before + batch;

    // A PromQL read at the right edge of every series: each starts keeping
    // its recent samples and minute steps (what a series a live dashboard
    // or a rule reads costs more; other reads start none).
    let before = live();
    for (s, m, l) in &names {
        let key = SeriesRef {
            source: s,
            metric: m,
            labels: l,
        };
        std::hint::black_box(agg.pending_and_recent(key, RecentWanted::Yes));
    }
    let read_bytes = live() - before;

    println!(
        "\nMemory per tracked series: {series} series ({}), one sample each; live heap bytes\n",
        if labelled {
            "20 metrics x 10 `mode` values per source"
        } else {
            "20 unlabelled metrics per source"
        }
    );
    println!("| component | bytes per series |");
    println!("|---|---|");
    println!(
        "| aggregator (series table, ids, pending minute) | {:.0} |",
        per(aggregator)
    );
    println!(
        "| one drained flush batch (in flight until applied) | {:.0} |",
        per(batch)
    );
    println!(
        "| catalog writer (its record of what the store's catalog holds; the aggregator's series have their marks in the series table) | {:.0} |",
        per(catalog_bytes)
    );
    println!(
        "| group rollups (default groups; {rollup_series} rollup series kept) | {:.0} |",
        per(rollup_bytes)
    );
    println!(
        "| aggregator, more once a read asked for the series (recent samples, minute steps) | {:.0} |",
        per(read_bytes)
    );
    std::hint::black_box((&agg, &catalog, &rollups));
}
