//! The embedded store's write path: flushes go to memory, checkpoints and
//! folds to the file.
//!
//! A flush writes nothing to the file. Its minutes join the pending minutes
//! in memory (`pending.rs`), where reads find them at once; the daemon's
//! write-ahead log already holds the requests they came from, and keeps
//! them until the store says they are durable ([`Db::durable_flush_id`]).
//! Writing a 1-second flush to the file cost far more than its samples:
//! about 80 bytes of log per series per flush, in a copy-on-write B-tree
//! whose branch pages and commit pages multiplied it (444 bytes written per
//! sample at 100,000 series).
//!
//! Two kinds of write reach the file, both in durable transactions:
//! - **Checkpoints**, every `embedded.checkpoint_interval` (60 s): the
//!   minutes changed since the last one, as they now stand, of every series
//!   that changed, into `checkpoint_log` (`flush_log.rs`), and
//!   `last_flush_id` raised to the newest flush applied, taken where that
//!   flush is one replay may begin at (`FlushBatch::resumable`). Once that
//!   commits, the write-ahead log may let go of every flush up to it. A
//!   crash replays at most one interval of the log.
//! - **Folds**, which write a series' pending run into its documents, once
//!   per run: after the run's hour has closed (spread over
//!   `fold_spread`, so that a fleet's documents are not all written in one
//!   transaction, in transactions at least [`FOLD_EVERY_US`] apart), or
//!   earlier, oldest first, when the pending minutes pass
//!   `embedded.pending_max_bytes`.
//!
//! # Replayed flushes
//!
//! After a crash the write-ahead log replays every flush above the last
//! checkpoint, with its own id, and a fold after that checkpoint may have
//! written some of them into documents already. So a flush at or below
//! [`Db::replay_bound`] is added only where nothing holds it yet: not for a
//! series whose pending run reaches its id (the run holds it, or a fold
//! took it before the run began), nor for a minute whose documents' stored
//! watermark reaches it. A flush above the bound is new everywhere.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, WriteTransaction};

use super::db::Db;
use super::engine::begin_write;
use super::errors::db_err;
use super::flush_log::{trim_below, DocWatermarks, Form, LogWriter};
use super::layout::{
    CHECKPOINT_LOG, DAY_MINUTES, DAY_MINUTES_LEN, DAY_SUMMARY, DAY_SUMMARY_LEN, HOUR_DOCS,
    HOUR_DOC_LEN,
};
use super::pending::{Fold, Pending};
use super::write::raise_last_flush_id;
use crate::model::{EpochMinute, FlushBatch, SeriesId, Slot, Tier};
use crate::store::{ApplyStats, StoreError};

/// A flush's series merged into the pending minutes a chunk at a time,
/// their entries read first (see [`Pending::warm`]).
const WARM_CHUNK: usize = 64;

/// Flush ids count microseconds.
const HOUR_US: u64 = 3_600_000_000;

/// How long after an hour closes its folds begin: samples of its last
/// minute still arrive for a while, and a fold before them would only
/// start another run of the same hour.
const FOLD_GRACE_US: u64 = 60_000_000;

/// A close's folds by the hour are at least this far apart until its
/// spread ends: every durable commit also saves the storage engine's
/// allocator state (about 265 KB at a 2 GB file, `engine.rs`) with a
/// second `fsync`, which a fold at every flush paid once a second.
const FOLD_EVERY_US: u64 = 5_000_000;

/// How long past its interval a checkpoint waits for a flush replay may
/// begin at ([`crate::model::FlushBatch::resumable`]) before it is taken
/// at another, while flushes come: the daemon cuts such a flush at least
/// every 10 s, and at once when the interval has passed. Idle, it is
/// taken at once ([`Take::Idle`]).
const RESUMABLE_WAIT_US: u64 = 10_000_000;

/// When [`Db::maintain`] takes a checkpoint.
#[derive(Clone, Copy)]
enum Take {
    /// Once due, at a flush replay may begin at, or at any once it has
    /// waited [`RESUMABLE_WAIT_US`] for one: a flush is being applied.
    Aligned,
    /// Once due, at the last flush applied: nothing is being flushed, so
    /// waiting would bring no flush to begin at (the daemon's load
    /// stopped just as the interval ended, say). As `Aligned` until this
    /// process has taken a checkpoint.
    Idle,
    /// Now (shutdown).
    Now,
}

