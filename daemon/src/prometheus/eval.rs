//! Evaluates a [`Plan`] at a list of evaluation times from Tally's slots.
//!
//! # Windows
//!
//! A range function at time `t` over `[r]` (a whole number of minutes)
//! reads the minute slots that *end* in `(t - r, t]`: the slots starting
//! in `[floor_minute(t) - r, floor_minute(t))`. For a minute-aligned `t`
//! that is exactly the samples in `[t - r, t)`, Prometheus' window but for
//! samples on the boundary. The minute in progress is not in it: it
//! counts once it is over, so the newest point of a graph is never a
//! partial minute that looks like a dip.
//!
//! Because a window's edges are minute boundaries, wider slots serve it
//! whenever they tile it exactly: when `r` and every window end are whole
//! hours the window is read from hour slots, whole days from day slots.
//! The answer is the same either way (slots merge associatively); only the
//! number of slots read changes.
//!
//! # Rollups
//!
//! `sum` of `sum_over_time`, `count_over_time`, `rate` or `increase`, and
//! `min` of `min_over_time` / `max` of `max_over_time`, grouped by nothing
//! that distinguishes sources, over a source selection that is exactly a
//! rollup group (no source matcher: the group `all`), are read from the
//! group's rollup series, one per metric, instead of every member. Any
//! other query fans out to the selected series.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::names::{
    is_mapped_name, prom_name, unambiguous_metric, NameCache, NAME_LABEL, SOURCE_LABEL,
    TALLY_METRIC_LABEL,
};
use super::plan::{AggOp, ArithOp, Grouping, Op, Plan, RangeFn, Selector};
use crate::model::{validate_metric, validate_source, SeriesId, Slot, DAY_S, HOUR_S, MINUTE_S};
use crate::query::{Aggregate, QueryEngine, QueryError, Selection, Step, StepSpec, Window};
use crate::rollup::Rollups;
use crate::selector::{all_match, NameMatcher};

/// A series' labels, sorted by name.
pub type Labels = BTreeMap<String, String>;

/// One series: a value, or none, per evaluation time.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub values: Vec<Option<f64>>,
}

/// What an expression evaluates to.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// One number per evaluation time.
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The query asks for something its data cannot answer (e.g. `rate` of
    /// a gauge); the message says what.
    #[error("{0}")]
    BadData(String),
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// An evaluation: the engine, the times, and what the evaluation did.
pub struct Evaluator<'a> {
    engine: &'a QueryEngine,
    names: &'a NameCache,
    /// Evaluation times, Unix milliseconds, ascending.
    times_ms: Vec<i64>,
    /// Rollup groups read, in order of first use.
    pub rollups: Vec<String>,
}

/// The selection a selector stands for, ready for the engine.
#[derive(Debug)]
pub struct Resolved {
    pub source: Vec<NameMatcher>,
    /// Tally metric matchers; those listing names come first so the engine
    /// can enumerate exact selections without the catalog.
    pub metric: Vec<NameMatcher>,
    /// Matchers on the Prometheus name.
    pub names: Vec<NameMatcher>,
}

impl<'a> Evaluator<'a> {
    pub fn new(engine: &'a QueryEngine, names: &'a NameCache, times_ms: Vec<i64>) -> Self {
        Evaluator {
            engine,
            names,
            times_ms,
            rollups: Vec::new(),
        }
    }

    pub fn times_ms(&self) -> &[i64] {
        &self.times_ms
    }

    /// Evaluates `plan` at every time.
    pub async fn eval(&mut self, plan: &Plan) -> Result<Value, EvalError> {
        self.eval_at(plan, false).await
    }

