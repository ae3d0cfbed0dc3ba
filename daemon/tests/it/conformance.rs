//! The fold property every store must satisfy, shared by the stores'
//! conformance tests (`fold_property` for the embedded store,
//! `mongo_store` for MongoDB).
//!
//! Property: for any set of accepted samples, in any order, split into any
//! batches and flushes (with flushes replayed as after an ambiguous
//! failure), every stored slot equals what a naive reference computes, and
//! every hour and day running slot equals the sum of its minutes.
//!
//! Values are small integers so that sums are exact in any order and the
//! comparison can be bit-for-bit.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use tally::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use tally::ingest::IngestConfig;
use tally::labels::Labels;
use tally::model::{
    minute_of_ms, FlushBatch, FlushId, Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S,
    MINUTE_S,
};
use tally::store::{ReadQuery, Store};

/// A UTC midnight (2026-03-01, the day after a month end); samples span the
/// 90 minutes either side of it, so hour, day and month boundaries are crossed.
pub const MIDNIGHT: i64 = 1_772_323_200;
pub const SOURCES: [&str; 2] = ["db-1", "db-2"];
pub const METRICS: [&str; 2] = ["op_counter", "connections"];
/// Label sets (canonical encodings): none, and two that an encoding
/// without escaping or without its closing brace could confuse with each
/// other or with the unlabelled series.
pub const LABELS: [&str; 3] = ["", r#"mode="idle""#, r#"mode="idle\"|x""#];
/// Series: every source × metric × label set.
pub const SERIES_COUNT: usize = 12;

#[derive(Debug, Clone)]
pub struct Sample {
    pub series: usize,
    pub ts_ms: i64,
    pub value: f64,
}

pub fn series_name(i: usize) -> (&'static str, &'static str, &'static str) {
    (SOURCES[i % 2], METRICS[(i / 2) % 2], LABELS[i / 4])
}

pub fn series_id(i: usize) -> SeriesId {
    let (source, metric, labels) = series_name(i);
    let labels = Labels::from_encoded(labels).expect("canonical");
    SeriesId::with_labels(source, metric, labels)
}

fn sample() -> impl Strategy<Value = Sample> {
    (
        0usize..SERIES_COUNT,
        -90 * 60_000i64..90 * 60_000,
        -1000i32..1000,
    )
        .prop_map(|(series, off, v)| Sample {
            series,
            ts_ms: MIDNIGHT * 1000 + off,
            value: v as f64,
        })
}

#[derive(Debug, Clone)]
pub struct Case {
    pub samples: Vec<Sample>,
    /// Cut points splitting the samples into ingest batches.
    pub batch_sizes: Vec<usize>,
    /// After which batch each flush happens (plus one final flush).
    pub flush_after: Vec<bool>,
    /// Which flushes are applied twice.
    pub replay: Vec<bool>,
}

/// Generates cases of 1 to 299 samples.
pub fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(sample(), 1..300).prop_flat_map(|samples| {
        let n = samples.len();
        (
            Just(samples),
            prop::collection::vec(1usize..40, n),
            prop::collection::vec(any::<bool>(), n),
            prop::collection::vec(any::<bool>(), n + 1),
        )
            .prop_map(|(samples, batch_sizes, flush_after, replay)| Case {
                samples,
                batch_sizes,
                flush_after,
                replay,
            })
    })
}

fn agg() -> Aggregator {
    Aggregator::new(
        &AggregatorConfig { shards: 3 },
        &IngestConfig {
            // Everything in the generated window is acceptable.
            lateness_window: std::time::Duration::from_millis((10 * DAY_S * 1000) as u64),
            max_future_skew: std::time::Duration::from_millis((10 * DAY_S * 1000) as u64),
            ..IngestConfig::default()
        },
    )
}

