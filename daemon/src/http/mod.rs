//! The HTTP listener: the native JSON API under `/api/v1/` (`api`, the
//! dashboard's fleet page in `fleet` and its source page's small charts in
//! `charts`), the Prometheus-compatible read API under `/prometheus`
//! (`prometheus`), the operations endpoints `/metrics`, `/healthz` and
//! `/readyz` (`ops`), the ingest endpoints OTLP/HTTP `/v1/metrics`,
//! remote-write `/api/v1/write` and InfluxDB's `/write` and `/api/v2/write`
//! (`push`), and the built-in dashboard's files at `/` and `/ui/` (`ui`).
//!
//! Each of them has a state of its own holding only what it uses;
//! this module builds them from [`HttpState`] and mounts the routers, so
//! none of them depends on the others or on this one. Reads and ingest
//! differ in the token role they need and in how large a body they take.

mod api;
mod charts;
mod config;
mod fleet;
mod ops;
pub(crate) mod prometheus;
mod push;
mod server;
mod ui;

use std::sync::Arc;

use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, Need};
use crate::listen::Listener;

use crate::fleet::Fleet;
use crate::flush::Pipeline;
use crate::query::QueryEngine;
use crate::store::Store;
use crate::watch::WatchHub;

use api::ApiState;
use ops::OpsState;
use prometheus::PromState;

pub use config::{HttpConfig, RESERVE_HEADER_TIMEOUT};
pub use push::{PushShared, PushState};
pub use ui::{UiConfig, CONTENT_SECURITY_POLICY};

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
    /// Every source, for the dashboard's fleet view.
    pub fleet: Arc<Fleet>,
    pub ui: UiConfig,
    /// How the Prometheus API shows series.
    pub prometheus: crate::promql::PrometheusConfig,
}

pub(crate) fn router(state: HttpState, cfg: &HttpConfig) -> Router {
    let ops = ops::router().with_state(OpsState {
        pipeline: state.pipeline,
        metrics: state.metrics,
        draining: state.draining,
    });
    let fleet = fleet::router().with_state(fleet::FleetState {
        fleet: state.fleet,
        stale_after: state.ui.stale_after,
        patterns: state.query.limits().pattern_limits(),
    });
    let api = api::router()
        .merge(charts::router())
        .with_state(ApiState {
            query: state.query.clone(),
            watch: state.watch,
        })
        .merge(fleet);
    let prometheus =
        prometheus::router().with_state(PromState::new(state.query, &state.prometheus));
    let reads = ops.nest("/api/v1", api).nest("/prometheus", prometheus);
    let reads = server::limit_body(
        reads,
        server::BodyLimits {
            max: cfg.max_body_bytes,
            setting: "http.max_body_bytes",
            timeout: cfg.body_read_timeout,
            refusal: server::json_refusal,
        },
    )
    .layer(axum::middleware::from_fn_with_state(
        (state.auth.clone(), Need::Read),
        crate::auth::require_token,
    ))
    // Reads are evaluated on the shared runtime, off the connection
    // threads that serve ingest (see `crate::listen::ConnThreads`).
    .layer(axum::middleware::from_fn(on_shared));
    // The outer layer runs first: InfluxDB clients' credentials are put in
    // the form the token check reads.
    let push = push::router(state.push, cfg.body_read_timeout)
        .layer(axum::middleware::from_fn_with_state(
            (state.auth, Need::Ingest),
            crate::auth::require_token,
        ))
        .layer(axum::middleware::from_fn(push::influx_credentials))
        // Large bodies are read and ingested on the shared runtime.
        .layer(axum::middleware::from_fn(large_on_shared));
    // The dashboard's files hold no data and are open to all: a browser
    // without a token must load the page that asks for one.
    let ui = if state.ui.enabled {
        ui::router()
    } else {
        Router::new()
    };
    reads.merge(push).merge(ui)
}

/// Serves a read request on the shared runtime.
async fn on_shared(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    crate::listen::on_shared(next.run(req)).await
}

/// Serves a push whose body declares more than
/// [`crate::listen::LARGE_REQUEST`] bytes on the shared runtime, and any
/// other on the connection's thread (see `crate::listen::ConnThreads`). A
/// body of no declared length is read where it is: the body limit bounds
/// it either way.
async fn large_on_shared(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let len = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    crate::listen::on_shared_if_large(len, next.run(req)).await
}

/// What a connection beyond `http.max_connections` is served: the
/// operations endpoints (behind the same token as ever), and a 503 naming
/// the setting for everything else. It reads no bodies.
fn reserve_router(state: &HttpState, cfg: &HttpConfig) -> Router {
    let ops = ops::router().with_state(OpsState {
        pipeline: state.pipeline.clone(),
        metrics: state.metrics.clone(),
        draining: state.draining.clone(),
    });
    let max = cfg.max_connections;
    ops.fallback(move || async move { server::over_capacity(max) })
        .layer(axum::middleware::from_fn_with_state(
            (state.auth.clone(), Need::Read),
            crate::auth::require_token,
        ))
}

/// Serves HTTP on `listener`, within the `[http]` limits, until `shutdown`
/// is cancelled; then open connections finish their requests. `tls`: the
/// listener speaks TLS.
pub async fn serve(
    listener: Listener,
    state: HttpState,
    cfg: HttpConfig,
    tls: bool,
    shutdown: CancellationToken,
) {
    let reserve = reserve_router(&state, &cfg);
    let router = router(state, &cfg);
    server::serve(listener, (router, reserve), cfg, tls, shutdown).await
}

/// The server inside each HTTP connection, for harnesses that run a
/// listener in process.
#[cfg(test)]
pub(crate) fn connection_server(
    state: HttpState,
    cfg: &HttpConfig,
    tls: bool,
) -> impl crate::listen::Serve {
    let reserve = reserve_router(&state, cfg);
    let router = router(state, cfg);
    server::HttpServe::new((router, reserve), cfg, tls)
}

/// The bounds the listener applies to HTTP connections.
pub fn limits(cfg: &HttpConfig) -> crate::listen::Limits {
    crate::listen::Limits {
        names: crate::listen::Names::HTTP,
        max_connections: cfg.max_connections,
        reserved: cfg.reserved_connections,
        write_timeout: Some(cfg.write_timeout),
    }
}
