//! Aggregations a group rollup answers: a fleet-wide `sum`, `min` or `max`
//! of a range function read from the group's rollup series (one per metric
//! and label set) instead of every member.
//!
//! A rollup pools its members' slots, so it serves what pooling preserves
//! exactly: `sum` of `rate`, `increase` and `count_over_time` of counters
//! (their slots sum the members' increases), `sum` of `sum_over_time` and
//! `count_over_time` of gauges, `min` of `min_over_time` and `max` of
//! `max_over_time` of gauges. The aggregation must not keep the source
//! label, the selector must not name sources beyond exactly one rollup
//! group (none names the group `all`), and the catalog must know each
//! metric's kind. Anything else fans out to the members.

use super::aggregate::{aggregate, Param};
use super::held::Held;
use super::names::MetricKind;
use super::plan::{AggOp, Grouping, Mods, Node, Plan};
use super::range_fns::{self, Params, RangeFn, WindowAt};
use super::select::{self, resolve_matchers, Context, Resolved, Selected};
use super::value::{EvalResult, PointKind, Series, Value};
use crate::model::SeriesId;
use crate::query::QueryError;
use crate::rollup::Rollups;
use crate::selector::{all_match_labels, NameMatcher};

/// A rollup read planned for one aggregation.
#[derive(Debug, Clone)]
pub struct RollupRead {
    pub group: String,
    pub func: RangeFn,
    pub range_ms: i64,
    pub mods: Mods,
    /// The rollup series, shown without the source label.
    pub series: Vec<Selected>,
    /// Whether every metric is a counter (else every one is a gauge).
    pub counters: bool,
}

/// Whether the rollup of metrics of `kind` serves `op` of `f`.
fn servable(op: AggOp, f: RangeFn, kind: MetricKind) -> bool {
    matches!(
        (op, f, kind),
        (
            AggOp::Sum,
            RangeFn::Count,
            MetricKind::Gauge | MetricKind::Counter
        ) | (
            AggOp::Sum,
            RangeFn::Rate | RangeFn::Increase,
            MetricKind::Counter
        ) | (AggOp::Sum, RangeFn::Sum, MetricKind::Gauge)
            | (AggOp::Min, RangeFn::Min, MetricKind::Gauge)
            | (AggOp::Max, RangeFn::Max, MetricKind::Gauge)
    )
}

/// The rollup reads of the plan's aggregations (indexed by aggregation),
/// and which selectors they make unnecessary to resolve.
pub async fn plan_rollups(
    ctx: Context<'_>,
    plan: &Plan,
) -> EvalResult<(Vec<Option<RollupRead>>, Vec<bool>)> {
    let mut reads = vec![None; plan.aggregates];
    let mut served = vec![false; plan.selectors.len()];
    let mut walk = plan.root.walk();
    while let Some(node) = walk.next() {
        let Node::Aggregate {
            id,
            op,
            expr,
            grouping,
            ..
        } = node
        else {
            continue;
        };
        if let Some((read, sel)) = try_plan(ctx, plan, *op, grouping, expr).await? {
            reads[*id] = Some(read);
            served[sel] = true;
            walk.skip_children();
        }
    }
    Ok((reads, served))
}

async fn try_plan(
    ctx: Context<'_>,
    plan: &Plan,
    op: AggOp,
    grouping: &Grouping,
    expr: &Node,
) -> EvalResult<Option<(RollupRead, usize)>> {
    let Some((func, matrix)) = expr.call_on_matrix() else {
        return Ok(None);
    };
    let Some(f) = RangeFn::parse(func) else {
        return Ok(None);
    };
    let spec = &plan.selectors[matrix.sel];
    let rollups = ctx.engine.rollups();
    if !rollups.is_enabled()
        || !spec.alternatives.is_empty()
        || grouping.keeps(ctx.scheme.source_label())
        || !matches!(op, AggOp::Sum | AggOp::Min | AggOp::Max)
    {
        return Ok(None);
    }
    let Some(res) = resolve_matchers(ctx, &spec.matchers).await? else {
        return Ok(None);
    };
    let group = match res.source.as_slice() {
        [] => rollups.group_for(&NameMatcher::any()),
        [one] => rollups.group_for(one),
        _ => None,
    };
    let Some(group) = group.map(str::to_string) else {
        return Ok(None);
    };
    let names = ctx.names.get(ctx.engine).await?;
    let metrics: Vec<(&String, MetricKind)> = names
        .metrics
        .iter()
        .filter(|(m, _)| res.metric_ok(m))
        .map(|(m, k)| (m, *k))
        .collect();
    if metrics.is_empty() {
        return Ok(None);
    }
    let counters = metrics[0].1 == MetricKind::Counter;
    if !metrics
        .iter()
        .all(|(_, k)| servable(op, f, *k) && (*k == MetricKind::Counter) == counters)
    {
        return Ok(None);
    }
    let series = group_series(ctx, &group, &metrics, &res, &spec.text).await?;
    Ok(Some((
        RollupRead {
            group,
            func: f,
            range_ms: matrix.range_ms,
            mods: matrix.mods,
            series,
            counters,
        },
        matrix.sel,
    )))
}

