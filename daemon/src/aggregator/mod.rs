//! The aggregator: folds accepted samples into per-(series, minute) slots in
//! memory, so that the number of store statements follows the number of
//! active series per flush, not the sample rate.
//!
//! Series are spread over shards by hash, each behind its own lock, so
//! concurrent ingest requests on different cores rarely meet.
//!
//! The aggregator also validates samples (names, values, time window, kinds)
//! and turns cumulative counters into deltas per series, with reset
//! detection. Buckets are additive, so samples may arrive in any order:
//! late samples within the lateness window land in their own minute.
//!
//! Each series a read has asked them for (PromQL's: [`RecentWanted`]) also
//! keeps its newest few raw samples (`ring`), so a read at an instant
//! inside a minute can take that minute's later samples out.

mod config;
mod folding;
mod logged;
mod names;
mod outcome;
mod prealloc;
mod ring;
pub use config::AggregatorConfig;
pub use folding::Folding;
pub use logged::BaselineLog;
pub use prealloc::{PreallocMarks, PreallocWindow};
mod series;
mod sources;
mod steps;
pub use sources::SourceActivity;

/// Whether a read of a series' pending minutes also wants its newest raw
/// samples (and so starts keeping them, see
/// [`Aggregator::pending_and_recent`]). Only an evaluation at the right
/// edge can use them: the series keep a few samples each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecentWanted {
    Yes,
    No,
}

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::wal::Baseline;
pub use outcome::{IngestOutcome, RejectReason, Rejection, SeriesBatch};
use series::{truncate, Shard, ShardCell};

use crate::catalog::RefreshMinutes;
use crate::ingest::config::IngestConfig;
use crate::model::{
    validate_metric, validate_source, CatalogDue, EpochMinute, SampleKind, SeriesMinutes,
    SeriesRef, Slot,
};

/// Series a reused batch may have room for beyond twice what a drain
/// needs before it is given back (see `Aggregator::drain_into`).
const SPARE_SLACK: usize = 4096;

/// Series groups warmed and then folded together (see `Aggregator::warm`):
/// their table entries, 192 bytes each, stay well inside a core's L2 cache.
pub const FOLD_CHUNK: usize = 256;

/// The `[ingest]` limits in the units the hot path compares against.
#[derive(Debug, Clone)]
struct Limits {
    lateness_ms: i64,
    future_skew_ms: i64,
    max_series: usize,
    max_series_per_source: usize,
    max_pending_slots: usize,
    max_rejections_reported: usize,
}

impl Limits {
    fn of(c: &IngestConfig) -> Limits {
        Limits {
            lateness_ms: c.lateness_window.as_millis().min(i64::MAX as u128) as i64,
            future_skew_ms: c.max_future_skew.as_millis().min(i64::MAX as u128) as i64,
            max_series: c.max_series,
            max_series_per_source: c.max_series_per_source,
            max_pending_slots: c.max_pending_slots,
            max_rejections_reported: c.max_rejections_reported,
        }
    }
}

/// Sharded in-memory accumulators. Cheap to share behind an `Arc`.
pub struct Aggregator {
    shards: Box<[ShardCell]>,
    hasher: ahash::RandomState,
    series_count: AtomicUsize,
    /// The sources and metrics of the series in memory, shared by their
    /// series, with series per source for `ingest.max_series_per_source`.
    /// Touched only when a series is created or evicted, never per sample.
    names: parking_lot::Mutex<names::SeriesNames>,
    /// The labelled series in memory by `source|metric`, so a read of one
    /// source's metric finds its label sets before they reach the catalog.
    /// Changed only when a labelled series is created or evicted.
    labelled: parking_lot::RwLock<hashbrown::HashMap<Box<str>, Vec<Arc<crate::model::SeriesId>>>>,
    /// Slots drained into flush batches the store has not confirmed yet;
    /// they count against the memory bound too.
    inflight_slots: AtomicUsize,
    limits: Limits,
    ingest: IngestConfig,
    /// Set when a catalog is kept: drains then settle whether each
    /// series' entry is due by its [`crate::catalog::Mark`].
    catalog_refresh: Option<RefreshMinutes>,
}

