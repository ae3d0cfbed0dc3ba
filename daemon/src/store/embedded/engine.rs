//! How the storage engine is driven: opening the file (its page cache, and
//! what a full repair reports) and beginning write transactions whose
//! durable commits leave the file quick to open after a crash. Apart from
//! `db.rs` so that every module that writes can begin a transaction
//! without importing the database's bookkeeping.

use std::path::{Path, PathBuf};

use redb::{Database, WriteTransaction};

use super::config::EmbeddedConfig;
use super::errors::db_err;
use crate::store::StoreError;

type OpenFn = dyn Fn() -> Result<Database, StoreError> + Send + Sync;

/// How to open the database: the file, or in tests a file behind a storage
/// backend that fails on demand.
pub(super) struct Opener(Box<OpenFn>);

impl Opener {
    pub(super) fn file(path: &Path, config: &EmbeddedConfig) -> Opener {
        let path = path.to_path_buf();
        let cache = config.cache_size_bytes;
        Opener(Box::new(move || {
            builder(&path, cache).create(&path).map_err(db_err)
        }))
    }

    #[cfg(test)]
    pub(super) fn new(
        f: impl Fn() -> Result<Database, StoreError> + Send + Sync + 'static,
    ) -> Opener {
        Opener(Box::new(f))
    }

    pub(super) fn open(&self) -> Result<Database, StoreError> {
        (self.0)()
    }
}

/// Opens a file that must already exist, for tools that inspect it with
/// tallyd stopped: a missing file is an error rather than a new, empty one.
pub(super) fn open_existing(path: &Path, config: &EmbeddedConfig) -> Result<Database, StoreError> {
    builder(path, config.cache_size_bytes)
        .open(path)
        .map_err(db_err)
}

/// The engine's settings for the file at `path`, however it is opened.
fn builder(path: &Path, cache_size_bytes: usize) -> redb::Builder {
    let mut builder = redb::Builder::new();
    builder
        .set_cache_size(cache_size_bytes)
        .set_repair_callback(repair_progress(path.to_path_buf()));
    builder
}

/// What a full repair of the file reports, in tenths: the storage engine
/// verifies and rebuilds a file whose last durable commit saved no
/// allocator state (one written before every commit was made with
/// [`begin_write`]), a scan of the whole file that can take tens of seconds
/// at a gigabyte, during which the daemon is not ready.
fn repair_progress(path: PathBuf) -> impl Fn(&mut redb::RepairSession) + 'static {
    let logged = std::cell::Cell::new(None::<u32>);
    move |session| {
        let tenths = (session.progress() * 10.0) as u32;
        if logged.get() == Some(tenths) {
            return;
        }
        if logged.get().is_none() {
            metrics::counter!("tally_store_repairs_total", "store" => "embedded").increment(1);
        }
        logged.set(Some(tenths));
        tracing::warn!(
            file = %path.display(),
            progress = format!("{}%", tenths * 10),
            "the store file was not closed cleanly and saved no allocator state: \
             verifying and rebuilding it (a full scan of the file) before starting"
        );
    }
}

/// A write transaction whose durable commit also saves the storage engine's
/// allocator state (redb's quick repair), so that after a crash the file
/// opens at once instead of being scanned whole (see [`repair_progress`]).
/// Its cost is paid only by durable commits (see `db.rs`): the allocator's
/// state (about 265 KB at a 2 GB file, by the fold test with and without
/// it) and a second `fsync`, as the commit is made in two phases.
pub(super) fn begin_write(db: &Database) -> Result<WriteTransaction, StoreError> {
    let mut txn = db.begin_write().map_err(db_err)?;
    txn.set_quick_repair(true);
    Ok(txn)
}
