//! The storage boundary. A store keeps the hour and day documents of the
//! document model and knows nothing of gRPC, the aggregator or time passing.
//!
//! Two implementations sit behind [`Store`]: [`embedded`] (the default, a
//! local file) and `mongodb`. Both must give the same answers to the same
//! flushes; the conformance tests hold them to it.
//!
//! Exactly-once: every document carries, per writer, the highest
//! [`FlushId`] applied to it (its watermark). `apply` skips a document whose
//! watermark is already at or past the batch's id, so replaying a batch after
//! an ambiguous failure never counts twice. `read` returns the watermark so the
//! query engine can tell which in-flight batches a document already contains.

pub mod embedded;
pub mod mongodb;

use crate::model::{DocKey, FlushBatch, Resolution, SampleKind, SeriesId, Slot, Tier};
use crate::selector::NameMatcher;

/// What a store did with one flush.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Documents updated (or created) by this call.
    pub documents_written: usize,
    /// Documents skipped because they already held this flush.
    pub documents_skipped: usize,
    /// Statements sent to the database (0 for the embedded store).
    pub statements: usize,
    /// Round trips to the database (0 for the embedded store).
    pub round_trips: usize,
}

/// What a store did with a pre-allocation request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreallocStats {
    pub created: usize,
    pub already_present: usize,
}

/// A range read of one series from one tier.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadQuery {
    pub series: SeriesId,
    /// Which documents to read.
    pub tier: Tier,
    /// Which slots of them: minute slots, hour slots or the day slot. The
    /// hour tier serves minutes (its minute slots) and hours (its running
    /// slot); the day tier serves all three. `Day` from the hour tier is
    /// [`StoreError::Invalid`].
    pub resolution: Resolution,
    /// Half-open range of bucket starts, Unix seconds: `from <= t < to`.
    pub from: i64,
    pub to: i64,
}

/// One document's contribution to a read.
#[derive(Debug, Clone, PartialEq)]
pub struct DocRead {
    pub period_start: i64,
    pub kind: Option<SampleKind>,
    /// Highest flush of this daemon applied to the document; 0 if none.
    pub watermark: u64,
    /// Non-empty slots in range, as (bucket start in Unix seconds, slot),
    /// ascending.
    pub slots: Vec<(i64, Slot)>,
}

/// One series in the catalog: what discovery lists.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    pub series: SeriesId,
    pub kind: SampleKind,
    /// Start of the earliest / latest minute with data, Unix seconds. The
    /// daemon refreshes `last_seen` coarsely (see `catalog`), not per sample.
    pub first_seen: i64,
    pub last_seen: i64,
}

/// A catalog listing. Entries come in ascending byte order of the series
/// key `source|metric` (what [`SeriesId::key`] returns), which is also the
/// pagination order.
#[derive(Debug, Clone)]
pub struct CatalogQuery {
    /// Every matcher must accept the source (PromQL semantics).
    pub source: Vec<NameMatcher>,
    /// Every matcher must accept the metric.
    pub metric: Vec<NameMatcher>,
    pub kind: Option<SampleKind>,
    /// Only series with `last_seen >= seen_since` (Unix seconds).
    pub seen_since: Option<i64>,
    /// Exclusive cursor: only series whose key sorts after this one.
    pub after: Option<SeriesId>,
    /// At most this many entries.
    pub limit: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer; worth retrying.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store answered, but the outcome is not known (e.g. the connection
    /// dropped after the request was sent). Retrying is safe: applies are
    /// idempotent per flush.
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    /// Stored data is not what this version of Tally writes.
    #[error("corrupt document {doc}: {reason}")]
    Corrupt { doc: String, reason: String },
    /// A request the store cannot serve.
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("store I/O: {0}")]
    Io(String),
}

impl StoreError {
    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::Ambiguous(_) | StoreError::Io(_)
        )
    }

    /// Short label for the `kind` label of error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Ambiguous(_) => "ambiguous",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::Invalid(_) => "invalid",
            StoreError::Io(_) => "io",
        }
    }
}

#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// `embedded` or `mongodb`, for logs and metric labels.
    fn name(&self) -> &'static str;

    /// Applies one flush: for every document, add the minute slots to the
    /// minute, hour and day levels. Idempotent per `batch.id`.
    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError>;

    /// Creates the given documents with every slot present and empty, where
    /// they do not exist yet. Never changes an existing document.
    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError>;

    /// Reads one series' slots of one tier in a range.
    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError>;

    /// The highest flush id this writer has applied, so that a restarted
    /// daemon continues above it.
    async fn last_flush_id(&self) -> Result<u64, StoreError>;

    /// Deletes documents past their tier's retention, for stores without a
    /// TTL mechanism of their own. Returns how many went.
    async fn expire(
        &self,
        _now_s: i64,
        _hour_retention_s: i64,
        _day_retention_s: i64,
    ) -> Result<usize, StoreError> {
        Ok(0)
    }

    /// Records series in the catalog: inserts unknown ones; for known ones
    /// keeps the earliest `first_seen`, the latest `last_seen` and takes the
    /// given kind. Idempotent.
    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError>;

    /// Lists catalog entries matching `query`, in key order.
    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError>;

    /// Cheap liveness check for readiness probes.
    async fn health(&self) -> Result<(), StoreError>;

    /// Makes everything applied so far durable. Called on shutdown.
    async fn close(&self) -> Result<(), StoreError>;
}