impl Aggregator {
    /// An aggregator with `config`'s shards enforcing `limits`.
    pub fn new(config: &AggregatorConfig, limits: &IngestConfig) -> Aggregator {
        let n = config.effective_shards();
        Aggregator {
            shards: (0..n).map(|_| ShardCell::default()).collect(),
            hasher: crate::model::series_hasher().clone(),
            series_count: AtomicUsize::new(0),
            names: Default::default(),
            labelled: Default::default(),
            inflight_slots: AtomicUsize::new(0),
            limits: Limits::of(limits),
            ingest: limits.clone(),
            catalog_refresh: None,
        }
    }

    /// Keeps each series' catalog mark, so that a drain says of every
    /// series whether its catalog entry is due at `refresh` (see
    /// [`crate::catalog`]); without it, drains leave that to the writer.
    pub fn with_catalog(mut self, refresh: std::time::Duration) -> Aggregator {
        self.catalog_refresh = Some(RefreshMinutes::of(refresh));
        self
    }

    /// The `[ingest]` limits this aggregator enforces.
    pub fn limits(&self) -> &IngestConfig {
        &self.ingest
    }

    /// Pending (series, minute) slots not yet drained.
    pub fn pending_slots(&self) -> usize {
        self.shards
            .iter()
            .map(|c| c.pending.load(Ordering::Relaxed))
            .sum()
    }

    pub fn series_count(&self) -> usize {
        self.series_count.load(Ordering::Relaxed)
    }

    /// The labelled series of `source`'s `metric` in memory.
    pub fn labelled_series(&self, source: &str, metric: &str) -> Vec<Arc<crate::model::SeriesId>> {
        let key = format!("{source}|{metric}");
        self.labelled
            .read()
            .get(key.as_str())
            .cloned()
            .unwrap_or_default()
    }

    /// The series in memory that `keep` accepts, at most `limit`. Visits
    /// every series, a shard at a time: for reads that cannot ask the
    /// catalog because the store is unreachable, not for the hot path.
    pub fn series_where(
        &self,
        keep: impl Fn(&crate::model::SeriesId) -> bool,
        limit: usize,
    ) -> Vec<Arc<crate::model::SeriesId>> {
        let mut out = Vec::new();
        for cell in self.shards.iter() {
            let shard = cell.shard.lock();
            for s in shard.series.iter().filter(|s| keep(&s.id)) {
                if out.len() == limit {
                    return out;
                }
                out.push(s.id.clone());
            }
        }
        out
    }

    /// Catalog entries of the series in memory that `keep` accepts (given
    /// each one's kind), at most `limit`, in no order: what reads list
    /// while the store cannot. Both times are the newest minute with data.
    pub fn entries_where(
        &self,
        keep: impl Fn(&crate::model::SeriesId, SampleKind) -> bool,
        limit: usize,
    ) -> Vec<crate::store::CatalogEntry> {
        let mut out = Vec::new();
        for cell in self.shards.iter() {
            let shard = cell.shard.lock();
            for s in shard.series.iter().filter(|s| keep(&s.id, s.kind)) {
                if out.len() == limit {
                    return out;
                }
                let seen = s.last_minute.max(0).saturating_mul(crate::model::MINUTE_S);
                out.push(crate::store::CatalogEntry {
                    series: s.id.clone(),
                    kind: s.kind,
                    first_seen: seen,
                    last_seen: seen,
                });
            }
        }
        out
    }

    /// Whether the unlabelled series `source`/`metric` is in memory.
    pub fn has_series(&self, key: SeriesRef<'_>) -> bool {
        let hash = self.hasher.hash_one(key);
        let shard = self.shards[self.shard_of(hash)].shard.lock();
        shard
            .series
            .find(hash, |s| s.hash == hash && s.is(key))
            .is_some()
    }

    /// Sources with at least one series in memory.
    pub fn source_count(&self) -> usize {
        self.names.lock().sources.len()
    }

    /// True when in-memory accumulators have reached the memory bound and
    /// ingest must push back until a flush drains them.
    pub fn over_memory_bound(&self) -> bool {
        self.pending_slots() + self.inflight_slots.load(Ordering::Relaxed)
            >= self.limits.max_pending_slots
    }

    /// The flush pipeline reports how many drained slots it still holds.
    pub fn set_inflight_slots(&self, slots: usize) {
        self.inflight_slots.store(slots, Ordering::Relaxed);
    }

    fn shard_of(&self, hash: u64) -> usize {
        // Bits 25 to 56: each shard's table finds a bucket by the low bits
        // and tags its entries with the top seven, so a shard chosen by
        // either would leave its table fewer buckets or fewer tags to tell
        // its series apart. Scaled by a multiply, not a division (`%` took
        // 1% of W1's CPU): the high half of `bits × shards` is evenly below
        // `shards`.
        let bits = u64::from((hash >> 25) as u32);
        ((bits * self.shards.len() as u64) >> 32) as usize
    }

