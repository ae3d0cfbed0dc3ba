//! The open database: creating or opening the file, the commit that decides
//! durability, and how redb's errors become [`StoreError`]s. Separate
//! because every operation (writes, reads, catalog, sweep) goes through it,
//! while none of them needs to know when an `fsync` happens.
//!
//! # Durability
//!
//! Checkpoints and folds (`checkpoint.rs`) commit with
//! [`Durability::Immediate`]: the write-ahead log lets go of flushes on
//! their word, and a reopen after an I/O error keeps the pending minutes
//! in memory, which is right only if every fold that took minutes out of
//! them is on disk. Catalog upserts, and flushes in write-through mode
//! (tests), commit with [`Durability::None`]: redb makes the commit visible
//! to readers at once but does not `fsync`. Every
//! [`EmbeddedConfig::durable_interval`] or every
//! [`EmbeddedConfig::durable_every_flushes`] commits (whichever comes
//! first), and always in [`Store::close`](crate::store::Store::close), a
//! commit is made durable, which persists it *and every non-durable commit
//! before it*. This is safe: redb's crash recovery always lands on the last
//! durable commit, a consistent snapshot; nothing is ever half-applied. The
//! write-ahead log keeps every flush above the durable flush id
//! (`Db::durable_flush_id`) for replay; the watermarks make that replay
//! exactly-once. When the daemon is idle, `sync_if_due` makes the last
//! commits durable once they have waited the interval. The commits since
//! the last durable one are also kept in memory, so that the file can be
//! reopened after an I/O error without losing them (see `reopen.rs`); a
//! third bound, [`EmbeddedConfig::redo_max_bytes`] (4 MiB), keeps that
//! memory small by making a commit durable when more would be kept.
//!
//! A non-durable commit skips only the `fsync`; its pages are still
//! written, and the pages it copied can be reused only after the next
//! durable commit, so every non-durable commit in a row grows the file by
//! the pages it touched. That is why the write path's own commits are all
//! durable and few: one checkpoint a minute and the folds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
use redb::{Database, Durability, ReadableTable, WriteTransaction};

use super::catalog_index;
use super::config::EmbeddedConfig;
use super::engine::{begin_write, Opener};
use super::errors::db_err;
use super::flush_log::load_pending;
use super::layout::{
    CHECKPOINT_LOG, DAY_MINUTES, DAY_SUMMARY, FILE_NAME, FLUSH_LOG, HOUR_DOCS, LAYOUT_VERSION,
    LEGACY_SLOT_LAYOUTS, META, META_LAST_FLUSH_ID, META_LAYOUT_VERSION, META_MAX_FOLD_WATERMARK,
    SERIES_CATALOG, UPGRADABLE_LAYOUTS,
};
use super::pending::Pending;
use crate::model::{EpochMinute, FlushBatch, SeriesMinutes, Slot};
use crate::store::{CatalogEntry, Cause, SetAside, StoreError};

/// A write committed without `fsync`, kept until a durable commit covers it.
#[derive(Debug, Clone)]
pub(super) enum Redo {
    Apply(Arc<FlushBatch>),
    Catalog(Arc<[CatalogEntry]>),
}

impl Redo {
    /// About how much memory keeping this write takes.
    pub(super) fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        match self {
            Redo::Apply(batch) => batch
                .series
                .iter()
                .map(|sm| {
                    size_of::<SeriesMinutes>() + sm.minutes.len() * size_of::<(EpochMinute, Slot)>()
                })
                .sum(),
            Redo::Catalog(entries) => entries.len() * (size_of::<CatalogEntry>() + 64),
        }
    }
}

/// When the last durable commit was, and what followed it.
#[derive(Debug)]
pub(super) struct SyncState {
    pub(super) last_durable: Instant,
    pub(super) commits_since_durable: u32,
    /// [`Redo::approx_bytes`] of the writes kept since.
    redo_bytes: usize,
}

