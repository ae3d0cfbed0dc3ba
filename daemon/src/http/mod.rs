//! The HTTP listener: the native JSON API under `/api/v1/` (`api`), the
//! Prometheus-compatible read API under `/prometheus` (`prometheus`), and
//! the operations endpoints `/metrics`, `/healthz` and `/readyz` (`ops`).
//!
//! Each of the three has a state of its own holding only what it reads;
//! this module builds them from [`HttpState`] and mounts the three routers,
//! so none of them depends on the others or on this one.

mod api;
mod ops;
pub(crate) mod prometheus;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::flush::Pipeline;
use crate::query::QueryEngine;
use crate::store::Store;
use crate::watch::WatchHub;

use api::ApiState;
use ops::OpsState;
use prometheus::PromState;

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
}

pub(crate) fn router(state: HttpState) -> Router {
    let ops = ops::router().with_state(OpsState {
        pipeline: state.pipeline,
        store: state.store,
        metrics: state.metrics,
        draining: state.draining,
    });
    let api = api::router().with_state(ApiState {
        query: state.query.clone(),
        watch: state.watch,
    });
    let prometheus = prometheus::router().with_state(PromState::new(state.query));
    ops.nest("/api/v1", api).nest("/prometheus", prometheus)
}

/// Serves HTTP on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