/// Series folded in one transaction at most: its dirty pages stay in
/// memory until it commits (about 7 KB a series).
const MAX_FOLDS_PER_TXN: usize = 10_000;

/// Series encoded per hold of the pending minutes' lock by a checkpoint, so
/// that reads waiting for it wait for one part, not the whole fleet.
const CHECKPOINT_PART: u32 = 4_096;

impl Db {
    /// A flush in checkpointed mode: the folds and the checkpoint that are
    /// due first (so that a failure leaves the flush wholly unapplied, to
    /// be retried), then its minutes into the pending minutes.
    pub(super) fn apply_checkpointed(
        &self,
        db: &Database,
        batch: &FlushBatch,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<ApplyStats, StoreError> {
        let id = batch.id.0;
        let _turn = self.fold_lock.lock();
        let replayed = id <= self.replay_bound();
        // A replay at start holds the listeners closed: its flushes only
        // rebuild the pending minutes, and the first new flush does the
        // folds and the checkpoint that came due meanwhile, unless memory
        // cannot wait.
        if !replayed
            || self.pending.lock().bytes() > self.config.pending_max_bytes.saturating_mul(2)
        {
            self.maintain(db, id, Take::Aligned, damaged)?;
        }
        let stats = if replayed {
            self.add_replayed(db, batch)?
        } else {
            *self.replay_marks.lock() = None;
            let mut pending = self.pending.lock();
            // Each hash taken once: a batch without the aggregator's hashes
            // computes them from the names.
            let mut room = [0u64; WARM_CHUNK];
            for (c, chunk) in batch.series.chunks(WARM_CHUNK).enumerate() {
                let hashes = &mut room[..chunk.len()];
                for (h, i) in hashes.iter_mut().zip(c * WARM_CHUNK..) {
                    *h = batch.hash_of(i);
                }
                pending.warm(hashes.iter().copied());
                for (su, &hash) in chunk.iter().zip(hashes.iter()) {
                    pending.add_hashed(&su.series, hash, su.kind, id, su.minutes.iter().copied());
                }
            }
            ApplyStats {
                documents_written: batch.document_count(),
                ..ApplyStats::default()
            }
        };
        if self.applied_flush_id.fetch_max(id, Ordering::AcqRel) < id {
            self.applied_resumable
                .store(batch.resumable, Ordering::Release);
        }
        super::fold::pending_gauges(&self.pending.lock());
        Ok(stats)
    }

    /// The highest flush id that may already be in the store: applied in
    /// this process, or folded by an earlier one.
    pub(super) fn replay_bound(&self) -> u64 {
        self.applied_flush_id
            .load(Ordering::Acquire)
            .max(self.max_fold_watermark.load(Ordering::Acquire))
    }

    /// Adds a flush at or below [`Db::replay_bound`] where nothing holds it
    /// yet (see the module documentation). Its documents count as written
    /// where any of their minutes was added, as skipped where none was.
    fn add_replayed(&self, db: &Database, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let id = batch.id.0;
        let txn = db.begin_read().map_err(db_err)?;
        let hours = txn.open_table(HOUR_DOCS).map_err(db_err)?;
        let days = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
        let mut marks = self.replay_marks.lock();
        let marks = marks.get_or_insert_with(DocWatermarks::default);
        let mut pending = self.pending.lock();
        let mut kept = Vec::new();
        let mut stats = ApplyStats::default();
        for su in &batch.series {
            let all = su.document_count();
            if pending.watermark_of(&su.series).is_some_and(|w| w >= id) {
                stats.documents_skipped += all;
                continue;
            }
            let metric_key = su.series.metric_key();
            kept.clear();
            for &(m, slot) in &su.minutes {
                if marks.of(&hours, &days, &su.series.source, &metric_key, m)? < id {
                    kept.push((m, slot));
                }
            }
            let written = documents_of(&kept);
            stats.documents_written += written;
            stats.documents_skipped += all.saturating_sub(written);
            if !kept.is_empty() {
                pending.add(&su.series, su.kind, id, kept.iter().copied());
            }
        }
        Ok(stats)
    }

    /// With nothing to flush: the folds and the checkpoint due at `now_us`.
    pub(super) fn maintain_idle(&self, now_us: u64) -> Result<(), StoreError> {
        self.maintain_now(now_us, Take::Idle)
    }

    /// A checkpoint now, whatever the interval (shutdown): afterwards the
    /// write-ahead log holds nothing the store needs. The folds due go with
    /// it, as of the newest flush.
    pub(super) fn checkpoint_now(&self) -> Result<(), StoreError> {
        self.maintain_now(self.applied_flush_id.load(Ordering::Acquire), Take::Now)
    }

    fn maintain_now(&self, now_us: u64, take: Take) -> Result<(), StoreError> {
        let db = self.database()?;
        let mut damaged = None;
        let r = {
            let _turn = self.fold_lock.lock();
            self.maintain(&db, now_us, take, &mut damaged)
        };
        if let (Err(e), Some(series)) = (&r, damaged) {
            self.set_aside_damaged(&db, &series, e)?;
        }
        r
    }

    /// Folds what is due at `now_us` (a flush id, or the clock in
    /// microseconds), and writes a checkpoint if `take` says so, in one
    /// durable transaction. Under `fold_lock`.
    fn maintain(
        &self,
        db: &Database,
        now_us: u64,
        take: Take,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<(), StoreError> {
        if self.config.write_through {
            return Ok(());
        }
        let applied = self.applied_flush_id.load(Ordering::Acquire);
        // Counted from the first look that found it due, not from the last
        // checkpoint: after a restart that is long past, yet the flushes
        // replay applied are not ones to begin at.
        let waited = self.checkpoint_due(now_us).then(|| {
            let due_since = self.checkpoint_due_since_us.load(Ordering::Acquire);
            if due_since == 0 {
                self.checkpoint_due_since_us
                    .store(now_us, Ordering::Release);
                0
            } else {
                now_us.saturating_sub(due_since)
            }
        });
        // At a flush replay may begin at, once the interval has passed: a
        // replay from a checkpoint elsewhere would first fold the log back
        // to the last such flush again, only to bring the counters'
        // baselines forward.
        let aligned = waited.is_some_and(|w| {
            w >= RESUMABLE_WAIT_US || self.applied_resumable.load(Ordering::Acquire)
        });
        let checkpoint = applied > self.committed_flush_id.load(Ordering::Acquire)
            && match take {
                Take::Aligned => aligned,
                // Not before this process took one: what it applied so far
                // was replayed, and the load coming back brings a flush to
                // begin at.
                Take::Idle => {
                    aligned
                        || (waited.is_some()
                            && self.last_checkpoint_us.load(Ordering::Acquire) != 0)
                }
                Take::Now => true,
            };
        let (n, by_hour) = self.fold_count(&self.pending.lock(), now_us);
        if n == 0 && !checkpoint {
            return Ok(());
        }
        if n > 0 && by_hour {
            self.order_close(now_us / HOUR_US * HOUR_US);
        }
        // A fold to bring memory down takes whole runs.
        let split_from = by_hour.then(|| (now_us / HOUR_US * 60) as EpochMinute);
        self.fold_txn(
            db,
            n,
            split_from,
            checkpoint.then_some((applied, now_us)),
            damaged,
        )
    }

    /// Whether the checkpoint interval has passed by the clock: the
    /// daemon then has the next flush's marker carry what replay needs to
    /// begin at it, and the checkpoint is taken there.
    pub(super) fn checkpoint_due(&self, now_us: u64) -> bool {
        let interval =
            u64::try_from(self.config.checkpoint_interval.as_micros()).unwrap_or(u64::MAX);
        !self.config.write_through
            && now_us.saturating_sub(self.last_checkpoint_us.load(Ordering::Acquire)) >= interval
    }

    /// Puts the runs a close folds in series order, once an hour, before
    /// its first fold (`pending/order.rs`). Under `fold_lock`, which keeps
    /// the queue's front as it was between the copy and the sort.
    fn order_close(&self, hour: u64) {
        let due = self.pending.lock().due_runs(hour);
        if let Some(due) = due {
            let due = due.sort();
            self.pending.lock().reorder_due(due);
        }
    }

    /// One durable transaction: a fold of the `n` series pending longest
    /// (split at the hour from `split_from` where they may be, see
    /// `split.rs`), and with `checkpoint` (its flush id, and when it is) a
    /// checkpoint too; then the logs trimmed to what is still pending.
    /// Under `fold_lock`.
    pub(super) fn fold_txn(
        &self,
        db: &Database,
        n: usize,
        split_from: Option<EpochMinute>,
        checkpoint: Option<(u64, u64)>,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<(), StoreError> {
        let txn = begin_write(db)?;
        let (mut folds, oldest) = {
            let mut pending = self.pending.lock();
            let folds = pending.start_fold(n, split_from);
            // What a split leaves pending is a run since its own flush.
            let left = folds.iter().filter_map(|f| f.split.map(|s| s.since)).min();
            let oldest = match (pending.oldest(), left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            (folds, oldest)
        };
        let written = (|| {
            super::fold::write_folds(&txn, &mut folds, damaged)?;
            if let Some((id, _)) = checkpoint {
                self.write_checkpoint(&txn, id, &folds)?;
                raise_last_flush_id(&txn, id)?;
                document_gauges(&txn)?;
            }
            // Whatever is below the oldest run outside the folds has been
            // folded (a checkpoint's entries are never below it).
            trim_below(&txn, oldest.unwrap_or(u64::MAX))
        })();
        let flush_id = checkpoint.map(|(id, _)| id);
        // A commit that fails may still have landed: the reopen after it
        // finds out (`reopen.rs`).
        let mut unsure = false;
        let r = written.and_then(|()| {
            let committed = self.commit(txn, flush_id, true, None);
            unsure = committed.is_err();
            committed
        });
        let mut pending = self.pending.lock();
        match r {
            Ok(()) => {
                // Before the fold's runs come back: what a split leaves
                // pending was not in this checkpoint.
                if checkpoint.is_some() {
                    pending.logged();
                }
                pending.end_fold(&folds);
                if let Some((_, now_us)) = checkpoint {
                    if let Ok(m) = std::fs::metadata(&self.path) {
                        use std::os::unix::fs::MetadataExt;
                        // What it takes on disk: redb grows its file ahead.
                        metrics::gauge!("tally_store_file_bytes", "store" => "embedded")
                            .set((m.blocks() * 512).min(m.len()) as f64);
                    }
                    self.last_checkpoint_us.store(now_us, Ordering::Release);
                    self.checkpoint_due_since_us.store(0, Ordering::Release);
                    metrics::counter!("tally_store_checkpoints_total", "store" => "embedded")
                        .increment(1);
                }
                super::fold::folded(&pending, folds.len());
            }
            Err(_) => {
                pending.abort_fold(&folds);
                if unsure {
                    *self.unsure_fold.lock() = folds;
                }
            }
        }
        r
    }

    /// Writes every series changed since the last checkpoint into the
    /// checkpoint log, as checkpoint `id`. The series being folded in the
    /// same transaction (`folds`) are left out, as their minutes go to the
    /// documents, but for what a split leaves pending: all of it, as the
    /// run it stays.
    fn write_checkpoint(
        &self,
        txn: &WriteTransaction,
        id: u64,
        folds: &[Fold],
    ) -> Result<(), StoreError> {
        let mut log = txn.open_table(CHECKPOINT_LOG).map_err(db_err)?;
        let packing = f64::from_bits(self.log_packing.load(Ordering::Relaxed));
        let mut writer = LogWriter::new(id, Form::Checkpoint).packing_like(packing);
        for f in folds {
            let left = &f.minutes[f.folded().len()..];
            if !left.is_empty() {
                writer.push(
                    &mut log,
                    &f.series,
                    f.kind,
                    f.watermark,
                    left.iter().copied(),
                )?;
            }
        }
        let mut from = Some(0);
        // No flush can change the pending minutes meanwhile (the caller
        // holds `fold_lock`), so positions stay put between the parts.
        while let Some(start) = from {
            let pending = self.pending.lock();
            from = pending.dirty_in(start..start.saturating_add(CHECKPOINT_PART), |s| {
                writer.push(
                    &mut log,
                    s.series,
                    s.kind,
                    s.watermark,
                    s.minutes.iter().copied(),
                )
            })?;
        }
        self.log_packing
            .store(writer.packing().to_bits(), Ordering::Relaxed);
        writer.finish(&mut log)?;
        Ok(())
    }

    /// How many series the fold at `now_us` takes: those whose run began
    /// before the current hour, spread over `fold_spread` once the grace
    /// after the hour has passed; or more, oldest first, to bring the
    /// pending minutes back under nine tenths of `pending_max_bytes`. And
    /// whether the hour alone asks for them (memory does not). Called
    /// under `fold_lock`.
    fn fold_count(&self, pending: &Pending, now_us: u64) -> (usize, bool) {
        let hour = now_us / HOUR_US * HOUR_US;
        let start = hour + FOLD_GRACE_US;
        let spread = u64::try_from(self.config.fold_spread.as_micros()).unwrap_or(u64::MAX);
        let end = start.saturating_add(spread);
        let due = pending.queued_before(hour);
        // The first call of the process folds nothing by the hour: going by
        // the time since the spread began would take every due series at
        // once.
        let stored = self.last_fold_id.load(Ordering::Acquire);
        let last = if stored == 0 { now_us } else { stored }.max(start);
        // Too soon after the last fold by the hour: the time keeps counting
        // towards the next one, which takes the share of all of it.
        let wait = stored != 0
            && due > 0
            && (start..end).contains(&now_us)
            && now_us.saturating_sub(last) < FOLD_EVERY_US;
        if !wait {
            self.last_fold_id.store(now_us, Ordering::Release);
        }
        let by_hour = if due == 0 || now_us < start || wait {
            0
        } else if now_us >= end {
            due
        } else {
            // The share of what is left that keeps to `end`.
            let elapsed = u128::from(now_us.saturating_sub(last));
            let left = u128::from(end - last).max(1);
            usize::try_from((due as u128 * elapsed).div_ceil(left)).unwrap_or(due)
        };
        let bytes = pending.bytes();
        let max = self.config.pending_max_bytes;
        let by_memory = if bytes > max && pending.len() > 0 {
            let excess = bytes - max / 10 * 9;
            excess.div_ceil((bytes / pending.len()).max(1))
        } else {
            0
        };
        (
            by_hour.max(by_memory).min(MAX_FOLDS_PER_TXN),
            by_memory == 0,
        )
    }
}

/// The bytes of the documents the file holds (each table's entries times
/// its fixed value size: no walk over the file), beside the file's size,
/// so that an operator can see what the file holds against what it takes.
fn document_gauges(txn: &WriteTransaction) -> Result<(), StoreError> {
    use redb::ReadableTableMetadata;
    let hours = txn
        .open_table(HOUR_DOCS)
        .map_err(db_err)?
        .len()
        .map_err(db_err)?;
    let days = txn
        .open_table(DAY_SUMMARY)
        .map_err(db_err)?
        .len()
        .map_err(db_err)?;
    let blocks = txn
        .open_table(DAY_MINUTES)
        .map_err(db_err)?
        .len()
        .map_err(db_err)?;
    let bytes = hours * HOUR_DOC_LEN as u64
        + days * DAY_SUMMARY_LEN as u64
        + blocks * DAY_MINUTES_LEN as u64;
    metrics::gauge!("tally_store_document_bytes", "store" => "embedded").set(bytes as f64);
    Ok(())
}

/// The documents (hour and day) that ascending `minutes` fall in.
fn documents_of(minutes: &[(EpochMinute, Slot)]) -> usize {
    let mut count = 0;
    let (mut hour, mut day) = (None, None);
    for &(m, _) in minutes {
        let (h, d) = (Tier::Hour.period_start(m), Tier::Day.period_start(m));
        count += usize::from(hour != Some(h)) + usize::from(day != Some(d));
        (hour, day) = (Some(h), Some(d));
    }
    count
}
