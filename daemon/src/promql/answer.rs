//! A query's answer as the API shows it: an instant query's value in
//! Prometheus' order, a range query's series assembled chunk by chunk
//! within the limits.

use std::collections::BTreeMap;

use super::budget::{BYTES_PER_ANSWER_POINT, BYTES_PER_SERIES};
use super::eval::Evaluator;
use super::held::Held;
use super::plan::{AggOp, Node};
use super::value::{self, execution, EvalResult, Labels, Value};
use super::{Data, Request};

/// An instant query's answer. Vectors come in label order, except where
/// the query orders them (`sort`, `topk`...), as Prometheus shows them.
pub fn instant_data(root: &Node, v: Value) -> Data {
    match v {
        Value::Scalar(s) => Data::Scalar(s.first().copied().unwrap_or(f64::NAN)),
        Value::String(s) => Data::String(s),
        Value::Vector(series) => {
            let mut out: Vec<(Labels, f64)> = series
                .into_iter()
                .filter_map(|s| s.values.first().copied().flatten().map(|v| (s.labels, v)))
                .collect();
            if !ordered(root) {
                out.sort_by(|a, b| a.0.cmp(&b.0));
            }
            Data::Vector(out)
        }
        Value::Matrix(m) => Data::Matrix(
            m.into_iter()
                .map(|rs| {
                    let points =
                        rs.t.iter()
                            .zip(&rs.slots)
                            .map(|(t, s)| (*t, s.last))
                            .collect();
                    (rs.labels, points)
                })
                .collect(),
        ),
    }
}

/// Whether the root orders its answer itself.
fn ordered(root: &Node) -> bool {
    match root.unwrapped() {
        Node::Call { func, .. } => func.starts_with("sort"),
        Node::Aggregate { op, .. } => matches!(op, AggOp::Topk | AggOp::Bottomk),
        _ => false,
    }
}

/// How a range query's steps are cut.
pub struct Chunks {
    pub steps: u64,
    pub chunk: u64,
    /// The most points the answer may hold (`query.max_total_points`).
    pub max_points: usize,
}

/// Evaluates a range query chunk by chunk and assembles its series. Each
/// chunk's points and new series are counted, and charged to `answer`,
/// before they join the answer.
pub async fn range_data(
    ev: &Evaluator<'_>,
    root: &Node,
    req: &Request,
    c: Chunks,
    answer: &Held<'_>,
) -> EvalResult<Data> {
    let mut series: BTreeMap<Labels, Vec<(i64, f64)>> = BTreeMap::new();
    let mut points = 0usize;
    let mut first = 0u64;
    while first < c.steps {
        let last = (first + c.chunk).min(c.steps);
        let times: Vec<i64> = (first..last)
            .map(|i| req.start_ms + i as i64 * req.step_ms)
            .collect();
        ev.held.next_chunk();
        let value = ev.eval(root, &times).await?;
        let (more, new_series) = answer_growth(&series, &value, times.len())?;
        points = points.saturating_add(more);
        if points > c.max_points {
            return Err(execution(format!(
                "the answer holds more than {} points; the limit is query.max_total_points: select fewer series or a coarser step",
                c.max_points
            )));
        }
        answer.charge_bytes(
            "the answer",
            (more as u64)
                .saturating_mul(BYTES_PER_ANSWER_POINT)
                .saturating_add((new_series as u64).saturating_mul(BYTES_PER_SERIES)),
        )?;
        match value {
            Value::Scalar(s) => {
                let e = series.entry(Labels::empty()).or_default();
                e.extend(times.iter().copied().zip(s));
            }
            Value::Vector(v) => {
                for s in v.into_iter().filter(value::Series::has_any) {
                    let e = series.entry(s.labels).or_default();
                    e.extend(
                        times
                            .iter()
                            .zip(s.values)
                            .filter_map(|(t, v)| v.map(|v| (*t, v))),
                    );
                }
            }
            _ => {}
        }
        first = last;
        // Long evaluations leave the worker to other tasks between chunks.
        tokio::task::yield_now().await;
    }
    Ok(Data::Matrix(series.into_iter().collect()))
}

/// The points a chunk's value adds to a range query's answer, and the
/// series it adds that the answer does not hold yet.
fn answer_growth(
    answer: &BTreeMap<Labels, Vec<(i64, f64)>>,
    value: &Value,
    times: usize,
) -> EvalResult<(usize, usize)> {
    match value {
        Value::Scalar(_) => Ok((times, usize::from(answer.is_empty()))),
        Value::Vector(v) => Ok(v.iter().fold((0, 0), |(points, new), s| {
            let n = s.values.iter().filter(|v| v.is_some()).count();
            let fresh = n > 0 && !answer.contains_key(&s.labels);
            (points + n, new + usize::from(fresh))
        })),
        other => Err(value::bad(format!(
            "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
            other.type_name()
        ))),
    }
}
