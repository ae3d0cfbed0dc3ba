//! Discovery: which series, sources and metrics exist, from the store's
//! catalog, a page at a time.
//!
//! Separate from the engine's reads because it touches only the catalog,
//! never documents or memory, and its cost is bounded differently: by
//! `query.max_page` and a cap on the catalog entries one listing scans.

use std::collections::BTreeSet;

use super::{QueryEngine, QueryError, Selection};
use crate::model::{SampleKind, SeriesId};
use crate::selector::NameMatcher;
use crate::store::{CatalogEntry, CatalogQuery};

/// Catalog entries fetched per page while scanning for distinct names.
const SCAN_PAGE: usize = 1_000;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeriesInfo {
    pub source: String,
    pub metric: String,
    /// Absent in JSON for a series without labels, as before labels existed.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: super::LabelMap,
    pub kind: SampleKind,
    pub first_seen: i64,
    pub last_seen: i64,
}

impl From<CatalogEntry> for SeriesInfo {
    fn from(e: CatalogEntry) -> SeriesInfo {
        SeriesInfo {
            source: e.series.source.to_string(),
            labels: e.series.labels.to_map(),
            metric: e.series.metric.to_string(),
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

impl QueryEngine {
    /// A page of catalog entries.
    pub async fn series(&self, mut q: CatalogQuery) -> Result<Page<SeriesInfo>, QueryError> {
        q.limit = self.page_limit(q.limit)?;
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

    /// A reader's page size: at least one, and over `query.max_page` an
    /// error rather than a silently shorter page.
    fn page_limit(&self, limit: usize) -> Result<usize, QueryError> {
        let max = self.limits().max_page;
        if limit > max {
            return Err(QueryError::Invalid(format!(
                "limit {limit} is above query.max_page = {max}: ask for at most {max} and continue with `next`"
            )));
        }
        Ok(limit.max(1))
    }

    /// Most catalog entries one distinct-name listing scans.
    fn scan_cap(&self) -> usize {
        self.limits().max_page.saturating_mul(100)
    }

    /// One page of a scan for distinct names.
    async fn scan_page(
        &self,
        sel: &Selection,
        after: Option<SeriesId>,
    ) -> Result<Vec<CatalogEntry>, QueryError> {
        self.catalog(&CatalogQuery {
            source: sel.source.clone(),
            metric: sel.metric.clone(),
            labels: sel.labels.clone(),
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
        let limit = self.page_limit(limit)?;
        let mut out: Vec<String> = Vec::new();
        // Past every metric of a source: `~` sorts after the metric charset.
        let skip = |s: &str| SeriesId::new(s, "~");
        let mut cursor = after.as_deref().map(skip);
        let mut scanned = 0usize;
        let mut capped = false;
        loop {
            let sel = Selection {
                source: source.clone(),
                metric: metric.clone(),
                labels: Vec::new(),
            };
            let page = self.scan_page(&sel, cursor.clone()).await?;
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
        let sel = Selection {
            source,
            metric,
            labels: Vec::new(),
        };
        self.distinct(&sel, after, limit, "metrics", |e, out| {
            out.insert(e.series.metric.to_string());
        })
        .await
    }

    /// Distinct label names of the selected series, like Prometheus'
    /// `labels` (the source is not among them: it has its own listing).
    pub async fn label_names(
        &self,
        sel: &Selection,
        after: Option<String>,
        limit: usize,
    ) -> Result<Page<String>, QueryError> {
        self.distinct(sel, after, limit, "label names", |e, out| {
            out.extend(
                e.series
                    .labels
                    .pairs()
                    .into_iter()
                    .map(|(n, _)| n.to_string()),
            );
        })
        .await
    }

    /// Distinct values of label `name` over the selected series, like
    /// Prometheus' `label/<name>/values` (series without it add nothing).
    pub async fn label_values(
        &self,
        name: &str,
        sel: &Selection,
        after: Option<String>,
        limit: usize,
    ) -> Result<Page<String>, QueryError> {
        self.distinct(sel, after, limit, "label values", |e, out| {
            out.extend(e.series.labels.get(name).map(|v| v.into_owned()));
        })
        .await
    }

    /// Distinct strings `pick` takes from every selected catalog entry, in
    /// order, after `after`. Scans the matching series: at most a hundred
    /// pages of `query.max_page` (a million entries by default), else an
    /// error naming `what`.
    async fn distinct(
        &self,
        sel: &Selection,
        after: Option<String>,
        limit: usize,
        what: &str,
        pick: impl Fn(&CatalogEntry, &mut BTreeSet<String>),
    ) -> Result<Page<String>, QueryError> {
        let limit = self.page_limit(limit)?;
        let mut names = BTreeSet::new();
        let mut cursor = None;
        let mut scanned = 0usize;
        loop {
            let page = self.scan_page(sel, cursor).await?;
            scanned += page.len();
            let exhausted = page.len() < SCAN_PAGE;
            cursor = page.last().map(|e| (*e.series).clone());
            for e in &page {
                pick(e, &mut names);
            }
            if exhausted {
                break;
            }
            if scanned >= self.scan_cap() {
                return Err(QueryError::Limit(format!(
                    "listing {what} scans every matching series and more than {} match (a hundred pages of query.max_page): select fewer series",
                    self.scan_cap()
                )));
            }
        }
        let items: Vec<String> = names
            .into_iter()
            .filter(|n| after.as_deref().is_none_or(|a| n.as_str() > a))
            .take(limit)
            .collect();
        let next = (items.len() == limit)
            .then(|| items.last().cloned())
            .flatten();
        Ok(Page { items, next })
    }
}
