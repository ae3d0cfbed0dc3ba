//! The query engine: everything dashboards read, independent of the
//! protocol that asks (`grpc`, `http`, the Prometheus-compatible API).
//!
//! * Ranges of one or more series, at any step that is a whole number of
//!   minutes, or `auto` (the finest step that fits a point budget).
//! * The latest value and current minute of series.
//! * Aggregates of one metric across sources, from a group rollup when the
//!   selection is a group, else fanned out over the catalog's members.
//! * Discovery: series, sources and metrics from the catalog.
//!
//! Each step is served from the widest slots that divide it: minutes from
//! hour documents (or, beyond two days or the hour tier's retention, from
//! the day documents' minute blocks), hours and days from the day
//! documents' running slots. What the store does not have yet (in-flight
//! flushes and the aggregator) is merged in, so a graph is fresh to the
//! second whatever the flush interval. Empty buckets are absent, never zero
//! points.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use crate::flush::Pipeline;
use crate::model::{
    validate_metric, validate_source, Resolution, SampleKind, SeriesId, SeriesRef, Slot, Tier,
    DAY_S, HOUR_S, MINUTE_S,
};
use crate::rollup::Rollups;
use crate::selector::{all_match, NameMatcher};
use crate::store::{CatalogEntry, CatalogQuery, ReadQuery, StoreError};

/// A value a point can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Aggregate {
    Avg,
    Min,
    Max,
    Sum,
    Count,
    Rate,
}

impl Aggregate {
    pub const ALL: [Aggregate; 6] = [
        Aggregate::Count,
        Aggregate::Sum,
        Aggregate::Min,
        Aggregate::Max,
        Aggregate::Avg,
        Aggregate::Rate,
    ];

    pub fn parse(s: &str) -> Result<Aggregate, QueryError> {
        Ok(match s.trim() {
            "avg" => Aggregate::Avg,
            "min" => Aggregate::Min,
            "max" => Aggregate::Max,
            "sum" => Aggregate::Sum,
            "count" | "n" => Aggregate::Count,
            "rate" => Aggregate::Rate,
            other => {
                return Err(QueryError::Invalid(format!(
                    "aggregate {other:?} is not one of avg, min, max, sum, count, rate"
                )))
            }
        })
    }

    /// A comma-separated list; empty means every aggregate.
    pub fn parse_list(s: &str) -> Result<Vec<Aggregate>, QueryError> {
        let mut out: Vec<Aggregate> = s
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(Aggregate::parse)
            .collect::<Result<_, _>>()?;
        out.sort();
        out.dedup();
        Ok(out)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Sum => "sum",
            Aggregate::Count => "count",
            Aggregate::Rate => "rate",
        }
    }

    /// This aggregate of a non-empty slot `width_s` seconds wide. Rate is
    /// defined for counters only.
    pub fn of(self, slot: &Slot, width_s: i64, counter: bool) -> Option<f64> {
        if slot.is_empty() {
            return None;
        }
        Some(match self {
            Aggregate::Avg => slot.sum / slot.n as f64,
            Aggregate::Min => slot.min,
            Aggregate::Max => slot.max,
            Aggregate::Sum => slot.sum,
            Aggregate::Count => slot.n as f64,
            Aggregate::Rate if counter => slot.sum / width_s as f64,
            Aggregate::Rate => return None,
        })
    }
}

/// The step of a read: bucket width, and which slots serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub width_s: i64,
    pub resolution: Resolution,
}

/// Steps `auto` chooses from: each a multiple of the one before where it
/// matters for nesting, and of the slots it reads.
const AUTO_STEPS_S: [i64; 14] = [
    60,
    2 * 60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    HOUR_S,
    2 * HOUR_S,
    3 * HOUR_S,
    6 * HOUR_S,
    12 * HOUR_S,
    DAY_S,
    2 * DAY_S,
    7 * DAY_S,
];

impl Step {
    pub const MINUTE: Step = Step {
        width_s: MINUTE_S,
        resolution: Resolution::Minute,
    };
    pub const HOUR: Step = Step {
        width_s: HOUR_S,
        resolution: Resolution::Hour,
    };
    pub const DAY: Step = Step {
        width_s: DAY_S,
        resolution: Resolution::Day,
    };

