//! Surviving I/O errors: a storage backend that fails on demand stands in
//! for a full disk, so that what redb does after a failed write (refuse
//! everything until reopened, and forget the commits after the last durable
//! one) is exercised without filling a real disk.

use std::fs::OpenOptions;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::*;
use crate::model::{Resolution, SampleKind, SeriesId, Tier};
use crate::store::embedded::db::Db;
use crate::store::embedded::engine::Opener;
use crate::store::embedded::errors::db_err;
use crate::store::embedded::layout::FILE_NAME;
use crate::store::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::store::{CatalogEntry, CatalogQuery, Store, StoreError};

/// A file whose writes fail with ENOSPC while `full` is set.
#[derive(Debug)]
struct FullDisk {
    file: FileBackend,
    full: Arc<AtomicBool>,
}

impl FullDisk {
    fn check(&self) -> io::Result<()> {
        if self.full.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(28));
        }
        Ok(())
    }
}

impl StorageBackend for FullDisk {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read(offset, out)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check()?;
        self.file.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.check()?;
        self.file.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check()?;
        self.file.write(offset, data)
    }
    fn close(&self) -> io::Result<()> {
        self.file.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

/// A store whose commits are never durable by themselves, on a disk that
/// fills when `full` is set.
fn store_on(dir: &tempfile::TempDir, full: &Arc<AtomicBool>, write_through: bool) -> EmbeddedStore {
    let path = dir.path().join(FILE_NAME);
    let full = full.clone();
    let file_path = path.clone();
    let opener = Opener::new(move || {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&file_path)
            .map_err(|e| StoreError::Io(e.to_string().into()))?;
        let backend = FullDisk {
            file: FileBackend::new(file).map_err(db_err)?,
            full: full.clone(),
        };
        redb::Builder::new()
            .create_with_backend(backend)
            .map_err(db_err)
    });
    let config = EmbeddedConfig {
        durable_interval: Duration::from_secs(3600),
        durable_every_flushes: 1000,
        write_through,
        ..EmbeddedConfig::default()
    };
    EmbeddedStore::of(Db::open_via(path, config, opener).unwrap())
}

fn entry(source: &str) -> CatalogEntry {
    CatalogEntry {
        series: SeriesId::new(source, "op_counter").into(),
        kind: SampleKind::Gauge,
        first_seen: ts(2026, 3, 14, 10, 5),
        last_seen: ts(2026, 3, 14, 11, 0),
    }
}

fn all_entries() -> CatalogQuery {
    CatalogQuery::everything(100)
}

#[tokio::test]
async fn a_full_disk_fails_the_store_until_space_returns_and_loses_nothing() {
    full_disk_then_space(true).await;
    full_disk_then_space(false).await;
}

/// A full disk met by a store writing through (a reopen redoes its lost
/// commits) or checkpointing (its flushes since the last checkpoint are in
/// memory, and stay there through the reopen).
async fn full_disk_then_space(write_through: bool) {
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(AtomicBool::new(false));
    let day = ts(2026, 3, 14, 0, 0);
    let hour_q = || query(Tier::Hour, Resolution::Minute, day, day + 86_400);

    // A reference store that never fails, given the same flushes once each.
    let reference_dir = tempfile::tempdir().unwrap();
    let reference = open(&reference_dir);
    for id in 1..=4 {
        reference.apply(&sample_batch(id)).await.unwrap();
    }

    let store = store_on(&dir, &full, write_through);
    store.apply(&sample_batch(1)).await.unwrap();
    store.close().await.unwrap();
    // Committed, but not durable: a reopen alone would lose these.
    store.apply(&sample_batch(2)).await.unwrap();
    store.catalog_upsert(&[entry("db-01")]).await.unwrap();
    store.apply(&sample_batch(3)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 1);

    // redb writes a non-durable commit's pages lazily; the durable commit
    // is the write that certainly meets the full disk.
    full.store(true, Ordering::SeqCst);
    let err = store.close().await.unwrap_err();
    assert!(matches!(err, StoreError::Io(_)), "{err:?}");
    assert!(store.fault().is_some(), "failing while the disk is full");
    assert!(store.health().await.is_err(), "unready");
    // Still full: every operation tries to reopen, and cannot.
    assert!(store.apply(&sample_batch(4)).await.is_err());
    assert!(store.read(&hour_q()).await.is_err());
    assert!(store.fault().is_some());

    full.store(false, Ordering::SeqCst);
    store.health().await.unwrap();
    assert_eq!(store.fault(), None, "resumed once space returned");
    // Writing through, the reopen redid 2 and 3 and made them durable;
    // checkpointing, they wait in memory for the next checkpoint. 4 was
    // never taken.
    assert_eq!(store.durable_flush_id(), if write_through { 3 } else { 1 });
    store.apply(&sample_batch(4)).await.unwrap();
    assert_eq!(
        read(&store, hour_q()).await,
        read(&reference, hour_q()).await
    );
    let listed = store.catalog_list(&all_entries()).await.unwrap();
    assert_eq!(listed, vec![entry("db-01")]);

    // And the file holds it all after a restart.
    store.close().await.unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(store.last_flush_id().await.unwrap(), 4);
    assert_eq!(
        read(&store, hour_q()).await,
        read(&reference, hour_q()).await
    );
    assert_eq!(
        store.catalog_list(&all_entries()).await.unwrap(),
        vec![entry("db-01")]
    );
}

#[tokio::test]
async fn a_failed_redo_keeps_everything_for_the_next_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let full = Arc::new(AtomicBool::new(false));
    let store = store_on(&dir, &full, true);
    for id in 1..=3 {
        store.apply(&sample_batch(id)).await.unwrap();
    }
    full.store(true, Ordering::SeqCst);
    assert!(store.close().await.is_err());
    for _ in 0..3 {
        assert!(store.health().await.is_err());
        assert_eq!(store.inner.redo.lock().len(), 3, "all three kept");
    }
    full.store(false, Ordering::SeqCst);
    store.apply(&sample_batch(4)).await.unwrap();
    assert_eq!(store.last_flush_id().await.unwrap(), 4);
    // Flush 1 counted once although it was redone: compare with one apply.
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = open(&fresh_dir);
    for id in 1..=4 {
        fresh.apply(&sample_batch(id)).await.unwrap();
    }
    let day = ts(2026, 3, 14, 0, 0);
    assert_eq!(
        read_day(&store, Tier::Day, Resolution::Minute, day).await,
        read_day(&fresh, Tier::Day, Resolution::Minute, day).await
    );
}
