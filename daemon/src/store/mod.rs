//! The storage boundary. A store keeps the hour and day documents of the
//! document model and knows nothing of gRPC, the aggregator or time passing.
//!
//! Two implementations sit behind [`Store`]: [`embedded`] (the default, a
//! local file) and `mongodb`. Both must give the same answers to the same
//! flushes; the conformance tests hold them to it.
//!
//! Exactly-once: every document carries, per writer, the highest
//! [`FlushId`](crate::model::FlushId) applied to it (its watermark). `apply` skips a document whose
//! watermark is already at or past the batch's id, so replaying a batch after
//! an ambiguous failure never counts twice. `read` returns the watermark so the
//! query engine can tell which in-flight batches a document already contains.

mod config;

pub use config::RetentionConfig;
pub mod embedded;
mod error;
pub mod mongodb;

use std::time::Duration;

pub use self::error::{Cause, StoreError};

use crate::model::{
    validate_metric, validate_stored_source, DocKey, FlushBatch, Resolution, SampleKind, SeriesId,
    SeriesMinutes, Slot, Tier,
};
use crate::selector::{all_match, all_match_labels, combined_prefix, LabelMatcher, NameMatcher};

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
    /// What the store refused for good while it applied the rest: the
    /// flush pipeline retries these, then sets them aside as dead letters
    /// (`crate::deadletter`). A store that cannot tell which part of a
    /// flush is at fault fails the whole call instead.
    pub refused: Vec<Refusal>,
}

/// A part of a flush a store refused for good (not a transient failure):
/// nothing of it was applied, and everything else of the flush was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Index into the flush's `series`.
    pub series: usize,
    /// The hour (Unix seconds of its start) whose minutes were refused;
    /// None: every minute of the series in the flush.
    pub hour_start: Option<i64>,
    /// The store's error, as it gave it.
    pub error: String,
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
    /// Shared with the aggregator's id of the series when written: a flush
    /// that catalogues a million new series holds no copy of their names.
    pub series: std::sync::Arc<SeriesId>,
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
    /// Every matcher must accept the series' labels.
    pub labels: Vec<LabelMatcher>,
    pub kind: Option<SampleKind>,
    /// Only series with `last_seen >= seen_since` (Unix seconds).
    pub seen_since: Option<i64>,
    /// Exclusive cursor: only series whose key sorts after this one.
    pub after: Option<SeriesId>,
    /// At most this many entries.
    pub limit: usize,
}

impl CatalogQuery {
    /// Every series, at most `limit` of them.
    pub fn everything(limit: usize) -> CatalogQuery {
        CatalogQuery {
            source: Vec::new(),
            metric: Vec::new(),
            labels: Vec::new(),
            kind: None,
            seen_since: None,
            after: None,
            limit,
        }
    }

    /// Every key this query can list starts with this, so a scan in key order
    /// can begin at it and stop at the first key without it. An exact source
    /// fixes the whole `source|` part, and then the metric's prefix counts
    /// too; otherwise only the source's literal prefix is known.
    pub(crate) fn key_prefix(&self) -> String {
        match self.source.iter().find_map(NameMatcher::exact_name) {
            Some(source) => format!("{source}|{}", combined_prefix(&self.metric)),
            None => combined_prefix(&self.source).to_string(),
        }
    }

    /// Where a scan in key order starts, given [`Self::key_prefix`]: the key
    /// and whether that key itself may be listed.
    pub(crate) fn scan_start(&self, prefix: &str) -> (String, bool) {
        match &self.after {
            Some(after) => {
                let after = after.key();
                if after.as_str() >= prefix {
                    (after, false)
                } else {
                    (prefix.to_string(), true)
                }
            }
            None => (prefix.to_string(), true),
        }
    }

    /// Whether `entry` is one this query lists (ignoring `after` and
    /// `limit`). Stores call this on everything their range scan yields, so
    /// the matcher dialect is the same on every store.
    pub fn accepts(&self, entry: &CatalogEntry) -> bool {
        source_selected(&self.source, &entry.series.source) && self.accepts_beyond_source(entry)
    }

    /// [`Self::accepts`] for an entry whose source is known to be accepted.
    pub(crate) fn accepts_beyond_source(&self, entry: &CatalogEntry) -> bool {
        self.kind.is_none_or(|k| k == entry.kind)
            && self.seen_since.is_none_or(|s| entry.last_seen >= s)
            && all_match(&self.metric, &entry.series.metric)
            && all_match_labels(&self.labels, &entry.series.labels)
    }
}

