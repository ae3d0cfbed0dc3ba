//! The gate every receiver passes before it folds samples: closed for good
//! at shutdown, and held exclusively for a moment by each flush cut when
//! the write-ahead log is on.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Every ingest holds the shared side from before it appends to the
/// write-ahead log until it has folded its samples.
///
/// - `close` takes the exclusive side, so once it returns no request is
///   mid-ingest and none will start: every acknowledged sample is in the
///   aggregator before the final flush drains it, even if a client keeps
///   its connection open past the listener's grace period. (A cancellation
///   token would not do: a request could see it open, then fold after the
///   final drain.)
/// - A flush cut takes the exclusive side while it drains and logs its
///   marker, so in the log every request lies on the correct side of the
///   marker of the flush its samples went into.
#[derive(Default)]
pub struct IngestGate {
    closed: RwLock<bool>,
}

impl IngestGate {
    pub async fn close(&self) {
        *self.closed.write().await = true;
    }

    /// Holds off `close` and flush cuts for as long as the returned guard
    /// lives; None once the gate is closed.
    pub(crate) async fn enter(&self) -> Option<RwLockReadGuard<'_, bool>> {
        let closed = self.closed.read().await;
        (!*closed).then_some(closed)
    }

    /// Waits until no request is between its log append and its fold, and
    /// holds off new ones while the guard lives.
    pub(crate) async fn barrier(&self) -> RwLockWriteGuard<'_, bool> {
        self.closed.write().await
    }
}