    /// `fan_out`: the series feed an aggregation, so the engine's fan-out
    /// limit applies rather than its per-response series limit.
    fn eval_at<'b>(
        &'b mut self,
        plan: &'b Plan,
        fan_out: bool,
    ) -> BoxFuture<'b, Result<Value, EvalError>> {
        async move {
            let n = self.times_ms.len();
            Ok(match plan {
                Plan::Number(v) => Value::Scalar(vec![*v; n]),
                Plan::Range { func, sel, range_s } => match self.resolve(sel).await? {
                    None => Value::Vector(Vec::new()),
                    Some(res) => Value::Vector(self.range(*func, &res, *range_s, fan_out).await?),
                },
                Plan::Aggregate {
                    op,
                    grouping,
                    k,
                    inner,
                } => {
                    if let Some(series) = self.try_rollup(*op, grouping, inner).await? {
                        return Ok(Value::Vector(series));
                    }
                    match self.eval_at(inner, true).await? {
                        Value::Vector(v) => Value::Vector(aggregate(*op, grouping, *k, v, n)),
                        Value::Scalar(_) => {
                            return Err(EvalError::BadData(format!(
                                "{}() aggregates series, not a number",
                                op.name()
                            )))
                        }
                    }
                }
                Plan::Arith { op, lhs, rhs } => {
                    let l = self.eval_at(lhs, fan_out).await?;
                    let r = self.eval_at(rhs, fan_out).await?;
                    arith(*op, l, r)
                }
                Plan::Neg(p) => arith(
                    ArithOp::Mul,
                    Value::Scalar(vec![-1.0; n]),
                    self.eval_at(p, fan_out).await?,
                ),
            })
        }
        .boxed()
    }

    async fn resolve(&self, sel: &Selector) -> Result<Option<Resolved>, EvalError> {
        resolve(self.engine, self.names, sel).await
    }

    /// The metrics a resolved selection covers, listed.
    async fn metric_list(&self, res: &Resolved) -> Result<Vec<String>, EvalError> {
        let candidates: Vec<String> = match res.metric.first().and_then(NameMatcher::names) {
            Some(names) => names.to_vec(),
            None => self
                .names
                .get(self.engine)
                .await?
                .metrics
                .keys()
                .cloned()
                .collect(),
        };
        Ok(candidates
            .into_iter()
            .filter(|m| all_match(&res.metric, m) && all_match(&res.names, &prom_name(m)))
            .collect())
    }

    /// A range function of every selected series.
    async fn range(
        &self,
        func: RangeFn,
        res: &Resolved,
        range_s: i64,
        fan_out: bool,
    ) -> Result<Vec<Series>, EvalError> {
        let limits = self.engine.limits();
        let (limit, limit_name) = if fan_out {
            (limits.max_fanout, "query.max_fanout")
        } else {
            (limits.max_series, "query.max_series")
        };
        let ids: Vec<SeriesId> = self
            .engine
            .resolve(
                &Selection {
                    source: res.source.clone(),
                    metric: res.metric.clone(),
                },
                limit,
                limit_name,
            )
            .await?
            .into_iter()
            .filter(|id| {
                !Rollups::is_rollup_source(&id.source)
                    && all_match(&res.names, &prom_name(&id.metric))
            })
            .collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let grid = Grid::new(&self.times_ms, range_s);
        let w = grid.window(self.engine)?;
        let mut out = Vec::new();
        for b in self.engine.many_buckets(&ids, &w).await? {
            if b.buckets.is_empty() {
                continue;
            }
            if func.needs_counter() && b.kind.is_some_and(|k| !k.is_counter()) {
                return Err(EvalError::BadData(format!(
                    "{}() is for counters, and {}{{source={:?}}} (Tally metric {:?}) is a gauge: use avg_over_time, min_over_time or max_over_time",
                    func.name(),
                    prom_name(&b.series.metric),
                    b.series.source,
                    b.series.metric
                )));
            }
            let values = grid.values(func.aggregate(), &b.buckets);
            if values.iter().all(Option::is_none) {
                continue;
            }
            let mut labels = Labels::new();
            labels.insert(SOURCE_LABEL.into(), b.series.source.to_string());
            labels.insert(TALLY_METRIC_LABEL.into(), b.series.metric.to_string());
            out.push(Series { labels, values });
        }
        Ok(out)
    }

    /// The aggregation from rollup series, when it can be served so;
    /// None when it has to fan out.
    async fn try_rollup(
        &mut self,
        op: AggOp,
        grouping: &Grouping,
        inner: &Plan,
    ) -> Result<Option<Vec<Series>>, EvalError> {
        let Plan::Range { func, sel, range_s } = inner else {
            return Ok(None);
        };
        // The rollup pools its members' slots, so it serves a sum of
        // additive aggregates, and the extremes of the extremes.
        let servable = matches!(
            (op, func.aggregate()),
            (
                AggOp::Sum,
                Aggregate::Sum | Aggregate::Count | Aggregate::Rate
            ) | (AggOp::Min, Aggregate::Min)
                | (AggOp::Max, Aggregate::Max)
        );
        if !servable || grouping.keeps(SOURCE_LABEL) {
            return Ok(None);
        }
        let Some(res) = self.resolve(sel).await? else {
            return Ok(Some(Vec::new()));
        };
        let rollups = self.engine.rollups();
        let group = match res.source.as_slice() {
            [] => rollups.group_for(&NameMatcher::any()),
            [one] => rollups.group_for(one),
            _ => None,
        };
        let Some(group) = group.map(str::to_string) else {
            return Ok(None);
        };
        let metrics = self.metric_list(&res).await?;
        if !self.rollups.contains(&group) {
            self.rollups.push(group.clone());
        }
        if metrics.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let ids: Vec<SeriesId> = metrics.iter().map(|m| Rollups::series(&group, m)).collect();
        let grid = Grid::new(&self.times_ms, *range_s);
        let w = grid.window(self.engine)?;
        let keep_metric = grouping.keeps(TALLY_METRIC_LABEL);
        let mut groups: BTreeMap<Labels, Vec<Option<f64>>> = BTreeMap::new();
        for (b, metric) in self
            .engine
            .many_buckets(&ids, &w)
            .await?
            .into_iter()
            .zip(&metrics)
        {
            if b.buckets.is_empty() {
                continue;
            }
            if func.needs_counter() && b.kind.is_some_and(|k| !k.is_counter()) {
                return Err(EvalError::BadData(format!(
                    "{}() is for counters, and {} (Tally metric {metric:?}) is a gauge: use avg_over_time, min_over_time or max_over_time",
                    func.name(),
                    prom_name(metric),
                )));
            }
            let values = grid.values(func.aggregate(), &b.buckets);
            let mut labels = Labels::new();
            if keep_metric {
                labels.insert(TALLY_METRIC_LABEL.into(), metric.clone());
            }
            match groups.get_mut(&labels) {
                None => {
                    groups.insert(labels, values);
                }
                Some(acc) => {
                    for (a, v) in acc.iter_mut().zip(values) {
                        *a = combine(op, *a, v);
                    }
                }
            }
        }
        Ok(Some(
            groups
                .into_iter()
                .filter(|(_, v)| v.iter().any(Option::is_some))
                .map(|(labels, values)| Series { labels, values })
                .collect(),
        ))
    }
}

