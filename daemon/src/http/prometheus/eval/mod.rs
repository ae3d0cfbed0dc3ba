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
//!
//! This module walks the plan and reads through the engine; the window
//! arithmetic is in `grid` and the arithmetic across series in `combine`,
//! both free of I/O so their rules are tested on their own.

mod combine;
mod grid;
mod value;

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::names::{
    is_mapped_name, prom_name, unambiguous_metric, NameCache, NAME_LABEL, SOURCE_LABEL,
    TALLY_METRIC_LABEL,
};
use super::plan::{AggOp, ArithOp, Grouping, Op, Plan, RangeFn, Selector};
use crate::model::{validate_metric, validate_source, SampleKind, SeriesId};
use crate::query::{Aggregate, QueryEngine, Selection};
use crate::rollup::Rollups;
use crate::selector::{all_match, all_match_labels, LabelMatcher, NameMatcher};

use combine::{aggregate, arith, combine};
use grid::Grid;
pub(crate) use value::{EvalError, Labels, Series, Value};

/// An evaluation: the engine, the times, and what the evaluation did.
pub(crate) struct Evaluator<'a> {
    engine: &'a QueryEngine,
    names: &'a NameCache,
    /// Evaluation times, Unix milliseconds, ascending.
    times_ms: Vec<i64>,
    /// Rollup groups read, in order of first use.
    pub(crate) rollups: Vec<String>,
}

/// The selection a selector stands for, ready for the engine.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) source: Vec<NameMatcher>,
    /// Tally metric matchers; those listing names come first so the engine
    /// can enumerate exact selections without the catalog.
    pub(crate) metric: Vec<NameMatcher>,
    /// Matchers on the Prometheus name.
    pub(crate) names: Vec<NameMatcher>,
    /// Matchers on the series' own labels.
    pub(crate) labels: Vec<LabelMatcher>,
}

impl<'a> Evaluator<'a> {
    pub(crate) fn new(engine: &'a QueryEngine, names: &'a NameCache, times_ms: Vec<i64>) -> Self {
        Evaluator {
            engine,
            names,
            times_ms,
            rollups: Vec::new(),
        }
    }

    pub(crate) fn times_ms(&self) -> &[i64] {
        &self.times_ms
    }

    /// Evaluates `plan` at every time.
    pub(crate) async fn eval(&mut self, plan: &Plan) -> Result<Value, EvalError> {
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
                    labels: res.labels.clone(),
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
            counters_only(func, b.kind, || {
                format!(
                    "{}{{source={:?}}} (Tally metric {:?})",
                    prom_name(&b.series.metric),
                    b.series.source,
                    b.series.metric
                )
            })?;
            let values = grid.values(func.aggregate(), &b.buckets);
            if values.iter().all(Option::is_none) {
                continue;
            }
            let mut labels = own_labels(&b.series);
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
        let series = self
            .read_rollup(op, *func, &group, &metrics, &res.labels, *range_s, grouping)
            .await?;
        Ok(Some(series))
    }

    /// `op` across the group's rollup series of `metrics` (one per label
    /// set the label matchers accept), one result per group of `grouping`.
    #[allow(clippy::too_many_arguments)]
    async fn read_rollup(
        &self,
        op: AggOp,
        func: RangeFn,
        group: &str,
        metrics: &[String],
        label_matchers: &[LabelMatcher],
        range_s: i64,
        grouping: &Grouping,
    ) -> Result<Vec<Series>, EvalError> {
        let source = Rollups::source(group);
        let max = self.engine.limits().max_fanout;
        let mut ids: Vec<SeriesId> = Vec::new();
        for m in metrics {
            let sets = self.engine.series_of(&source, m, max).await?;
            ids.extend(
                sets.into_iter()
                    .filter(|id| all_match_labels(label_matchers, &id.labels)),
            );
            if ids.len() > max {
                return Err(crate::query::QueryError::Limit(format!(
                    "the rollup of group {group:?} has more than {max} series for this selector (query.max_fanout)"
                ))
                .into());
            }
        }
        let grid = Grid::new(&self.times_ms, range_s);
        let w = grid.window(self.engine)?;
        let mut groups: BTreeMap<Labels, Vec<Option<f64>>> = BTreeMap::new();
        for b in self.engine.many_buckets(&ids, &w).await? {
            if b.buckets.is_empty() {
                continue;
            }
            let metric = &b.series.metric;
            counters_only(func, b.kind, || {
                format!("{} (Tally metric {metric:?})", prom_name(metric))
            })?;
            let values = grid.values(func.aggregate(), &b.buckets);
            let mut labels = own_labels(&b.series);
            labels.retain(|name, _| grouping.keeps(name));
            if grouping.keeps(TALLY_METRIC_LABEL) {
                labels.insert(TALLY_METRIC_LABEL.into(), metric.to_string());
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
        Ok(groups
            .into_iter()
            .filter(|(_, v)| v.iter().any(Option::is_some))
            .map(|(labels, values)| Series { labels, values })
            .collect())
    }
}

/// Turns a selector into engine matchers; None when no series can match
/// (a label Tally does not have, an impossible name). When the selector
/// constrains the Prometheus name, the metric matchers start with the
/// list of Tally metrics that pass every name matcher, so catalog reads
/// with them are exact.
pub(crate) async fn resolve(
    engine: &QueryEngine,
    cache: &NameCache,
    sel: &Selector,
) -> Result<Option<Resolved>, EvalError> {
    let mut res = Resolved {
        source: Vec::new(),
        metric: Vec::new(),
        names: Vec::new(),
        labels: Vec::new(),
    };
    let mut exact_name = None;
    for m in &sel.matchers {
        let matcher = m
            .matcher(&engine.limits().pattern_limits())
            .map_err(|e| EvalError::BadData(e.to_string()))?;
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
            // A series' own label; one without it has the empty value, as
            // in Prometheus.
            name => res.labels.push(LabelMatcher {
                name: name.to_string(),
                matcher,
            }),
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

/// A series' own labels, as PromQL labels.
fn own_labels(id: &SeriesId) -> Labels {
    id.labels.to_map()
}

/// Refuses a counter function of a gauge; `series` names the gauge.
fn counters_only(
    func: RangeFn,
    kind: Option<SampleKind>,
    series: impl FnOnce() -> String,
) -> Result<(), EvalError> {
    if func.needs_counter() && kind.is_some_and(|k| !k.is_counter()) {
        return Err(EvalError::BadData(format!(
            "{}() is for counters, and {} is a gauge: use avg_over_time, min_over_time or max_over_time",
            func.name(),
            series()
        )));
    }
    Ok(())
}

/// A matcher accepting exactly `names` (at least one).
fn list_matcher(names: &[String]) -> Result<NameMatcher, EvalError> {
    match names {
        [one] => Ok(NameMatcher::exact(one)),
        _ => {
            NameMatcher::one_of(names).map_err(|e| EvalError::BadData(format!("metric names: {e}")))
        }
    }
}
