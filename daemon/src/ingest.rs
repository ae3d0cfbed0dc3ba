//! Protocol-neutral ingest admission: the request-level limits and the
//! shutdown gate every receiver applies before it hands samples to the
//! aggregator. It sits apart from the gRPC service so that other receivers
//! (OTLP, Prometheus remote-write) share one set of rules.

#[derive(Debug, Clone)]
pub struct IngestLimits {
    /// Samples per request (a stream message counts as a request).
    pub max_batch_samples: usize,
}

/// Closes ingest for good at shutdown. Every ingest holds the read side
/// while it folds samples, and `close` takes the write side, so once `close`
/// returns no request is mid-ingest and none will start: every acknowledged
/// sample is in the aggregator before the final flush drains it, even if a
/// client keeps its connection open past the listener's grace period.
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