/// Turns a selector into engine matchers; None when no series can match
/// (a label Tally does not have, an impossible name). When the selector
/// constrains the Prometheus name, the metric matchers start with the
/// list of Tally metrics that pass every name matcher, so catalog reads
/// with them are exact.
pub async fn resolve(
    engine: &QueryEngine,
    cache: &NameCache,
    sel: &Selector,
) -> Result<Option<Resolved>, EvalError> {
    let mut res = Resolved {
        source: Vec::new(),
        metric: Vec::new(),
        names: Vec::new(),
    };
    let mut exact_name = None;
    for m in &sel.matchers {
        let matcher = m.matcher().map_err(|e| EvalError::BadData(e.to_string()))?;
        match m.label.as_str() {
            NAME_LABEL => {
                if m.op == Op::Equal {
                    exact_name = Some(m.value.as_str());
                }
                res.names.push(matcher);
            }
            SOURCE_LABEL => {
                // Not a name any source can have (rollup series included,
                // which are not listed as sources).
                if m.op == Op::Equal && validate_source(&m.value).is_err() {
                    return Ok(None);
                }
                res.source.push(matcher);
            }
            TALLY_METRIC_LABEL => {
                if m.op == Op::Equal && validate_metric(&m.value).is_err() {
                    return Ok(None);
                }
                res.metric.push(matcher);
            }
            // Series do not have this label: as in Prometheus, the matcher
            // sees the empty string.
            _ if matcher.matches("") => {}
            _ => return Ok(None),
        }
    }
    if !res.names.is_empty() {
        let listed = res
            .metric
            .iter()
            .find_map(|m| m.names().map(<[String]>::to_vec));
        let candidates = match (listed, exact_name) {
            (Some(names), _) => names,
            (None, Some(v)) if !is_mapped_name(v) => return Ok(None),
            (None, Some(v)) => match unambiguous_metric(v) {
                Some(m) => vec![m.to_string()],
                None => cache.get(engine).await?.named(v),
            },
            (None, None) => cache.get(engine).await?.metrics.keys().cloned().collect(),
        };
        let candidates: Vec<String> = candidates
            .into_iter()
            .filter(|m| all_match(&res.metric, m) && all_match(&res.names, &prom_name(m)))
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        res.metric.insert(0, list_matcher(&candidates)?);
    }
    // The engine enumerates exact selections from the first matcher.
    res.source.sort_by_key(|m| m.names().is_none());
    res.metric.sort_by_key(|m| m.names().is_none());
    Ok(Some(res))
}