impl SyncState {
    pub(super) fn now() -> SyncState {
        SyncState {
            last_durable: Instant::now(),
            commits_since_durable: 0,
            redo_bytes: 0,
        }
    }
}

/// The database and its commit bookkeeping; shared by every clone of the
/// store. Writes, reads, the catalog and the sweep add their methods to it
/// in their own modules.
pub(super) struct Db {
    /// `None` only while reopening after an I/O error has failed. Every
    /// operation holds the read lock for as long as its transaction lives,
    /// so that a reopen (the write lock) never overlaps one.
    pub(super) db: RwLock<Option<Database>>,
    pub(super) opener: Opener,
    pub(super) path: PathBuf,
    pub(super) config: EmbeddedConfig,
    pub(super) sync: Mutex<SyncState>,
    /// Highest flush id committed (durably or not) in this process: in
    /// checkpointed mode, the last checkpoint.
    pub(super) committed_flush_id: AtomicU64,
    /// Highest flush id applied: in checkpointed mode, in the pending
    /// minutes at least (see `checkpoint.rs`).
    pub(super) applied_flush_id: AtomicU64,
    /// Whether replay may begin at the flush `applied_flush_id` names
    /// ([`crate::model::FlushBatch::resumable`]): a checkpoint waits for
    /// one that is (see `checkpoint.rs`).
    pub(super) applied_resumable: AtomicBool,
    /// `meta.max_fold_watermark` when the file was opened: flushes
    /// replayed at or below it may be in documents already.
    pub(super) max_fold_watermark: AtomicU64,
    /// When the last checkpoint was, as a flush id or clock microseconds.
    pub(super) last_checkpoint_us: AtomicU64,
    /// When a checkpoint was first found due since the last (0: not yet),
    /// in the same units: how long it has waited for a flush replay may
    /// begin at (`checkpoint.rs`).
    pub(super) checkpoint_due_since_us: AtomicU64,
    /// Documents' watermarks looked up while replayed flushes come (see
    /// `checkpoint.rs`); dropped at the first new flush.
    pub(super) replay_marks: Mutex<Option<super::flush_log::DocWatermarks>>,
    /// How the last checkpoint's log chunks packed (`f64` bits): where the
    /// next checkpoint starts its chunks (see `flush_log.rs`).
    pub(super) log_packing: AtomicU64,
    /// Highest flush id known to be on disk.
    durable_flush_id: AtomicU64,
    /// The writes committed since the last durable commit, oldest first:
    /// what a reopen must do again. Bounded by the durability cadence.
    pub(super) redo: Mutex<Vec<Redo>>,
    /// The I/O error after which redb refuses every operation until the
    /// file is reopened; cleared by a successful reopen.
    pub(super) io_failure: Mutex<Option<StoreError>>,
    /// The fold whose commit failed, its series back in the pending
    /// minutes: the reopen after the failure finds out whether it landed
    /// all the same, and if so ends it (`reopen.rs`).
    pub(super) unsure_fold: Mutex<Vec<super::pending::Fold>>,
    /// Flushed minutes not yet folded into their documents, loaded from
    /// the flush log at open (see `pending.rs`).
    pub(super) pending: Mutex<Pending>,
    /// Held by an apply or an idle fold from its start through the
    /// bookkeeping after its commit, so that two never interleave there.
    pub(super) fold_lock: Mutex<()>,
    /// The flush whose apply last folded (0: none yet in this process).
    /// Under `fold_lock`.
    pub(super) last_fold_id: AtomicU64,
    /// Set by the first error that means the store cannot be trusted any
    /// more (the file is corrupt, or an operation panicked): from then on
    /// the daemon is unready and ingest refuses what it could not keep.
    fault: Mutex<Option<StoreError>>,
    /// Where the pending minutes of a series whose document is damaged
    /// are kept before they are forgotten (see `fold.rs`); unset, they are
    /// dropped (unit tests).
    pub(super) set_aside: std::sync::OnceLock<Arc<dyn SetAside>>,
}

