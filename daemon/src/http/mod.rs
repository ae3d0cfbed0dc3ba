//! The HTTP listener: the native JSON API under `/api/v1/` (`api`), the
//! Prometheus-compatible read API under `/prometheus` (`prometheus`), the
//! operations endpoints `/metrics`, `/healthz` and `/readyz` (`ops`), and
//! the ingest endpoints OTLP/HTTP `/v1/metrics` and remote-write
//! `/api/v1/write` (`push`).
//!
//! Each of the four has a state of its own holding only what it uses;
//! this module builds them from [`HttpState`] and mounts the routers, so
//! none of them depends on the others or on this one. Reads and ingest
//! differ in the token role they need and in how large a body they take.

mod api;
mod config;
mod ops;
pub(crate) mod prometheus;
mod push;
mod server;

use std::sync::Arc;

use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, Need};
use crate::tls::SecureListener;

use crate::flush::Pipeline;
use crate::query::QueryEngine;
use crate::store::Store;
use crate::watch::WatchHub;

use api::ApiState;
use ops::OpsState;
use prometheus::PromState;

pub use config::HttpConfig;
pub use push::PushState;

#[derive(Clone)]
pub struct HttpState {
    pub query: Arc<QueryEngine>,
    /// Read at scrape time for the gauges of what is pending.
    pub pipeline: Arc<Pipeline>,
    pub watch: Arc<WatchHub>,
    pub store: Arc<dyn Store>,
    pub metrics: Option<PrometheusHandle>,
    /// Set when shutdown begins, so load balancers stop sending traffic.
    pub draining: tokio_util::sync::CancellationToken,
    /// Decides which requests may be served (everything when off).
    pub auth: Authenticator,
    /// The ingest endpoints' admission and mappings.
    pub push: PushState,
    /// How the Prometheus API shows series.
    pub prometheus: crate::promql::PrometheusConfig,
}

pub(crate) fn router(state: HttpState, cfg: &HttpConfig) -> Router {
    let ops = ops::router().with_state(OpsState {
        pipeline: state.pipeline,
        metrics: state.metrics,
        draining: state.draining,
    });
    let api = api::router().with_state(ApiState {
        query: state.query.clone(),
        watch: state.watch,
    });
    let prometheus =
        prometheus::router().with_state(PromState::new(state.query, &state.prometheus));
    let reads = ops.nest("/api/v1", api).nest("/prometheus", prometheus);
    let reads = server::limit_body(reads, cfg.max_body_bytes, "http.max_body_bytes").layer(
        axum::middleware::from_fn_with_state(
            (state.auth.clone(), Need::Read),
            crate::auth::require_token,
        ),
    );
    let max_message = state.push.ingest.limits().max_message_bytes;
    let push = push::router().with_state(state.push);
    let push = server::limit_body(push, max_message, "ingest.max_message_bytes").layer(
        axum::middleware::from_fn_with_state(
            (state.auth, Need::Ingest),
            crate::auth::require_token,
        ),
    );
    reads.merge(push)
}

/// Serves HTTP on `listener`, within the `[http]` limits, until `shutdown`
/// is cancelled; then open connections finish their requests.
pub async fn serve(
    listener: SecureListener,
    state: HttpState,
    cfg: HttpConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let router = router(state, &cfg);
    server::serve(listener, router, cfg, shutdown).await
}
