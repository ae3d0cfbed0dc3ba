//! The query engine: range reads of one series at minute, hour or day steps.
//!
//! Each step is served from the slots of that width: minutes from hour
//! documents (or, beyond two days or the hour tier's retention, from the
//! day documents' minute blocks), hours and days from the day documents'
//! running slots. What the store does not have yet (in-flight flushes and
//! the aggregator) is merged in, so a graph is fresh to the second whatever
//! the flush interval. Empty buckets are absent, never zero points.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::flush::Pipeline;
use crate::model::{
    validate_metric, validate_source, Resolution, SampleKind, SeriesId, SeriesRef, Slot, Tier,
    DAY_S, MINUTE_S,
};
use crate::store::{ReadQuery, StoreError};

/// One bucket with data.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    /// Bucket start, Unix seconds.
    pub t: i64,
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RangeResult {
    pub source: String,
    pub metric: String,
    /// None when the series has no data in the range and is unknown.
    pub kind: Option<SampleKind>,
    pub step: &'static str,
    pub points: Vec<Point>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct QueryEngine {
    pipeline: Arc<Pipeline>,
    max_points: usize,
    hour_retention_s: i64,
}

/// Minute ranges up to this long read hour documents; longer ones read day
/// documents, which carry the same minutes in a twenty-fourth of the
/// documents.
const MINUTE_FROM_HOUR_TIER_MAX_S: i64 = 2 * DAY_S;

impl QueryEngine {
    pub fn new(pipeline: Arc<Pipeline>, max_points: usize, hour_retention_s: i64) -> QueryEngine {
        QueryEngine {
            pipeline,
            max_points,
            hour_retention_s,
        }
    }

    /// Points of one series with bucket start in `[floor(from), to)`, Unix seconds.
    pub async fn range(
        &self,
        source: &str,
        metric: &str,
        from: i64,
        to: i64,
        step: Resolution,
    ) -> Result<RangeResult, QueryError> {
        validate_source(source).map_err(|e| QueryError::Invalid(format!("source {e}")))?;
        validate_metric(metric).map_err(|e| QueryError::Invalid(format!("metric {e}")))?;
        let from = step.floor(from);
        if to <= from {
            return Err(QueryError::Invalid(format!(
                "empty range: `to` ({to}) must be after `from` ({from}, rounded down to the step)"
            )));
        }
        let buckets = (to - from + step.width_s() - 1) / step.width_s();
        if buckets > self.max_points as i64 {
            return Err(QueryError::Invalid(format!(
                "the range holds {buckets} {} steps; the limit is {} (query.max_points): use a coarser step or a shorter range",
                step.as_str(),
                self.max_points
            )));
        }
        let now = chrono::Utc::now().timestamp();
        let tier = match step {
            Resolution::Minute
                if to - from <= MINUTE_FROM_HOUR_TIER_MAX_S
                    && from >= now - self.hour_retention_s =>
            {
                Tier::Hour
            }
            _ => Tier::Day,
        };
        let key = SeriesRef { source, metric };
        // Unflushed first, then the store: see the module docs of `flush`.
        let unflushed = self.pipeline.unflushed(key);
        let store = self.pipeline.store();
        let started = std::time::Instant::now();
        let docs = store
            .read(&ReadQuery {
                series: SeriesId::new(source, metric),
                tier,
                resolution: step,
                from,
                to,
            })
            .await;
        crate::telemetry::store_operation(store.name(), "read", started.elapsed().as_secs_f64());
        // Stores count their own read errors in `tally_store_errors_total`.
        let docs = docs?;
        let mut buckets: BTreeMap<i64, Slot> = BTreeMap::new();
        let mut watermarks: BTreeMap<i64, u64> = BTreeMap::new();
        let mut kind = None;
        for doc in docs {
            watermarks.insert(doc.period_start, doc.watermark);
            kind = kind.or(doc.kind);
            for (t, slot) in doc.slots {
                buckets.entry(t).or_default().merge(&slot);
            }
        }
        let mut add = |minute: i64, slot: &Slot| {
            let t = step.floor(minute * MINUTE_S);
            if t >= from && t < to {
                buckets.entry(t).or_default().merge(slot);
            }
        };
        for (id, minutes) in &unflushed.inflight {
            for (minute, slot) in minutes {
                let doc = tier.period_start(*minute);
                if id.0 > watermarks.get(&doc).copied().unwrap_or(0) {
                    add(*minute, slot);
                }
            }
        }
        for (minute, slot) in &unflushed.pending {
            add(*minute, slot);
        }
        let kind = unflushed.kind.or(kind);
        let counter = kind.is_some_and(SampleKind::is_counter);
        let points = buckets
            .into_iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(t, s)| Point {
                t,
                n: s.n,
                sum: s.sum,
                min: s.min,
                max: s.max,
                avg: s.sum / s.n as f64,
                rate: counter.then(|| s.sum / step.width_s() as f64),
            })
            .collect();
        Ok(RangeResult {
            source: source.to_string(),
            metric: metric.to_string(),
            kind,
            step: step.as_str(),
            points,
        })
    }
}
