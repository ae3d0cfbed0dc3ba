//! What is cut but not yet durable in the store: the flush pipeline's
//! in-flight batches, and the one lock under which the aggregator is
//! drained into them.
//!
//! Separate from the pipeline because it is the only part of it the query
//! engine needs: a read merges the store with [`Inflight::unflushed`], and
//! nothing else about flushing (retries, the catalog, the applier task)
//! concerns it.
//!
//! Fresh reads: a batch stays registered as in flight until the store has
//! applied it, so the query engine can merge it in. Draining and
//! registering happen under one lock, and readers take the same lock, so a
//! reader sees each sample exactly once: in the aggregator, in an in-flight
//! batch, or (by the document's watermark) in the store.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::aggregator::{Aggregator, BaselineLog, RecentWanted};
use crate::model::{
    series_hash, EpochMinute, FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, SeriesRef,
    Slot,
};
use crate::wal::Baseline;

/// A drained batch that the store has not confirmed yet.
pub struct InflightBatch {
    pub id: FlushId,
    /// What the store applies, as drained: no copy is made for it, and
    /// the store shares it rather than copying it.
    pub(super) flush: Arc<FlushBatch>,
    /// Positions in `flush.series` by the series' hash: 4 bytes a bucket
    /// instead of a key and a position (16), at a million series.
    index: hashbrown::HashTable<u32>,
    /// When it was cut: how long the store has kept it waiting.
    cut_at: std::time::Instant,
}

impl InflightBatch {
    /// `hashes` holds the hashes (by [`crate::model::series_hasher`]) of
    /// the first series of `series` (those the aggregator drained; the
    /// rollups the flush added follow them and are hashed here). Taken
    /// from the aggregator, which keeps each series' hash, because hashing
    /// every series' names again took about a quarter of the cut, during
    /// which ingest waits; the batch keeps them for the store, whose
    /// pending minutes find each series by the same hash.
    fn new(
        id: FlushId,
        series: Vec<SeriesMinutes>,
        hashes: Vec<u64>,
        resumable: bool,
    ) -> InflightBatch {
        let flush = FlushBatch {
            id,
            series,
            hashes,
            resumable,
        };
        let mut index = hashbrown::HashTable::with_capacity(flush.series.len());
        for i in 0..flush.series.len() {
            index.insert_unique(flush.hash_of(i), i as u32, |&j| flush.hash_of(j as usize));
        }
        InflightBatch {
            id,
            flush: Arc::new(flush),
            index,
            cut_at: std::time::Instant::now(),
        }
    }

    fn get(&self, key: SeriesRef<'_>) -> Option<&SeriesMinutes> {
        let series = &self.flush.series;
        self.index
            .find(series_hash(key), |&i| {
                series[i as usize].series.series_ref() == key
            })
            .map(|&i| &series[i as usize])
    }

    pub fn slot_count(&self) -> usize {
        self.flush.series.iter().map(|s| s.minutes.len()).sum()
    }
}

/// How a batch is cut: what becomes of the baselines that moved (for the
/// write-ahead log's marker), and (replaying the log) with the id it had.
#[derive(Default, Clone, Copy)]
pub struct Cut {
    pub baselines: Logs,
    pub id: Option<FlushId>,
}

/// What a cut's marker does with the cumulative counters' baselines (see
/// [`crate::aggregator::BaselineLog`]).
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Logs {
    /// There is no marker.
    #[default]
    Nothing,
    /// The marker carries none; a later one carries them.
    Later,
    /// The marker carries every one that moved since the last that did.
    Baselines,
}

/// Everything about one series that is not in the store yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Unflushed {
    pub kind: Option<SampleKind>,
    /// In-flight batches touching the series, oldest first.
    pub inflight: Vec<(FlushId, Vec<(EpochMinute, Slot)>)>,
    /// Still in the aggregator.
    pub pending: Vec<(EpochMinute, Slot)>,
    /// The newest flush id cut when the snapshot was taken. A document whose
    /// watermark is above it already holds `pending` (the first batch cut
    /// later drained all of it, and batches apply in order), so a reader
    /// that meets such a document must not add `pending` again.
    pub cut_through: u64,
    /// The series' newest raw samples, taken with `pending`.
    pub recent: crate::model::RecentSamples,
}

