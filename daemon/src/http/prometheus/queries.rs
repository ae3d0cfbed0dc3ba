//! `query` and `query_range`: PromQL planned by [`super::plan`],
//! evaluated by [`super::eval`], answered as a vector, scalar or matrix.

use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value as Json_};

use super::eval::{Evaluator, Labels, Value};
use super::params::{parse_duration_ms, Params};
use super::plan::{self, AggOp, Plan};
use super::response::{labels_json, sample, success_with_warnings, timed, with_rollups, ApiError};
use super::state::PromState;

fn query_text(p: &Params) -> Result<&str, ApiError> {
    p.get("query").ok_or_else(|| {
        ApiError::BadData("invalid parameter \"query\": missing (a PromQL expression)".into())
    })
}

pub(super) async fn query_range(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_query_range", run_range(&prom, &p)).await
}

async fn run_range(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
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
    let max = engine.limits().max_points;
    let points = (end - start) / step + 1;
    if points > max as i64 {
        return Err(ApiError::BadData(format!(
            "exceeded maximum resolution of {max} points per timeseries (query.max_points). Try decreasing the query resolution (?step=XX)"
        )));
    }
    let plan = plan::plan_within(q, engine.limits())?;
    let times: Vec<i64> = (0..points).map(|i| start + i * step).collect();
    let mut ev = Evaluator::new(engine, cache, times);
    let (value, partial) = crate::query::partial::tracking(ev.eval(&plan)).await;
    let value = value?;
    let times = ev.times_ms();
    let result: Vec<Json_> = match value {
        Value::Scalar(v) => vec![json!({
            "metric": {},
            "values": times.iter().zip(&v).map(|(t, x)| sample(*t, *x)).collect::<Vec<_>>(),
        })],
        Value::Vector(mut series) => {
            series.sort_by(|a, b| a.labels.cmp(&b.labels));
            series
                .iter()
                .map(|s| {
                    let values: Vec<Json_> = times
                        .iter()
                        .zip(&s.values)
                        .filter_map(|(t, v)| v.map(|v| sample(*t, v)))
                        .collect();
                    json!({ "metric": labels_json(&s.labels), "values": values })
                })
                .collect()
        }
    };
    Ok(with_rollups(
        success_with_warnings(
            json!({ "resultType": "matrix", "result": result }),
            partial.into_iter().collect(),
        ),
        &ev.rollups,
    ))
}

pub(super) async fn query(State(prom): State<PromState>, p: Params) -> Response {
    timed("prometheus_query", run_instant(&prom, &p)).await
}

async fn run_instant(prom: &PromState, p: &Params) -> Result<Response, ApiError> {
    let (engine, cache) = (&*prom.engine, &*prom.names);
    let q = query_text(p)?;
    let t = match p.time_ms("time")? {
        Some(t) => t,
        None => chrono::Utc::now().timestamp_millis(),
    };
    let plan = plan::plan_within(q, engine.limits())?;
    let mut ev = Evaluator::new(engine, cache, vec![t]);
    let (value, partial) = crate::query::partial::tracking(ev.eval(&plan)).await;
    let data = match value? {
        Value::Scalar(v) => json!({
            "resultType": "scalar",
            "result": sample(t, v.first().copied().unwrap_or(f64::NAN)),
        }),
        Value::Vector(series) => {
            let mut present: Vec<(Labels, f64)> = series
                .into_iter()
                .filter_map(|s| s.values.first().copied().flatten().map(|v| (s.labels, v)))
                .collect();
            // topk and bottomk answer in rank order, as in Prometheus;
            // everything else in label order.
            match &plan {
                Plan::Aggregate {
                    op: AggOp::Topk, ..
                } => present.sort_by(|a, b| b.1.total_cmp(&a.1)),
                Plan::Aggregate {
                    op: AggOp::Bottomk, ..
                } => present.sort_by(|a, b| a.1.total_cmp(&b.1)),
                _ => present.sort_by(|a, b| a.0.cmp(&b.0)),
            }
            let result: Vec<Json_> = present
                .iter()
                .map(|(l, v)| json!({ "metric": labels_json(l), "value": sample(t, *v) }))
                .collect();
            json!({ "resultType": "vector", "result": result })
        }
    };
    Ok(with_rollups(
        success_with_warnings(data, partial.into_iter().collect()),
        &ev.rollups,
    ))
}
