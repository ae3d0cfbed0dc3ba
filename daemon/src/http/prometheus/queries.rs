//! `query` and `query_range`: PromQL evaluated by [`crate::promql`],
//! answered as a vector, scalar, string or matrix in Prometheus' JSON.

use axum::extract::State;
use axum::response::Response;

use super::params::{parse_duration_ms, Params};
use super::response::{success_raw, timed, with_rollups, ApiError, JsonOut};
use super::state::PromState;
use crate::promql::{self, Data, Request};

fn query_text(p: &Params) -> Result<&str, ApiError> {
    p.get("query").ok_or_else(|| {
        ApiError::BadData("invalid parameter \"query\": missing (a PromQL expression)".into())
    })
}

/// `lookback_delta`: how far back an instant selector looks (5 minutes
/// unless given).
fn lookback_ms(p: &Params) -> Result<i64, ApiError> {
    match p.get("lookback_delta") {
        None => Ok(promql::DEFAULT_LOOKBACK_MS),
        Some(v) => match parse_duration_ms(v) {
            Ok(ms) if ms > 0 => Ok(ms),
            Ok(_) => Ok(promql::DEFAULT_LOOKBACK_MS),
            Err(e) => Err(ApiError::BadData(format!(
                "invalid parameter \"lookback_delta\": {e}"
            ))),
        },
    }
}

pub(super) async fn query_range(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_query_range", run_range(&prom, &p)).await
}

async fn run_range(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let q = query_text(p)?;
    let start = p.required_time_ms("start")?;
    let end = p.required_time_ms("end")?;
    let step = match p.get("step") {
        None => {
            return Err(ApiError::BadData(
                "invalid parameter \"step\": missing (a duration such as 60s or 1m)".into(),
            ))
        }
        Some(v) => parse_duration_ms(v)
            .map_err(|e| ApiError::BadData(format!("invalid parameter \"step\": {e}")))?,
    };
    if end < start {
        return Err(ApiError::BadData(
            "end timestamp must not be before start time".into(),
        ));
    }
    if step <= 0 {
        return Err(ApiError::BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer".into(),
        ));
    }
    let max = prom.engine.limits().max_points;
    let points = (end - start) / step + 1;
    if points > max as i64 {
        return Err(ApiError::BadData(format!(
            "exceeded maximum resolution of {max} points per timeseries (query.max_points). Try decreasing the query resolution (?step=XX)"
        )));
    }
    let req = Request {
        query: q.to_string(),
        start_ms: start,
        end_ms: end,
        step_ms: step,
        lookback_ms: lookback_ms(p)?,
    };
    answer(prom, req).await
}

pub(super) async fn query(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_query", run_instant(&prom, &p)).await
}

async fn run_instant(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let q = query_text(p)?;
    let t = match p.time_ms("time")? {
        Some(t) => t,
        None => chrono::Utc::now().timestamp_millis(),
    };
    let req = Request {
        query: q.to_string(),
        start_ms: t,
        end_ms: t,
        step_ms: 0,
        lookback_ms: lookback_ms(p)?,
    };
    answer(prom, req).await
}

async fn answer(prom: &PromState, req: Request) -> Result<Response, ApiError> {
    let (answer, partial) =
        crate::query::partial::tracking(promql::evaluate(prom.ctx(), &req)).await;
    let answer = answer?;
    let mut out = JsonOut::new();
    let t = req.start_ms;
    match &answer.data {
        Data::Scalar(v) => {
            out.raw("{\"resultType\":\"scalar\",\"result\":");
            out.sample(t, *v);
            out.raw("}");
        }
        Data::String(s) => {
            out.raw("{\"resultType\":\"string\",\"result\":[");
            out.time(t);
            out.raw(",");
            out.string(s);
            out.raw("]}");
        }
        Data::Vector(v) => {
            out.raw("{\"resultType\":\"vector\",\"result\":[");
            for (i, (labels, value)) in v.iter().enumerate() {
                if i > 0 {
                    out.raw(",");
                }
                out.raw("{\"metric\":");
                out.labels(labels);
                out.raw(",\"value\":");
                out.sample(t, *value);
                out.raw("}");
            }
            out.raw("]}");
        }
        Data::Matrix(m) => {
            out.raw("{\"resultType\":\"matrix\",\"result\":[");
            for (i, (labels, points)) in m.iter().enumerate() {
                if i > 0 {
                    out.raw(",");
                }
                out.raw("{\"metric\":");
                out.labels(labels);
                out.raw(",\"values\":[");
                for (j, (t, v)) in points.iter().enumerate() {
                    if j > 0 {
                        out.raw(",");
                    }
                    out.sample(*t, *v);
                }
                out.raw("]}");
            }
            out.raw("]}");
        }
    }
    drop(answer.data);
    Ok(with_rollups(
        success_raw(out, partial.into_iter().collect()),
        &answer.rollups,
    ))
}
