//! PromQL over Tally's minute slots: the engine behind the
//! Prometheus-compatible API (`http::prometheus`).
//!
//! Every construct of the language is answered. Where the slots determine
//! the result (`sum_over_time` of a gauge, `increase` of a counter, an
//! aggregation, arithmetic...) it is exact; where Prometheus' definition
//! needs individual samples, it is applied to each minute's last sample
//! (or, over a subquery, to real samples). `docs/promql.md` holds the rules
//! and the table of every function. Only invalid PromQL and queries over a
//! `[query]` limit are refused.
//!
//! A query is planned (`plan`: parsed, bounded in size, modifiers
//! settled), its aggregations that a group rollup can answer are found
//! (`rollup`), its selectors resolved to series (`select`), its cost
//! checked against the limits and the memory budget reserved before any
//! data is read (`budget`), and it is then evaluated (`eval`) in chunks of
//! consecutive steps.
//!
//! | module         | concept |
//! |----------------|---------|
//! | `plan`         | parsing, size limits (`limits`), the evaluated tree |
//! | `value`        | labels, vectors, scalars, range vectors, errors |
//! | `names`        | series labels as Prometheus shows them; metric names |
//! | `select`       | selectors: series, lookback, windows, the reads |
//! | `range_fns`    | range functions from slots or per-minute samples |
//! | `samples`      | Prometheus' sample algorithms (`rate`, `deriv`...) |
//! | `instant_fns`  | functions of instant vectors and scalars |
//! | `aggregate`    | aggregation operators |
//! | `binary`       | binary operators and vector matching |
//! | `histogram`    | `histogram_quantile` of classic histograms |
//! | `rollup`       | aggregations a group rollup answers |
//! | `budget`       | cost before reading, chunks |
//! | `eval`         | evaluating the tree, a chunk of steps at a time |
//! | `held`         | results charged as they are made |
//! | `config`       | `[prometheus]` |

mod aggregate;
mod binary;
mod budget;
mod config;
mod eval;
mod held;
mod histogram;
mod instant_fns;
pub(crate) mod limits;
pub(crate) mod names;
mod plan;
mod range_fns;
mod rollup;
mod samples;
pub(crate) mod select;
mod value;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use aggregate::format_value;
pub use config::PrometheusConfig;
pub use names::{LabelScheme, NameCache};
pub use plan::Ty;
pub use select::Context;
pub use value::{EvalError, Labels};

use budget::Inputs;
use plan::{AggOp, Node};
use value::{execution, EvalResult, Value};

/// Whether `name` is a function Tally evaluates (every function of
/// Prometheus 2, and the cheap ones of Prometheus 3).
pub fn is_supported(name: &str) -> bool {
    range_fns::RangeFn::parse(name).is_some()
        || instant_fns::is_instant_fn(name)
        || matches!(name, "absent_over_time" | "histogram_quantile")
}

/// Lets the parser read `holt_winters`, Prometheus 2's name for
/// `double_exponential_smoothing`, which the parser knows only by its new
/// name.
fn register_functions() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use promql_parser::parser::function::{register_extra_functions, Function};
        use promql_parser::parser::value::ValueType;
        let holt = Function::new(
            "holt_winters",
            vec![ValueType::Matrix, ValueType::Scalar, ValueType::Scalar],
            0,
            ValueType::Vector,
            false,
        );
        if let Err(e) = register_extra_functions(vec![holt]) {
            tracing::warn!("holt_winters() is not available: {e}");
        }
    });
}

/// The default lookback delta of instant selectors.
pub const DEFAULT_LOOKBACK_MS: i64 = 300_000;

/// A query to evaluate: at one time (`step_ms == 0`, `start_ms` the time)
/// or at `start, start + step, ...` up to `end`.
#[derive(Debug, Clone)]
pub struct Request {
    pub query: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub step_ms: i64,
    pub lookback_ms: i64,
}

/// What a query answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Scalar(f64),
    String(String),
    /// An instant vector, in the order Prometheus would show it.
    Vector(Vec<(Labels, f64)>),
    /// A range query's series (sorted by labels), or an instant query's
    /// range vector: each series' points (time ms, value).
    Matrix(Vec<(Labels, Vec<(i64, f64)>)>),
}

/// An answer and what served it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub data: Data,
    /// Rollup groups read, in order of first use.
    pub rollups: Vec<String>,
    /// The query's share of the read budget, held as long as the answer
    /// is: its JSON is written after the evaluation, and takes memory too.
    pub reserved: Option<Arc<crate::query::Reservation>>,
}

