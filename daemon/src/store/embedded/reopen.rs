//! Surviving an I/O error. After one failed write (a full disk, a failing
//! device) redb refuses every later operation on that `Database` until it is
//! reopened, and a reopened file lands on the last *durable* commit: the
//! non-durable commits after it are gone. So the store keeps those commits'
//! writes ([`Redo`]) until a durable commit covers them, and the first
//! operation after an I/O error reopens the file and does them again, in
//! order, before any other operation may touch it. Watermarks make a redone
//! flush count once even where the file did keep it.
//!
//! While the file cannot be reopened (its file system has less than 1 MiB
//! free, or the reopen fails), operations
//! answer `Unavailable` and the store reports itself failing: `/readyz` is
//! unready and ingest refuses what it could not keep. Each later operation
//! (a flush retry, a readiness probe) tries again, so the store resumes by
//! itself once space returns.

use std::sync::atomic::Ordering;

use redb::Database;

use super::db::{open_checked, Db, Opened, Redo, SyncState};
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
