//! A flush's way into the store, and folds: writing series' pending minutes
//! into their documents. How a flush is applied depends on the mode:
//! checkpointed (the default, `checkpoint.rs`) keeps it in memory until a
//! checkpoint and a fold; write-through (tests that compare with it) folds
//! everything pending and writes the flush straight into its documents in
//! one transaction, so a flush is atomic there: the folds, its documents
//! and `last_flush_id` commit together or not at all.
//!
//! A write-through flush at or below one already committed is a replay (a
//! retry after an ambiguous failure, or the write-ahead log's replay at
//! start): the watermark check in `write.rs` skips the documents that hold
//! it.
//!
//! A fold that meets a damaged document takes that series' pending minutes
//! out of the store as dead letters, durable before the commit that
//! forgets them (`Db::set_aside_damaged`), and the flush goes on.

use std::sync::Arc;
use std::time::Instant;

use redb::{Database, WriteTransaction};

use super::db::{Db, Redo};
use super::engine::begin_write;
use super::errors::{db_err, invalid};
use super::flush_log::{forget_series, trim_below};
use super::layout::{META, META_MAX_FOLD_WATERMARK};
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
    pub(super) fn set_aside_damaged(
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
            ).into())
        })?;
        let txn = begin_write(db)?;
        forget_series(&txn, series)?;
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
        if !self.config.write_through {
            return self.apply_checkpointed(db, batch, damaged);
        }
        let id = batch.id.0;
        // Applies and folds one at a time, through their bookkeeping after
        // the commit too.
        let _turn = self.fold_lock.lock();
        let txn = begin_write(db)?;
        let mut folds = self.pending.lock().start_fold(usize::MAX, None);
        let written = write_through(&txn, batch, &mut folds, damaged).and_then(|stats| {
            // On an error above, dropping `txn` aborts it: nothing of the
            // batch is written.
            self.commit(txn, Some(id), false, Some(Redo::Apply(batch.clone())))?;
            Ok(stats)
        });
        let mut pending = self.pending.lock();
        match written {
            Ok(stats) => {
                pending.end_fold(&folds);
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
    /// Folds the `n` series pending longest, outside any flush.
    #[cfg(test)]
    pub(super) fn fold_some(&self, n: usize) -> Result<(), StoreError> {
        let db = self.database()?;
        let mut damaged = None;
        let r = self.fold_some_on(&db, n, &mut damaged);
        if let (Err(e), Some(series)) = (&r, damaged) {
            self.set_aside_damaged(&db, &series, e)?;
        }
        r
    }

    #[cfg(test)]
    fn fold_some_on(
        &self,
        db: &Database,
        n: usize,
        damaged: &mut Option<Arc<SeriesId>>,
    ) -> Result<(), StoreError> {
        let _turn = self.fold_lock.lock();
        self.fold_txn(db, n, None, None, damaged)
    }
}

/// The metrics of a committed fold of `n` series.
pub(super) fn folded(pending: &Pending, n: usize) {
    metrics::counter!("tally_store_folded_series_total", "store" => "embedded").increment(n as u64);
    pending_gauges(pending);
}

/// Writes `folds` into their documents, in key order, and raises
/// `meta.max_fold_watermark` to theirs. A damaged document fails the whole
/// write, naming its series in `damaged`.
pub(super) fn write_folds(
    txn: &WriteTransaction,
    folds: &mut [Fold],
    damaged: &mut Option<Arc<SeriesId>>,
) -> Result<(), StoreError> {
    raise_fold_watermark(txn, folds)?;
    let mut tables = DocTables::open(txn)?;
    folds.sort_unstable_by(|a, b| a.series.cmp(&b.series));
    for f in folds.iter_mut() {
        // A split's day watermark is at or above the day document's
        // (`split.rs`): equal when this very split committed already, though
        // its commit reported an error, and then the split is written again
        // and skipped as such. A document above it holds the whole run.
        if f.split.is_some() && tables.day_watermark(f)? > f.day_watermark {
            f.unsplit();
        }
        let mut stats = ApplyStats::default();
        let r = write_series(
            &mut tables,
            &f.update(),
            (f.watermark, f.day_watermark),
            &mut stats,
        );
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

/// The writes of a write-through flush inside `txn`: every pending series
/// folded, the logs emptied, then the flush merged straight into its
/// documents with the watermark check.
fn write_through(
    txn: &WriteTransaction,
    batch: &FlushBatch,
    folds: &mut [Fold],
    damaged: &mut Option<Arc<SeriesId>>,
) -> Result<ApplyStats, StoreError> {
    let id = batch.id.0;
    let mut stats = ApplyStats::default();
    let started = Instant::now();
    trim_below(txn, u64::MAX)?;
    write_folds(txn, folds, damaged)?;
    let mut tables = DocTables::open(txn)?;
    let mut order: Vec<&SeriesMinutes> = batch.series.iter().collect();
    order.sort_unstable_by(|a, b| a.series.cmp(&b.series));
    for sm in order {
        write_series(&mut tables, &sm.update(), (id, id), &mut stats)?;
    }
    drop(tables);
    raise_last_flush_id(txn, id)?;
    tracing::debug!(
        flush_id = id,
        folded = folds.len(),
        write_s = started.elapsed().as_secs_f64(),
        "flush written through"
    );
    Ok(stats)
}

/// How many series are pending, and the memory their minutes take.
pub(super) fn pending_gauges(pending: &Pending) {
    metrics::gauge!("tally_store_pending_series", "store" => "embedded").set(pending.len() as f64);
    metrics::gauge!("tally_store_pending_bytes", "store" => "embedded").set(pending.bytes() as f64);
}

/// Raises `meta.max_fold_watermark` to the highest watermark of `folds`.
fn raise_fold_watermark(txn: &WriteTransaction, folds: &[Fold]) -> Result<(), StoreError> {
    let Some(high) = folds.iter().map(|f| f.watermark).max() else {
        return Ok(());
    };
    let mut meta = txn.open_table(META).map_err(db_err)?;
    let old = super::db::meta_value(&meta, META_MAX_FOLD_WATERMARK)?.unwrap_or(0);
    if high > old {
        meta.insert(META_MAX_FOLD_WATERMARK, high).map_err(db_err)?;
    }
    Ok(())
}
