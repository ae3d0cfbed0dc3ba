//! A flush's way into the store. Its minutes go to the flush log and to the
//! pending map, and the series pending longest are folded into their
//! documents, a slice of them per flush (why: `pending.rs`). One write
//! transaction holds all of it, so a flush is still atomic: its log
//! entries, the fold and `last_flush_id` commit together or not at all.
//!
//! A flush at or below one already committed is a replay (a retry after an
//! ambiguous failure, or the write-ahead log's replay at start). Some of its
//! documents may already hold it, and only their stored watermarks can tell;
//! so a replay folds everything pending and then merges the flush straight
//! into the documents with the watermark check (`write.rs`). Replays are
//! rare, so that path's cost does not matter.
//!
//! A fold that meets a damaged document takes that series' pending minutes
//! out of the store as dead letters, durable before the commit that
//! forgets them (`Db::set_aside_damaged`), and the flush goes on.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use hashbrown::HashMap;
use redb::{Database, WriteTransaction};

use super::db::{Db, Redo};
use super::errors::{db_err, invalid};
use super::flush_log::{forget_series, trim_below, LogWriter};
use super::layout::FLUSH_LOG;
use super::pending::{Fold, Pending};
use super::write::{raise_last_flush_id, write_series, DocTables};
use crate::model::{FlushBatch, SeriesId, SeriesMinutes};
use crate::store::{ApplyStats, StoreError};

impl Db {
    pub(super) fn apply(&self, batch: &Arc<FlushBatch>) -> Result<ApplyStats, StoreError> {
        self.apply_on(&*self.database()?, batch)
    }

    pub(super) fn apply_on(
        &self,
        db: &Database,
        batch: &Arc<FlushBatch>,
    ) -> Result<ApplyStats, StoreError> {
        let id = batch.id.0;
        if id == 0 {
            return Err(invalid(
                "flush id 0 is reserved (it is the watermark of a document no flush has touched)"
                    .into(),
            ));
        }
        for su in &batch.series {
            check_update(su)?;
        }
        // A fold that meets a damaged document sets that series' pending
        // minutes aside (they cannot be stored, as a direct write into that
        // document could not either) and the flush goes again without it:
        // one bad document must not hold up every later flush.
        let mut set_aside = 0;
        loop {
            let mut damaged = None;
            match self.apply_once(db, batch, &mut damaged) {
                Err(e) if set_aside < MAX_DAMAGED_PER_FLUSH => {
                    let Some(series) = damaged else { return Err(e) };
                    self.set_aside_damaged(db, &series, &e)?;
                    set_aside += 1;
                }
                r => return r,
            }
        }
    }

    /// Takes the pending minutes of `series`, whose document `e` says is
    /// damaged, out of the store: kept as dead letters through the
    /// [`SetAside`](crate::store::SetAside) hook, durably, and only then forgotten, with their
    /// flush log entries, in a durable commit. A crash between the two
    /// loads them again from the log, and keeping them again under the
    /// same first flush replaces what was kept: they are kept once. If the
    /// hook cannot keep them, nothing is forgotten and the operation fails
    /// (to be retried). Without a hook (unit tests) they are dropped.
    fn set_aside_damaged(
        &self,
        db: &Database,
        series: &Arc<SeriesId>,
        e: &StoreError,
    ) -> Result<(), StoreError> {
        metrics::counter!("tally_store_errors_total", "store" => "embedded", "op" => "fold", "kind" => e.kind())
            .increment(1);
        let Some(hook) = self.set_aside.get() else {
            tracing::error!(series = %series, error = %e, "a damaged document: this series' pending minutes are dropped so that other series' flushes go on");
            self.pending.lock().drop_series(series);
            return Ok(());
        };
        // No fold may take the series meanwhile.
        let _turn = self.fold_lock.lock();
        let Some((since, minutes)) = self.pending.lock().run_of(series) else {
            return Ok(());
        };
        hook.keep(since, &minutes, &e.to_string()).map_err(|why| {
            StoreError::Unavailable(format!(
                "{series}: its document is damaged ({e}) and its pending minutes could not be kept as dead letters: {why}"
            ))
        })?;
        let txn = db.begin_write().map_err(db_err)?;
        {
            let mut log = txn.open_table(FLUSH_LOG).map_err(db_err)?;
            forget_series(&mut log, series)?;
        }
        self.commit(txn, None, true, None)?;
        self.pending.lock().drop_series(series);
        tracing::error!(series = %series, error = %e, minutes = minutes.minutes.len(), "a damaged document: this series' pending minutes are kept as dead letters so that other series' flushes go on");
        Ok(())
    }

