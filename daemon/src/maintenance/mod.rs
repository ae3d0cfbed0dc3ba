//! Background upkeep that is neither ingest nor flush: pre-allocating the
//! next period's documents ahead of the boundary, expiring documents past
//! their retention where the store has no TTL of its own, and forgetting
//! idle series (and the groups their sources declared) so the aggregator's
//! tables stay bounded.

mod config;

pub use config::PreallocConfig;
mod retry;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::aggregator::{Aggregator, PreallocWindow};
use crate::catalog::CatalogWriter;
use crate::model::{DocKey, Tier};
use crate::rollup::Rollups;
use crate::store::{RetentionConfig, Store};

use self::retry::Retries;

/// What the upkeep loops work on.
pub struct Maintenance {
    pub agg: Arc<Aggregator>,
    pub store: Arc<dyn Store>,
    pub catalog: Option<Arc<CatalogWriter>>,
    pub rollups: Arc<Rollups>,
    pub prealloc: PreallocConfig,
    pub retention: RetentionConfig,
    /// `ingest.series_idle_timeout`: how long the group declarations of a
    /// source that stopped pushing are kept (the aggregator applies the
    /// rest of `[ingest]` to its own series).
    pub series_idle_timeout: Duration,
}

/// How often the pre-allocation scheduler looks for due documents.
const PREALLOC_TICK: Duration = Duration::from_secs(1);
/// How often retention and idle eviction run; both are cheap but not free.
const SWEEP_TICK: Duration = Duration::from_secs(60);

impl Maintenance {
    /// Runs until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        let mut retries = Retries::default();
        let mut prealloc_tick = tokio::time::interval(PREALLOC_TICK);
        let mut sweep_tick = tokio::time::interval(SWEEP_TICK);
        prealloc_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        sweep_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = prealloc_tick.tick(), if self.prealloc.enabled => {
                    let now = chrono::Utc::now().timestamp();
                    preallocate(&self.agg, &self.rollups, &*self.store, &self.prealloc, &mut retries, now).await
                }
                _ = sweep_tick.tick() => self.sweep().await,
            }
        }
    }

    async fn sweep(&self) {
        let now = chrono::Utc::now().timestamp();
        let idle_before = now - self.series_idle_timeout.as_secs() as i64;
        let evicted = self.agg.evict_idle(now * 1000);
        if let Some(c) = &self.catalog {
            c.forget_idle(idle_before);
        }
        self.rollups.forget_idle(idle_before);
        metrics::counter!("tally_evicted_series_total").increment(evicted as u64);
        expire(&*self.store, now, &self.retention).await;
    }
}

/// One tick of pre-allocation at wall clock `now` (Unix seconds): first
/// the failed documents whose backoff is over, then newly due ones, at most
/// `prealloc.max_per_second` in all. It runs beside the flushes, which
/// never wait for it.
async fn preallocate(
    agg: &Aggregator,
    rollups: &Rollups,
    store: &dyn Store,
    cfg: &PreallocConfig,
    retries: &mut Retries,
    now: i64,
) {
    // A window of zero never opens: the tier is not asked for at all.
    let window = |tier: Tier, w: std::time::Duration| {
        if store.preallocates(tier) {
            w.as_secs() as i64
        } else {
            0
        }
    };
    let (hour_window, day_window) = (
        window(Tier::Hour, cfg.hour_window),
        window(Tier::Day, cfg.day_window),
    );
    let limit = cfg.max_per_second as usize;
    let clock = Instant::now();
    let mut due = retries.due(clock, now, limit);
    let retried = due.len();
    due.extend(agg.due_preallocations(now, hour_window, day_window, limit - retried));
    if let Some(window) = PreallocWindow::at(now, hour_window, day_window) {
        due.extend(rollups.due_preallocations(&window, limit.saturating_sub(due.len())));
    }
    if !due.is_empty() {
        try_preallocate(store, due, retries, clock, retried).await;
    }
    let (hours, days) = retries.waiting();
    metrics::gauge!("tally_prealloc_retry_documents", "tier" => "hour").set(hours as f64);
    metrics::gauge!("tally_prealloc_retry_documents", "tier" => "day").set(days as f64);
}

