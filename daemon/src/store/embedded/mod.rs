//! The embedded store: the default, zero-setup store. Hour and day documents
//! live in one [redb](https://docs.rs/redb) file, `tally.redb` in
//! `--data-dir`, and survive restarts.
//!
//! This file is the [`Store`] face of it: opening, and handing each
//! operation to a blocking thread. The rest is split by what a reader comes
//! looking for:
//!
//! | file           | holds                                                        |
//! |----------------|--------------------------------------------------------------|
//! | `config.rs`    | [`EmbeddedConfig`], the `[embedded]` settings                |
//! | `layout.rs`    | tables, keys, value sizes: how documents map onto redb       |
//! | `period_first.rs` | moving an older file's documents to today's keys          |
//! | `codec.rs`     | slots, headers and catalog values to and from bytes          |
//! | `db.rs`        | opening the file, commits and their durability               |
//! | `engine.rs`    | redb itself: opening the file, repairs, write transactions   |
//! | `errors.rs`    | redb's errors as the store's                                 |
//! | `reopen.rs`    | reopening the file after an I/O error, redoing lost commits  |
//! | `fold.rs`      | `apply` (flushes), write-through or checkpointed; folds      |
//! | `checkpoint.rs`| the checkpointed write path: memory, checkpoints, folds      |
//! | `pending.rs`   | flushed minutes not yet folded into documents                |
//! | `pending/order.rs` | the order a close folds its series in                   |
//! | `split.rs`     | folding a run in two at the hour, and why that is sound      |
//! | `view.rs`      | what a read adds to the documents from the pending minutes   |
//! | `flush_log.rs` | the same minutes in the file, as checkpoints found them      |
//! | `write.rs`     | merging into documents, and `preallocate`                    |
//! | `read.rs`      | range reads of documents, `last_flush_id`, `health`          |
//! | `catalog.rs`   | catalog upserts and listings                                 |
//! | `catalog_index.rs` | the catalog by metric, for listings of one metric        |
//! | `baselines.rs` | the one-time move of counters' `first_seen` off baselines    |
//! | `retention.rs` | the sweep that deletes expired documents and catalog entries |
//! | `usage.rs`     | where the file's bytes go, table by table (`store-usage`)    |
//!
//! Unit tests sit in `tests/`: `tests/mod.rs` holds the fixtures, the
//! other files one concern each.

mod baselines;
mod catalog;
mod catalog_index;
mod checkpoint;
mod codec;
mod config;
mod db;
mod engine;
mod errors;
mod flush_log;
mod fold;
mod layout;
mod packed;
mod pending;
mod period_first;
mod read;
mod reopen;
mod retention;
mod split;
mod usage;
mod view;
mod write;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub use self::config::EmbeddedConfig;
use self::db::Db;
use self::retention::{Retention, Swept};
pub use self::usage::{file_usage, FileUsage, TableUsage};
use super::{
    observe, ApplyStats, CatalogEntry, CatalogQuery, DocRead, PreallocStats, ReadQuery, SetAside,
    Store, StoreError,
};
use crate::model::{DocKey, FlushBatch};

/// The embedded store. Cheap to clone; clones share the database.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Db>,
    /// Reads running at once. Each runs on a blocking thread; without a
    /// bound, a burst of dashboard reads starts one thread per read (64 at
    /// once were seen), and each thread's allocator heap and stack stay
    /// resident: about 300 MiB more at a million series. Reads beyond it
    /// wait their turn; applies and folds never wait for reads.
    reads: Arc<tokio::sync::Semaphore>,
    /// What the retention sweep last found expired (see `retention.rs`).
    swept: Arc<Swept>,
}

/// Reads at once per CPU: the work is mostly the storage engine's cached
/// pages, so more threads than this would not read faster.
const READS_PER_CPU: usize = 4;

/// Blocking threads the runtime needs for the embedded store: its reads,
/// and a few more for applies, folds, syncs and the rest. Capping the pool
/// there matters as much as the read bound: a read that ends wakes the next
/// one before its thread is idle again, so an uncapped pool starts a new
/// thread almost every time and ends up with one per read (72 were seen).
pub fn blocking_threads() -> usize {
    READS_PER_CPU * cpus() + 8
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens (creating if needed) `dir` and `dir/tally.redb` with the default
    /// [`EmbeddedConfig`].
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        Self::open_with(dir, EmbeddedConfig::default())
    }

    /// Opens (creating if needed) `dir` and `dir/tally.redb`.
    pub fn open_with(dir: &Path, config: EmbeddedConfig) -> Result<EmbeddedStore, StoreError> {
        Ok(EmbeddedStore::of(Db::open(dir, config)?))
    }

    fn of(db: Db) -> EmbeddedStore {
        EmbeddedStore {
            inner: Arc::new(db),
            reads: Arc::new(tokio::sync::Semaphore::new(READS_PER_CPU * cpus())),
            swept: Arc::default(),
        }
    }

    /// Keeps the pending minutes of a series whose document a fold finds
    /// damaged through `hook` instead of dropping them (see `fold.rs`). Set
    /// once, before the first flush; a second call changes nothing.
    pub fn set_aside_to(&self, hook: Arc<dyn SetAside>) {
        let _ = self.inner.set_aside.set(hook);
    }

    /// Deletes expired documents; see [`retention`]. Returns how many
    /// documents were deleted. Blocking: call it from a blocking context.
    /// The daemon's sweep goes through [`Store::expire`], which looks only
    /// when something may have expired.
    #[cfg(test)]
    fn sweep_expired(&self, now_s: i64, retention: Retention) -> Result<usize, StoreError> {
        self.inner.sweep_expired(now_s, retention)
    }

    /// [`EmbeddedStore::blocking`] for a read, within the read bound.
    async fn blocking_read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Db) -> Result<T, StoreError> + Send + 'static,
    {
        // The semaphore is never closed.
        let _permit = self.reads.acquire().await;
        self.blocking(f).await
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Db) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        let r = tokio::task::spawn_blocking(move || {
            inner.reopen_if_needed()?;
            f(&inner)
        })
        .await
        .map_err(|e| panicked("embedded store", &e))
        .and_then(|r| r);
        self.inner.note(&r);
        r
    }
}