/// Ingests the case through a real aggregator and applies its flushes.
pub async fn run_case(store: Arc<dyn Store>, case: &Case) {
    let agg = agg();
    let now_ms = MIDNIGHT * 1000;
    let mut next_id = store.last_flush_id().await.unwrap() + 1;
    let mut flushes = 0;
    let mut flush = |agg: &Aggregator| {
        let drained = agg.drain(None);
        let batch = FlushBatch {
            hashes: Vec::new(),
            resumable: true,
            id: FlushId(next_id),
            series: drained,
        };
        next_id += 1;
        batch
    };
    let mut rest = &case.samples[..];
    let mut i = 0;
    while !rest.is_empty() {
        let take = case.batch_sizes[i].min(rest.len());
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        // One request may carry several samples of a series; group them the
        // way an agent would.
        let mut grouped: BTreeMap<usize, (Vec<i64>, Vec<f64>)> = BTreeMap::new();
        for s in chunk {
            let g = grouped.entry(s.series).or_default();
            g.0.push(s.ts_ms);
            g.1.push(s.value);
        }
        let batches: Vec<SeriesBatch<'_>> = grouped
            .iter()
            .map(|(&sid, (ts, vs))| {
                let (source, metric, labels) = series_name(sid);
                SeriesBatch {
                    source,
                    metric,
                    labels,
                    kind: Some(SampleKind::Gauge),
                    timestamps_ms: ts,
                    values: vs,
                    start_times_ms: &[],
                    source_index: 0,
                    series_index: 0,
                }
            })
            .collect();
        let out = agg.ingest(&batches, now_ms);
        assert_eq!(out.rejected, 0, "{:?}", out.rejections);
        if case.flush_after[i] {
            let b = flush(&agg);
            store.apply(&b).await.unwrap();
            if case.replay[flushes] {
                let again = store.apply(&b).await.unwrap();
                assert_eq!(again.documents_written, 0, "a replayed flush wrote");
            }
            flushes += 1;
        }
        i += 1;
    }
    let b = flush(&agg);
    store.apply(&b).await.unwrap();
    if case.replay[flushes] {
        store.apply(&b).await.unwrap();
    }
}

/// The naive reference: one slot per (series, bucket) at each width.
pub fn reference(samples: &[Sample], width: i64) -> BTreeMap<(usize, i64), Slot> {
    let mut m: BTreeMap<(usize, i64), Slot> = BTreeMap::new();
    for s in samples {
        let t = (minute_of_ms(s.ts_ms) * MINUTE_S).div_euclid(width) * width;
        m.entry((s.series, t)).or_default().add(s.ts_ms, s.value);
    }
    m
}

/// Every slot of every series at one tier and resolution.
pub async fn read_all(
    store: &dyn Store,
    tier: Tier,
    resolution: Resolution,
) -> BTreeMap<(usize, i64), Slot> {
    let mut out = BTreeMap::new();
    for sid in 0..SERIES_COUNT {
        let docs = store
            .read(&ReadQuery {
                series: series_id(sid),
                tier,
                resolution,
                from: MIDNIGHT - 2 * DAY_S,
                to: MIDNIGHT + 2 * DAY_S,
            })
            .await
            .unwrap();
        for d in docs {
            for (t, slot) in d.slots {
                assert!(!slot.is_empty(), "reads return only non-empty slots");
                assert!(
                    out.insert((sid, t), slot).is_none(),
                    "bucket {t} returned twice"
                );
            }
        }
    }
    out
}

/// Runs the case against `store` (which must be empty) and checks every
/// read against the reference.
pub async fn check(store: Arc<dyn Store>, case: &Case) {
    run_case(store.clone(), case).await;
    let minutes = reference(&case.samples, MINUTE_S);
    let hours = reference(&case.samples, HOUR_S);
    let days = reference(&case.samples, DAY_S);
    assert_eq!(
        read_all(&*store, Tier::Hour, Resolution::Minute).await,
        minutes
    );
    // A store may fill the day tier after the hour tier (MongoDB seals an
    // hour's day blocks once it has closed, and the query engine reads the
    // hours not sealed yet from the hour tier): it catches up when idle.
    // (MongoDB's upkeep runs on the clock of the last flush first, then
    // on the wall's: twice idle in a row is caught up.)
    let mut idle = 0;
    for _ in 0..100 {
        let synced = store.sync_idle().await.unwrap();
        let kept = store.upkeep().await.unwrap();
        idle = if synced.is_none() && kept.is_none() {
            idle + 1
        } else {
            0
        };
        if idle == 2 {
            break;
        }
    }
    assert_eq!(
        read_all(&*store, Tier::Day, Resolution::Minute).await,
        minutes
    );
    // Running slots: the hour document's own slot and the day document's
    // hour entries must both equal the sum of their minutes.
    assert_eq!(read_all(&*store, Tier::Hour, Resolution::Hour).await, hours);
    assert_eq!(read_all(&*store, Tier::Day, Resolution::Hour).await, hours);
    assert_eq!(read_all(&*store, Tier::Day, Resolution::Day).await, days);
}
