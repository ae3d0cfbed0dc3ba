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

use super::plan::{AggOp, BinOp, Grouping, Mods, Node, Plan};
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
/// written as JSON: the point (16 bytes, up to as much again while its
/// series' vector grows) and its text (up to 40 bytes with fractional
/// times, up to twice that while the string grows, once more as the
/// response's envelope is written around it, and that copy outlives the
/// reservation while it is sent). Measured: an answer of 2.2 million
/// points at one-second steps, 37 bytes of text each, added 90 bytes a
/// point to the resident memory.
pub const BYTES_PER_ANSWER_POINT: u64 = 128;

/// Estimated bytes per series a node holds besides its values: a label
/// set of its own, as most nodes make one (dropping the metric name,
/// `count_values`' new label, matching): the map's node, with room for
/// eleven labels, its `Arc` and its strings' allocations.
pub const BYTES_PER_SERIES: u64 = 768;

/// A query's cost at some number of evaluation times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Slots read from the store and memory.
    pub read_points: u64,
    /// Values held by all nodes together.
    pub values: u64,
    /// Series held by all nodes together.
    pub series: u64,
    /// Inner evaluation times of subqueries.
    pub subquery_times: u64,
    /// Series the root answers with (an upper bound).
    pub answer_series: u64,
    /// Series the root answers with at any one time (an upper bound): the
    /// answer holds at most this many points a step.
    pub answer_live: u64,
}

impl Cost {
    pub fn bytes(&self) -> u64 {
        self.read_points
            .saturating_mul(BYTES_PER_READ_POINT)
            .saturating_add(self.held_bytes())
    }

    /// Bytes of the values and series all nodes hold (the reads aside).
    pub fn held_bytes(&self) -> u64 {
        self.values
            .saturating_mul(BYTES_PER_VALUE)
            .saturating_add(self.series.saturating_mul(BYTES_PER_SERIES))
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

/// The series a node's value holds over all its evaluation times, and
/// the most of them present at any one time (both upper bounds). They
/// differ where a node makes new series as time goes: `count_values`
/// makes one per value seen, so over `n` times it may hold `live × n`
/// series, each with a value slot at every time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Shape {
    series: u64,
    live: u64,
}

impl Shape {
    fn of(series: u64) -> Shape {
        Shape {
            series,
            live: series,
        }
    }

    fn max(self, o: Shape) -> Shape {
        Shape {
            series: self.series.max(o.series),
            live: self.live.max(o.live),
        }
    }

    fn plus(self, o: Shape) -> Shape {
        Shape {
            series: self.series.saturating_add(o.series),
            live: self.live.saturating_add(o.live),
        }
    }