impl Db {
    /// Opens (creating if needed) `dir` and `dir/tally.redb`.
    pub(super) fn open(dir: &Path, config: EmbeddedConfig) -> Result<Db, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            let message = format!("cannot create data directory {}: {e}", dir.display());
            StoreError::Io(Cause::of(message, e))
        })?;
        let path = dir.join(FILE_NAME);
        // redb would quietly make a new database in an empty file: refuse,
        // for an empty store file where data was is a truncation (a full
        // disk, a bad copy), not a fresh start.
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
            return Err(StoreError::Corrupt {
                doc: path.display().to_string(),
                reason: "the file is empty (0 bytes): it was truncated, and starting would \
                         silently begin a new, empty store. Move it aside to start afresh, or \
                         restore it from a backup"
                    .into(),
            });
        }
        let opener = Opener::file(&path, &config);
        Db::open_via(path, config, opener)
    }

    /// Opens the database at `path` (already checked) with `opener`.
    pub(super) fn open_via(
        path: PathBuf,
        config: EmbeddedConfig,
        opener: Opener,
    ) -> Result<Db, StoreError> {
        let opened = open_checked(&opener, &path).map_err(|e| match e {
            StoreError::Io(cause) => {
                let message = format!("cannot open {}: {cause}", path.display());
                StoreError::Io(Cause::of(message, cause))
            }
            other => other,
        })?;
        let Opened {
            db,
            last_flush_id,
            max_fold_watermark,
            mut pending,
        } = opened;
        // Any flush up to here may be in the documents already.
        pending.set_floor(last_flush_id.max(max_fold_watermark));
        Ok(Db {
            pending: Mutex::new(pending),
            unsure_fold: Mutex::new(Vec::new()),
            fold_lock: Mutex::new(()),
            db: RwLock::new(Some(db)),
            opener,
            path,
            config,
            sync: Mutex::new(SyncState::now()),
            committed_flush_id: AtomicU64::new(last_flush_id),
            applied_flush_id: AtomicU64::new(last_flush_id),
            applied_resumable: AtomicBool::new(true),
            max_fold_watermark: AtomicU64::new(max_fold_watermark),
            last_checkpoint_us: AtomicU64::new(0),
            checkpoint_due_since_us: AtomicU64::new(0),
            replay_marks: Mutex::new(None),
            last_fold_id: AtomicU64::new(0),
            log_packing: AtomicU64::new(1f64.to_bits()),
            durable_flush_id: AtomicU64::new(last_flush_id),
            redo: Mutex::new(Vec::new()),
            io_failure: Mutex::new(None),
            fault: Mutex::new(None),
            set_aside: std::sync::OnceLock::new(),
        })
    }

    /// The open database, read-locked: hold the guard for as long as a
    /// transaction begun on it lives.
    pub(super) fn database(&self) -> Result<MappedRwLockReadGuard<'_, Database>, StoreError> {
        RwLockReadGuard::try_map(self.db.read(), Option::as_ref).map_err(|_| {
            StoreError::Unavailable(
                format!(
                    "{} could not be reopened after an I/O error yet: {}",
                    self.path.display(),
                    self.io_failure
                        .lock()
                        .as_ref()
                        .map_or_else(String::new, ToString::to_string)
                )
                .into(),
            )
        })
    }

    /// The highest flush id known to be on disk: a crash now would lose
    /// nothing at or below it. The write-ahead log drops flushes up to here.
    pub(super) fn durable_flush_id(&self) -> u64 {
        self.durable_flush_id.load(Ordering::Acquire)
    }

    /// Commits `txn`, durably if `force_durable` or if the policy says one is
    /// due (see the module documentation), and records `flush_id`.
    ///
    /// Writers are serialised by redb (one write transaction at a time), and
    /// `txn` is still open here, so no other commit can interleave.
    /// `redo` is the write to do again should the file have to be reopened
    /// before a durable commit covers this one.
    pub(super) fn commit(
        &self,
        mut txn: WriteTransaction,
        flush_id: Option<u64>,
        force_durable: bool,
        redo: Option<Redo>,
    ) -> Result<(), StoreError> {
        let redo_bytes = redo.as_ref().map_or(0, Redo::approx_bytes);
        let durable = force_durable || {
            let st = self.sync.lock();
            st.commits_since_durable.saturating_add(1) >= self.config.durable_every_flushes
                || st.last_durable.elapsed() >= self.config.durable_interval
                || st.redo_bytes.saturating_add(redo_bytes) > self.config.redo_max_bytes
        };
        if !durable {
            txn.set_durability(Durability::None).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        if let Some(id) = flush_id {
            self.committed_flush_id.fetch_max(id, Ordering::AcqRel);
        }
        let mut st = self.sync.lock();
        if durable {
            st.last_durable = Instant::now();
            st.commits_since_durable = 0;
            st.redo_bytes = 0;
            // A durable commit persists every commit before it as well.
            let committed = self.committed_flush_id.load(Ordering::Acquire);
            self.durable_flush_id.fetch_max(committed, Ordering::AcqRel);
            self.redo.lock().clear();
        } else {
            st.commits_since_durable = st.commits_since_durable.saturating_add(1);
            st.redo_bytes = st.redo_bytes.saturating_add(redo_bytes);
            self.redo.lock().extend(redo);
        }
        Ok(())
    }

    /// Latches `r`'s error if it is one the store cannot recover from by
    /// itself: corruption of the file (not of one document's value) or a
    /// failed (panicked) operation. An I/O error (a full disk, a failing
    /// device) is remembered instead: the next operation reopens the file.
    pub(super) fn note<T>(&self, r: &Result<T, StoreError>) {
        let Err(e) = r else { return };
        match e {
            StoreError::Corrupt { doc, .. } if doc.as_str() == FILE_NAME => {}
            StoreError::Io(msg) if msg.contains("task failed") => {}
            StoreError::Io(_) => {
                let mut failure = self.io_failure.lock();
                if failure.is_none() {
                    tracing::error!(error = %e, "embedded store I/O failed: tallyd is unready and refuses ingest until the store file is reopened");
                    metrics::gauge!("tally_store_failed", "store" => "embedded").set(1.0);
                    *failure = Some(e.clone());
                }
                return;
            }
            _ => return,
        }
        let mut fault = self.fault.lock();
        if fault.is_none() {
            tracing::error!(error = %e, "embedded store failed: tallyd is unready and refuses ingest until restarted");
            metrics::gauge!("tally_store_failed", "store" => "embedded").set(1.0);
            *fault = Some(e.clone());
        }
    }

    /// The error that made the store unusable for good, if one did.
    pub(super) fn fault(&self) -> Option<StoreError> {
        self.fault.lock().clone()
    }

    /// Why the store cannot take writes now, if it cannot: a fault, or an
    /// I/O error that no reopen has cured yet.
    pub(super) fn failing(&self) -> Option<StoreError> {
        self.fault().or_else(|| self.io_failure.lock().clone())
    }

    /// Makes the commits since the last durable one durable, if there are
    /// any and they have waited `durable_interval`: with no flush coming to
    /// carry them (the daemon is idle), they would otherwise wait forever.
    pub(super) fn sync_if_due(&self) -> Result<(), StoreError> {
        let due = {
            let st = self.sync.lock();
            st.commits_since_durable > 0
                && st.last_durable.elapsed() >= self.config.durable_interval
        };
        if due {
            self.sync_now()?;
        }
        Ok(())
    }

    /// Makes every commit so far durable now, with an empty durable commit.
    pub(super) fn sync_now(&self) -> Result<(), StoreError> {
        self.sync_on(&*self.database()?)
    }

    pub(super) fn sync_on(&self, db: &Database) -> Result<(), StoreError> {
        self.commit(begin_write(db)?, None, true, None)
    }
}

