//! The store's upkeep beside the flushes: a task of its own that calls
//! [`Store::upkeep`](crate::store::Store::upkeep) after each applied flush
//! and every second, so seals, takeovers and first-sighting inserts never
//! hold a flush up, and a slow or failing one only delays itself.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Pipeline;

/// How often the upkeep runs when no flush wakes it.
const UPKEEP_TICK: Duration = Duration::from_secs(1);

/// The longest wait after a failed upkeep call.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Pipeline {
    /// Runs the store's upkeep until `stop` is cancelled.
    pub(super) async fn upkeep_loop(&self, stop: CancellationToken) {
        let mut backoff = UPKEEP_TICK;
        loop {
            let wait = tokio::time::sleep(backoff);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.upkeep_kick.notified() => {}
                _ = wait => {}
            }
            let step = self.store.upkeep();
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                r = step => r,
            };
            match result {
                Ok(Some(durable)) => {
                    self.note_durable(durable);
                    backoff = UPKEEP_TICK;
                }
                Ok(None) => backoff = UPKEEP_TICK,
                Err(e) => {
                    metrics::counter!("tally_store_errors_total", "store" => self.store.name(), "op" => "upkeep", "kind" => e.kind())
                        .increment(1);
                    warn!(error = %e, retry_in = ?backoff, "store upkeep failed; retried later");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
