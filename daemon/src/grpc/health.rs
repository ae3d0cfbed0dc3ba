//! `grpc.health.v1` follows readiness (the store and the write-ahead log):
//! gRPC load balancers route around a daemon that cannot keep what it is
//! sent.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::flush::Pipeline;

/// Mirrors [`Pipeline::ready`] into `health` until `stop` is cancelled.
pub async fn track_health(
    pipeline: Arc<Pipeline>,
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
        let ok = pipeline.ready().await;
        let now_healthy = ok.is_ok();
        if now_healthy != healthy {
            match &ok {
                Ok(()) => info!("ready again"),
                Err(e) => warn!(error = %e, "not ready"),
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
