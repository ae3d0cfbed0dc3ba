//! The engine: which series a selection covers, and their buckets in a
//! window, fresh to the second; range and latest reads built on them.
//!
//! The engine holds what it reads directly: the store, the aggregator (for
//! the newest sample), the rollups, and the flush pipeline's in-flight
//! batches. Cross-source aggregates and discovery extend it in their own
//! modules.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};

use super::error::too_many_series;
use super::merge::{merge_unflushed, Recent};
use super::{Aggregate, Point, QueryConfig, QueryError, Step, StepSpec, Window};
use crate::aggregator::{Aggregator, RecentWanted};
use crate::flush::Inflight;
use crate::model::{
    validate_metric, validate_source, Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S,
    MINUTE_S,
};
use crate::rollup::Rollups;
use crate::selector::{all_match, all_match_labels, LabelMatcher, NameMatcher};
use crate::store::{
    source_selected, CatalogEntry, CatalogQuery, DocRead, ReadQuery, Store, StoreError,
};

/// Non-empty buckets: (bucket start, merged slot), ascending.
pub type Buckets = Vec<(i64, Slot)>;

/// A series' non-empty buckets in a window, before choosing aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesBuckets {
    pub series: SeriesId,
    /// None when the series is unknown (no data in the range, nothing in memory).
    pub kind: Option<SampleKind>,
    /// Ascending bucket starts with their merged slots, none empty.
    pub buckets: Buckets,
    /// The series' newest raw samples in memory, taken with the unflushed
    /// slots (none after a restart until it is sent again).
    pub recent: crate::model::RecentSamples,
}

impl SeriesBuckets {
    pub fn is_counter(&self) -> bool {
        self.kind.is_some_and(SampleKind::is_counter)
    }
}

/// `rate` of a gauge has no meaning; asking for it is an error rather than
/// points that silently lack it.
fn refuse_rate_of_gauges(
    series: &[SeriesBuckets],
    aggregates: &[Aggregate],
) -> Result<(), QueryError> {
    if !aggregates.contains(&Aggregate::Rate) {
        return Ok(());
    }
    match series.iter().find(|b| b.kind == Some(SampleKind::Gauge)) {
        Some(b) => Err(QueryError::Invalid(format!(
            "rate is defined for counters, and {}|{} is a gauge: leave rate out of agg (avg, min, max, sum and count apply to gauges) or select counters only",
            b.series.source, b.series.metric
        ))),
        None => Ok(()),
    }
}