    /// Validates and folds a request's samples. `now_ms` is the wall clock
    /// used for the lateness and skew windows, and the series' arrival time
    /// (what idleness is judged by).
    pub fn ingest(&self, batches: &[SeriesBatch<'_>], now_ms: i64) -> IngestOutcome {
        let mut folding = self.folding(now_ms, batches.len());
        folding.fold(batches);
        folding.finish()
    }

    /// [`Aggregator::ingest`] of a request whose series groups come in
    /// chunks, as admission makes them from the request's view: no
    /// request-wide list of them is written and read back (about 560 KB a
    /// 5,000-series request, a stream of cache misses). `groups` bounds how
    /// many come, to size its scratch.
    pub fn folding(&self, now_ms: i64, groups: usize) -> Folding<'_> {
        let window = Window {
            oldest_ms: now_ms - self.limits.lateness_ms,
            newest_ms: now_ms + self.limits.future_skew_ms,
            arrived: arrival_minute(now_ms),
        };
        Folding::new(self, window, groups)
    }

    /// Validates and folds one series group whose key hashes to `hash`.
    fn ingest_one(&self, b: &SeriesBatch<'_>, hash: u64, window: Window, out: &mut IngestOutcome) {
        // The names are checked when a series is created (`insert_series`):
        // a series in memory has valid ones. A group refused for its kind
        // or lengths is checked here in full, so that it is refused for the
        // first of its faults, as a new series' group is.
        if b.kind.is_none() || length_mismatch(b).is_some() {
            self.reject_invalid(b, out);
            return;
        }
        let cell = &self.shards[self.shard_of(hash)];
        let mut shard = cell.shard.lock();
        let created = self.fold_series(&mut shard, b, hash, window, out);
        if created > 0 {
            // Counted under the shard lock, so a drain of this shard
            // (which subtracts under the same lock) never sees the slots
            // before the count: the counter cannot wrap below zero.
            cell.pending.fetch_add(created, Ordering::Relaxed);
        }
    }

    /// Rejects `b` for the first of its faults, in the order a client reads
    /// them: source, metric, kind, lengths. False when it has none.
    #[cold]
    pub(super) fn reject_invalid(&self, b: &SeriesBatch<'_>, out: &mut IngestOutcome) -> bool {
        let count = b.timestamps_ms.len().max(b.values.len()) as u64;
        if let Err(e) = validate_source(b.source) {
            out.reject(b, None, count, RejectReason::InvalidSource, || {
                format!("source {:?} {e}", truncate(b.source))
            });
        } else if let Err(e) = validate_metric(b.metric) {
            out.reject(b, None, count, RejectReason::InvalidMetric, || {
                format!("metric {:?} {e}", truncate(b.metric))
            });
        } else if b.kind.is_none() {
            out.reject(b, None, count, RejectReason::InvalidKind, || {
                "kind must be gauge, delta counter or cumulative counter".into()
            });
        } else if let Some(why) = length_mismatch(b) {
            out.reject(b, None, count, RejectReason::LengthMismatch, || why);
        } else {
            return false;
        }
        true
    }

    /// Takes every pending slot out of the aggregator, each series' minutes
    /// sorted ascending. With `baselines`, also the baseline of every
    /// cumulative counter that changed since the last drain that took them
    /// (for the write-ahead log's marker, see [`BaselineLog`]).
    pub fn drain(&self, baselines: Option<&mut Vec<Baseline>>) -> Vec<SeriesMinutes> {
        self.drain_into(Vec::new(), BaselineLog::take_or_skip(baselines), 0, None)
    }

