//! Background upkeep that is neither ingest nor flush: pre-allocating the
//! next period's documents ahead of the boundary, expiring documents past
//! their retention where the store has no TTL of its own, and forgetting
//! idle series (and the groups their sources declared) so the aggregator's
//! tables stay bounded.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::aggregator::Aggregator;
use crate::catalog::CatalogWriter;
use crate::model::{Tier, MINUTE_S};
use crate::rollup::Rollups;
use crate::store::Store;

#[derive(Debug, Clone)]
pub struct MaintenanceConfig {
    pub prealloc_enabled: bool,
    pub prealloc_hour_window_s: i64,
    pub prealloc_day_window_s: i64,
    /// Pre-allocation inserts per second at most, to keep them from
    /// competing with flushes.
    pub prealloc_max_per_second: usize,
    pub hour_retention_s: i64,
    pub day_retention_s: i64,
    pub series_idle_timeout_s: i64,
}

/// How often the pre-allocation scheduler looks for due documents.
const PREALLOC_TICK: Duration = Duration::from_secs(1);
/// How often retention and idle eviction run; both are cheap but not free.
const SWEEP_TICK: Duration = Duration::from_secs(60);

/// Runs until `stop` turns true.
pub async fn run(
    agg: Arc<Aggregator>,
    store: Arc<dyn Store>,
    catalog: Option<Arc<CatalogWriter>>,
    rollups: Arc<Rollups>,
    cfg: MaintenanceConfig,
    mut stop: watch::Receiver<bool>,
) {
    let mut prealloc_tick = tokio::time::interval(PREALLOC_TICK);
    let mut sweep_tick = tokio::time::interval(SWEEP_TICK);
    prealloc_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    sweep_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
            _ = prealloc_tick.tick(), if cfg.prealloc_enabled => preallocate(&agg, &*store, &cfg).await,
            _ = sweep_tick.tick() => sweep(&agg, &*store, catalog.as_deref(), &rollups, &cfg).await,
        }
    }
}

async fn preallocate(agg: &Aggregator, store: &dyn Store, cfg: &MaintenanceConfig) {
    let now = chrono::Utc::now().timestamp();
    let due = agg.due_preallocations(
        now,
        cfg.prealloc_hour_window_s,
        cfg.prealloc_day_window_s,
        cfg.prealloc_max_per_second,
    );
    if due.is_empty() {
        return;
    }
    let hours = due.iter().filter(|d| d.tier == Tier::Hour).count() as u64;
    let started = std::time::Instant::now();
    let result = store.preallocate(&due).await;
    crate::telemetry::store_operation(store.name(), "preallocate", started.elapsed().as_secs_f64());
    match result {
        Ok(stats) => {
            metrics::counter!("tally_preallocated_documents_total", "tier" => "hour")
                .increment(hours.min(stats.created as u64));
            metrics::counter!("tally_preallocated_documents_total", "tier" => "day")
                .increment((stats.created as u64).saturating_sub(hours));
            debug!(
                created = stats.created,
                present = stats.already_present,
                "pre-allocated"
            );
        }
        // The upsert in `apply` is the fallback, so a missed pre-allocation
        // costs a slower first write, not data.
        Err(e) => {
            metrics::counter!("tally_store_errors_total", "store" => store.name(), "op" => "preallocate", "kind" => e.kind())
                .increment(1);
            warn!(error = %e, documents = due.len(), "pre-allocation failed");
        }
    }
}

async fn sweep(
    agg: &Aggregator,
    store: &dyn Store,
    catalog: Option<&CatalogWriter>,
    rollups: &Rollups,
    cfg: &MaintenanceConfig,
) {
    let now = chrono::Utc::now().timestamp();
    let idle_before = now - cfg.series_idle_timeout_s;
    let evicted = agg.evict_idle(idle_before.div_euclid(MINUTE_S));
    if let Some(c) = catalog {
        c.forget_idle(idle_before);
    }
    rollups.forget_idle(idle_before);
    metrics::counter!("tally_evicted_series_total").increment(evicted as u64);
    match store
        .expire(now, cfg.hour_retention_s, cfg.day_retention_s)
        .await
    {
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