/// Evaluates `req`: refuses it before reading anything when it is invalid
/// or over a limit, then evaluates it chunk by chunk within its reserved
/// share of the read budget.
pub async fn evaluate(ctx: Context<'_>, req: &Request) -> EvalResult<Answer> {
    register_functions();
    let limits = ctx.engine.limits();
    let instant = req.step_ms == 0;
    let plan = plan::plan(&req.query, limits, req.start_ms, req.end_ms)?;
    let ty = plan.root.ty();
    if !instant && matches!(ty, Ty::Matrix | Ty::String) {
        let name = if ty == Ty::Matrix {
            "range vector"
        } else {
            "string"
        };
        return Err(value::bad(format!(
            "invalid expression type \"{name}\" for range query, must be Scalar or instant Vector"
        )));
    }
    let (rollups, served) = rollup::plan_rollups(ctx, &plan).await?;
    let mut selected = Vec::with_capacity(plan.selectors.len());
    for (spec, served) in plan.selectors.iter().zip(&served) {
        selected.push(Arc::new(if *served {
            Vec::new()
        } else {
            select::resolve(ctx, spec).await?
        }));
    }
    let steps: u64 = if instant {
        1
    } else {
        ((req.end_ms - req.start_ms) / req.step_ms + 1) as u64
    };
    let wide = wide_windows(ctx, &plan, &selected).await?;
    let width_ms = slot_widths(&plan, &wide, req);
    let selector_series: Vec<usize> = selected.iter().map(|s| s.len()).collect();
    let rollup_series: Vec<Option<usize>> = rollups
        .iter()
        .map(|r| r.as_ref().map(|r| r.series.len()))
        .collect();
    let inputs = Inputs {
        selector_series: &selector_series,
        rollup_series: &rollup_series,
        width_ms: &width_ms,
        lookback_ms: req.lookback_ms,
    };
    let admitted = admit(ctx, &plan, &inputs, req, steps).await?;
    let mut rollup_groups: Vec<String> = Vec::new();
    for r in rollups.iter().flatten() {
        if !rollup_groups.contains(&r.group) {
            rollup_groups.push(r.group.clone());
        }
    }
    let ev = eval::Evaluator {
        ctx,
        plan: &plan,
        selected,
        rollups,
        wide,
        lookback_ms: req.lookback_ms,
        held: held::Held::new(
            Some(ctx.engine),
            limits.max_total_points as u64,
            admitted.held_bytes,
            budget::chunk_bytes(limits),
        ),
    };
    let data = if instant {
        instant_data(&plan.root, ev.eval(&plan.root, &[req.start_ms]).await?)
    } else {
        // The answer's estimate is an upper bound: it holds to what was
        // reserved for it, which is less only when the budget is smaller
        // than the estimate.
        let answer = held::Held::new(
            None,
            limits.max_total_points as u64,
            admitted.answer_bytes,
            admitted.answer_bytes,
        );
        let chunks = Chunks {
            steps,
            chunk: admitted.chunk,
            max_points: limits.max_total_points,
        };
        range_data(&ev, &plan.root, req, chunks, &answer).await?
    };
    Ok(Answer {
        data,
        rollups: rollup_groups,
        reserved: Some(Arc::new(admitted.reserved)),
    })
}

/// A query let in: its chunk size and its share of the read budget.
struct Admitted {
    chunk: u64,
    /// Of the reservation, what the chunk's intermediate results hold.
    held_bytes: u64,
    /// Of the reservation, what the answer may hold.
    answer_bytes: u64,
    reserved: crate::query::Reservation,
}

/// Checks the query's cost against the limits, sizes its chunks so that
/// what each holds fits its share of the budget and
/// `query.max_total_points`, and reserves their memory (and the
/// answer's) from the read budget.
async fn admit(
    ctx: Context<'_>,
    plan: &plan::Plan,
    inputs: &Inputs<'_>,
    req: &Request,
    steps: u64,
) -> EvalResult<Admitted> {
    let limits = ctx.engine.limits();
    let total = budget::cost(plan, inputs, steps, req.end_ms - req.start_ms);
    budget::check(&total, limits)?;
    let chunk = budget::chunk_steps(
        plan,
        inputs,
        steps,
        req.step_ms.max(1),
        (budget::chunk_bytes(limits), limits.max_total_points as u64),
    );
    let chunk_cost = budget::cost(
        plan,
        inputs,
        chunk,
        (chunk as i64 - 1).saturating_mul(req.step_ms),
    );
    budget::check_chunk(&chunk_cost, chunk, limits)?;
    // The answer holds at most the series present at a step, each step,
    // and no more series than points (count_values may make one a point).
    let points = total
        .answer_live
        .saturating_mul(steps)
        .min(limits.max_total_points as u64);
    let answer_bytes = points
        .saturating_mul(budget::BYTES_PER_ANSWER_POINT)
        .saturating_add(
            total
                .answer_series
                .min(points)
                .saturating_mul(budget::BYTES_PER_SERIES),
        );
    // A query estimated at more than the whole budget runs alone with all
    // of it; what it was given is what its answer may hold, besides its
    // chunks (at most their share, unless one step alone reads more).
    let reserved = ctx
        .engine
        .reserve(chunk_cost.bytes().saturating_add(answer_bytes))
        .await?;
    let chunks = chunk_cost.bytes().min(budget::chunk_bytes(limits));
    Ok(Admitted {
        chunk,
        held_bytes: chunk_cost.held_bytes(),
        answer_bytes: reserved.bytes().saturating_sub(chunks).min(answer_bytes),
        reserved,
    })
}