    /// [`Aggregator::drain`] into `spare`, an empty batch an earlier drain
    /// returned, with room for `room` more series (the group rollups the
    /// flush adds): adding them to a batch without room would copy the
    /// whole batch into a new one, and for that moment hold it twice (64 MB
    /// more at a million active series).
    ///
    /// Why reuse: a batch is one block of about 80 bytes per series. Freed
    /// and allocated anew every flush, a block that size goes back to the
    /// system at once and is faulted in again a second later: at 100,000
    /// series RSS then swung by its 8 MB every flush. `spare` is kept
    /// unless it is far larger than this drain needs (the fleet shrank),
    /// so that memory still goes back after a peak.
    ///
    /// With `hashes`, each drained series' hash (by
    /// [`crate::model::series_hasher`]) is put there in the batch's order:
    /// the flush indexes its batch by them without hashing every series'
    /// names again. Its room is kept or given back as `spare`'s is.
    pub fn drain_into(
        &self,
        spare: Vec<SeriesMinutes>,
        mut baselines: BaselineLog<'_>,
        room: usize,
        mut hashes: Option<&mut Vec<u64>>,
    ) -> Vec<SeriesMinutes> {
        // Sized once from a first look at every shard: growing by doubling
        // would leave up to a whole batch's worth of room unused while it
        // is in flight (40 MB at a million active series). Series made
        // dirty between the two looks grow it exactly.
        let dirty: usize = self.shards.iter().map(|c| c.shard.lock().dirty.len()).sum();
        let need = dirty + room;
        let mut all = if spare.is_empty() && spare.capacity() <= 2 * need + SPARE_SLACK {
            spare
        } else {
            Vec::new()
        };
        all.reserve_exact(need);
        if let Some(h) = hashes.as_deref_mut() {
            if h.capacity() > 2 * need + SPARE_SLACK {
                *h = Vec::new();
            }
            h.clear();
            h.reserve(need);
        }
        for cell in self.shards.iter() {
            let mut guard = cell.shard.lock();
            let Shard {
                series,
                dirty,
                unlogged,
                ..
            } = &mut *guard;
            let mut slots = 0;
            all.reserve_exact(dirty.len());
            for chunk in dirty.chunks(DRAIN_WARM) {
                warm_drained(series, chunk);
                for &pos in chunk {
                    let Some(st) = series.get_mut(pos).filter(|s| !s.pending.is_empty()) else {
                        continue;
                    };
                    if let Some(h) = hashes.as_deref_mut() {
                        h.push(st.hash);
                    }
                    baselines.drained(st, pos, unlogged);
                    let taken = self.take_pending(st);
                    slots += taken.minutes.len();
                    all.push(taken);
                }
            }
            dirty.clear();
            baselines.shard_drained(&mut guard);
            // Under the shard lock, like the additions in `ingest`, so the
            // counter never wraps below zero.
            cell.pending.fetch_sub(slots, Ordering::Relaxed);
        }
        all
    }

    /// Drops every pending slot, as replay does with the requests it
    /// folded only to bring the counters' baselines forward to its resume
    /// point (their samples are in the store already). The baselines that
    /// moved are marked for the next cut that logs them; the catalog's
    /// marks stay as they were, since nothing dropped reaches it.
    pub fn discard_pending(&self) {
        for cell in self.shards.iter() {
            let mut guard = cell.shard.lock();
            let shard = &mut *guard;
            let mut slots = 0;
            for pos in shard.dirty.drain(..) {
                if let Some(st) = shard.series.get_mut(pos) {
                    slots += st.pending.len();
                    st.pending.clear();
                    BaselineLog::Defer.drained(st, pos, &mut shard.unlogged);
                }
            }
            BaselineLog::Defer.shard_drained(shard);
            cell.pending.fetch_sub(slots, Ordering::Relaxed);
        }
    }

    /// A dirty series' pending minutes, sorted, moved out for the flush.
    fn take_pending(&self, st: &mut series::SeriesState) -> SeriesMinutes {
        let id = st.id.clone();
        // Moved, inline as it was when one minute (nearly always); a rare
        // longer list gives back what it does not use.
        let mut minutes = std::mem::take(&mut st.pending);
        minutes.shrink_to_fit();
        minutes.sort_unstable_by_key(|(m, _)| *m);
        let catalog = match self.catalog_refresh {
            Some(refresh) => st.catalog.check(st.kind, &minutes, refresh),
            None => CatalogDue::Unknown,
        };
        SeriesMinutes {
            series: id,
            kind: st.kind,
            minutes,
            catalog,
        }
    }