    /// One attempt at `apply_on`; `damaged` names the series whose fold met
    /// a damaged document, if that is why it failed.
    fn apply_once(
        &self,
        db: &Database,
        batch: &Arc<FlushBatch>,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<ApplyStats, StoreError> {
        let id = batch.id.0;
        // Applies and idle folds one at a time, through their bookkeeping
        // after the commit too.
        let _turn = self.fold_lock.lock();
        let txn = db.begin_write().map_err(db_err)?;
        // Folding over one flush is writing every flush straight into its
        // documents, which is the replay's way.
        let replay = self.config.fold_over_flushes <= 1
            || id <= self.committed_flush_id.load(Ordering::Acquire);
        let (mut folds, oldest) = {
            let mut pending = self.pending.lock();
            let n = if replay {
                usize::MAX
            } else {
                self.fold_count(&pending, id)
            };
            let folds = pending.start_fold(n);
            (folds, pending.oldest())
        };
        let written = write_flush(&txn, batch, &mut folds, replay, oldest, damaged).and_then(|w| {
            // On an error above, dropping `txn` aborts it: nothing of the
            // batch is written.
            let committing = Instant::now();
            self.commit(txn, Some(id), false, Some(Redo::Apply(batch.clone())))?;
            tracing::debug!(
                flush_id = id,
                commit_s = committing.elapsed().as_secs_f64(),
                "flush committed"
            );
            Ok(w)
        });
        let mut pending = self.pending.lock();
        match written {
            Ok((stats, logged)) => {
                let adding = Instant::now();
                pending.end_fold(&folds);
                for su in logged.iter(batch) {
                    pending.add(&su.series, su.kind, id, su.minutes.iter().copied());
                }
                tracing::debug!(
                    flush_id = id,
                    pending_s = adding.elapsed().as_secs_f64(),
                    "flush pending"
                );
                folded(&pending, folds.len());
                Ok(stats)
            }
            Err(e) => {
                pending.abort_fold(&folds);
                Err(e)
            }
        }
    }
}

impl Db {
    /// Folds the next slice of the pending series with no flush to carry
    /// it: an idle daemon's log empties too.
    pub(super) fn fold_idle(&self) -> Result<(), StoreError> {
        // By the share alone: the time share goes by flush ids, and mixing
        // them with the clock would fold everything at once after a step
        // of the clock.
        let spread = self.config.fold_over_flushes.max(1) as usize;
        let n = self.pending.lock().len().div_ceil(spread);
        if n > 0 {
            self.fold_some(n)?;
        }
        Ok(())
    }

    /// How many series the fold of flush `id` takes: a
    /// `1 / fold_over_flushes` share, or more to keep to `fold_period`
    /// (flush ids count microseconds). The first flush of the process goes
    /// by the share alone, so that a restart with much pending does not
    /// fold it all in one transaction. Called under `fold_lock`.
    fn fold_count(&self, pending: &Pending, id: u64) -> usize {
        let spread = self.config.fold_over_flushes.max(1) as usize;
        let last = self.last_fold_id.swap(id, Ordering::AcqRel);
        let elapsed = if last == 0 {
            0
        } else {
            id.saturating_sub(last)
        };
        let period = u64::try_from(self.config.fold_period.as_micros()).unwrap_or(u64::MAX);
        pending
            .len()
            .div_ceil(spread)
            .max(pending.share(elapsed, period))
    }

    /// Folds the `n` series pending longest, outside any flush.
    pub(super) fn fold_some(&self, n: usize) -> Result<(), StoreError> {
        let db = self.database()?;
        let mut damaged = None;
        let r = self.fold_some_on(&db, n, &mut damaged);
        if let (Err(e), Some(series)) = (&r, damaged) {
            self.set_aside_damaged(&db, &series, e)?;
        }
        r
    }