/// Per selector, the width of the slots its windows read: an hour or a day
/// where those tile every window and the function reads merged slots, else
/// a minute.
fn slot_widths(plan: &plan::Plan, wide: &[bool], req: &Request) -> Vec<i64> {
    (0..plan.selectors.len())
        .map(|i| match (wide[i], matrix_of(&plan.root, i)) {
            (true, Some((range_ms, mods))) => {
                // A read inside a minute is served by minutes only.
                let at = |t: i64| mods.at(t);
                let mut ends = vec![at(req.start_ms)];
                if req.step_ms > 0 && mods.at_ms.is_none() {
                    ends.push(at(req.start_ms + req.step_ms));
                }
                select::granularity(range_ms, &ends) * 1000
            }
            _ => 60_000,
        })
        .collect()
}

/// Each matrix selector's range function (`absent_over_time` reads as
/// `present_over_time`), where a function reads it.
fn range_fns_of(plan: &plan::Plan) -> Vec<Option<range_fns::RangeFn>> {
    let mut out = vec![None; plan.selectors.len()];
    let mut todo: Vec<&Node> = vec![&plan.root];
    while let Some(node) = todo.pop() {
        match node {
            Node::Call { func, args } => {
                let f = match *func {
                    "absent_over_time" => Some(range_fns::RangeFn::Present),
                    name => range_fns::RangeFn::parse(name),
                };
                for a in args {
                    if let (Some(f), Node::Matrix { sel, .. }) = (f, a.unwrapped()) {
                        out[*sel] = Some(f);
                    }
                    todo.push(a);
                }
            }
            Node::Aggregate { param, expr, .. } => {
                todo.push(expr);
                todo.extend(param.as_deref());
            }
            Node::Binary { lhs, rhs, .. } => {
                todo.push(lhs);
                todo.push(rhs);
            }
            Node::Subquery { expr, .. } | Node::Neg(expr) | Node::Invariant(expr) => {
                todo.push(expr)
            }
            _ => {}
        }
    }
    out
}

/// Per selector, whether hour and day slots may serve its windows.
async fn wide_windows(
    ctx: Context<'_>,
    plan: &plan::Plan,
    selected: &[Arc<Vec<select::Selected>>],
) -> EvalResult<Vec<bool>> {
    let mut out = Vec::with_capacity(selected.len());
    for (f, sel) in range_fns_of(plan).into_iter().zip(selected) {
        out.push(match f {
            Some(f) => select::merged_slots_serve(ctx, f, sel).await?,
            None => false,
        });
    }
    Ok(out)
}

/// The range and modifiers of matrix selector `sel`.
fn matrix_of(node: &Node, sel: usize) -> Option<(i64, plan::Mods)> {
    match node {
        Node::Matrix {
            sel: s,
            range_ms,
            mods,
        } if *s == sel => Some((*range_ms, *mods)),
        Node::Call { args, .. } => args.iter().find_map(|a| matrix_of(a, sel)),
        Node::Aggregate { param, expr, .. } => {
            matrix_of(expr, sel).or_else(|| param.as_deref().and_then(|p| matrix_of(p, sel)))
        }
        Node::Binary { lhs, rhs, .. } => matrix_of(lhs, sel).or_else(|| matrix_of(rhs, sel)),
        Node::Subquery { expr, .. } | Node::Neg(expr) | Node::Invariant(expr) => {
            matrix_of(expr, sel)
        }
        _ => None,
    }
}

/// An instant query's answer. Vectors come in label order, except where
/// the query orders them (`sort`, `topk`...), as Prometheus shows them.
fn instant_data(root: &Node, v: Value) -> Data {
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
struct Chunks {
    steps: u64,
    chunk: u64,
    /// The most points the answer may hold (`query.max_total_points`).
    max_points: usize,
}

/// Evaluates a range query chunk by chunk and assembles its series. Each
/// chunk's points and new series are counted, and charged to `answer`,
/// before they join the answer.
async fn range_data(
    ev: &eval::Evaluator<'_>,
    root: &Node,
    req: &Request,
    c: Chunks,
    answer: &held::Held<'_>,
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
                .saturating_mul(budget::BYTES_PER_ANSWER_POINT)
                .saturating_add((new_series as u64).saturating_mul(budget::BYTES_PER_SERIES)),
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

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
