//! A store double for the pipeline's tests: a real embedded store behind
//! switches that make it refuse series in an apply (each of them, as a
//! store reports statements it refused, or all of them) or whole catalog
//! writes, counting the catalog entries it took.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::model::{FlushBatch, SeriesMinutes};
use crate::store::embedded::EmbeddedStore;
use crate::store::{
    ApplyStats, CatalogEntry, CatalogQuery, DocRead, PreallocStats, ReadQuery, Refusal, Store,
    StoreError,
};

pub struct Faulty {
    inner: EmbeddedStore,
    /// Refuse each series whose metric is `bad`.
    pub refuse_bad: AtomicBool,
    /// Refuse every series of an apply.
    pub refuse_all: AtomicBool,
    /// Refuse whole catalog writes.
    pub refuse_catalog: AtomicBool,
    /// Catalog entries taken.
    pub catalog_entries: AtomicUsize,
}

impl Faulty {
    /// Refusing nothing yet.
    pub fn new(inner: EmbeddedStore) -> Faulty {
        Faulty {
            inner,
            refuse_bad: AtomicBool::new(false),
            refuse_all: AtomicBool::new(false),
            refuse_catalog: AtomicBool::new(false),
            catalog_entries: AtomicUsize::new(0),
        }
    }

    fn refuses(&self, sm: &SeriesMinutes) -> bool {
        self.refuse_all.load(Ordering::SeqCst)
            || (self.refuse_bad.load(Ordering::SeqCst) && &*sm.series.metric == "bad")
    }
}

#[async_trait::async_trait]
impl Store for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let mut refused = Vec::new();
        let mut kept = Vec::new();
        for (i, sm) in batch.series.iter().enumerate() {
            if self.refuses(sm) {
                refused.push(Refusal {
                    series: i,
                    hour_start: None,
                    error: format!("code 2: cannot apply {}", sm.series.metric),
                });
            } else {
                kept.push(sm.clone());
            }
        }
        let mut stats = if kept.is_empty() {
            ApplyStats::default()
        } else {
            let part = Arc::new(FlushBatch {
                hashes: Vec::new(),
                resumable: batch.resumable,
                id: batch.id,
                series: kept,
            });
            self.inner.apply_shared(&part).await?
        };
        stats.refused = refused;
        Ok(stats)
    }
    async fn preallocate(
        &self,
        docs: &[crate::model::DocKey],
    ) -> Result<PreallocStats, StoreError> {
        self.inner.preallocate(docs).await
    }
    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        self.inner.read(query).await
    }
    async fn last_flush_id(&self) -> Result<u64, StoreError> {
        self.inner.last_flush_id().await
    }
    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        if self.refuse_catalog.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "catalog refused by the test".into(),
            ));
        }
        self.catalog_entries
            .fetch_add(entries.len(), Ordering::SeqCst);
        self.inner.catalog_upsert(entries).await
    }
    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        self.inner.catalog_list(query).await
    }
    async fn health(&self) -> Result<(), StoreError> {
        self.inner.health().await
    }
    async fn close(&self) -> Result<(), StoreError> {
        self.inner.close().await
    }
}
