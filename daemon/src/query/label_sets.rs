//! Which label sets a source's metric has: what a read of an exact source
//! and metric selects, since with labels one (source, metric) pair can be
//! many series (PromQL's meaning of `metric{source="x"}`).
//!
//! Two places know: the aggregator, for series in memory (fresh to the
//! sample, before any flush), and the store's catalog, for series that went
//! idle or were written before a restart or by another daemon. The
//! catalog's answer is cached for [`CACHE_TTL`]: a new series is in memory
//! long before it could leave it (`ingest.series_idle_timeout`), so only
//! series another daemon created can be that much late, and a dashboard
//! refreshing every few seconds costs one catalog read per pair a minute
//! rather than one per refresh.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use parking_lot::Mutex;

use super::{QueryEngine, QueryError};
use crate::labels::Labels;
use crate::model::{SeriesId, SeriesRef};
use crate::rollup::Rollups;
use crate::selector::NameMatcher;
use crate::store::CatalogQuery;

/// How long the catalog's label sets of a pair are reused.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Pairs cached at most; the cache starts over when full.
const CACHE_PAIRS: usize = 50_000;

/// When a pair's label sets were read from the catalog, and what they were.
type Cached = (Instant, Vec<Labels>);

/// The catalog's label sets per `source|metric`.
#[derive(Default)]
pub(super) struct LabelSetCache {
    pairs: Mutex<HashMap<Box<str>, Cached>>,
}

impl LabelSetCache {
    fn get(&self, key: &str) -> Option<Vec<Labels>> {
        let pairs = self.pairs.lock();
        let (at, sets) = pairs.get(key)?;
        (at.elapsed() < CACHE_TTL).then(|| sets.clone())
    }

    fn put(&self, key: &str, sets: Vec<Labels>) {
        let mut pairs = self.pairs.lock();
        if pairs.len() >= CACHE_PAIRS {
            pairs.clear();
        }
        pairs.insert(key.into(), (Instant::now(), sets));
    }
}

impl QueryEngine {
    /// Every series of `source`'s `metric`: its label sets in memory and in
    /// the catalog, at most `limit + 1` of them. The unlabelled series is
    /// among them when it exists, and stands alone for a pair nobody knows
    /// (an unknown series reads as empty, not as an error).
    pub async fn series_of(
        &self,
        source: &str,
        metric: &str,
        limit: usize,
    ) -> Result<Vec<SeriesId>, QueryError> {
        let key = format!("{source}|{metric}");
        let stored = match self.label_sets.get(&key) {
            Some(sets) => sets,
            None => {
                let (sets, from_memory) = self.stored_label_sets(source, metric, limit).await?;
                // What memory alone says is not the catalog's answer.
                if !from_memory {
                    self.label_sets.put(&key, sets.clone());
                }
                sets
            }
        };
        let mut sets: BTreeSet<Labels> = stored.into_iter().collect();
        if Rollups::is_rollup_source(source) {
            // Rollup series live in the rollups, not the aggregator.
            sets.extend(self.rollups().label_sets(source, metric));
        } else {
            for id in self.agg.labelled_series(source, metric) {
                sets.insert(id.labels.clone());
            }
        }
        if sets.is_empty() || self.agg.has_series(SeriesRef::new(source, metric)) {
            sets.insert(Labels::none());
        }
        Ok(sets
            .into_iter()
            .take(limit.saturating_add(1))
            .map(|l| SeriesId::with_labels(source, metric, l))
            .collect())
    }

    async fn stored_label_sets(
        &self,
        source: &str,
        metric: &str,
        limit: usize,
    ) -> Result<(Vec<Labels>, bool), QueryError> {
        let (found, from_memory) = self
            .listed(&CatalogQuery {
                source: vec![NameMatcher::exact(source)],
                metric: vec![NameMatcher::exact(metric)],
                labels: Vec::new(),
                kind: None,
                seen_since: None,
                after: None,
                limit: limit.saturating_add(1),
            })
            .await?;
        Ok((found.into_iter().map(|id| id.labels).collect(), from_memory))
    }
}
