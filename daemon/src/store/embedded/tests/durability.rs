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

/// A checkpoint the interval makes due is taken at a flush replay may
/// begin at (its marker carries the counters' baselines), so that a replay
/// from it folds no earlier part of the log again; at another flush only
/// once it has waited 10 s for one, or at once with nothing to flush.
#[tokio::test]
async fn checkpoints_are_taken_at_flushes_replay_may_begin_at() {
    const S: u64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), checkpointed(S, 64 << 20)).unwrap();
    let flush = |id: u64, resumable: bool| crate::model::FlushBatch {
        resumable,
        ..sample_batch(id)
    };
    // (flush id in seconds, resumable, the checkpoint's flush id after it)
    let steps = [
        (10, true, 0),
        // Each applies the checkpoint due before it: of the flush before.
        (12, false, 10),
        (14, false, 10),
        (20, true, 10),
        (21, false, 20),
        (25, false, 20),
        (31, false, 20),
        // Due since 25 s: waited long enough.
        (36, false, 31),
    ];
    for (at, resumable, durable) in steps {
        store.apply(&flush(at * S, resumable)).await.unwrap();
        assert_eq!(store.durable_flush_id(), durable * S, "after {at} s");
    }
    // Due again by the clock once the interval has passed: the daemon then
    // has the next flush's marker carry the baselines.
    assert!(!store.inner.checkpoint_due(36 * S + S / 2));
    assert!(store.inner.checkpoint_due(37 * S));
    assert!(store.checkpoint_due());
    // With nothing to flush no such flush comes: taken at once, at the
    // last one.
    store.inner.maintain_idle(37 * S).unwrap();
    assert_eq!(store.durable_flush_id(), 36 * S);
}

/// Before the process has taken a checkpoint (after a restart, what it
/// applied was replayed), an idle store waits for a flush replay may begin
/// at as a flushing one does, up to 10 s.
#[tokio::test]
async fn after_a_restart_an_idle_checkpoint_waits_for_a_flush_to_begin_at() {
    const S: u64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), checkpointed(S, 64 << 20)).unwrap();
    let replayed = crate::model::FlushBatch {
        resumable: false,
        ..sample_batch(10 * S)
    };
    store.apply(&replayed).await.unwrap();
    store.inner.maintain_idle(11 * S).unwrap();
    assert_eq!(store.durable_flush_id(), 0);
    store.inner.maintain_idle(21 * S).unwrap();
    assert_eq!(store.durable_flush_id(), 10 * S);
}