    fn fold_some_on(
        &self,
        db: &Database,
        n: usize,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<(), StoreError> {
        let _turn = self.fold_lock.lock();
        let txn = db.begin_write().map_err(db_err)?;
        let (mut folds, oldest) = {
            let mut pending = self.pending.lock();
            let folds = pending.start_fold(n);
            (folds, pending.oldest())
        };
        let written = (|| {
            let mut log = txn.open_table(FLUSH_LOG).map_err(db_err)?;
            trim_below(&mut log, oldest.unwrap_or(u64::MAX))?;
            drop(log);
            write_folds(&txn, &mut folds, damaged)
        })();
        let r = written.and_then(|()| self.commit(txn, None, false, None));
        let mut pending = self.pending.lock();
        match r {
            Ok(()) => {
                pending.end_fold(&folds);
                folded(&pending, folds.len());
            }
            Err(_) => pending.abort_fold(&folds),
        }
        r
    }
}

/// The metrics of a committed fold of `n` series.
fn folded(pending: &Pending, n: usize) {
    metrics::counter!("tally_store_folded_series_total", "store" => "embedded").increment(n as u64);
    metrics::gauge!("tally_store_pending_series", "store" => "embedded").set(pending.len() as f64);
}

/// Writes `folds` into their documents, in key order. A damaged document
/// fails the whole write, naming its series in `damaged`.
fn write_folds(
    txn: &WriteTransaction,
    folds: &mut [Fold],
    damaged: &mut Option<Arc<SeriesId>>,
) -> Result<(), StoreError> {
    let mut tables = DocTables::open(txn)?;
    folds.sort_unstable_by(|a, b| a.series.cmp(&b.series));
    for f in folds.iter() {
        let mut stats = ApplyStats::default();
        let r = write_series(&mut tables, &f.update(), f.watermark, &mut stats);
        if let Err(e @ StoreError::Corrupt { .. }) = &r {
            *damaged = Some(f.series.clone());
            return Err(e.clone());
        }
        r?;
    }
    Ok(())
}

/// Damaged series set aside in one flush before it gives up.
const MAX_DAMAGED_PER_FLUSH: usize = 16;

/// Refuses minutes that are not as the aggregator drains them: ascending,
/// each at most once (the log and the document updates rely on it).
fn check_update(sm: &SeriesMinutes) -> Result<(), StoreError> {
    match sm.minutes.windows(2).find(|w| w[0].0 >= w[1].0) {
        Some(w) => Err(invalid(format!(
            "{}: minute {} follows minute {}: minutes must ascend, each once",
            sm.series, w[1].0, w[0].0
        ))),
        None => Ok(()),
    }
}

/// Which series of a batch its flush logged: all but the folded ones, or
/// none (a replay). Positions rather than a list of the logged series,
/// which took 8 bytes per series of the batch, and a route per series
/// another 16, while the flush held its batch and its dirty pages.
struct Logged {
    /// Ascending positions in the batch of the series folded instead.
    folded: Option<Vec<u32>>,
}

impl Logged {
    fn iter<'a>(&'a self, batch: &'a FlushBatch) -> impl Iterator<Item = &'a SeriesMinutes> + 'a {
        let mut folded = self.folded.iter().flatten().copied().peekable();
        let all = if self.folded.is_some() {
            batch.series.as_slice()
        } else {
            &[]
        };
        all.iter().enumerate().filter_map(move |(i, su)| {
            if folded.next_if_eq(&(i as u32)).is_some() {
                return None;
            }
            Some(su)
        })
    }

    fn len(&self, batch: &FlushBatch) -> usize {
        self.folded
            .as_ref()
            .map_or(0, |f| batch.series.len() - f.len())
    }
}

/// The writes of flush `batch` inside `txn`: the log entries of the series
/// not in `folds`, the folds (which take the flush's minutes of their
/// series), or for a replay the flush itself after the folds; then the log
/// trimmed to what is still pending. `oldest` is the oldest flush pending
/// outside the folds. Returns the stats and which series were logged.
fn write_flush(
    txn: &WriteTransaction,
    batch: &FlushBatch,
    folds: &mut [Fold],
    replay: bool,
    oldest: Option<u64>,
    damaged: &mut Option<Arc<SeriesId>>,
) -> Result<(ApplyStats, Logged), StoreError> {
    let id = batch.id.0;
    let mut stats = ApplyStats::default();
    let mut logged = Logged { folded: None };
    let started = Instant::now();
    let mut trimmed = started;
    let mut log = txn.open_table(FLUSH_LOG).map_err(db_err)?;
    if !replay {
        // Keyed by the folds' own ids (shared, not borrowed from `folds`,
        // which the loop changes). Every series of the flush is looked up
        // here, a million a second at a million series: not SipHash.
        let index: HashMap<Arc<SeriesId>, usize> = folds
            .iter()
            .enumerate()
            .map(|(i, f)| (f.series.clone(), i))
            .collect();
        let mut folded = Vec::with_capacity(folds.len());
        let mut writer = LogWriter::new(id);
        for (at, su) in batch.series.iter().enumerate() {
            match index.get(&*su.series) {
                Some(&i) => {
                    folds[i].add(id, su.kind, su.minutes.iter().copied());
                    folded.push(at as u32);
                }
                None => writer.push(&mut log, &su.series, su.kind, su.minutes.iter().copied())?,
            }
        }
        logged.folded = Some(folded);
        let wrote_log = writer.finish(&mut log)?;
        stats.documents_written = batch.document_count();
        // The log keeps the oldest pending flush and everything after it.
        let keep_from = oldest.into_iter().chain(wrote_log.then_some(id)).min();
        trimmed = Instant::now();
        trim_below(&mut log, keep_from.unwrap_or(u64::MAX))?;
    } else {
        // Everything pending is in `folds`: the whole log goes.
        trim_below(&mut log, u64::MAX)?;
    }
    drop(log);
    let folding = Instant::now();
    write_folds(txn, folds, damaged)?;
    if replay {
        let mut tables = DocTables::open(txn)?;
        let mut order: Vec<&SeriesMinutes> = batch.series.iter().collect();
        order.sort_unstable_by(|a, b| a.series.cmp(&b.series));
        for sm in order {
            write_series(&mut tables, &sm.update(), id, &mut stats)?;
        }
    }
    raise_last_flush_id(txn, id)?;
    tracing::debug!(
        flush_id = id,
        logged = logged.len(batch),
        folded = folds.len(),
        log_s = (trimmed - started).as_secs_f64(),
        trim_s = (folding - trimmed).as_secs_f64(),
        fold_s = folding.elapsed().as_secs_f64(),
        "flush written"
    );
    Ok((stats, logged))
}
