//! Walks a planned query at a list of evaluation times (one chunk of a
//! range query's steps, or the one time of an instant query): every node
//! at every time at once, each selector read once per chunk.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::aggregate::{aggregate, Param};
use super::binary::binary;
use super::held::Held;
use super::histogram::histogram_quantile;
use super::instant_fns;
use super::plan::{AggOp, Mods, Node, Plan};
use super::range_fns::{self, Params, RangeFn, WindowAt};
use super::rollup::RollupRead;
use super::select::{self, Context, Selected};
use super::value::{bad, execution, EvalResult, Labels, PointKind, RangeSeries, Series, Value};

/// What an evaluation reads and knows before it starts: the series of each
/// selector and the rollups serving aggregations.
pub struct Evaluator<'a> {
    pub ctx: Context<'a>,
    pub plan: &'a Plan,
    /// Per selector of the plan; empty for selectors a rollup serves.
    pub selected: Vec<Arc<Vec<Selected>>>,
    /// Per aggregation of the plan, the rollup serving it, if one does.
    pub rollups: Vec<Option<RollupRead>>,
    /// Per selector: whether hour and day slots may serve its windows (the
    /// function reading them takes merged slots of its series' kinds).
    pub wide: Vec<bool>,
    pub lookback_ms: i64,
    /// What the chunk being evaluated holds (see `held`).
    pub held: Held<'a>,
}

/// A range vector argument: its series and how its windows are cut.
struct RangeArg {
    series: Vec<RangeSeries>,
    range_ms: i64,
    mods: Mods,
}

