//! How this API answers: Prometheus' JSON envelope, its error types and
//! status codes, and its formatting of times and sample values. Both the
//! query and the discovery endpoints answer through these, so clients see
//! one format whichever they call.

use std::future::Future;
use std::time::Instant;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value as Json_};

use crate::promql::{EvalError, Labels};
use crate::query::QueryError;

/// Response header naming the rollup groups a query read, for operators
/// (and tests) checking which queries avoid fanning out.
pub(crate) const ROLLUP_HEADER: &str = "x-tally-rollup";

/// A Prometheus API error: its `errorType` and HTTP status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    BadData(String),
    /// The query is valid but a limit refuses it.
    #[error("{0}")]
    Execution(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadData(_) => (StatusCode::BAD_REQUEST, "bad_data"),
            ApiError::Execution(_) => (StatusCode::UNPROCESSABLE_ENTITY, "execution"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> ApiError {
        match e {
            QueryError::Invalid(m) => ApiError::BadData(m),
            QueryError::Limit(m) => ApiError::Execution(m),
            QueryError::Busy(m) => ApiError::Unavailable(m),
            QueryError::Store(e) if e.is_retryable() => ApiError::Unavailable(e.to_string()),
            QueryError::Store(e) => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<EvalError> for ApiError {
    fn from(e: EvalError) -> ApiError {
        match e {
            EvalError::BadData(m) => ApiError::BadData(m),
            EvalError::Execution(m) => ApiError::Execution(m),
            EvalError::Query(q) => q.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind) = self.parts();
        (
            status,
            Json(json!({ "status": "error", "errorType": kind, "error": self.to_string() })),
        )
            .into_response()
    }
}

pub(super) fn success(data: Json_) -> Response {
    Json(json!({ "status": "success", "data": data })).into_response()
}

pub(super) fn success_with_warnings(data: Json_, warnings: Vec<String>) -> Response {
    if warnings.is_empty() {
        return success(data);
    }
    Json(json!({ "status": "success", "data": data, "warnings": warnings })).into_response()
}

pub(super) use crate::promql::format_value;

/// A JSON answer written straight to text: a matrix of millions of points
/// would take several times its size as a tree of values.
pub(super) struct JsonOut(String);

impl JsonOut {
    pub(super) fn new() -> JsonOut {
        JsonOut(String::new())
    }

    pub(super) fn raw(&mut self, s: &str) {
        self.0.push_str(s);
    }

    pub(super) fn string(&mut self, s: &str) {
        // Serializing a str cannot fail.
        self.0
            .push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
    }

    pub(super) fn time(&mut self, t_ms: i64) {
        use std::fmt::Write;
        let _ = if t_ms % 1000 == 0 {
            write!(self.0, "{}", t_ms / 1000)
        } else {
            write!(self.0, "{}", t_ms as f64 / 1000.0)
        };
    }

    /// `[time, "value"]`.
    pub(super) fn sample(&mut self, t_ms: i64, v: f64) {
        self.0.push('[');
        self.time(t_ms);
        self.0.push_str(",\"");
        self.0.push_str(&format_value(v));
        self.0.push_str("\"]");
    }

    pub(super) fn labels(&mut self, labels: &Labels) {
        self.0.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                self.0.push(',');
            }
            self.string(k);
            self.0.push(':');
            self.string(v);
        }
        self.0.push('}');
    }
}

/// A success envelope around `data`, written as text.
pub(super) fn success_raw(data: JsonOut, warnings: Vec<String>) -> Response {
    let mut body = String::with_capacity(data.0.len() + 64);
    body.push_str("{\"status\":\"success\",\"data\":");
    body.push_str(&data.0);
    drop(data);
    if !warnings.is_empty() {
        body.push_str(",\"warnings\":");
        body.push_str(&serde_json::to_string(&warnings).unwrap_or_else(|_| "[]".into()));
    }
    body.push('}');
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Runs a read and records its latency under the same histogram as the
/// native API.
pub(super) async fn timed(
    endpoint: &'static str,
    read: impl Future<Output = Result<Response, ApiError>>,
) -> Response {
    let started = Instant::now();
    let r = read.await;
    metrics::histogram!("tally_query_duration_seconds", "endpoint" => endpoint)
        .record(started.elapsed().as_secs_f64());
    r.unwrap_or_else(IntoResponse::into_response)
}

/// Adds the rollup header when rollups served the query.
pub(super) fn with_rollups(mut r: Response, groups: &[String]) -> Response {
    if !groups.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&groups.join(",")) {
            r.headers_mut().insert(ROLLUP_HEADER, v);
        }
    }
    r
}

pub(super) fn labels_json(labels: &Labels) -> Json_ {
    Json_::Object(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), Json_::String(v.to_string())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_times_as_prometheus_writes_them() {
        assert_eq!(format_value(1.0), "1");
        assert_eq!(format_value(0.1), "0.1");
        assert_eq!(format_value(-2.5), "-2.5");
        assert_eq!(format_value(1e21), "1000000000000000000000");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        let mut out = JsonOut::new();
        out.sample(1_700_000_000_000, 1.5);
        out.raw(" ");
        out.sample(1_700_000_000_500, f64::NAN);
        out.raw(" ");
        out.labels(
            &[("a\"b".to_string(), "é".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            out.0,
            r#"[1700000000,"1.5"] [1700000000.5,"NaN"] {"a\"b":"é"}"#
        );
    }

    #[test]
    fn errors_map_to_prometheus_types() {
        let parts = |e: ApiError| e.parts();
        assert_eq!(
            parts(QueryError::Invalid("x".into()).into()),
            (StatusCode::BAD_REQUEST, "bad_data")
        );
        assert_eq!(
            parts(QueryError::Limit("x".into()).into()),
            (StatusCode::UNPROCESSABLE_ENTITY, "execution")
        );
        assert_eq!(
            parts(QueryError::Busy("x".into()).into()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
        assert_eq!(
            parts(QueryError::Store(crate::store::StoreError::Unavailable("down".into())).into()),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
        );
    }
}
