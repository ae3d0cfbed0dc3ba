//! The HTTP listener: the native JSON API under `/api/v1/` (`api`, and the
//! dashboard's fleet page in `fleet`), the Prometheus-compatible read API
//! under `/prometheus` (`prometheus`), the operations endpoints `/metrics`,
//! `/healthz` and `/readyz` (`ops`), the ingest endpoints OTLP/HTTP
//! `/v1/metrics` and remote-write `/api/v1/write` (`push`), and the
//! built-in dashboard's files at `/` and `/ui/` (`ui`).
//!
//! Each of them has a state of its own holding only what it uses;
//! this module builds them from [`HttpState`] and mounts the routers, so
//! none of them depends on the others or on this one. Reads and ingest
//! differ in the token role they need and in how large a body they take.

mod api;
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
use crate::tls::SecureListener;

use crate::fleet::Fleet;
use crate::flush::Pipeline;
use crate::query::QueryEngine;
use crate::store::Store;
use crate::watch::WatchHub;

use api::ApiState;
use ops::OpsState;
use prometheus::PromState;

pub use config::HttpConfig;
pub use push::PushState;
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
        .with_state(ApiState {
            query: state.query.clone(),
            watch: state.watch,
        })
        .merge(fleet);
    let prometheus = prometheus::router().with_state(PromState::new(state.query));
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
    // The dashboard's files hold no data and are open to all: a browser
    // without a token must load the page that asks for one.
    let ui = if state.ui.enabled {
        ui::router()
    } else {
        Router::new()
    };
    reads.merge(push).merge(ui)
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