/// Whether `matchers` select `source` in a catalog listing. A group
/// rollup's source (`@<group>`, see [`crate::rollup`]) is selected only when
/// a matcher names it exactly: the globs and regular expressions that pick
/// agents' sources must never add the rollups of those same sources.
pub fn source_selected(matchers: &[NameMatcher], source: &str) -> bool {
    all_match(matchers, source)
        && (!source.starts_with('@') || matchers.iter().any(|m| m.exact_name() == Some(source)))
}

/// The smallest string above every string that starts with `prefix`, when
/// one is easy to name (an ASCII last byte below DEL); `None` otherwise,
/// and for the empty prefix. Names are ASCII, so `None` costs at most a
/// looser range bound.
pub(crate) fn prefix_successor(prefix: &str) -> Option<String> {
    let last = *prefix.as_bytes().last()?;
    if last >= 0x7f {
        return None;
    }
    let mut out = prefix[..prefix.len() - 1].to_string();
    out.push(char::from(last + 1));
    Some(out)
}

/// Checks catalog entries before anything is written. Names must be valid
/// because the key joins them with `|`; times must fit a BSON date (Unix
/// milliseconds in an i64), so every store accepts the same entries.
pub(crate) fn check_catalog_entries(entries: &[CatalogEntry]) -> Result<(), StoreError> {
    const MAX_S: i64 = i64::MAX / 1000;
    for e in entries {
        // Rollup series (`@<group>`) are catalogued too.
        validate_stored_source(&e.series.source).map_err(|why| {
            StoreError::Invalid(format!("source {:?} {why}", e.series.source).into())
        })?;
        validate_metric(&e.series.metric).map_err(|why| {
            StoreError::Invalid(format!("metric {:?} {why}", e.series.metric).into())
        })?;
        for (what, t) in [("first_seen", e.first_seen), ("last_seen", e.last_seen)] {
            if !(-MAX_S..=MAX_S).contains(&t) {
                return Err(StoreError::Invalid(
                    format!("{}: {what} {t} is out of range", e.series).into(),
                ));
            }
        }
    }
    Ok(())
}

/// Merges entries of the same series within one call, in key order, so
/// that a store writes each key once and "the given kind" is the last one
/// given, whatever order the store applies its statements in.
pub(crate) fn merge_catalog_entries(entries: &[CatalogEntry]) -> Vec<(String, CatalogEntry)> {
    let mut by_key: std::collections::BTreeMap<String, CatalogEntry> = Default::default();
    for e in entries {
        by_key
            .entry(e.series.key())
            .and_modify(|old| {
                old.kind = e.kind;
                old.first_seen = old.first_seen.min(e.first_seen);
                old.last_seen = old.last_seen.max(e.last_seen);
            })
            .or_insert_with(|| e.clone());
    }
    by_key.into_iter().collect()
}

/// Records the latency and, on failure, the error of a store operation
/// that no caller times (the catalog's).
pub(crate) fn observe<T>(
    store: &'static str,
    op: &'static str,
    started: std::time::Instant,
    result: &Result<T, StoreError>,
) {
    crate::telemetry::store_operation(store, op, started.elapsed().as_secs_f64());
    if let Err(e) = result {
        metrics::counter!("tally_store_errors_total", "store" => store, "op" => op, "kind" => e.kind())
            .increment(1);
    }
}

/// Where a store keeps minutes it has acknowledged and cannot store: those
/// of a series whose document it finds damaged (the embedded store's
/// folds). Implemented by the dead letters (`crate::deadletter`), which
/// depend on this module, so the trait lives here.
pub trait SetAside: Send + Sync {
    /// Makes `minutes` durable elsewhere before the store forgets them.
    /// `since` is the first flush they hold and names what is kept: kept
    /// again with the same `since` (a crash came before the store forgot
    /// them), they replace what the earlier call kept. An error keeps the
    /// store from forgetting them: the operation fails and is retried.
    fn keep(&self, since: u64, minutes: &SeriesMinutes, error: &str) -> Result<(), String>;
}