/// A database just opened: the last flush id on file, and the pending
/// minutes of its flush log.
pub(super) struct Opened {
    pub(super) db: Database,
    pub(super) last_flush_id: u64,
    pub(super) max_fold_watermark: u64,
    pub(super) pending: Pending,
}

/// Opens the database, prepares its tables, moves an older layout's
/// documents (`period_first.rs`), loads its flush log and makes the
/// one-time catalog correction (`baselines.rs`). The storage engine panics on some kinds of damage to the file
/// (a garbage length inside a page) instead of returning an error: that is
/// a corrupt file too, and is refused as one rather than crashing the
/// daemon.
pub(super) fn open_checked(opener: &Opener, path: &Path) -> Result<Opened, StoreError> {
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let db = opener.open()?;
        let (last_flush_id, max_fold_watermark) = prepare_tables(&db, path)?;
        super::period_first::move_documents(&db)?;
        let pending = load_pending(&db)?;
        // After the log is loaded: its minutes count as stored ones do.
        super::baselines::correct_once(&db, &pending, super::baselines::ENTRIES_PER_TXN)?;
        Ok(Opened {
            db,
            last_flush_id,
            max_fold_watermark,
            pending,
        })
    }));
    opened.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(StoreError::Corrupt {
            doc: path.display().to_string(),
            reason: format!(
                "the storage engine failed reading it ({what}). Move the file aside or \
                 restore it from a backup"
            ),
        })
    })
}

