//! `grpc.health.v1` follows the store: gRPC load balancers route around a
//! daemon whose store is down.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::store::Store;

/// Mirrors the store's health into `health` until `stop` is cancelled.
pub async fn track_store_health(
    store: Arc<dyn Store>,
    health: tonic_health::server::HealthReporter,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
    let mut healthy = true;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let ok = store.health().await;
        let now_healthy = ok.is_ok();
        if now_healthy != healthy {
            match &ok {
                Ok(()) => info!(store = store.name(), "store healthy again"),
                Err(e) => warn!(store = store.name(), error = %e, "store unhealthy"),
            }
            let status = if now_healthy {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            health.set_service_status("", status).await;
            healthy = now_healthy;
        }
    }
}