    /// Restores a cumulative counter's baseline read back from the
    /// write-ahead log, creating the series if need be. It arrived when the
    /// log says (or, when the log does not say, now).
    pub fn seed_baseline(&self, b: &Baseline, now_ms: i64) {
        let batch = SeriesBatch {
            source: &b.series.source,
            metric: &b.series.metric,
            labels: b.series.labels.as_str(),
            kind: Some(SampleKind::CumulativeCounter),
            timestamps_ms: &[],
            values: &[],
            start_times_ms: &[],
            source_index: 0,
            series_index: 0,
        };
        let key = SeriesRef {
            source: &b.series.source,
            metric: &b.series.metric,
            labels: b.series.labels.as_str(),
        };
        let hash = self.hasher.hash_one(key);
        let cell = &self.shards[self.shard_of(hash)];
        let mut shard = cell.shard.lock();
        let mut out = IngestOutcome::default();
        if let Some((_, state)) = self.series_for(&mut shard.series, &batch, hash, key, &mut out) {
            if state.kind == SampleKind::CumulativeCounter {
                state.last_sample.set(b.ts_ms, b.value);
                state.last_minute = state.last_minute.max(crate::model::minute_of_ms(b.ts_ms));
                // Idle from its last arrival, not from the restart: a series
                // that has not sent again yet keeps its baseline as long as
                // it would have without the restart.
                let arrived = b.arrived_ms().unwrap_or(now_ms);
                state.arrived = state.arrived.max(arrival_minute(arrived));
            }
        }
    }

    /// The pending minutes of one series, for reads that merge in what has
    /// not been flushed yet. Also returns the series' kind if known.
    pub fn pending_for(
        &self,
        key: SeriesRef<'_>,
    ) -> (Option<SampleKind>, Vec<(EpochMinute, Slot)>) {
        let (kind, minutes, _) = self.pending_and_recent(key, RecentWanted::No);
        (kind, minutes)
    }

    /// [`Aggregator::pending_for`] and, when `recent` asks for them, the
    /// series' newest raw samples, taken together, so a read can rewind a
    /// minute by them. The first such read of a series starts keeping them
    /// (see `ring`), so it has none, and the reads after it have those sent
    /// since. A read that does not ask neither gets them nor starts them:
    /// keeping them costs about 444 bytes a series, and a read over the
    /// whole fleet would otherwise start them for every series it touched.
    pub fn pending_and_recent(
        &self,
        key: SeriesRef<'_>,
        recent: RecentWanted,
    ) -> (
        Option<SampleKind>,
        Vec<(EpochMinute, Slot)>,
        crate::model::RecentSamples,
    ) {
        let hash = self.hasher.hash_one(key);
        let mut guard = self.shards[self.shard_of(hash)].shard.lock();
        let shard = &mut *guard;
        match shard.series.find_mut(hash, |s| s.hash == hash && s.is(key)) {
            None => (None, Vec::new(), Default::default()),
            Some((pos, s)) => {
                let recent = match recent {
                    RecentWanted::Yes => s.keep_recent(pos, &mut shard.recent).snapshot(s.kind),
                    RecentWanted::No => Default::default(),
                };
                let mut minutes = s.pending.to_vec();
                minutes.sort_unstable_by_key(|(m, _)| *m);
                (Some(s.kind), minutes, recent)
            }
        }
    }

    /// The kind of one series, if it is in memory.
    pub fn kind_of(&self, key: SeriesRef<'_>) -> Option<SampleKind> {
        let hash = self.hasher.hash_one(key);
        let shard = self.shards[self.shard_of(hash)].shard.lock();
        let (_, s) = shard.series.find(hash, |s| s.hash == hash && s.is(key))?;
        Some(s.kind)
    }

    /// The newest sample of one series (timestamp ms, value as sent) and its
    /// kind, if the series is in memory and has had a sample a read shows
    /// (a cumulative counter's baseline alone is none).
    pub fn last_sample(&self, key: SeriesRef<'_>) -> Option<(SampleKind, i64, f64)> {
        let hash = self.hasher.hash_one(key);
        let shard = self.shards[self.shard_of(hash)].shard.lock();
        let (_, s) = shard.series.find(hash, |s| s.hash == hash && s.is(key))?;
        s.shown_sample().map(|(ts, v)| (s.kind, ts, v))
    }

