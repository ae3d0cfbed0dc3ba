//! `GET /api/v1/charts`: many metrics of one source over one window in one
//! request, each with its first series (see [`crate::query::ChartsQuery`]),
//! so the dashboard's source page reads a screenful of small charts at once.
//!
//! A read like the rest of `/api/v1`: it needs a read token when tokens are
//! on, and unknown parameters are refused.

use std::time::Instant;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::api::{bad, parse_time, read, timed, ApiState};
use crate::query::{ChartsQuery, QueryError, StepSpec, DEFAULT_SERIES_PER_METRIC};

/// The route, relative to `/api/v1`.
pub(crate) fn router() -> Router<ApiState> {
    Router::new().route("/charts", get(charts))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    source: Option<String>,
    metric: Option<String>,
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
    series_per_metric: Option<usize>,
    points: Option<usize>,
}

impl Params {
    fn query(self, now: i64) -> Result<ChartsQuery, QueryError> {
        let (Some(source), Some(metric)) = (self.source, self.metric) else {
            return Err(QueryError::Invalid(
                "`source` (one source's name) and `metric` (comma-separated metric names) are required".into(),
            ));
        };
        let time = |name: &str, v: Option<String>| -> Result<Option<i64>, QueryError> {
            v.map(|t| parse_time(&t, now).map_err(|e| QueryError::Invalid(format!("{name}: {e}"))))
                .transpose()
        };
        let to = time("to", self.to)?.unwrap_or(now + 1);
        let from = time("from", self.from)?.unwrap_or(to - 3600);
        Ok(ChartsQuery {
            source: source.trim().to_string(),
            metrics: metric
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(String::from)
                .collect(),
            from,
            to,
            step: StepSpec::parse(self.step.as_deref().unwrap_or("1m"), None)?,
            series_per_metric: self.series_per_metric.unwrap_or(DEFAULT_SERIES_PER_METRIC),
            points: self.points,
        })
    }
}

async fn charts(State(s): State<ApiState>, q: Result<Query<Params>, QueryRejection>) -> Response {
    let p = match q {
        Ok(Query(p)) => p,
        Err(e) => return bad(format!("bad query string: {}", e.body_text())),
    };
    let q = match p.query(chrono::Utc::now().timestamp()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let started = Instant::now();
    let r = read(s.query.charts(&q)).await;
    timed("charts", started, r)
}