/// A matcher accepting exactly `names` (at least one).
fn list_matcher(names: &[String]) -> Result<NameMatcher, EvalError> {
    match names {
        [one] => Ok(NameMatcher::exact(one)),
        _ => NameMatcher::parse_list(&names.join(","))
            .map_err(|e| EvalError::BadData(format!("metric names: {e}"))),
    }
}

/// Sum, min or max of two optional values.
fn combine(op: AggOp, a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(match op {
            AggOp::Min => a.min(b),
            AggOp::Max => a.max(b),
            _ => a + b,
        }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The windows of one range function at every evaluation time.
struct Grid {
    /// Per evaluation time, the end of its window (a minute boundary, Unix
    /// seconds); ascending.
    ends: Vec<i64>,
    range_s: i64,
    /// Width of the slots read: the widest of a day, an hour and a minute
    /// that tiles every window exactly.
    granularity: i64,
}

impl Grid {
    fn new(times_ms: &[i64], range_s: i64) -> Grid {
        let ends: Vec<i64> = times_ms
            .iter()
            .map(|t| t.div_euclid(MINUTE_S * 1000) * MINUTE_S)
            .collect();
        let granularity = [DAY_S, HOUR_S]
            .into_iter()
            .find(|g| range_s % g == 0 && ends.iter().all(|e| e.rem_euclid(*g) == 0))
            .unwrap_or(MINUTE_S);
        Grid {
            ends,
            range_s,
            granularity,
        }
    }

    /// Start of the earliest window.
    fn from(&self) -> i64 {
        self.ends.first().copied().unwrap_or(0) - self.range_s
    }

    /// End of the latest window.
    fn to(&self) -> i64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The read covering every window, in slots of the grid's granularity.
    fn window(&self, engine: &QueryEngine) -> Result<Window, EvalError> {
        let step = Step::fixed(self.granularity)?;
        engine
            .window(self.from(), self.to(), StepSpec::Fixed(step))
            .map_err(|e| match e {
                // The engine's advice is about its own step parameter.
                QueryError::Limit(_) => QueryError::Limit(format!(
                    "the windows span {} slots of {} per series; the limit is {} (query.max_points): use a shorter time range, or ranges and steps in whole hours so that hour slots serve them",
                    (self.to() - self.from()) / self.granularity,
                    step.label(),
                    engine.limits().max_points
                ))
                .into(),
                e => e.into(),
            })
    }

    /// `aggregate` of each window of `buckets` (ascending, non-empty slots).
    fn values(&self, aggregate: Aggregate, buckets: &[(i64, Slot)]) -> Vec<Option<f64>> {
        let tree = SlotTree::new(buckets.iter().map(|(_, s)| *s).collect());
        self.ends
            .iter()
            .map(|&end| {
                let lo = buckets.partition_point(|(t, _)| *t < end - self.range_s);
                let hi = buckets.partition_point(|(t, _)| *t < end);
                // Callers refuse a rate of a gauge first: what reaches here
                // is a counter, or a series of unknown kind read as one.
                aggregate.of(&tree.merged(lo, hi), self.range_s, true)
            })
            .collect()
    }
}

/// Merges of any run of slots in logarithmic time, so long windows at
/// fine steps cost the same as short ones; sums are added in a balanced
/// order, never subtracted, so no precision is lost to cancellation.
struct SlotTree {
    n: usize,
    nodes: Vec<Slot>,
}

impl SlotTree {
    fn new(slots: Vec<Slot>) -> SlotTree {
        let n = slots.len();
        let mut nodes = vec![Slot::EMPTY; n];
        nodes.extend(slots);
        for i in (1..n).rev() {
            let mut s = nodes[2 * i];
            s.merge(&nodes[2 * i + 1]);
            nodes[i] = s;
        }
        SlotTree { n, nodes }
    }

    /// The merge of slots `lo..hi`.
    fn merged(&self, lo: usize, hi: usize) -> Slot {
        let mut acc = Slot::EMPTY;
        let (mut l, mut r) = (lo + self.n, hi + self.n);
        while l < r {
            if l & 1 == 1 {
                acc.merge(&self.nodes[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                acc.merge(&self.nodes[r]);
            }
            l >>= 1;
            r >>= 1;
        }
        acc
    }
}

/// Vector-scalar and scalar-scalar arithmetic. Series lose their metric
/// name, as in Prometheus.
fn arith(op: ArithOp, l: Value, r: Value) -> Value {
    match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            Value::Scalar(a.iter().zip(&b).map(|(x, y)| op.apply(*x, *y)).collect())
        }
        (Value::Vector(v), Value::Scalar(s)) => {
            Value::Vector(map_vector(v, |x, i| op.apply(x, s[i])))
        }
        (Value::Scalar(s), Value::Vector(v)) => {
            Value::Vector(map_vector(v, |x, i| op.apply(s[i], x)))
        }
        // The planner refuses vector-vector arithmetic.
        (Value::Vector(_), Value::Vector(_)) => Value::Vector(Vec::new()),
    }
}

fn map_vector(v: Vec<Series>, f: impl Fn(f64, usize) -> f64) -> Vec<Series> {
    v.into_iter()
        .map(|mut s| {
            s.labels.remove(NAME_LABEL);
            for (i, x) in s.values.iter_mut().enumerate() {
                *x = x.map(|x| f(x, i));
            }
            s
        })
        .collect()
}

/// An aggregation across series at each time.
pub fn aggregate(
    op: AggOp,
    grouping: &Grouping,
    k: Option<f64>,
    series: Vec<Series>,
    n: usize,
) -> Vec<Series> {
    let mut groups: BTreeMap<Labels, Vec<Series>> = BTreeMap::new();
    for s in series {
        let key: Labels = s
            .labels
            .iter()
            .filter(|(l, _)| grouping.keeps(l))
            .map(|(l, v)| (l.clone(), v.clone()))
            .collect();
        groups.entry(key).or_default().push(s);
    }
    let mut out = Vec::new();
    for (labels, members) in groups {
        match op {
            AggOp::Topk | AggOp::Bottomk => {
                out.extend(select_k(op == AggOp::Topk, k.unwrap_or(0.0), members, n))
            }
            _ => {
                let values: Vec<Option<f64>> = (0..n)
                    .map(|i| {
                        let present = members.iter().filter_map(|m| m.values[i]);
                        reduce(op, present)
                    })
                    .collect();
                if values.iter().any(Option::is_some) {
                    out.push(Series { labels, values });
                }
            }
        }
    }
    out
}

fn reduce(op: AggOp, values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut count = 0usize;
    let mut acc: Option<f64> = None;
    for v in values {
        count += 1;
        acc = Some(match (op, acc) {
            (_, None) => v,
            (AggOp::Min, Some(a)) => {
                // Prometheus' min prefers any number to NaN.
                if v < a || a.is_nan() {
                    v
                } else {
                    a
                }
            }
            (AggOp::Max, Some(a)) => {
                if v > a || a.is_nan() {
                    v
                } else {
                    a
                }
            }
            (_, Some(a)) => a + v,
        });
    }
    match op {
        AggOp::Count => (count > 0).then_some(count as f64),
        AggOp::Avg => acc.map(|s| s / count as f64),
        _ => acc,
    }
}

/// topk / bottomk at each time: a member keeps its value at the times it
/// is among the k, and is left out if it never is.
fn select_k(top: bool, k: f64, members: Vec<Series>, n: usize) -> Vec<Series> {
    if k.is_nan() || k < 1.0 {
        return Vec::new();
    }
    let k = k.min(members.len() as f64) as usize;
    let picks: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            let mut order: Vec<usize> = (0..members.len())
                .filter(|&m| members[m].values[i].is_some())
                .collect();
            // NaN ranks last either way, as in Prometheus.
            let rank = |m: usize| {
                let v = members[m].values[i].unwrap_or(f64::NAN);
                match (v.is_nan(), top) {
                    (true, _) => f64::INFINITY,
                    (false, true) => -v,
                    (false, false) => v,
                }
            };
            order.sort_by(|&a, &b| rank(a).total_cmp(&rank(b)));
            order.truncate(k);
            order
        })
        .collect();
    let mut chosen = vec![vec![false; n]; members.len()];
    for (i, ms) in picks.iter().enumerate() {
        for &m in ms {
            chosen[m][i] = true;
        }
    }
    members
        .into_iter()
        .zip(chosen)
        .filter(|(_, c)| c.iter().any(|x| *x))
        .map(|(mut s, c)| {
            for (v, keep) in s.values.iter_mut().zip(c) {
                if !keep {
                    *v = None;
                }
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(values: &[f64]) -> Slot {
        let mut s = Slot::EMPTY;
        for v in values {
            s.add(*v);
        }
        s
    }

    fn series(source: &str, values: &[Option<f64>]) -> Series {
        Series {
            labels: [
                ("source".to_string(), source.to_string()),
                ("tally_metric".to_string(), "m".to_string()),
            ]
            .into_iter()
            .collect(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn windows_read_the_slots_that_end_inside_them() {
        // Minute slots at minutes 10..=14 holding 1, 2, 4, 8, 16.
        let buckets: Vec<(i64, Slot)> = (0..5)
            .map(|i| ((10 + i) * 60, slot(&[(1 << i) as f64])))
            .collect();
        // t = 13:00 (minute-aligned) and 13:30 both cover minutes 11 and 12.
        let grid = Grid::new(&[13 * 60_000, 13 * 60_000 + 30_000, 15 * 60_000], 120);
        assert_eq!(grid.granularity, MINUTE_S);
        assert_eq!((grid.from(), grid.to()), (11 * 60, 15 * 60));
        assert_eq!(
            grid.values(Aggregate::Sum, &buckets),
            vec![Some(6.0), Some(6.0), Some(24.0)]
        );
        assert_eq!(
            grid.values(Aggregate::Rate, &buckets),
            vec![Some(0.05), Some(0.05), Some(0.2)]
        );
        assert_eq!(
            grid.values(Aggregate::Count, &buckets),
            vec![Some(2.0), Some(2.0), Some(2.0)]
        );
        // Nothing before minute 10.
        let early = Grid::new(&[10 * 60_000], 60);
        assert_eq!(early.values(Aggregate::Avg, &buckets), vec![None]);
    }

    #[test]
    fn whole_hour_windows_at_whole_hours_read_hour_slots() {
        let h = 3_600_000;
        assert_eq!(Grid::new(&[5 * h, 6 * h], 3600).granularity, HOUR_S);
        assert_eq!(Grid::new(&[5 * h, 6 * h], 7200).granularity, HOUR_S);
        assert_eq!(
            Grid::new(&[5 * h, 5 * h + 60_000], 3600).granularity,
            MINUTE_S
        );
        assert_eq!(Grid::new(&[5 * h], 300).granularity, MINUTE_S);
        assert_eq!(Grid::new(&[24 * h, 48 * h], 86_400).granularity, DAY_S);
    }

    #[test]
    fn slot_tree_merges_any_run() {
        let slots: Vec<Slot> = (0..13).map(|i| slot(&[i as f64, -(i as f64)])).collect();
        let tree = SlotTree::new(slots.clone());
        for lo in 0..=13 {
            for hi in lo..=13 {
                let mut want = Slot::EMPTY;
                for s in &slots[lo..hi] {
                    want.merge(s);
                }
                assert_eq!(tree.merged(lo, hi), want, "{lo}..{hi}");
            }
        }
    }

    #[test]
    fn aggregations() {
        let v = vec![
            series("a", &[Some(1.0), None, Some(3.0)]),
            series("b", &[Some(5.0), Some(2.0), None]),
            series("c", &[Some(2.0), Some(8.0), None]),
        ];
        let all = Grouping::By(vec![]);
        let one = |op| aggregate(op, &all, None, v.clone(), 3);
        assert_eq!(
            one(AggOp::Sum)[0].values,
            [Some(8.0), Some(10.0), Some(3.0)]
        );
        assert_eq!(
            one(AggOp::Avg)[0].values,
            [Some(8.0 / 3.0), Some(5.0), Some(3.0)]
        );
        assert_eq!(one(AggOp::Min)[0].values, [Some(1.0), Some(2.0), Some(3.0)]);
        assert_eq!(one(AggOp::Max)[0].values, [Some(5.0), Some(8.0), Some(3.0)]);
        assert_eq!(
            one(AggOp::Count)[0].values,
            [Some(3.0), Some(2.0), Some(1.0)]
        );
        assert!(one(AggOp::Sum)[0].labels.is_empty());

        let by_source = aggregate(
            AggOp::Sum,
            &Grouping::By(vec!["source".into()]),
            None,
            v.clone(),
            3,
        );
        assert_eq!(by_source.len(), 3);
        assert_eq!(by_source[0].labels.len(), 1);
        let without = aggregate(
            AggOp::Max,
            &Grouping::Without(vec!["source".into()]),
            None,
            v.clone(),
            3,
        );
        assert_eq!(without.len(), 1);
        assert_eq!(
            without[0].labels.get("tally_metric").map(String::as_str),
            Some("m")
        );

        let top = aggregate(AggOp::Topk, &all, Some(1.0), v.clone(), 3);
        let got: Vec<(&str, Vec<Option<f64>>)> = top
            .iter()
            .map(|s| (s.labels["source"].as_str(), s.values.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", vec![None, None, Some(3.0)]),
                ("b", vec![Some(5.0), None, None]),
                ("c", vec![None, Some(8.0), None]),
            ]
        );
        let bottom = aggregate(AggOp::Bottomk, &all, Some(2.0), v.clone(), 3);
        assert_eq!(bottom.len(), 3);
        assert_eq!(bottom[1].values, [None, Some(2.0), None]);
        assert!(aggregate(AggOp::Topk, &all, Some(0.0), v, 3).is_empty());
    }

    #[test]
    fn arithmetic_with_numbers() {
        let v = Value::Vector(vec![series("a", &[Some(2.0), None])]);
        let Value::Vector(out) = arith(ArithOp::Div, v, Value::Scalar(vec![4.0, 4.0])) else {
            panic!()
        };
        assert_eq!(out[0].values, [Some(0.5), None]);
        let Value::Scalar(s) = arith(
            ArithOp::Sub,
            Value::Scalar(vec![1.0]),
            Value::Scalar(vec![3.0]),
        ) else {
            panic!()
        };
        assert_eq!(s, [-2.0]);
    }
}