async fn try_preallocate(
    store: &dyn Store,
    due: Vec<DocKey>,
    retries: &mut Retries,
    clock: Instant,
    retried: usize,
) {
    let hours = due.iter().filter(|d| d.tier == Tier::Hour).count() as u64;
    let started = std::time::Instant::now();
    let result = store.preallocate(&due).await;
    crate::telemetry::store_operation(store.name(), "preallocate", started.elapsed().as_secs_f64());
    match result {
        Ok(stats) => {
            retries.succeeded();
            metrics::counter!("tally_preallocated_documents_total", "tier" => "hour")
                .increment(hours.min(stats.created as u64));
            metrics::counter!("tally_preallocated_documents_total", "tier" => "day")
                .increment((stats.created as u64).saturating_sub(hours));
            debug!(
                created = stats.created,
                present = stats.already_present,
                retried,
                "pre-allocated"
            );
        }
        // The upsert in `apply` is the fallback, so a missed pre-allocation
        // costs a slower first write, not data; until the period begins it
        // is tried again.
        Err(e) => {
            metrics::counter!("tally_store_errors_total", "store" => store.name(), "op" => "preallocate", "kind" => e.kind())
                .increment(1);
            warn!(error = %e, documents = due.len(), retried, "pre-allocation failed; retrying with backoff until the period begins");
            if e.is_retryable() {
                retries.failed(clock, due);
            }
        }
    }
}

async fn expire(store: &dyn Store, now: i64, retention: &RetentionConfig) {
    let (hour_s, day_s) = retention.seconds();
    match store.expire(now, hour_s, day_s).await {
        Ok(0) => {}
        Ok(n) => {
            metrics::counter!("tally_expired_documents_total").increment(n as u64);
            info!(documents = n, "expired documents past retention");
        }
        Err(e) => {
            metrics::counter!("tally_store_errors_total", "store" => store.name(), "op" => "expire", "kind" => e.kind())
                .increment(1);
            warn!(error = %e, "retention sweep failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::{AggregatorConfig, SeriesBatch};
    use crate::ingest::IngestConfig;
    use crate::model::{Resolution, SampleKind, SeriesId, DAY_S};
    use crate::rollup::RollupConfig;
    use crate::store::embedded::EmbeddedStore;
    use crate::store::ReadQuery;

    /// One second before a midnight, when every series' moment in both
    /// windows has come, the embedded store is asked for nothing: an empty
    /// document it would write twice for nothing.
    #[tokio::test]
    async fn the_embedded_store_is_asked_for_no_documents_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let midnight = 1_780_012_800; // 2026-05-29T00:00:00Z
        assert_eq!(midnight % DAY_S, 0);
        let now = midnight - 1;
        let agg = Aggregator::new(&AggregatorConfig { shards: 2 }, &IngestConfig::default());
        let ts = [now * 1000];
        let out = agg.ingest(
            &[SeriesBatch {
                source: "s",
                metric: "m",
                labels: "",
                kind: Some(SampleKind::Gauge),
                timestamps_ms: &ts,
                values: &[1.0],
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            }],
            now * 1000,
        );
        assert_eq!(out.accepted, 1);
        let rollups = Rollups::new(RollupConfig::default()).unwrap();
        let cfg = PreallocConfig::default();
        let mut retries = Retries::default();
        preallocate(&agg, &rollups, &store, &cfg, &mut retries, now).await;

        let read = |tier, resolution, from| ReadQuery {
            series: SeriesId::new("s", "m"),
            tier,
            resolution,
            from,
            to: from + DAY_S,
        };
        for (tier, resolution) in [
            (Tier::Day, Resolution::Day),
            (Tier::Hour, Resolution::Minute),
        ] {
            let docs = store.read(&read(tier, resolution, midnight)).await.unwrap();
            assert!(docs.is_empty(), "{tier:?}: {docs:?}");
            assert!(!store.preallocates(tier));
        }
        // Due all along, and not asked for: the series' marks are as they
        // were, so its next hour and day are still due.
        let due = agg.due_preallocations(now, 600, 7200, 10);
        assert_eq!(due.len(), 2, "{due:?}");
    }
}