    /// A step of `width_s` seconds: a whole number of minutes, read from
    /// the widest slots that divide it.
    pub fn fixed(width_s: i64) -> Result<Step, QueryError> {
        if width_s > MAX_STEP_S {
            return Err(QueryError::Invalid(format!(
                "step {width_s}s is longer than ten years"
            )));
        }
        if width_s < MINUTE_S || width_s % MINUTE_S != 0 {
            return Err(QueryError::Invalid(format!(
                "step {width_s}s is not a whole number of minutes: minute slots are the finest data Tally keeps"
            )));
        }
        let resolution = if width_s % DAY_S == 0 {
            Resolution::Day
        } else if width_s % HOUR_S == 0 {
            Resolution::Hour
        } else {
            Resolution::Minute
        };
        Ok(Step {
            width_s,
            resolution,
        })
    }

    /// The finest step that keeps `[from, to)` within `max_points` buckets.
    pub fn auto(from: i64, to: i64, max_points: usize) -> Step {
        let span = (to - from).max(1);
        let budget = max_points.max(1) as i64;
        let width = AUTO_STEPS_S
            .iter()
            .copied()
            // The bucket containing `from` starts before it: allow for it.
            .find(|w| (span + w - 1) / w < budget)
            .unwrap_or_else(|| {
                let days = (span + DAY_S * budget - 1) / (DAY_S * budget);
                (days + 1) * DAY_S
            });
        Step::fixed(width).unwrap_or(Step::DAY)
    }

    pub fn floor(self, t: i64) -> i64 {
        t.div_euclid(self.width_s) * self.width_s
    }

    /// `1m`, `5m`, `1h`, `6h`, `1d`, `7d`, or seconds otherwise.
    pub fn label(self) -> String {
        let w = self.width_s;
        if w % DAY_S == 0 {
            format!("{}d", w / DAY_S)
        } else if w % HOUR_S == 0 {
            format!("{}h", w / HOUR_S)
        } else {
            format!("{}m", w / MINUTE_S)
        }
    }
}

/// How the reader asked for the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepSpec {
    /// The finest step within the point budget (`max_points`, else the
    /// configured `query.default_points`).
    Auto {
        max_points: Option<usize>,
    },
    Fixed(Step),
}

impl StepSpec {
    /// `auto`, or a duration (`1m`, `15m`, `1h`, `1d`, `300s`, `300`).
    pub fn parse(s: &str, max_points: Option<usize>) -> Result<StepSpec, QueryError> {
        let s = s.trim();
        if s == "auto" {
            return Ok(StepSpec::Auto { max_points });
        }
        let secs = match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => humantime::parse_duration(s)
                .map_err(|e| {
                    QueryError::Invalid(format!(
                        "step {s:?} is not `auto` or a duration such as 1m, 5m, 1h, 1d: {e}"
                    ))
                })?
                .as_secs() as i64,
        };
        Step::fixed(secs).map(StepSpec::Fixed)
    }
}

/// A resolved read window: buckets start at `from`, `from + step`, … while
/// below `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: i64,
    pub to: i64,
    pub step: Step,
}

impl Window {
    pub fn buckets(&self) -> i64 {
        (self.to - self.from + self.step.width_s - 1) / self.step.width_s
    }
}

/// One bucket with data. Values not asked for are absent.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    /// Bucket start, Unix seconds.
    pub t: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl Point {
    /// The `aggregates` of a non-empty bucket (all when empty).
    pub fn of(t: i64, slot: &Slot, width_s: i64, counter: bool, aggregates: &[Aggregate]) -> Point {
        let want = |a: Aggregate| {
            if aggregates.is_empty() || aggregates.contains(&a) {
                a.of(slot, width_s, counter)
            } else {
                None
            }
        };
        Point {
            t,
            n: want(Aggregate::Count).map(|_| slot.n),
            sum: want(Aggregate::Sum),
            min: want(Aggregate::Min),
            max: want(Aggregate::Max),
            avg: want(Aggregate::Avg),
            rate: want(Aggregate::Rate),
        }
    }
}

/// Non-empty buckets: (bucket start, merged slot), ascending.
pub type Buckets = Vec<(i64, Slot)>;

/// A series' non-empty buckets in a window, before choosing aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesBuckets {
    pub series: SeriesId,
    /// None when the series is unknown (no data in the range, nothing in memory).
    pub kind: Option<SampleKind>,
    /// Ascending bucket starts with their merged slots, none empty.
    pub buckets: Vec<(i64, Slot)>,
}