impl<'a> Evaluator<'a> {
    /// Evaluates `node` at `times` (ascending, Unix ms).
    ///
    /// Each kind of node is its own boxed future, returned as it is rather
    /// than awaited here: a nesting level then costs one small poll frame,
    /// so the deepest expression the limits admit (`query.max_promql_depth`
    /// up to 256) fits a worker thread's stack.
    pub fn eval<'b>(
        &'b self,
        node: &'b Node,
        times: &'b [i64],
    ) -> BoxFuture<'b, EvalResult<Value>> {
        let n = times.len();
        match node {
            Node::Number(v) => {
                let v = Value::Scalar(vec![*v; n]);
                async move { Ok(v) }.boxed()
            }
            Node::String(s) => {
                let v = Value::String(s.clone());
                async move { Ok(v) }.boxed()
            }
            Node::Invariant(inner) if n > 1 => async move {
                let once = self.eval(inner, &times[..1]).await?;
                Ok(broadcast(once, n))
            }
            .boxed(),
            Node::Invariant(inner) => self.eval(inner, times),
            Node::Selector { sel, mods } => async move {
                let v = select::instant(
                    self.ctx,
                    &self.selected[*sel],
                    times,
                    *mods,
                    self.lookback_ms,
                    false,
                )
                .await?;
                Ok(Value::Vector(v))
            }
            .boxed(),
            Node::Matrix { .. } | Node::Subquery { .. } => async move {
                let arg = self.range_arg(node, times, None).await?;
                Ok(Value::Matrix(in_window(
                    arg,
                    times.first().copied().unwrap_or(0),
                )))
            }
            .boxed(),
            Node::Call { func, args } => self.call(func, args, times).boxed(),
            Node::Aggregate {
                id,
                op,
                param,
                expr,
                grouping,
            } => match &self.rollups[*id] {
                Some(rollup) => rollup
                    .eval(self.ctx, *op, grouping, times, &self.held)
                    .boxed(),
                None => self
                    .aggregation(*op, param.as_deref(), expr, grouping, times)
                    .boxed(),
            },
            Node::Binary {
                op,
                lhs,
                rhs,
                matching,
                return_bool,
            } => async move {
                let l = self.eval(lhs, times).await?;
                let r = self.eval(rhs, times).await?;
                Ok(
                    match binary(*op, l, r, matching.as_ref(), *return_bool, &self.held)? {
                        Value::Vector(v) => Value::Vector(dedupe(v)?),
                        other => other,
                    },
                )
            }
            .boxed(),
            Node::Neg(inner) => async move { negate(self.eval(inner, times).await?) }.boxed(),
        }
    }

    async fn aggregation(
        &self,
        op: AggOp,
        param: Option<&Node>,
        expr: &Node,
        grouping: &super::plan::Grouping,
        times: &[i64],
    ) -> EvalResult<Value> {
        let param = match (op, param) {
            (_, None) => Param::None,
            (AggOp::CountValues, Some(p)) => match self.eval(p, times).await? {
                Value::String(s) => Param::Label(s),
                other => {
                    return Err(bad(format!(
                        "count_values() takes a label name, got {}",
                        other.type_name()
                    )))
                }
            },
            (_, Some(p)) => Param::Number(self.scalar(p, times).await?),
        };
        match self.eval(expr, times).await? {
            Value::Vector(inner) => Ok(Value::Vector(aggregate(
                op,
                grouping,
                &param,
                inner,
                times.len(),
                &self.held,
            )?)),
            other => Err(bad(format!(
                "expected an instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    async fn scalar(&self, node: &Node, times: &[i64]) -> EvalResult<Vec<f64>> {
        match self.eval(node, times).await? {
            Value::Scalar(s) => Ok(s),
            other => Err(bad(format!("expected a scalar, got {}", other.type_name()))),
        }
    }

    async fn vector(&self, node: &Node, times: &[i64]) -> EvalResult<Vec<Series>> {
        match self.eval(node, times).await? {
            Value::Vector(v) => Ok(v),
            other => Err(bad(format!(
                "expected an instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    async fn call(&self, func: &'static str, args: &[Node], times: &[i64]) -> EvalResult<Value> {
        if let Some(f) = RangeFn::parse(func) {
            return self.range_call(f, args, times).await;
        }
        match func {
            "absent_over_time" => return self.absent_over_time(&args[0], times).await,
            "histogram_quantile" => {
                let q = self.scalar(&args[0], times).await?;
                let v = self.vector(&args[1], times).await?;
                return Ok(Value::Vector(dedupe(histogram_quantile(
                    &q,
                    v,
                    times.len(),
                ))?));
            }
            "timestamp" => {
                if let Node::Selector { sel, mods } = args[0].unwrapped() {
                    let v = select::instant(
                        self.ctx,
                        &self.selected[*sel],
                        times,
                        *mods,
                        self.lookback_ms,
                        true,
                    )
                    .await?;
                    let v = v
                        .into_iter()
                        .map(|s| Series {
                            labels: s.labels.without_name(),
                            values: s.values,
                        })
                        .collect();
                    return Ok(Value::Vector(dedupe(v)?));
                }
            }
            _ => {}
        }
        let absent_labels = match func {
            "absent" => self.absent_labels(&args[0]),
            _ => Labels::empty(),
        };
        let mut values = Vec::with_capacity(args.len());
        for a in args {
            values.push(self.eval(a, times).await?);
        }
        let limits = self.ctx.engine.limits();
        match instant_fns::call(func, values, times, absent_labels, limits, &self.held)? {
            Value::Vector(v) => Ok(Value::Vector(dedupe(v)?)),
            other => Ok(other),
        }
    }

    /// The labels `absent(x)` answers with: those the selector fixes with
    /// `=` (the metric name aside).
    fn absent_labels(&self, arg: &Node) -> Labels {
        let sel = match arg.unwrapped() {
            Node::Selector { sel, .. } | Node::Matrix { sel, .. } => *sel,
            _ => return Labels::empty(),
        };
        let spec = &self.plan.selectors[sel];
        let mut labels = Labels::empty();
        let mut seen: Vec<&str> = Vec::new();
        for m in &spec.matchers {
            if m.name == super::value::NAME_LABEL {
                continue;
            }
            let equal = matches!(m.op, promql_parser::label::MatchOp::Equal);
            if equal && !seen.contains(&m.name.as_str()) {
                labels.set(&m.name, &m.value);
                seen.push(&m.name);
            } else {
                labels.remove(&m.name);
            }
        }
        labels
    }

    async fn range_call(&self, f: RangeFn, args: &[Node], times: &[i64]) -> EvalResult<Value> {
        let (matrix_at, params) = match f {
            RangeFn::Quantile => (1, vec![self.scalar(&args[0], times).await?]),
            RangeFn::PredictLinear => (0, vec![self.scalar(&args[1], times).await?]),
            RangeFn::Smoothing => (
                0,
                vec![
                    self.scalar(&args[1], times).await?,
                    self.scalar(&args[2], times).await?,
                ],
            ),
            _ => (0, Vec::new()),
        };
        let arg = self.range_arg(&args[matrix_at], times, Some(f)).await?;
        let params = Params {
            first: params.first().map(Vec::as_slice),
            second: params.get(1).map(Vec::as_slice),
        };
        let mut out = Vec::with_capacity(arg.series.len());
        let reads: Vec<i64> = times.iter().map(|&t| arg.mods.at(t)).collect();
        for rs in &arg.series {
            let wins: Vec<WindowAt> = range_fns::windows(rs, &reads, arg.range_ms);
            let values = range_fns::apply(f, rs, &wins, times, arg.range_ms, &params)?;
            if values.iter().any(Option::is_some) {
                let labels = if f.keeps_name() {
                    rs.labels.clone()
                } else {
                    rs.labels.clone().without_name()
                };
                out.push(Series { labels, values });
            }
        }
        Ok(Value::Vector(dedupe(out)?))
    }

    async fn absent_over_time(&self, arg: &Node, times: &[i64]) -> EvalResult<Value> {
        let r = self.range_arg(arg, times, Some(RangeFn::Present)).await?;
        let reads: Vec<i64> = times.iter().map(|&t| r.mods.at(t)).collect();
        let mut present = vec![false; times.len()];
        for rs in &r.series {
            for (p, w) in present
                .iter_mut()
                .zip(range_fns::windows(rs, &reads, r.range_ms))
            {
                *p |= w.hi > w.lo;
            }
        }
        let values: Vec<Option<f64>> = present.iter().map(|&p| (!p).then_some(1.0)).collect();
        let s = Series {
            labels: self.absent_labels(arg),
            values,
        };
        Ok(Value::Vector(if s.has_any() {
            vec![s]
        } else {
            Vec::new()
        }))
    }

    /// A matrix selector's or subquery's series for the windows at `times`.
    fn range_arg<'b>(
        &'b self,
        node: &'b Node,
        times: &'b [i64],
        f: Option<RangeFn>,
    ) -> BoxFuture<'b, EvalResult<RangeArg>> {
        async move {
            match node.unwrapped() {
                Node::Matrix {
                    sel,
                    range_ms,
                    mods,
                } => {
                    let selected = &self.selected[*sel];
                    // Read times, not minute starts: a read inside a
                    // minute reads that minute too.
                    let mut ends: Vec<i64> = times.iter().map(|&t| mods.at(t)).collect();
                    ends.dedup();
                    let g = if f.is_some() && self.wide[*sel] {
                        select::granularity(*range_ms, &ends)
                    } else {
                        60
                    };
                    Ok(RangeArg {
                        series: select::range(self.ctx, selected, &ends, *range_ms, g).await?,
                        range_ms: *range_ms,
                        mods: *mods,
                    })
                }
                Node::Subquery {
                    expr,
                    range_ms,
                    step_ms,
                    mods,
                } => {
                    let inner_times = subquery_times(times, *range_ms, *step_ms, *mods);
                    let series = match self.eval(expr, &inner_times).await? {
                        Value::Scalar(s) => vec![samples_of(
                            Labels::empty(),
                            &inner_times,
                            s.into_iter().map(Some),
                        )],
                        Value::Vector(v) => v
                            .into_iter()
                            .map(|s| samples_of(s.labels, &inner_times, s.values.into_iter()))
                            .collect(),
                        other => {
                            return Err(bad(format!(
                                "subquery is only allowed on instant vector, got {}",
                                other.type_name()
                            )))
                        }
                    };
                    Ok(RangeArg {
                        series,
                        range_ms: *range_ms,
                        mods: *mods,
                    })
                }
                _ => Err(bad(
                    "expected a range vector (a selector with [range], or a subquery)",
                )),
            }
        }
        .boxed()
    }
}

/// The times a subquery's expression is evaluated at for outer times
/// `times`: Prometheus' alignment (multiples of the step) within each
/// window `[t - range, t]`, merged.
pub fn subquery_times(times: &[i64], range_ms: i64, step_ms: i64, mods: Mods) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    let mut reads: Vec<i64> = times.iter().map(|&t| mods.at(t)).collect();
    reads.sort_unstable();
    reads.dedup();
    for rt in reads {
        let from = rt - range_ms;
        let mut t = from.div_euclid(step_ms) * step_ms;
        if t < from {
            t += step_ms;
        }
        if let Some(&last) = out.last() {
            if t <= last {
                t = last + step_ms;
            }
        }
        while t <= rt {
            out.push(t);
            t += step_ms;
        }
    }
    out
}

fn samples_of(
    labels: Labels,
    times: &[i64],
    values: impl Iterator<Item = Option<f64>>,
) -> RangeSeries {
    let mut rs = RangeSeries {
        labels,
        kind: PointKind::Samples,
        width_ms: 0,
        t: Vec::new(),
        slots: Vec::new(),
        lead: None,
        tail: None,
    };
    for (t, v) in times.iter().zip(values) {
        if let Some(v) = v {
            rs.push_sample(*t, v);
        }
    }
    rs
}

/// A range vector's points in its window at `t`, as an instant query of
/// `x[5m]` answers: the samples (for slots, the per-minute samples).
fn in_window(arg: RangeArg, t: i64) -> Vec<RangeSeries> {
    arg.series
        .into_iter()
        .filter_map(|rs| {
            let read_t = arg.mods.at(t);
            let w = range_fns::window(&rs, read_t, arg.range_ms);
            let mut out = RangeSeries {
                labels: rs.labels.clone(),
                kind: PointKind::Samples,
                width_ms: 0,
                t: Vec::new(),
                slots: Vec::new(),
                lead: None,
                tail: None,
            };
            // The window may hold the minute `read_t` is inside of, whole:
            // no sample after `read_t` is shown.
            for i in w.lo..w.hi {
                if let Some((ts, v)) = rs.sample(i).filter(|&(ts, _)| ts <= read_t) {
                    out.push_sample(ts, v);
                }
            }
            (!out.t.is_empty()).then_some(out)
        })
        .collect()
}

/// Unary minus: values negated, the metric name dropped.
fn negate(v: Value) -> EvalResult<Value> {
    match v {
        Value::Scalar(s) => Ok(Value::Scalar(s.into_iter().map(|v| -v).collect())),
        Value::Vector(v) => Ok(Value::Vector(dedupe(
            v.into_iter()
                .map(|s| Series {
                    labels: s.labels.without_name(),
                    values: s.values.into_iter().map(|v| v.map(|v| -v)).collect(),
                })
                .collect(),
        )?)),
        other => Err(bad(format!(
            "unary expression only allowed on expressions of type scalar or instant vector, got {}",
            other.type_name()
        ))),
    }
}

/// A value computed once, repeated at `n` times.
fn broadcast(v: Value, n: usize) -> Value {
    match v {
        Value::Scalar(s) => Value::Scalar(vec![s.first().copied().unwrap_or(f64::NAN); n]),
        Value::Vector(v) => Value::Vector(
            v.into_iter()
                .map(|s| Series {
                    values: vec![s.values.first().copied().flatten(); n],
                    labels: s.labels,
                })
                .filter(Series::has_any)
                .collect(),
        ),
        other => other,
    }
}

/// Series with the same labels merged into one; Prometheus refuses two
/// values with the same labels at one time, and so does this.
pub fn dedupe(series: Vec<Series>) -> EvalResult<Vec<Series>> {
    let mut index: std::collections::HashMap<Labels, usize> =
        std::collections::HashMap::with_capacity(series.len());
    let mut out: Vec<Series> = Vec::with_capacity(series.len());
    for s in series {
        match index.get(&s.labels) {
            None => {
                index.insert(s.labels.clone(), out.len());
                out.push(s);
            }
            Some(&i) => {
                let kept = &mut out[i];
                for (a, b) in kept.values.iter_mut().zip(s.values) {
                    match (&a, b) {
                        (Some(_), Some(_)) => {
                            return Err(execution(
                                "vector cannot contain metrics with the same labelset",
                            ))
                        }
                        (None, Some(b)) => *a = Some(b),
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subquery_times_align_to_the_step() {
        let m = Mods::default();
        // [5m:1m] at 10:30: 5:30..10:30 holds 6:00..10:00.
        let t = subquery_times(&[630_000], 300_000, 60_000, m);
        assert_eq!(t, vec![360_000, 420_000, 480_000, 540_000, 600_000]);
        // Aligned: both edges included, as Prometheus 2 has it.
        let t = subquery_times(&[600_000], 120_000, 60_000, m);
        assert_eq!(t, vec![480_000, 540_000, 600_000]);
        // Overlapping windows share their times.
        let t = subquery_times(&[600_000, 660_000], 120_000, 60_000, m);
        assert_eq!(t, vec![480_000, 540_000, 600_000, 660_000]);
        // Sparse windows read only what they need.
        let t = subquery_times(&[600_000, 6_000_000], 60_000, 60_000, m);
        assert_eq!(t, vec![540_000, 600_000, 5_940_000, 6_000_000]);
        // Offset and @.
        let at = Mods {
            offset_ms: 60_000,
            at_ms: Some(600_000),
        };
        let t = subquery_times(&[0, 1_000_000], 60_000, 60_000, at);
        assert_eq!(t, vec![480_000, 540_000]);
    }

    #[test]
    fn same_labels_merge_unless_they_collide() {
        let l: Labels = [("a".to_string(), "1".to_string())].into_iter().collect();
        let s = |v: Vec<Option<f64>>| Series {
            labels: l.clone(),
            values: v,
        };
        let out = dedupe(vec![s(vec![Some(1.0), None]), s(vec![None, Some(2.0)])]).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].values, vec![Some(1.0), Some(2.0)]);
        assert!(dedupe(vec![s(vec![Some(1.0)]), s(vec![Some(2.0)])]).is_err());
    }
}