/// Creates every table, so that read transactions always find them, and
/// checks the layout version. Returns the last flush id on file and the
/// highest watermark a fold wrote.
fn prepare_tables(db: &Database, path: &Path) -> Result<(u64, u64), StoreError> {
    let txn = begin_write(db)?;
    let ids = {
        txn.open_table(HOUR_DOCS).map_err(db_err)?;
        txn.open_table(DAY_SUMMARY).map_err(db_err)?;
        txn.open_table(DAY_MINUTES).map_err(db_err)?;
        txn.open_table(SERIES_CATALOG).map_err(db_err)?;
        txn.open_table(FLUSH_LOG).map_err(db_err)?;
        txn.open_table(CHECKPOINT_LOG).map_err(db_err)?;
        catalog_index::build_once(&txn)?;
        let mut meta = txn.open_table(META).map_err(db_err)?;
        match meta_value(&meta, META_LAYOUT_VERSION)? {
            None => {
                meta.insert(META_LAYOUT_VERSION, LAYOUT_VERSION)
                    .map_err(db_err)?;
            }
            Some(LAYOUT_VERSION) => {}
            Some(v) if UPGRADABLE_LAYOUTS.contains(&v) => {
                if LEGACY_SLOT_LAYOUTS.contains(&v) {
                    let mut log = txn.open_table(FLUSH_LOG).map_err(db_err)?;
                    super::flush_log::upgrade_legacy(&mut log)?;
                }
                meta.insert(META_LAYOUT_VERSION, LAYOUT_VERSION)
                    .map_err(db_err)?;
            }
            Some(v) => {
                return Err(StoreError::Corrupt {
                    doc: path.display().to_string(),
                    reason: format!(
                        "layout version {v}; this version of Tally reads {LAYOUT_VERSION}"
                    ),
                })
            }
        }
        let last = meta_value(&meta, META_LAST_FLUSH_ID)?.unwrap_or(0);
        // Files of layout 3 do not say: every fold there wrote a flush that
        // was committed, at or below `last_flush_id`.
        let folded = meta_value(&meta, META_MAX_FOLD_WATERMARK)?.unwrap_or(last);
        (last, folded)
    };
    txn.commit().map_err(db_err)?;
    Ok(ids)
}

/// One entry of the `meta` table, from a read or a write transaction.
pub(super) fn meta_value(
    meta: &impl ReadableTable<&'static str, u64>,
    key: &str,
) -> Result<Option<u64>, StoreError> {
    Ok(meta.get(key).map_err(db_err)?.map(|g| g.value()))
}