/// A store operation that panicked. `Db::note` latches it ("task failed"):
/// the storage engine panics on some kinds of damage to the file.
fn panicked(what: &str, e: &tokio::task::JoinError) -> StoreError {
    StoreError::Io(
        format!(
            "{what} task failed: {e}. A panic inside the storage engine usually means a damaged \
         store file: stop tallyd, move {} aside or restore it from a backup",
            layout::FILE_NAME
        )
        .into(),
    )
}

#[async_trait::async_trait]
impl Store for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        self.apply_shared(&Arc::new(batch.clone())).await
    }

    async fn apply_shared(&self, batch: &Arc<FlushBatch>) -> Result<ApplyStats, StoreError> {
        // spawn_blocking needs an owned batch; shared, because the store
        // keeps it until a durable commit covers it (see `reopen.rs`).
        let batch = batch.clone();
        self.blocking(move |inner| inner.apply(&batch)).await
    }

    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let docs = docs.to_vec();
        self.blocking(move |inner| inner.preallocate(&docs)).await
    }

    /// Never. Values are fixed-size, so nothing ever grows, and an absent
    /// hour document, day summary or minute block reads as an empty one: a
    /// document inserted empty ahead of its fold would only be written
    /// twice, each time as the whole page it lands in. At 100,000 series
    /// the empty hours were about 1 GB written per hour, 10 KB per
    /// 2,944-byte document, for nothing a reader can see.
    fn preallocates(&self, _tier: crate::model::Tier) -> bool {
        false
    }

    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        let query = query.clone();
        self.blocking_read(move |inner| inner.read(&query)).await
    }

    async fn last_flush_id(&self) -> Result<u64, StoreError> {
        self.blocking(|inner| inner.last_flush_id()).await
    }

    async fn highest_flush_held(&self) -> Result<u64, StoreError> {
        // Folds after the last checkpoint wrote flushes above it into
        // documents.
        Ok(self.inner.replay_bound())
    }

    fn durable_through(&self, _applied: u64) -> u64 {
        self.inner.durable_flush_id()
    }

    fn checkpoint_due(&self) -> bool {
        self.inner.checkpoint_due(now_us())
    }

    async fn sync_idle(&self) -> Result<Option<u64>, StoreError> {
        self.blocking(|inner| {
            // A failed fold must not keep the last commits from becoming
            // durable.
            let folded = inner.maintain_idle(now_us());
            inner.sync_if_due()?;
            folded?;
            Ok(Some(inner.durable_flush_id()))
        })
        .await
    }

    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        let entries: Arc<[CatalogEntry]> = entries.into();
        let started = Instant::now();
        let r = self
            .blocking(move |inner| inner.catalog_upsert(&entries))
            .await;
        observe(self.name(), "catalog_upsert", started, &r);
        r
    }

    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let query = query.clone();
        let started = Instant::now();
        let r = self
            .blocking_read(move |inner| inner.catalog_list(&query))
            .await;
        observe(self.name(), "catalog_list", started, &r);
        r
    }

    async fn health(&self) -> Result<(), StoreError> {
        if let Some(fault) = self.inner.fault() {
            return Err(fault);
        }
        // Also the probe that reopens the file after an I/O error once the
        // cause (a full disk) is gone.
        self.blocking(|inner| inner.health()).await
    }

    fn fault(&self) -> Option<String> {
        self.inner.failing().map(|e| e.to_string())
    }

    /// The embedded equivalent of MongoDB's TTL index: documents go once
    /// their period started more than the tier's retention ago.
    async fn expire(
        &self,
        now_s: i64,
        hour_retention_s: i64,
        day_retention_s: i64,
    ) -> Result<usize, StoreError> {
        let store = self.clone();
        let r = tokio::task::spawn_blocking(move || {
            store.inner.reopen_if_needed()?;
            store.swept.sweep_if_due(
                &store.inner,
                now_s,
                Retention {
                    hour_s: hour_retention_s,
                    day_s: day_retention_s,
                },
            )
        })
        .await
        .map_err(|e| panicked("retention sweep", &e))
        .and_then(|r| r);
        self.inner.note(&r);
        r
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.blocking(|inner| {
            inner.checkpoint_now()?;
            inner.sync_now()
        })
        .await
    }
}

/// The clock in microseconds, as flush ids count it.
fn now_us() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX)
}