/// The rollup series of `group` for `metrics` that `res`'s labels select,
/// shown without the source label; more than `query.max_fanout` of them
/// is refused.
async fn group_series(
    ctx: Context<'_>,
    group: &str,
    metrics: &[(&String, MetricKind)],
    res: &Resolved,
    selector: &str,
) -> EvalResult<Vec<Selected>> {
    let source = Rollups::source(group);
    let max = ctx.engine.limits().max_fanout;
    let mut series: Vec<Selected> = Vec::new();
    for (m, _) in metrics {
        let ids: Vec<SeriesId> = ctx.engine.series_of(&source, m, max).await?;
        for id in ids
            .into_iter()
            .filter(|id| all_match_labels(&res.labels, &id.labels))
        {
            let mut labels = ctx.scheme.labels_of(&id.source, &id.metric, &id.labels);
            labels.remove(ctx.scheme.source_label());
            series.push(Selected { id, labels });
        }
        if series.len() > max {
            return Err(QueryError::Limit(format!(
                "the rollup of group {group:?} has more than {max} series for {} (query.max_fanout)",
                selector
            ))
            .into());
        }
    }
    Ok(series)
}

impl RollupRead {
    /// `op` by `grouping` of the function of the rollup series at `times`.
    pub async fn eval(
        &self,
        ctx: Context<'_>,
        op: AggOp,
        grouping: &Grouping,
        times: &[i64],
        held: &Held<'_>,
    ) -> EvalResult<Value> {
        // Read times: a read inside a minute reads that minute too.
        let mut ends: Vec<i64> = times.iter().map(|&t| self.mods.at(t)).collect();
        ends.dedup();
        // Every function served is one of merged slots: wide slots serve
        // it where they tile the windows.
        let g = select::granularity(self.range_ms, &ends);
        let data = select::range(ctx, &self.series, &ends, self.range_ms, g).await?;
        let mut out = Vec::with_capacity(data.len());
        for mut rs in data {
            // The rollup's own kind is its members'.
            if rs.kind == PointKind::Gauge && self.counters {
                rs.kind = PointKind::Delta;
            }
            let reads: Vec<i64> = times.iter().map(|&t| self.mods.at(t)).collect();
            let wins: Vec<WindowAt> = range_fns::windows(&rs, &reads, self.range_ms);
            let values = range_fns::apply(
                self.func,
                &rs,
                &wins,
                times,
                self.range_ms,
                &Params::default(),
            )?;
            let labels = if self.func.keeps_name() {
                rs.labels.clone()
            } else {
                rs.labels.clone().without_name()
            };
            out.push(Series { labels, values });
        }
        Ok(Value::Vector(aggregate(
            op,
            grouping,
            &Param::None,
            out,
            times.len(),
            held,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_pooled_slots_answer() {
        use AggOp::*;
        use MetricKind::*;
        assert!(servable(Sum, RangeFn::Rate, Counter));
        assert!(servable(Sum, RangeFn::Increase, Counter));
        assert!(servable(Sum, RangeFn::Count, Gauge));
        assert!(servable(Sum, RangeFn::Sum, Gauge));
        assert!(servable(Min, RangeFn::Min, Gauge));
        assert!(servable(Max, RangeFn::Max, Gauge));
        // A gauge's rate reads samples; a counter's sum_over_time its raw
        // values: neither pools.
        assert!(!servable(Sum, RangeFn::Rate, Gauge));
        assert!(!servable(Sum, RangeFn::Sum, Counter));
        assert!(!servable(Max, RangeFn::Min, Gauge));
        assert!(!servable(Avg, RangeFn::Avg, Gauge));
        assert!(!servable(Sum, RangeFn::Rate, Mixed));
    }
}
