//! Restarts, exclusive opening, and when commits become durable.

use std::time::Duration;

use super::*;
use crate::model::{Resolution, Tier};
use crate::store::embedded::layout::FILE_NAME;
use crate::store::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::store::{Store, StoreError};

#[tokio::test]
async fn survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let day = ts(2026, 3, 14, 0, 0);
    let before = {
        let store = open(&dir);
        store.apply(&sample_batch(5)).await.unwrap();
        // Not durable yet: in memory until a checkpoint...
        assert_eq!(store.durable_flush_id(), 0);
        store.close().await.unwrap();
        // ... and durable after close.
        assert_eq!(store.durable_flush_id(), 5);
        read_day(&store, Tier::Day, Resolution::Minute, day).await
    };
    let store = open(&dir);
    assert_eq!(store.path(), dir.path().join(FILE_NAME));
    store.health().await.unwrap();
    assert_eq!(store.last_flush_id().await.unwrap(), 5);
    assert_eq!(store.durable_flush_id(), 5);
    assert_eq!(
        read_day(&store, Tier::Day, Resolution::Minute, day).await,
        before
    );
    // The replayed flush is still recognised after the restart.
    let stats = store.apply(&sample_batch(5)).await.unwrap();
    assert_eq!(stats.documents_written, 0);
}

#[tokio::test]
async fn second_open_of_the_same_dir_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let _store = open(&dir);
    let err = EmbeddedStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn durable_policy_every_k_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(
        dir.path(),
        EmbeddedConfig {
            durable_interval: Duration::from_secs(3600),
            durable_every_flushes: 3,
            write_through: true,
            ..EmbeddedConfig::default()
        },
    )
    .unwrap();
    store.apply(&sample_batch(1)).await.unwrap();
    store.apply(&sample_batch(2)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 0);
    store.apply(&sample_batch(3)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 3);
    store.apply(&sample_batch(4)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 3);
    store.sync().unwrap();
    assert_eq!(store.durable_flush_id(), 4);
}

/// The writes kept for a reopen stay under `redo_max_bytes`: a commit that
/// would keep more is made durable, which lets them go.
#[tokio::test]
async fn durable_policy_bounds_the_memory_kept_for_a_reopen() {
    let one = crate::store::embedded::db::Redo::Apply(std::sync::Arc::new(sample_batch(1)))
        .approx_bytes();
    assert!(one > 0);
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(
        dir.path(),
        EmbeddedConfig {
            durable_interval: Duration::from_secs(3600),
            durable_every_flushes: 100,
            redo_max_bytes: one * 3 / 2,
            write_through: true,
            ..EmbeddedConfig::default()
        },
    )
    .unwrap();
    store.apply(&sample_batch(1)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 0, "one batch fits");
    store.apply(&sample_batch(2)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 2, "two would not");
    assert!(store.inner.redo.lock().is_empty());
    store.apply(&sample_batch(3)).await.unwrap();
    assert_eq!(store.durable_flush_id(), 2);
    assert_eq!(store.inner.redo.lock().len(), 1);
}
