//! The HTTP listener: the JSON query API under `/api/v1/`, Prometheus
//! `/metrics` for the daemon's own metrics, and the `/healthz` (process is
//! alive) and `/readyz` (store reachable, not shutting down) probes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use tokio::net::TcpListener;

use crate::model::Resolution;
use crate::query::{QueryEngine, QueryError};
use crate::store::Store;

#[derive(Clone)]
pub struct HttpState {
    pub query: Arc<QueryEngine>,
    pub store: Arc<dyn Store>,
    pub metrics: Option<PrometheusHandle>,
    /// Set when shutdown begins, so load balancers stop sending traffic.
    pub draining: Arc<AtomicBool>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/range", get(range))
        .with_state(state)
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

async fn metrics(State(s): State<HttpState>) -> Response {
    crate::telemetry::collect_process_metrics();
    match &s.metrics {
        Some(h) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            h.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are disabled\n").into_response(),
    }
}

async fn readyz(State(s): State<HttpState>) -> Response {
    if s.draining.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match s.store.health().await {
        Ok(()) => "ready\n".into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} store not ready: {e}\n", s.store.name()),
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct RangeParams {
    source: Option<String>,
    metric: Option<String>,
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
}

/// A JSON error body with a specific, actionable message.
fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({ "error": msg.into() }))).into_response()
}

async fn range(State(s): State<HttpState>, Query(p): Query<RangeParams>) -> Response {
    let now = chrono::Utc::now().timestamp();
    let (Some(source), Some(metric)) = (p.source.as_deref(), p.metric.as_deref()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "`source` and `metric` are required",
        );
    };
    let step = match p.step.as_deref().unwrap_or("1m") {
        "1m" => Resolution::Minute,
        "1h" => Resolution::Hour,
        "1d" => Resolution::Day,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("step {other:?} is not one of 1m, 1h, 1d"),
            )
        }
    };
    let to = match p.to.as_deref().map(|t| parse_time(t, now)).transpose() {
        Ok(t) => t.unwrap_or(now + 1),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("to: {e}")),
    };
    let from = match p.from.as_deref().map(|t| parse_time(t, now)).transpose() {
        Ok(t) => t.unwrap_or(to - 3600),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("from: {e}")),
    };
    let started = Instant::now();
    let result = s.query.range(source, metric, from, to, step).await;
    metrics::histogram!("tally_query_duration_seconds", "step" => step.as_str())
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(r) => Json(r).into_response(),
        Err(QueryError::Invalid(msg)) => error(StatusCode::BAD_REQUEST, msg),
        Err(QueryError::Store(e)) if e.is_retryable() => {
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(QueryError::Store(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// Accepts Unix seconds (`1764000000`, `1764000000.5`), RFC 3339
/// (`2026-11-22T10:00:00Z`), `now`, and `now-<duration>` (`now-6h`).
pub fn parse_time(s: &str, now: i64) -> Result<i64, String> {
    let s = s.trim();
    if s == "now" {
        return Ok(now);
    }
    if let Some(ago) = s.strip_prefix("now-") {
        let d = humantime::parse_duration(ago).map_err(|e| format!("{s:?}: {e}"))?;
        return Ok(now - d.as_secs() as i64);
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 1e13 {
            return Ok(secs.floor() as i64);
        }
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp())
        .map_err(|_| {
            format!("{s:?} is not Unix seconds, RFC 3339 (2026-11-22T10:00:00Z), `now` or `now-6h`")
        })
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn time_forms() {
        assert_eq!(parse_time("1764000000", 0), Ok(1_764_000_000));
        assert_eq!(parse_time("1764000000.9", 0), Ok(1_764_000_000));
        assert_eq!(parse_time("2026-11-22T10:00:00Z", 0), Ok(1_795_341_600));
        assert_eq!(parse_time("now", 100), Ok(100));
        assert_eq!(parse_time("now-1m", 100), Ok(40));
        assert!(parse_time("yesterday", 0).unwrap_err().contains("RFC 3339"));
    }
}