    /// At least one series (`absent`, `vector`, `scalar` answer one
    /// whatever their argument holds).
    fn at_least_one(self) -> Shape {
        self.max(Shape::of(1))
    }
}

/// The cost of evaluating `plan` at `n` times spanning `span_ms`.
pub fn cost(plan: &Plan, inputs: &Inputs<'_>, n: u64, span_ms: i64) -> Cost {
    let mut c = Cost::default();
    let out = walk(&plan.root, inputs, n.max(1), span_ms.max(0), &mut c);
    c.answer_series = out.series;
    c.answer_live = out.live;
    c
}

fn slots(span_ms: i64, n: u64, window_ms: i64, width_ms: i64) -> u64 {
    // A dense run of windows reads the span; sparse ones each their own.
    let dense = (span_ms + window_ms) / width_ms + 1;
    let sparse = n.saturating_mul((window_ms / width_ms + 1) as u64);
    (dense.max(0) as u64).min(sparse)
}

/// Adds `node`'s cost to `c`; returns its shape.
fn walk(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> Shape {
    let out = match node {
        Node::Number(_) | Node::String(_) => Shape::of(1),
        Node::Invariant(inner) => {
            // Evaluated once, then repeated at every time.
            let once = walk(inner, inp, 1, 0, c);
            c.hold(once, n);
            return once;
        }
        Node::Selector { sel, mods } => {
            let s = inp.selector_series[*sel] as u64;
            c.read(s, fixed(*mods, n, span), inp.lookback_ms, 60_000);
            Shape::of(s)
        }
        Node::Matrix {
            sel,
            range_ms,
            mods,
        } => {
            let s = inp.selector_series[*sel] as u64;
            let width = inp.width_ms.get(*sel).copied().unwrap_or(60_000);
            c.read(s, fixed(*mods, n, span), *range_ms, width);
            Shape::of(s)
        }
        Node::Subquery { .. } => return subquery(node, inp, n, span, c),
        Node::Call { func, args } => {
            let s = widest(node, inp, n, span, c);
            match *func {
                "absent" | "absent_over_time" | "vector" | "scalar" => s.at_least_one(),
                _ if args.is_empty() => Shape::of(1),
                _ => s,
            }
        }
        Node::Aggregate { id, .. } => match inp.rollup_series.get(*id) {
            Some(Some(rollup)) => {
                let s = *rollup as u64;
                c.read(s, (n, span), rollup_range(node), 60_000);
                Shape::of(s)
            }
            _ => aggregation(node, inp, n, span, c),
        },
        Node::Binary { op, lhs, rhs, .. } => {
            let l = walk(lhs, inp, n, span, c);
            let r = walk(rhs, inp, n, span, c);
            match op {
                // `or` keeps the left side and adds the right's unmatched.
                BinOp::Or => l.plus(r),
                BinOp::And | BinOp::Unless => l,
                // A matched pair per series of the larger side: what a
                // match without label churn makes. More (a "one" side
                // whose series change over the range) is charged when it
                // happens (`Held`).
                _ => l.max(r),
            }
        }
        Node::Neg(_) => widest(node, inp, n, span, c),
    };
    c.hold(out, n);
    out
}

/// The widest shape of `node`'s children, their costs added to `c`.
fn widest(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> Shape {
    node.children()
        .into_iter()
        .map(|a| walk(a, inp, n, span, c))
        .fold(Shape::default(), Shape::max)
}

/// A subquery evaluates its expression at its own inner times, and its
/// results are the samples its range function reads.
fn subquery(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> Shape {
    let Node::Subquery {
        expr,
        range_ms,
        step_ms,
        mods,
    } = node
    else {
        return Shape::default();
    };
    let (n, span) = fixed(*mods, n, span);
    let inner = slots(span, n, *range_ms, *step_ms);
    c.subquery_times = c.subquery_times.saturating_add(inner);
    let s = walk(expr, inp, inner, span + range_ms, c);
    c.read_points = c.read_points.saturating_add(s.series.saturating_mul(inner));
    s
}

impl Cost {
    /// `series` reading windows of `window_ms` in slots of `width_ms` at
    /// `n` times over `span_ms`.
    fn read(&mut self, series: u64, (n, span_ms): (u64, i64), window_ms: i64, width_ms: i64) {
        let points = series.saturating_mul(slots(span_ms, n, window_ms, width_ms));
        self.read_points = self.read_points.saturating_add(points);
    }

    /// A node's value: a slot per series and time.
    fn hold(&mut self, shape: Shape, n: u64) {
        self.values = self.values.saturating_add(shape.series.saturating_mul(n));
        self.series = self.series.saturating_add(shape.series);
    }
}

/// Times and span of a node with modifiers `mods`: one time under `@`.
fn fixed(mods: Mods, n: u64, span: i64) -> (u64, i64) {
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
    expr.call_on_matrix().map_or(0, |(_, m)| m.range_ms)
}

/// An aggregation's cost and shape: one series without grouping, else at
/// most one per input series; `count_values` one per input series and
/// value, which over `n` times is up to `n` times its input's series.
fn aggregation(node: &Node, inp: &Inputs<'_>, n: u64, span: i64, c: &mut Cost) -> Shape {
    let Node::Aggregate {
        op,
        param,
        expr,
        grouping,
        ..
    } = node
    else {
        return Shape::default();
    };
    if let Some(p) = param {
        walk(p, inp, n, span, c);
    }
    let inner = walk(expr, inp, n, span, c);
    match (op, grouping) {
        (AggOp::CountValues, _) => Shape {
            series: inner.live.saturating_mul(n),
            live: inner.live,
        },
        (AggOp::Topk | AggOp::Bottomk, _) => inner,
        (_, Grouping::By(labels)) if labels.is_empty() => Shape {
            series: inner.series.min(1),
            live: inner.live.min(1),
        },
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

/// Checks what one chunk of `steps` steps holds: its intermediate results
/// together must be within `query.max_total_points` (series × times).
/// Chunks are cut to fit, so only a query that holds too much at a single
/// step (a `count_values` inside a long, fine subquery) fails here.
pub fn check_chunk(chunk: &Cost, steps: u64, limits: &QueryConfig) -> EvalResult<()> {
    let max_total = limits.max_total_points as u64;
    if chunk.values > max_total {
        return Err(execution(format!(
            "the query's intermediate results hold up to {} points (series × times) over {steps} step(s); the limit is {max_total} (query.max_total_points): select fewer series, a shorter or coarser subquery, or a coarser step",
            chunk.values
        )));
    }
    Ok(())
}

/// The most steps per chunk whose cost fits `max_bytes` and whose
/// intermediate results hold at most `max_values` (at least 1).
pub fn chunk_steps(
    plan: &Plan,
    inputs: &Inputs<'_>,
    steps: u64,
    step_ms: i64,
    (max_bytes, max_values): (u64, u64),
) -> u64 {
    let fits = |k: u64| {
        let span = (k.saturating_sub(1) as i64).saturating_mul(step_ms);
        let c = cost(plan, inputs, k, span);
        c.bytes() <= max_bytes && c.values <= max_values
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
        let k = chunk_steps(&p, &inputs, 100_000, 60_000, (max, u64::MAX));
        assert!(k > 1 && k < 100_000, "{k}");
        let span = (k as i64 - 1) * 60_000;
        assert!(cost(&p, &inputs, k, span).bytes() <= max);
        assert!(cost(&p, &inputs, k + 1, span + 60_000).bytes() > max);
        assert_eq!(chunk_steps(&p, &inputs, 10, 60_000, (max, u64::MAX)), 10);
    }

    #[test]
    fn count_values_may_make_a_series_per_value_and_time() {
        // 300 series, 600 steps: up to 180,000 series of 600 slots each.
        let c = cost_of("count_values(\"v\", x)", 300, 600, 599 * 60_000);
        assert_eq!(c.answer_series, 300 * 600);
        assert_eq!(c.answer_live, 300);
        assert!(c.values >= 300 * 600 * 600, "{}", c.values);
        // Chunks shrink until what they hold fits: quadratically, as a
        // chunk of k steps may hold 300 × k series of k slots.
        let p = plan("count_values(\"v\", x)", &QueryConfig::default(), 0, 0).unwrap();
        let inputs = Inputs {
            selector_series: &[300],
            rollup_series: &[None],
            width_ms: &[60_000],
            lookback_ms: 300_000,
        };
        let limits = QueryConfig {
            read_budget_bytes: 256 << 20,
            ..QueryConfig::default()
        };
        let max = (chunk_bytes(&limits), limits.max_total_points as u64);
        let k = chunk_steps(&p, &inputs, 600, 60_000, max);
        assert!(k > 1 && k < 600, "{k}");
        let chunk = cost(&p, &inputs, k, (k as i64 - 1) * 60_000);
        assert!(chunk.bytes() <= max.0);
        check_chunk(&chunk, k, &limits).unwrap();
    }

    #[test]
    fn what_a_chunk_holds_is_bounded_by_max_total_points() {
        // A count_values inside a day of one-second subquery steps holds
        // 1,000 × 86,401² values at a single step: refused before reading.
        let q = "max_over_time(count_values(\"v\", x)[1d:1s])";
        let c = cost_of(q, 1_000, 1, 0);
        let e = check_chunk(&c, 1, &QueryConfig::default()).unwrap_err();
        assert!(e.to_string().contains("query.max_total_points"), "{e}");
        // Ordinary queries hold their series once per time.
        let c = cost_of(
            "sum by (a) (rate(x[5m])) / on (a) group_left count by (a) (x)",
            1_000,
            1,
            0,
        );
        check_chunk(&c, 1, &QueryConfig::default()).unwrap();
        assert!(c.values < 10_000, "{}", c.values);
    }

    #[test]
    fn or_holds_both_sides_and_invariants_every_time() {
        let c = cost_of("x or y", 10, 1, 0);
        assert_eq!(c.answer_series, 20);
        // Evaluated once, held at each of the 100 times.
        let c = cost_of("x @ 100", 10, 100, 99 * 60_000);
        assert!(c.values >= 10 * 100, "{}", c.values);
        // absent() answers one series even of nothing.
        let c = cost_of("absent(x)", 0, 1, 0);
        assert_eq!(c.answer_series, 1);
    }
}
