//! The shutdown gate every receiver passes before it folds samples.

/// Closes ingest for good at shutdown. Every ingest holds the read side
/// while it folds samples, and `close` takes the write side, so once `close`
/// returns no request is mid-ingest and none will start: every acknowledged
/// sample is in the aggregator before the final flush drains it, even if a
/// client keeps its connection open past the listener's grace period. (A
/// cancellation token would not do: a request could see it open, then
/// fold after the final drain.)
#[derive(Default)]
pub struct IngestGate {
    closed: parking_lot::RwLock<bool>,
}

impl IngestGate {
    pub fn close(&self) {
        *self.closed.write() = true;
    }

    /// Holds off `close` for as long as the returned guard lives; None once
    /// the gate is closed.
    pub(crate) fn enter(&self) -> Option<parking_lot::RwLockReadGuard<'_, bool>> {
        let closed = self.closed.read();
        (!*closed).then_some(closed)
    }
}
