//! What a query will cost, known before any data is read, and how its
//! steps are cut into chunks so that memory stays bounded whatever the
//! range.
//!
//! Once its selectors are resolved to series, the plan is walked with the
//! number of evaluation times and the span each node covers:
//! * a selector reads `series × slots` of its span (plus the lookback or
//!   its range), a subquery evaluates its expression at its aligned inner
//!   times and its range function reads `series × inner times` samples,
//!   and every node holds `series × times` values;
//! * the whole query's points read must be within `query.max_total_points`
//!   and its subqueries' inner times within `query.max_points` (what a
//!   range query's steps are limited to); the answer's points are held to
//!   `query.max_total_points` as they are assembled.
//!
//! Every node's value at time `t` depends only on data near `t` (its
//! ranges, lookback and offsets), so a range query is evaluated in chunks
//! of consecutive steps, each reading and holding only its own part: the
//! chunk is the longest run of steps whose estimate fits an eighth of the
//! read budget (`query.read_budget_bytes`), so that eight heavy queries
//! can run at once.

use super::plan::{AggOp, Grouping, Node, Plan};
use super::value::{execution, EvalResult};
use crate::query::QueryConfig;

/// The share of the read budget one chunk of a query may hold.
pub const CHUNKS_PER_BUDGET: u64 = 8;
/// The least working memory a chunk may hold, whatever the budget.
pub const MIN_CHUNK_BYTES: u64 = 4 << 20;

/// Working memory one chunk of a query may hold (bytes, estimated).
pub fn chunk_bytes(limits: &QueryConfig) -> u64 {
    (limits.read_budget_bytes / CHUNKS_PER_BUDGET).max(MIN_CHUNK_BYTES)
}
/// Estimated bytes per slot read (the slot, its time, and the per-minute
/// view functions build of it).
pub const BYTES_PER_READ_POINT: u64 = 80;
/// Estimated bytes per value a node holds (an optional number).
pub const BYTES_PER_VALUE: u64 = 16;
/// Estimated bytes per point of the answer while it is assembled and
/// written as JSON.
pub const BYTES_PER_ANSWER_POINT: u64 = 48;

/// A query's cost at some number of evaluation times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Slots read from the store and memory.
    pub read_points: u64,
    /// Values held by all nodes together.
    pub values: u64,
    /// Inner evaluation times of subqueries.
    pub subquery_times: u64,
    /// Series the root answers with (an upper bound).
    pub answer_series: u64,
}

impl Cost {
    pub fn bytes(&self) -> u64 {
        self.read_points
            .saturating_mul(BYTES_PER_READ_POINT)
            .saturating_add(self.values.saturating_mul(BYTES_PER_VALUE))
    }
}

/// What the walk knows besides the plan.
pub struct Inputs<'a> {
    /// Series of each selector (0 for those a rollup serves).
    pub selector_series: &'a [usize],
    /// Series of each aggregation's rollup read, if a rollup serves it.
    pub rollup_series: &'a [Option<usize>],
    /// Width of the slots each selector's windows read (a minute, or an
    /// hour or a day where those tile them).
    pub width_ms: &'a [i64],
    pub lookback_ms: i64,
}

/// The cost of evaluating `plan` at `n` times spanning `span_ms`.
pub fn cost(plan: &Plan, inputs: &Inputs<'_>, n: u64, span_ms: i64) -> Cost {
    let mut c = Cost::default();
    let out = walk(&plan.root, inputs, n.max(1), span_ms.max(0), &mut c);
    c.answer_series = out;
    c
}

fn slots(span_ms: i64, n: u64, window_ms: i64, width_ms: i64) -> u64 {
    // A dense run of windows reads the span; sparse ones each their own.
    let dense = (span_ms + window_ms) / width_ms + 1;
    let sparse = n.saturating_mul((window_ms / width_ms + 1) as u64);
    (dense.max(0) as u64).min(sparse)
}