/// The batches cut from the aggregator and not yet applied by the store,
/// shared by the flush pipeline (which cuts and retires them) and the
/// query engine (which reads them).
pub struct Inflight {
    agg: Arc<Aggregator>,
    batches: Mutex<VecDeque<Arc<InflightBatch>>>,
    last_id: AtomicU64,
    /// The emptied series list of the last batch the store applied, for
    /// the next cut to fill (see [`Aggregator::drain_into`]).
    spare: Mutex<Vec<SeriesMinutes>>,
    /// The hashes of the last batch the store applied, for the next cut to
    /// fill (`drain_into` gives its room back as it does `spare`'s).
    spare_hashes: Mutex<Vec<u64>>,
    /// Baselines drained by a cut that found no slot (a counter's baseline
    /// moved by a sample that was then refused), for the next cut's
    /// marker: until one logs them, the requests that set them stay in
    /// the log, as no marker after them lets it go. The newest of each
    /// series (a baseline only moves forward): bounded by the series.
    carried: Mutex<hashbrown::HashMap<Arc<SeriesId>, Baseline>>,
}

impl Inflight {
    /// `last_applied`: see [`Pipeline::new`](super::Pipeline::new).
    pub(super) fn new(agg: Arc<Aggregator>, last_applied: u64) -> Inflight {
        Inflight {
            agg,
            batches: Mutex::new(VecDeque::new()),
            last_id: AtomicU64::new(last_applied),
            spare: Mutex::new(Vec::new()),
            spare_hashes: Mutex::new(Vec::new()),
            carried: Mutex::new(hashbrown::HashMap::new()),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.batches.lock().len()
    }

    pub(super) fn next_id(&self) -> FlushId {
        let now_us = chrono::Utc::now().timestamp_micros().max(0) as u64;
        let prev = self
            .last_id
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(now_us.max(last + 1))
            })
            .unwrap_or_else(|last| last);
        FlushId(now_us.max(prev + 1))
    }

    /// Drains the aggregator into a new batch, unless `max_batches` are
    /// already in flight (backpressure) or there is nothing to flush.
    /// `drained` is called with the batch's id and, if the cut logs them,
    /// the baselines as soon as
    /// the aggregator is drained: what must happen before ingest goes on
    /// (the log's marker) happens there, and the rest of the cut (the
    /// rollups and the batch's index) no longer holds ingest back.
    /// `expand` runs on the drained series under the lock, so whatever it
    /// adds (the group rollups) is never seen apart from what it came from;
    /// the batch is drained with room for about `expand_room` series more.
    /// It may only append: the drained series keep their places, where the
    /// batch's index finds them by the aggregator's hashes.
    pub(super) fn cut<R>(
        &self,
        max_batches: usize,
        expand: impl FnOnce(Vec<SeriesMinutes>) -> Vec<SeriesMinutes>,
        expand_room: usize,
        cut: Cut,
        drained: impl FnOnce(FlushId, Option<Vec<Baseline>>) -> R,
    ) -> Option<(Arc<InflightBatch>, R)> {
        let mut batches = self.batches.lock();
        if batches.len() >= max_batches {
            metrics::counter!("tally_flush_deferred_total").increment(1);
            return None;
        }
        let spare = std::mem::take(&mut *self.spare.lock());
        let mut hashes = std::mem::take(&mut *self.spare_hashes.lock());
        // Older first: replay seeds them in order, so a newer baseline of
        // the same series drained now wins. A cut that logs no marker
        // leaves them for one that does.
        let mut baselines: Vec<Baseline> = match cut.baselines {
            Logs::Baselines => self.carried.lock().drain().map(|(_, b)| b).collect(),
            Logs::Nothing | Logs::Later => Vec::new(),
        };
        let log = match cut.baselines {
            Logs::Nothing => BaselineLog::Skip,
            Logs::Later => BaselineLog::Defer,
            Logs::Baselines => BaselineLog::Take(&mut baselines),
        };
        let series = self
            .agg
            .drain_into(spare, log, expand_room, Some(&mut hashes));
        if series.is_empty() && cut.id.is_none() {
            *self.spare.lock() = series;
            *self.spare_hashes.lock() = hashes;
            let mut carried = self.carried.lock();
            for b in baselines {
                carried.insert(b.series.clone(), b);
            }
            return None;
        }
        let id = match cut.id {
            Some(id) => {
                self.last_id.fetch_max(id.0, Ordering::SeqCst);
                id
            }
            None => self.next_id(),
        };
        // Counted before ingest goes on: until the batch joins the others
        // its slots are nowhere else, and the memory bound must see them.
        let slots: usize = series.iter().map(|s| s.minutes.len()).sum();
        let held: usize = batches.iter().map(|b| b.slot_count()).sum();
        self.agg.set_inflight_slots(held + slots);
        let r = drained(id, (cut.baselines == Logs::Baselines).then_some(baselines));
        let series = expand(series);
        // A replayed flush is not: its marker is not read again.
        let resumable = cut.baselines != Logs::Later;
        let batch = Arc::new(InflightBatch::new(id, series, hashes, resumable));
        batches.push_back(batch.clone());
        self.note(&batches);
        Some((batch, r))
    }

    /// How long the oldest batch the store has not applied yet has waited
    /// since it was cut; zero when the store has every batch.
    pub(super) fn oldest_wait(&self) -> std::time::Duration {
        self.batches
            .lock()
            .front()
            .map_or(std::time::Duration::ZERO, |b| b.cut_at.elapsed())
    }

    /// Forgets a batch the store has applied (or that was given up).
    pub(super) fn retire(&self, id: FlushId) {
        let mut batches = self.batches.lock();
        batches.retain(|b| b.id != id);
        self.note(&batches);
    }

    /// Keeps the series list and hashes of `batch`, applied and retired,
    /// for the next cut, when nothing else holds the batch any more (a
    /// reader's snapshot or the store may, for a while; then they are
    /// simply freed).
    pub(super) fn recycle(&self, batch: Arc<InflightBatch>) {
        let Some(flush) = Arc::into_inner(batch).and_then(|b| Arc::into_inner(b.flush)) else {
            return;
        };
        let FlushBatch {
            mut series,
            mut hashes,
            ..
        } = flush;
        // Outside the lock: this drops a reference to every series' id.
        series.clear();
        hashes.clear();
        *self.spare.lock() = series;
        *self.spare_hashes.lock() = hashes;
    }

    /// Drained slots count against the aggregator's memory bound too.
    fn note(&self, batches: &VecDeque<Arc<InflightBatch>>) {
        self.agg
            .set_inflight_slots(batches.iter().map(|b| b.slot_count()).sum());
    }

    /// What the store does not have yet for one series: a consistent
    /// snapshot of the in-flight batches and the aggregator; with the
    /// series' newest samples when `recent` asks for them.
    pub(crate) fn unflushed(&self, key: SeriesRef<'_>, recent: RecentWanted) -> Unflushed {
        let batches = self.batches.lock();
        let mut u = Unflushed::default();
        for b in batches.iter() {
            if let Some(sm) = b.get(key) {
                u.kind = Some(sm.kind);
                u.inflight.push((b.id, sm.minutes.to_vec()));
            }
        }
        let (kind, pending, recent) = self.agg.pending_and_recent(key, recent);
        u.kind = kind.or(u.kind);
        u.pending = pending;
        u.recent = recent;
        // Ids are taken under the same lock, in `cut`.
        u.cut_through = self.last_id.load(Ordering::SeqCst);
        u
    }

    /// Slots not yet confirmed by the store: in the aggregator or in flight.
    pub(super) fn unflushed_slots(&self) -> usize {
        let batches = self.batches.lock();
        self.agg.pending_slots() + batches.iter().map(|b| b.slot_count()).sum::<usize>()
    }
}