/// A series' labels as responses carry them: `{"name": "value", ...}`.
pub type LabelMap = std::collections::BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesRange {
    pub source: String,
    pub metric: String,
    /// Absent in JSON for a series without labels, as before labels existed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: LabelMap,
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

/// Which series a call is about: every matcher on a name, and every label
/// matcher, must accept it.
#[derive(Debug, Clone)]
pub struct Selection {
    pub source: Vec<NameMatcher>,
    pub metric: Vec<NameMatcher>,
    pub labels: Vec<LabelMatcher>,
}

impl Selection {
    /// Every series of one source's metric, whatever its labels.
    pub fn exact(source: &str, metric: &str) -> Selection {
        Selection {
            source: vec![NameMatcher::exact(source)],
            metric: vec![NameMatcher::exact(metric)],
            labels: Vec::new(),
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
    /// Absent in JSON for a series without labels, as before labels existed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: LabelMap,
    pub kind: Option<SampleKind>,
    /// The newest sample this daemon has seen (a cumulative counter's value
    /// as sent). Absent when the series is not in this daemon's memory
    /// (idle, restarted, or fed through another daemon).
    pub last: Option<LatestValue>,
    /// The current minute's slot so far, store and memory merged.
    pub minute: Option<Point>,
}

pub struct QueryEngine {
    store: Arc<dyn Store>,
    pub(super) agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    inflight: Arc<Inflight>,
    limits: QueryConfig,
    hour_retention_s: i64,
    /// `ingest.lateness_window`, seconds: how far back a flush's minutes go.
    lateness_s: i64,
    pub(super) label_sets: super::label_sets::LabelSetCache,
    /// What agents say of their metric families, for `/api/v1/metadata`.
    metadata: Arc<crate::metadata::MetadataBook>,
    budget: super::ReadBudget,
}

/// Minute ranges up to this long read hour documents; longer ones read day
/// documents, which carry the same minutes in a twenty-fourth of the
/// documents.
const MINUTE_FROM_HOUR_TIER_MAX_S: i64 = 2 * DAY_S;

/// Estimated bytes a native read holds per bucket: the merged slot, its
/// time and the point answered.
const BYTES_PER_POINT: u64 = 160;

/// Series read at once when a call spans many.
pub(super) const READ_CONCURRENCY: usize = 16;

impl QueryEngine {
    /// `inflight` is the flush pipeline's view of what it has cut and the
    /// store does not have yet ([`crate::flush::Pipeline::inflight`]);
    /// `hour_retention_s` is how long hour documents are kept.
    pub fn new(
        store: Arc<dyn Store>,
        agg: Arc<Aggregator>,
        rollups: Arc<Rollups>,
        inflight: Arc<Inflight>,
        limits: QueryConfig,
        hour_retention_s: i64,
    ) -> QueryEngine {
        QueryEngine {
            store,
            agg,
            rollups,
            inflight,
            limits: limits.clone(),
            hour_retention_s,
            lateness_s: HOUR_S,
            label_sets: Default::default(),
            metadata: Arc::default(),
            budget: super::ReadBudget::new(limits.read_budget_bytes, limits.read_budget_wait),
        }
    }

    /// Reads the families' descriptions from `book` (see
    /// [`crate::metadata`]).
    pub fn with_metadata(mut self, book: Arc<crate::metadata::MetadataBook>) -> QueryEngine {
        self.metadata = book;
        self
    }

    pub fn metadata(&self) -> &crate::metadata::MetadataBook {
        &self.metadata
    }

    /// How old a minute a flush may bring (`ingest.lateness_window`; 1 h
    /// unless told).
    pub fn with_lateness(mut self, lateness: std::time::Duration) -> QueryEngine {
        self.lateness_s = i64::try_from(lateness.as_secs()).unwrap_or(i64::MAX / 4);
        self
    }

    pub fn limits(&self) -> &QueryConfig {
        &self.limits
    }

    pub fn rollups(&self) -> &Arc<Rollups> {
        &self.rollups
    }

    /// Reserves `bytes` of the read budget every read shares (see
    /// [`super::ReadBudget`]), waiting for other reads if need be.
    pub async fn reserve(&self, bytes: u64) -> Result<super::Reservation, QueryError> {
        self.budget.reserve(bytes).await
    }

    pub fn budget(&self) -> &super::ReadBudget {
        &self.budget
    }

    /// Reserves the read budget for `points` buckets read and answered
    /// (a merged slot and the point made of it, with their overheads).
    pub async fn reserve_points(&self, points: u64) -> Result<super::Reservation, QueryError> {
        self.reserve(points.saturating_mul(BYTES_PER_POINT)).await
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
        Window::settle(from, to, step, &self.limits)
    }

    /// Which documents serve `w`'s slots.
    fn tier(&self, w: &Window) -> Tier {
        let now = chrono::Utc::now().timestamp();
        match w.step.resolution {
            // The first hour document starts at or before `from`; it must
            // still be within the hour tier's retention.
            Resolution::Minute
                if w.end() - w.from <= MINUTE_FROM_HOUR_TIER_MAX_S
                    && Tier::Hour.period_start(w.from.div_euclid(MINUTE_S))
                        >= now - self.hour_retention_s + HOUR_S =>
            {
                Tier::Hour
            }
            _ => Tier::Day,
        }
    }

    /// Where a day-tier read of `w` switches to the hour documents: the
    /// start of the oldest hour a flush of the last `day_tier_lag` can have
    /// touched, whose minutes another daemon's day documents may still lack.
    /// None when the day documents are never behind.
    fn recent_cut(&self, w: &Window) -> Option<i64> {
        let lag = i64::try_from(self.store.day_tier_lag().as_secs()).unwrap_or(i64::MAX / 4);
        if lag == 0 {
            return None;
        }
        let now = chrono::Utc::now().timestamp();
        let oldest = now.saturating_sub(lag).saturating_sub(self.lateness_s);
        let cut = Tier::Hour.period_start(oldest.div_euclid(MINUTE_S));
        (cut < w.end()).then_some(cut.max(w.from))
    }

    /// One series' non-empty buckets: the store merged with what is not in
    /// it yet; with its newest raw samples if `recent` asks for them.
    pub async fn buckets(
        &self,
        id: &SeriesId,
        w: &Window,
        recent: RecentWanted,
    ) -> Result<SeriesBuckets, QueryError> {
        let tier = self.tier(w);
        let key = id.series_ref();
        // Unflushed first, then the store: see `flush::Inflight`.
        let unflushed = self.inflight.unflushed(key, recent);
        let read = |tier, resolution, from, to| ReadQuery {
            series: id.clone(),
            tier,
            resolution,
            from,
            to,
        };
        let cut = match tier {
            Tier::Day => self.recent_cut(w),
            Tier::Hour => None,
        };
        let (docs, recent) = match cut {
            None => {
                let q = read(tier, w.step.resolution, w.from, w.end());
                (self.read_docs(&q).await?, None)
            }
            Some(cut) => {
                // Hour documents serve minutes and hours; daily buckets add
                // up the hours on both sides of the cut.
                let res = match w.step.resolution {
                    Resolution::Day => Resolution::Hour,
                    r => r,
                };
                let older = match w.from < cut {
                    true => self.read_docs(&read(Tier::Day, res, w.from, cut)).await?,
                    false => Vec::new(),
                };
                let docs = self.read_docs(&read(Tier::Hour, res, cut, w.end())).await?;
                (older, Some(Recent { cut, docs }))
            }
        };
        let (kind, buckets) = merge_unflushed(docs, &unflushed, tier, recent, w);
        Ok(SeriesBuckets {
            series: id.clone(),
            kind,
            buckets,
            recent: unflushed.recent,
        })
    }

    /// The store's documents for `q`; none, noted as partial, while the
    /// store is unreachable (see [`partial`](super::partial)).
    async fn read_docs(&self, q: &ReadQuery) -> Result<Vec<DocRead>, QueryError> {
        if let Some(why) = self.store.outage() {
            super::partial::note(&why);
            return Ok(Vec::new());
        }
        let started = std::time::Instant::now();
        let docs = self.store.read(q).await;
        crate::telemetry::store_operation(
            self.store.name(),
            "read",
            started.elapsed().as_secs_f64(),
        );
        // Stores count their own read errors in `tally_store_errors_total`.
        match docs {
            Err(StoreError::Unavailable(why)) => {
                super::partial::note(&why);
                Ok(Vec::new())
            }
            docs => Ok(docs?),
        }
    }

    /// The series a catalog query selects, for a read: from the catalog,
    /// or while the store is unreachable from the series in memory (noted
    /// as partial; the second value says so).
    pub(super) async fn listed(
        &self,
        q: &CatalogQuery,
    ) -> Result<(Vec<SeriesId>, bool), QueryError> {
        let (found, partial) = self.catalog_or_memory(q).await?;
        let ids = found
            .into_iter()
            .map(|e| std::sync::Arc::unwrap_or_clone(e.series))
            .collect();
        Ok((ids, partial))
    }

    /// A catalog listing, or while the store is unreachable the series in
    /// memory that it selects, in key order (noted as partial; the second
    /// value says so).
    async fn catalog_or_memory(
        &self,
        q: &CatalogQuery,
    ) -> Result<(Vec<CatalogEntry>, bool), QueryError> {
        let why = match self.store.outage() {
            Some(why) => why,
            None => match self.store.catalog_list(q).await {
                Ok(found) => return Ok((found, false)),
                Err(StoreError::Unavailable(why)) => why.into(),
                Err(e) => return Err(e.into()),
            },
        };
        super::partial::note(&why);
        let keep = |id: &SeriesId, kind: SampleKind| {
            q.kind.is_none_or(|k| k == kind)
                && source_selected(&q.source, &id.source)
                && all_match(&q.metric, &id.metric)
                && all_match_labels(&q.labels, &id.labels)
                && q.after.as_ref().is_none_or(|after| id.key() > after.key())
        };
        let mut found = self.agg.entries_where(keep, q.limit);
        found.sort_by_cached_key(|e| e.series.key());
        Ok((found, true))
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
            let mut ids = Vec::new();
            for s in &sources {
                for m in &metrics {
                    // Boxed: this future sits inside every level of a nested
                    // PromQL evaluation, whose poll frames must stay small.
                    let of_pair = Box::pin(self.series_of(s, m, limit)).await?;
                    ids.extend(
                        of_pair
                            .into_iter()
                            .filter(|id| all_match_labels(&sel.labels, &id.labels)),
                    );
                    if ids.len() > limit {
                        return Err(too_many(format!("more than {limit}")));
                    }
                }
            }
            return Ok(ids);
        }
        // Boxed, like `series_of` above: the listing's future would
        // otherwise sit inside every level of a nested PromQL evaluation.
        let (found, _) = Box::pin(self.listed(&CatalogQuery {
            source: sel.source.clone(),
            metric: sel.metric.clone(),
            labels: sel.labels.clone(),
            kind: None,
            seen_since: None,
            after: None,
            limit: limit + 1,
        }))
        .await?;
        if found.len() > limit {
            return Err(too_many(format!("more than {limit}")));
        }
        Ok(found)
    }

    /// While the store is unreachable, the series in memory stand in.
    pub(super) async fn catalog(&self, q: &CatalogQuery) -> Result<Vec<CatalogEntry>, QueryError> {
        // The store counts the operation, its latency and its errors.
        Ok(self.catalog_or_memory(q).await?.0)
    }

    /// Buckets of many series, read concurrently, in the given order (see
    /// [`QueryEngine::buckets`] for `recent`).
    pub async fn many_buckets(
        &self,
        ids: &[SeriesId],
        w: &Window,
        recent: RecentWanted,
    ) -> Result<Vec<SeriesBuckets>, QueryError> {
        let w = *w;
        // Owned ids: a borrowing closure trips the compiler's higher-ranked
        // lifetime check on `Send` futures.
        futures::stream::iter(ids.to_vec())
            .map(move |id| async move { self.buckets(&id, &w, recent).await })
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
        let _reserved = self
            .reserve_points((ids.len() as u64).saturating_mul(w.buckets().max(0) as u64))
            .await?;
        let buckets = self.many_buckets(&ids, &w, RecentWanted::No).await?;
        refuse_rate_of_gauges(&buckets, aggregates)?;
        let series = buckets
            .into_iter()
            .map(|b| SeriesRange {
                points: Point::all(&b.buckets, w.step.width_s, b.is_counter(), aggregates),
                labels: b.series.labels.to_map(),
                source: b.series.source.to_string(),
                metric: b.series.metric.to_string(),
                kind: b.kind,
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
        let _reserved = self.reserve_points(ids.len() as u64).await?;
        Ok(self
            .many_buckets(&ids, &w, RecentWanted::No)
            .await?
            .into_iter()
            .map(|b| {
                let last = self.agg.last_sample(b.series.series_ref());
                let counter = b.is_counter();
                Latest {
                    minute: b
                        .buckets
                        .first()
                        .map(|(t, s)| Point::of(*t, s, MINUTE_S, counter, &[])),
                    kind: b.kind.or(last.map(|l| l.0)),
                    last: last.map(|(_, t_ms, value)| LatestValue { t_ms, value }),
                    labels: b.series.labels.to_map(),
                    source: b.series.source.to_string(),
                    metric: b.series.metric.to_string(),
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_of_exact_names_need_no_catalog() {
        let sel = Selection {
            source: vec![NameMatcher::parse_list("a,b").unwrap()],
            metric: vec![NameMatcher::exact("m")],
            labels: Vec::new(),
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
            labels: Vec::new(),
        };
        assert!(glob.enumerate().is_none());
    }
}