/// Adds `node`'s cost to `c`; returns its series (an upper bound).
fn walk(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> u64 {
    let out = match node {
        Node::Number(_) | Node::String(_) => 1,
        Node::Invariant(inner) => return walk(inner, inp, 1, 0, c),
        Node::Selector { sel, mods } => {
            let s = inp.selector_series[*sel] as u64;
            c.read(s, fixed(*mods, n, span), inp.lookback_ms, 60_000);
            s
        }
        Node::Matrix {
            sel,
            range_ms,
            mods,
        } => {
            let s = inp.selector_series[*sel] as u64;
            let width = inp.width_ms.get(*sel).copied().unwrap_or(60_000);
            c.read(s, fixed(*mods, n, span), *range_ms, width);
            s
        }
        Node::Subquery {
            expr,
            range_ms,
            step_ms,
            mods,
        } => {
            let (n, span) = fixed(*mods, n, span);
            let inner = slots(span, n, *range_ms, *step_ms);
            c.subquery_times = c.subquery_times.saturating_add(inner);
            let s = walk(expr, inp, inner, span + range_ms, c);
            // Its results are the samples its range function reads.
            c.read_points = c.read_points.saturating_add(s.saturating_mul(inner));
            return s;
        }
        Node::Call { args, .. } => args
            .iter()
            .map(|a| walk(a, inp, n, span, c))
            .max()
            .unwrap_or(1),
        Node::Aggregate { id, .. } => match inp.rollup_series.get(*id) {
            Some(Some(rollup)) => {
                let s = *rollup as u64;
                c.read(s, (n, span), rollup_range(node), 60_000);
                s
            }
            _ => aggregation(node, inp, n, span, c),
        },
        Node::Binary { lhs, rhs, .. } => {
            let l = walk(lhs, inp, n, span, c);
            let r = walk(rhs, inp, n, span, c);
            l.max(r)
        }
        Node::Neg(inner) => walk(inner, inp, n, span, c),
    };
    c.values = c.values.saturating_add(out.saturating_mul(n));
    out
}

impl Cost {
    /// `series` reading windows of `window_ms` in slots of `width_ms` at
    /// `n` times over `span_ms`.
    fn read(&mut self, series: u64, (n, span_ms): (u64, i64), window_ms: i64, width_ms: i64) {
        let points = series.saturating_mul(slots(span_ms, n, window_ms, width_ms));
        self.read_points = self.read_points.saturating_add(points);
    }
}

/// Times and span of a node with modifiers `mods`: one time under `@`.
fn fixed(mods: super::plan::Mods, n: u64, span: i64) -> (u64, i64) {
    if mods.at_ms.is_some() {
        (1, 0)
    } else {
        (n, span)
    }
}

/// The range of the matrix selector an aggregation's rollup reads.
fn rollup_range(node: &Node) -> i64 {
    let Node::Aggregate { expr, .. } = node else {
        return 0;
    };
    match expr.unwrapped() {
        Node::Call { args, .. } => match args.first().map(Node::unwrapped) {
            Some(Node::Matrix { range_ms, .. }) => *range_ms,
            _ => 0,
        },
        _ => 0,
    }
}

/// An aggregation's cost and series: one without grouping, else at most
/// one per input series.
fn aggregation(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> u64 {
    let Node::Aggregate {
        op,
        param,
        expr,
        grouping,
        ..
    } = node
    else {
        return 0;
    };
    if let Some(p) = param {
        walk(p, inp, n, span, c);
    }
    let inner = walk(expr, inp, n, span, c);
    match (op, grouping) {
        (AggOp::Topk | AggOp::Bottomk | AggOp::CountValues, _) => inner,
        (_, Grouping::By(labels)) if labels.is_empty() => inner.min(1),
        _ => inner,
    }
}

/// Checks the whole query's cost against the limits, naming the one it
/// is over.
pub fn check(total: &Cost, limits: &QueryConfig) -> EvalResult<()> {
    let max_total = limits.max_total_points as u64;
    if total.subquery_times > limits.max_points as u64 {
        return Err(execution(format!(
            "the query's subqueries evaluate at {} times; the limit is {} (query.max_points): use a coarser subquery step or a shorter range",
            total.subquery_times, limits.max_points
        )));
    }
    if total.read_points > max_total {
        return Err(execution(format!(
            "the query reads {} points (series × minutes of their ranges); the limit is {max_total} (query.max_total_points): select fewer series, a shorter range or a coarser step",
            total.read_points
        )));
    }
    Ok(())
}

/// The most steps per chunk whose cost fits `max_bytes` (at least 1).
pub fn chunk_steps(
    plan: &Plan,
    inputs: &Inputs<'_>,
    steps: u64,
    step_ms: i64,
    max_bytes: u64,
) -> u64 {
    let fits = |k: u64| {
        let span = (k.saturating_sub(1) as i64).saturating_mul(step_ms);
        cost(plan, inputs, k, span).bytes() <= max_bytes
    };
    if fits(steps) {
        return steps.max(1);
    }
    let (mut lo, mut hi) = (1u64, steps);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::plan::plan;

    fn cost_of(q: &str, series: usize, n: u64, span: i64) -> Cost {
        let p = plan(q, &QueryConfig::default(), 0, span).unwrap();
        let sel = vec![series; p.selectors.len()];
        let rollups = vec![None; p.aggregates];
        let width = vec![60_000; p.selectors.len()];
        let inputs = Inputs {
            selector_series: &sel,
            rollup_series: &rollups,
            width_ms: &width,
            lookback_ms: 300_000,
        };
        cost(&p, &inputs, n, span)
    }

    #[test]
    fn reads_are_series_times_slots() {
        // A day of minutes at a 60 s step, 5-minute windows: the day's
        // minutes plus the first window.
        let c = cost_of("rate(x[5m])", 100, 1441, 86_400_000);
        assert_eq!(c.read_points, 100 * (1440 + 5 + 1));
        assert_eq!(c.answer_series, 100);
        // Sparse windows read only themselves.
        let c = cost_of("rate(x[5m])", 1, 30, 30 * 86_400_000);
        assert_eq!(c.read_points, 30 * 6);
        // Selectors read their lookback.
        let c = cost_of("x", 10, 1, 0);
        assert_eq!(c.read_points, 10 * 6);
        // `@` reads one window whatever the steps.
        let c = cost_of("x @ 100", 10, 1000, 1000 * 60_000);
        assert_eq!(c.read_points, 10 * 6);
    }

    #[test]
    fn hour_slots_cost_an_hour_each() {
        let p = plan("increase(x[1h])", &QueryConfig::default(), 0, 0).unwrap();
        let inputs = Inputs {
            selector_series: &[1_000],
            rollup_series: &[],
            width_ms: &[3_600_000],
            lookback_ms: 300_000,
        };
        // 30 days at a 1h step: 720 hour slots (and the first window's).
        let c = cost(&p, &inputs, 721, 720 * 3_600_000);
        assert_eq!(c.read_points, 1_000 * 722);
    }

    #[test]
    fn subqueries_count_their_inner_times() {
        let c = cost_of("max_over_time(rate(x[5m])[1h:1m])", 10, 1, 0);
        assert_eq!(c.subquery_times, 61);
        // The selector's minutes, and the subquery's 61 samples a series.
        assert_eq!(c.read_points, 10 * (60 + 5 + 1) + 10 * 61);
    }

    #[test]
    fn the_audit_query_is_over_the_limit_before_any_read() {
        let c = cost_of("avg(avg_over_time(m[1m]))", 5_000, 100_000, 99_999 * 60_000);
        let e = check(&c, &QueryConfig::default()).unwrap_err().to_string();
        assert!(e.contains("query.max_total_points"), "{e}");
        let ok = cost_of("avg(avg_over_time(m[1m]))", 5_000, 1_000, 999 * 60_000);
        check(&ok, &QueryConfig::default()).unwrap();
        assert_eq!(ok.answer_series, 1);
    }

    #[test]
    fn chunks_fit_their_budget() {
        let q = "avg(avg_over_time(m[1m]))";
        let p = plan(q, &QueryConfig::default(), 0, 0).unwrap();
        let sel = vec![5_000];
        let rollups = vec![None];
        let inputs = Inputs {
            selector_series: &sel,
            rollup_series: &rollups,
            width_ms: &[60_000],
            lookback_ms: 300_000,
        };
        let max = chunk_bytes(&QueryConfig::default());
        assert_eq!(max, 128 << 20);
        let k = chunk_steps(&p, &inputs, 100_000, 60_000, max);
        assert!(k > 1 && k < 100_000, "{k}");
        let span = (k as i64 - 1) * 60_000;
        assert!(cost(&p, &inputs, k, span).bytes() <= max);
        assert!(cost(&p, &inputs, k + 1, span + 60_000).bytes() > max);
        assert_eq!(chunk_steps(&p, &inputs, 10, 60_000, max), 10);
    }
}