#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// `embedded` or `mongodb`, for logs and metric labels.
    fn name(&self) -> &'static str;

    /// Applies one flush: for every document, add the minute slots to the
    /// minute, hour and day levels. Idempotent per `batch.id`.
    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError>;

    /// [`Store::apply`] of a batch the caller shares: a store that must keep
    /// the batch beyond the call (the embedded store, until a durable commit
    /// covers it) keeps this reference instead of a copy of every series'
    /// minutes.
    async fn apply_shared(
        &self,
        batch: &std::sync::Arc<FlushBatch>,
    ) -> Result<ApplyStats, StoreError> {
        self.apply(batch).await
    }

    /// Creates the given documents with every slot present and empty, where
    /// they do not exist yet. Never changes an existing document.
    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError>;

    /// Whether inserting `tier`'s documents ahead of their period spares
    /// the writes that come later any work. On MongoDB it does for both
    /// tiers: a document inserted whole never grows or moves. The upkeep
    /// asks only for the tiers that answer yes.
    fn preallocates(&self, tier: crate::model::Tier) -> bool {
        let _ = tier;
        true
    }

    /// Reads one series' slots of one tier in a range.
    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError>;

    /// The highest flush id this writer has applied, so that a restarted
    /// daemon continues above it. At start, before anything is applied, it
    /// is also durable: what a crash left.
    async fn last_flush_id(&self) -> Result<u64, StoreError>;

    /// The newest flush that is complete in the store, with every flush
    /// before it, as of a crash: where the write-ahead log's replay starts.
    /// A store whose last flush id at start is exactly that (embedded: the
    /// last durable commit) keeps this default.
    async fn complete_flush_id(&self) -> Result<u64, StoreError> {
        self.last_flush_id().await
    }

    /// The highest flush id any document may hold as of a crash, at or
    /// above [`Store::complete_flush_id`]. A flush of the write-ahead log
    /// above it is in no document yet, so replay may merge such flushes
    /// into one. Asked once at start, before replay; this default suits a
    /// store whose last flush id bounds every watermark it wrote.
    async fn highest_flush_held(&self) -> Result<u64, StoreError> {
        self.last_flush_id().await
    }

    /// The highest flush id a crash now would not lose, given that
    /// `applied` was just applied. A store whose acknowledged writes are
    /// durable (MongoDB, with its write concern) returns `applied`.
    fn durable_through(&self, applied: u64) -> u64 {
        applied
    }

    /// Whether the store is about to make the next flush it is given a
    /// point to resume from after a crash (the embedded store's
    /// checkpoint): the daemon then has that flush's marker carry what
    /// replay needs to begin there ([`crate::model::FlushBatch::resumable`]).
    fn checkpoint_due(&self) -> bool {
        false
    }

    /// How long after a flush another daemon's reads may still miss its
    /// minutes in the day documents (this daemon's own reads never do): the
    /// query engine reads the hours that recent from the hour documents.
    fn day_tier_lag(&self) -> Duration {
        Duration::ZERO
    }

    /// Why the store cannot be used any more, once something (a corrupt
    /// file, a panicked operation) made it so; None while it can. Unlike
    /// [`Store::health`] it is cheap and does no I/O, so ingest asks it for
    /// every request.
    fn fault(&self) -> Option<String> {
        None
    }

    /// Called when there is nothing to flush: a store that defers durability
    /// makes its applied flushes durable now if they have waited long
    /// enough, and returns its durable flush id then.
    async fn sync_idle(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    /// The store's own upkeep (MongoDB: seals of the hours that closed, a
    /// step of a stopped writer's takeover, the documents flushes saw
    /// first), each call a bounded share of it. The daemon calls it beside
    /// the flushes, never in their way: after each flush and every second.
    /// Returns the durable flush id when it moved.
    async fn upkeep(&self) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

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
    ///
    /// Stores record this call's latency (`tally_store_operations_total`,
    /// `tally_store_operation_duration_seconds`) and errors
    /// (`tally_store_errors_total`) themselves, with `op = "catalog_upsert"`.
    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError>;

    /// Why the store is known to be unreachable now, if it is: reads then
    /// answer from memory at once (flagged partial) instead of waiting for
    /// it. Cleared by the next operation that reaches it (the readiness
    /// probe runs every two seconds).
    fn outage(&self) -> Option<String> {
        None
    }

    /// The most update statements per second the store's server should be
    /// asked for; the flush pipeline spaces its flushes to stay under it.
    /// None: no bound.
    fn max_statements_per_s(&self) -> Option<f64> {
        None
    }

    /// Lists catalog entries matching `query`, in key order.
    ///
    /// Metrics as for [`Store::catalog_upsert`], with `op = "catalog_list"`.
    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError>;

    /// Cheap liveness check for readiness probes.
    async fn health(&self) -> Result<(), StoreError>;

    /// Makes everything applied so far durable. Called on shutdown.
    async fn close(&self) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::MatchOp;

    fn query(source: Vec<NameMatcher>, metric: Vec<NameMatcher>) -> CatalogQuery {
        CatalogQuery {
            source,
            metric,
            labels: Vec::new(),
            kind: None,
            seen_since: None,
            after: None,
            limit: 10,
        }
    }

    #[test]
    fn key_prefix_uses_what_every_match_must_start_with() {
        let web = NameMatcher::parse_list("web-*").unwrap();
        let cpu = NameMatcher::parse_list("cpu*").unwrap();
        assert_eq!(query(vec![], vec![]).key_prefix(), "");
        // The metric's prefix only counts behind an exact source.
        assert_eq!(
            query(vec![web.clone()], vec![cpu.clone()]).key_prefix(),
            "web-"
        );
        assert_eq!(
            query(vec![web, NameMatcher::exact("web-1")], vec![cpu.clone()]).key_prefix(),
            "web-1|cpu"
        );
        assert_eq!(
            query(vec![NameMatcher::exact("db")], vec![]).key_prefix(),
            "db|"
        );
        let not = NameMatcher::new(MatchOp::NotEqual, "db").unwrap();
        assert_eq!(query(vec![not], vec![cpu]).key_prefix(), "");
    }

    #[test]
    fn scan_starts_at_the_larger_of_cursor_and_prefix() {
        let mut q = query(vec![NameMatcher::exact("db")], vec![]);
        assert_eq!(q.scan_start("db|"), ("db|".to_string(), true));
        // `a|m` sorts before `db|`: the prefix wins.
        q.after = Some(SeriesId::new("a", "m"));
        assert_eq!(q.scan_start("db|"), ("db|".to_string(), true));
        q.after = Some(SeriesId::new("db", "m"));
        assert_eq!(q.scan_start("db|"), ("db|m".to_string(), false));
        // Key order, not tuple order: `db-1|m` < `db|`.
        q.after = Some(SeriesId::new("db-1", "m"));
        assert_eq!(q.scan_start("db|"), ("db|".to_string(), true));
        q.after = Some(SeriesId::new("e", "m"));
        assert_eq!(q.scan_start(""), ("e|m".to_string(), false));
    }

    #[test]
    fn prefix_successors_bound_every_extension() {
        assert_eq!(prefix_successor(""), None);
        assert_eq!(prefix_successor("db|").as_deref(), Some("db}"));
        assert_eq!(prefix_successor("web-").as_deref(), Some("web."));
        assert_eq!(prefix_successor("a~").as_deref(), Some("a\u{7f}"));
        assert_eq!(prefix_successor("a\u{7f}"), None);
        assert_eq!(prefix_successor("é"), None);
        let s = prefix_successor("web-").unwrap();
        for k in ["web-", "web-1|m", "web-zzz|m"] {
            assert!(k < s.as_str(), "{k}");
        }
        assert!("web.|m" >= s.as_str());
    }

    #[test]
    fn merged_entries_keep_extremes_and_the_last_kind() {
        let e = |kind, first, last| CatalogEntry {
            series: SeriesId::new("a", "m").into(),
            kind,
            first_seen: first,
            last_seen: last,
        };
        let other = CatalogEntry {
            series: SeriesId::new("a-b", "m").into(),
            ..e(SampleKind::Gauge, 0, 0)
        };
        let merged = merge_catalog_entries(&[
            e(SampleKind::Gauge, 10, 20),
            other.clone(),
            e(SampleKind::DeltaCounter, 5, 15),
        ]);
        assert_eq!(
            merged,
            vec![
                ("a-b|m".to_string(), other),
                ("a|m".to_string(), e(SampleKind::DeltaCounter, 5, 20)),
            ]
        );
    }

    #[test]
    fn catalog_entries_are_checked() {
        let ok = CatalogEntry {
            series: SeriesId::new("db-1", "cpu").into(),
            kind: SampleKind::Gauge,
            first_seen: -1,
            last_seen: 1,
        };
        assert!(check_catalog_entries(std::slice::from_ref(&ok)).is_ok());
        for bad in [
            CatalogEntry {
                series: SeriesId::new("db|1", "cpu").into(),
                ..ok.clone()
            },
            CatalogEntry {
                series: SeriesId::new("db", "a b").into(),
                ..ok.clone()
            },
            CatalogEntry {
                first_seen: i64::MIN,
                ..ok.clone()
            },
        ] {
            assert!(matches!(
                check_catalog_entries(&[ok.clone(), bad]),
                Err(StoreError::Invalid(_))
            ));
        }
    }
}
