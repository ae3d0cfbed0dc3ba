//! Operations endpoints: Prometheus `/metrics` for the daemon's own
//! metrics, `/healthz` (process is alive) and `/readyz` (store reachable,
//! not shutting down). They read the pipeline and the store rather than the
//! query engine, and answer in plain text for scrapers and load balancers,
//! so they keep apart from the JSON API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::flush::Pipeline;

/// What the operations endpoints read.
#[derive(Clone)]
pub(crate) struct OpsState {
    /// Read at scrape time for the gauges of what is pending.
    pub(crate) pipeline: Arc<Pipeline>,
    pub(crate) metrics: Option<PrometheusHandle>,
    /// Set when shutdown begins, so load balancers stop sending traffic.
    pub(crate) draining: tokio_util::sync::CancellationToken,
}

pub(crate) fn router() -> Router<OpsState> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
}

async fn metrics(State(s): State<OpsState>) -> Response {
    crate::telemetry::collect_process_metrics();
    crate::allocator::publish_gauges();
    s.pipeline.publish_gauges();
    match &s.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are disabled\n").into_response(),
    }
}

async fn readyz(State(s): State<OpsState>) -> Response {
    if s.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match s.pipeline.ready().await {
        Ok(()) => "ready\n".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}
