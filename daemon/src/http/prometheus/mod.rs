//! The Prometheus-compatible read API under `/prometheus`, so that
//! Grafana's Prometheus data source (and `promtool`) can browse and graph
//! Tally's series: `query`, `query_range`, `series`, `labels`,
//! `label/<name>/values`, `metadata`, `query_exemplars` and
//! `status/buildinfo`, over GET or form-encoded POST, in Prometheus' JSON
//! format and with its error types and status codes.
//!
//! A series appears as `<metric>{instance="<source>", ...}` (see
//! `promql::names` for the mapping). PromQL is evaluated by
//! [`crate::promql`]; the handlers are in `queries` (PromQL) and
//! `discovery` (catalog listings); `params` and `response` are the request
//! and response formats they share. `docs/promql.md` documents the API.

mod discovery;
mod params;
mod queries;
mod response;
mod state;

use axum::routing::get;
use axum::Router;

pub(crate) use state::PromState;

/// The routes, relative to `/prometheus`.
pub(crate) fn router() -> Router<PromState> {
    use discovery::{buildinfo, exemplars, label_values, labels, metadata, series};
    use queries::{query, query_range};
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route("/api/v1/label/{name}/values", get(label_values))
        .route("/api/v1/metadata", get(metadata))
        .route("/api/v1/query_exemplars", get(exemplars).post(exemplars))
        .route("/api/v1/status/buildinfo", get(buildinfo))
}
