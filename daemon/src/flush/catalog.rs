//! Recording an applied batch's series in the store's catalog: which
//! entries it made due ([`crate::catalog`] decides), written in parts.

use tracing::warn;

use super::inflight::InflightBatch;
use super::Pipeline;

/// Catalog entries per store write (see `Pipeline::record_catalog`).
pub const CATALOG_WRITE_ENTRIES: usize = 20_000;

impl Pipeline {
    /// Writes the catalog entries an applied batch made due, at most
    /// [`CATALOG_WRITE_ENTRIES`] per store write. A failure only
    /// delays them: they stay due and go with the series' next flush.
    pub(crate) async fn record_catalog(&self, batch: &InflightBatch) {
        let Some(catalog) = &self.catalog else { return };
        // Off the runtime's workers: at a million series, a fleet's first
        // flush (and each `catalog.refresh` after) makes every series due,
        // and finding and sorting them takes most of a second.
        let due = {
            let (catalog, flush) = (catalog.clone(), batch.flush.clone());
            tokio::task::spawn_blocking(move || catalog.due(&flush.series)).await
        };
        let due = match due {
            Ok(due) => due,
            Err(e) => {
                // The drain took the marked series as recorded: they go
                // with the next write, as a refused write's would.
                warn!(error = %e, "finding the catalog entries due failed; retrying with the next flush");
                catalog.requeue(&batch.flush.series);
                return;
            }
        };
        if due.is_empty() {
            return;
        }
        // In parts: a fleet that connects at once makes every series due in
        // one flush, and one write of a million entries held its sorted keys
        // and the storage engine's dirty pages (hundreds of MiB) until it
        // committed. A part that fails leaves the whole batch due; the parts
        // written before it are written again, which the upsert absorbs.
        // The store counts each operation, its latency and its errors.
        let mut written = Ok(());
        for part in due.entries().chunks(CATALOG_WRITE_ENTRIES) {
            written = self.store.catalog_upsert(part).await;
            if written.is_err() {
                break;
            }
        }
        match written {
            Ok(()) => {
                metrics::counter!("tally_catalog_writes_total", "store" => self.store.name())
                    .increment(due.len() as u64);
                catalog.recorded(due);
            }
            Err(e) => {
                warn!(error = %e, series = due.len(), "catalog update failed; retrying with the next flush");
                catalog.failed(due);
            }
        }
    }
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