impl SeriesBuckets {
    pub fn is_counter(&self) -> bool {
        self.kind.is_some_and(SampleKind::is_counter)
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesRange {
    pub source: String,
    pub metric: String,
    pub kind: Option<SampleKind>,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RangeResult {
    pub step: String,
    pub step_s: i64,
    pub from: i64,
    pub to: i64,
    pub series: Vec<SeriesRange>,
}

/// Which series a call is about: every matcher on a name must accept it.
#[derive(Debug, Clone)]
pub struct Selection {
    pub source: Vec<NameMatcher>,
    pub metric: Vec<NameMatcher>,
}

impl Selection {
    pub fn exact(source: &str, metric: &str) -> Selection {
        Selection {
            source: vec![NameMatcher::exact(source)],
            metric: vec![NameMatcher::exact(metric)],
        }
    }

    /// The sources and metrics when the selection names them outright
    /// (lists of exact names), so no catalog lookup is needed; the series
    /// are their cross product.
    fn enumerate(&self) -> Option<(Vec<String>, Vec<String>)> {
        let names = |ms: &[NameMatcher]| -> Option<Vec<String>> {
            let (first, rest) = ms.split_first()?;
            let names = first.names()?;
            Some(
                names
                    .iter()
                    .filter(|n| all_match(rest, n))
                    .cloned()
                    .collect(),
            )
        };
        let (sources, metrics) = (names(&self.source)?, names(&self.metric)?);
        Some((sources, metrics))
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LatestValue {
    /// Sample time, Unix milliseconds.
    pub t_ms: i64,
    pub value: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Latest {
    pub source: String,
    pub metric: String,
    pub kind: Option<SampleKind>,
    /// The newest sample this daemon has seen (a cumulative counter's value
    /// as sent). Absent when the series is not in this daemon's memory
    /// (idle, restarted, or fed through another daemon).
    pub last: Option<LatestValue>,
    /// The current minute's slot so far, store and memory merged.
    pub minute: Option<Point>,
}

/// Which sources an aggregate covers.
#[derive(Debug, Clone)]
pub enum Sources {
    /// A configured group (or prefix group), by name.
    Group(String),
    /// Sources matching all of these.
    Matching(Vec<NameMatcher>),
}

#[derive(Debug, Clone)]
pub struct AggregateQuery {
    pub metric: String,
    pub sources: Sources,
    pub from: i64,
    pub to: i64,
    pub step: StepSpec,
    pub aggregates: Vec<Aggregate>,
    /// Read the group's rollup when the selection is a group. Off forces
    /// the fan-out (for checking a rollup against its members).
    pub use_rollup: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AggregateResult {
    pub metric: String,
    pub step: String,
    pub step_s: i64,
    pub from: i64,
    pub to: i64,
    /// The group whose rollup served the read, if one did.
    pub rollup: Option<String>,
    /// Member series read, when the read fanned out.
    pub fanned_out: Option<usize>,
    pub kind: Option<SampleKind>,
    /// Per step, the pooled samples of every selected source: `n` and
    /// `sum` add up, `min`/`max` are the extremes, `avg` is `sum / n`.
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesInfo {
    pub source: String,
    pub metric: String,
    pub kind: SampleKind,
    pub first_seen: i64,
    pub last_seen: i64,
}

impl From<CatalogEntry> for SeriesInfo {
    fn from(e: CatalogEntry) -> SeriesInfo {
        SeriesInfo {
            source: e.series.source.into(),
            metric: e.series.metric.into(),
            kind: e.kind,
            first_seen: e.first_seen,
            last_seen: e.last_seen,
        }
    }
}

/// Which names a distinct-name listing returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Sources,
    Metrics,
}

impl Names {
    pub fn as_str(self) -> &'static str {
        match self {
            Names::Sources => "sources",
            Names::Metrics => "metrics",
        }
    }
}

/// One page of a listing; `next` continues it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The request is wrong; the message says how.
    #[error("{0}")]
    Invalid(String),
    /// A configured limit refuses the request; the message names it.
    #[error("{0}")]
    Limit(String),
    /// The daemon cannot take this now (e.g. subscriber slots are full).
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Query limits, from `[query]`.
#[derive(Debug, Clone)]
pub struct QueryLimits {
    /// Buckets per series per call.
    pub max_points: usize,
    /// The point budget of `step=auto` when the reader gives none.
    pub default_points: usize,
    /// Series per range or latest call.
    pub max_series: usize,
    /// Member series one aggregate may fan out to.
    pub max_fanout: usize,
    /// Entries per discovery page.
    pub max_page: usize,
    /// Points of all series of one range read (or watch snapshot) together.
    pub max_total_points: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            max_points: 100_000,
            default_points: 1_440,
            max_series: 1_000,
            max_fanout: 10_000,
            max_page: 10_000,
            max_total_points: 10_000_000,
        }
    }
}

pub struct QueryEngine {
    pipeline: Arc<Pipeline>,
    limits: QueryLimits,
    hour_retention_s: i64,
}

/// Minute ranges up to this long read hour documents; longer ones read day
/// documents, which carry the same minutes in a twenty-fourth of the
/// documents.
const MINUTE_FROM_HOUR_TIER_MAX_S: i64 = 2 * DAY_S;

/// Times a read may name, in Unix seconds (about ±300,000 years): far
/// beyond any data, small enough that range arithmetic cannot overflow.
pub const MAX_TIME_S: i64 = 10_000_000_000_000;

/// The widest step: ten years (and arithmetic on it cannot overflow).
const MAX_STEP_S: i64 = 10 * 366 * DAY_S;

/// Series read at once when a call spans many.
const READ_CONCURRENCY: usize = 16;

/// Catalog entries fetched per page while scanning for distinct names.
const SCAN_PAGE: usize = 1_000;

impl QueryEngine {
    pub fn new(pipeline: Arc<Pipeline>, limits: QueryLimits, hour_retention_s: i64) -> QueryEngine {
        QueryEngine {
            pipeline,
            limits,
            hour_retention_s,
        }
    }

    pub fn limits(&self) -> &QueryLimits {
        &self.limits
    }

    pub fn rollups(&self) -> &Arc<Rollups> {
        self.pipeline.rollups()
    }

    /// Refuses a read of `series` series over `w` whose points together
    /// exceed `query.max_total_points`.
    pub fn check_total(&self, series: usize, w: &Window) -> Result<(), QueryError> {
        let total = (series as i64).saturating_mul(w.buckets());
        if total > self.limits.max_total_points as i64 {
            return Err(QueryError::Limit(format!(
                "{series} series of {} points each is {total} points; the limit is {} (query.max_total_points): select fewer series, a coarser step or a shorter range",
                w.buckets(),
                self.limits.max_total_points
            )));
        }
        Ok(())
    }

    /// Checks a range and settles its step.
    pub fn window(&self, from: i64, to: i64, step: StepSpec) -> Result<Window, QueryError> {
        for (name, t) in [("from", from), ("to", to)] {
            if !(-MAX_TIME_S..=MAX_TIME_S).contains(&t) {
                return Err(QueryError::Invalid(format!(
                    "`{name}` ({t}) is out of range: times are Unix seconds within ±{MAX_TIME_S}"
                )));
            }
        }
        if to <= from {
            return Err(QueryError::Invalid(format!(
                "empty range: `to` ({to}) must be after `from` ({from})"
            )));
        }
        let step = match step {
            StepSpec::Fixed(s) => s,
            StepSpec::Auto { max_points } => {
                let budget = max_points
                    .unwrap_or(self.limits.default_points)
                    .min(self.limits.max_points);
                Step::auto(from, to, budget)
            }
        };
        let w = Window {
            from: step.floor(from),
            to,
            step,
        };
        if w.buckets() > self.limits.max_points as i64 {
            return Err(QueryError::Limit(format!(
                "the range holds {} steps of {}; the limit is {} (query.max_points): use a coarser step, step=auto or a shorter range",
                w.buckets(),
                step.label(),
                self.limits.max_points
            )));
        }
        Ok(w)
    }

    /// One series' non-empty buckets: the store merged with what is not in
    /// it yet.
    pub async fn buckets(&self, id: &SeriesId, w: &Window) -> Result<SeriesBuckets, QueryError> {
        let step = w.step;
        // Whole buckets: the last one runs to its own end, past `to`.
        let end = w.from + w.buckets() * step.width_s;
        let now = chrono::Utc::now().timestamp();
        let tier = match step.resolution {
            // The first hour document starts at or before `from`; it must
            // still be within the hour tier's retention.
            Resolution::Minute
                if end - w.from <= MINUTE_FROM_HOUR_TIER_MAX_S
                    && Tier::Hour.period_start(w.from.div_euclid(MINUTE_S))
                        >= now - self.hour_retention_s + HOUR_S =>
            {
                Tier::Hour
            }
            _ => Tier::Day,
        };
        let key = SeriesRef {
            source: &id.source,
            metric: &id.metric,
        };
        // Unflushed first, then the store: see the module docs of `flush`.
        let unflushed = self.pipeline.unflushed(key);
        let store = self.pipeline.store();
        let started = std::time::Instant::now();
        let docs = store
            .read(&ReadQuery {
                series: id.clone(),
                tier,
                resolution: step.resolution,
                from: w.from,
                to: end,
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
                buckets.entry(step.floor(t)).or_default().merge(&slot);
            }
        }
        let mut add = |minute: i64, slot: &Slot| {
            let t = step.floor(minute * MINUTE_S);
            if t >= w.from && t < end {
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
            // A flush cut and applied between the snapshot and the store
            // read already put these slots in the document.
            let doc = tier.period_start(*minute);
            if watermarks.get(&doc).copied().unwrap_or(0) <= unflushed.cut_through {
                add(*minute, slot);
            }
        }
        Ok(SeriesBuckets {
            series: id.clone(),
            kind: unflushed.kind.or(kind),
            buckets: buckets.into_iter().filter(|(_, s)| !s.is_empty()).collect(),
        })
    }

    /// The series a selection covers: named outright, or looked up in the
    /// catalog. More than `limit` is an error naming the limit.
    pub async fn resolve(
        &self,
        sel: &Selection,
        limit: usize,
        limit_name: &str,
    ) -> Result<Vec<SeriesId>, QueryError> {
        let too_many = |n: String| too_many_series(&n, limit, limit_name);
        if let Some((sources, metrics)) = sel.enumerate() {
            // Counted before the product is built: two long lists would
            // otherwise make a huge one.
            let n = sources.len().saturating_mul(metrics.len());
            if n > limit {
                return Err(too_many(n.to_string()));
            }
            for s in &sources {
                validate_source(s).map_err(|e| QueryError::Invalid(format!("source {s:?} {e}")))?;
            }
            for m in &metrics {
                validate_metric(m).map_err(|e| QueryError::Invalid(format!("metric {m:?} {e}")))?;
            }
            return Ok(sources
                .iter()
                .flat_map(|s| metrics.iter().map(move |m| SeriesId::new(s, m)))
                .collect());
        }
        let found = self
            .catalog(&CatalogQuery {
                source: sel.source.clone(),
                metric: sel.metric.clone(),
                kind: None,
                seen_since: None,
                after: None,
                limit: limit + 1,
            })
            .await?;
        if found.len() > limit {
            return Err(too_many(format!("more than {limit}")));
        }
        Ok(found.into_iter().map(|e| e.series).collect())
    }

    async fn catalog(&self, q: &CatalogQuery) -> Result<Vec<CatalogEntry>, QueryError> {
        // The store counts the operation, its latency and its errors.
        Ok(self.pipeline.store().catalog_list(q).await?)
    }

    /// Buckets of many series, read concurrently, in the given order.
    pub async fn many_buckets(
        &self,
        ids: &[SeriesId],
        w: &Window,
    ) -> Result<Vec<SeriesBuckets>, QueryError> {
        let w = *w;
        // Owned ids: a borrowing closure trips the compiler's higher-ranked
        // lifetime check on `Send` futures.
        futures::stream::iter(ids.to_vec())
            .map(move |id| async move { self.buckets(&id, &w).await })
            .buffered(READ_CONCURRENCY)
            .try_collect()
            .await
    }

    /// Points of every selected series with bucket start in
    /// `[floor(from), to)`.
    pub async fn range(
        &self,
        sel: &Selection,
        from: i64,
        to: i64,
        step: StepSpec,
        aggregates: &[Aggregate],
    ) -> Result<RangeResult, QueryError> {
        let w = self.window(from, to, step)?;
        let ids = self
            .resolve(sel, self.limits.max_series, "query.max_series")
            .await?;
        self.check_total(ids.len(), &w)?;
        let series = self
            .many_buckets(&ids, &w)
            .await?
            .into_iter()
            .map(|b| {
                let counter = b.is_counter();
                SeriesRange {
                    points: b
                        .buckets
                        .iter()
                        .map(|(t, s)| Point::of(*t, s, w.step.width_s, counter, aggregates))
                        .collect(),
                    source: b.series.source.into(),
                    metric: b.series.metric.into(),
                    kind: b.kind,
                }
            })
            .collect();
        Ok(RangeResult {
            step: w.step.label(),
            step_s: w.step.width_s,
            from: w.from,
            to: w.to,
            series,
        })
    }

    /// The latest sample and current minute of every selected series.
    pub async fn latest(&self, sel: &Selection, now_s: i64) -> Result<Vec<Latest>, QueryError> {
        let ids = self
            .resolve(sel, self.limits.max_series, "query.max_series")
            .await?;
        let minute = Step::MINUTE.floor(now_s);
        let w = Window {
            from: minute,
            to: minute + MINUTE_S,
            step: Step::MINUTE,
        };
        let agg = self.pipeline.aggregator();
        Ok(self
            .many_buckets(&ids, &w)
            .await?
            .into_iter()
            .map(|b| {
                let last = agg.last_sample(SeriesRef {
                    source: &b.series.source,
                    metric: &b.series.metric,
                });
                let counter = b.is_counter();
                Latest {
                    minute: b
                        .buckets
                        .first()
                        .map(|(t, s)| Point::of(*t, s, MINUTE_S, counter, &[])),
                    kind: b.kind.or(last.map(|l| l.0)),
                    last: last.map(|(_, t_ms, value)| LatestValue { t_ms, value }),
                    source: b.series.source.into(),
                    metric: b.series.metric.into(),
                }
            })
            .collect())
    }

    /// One metric across sources, pooled per step.
    pub async fn aggregate(&self, q: &AggregateQuery) -> Result<AggregateResult, QueryError> {
        validate_metric(&q.metric)
            .map_err(|e| QueryError::Invalid(format!("metric {:?} {e}", q.metric)))?;
        let w = self.window(q.from, q.to, q.step)?;
        let rollups = self.rollups();
        // A fan-out reads the sources the selection matches, plus those that
        // declared the group themselves.
        let (group, members, declared) = match &q.sources {
            Sources::Group(name) => {
                let Some(members) = rollups.members(name) else {
                    return Err(QueryError::Invalid(format!(
                        "no group {name:?}: groups are {} (see [rollup] in the configuration)",
                        describe_groups(rollups)
                    )));
                };
                (
                    Some(name.as_str()),
                    members.rule.map(|m| vec![m]),
                    members.declared,
                )
            }
            Sources::Matching(ms) => {
                let group = match ms.as_slice() {
                    [one] => rollups.group_for(one),
                    [] => rollups.group_for(&NameMatcher::any()),
                    _ => None,
                };
                (group, Some(ms.clone()), Vec::new())
            }
        };
        let mut result = AggregateResult {
            metric: q.metric.clone(),
            step: w.step.label(),
            step_s: w.step.width_s,
            from: w.from,
            to: w.to,
            rollup: None,
            fanned_out: None,
            kind: None,
            points: Vec::new(),
        };
        let (kind, merged) = match group.filter(|_| q.use_rollup) {
            Some(g) => {
                let b = self.buckets(&Rollups::series(g, &q.metric), &w).await?;
                result.rollup = Some(g.to_string());
                (b.kind, b.buckets)
            }
            None => {
                let mut ids = match members {
                    Some(source) => {
                        self.resolve(
                            &Selection {
                                source,
                                metric: vec![NameMatcher::exact(&q.metric)],
                            },
                            self.limits.max_fanout,
                            "query.max_fanout",
                        )
                        .await?
                    }
                    None => Vec::new(),
                };
                if !declared.is_empty() {
                    ids.extend(declared.iter().map(|s| SeriesId::new(s, &q.metric)));
                    // A source in the rule that also declared the group counts once.
                    ids.sort_unstable();
                    ids.dedup();
                }
                if ids.len() > self.limits.max_fanout {
                    return Err(too_many_series(
                        &ids.len().to_string(),
                        self.limits.max_fanout,
                        "query.max_fanout",
                    ));
                }
                result.fanned_out = Some(ids.len());
                // Folded as they arrive: memory follows the buckets of one
                // series, not of every member.
                let mut merged = Merged::default();
                let mut reads = futures::stream::iter(ids)
                    .map(|id| async move { self.buckets(&id, &w).await })
                    .buffer_unordered(READ_CONCURRENCY);
                while let Some(member) = reads.next().await {
                    merged.add(&q.metric, member?)?;
                }
                (merged.kind, merged.buckets.into_iter().collect())
            }
        };
        let counter = kind.is_some_and(SampleKind::is_counter);
        if q.aggregates.contains(&Aggregate::Rate) && kind.is_some() && !counter {
            return Err(QueryError::Invalid(format!(
                "rate is defined for counters; {} is a {}",
                q.metric,
                kind.map_or("", SampleKind::as_str)
            )));
        }
        result.kind = kind;
        result.points = merged
            .iter()
            .map(|(t, s)| Point::of(*t, s, w.step.width_s, counter, &q.aggregates))
            .collect();
        Ok(result)
    }

    /// A page of catalog entries.
    pub async fn series(&self, mut q: CatalogQuery) -> Result<Page<SeriesInfo>, QueryError> {
        q.limit = q.limit.clamp(1, self.limits.max_page);
        let limit = q.limit;
        let found = self.catalog(&q).await?;
        let next = (found.len() == limit)
            .then(|| found.last().map(|e| e.series.key()))
            .flatten();
        Ok(Page {
            items: found.into_iter().map(SeriesInfo::from).collect(),
            next,
        })
    }

    /// Most catalog entries one distinct-name listing scans.
    fn scan_cap(&self) -> usize {
        self.limits.max_page.saturating_mul(100)
    }

    /// One page of a scan for distinct names.
    async fn scan_page(
        &self,
        source: &[NameMatcher],
        metric: &[NameMatcher],
        after: Option<SeriesId>,
    ) -> Result<Vec<CatalogEntry>, QueryError> {
        self.catalog(&CatalogQuery {
            source: source.to_vec(),
            metric: metric.to_vec(),
            kind: None,
            seen_since: None,
            after,
            limit: SCAN_PAGE,
        })
        .await
    }

    /// Distinct sources or metrics, by `which`.
    pub async fn names(
        &self,
        which: Names,
        source: Vec<NameMatcher>,
        metric: Vec<NameMatcher>,
        after: Option<String>,
        limit: usize,
    ) -> Result<Page<String>, QueryError> {
        match which {
            Names::Sources => self.sources(source, metric, after, limit).await,
            Names::Metrics => self.metrics(source, metric, after, limit).await,
        }
    }

    /// Distinct sources with a series matching, in catalog (key) order,
    /// after the source `after`.
    pub async fn sources(
        &self,
        source: Vec<NameMatcher>,
        metric: Vec<NameMatcher>,
        after: Option<String>,
        limit: usize,
    ) -> Result<Page<String>, QueryError> {
        let limit = limit.clamp(1, self.limits.max_page);
        let mut out: Vec<String> = Vec::new();
        // Past every metric of a source: `~` sorts after the metric charset.
        let skip = |s: &str| SeriesId::new(s, "~");
        let mut cursor = after.as_deref().map(skip);
        let mut scanned = 0usize;
        let mut capped = false;
        loop {
            let page = self.scan_page(&source, &metric, cursor.clone()).await?;
            let exhausted = page.len() < SCAN_PAGE;
            scanned += page.len();
            for e in &page {
                // A source's keys are contiguous (`|` ends every source).
                if out.last().map(String::as_str) != Some(&*e.series.source) {
                    out.push(e.series.source.to_string());
                }
            }
            if out.len() >= limit || exhausted {
                break;
            }
            // Continue past the last source seen, skipping its other metrics.
            cursor = page.last().map(|e| skip(&e.series.source));
            if scanned > self.scan_cap() {
                // Short of `limit`, but not the end: the page says where to go on.
                capped = true;
                break;
            }
        }
        out.truncate(limit);
        let next = (out.len() == limit || capped)
            .then(|| out.last().cloned())
            .flatten();
        Ok(Page { items: out, next })
    }

    /// Distinct metrics of the matching sources, in order, after `after`.
    /// Scans the matching series: at most a hundred pages of
    /// `query.max_page` (a million entries by default), else an error.
    pub async fn metrics(
        &self,
        source: Vec<NameMatcher>,
        metric: Vec<NameMatcher>,
        after: Option<String>,
        limit: usize,
    ) -> Result<Page<String>, QueryError> {
        let limit = limit.clamp(1, self.limits.max_page);
        let mut names = BTreeSet::new();
        let mut cursor = None;
        let mut scanned = 0usize;
        loop {
            let page = self.scan_page(&source, &metric, cursor).await?;
            scanned += page.len();
            let exhausted = page.len() < SCAN_PAGE;
            cursor = page.last().map(|e| e.series.clone());
            names.extend(
                page.into_iter()
                    .map(|e| e.series.metric.to_string())
                    .filter(|m| after.as_deref().is_none_or(|a| m.as_str() > a)),
            );
            if exhausted {
                break;
            }
            if scanned >= self.scan_cap() {
                return Err(QueryError::Limit(format!(
                    "listing metrics scans every matching series and more than {} match (a hundred pages of query.max_page): select fewer sources",
                    self.scan_cap()
                )));
            }
        }
        let items: Vec<String> = names.into_iter().take(limit).collect();
        let next = (items.len() == limit)
            .then(|| items.last().cloned())
            .flatten();
        Ok(Page { items, next })
    }
}

/// Member series merged bucket by bucket (the pooled aggregate). Members
/// must agree on counter-or-gauge.
#[derive(Default)]
struct Merged {
    kind: Option<SampleKind>,
    buckets: BTreeMap<i64, Slot>,
}

impl Merged {
    fn add(&mut self, metric: &str, m: SeriesBuckets) -> Result<(), QueryError> {
        if let (Some(k), Some(mk)) = (self.kind, m.kind) {
            if k.is_counter() != mk.is_counter() {
                return Err(QueryError::Invalid(format!(
                    "{metric} is a {} on some sources and a {} on {}: an aggregate across them would mix gauges and counters; select sources of one kind",
                    k.as_str(),
                    mk.as_str(),
                    m.series.source
                )));
            }
        }
        // Counters pool as deltas whatever their agents sent.
        self.kind = self.kind.or(m.kind.map(|k| match k {
            SampleKind::Gauge => SampleKind::Gauge,
            _ => SampleKind::DeltaCounter,
        }));
        for (t, s) in m.buckets {
            self.buckets.entry(t).or_default().merge(&s);
        }
        Ok(())
    }
}

/// A selection over `limit`; `n` is the count or a bound on it.
fn too_many_series(n: &str, limit: usize, limit_name: &str) -> QueryError {
    QueryError::Limit(format!(
        "the selection matches {n} series; the limit is {limit} ({limit_name}): narrow the source or metric selector"
    ))
}

fn describe_groups(r: &Rollups) -> String {
    let mut names: Vec<String> = r
        .listed()
        .into_iter()
        .map(|g| format!("{:?}", g.name))
        .collect();
    if let Some(d) = r.prefix_delimiter() {
        names.push(format!("any source prefix before {d:?}"));
    }
    if names.is_empty() {
        "none configured".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_steps_read_the_widest_dividing_slots() {
        assert_eq!(Step::fixed(60).unwrap(), Step::MINUTE);
        assert_eq!(Step::fixed(300).unwrap().resolution, Resolution::Minute);
        assert_eq!(Step::fixed(7200).unwrap().resolution, Resolution::Hour);
        assert_eq!(Step::fixed(5400).unwrap().resolution, Resolution::Minute);
        assert_eq!(Step::fixed(7 * DAY_S).unwrap().resolution, Resolution::Day);
        assert!(Step::fixed(30).is_err());
        assert!(Step::fixed(90).is_err());
        assert_eq!(Step::fixed(21_600).unwrap().label(), "6h");
    }

    #[test]
    fn auto_picks_the_finest_step_within_budget() {
        let at = |span: i64, points: usize| Step::auto(1_000_000_020, 1_000_000_020 + span, points);
        assert_eq!(at(HOUR_S, 1440), Step::MINUTE);
        // A day is 1440 minutes, plus the bucket holding `from`: 2m.
        assert_eq!(at(DAY_S, 1440).width_s, 120);
        assert_eq!(at(DAY_S - 120, 1440).width_s, 60);
        assert_eq!(at(30 * DAY_S, 1440).width_s, HOUR_S);
        assert_eq!(at(30 * DAY_S, 100).width_s, 12 * HOUR_S);
        assert_eq!(at(3650 * DAY_S, 100).resolution, Resolution::Day);
        let w = at(3650 * DAY_S, 100).width_s;
        assert!((3650 * DAY_S + w - 1) / w < 100);
    }

    #[test]
    fn step_specs() {
        assert_eq!(
            StepSpec::parse("auto", Some(10)).unwrap(),
            StepSpec::Auto {
                max_points: Some(10)
            }
        );
        assert_eq!(
            StepSpec::parse("5m", None).unwrap(),
            StepSpec::Fixed(Step::fixed(300).unwrap())
        );
        assert_eq!(
            StepSpec::parse("3600", None).unwrap(),
            StepSpec::Fixed(Step::HOUR)
        );
        assert!(StepSpec::parse("15s", None).is_err());
        assert!(StepSpec::parse("soon", None).is_err());
    }

    #[test]
    fn points_carry_the_aggregates_asked_for() {
        let mut s = Slot::of(2.0);
        s.add(4.0);
        let all = Point::of(0, &s, 60, true, &[]);
        assert_eq!(
            (all.n, all.sum, all.min, all.max, all.avg, all.rate),
            (
                Some(2),
                Some(6.0),
                Some(2.0),
                Some(4.0),
                Some(3.0),
                Some(0.1)
            )
        );
        let gauge = Point::of(0, &s, 60, false, &[]);
        assert_eq!(gauge.rate, None);
        let some = Point::of(0, &s, 60, false, &[Aggregate::Max, Aggregate::Count]);
        assert_eq!((some.max, some.n, some.sum), (Some(4.0), Some(2), None));
        assert_eq!(
            Aggregate::parse_list("max,avg,max").unwrap(),
            vec![Aggregate::Avg, Aggregate::Max]
        );
        assert!(Aggregate::parse_list("p99").is_err());
    }

    #[test]
    fn selections_of_exact_names_need_no_catalog() {
        let sel = Selection {
            source: vec![NameMatcher::parse_list("a,b").unwrap()],
            metric: vec![NameMatcher::exact("m")],
        };
        assert_eq!(
            sel.enumerate().unwrap(),
            (
                vec!["a".to_string(), "b".to_string()],
                vec!["m".to_string()]
            )
        );
        let glob = Selection {
            source: vec![NameMatcher::parse_list("a*").unwrap()],
            metric: vec![NameMatcher::exact("m")],
        };
        assert!(glob.enumerate().is_none());
    }
}