    /// Forgets the series with nothing pending that have not been pushed
    /// (whatever their samples' times) for `ingest.series_idle_timeout`, so
    /// the series table does not grow without limit. A cumulative counter
    /// with a baseline stays as long as [`IngestConfig::baseline_keep`]
    /// says: an agent that buffered through an outage as long as the
    /// lateness window finds its baseline when it comes back. Returns how
    /// many went.
    pub fn evict_idle(&self, now_ms: i64) -> usize {
        let before = |d: std::time::Duration| {
            arrival_minute(now_ms.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64))
        };
        let idle_before = before(self.ingest.series_idle_timeout);
        let baseline_before = before(self.ingest.baseline_keep());
        let mut gone: Vec<Arc<crate::model::SeriesId>> = Vec::new();
        for cell in self.shards.iter() {
            let mut guard = cell.shard.lock();
            let s = &mut *guard;
            s.series.retain(|st| {
                // A cumulative counter's baseline alone makes no slot, but
                // it is data: without it the next sample would be a new
                // baseline and its increase lost.
                let baseline = st.baseline().is_some() && st.arrived >= baseline_before;
                let keep = !st.pending.is_empty() || st.arrived >= idle_before || baseline;
                if !keep {
                    gone.push(st.id.clone());
                }
                keep
            });
            logged::prune_unlogged(&s.series, &mut s.unlogged);
            // An evicted series' position may be given to a new one; a
            // series no read asked for in the idle timeout (a one-off wide
            // query) stops paying for its recent samples.
            if !s.recent.is_empty() {
                let series = &mut s.series;
                s.recent.retain(|&pos, r| match series.get_mut(pos) {
                    None => false,
                    Some(_) if r.read >= idle_before => true,
                    Some(st) => {
                        st.forget_recent();
                        false
                    }
                });
            }
        }
        self.series_count.fetch_sub(gone.len(), Ordering::Relaxed);
        self.forget_labelled(&gone);
        let mut names = self.names.lock();
        for id in &gone {
            names.sources.remove(&id.source);
            names.metrics.remove(&id.metric);
        }
        gone.len()
    }
}

/// The clock a request is folded against: the time window its samples
/// must fall in, and the minute it arrived.
#[derive(Debug, Clone, Copy)]
struct Window {
    oldest_ms: i64,
    newest_ms: i64,
    arrived: ArrivalMinute,
}

/// Minutes since the Unix epoch, in the four bytes a series' entry has
/// for it (enough until the year 10,000).
type ArrivalMinute = u32;

/// Dirty series drained a chunk at a time, their entries read first.
const DRAIN_WARM: usize = 64;

/// Loads the entries of a chunk of dirty series, and each one's shared id,
/// into the cache before they are drained. Dirty positions are in the order
/// series first arrived since the last flush, spread over the table, and
/// the id's reference count is written for every series drained: taken one
/// by one, each waited on memory twice, and cloning the id was four fifths
/// of the drain (3% of the daemon's CPU at 100,000 series in real time).
/// Read together, with nothing but independent loads between, the misses
/// overlap.
fn warm_drained(series: &crate::table::Table<series::SeriesState>, chunk: &[u32]) {
    for &pos in chunk {
        if let Some(st) = series.get(pos) {
            std::hint::black_box((Arc::strong_count(&st.id), st.pending.len(), st.kind));
        }
    }
}

/// The minute `ms` falls in, as an [`ArrivalMinute`] (clamped).
fn arrival_minute(ms: i64) -> ArrivalMinute {
    crate::model::minute_of_ms(ms).clamp(0, ArrivalMinute::MAX as i64) as ArrivalMinute
}

impl Aggregator {
    /// Indexes a new labelled series (see `labelled`).
    fn index_labelled(&self, id: &Arc<crate::model::SeriesId>) {
        if id.labels.is_empty() {
            return;
        }
        let key = format!("{}|{}", id.source, id.metric);
        self.labelled
            .write()
            .entry(key.into_boxed_str())
            .or_default()
            .push(id.clone());
    }

    fn forget_labelled(&self, gone: &[Arc<crate::model::SeriesId>]) {
        if gone.iter().all(|id| id.labels.is_empty()) {
            return;
        }
        let mut labelled = self.labelled.write();
        for id in gone.iter().filter(|id| !id.labels.is_empty()) {
            let key = format!("{}|{}", id.source, id.metric);
            if let Some(list) = labelled.get_mut(key.as_str()) {
                list.retain(|s| !Arc::ptr_eq(s, id));
                if list.is_empty() {
                    labelled.remove(key.as_str());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// Why a group's arrays do not line up, if they do not: one timestamp per
/// value, and one start time per value or none.
fn length_mismatch(b: &SeriesBatch<'_>) -> Option<String> {
    let values = b.values.len();
    if b.timestamps_ms.len() != values {
        return Some(format!(
            "{} timestamps but {values} values",
            b.timestamps_ms.len()
        ));
    }
    let starts = b.start_times_ms.len();
    (starts != 0 && starts != values)
        .then(|| format!("{starts} start times but {values} values (send one per value, or none)"))
}
