//! Surviving an I/O error. After one failed write (a full disk, a failing
//! device) redb refuses every later operation on that `Database` until it is
//! reopened, and a reopened file lands on the last *durable* commit: the
//! non-durable commits after it are gone. So the store keeps those commits'
//! writes ([`Redo`]) until a durable commit covers them, and the first
//! operation after an I/O error reopens the file and does them again, in
//! order, before any other operation may touch it. Watermarks make a redone
//! flush count once even where the file did keep it. A fold (durable) whose
//! commit failed is looked up instead: if it landed all the same, it is
//! ended as a committed one would be, rather than folded again.
//!
//! While the file cannot be reopened (its file system has less than 1 MiB
//! free, or the reopen fails), operations
//! answer `Unavailable` and the store reports itself failing: `/readyz` is
//! unready and ingest refuses what it could not keep. Each later operation
//! (a flush retry, a readiness probe) tries again, so the store resumes by
//! itself once space returns.

use std::sync::atomic::Ordering;

use redb::{Database, ReadableDatabase};

use super::codec::stored_watermark;
use super::db::{open_checked, Db, Opened, Redo, SyncState};
use super::errors::db_err;
use super::layout::{HOUR_DOCS, HOUR_DOC_LEN};
use crate::model::Tier;
use crate::store::StoreError;

impl Db {
    /// Reopens the file if an I/O error has made redb refuse it, and redoes
    /// what the reopen lost. Blocking.
    pub(super) fn reopen_if_needed(&self) -> Result<(), StoreError> {
        if self.io_failure.lock().is_none() {
            return Ok(());
        }
        let mut slot = self.db.write();
        // Another operation may have reopened it while this one waited.
        if self.io_failure.lock().is_none() {
            return Ok(());
        }
        // A reopen with nothing to redo writes nothing, so it would succeed
        // on a disk that is still full, and the store would look ready
        // until its next write failed. Free space decides instead.
        check_free_space(&self.path)?;
        // Closed first: redb locks the file while it is open.
        *slot = None;
        let Opened {
            db, last_flush_id, ..
        } = open_checked(&self.opener, &self.path)?;
        self.committed_flush_id
            .store(last_flush_id, Ordering::Release);
        *self.sync.lock() = SyncState::now();
        // The pending minutes in memory stay: they hold everything the file
        // has of them (folds and checkpoints commit durably) and the flushes
        // applied since. In write-through mode they are empty, and the redo
        // below writes the flushes the reopen lost.
        self.settle_unsure_fold(&db)?;
        let redo = std::mem::take(&mut *self.redo.lock());
        if let Err(e) = self.redo_all(&db, &redo) {
            // Kept whole for the next attempt: what was redone is redone
            // again then, harmlessly.
            *self.redo.lock() = redo;
            return Err(e);
        }
        *slot = Some(db);
        *self.io_failure.lock() = None;
        if self.fault().is_none() {
            metrics::gauge!("tally_store_failed", "store" => "embedded").set(0.0);
        }
        tracing::info!(
            path = %self.path.display(),
            redone = redo.len(),
            last_flush_id,
            "embedded store reopened after an I/O error; the commits since its last durable one were made again"
        );
        Ok(())
    }

    /// Whether the fold whose commit failed landed all the same, told by
    /// the hour document of its first folded minute: a fold writes it with
    /// the run's watermark, which nothing before it reached. If it landed,
    /// its series leave the pending minutes as after a commit (a split's
    /// new run goes on); else they stay, to be folded again. Folded again
    /// after landing, a run's documents would take its minutes twice
    /// wherever the run had grown meanwhile (and a split's day document
    /// in any case). Nothing is applied between the failure and this
    /// reopen, so the runs are as the fold took them.
    fn settle_unsure_fold(&self, db: &Database) -> Result<(), StoreError> {
        let folds = std::mem::take(&mut *self.unsure_fold.lock());
        let Some((f, &(m, _))) = folds
            .iter()
            .find_map(|f| f.folded().first().map(|first| (f, first)))
        else {
            return Ok(());
        };
        let met = f.series.metric_key();
        let key = (Tier::Hour.period_start(m), &*f.series.source, &*met);
        let stored = (|| {
            let txn = db.begin_read().map_err(db_err)?;
            let hours = txn.open_table(HOUR_DOCS).map_err(db_err)?;
            let value = hours.get(key).map_err(db_err)?;
            Ok::<_, StoreError>(stored_watermark::<HOUR_DOC_LEN>(
                value.as_ref().map(|v| v.value()),
            ))
        })();
        let landed = match stored {
            Ok(w) => w >= f.watermark,
            Err(e) => {
                // Asked again at the next reopen.
                *self.unsure_fold.lock() = folds;
                return Err(e);
            }
        };
        if landed {
            let mut pending = self.pending.lock();
            pending.end_fold(&folds);
            super::fold::folded(&pending, folds.len());
        }
        tracing::warn!(
            series = folds.len(),
            landed,
            "a fold whose commit failed: {}",
            if landed {
                "it landed all the same; its series are folded"
            } else {
                "it did not land; its series are folded again"
            }
        );
        Ok(())
    }

    fn redo_all(&self, db: &Database, redo: &[Redo]) -> Result<(), StoreError> {
        for r in redo {
            match r {
                Redo::Apply(batch) => {
                    self.apply_on(db, batch)?;
                }
                Redo::Catalog(entries) => self.catalog_upsert_on(db, entries)?,
            }
        }
        // Durable, so that the redone writes are safe again and the list
        // they were kept in empties.
        self.sync_on(db)
    }
}

/// Free space a reopen needs on the store's file system. Less, and the I/O
/// error that made the reopen necessary (nearly always a full disk) would
/// come straight back with the next write.
const REOPEN_MIN_FREE_BYTES: u64 = 1 << 20;

fn check_free_space(path: &std::path::Path) -> Result<(), StoreError> {
    // Where free space cannot be read, the reopen's own writes decide.
    let Ok(st) = rustix::fs::statvfs(path) else {
        return Ok(());
    };
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if free < REOPEN_MIN_FREE_BYTES {
        return Err(StoreError::Unavailable(format!(
            "{}: {} KiB free on its file system, {} KiB needed before the store reopens after an I/O error; free some space",
            path.display(),
            free >> 10,
            REOPEN_MIN_FREE_BYTES >> 10
        ).into()));
    }
    Ok(())
}
