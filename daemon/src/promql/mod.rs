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
//! settled), then prepared before any data is read (`prepare`): its
//! aggregations that a group rollup can answer are found (`rollup`), its
//! selectors resolved to series (`select`), its cost checked against the
//! limits and the memory budget reserved (`budget`). It is then evaluated
//! (`eval`) in chunks of consecutive steps, and the chunks assembled into
//! the answer (`answer`).
//!
//! | module         | concept |
//! |----------------|---------|
//! | `plan`         | parsing, the evaluated tree and its walk |
//! | `limits`       | the query's size, bounded before and after parsing |
//! | `prepare`      | rollups, series, slot widths and admission, before any read |
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
//! | `answer`       | the answer: instant order, range chunks assembled |
//! | `held`         | results charged as they are made |
//! | `config`       | `[prometheus]` |

mod aggregate;
mod answer;
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
mod prepare;
mod range_fns;
mod rollup;
mod samples;
pub(crate) mod select;
mod value;

use std::sync::Arc;

pub use aggregate::format_value;
pub use config::PrometheusConfig;
pub use names::{LabelScheme, NameCache};
pub use plan::Ty;
pub use select::Context;
pub use value::{EvalError, Labels};

use value::EvalResult;

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
    let prepared = prepare::prepare(ctx, &plan, req).await?;
    let admitted = prepared.admitted;
    let ev = eval::Evaluator {
        ctx,
        plan: &plan,
        selected: prepared.selected,
        rollups: prepared.rollups,
        wide: prepared.wide,
        lookback_ms: req.lookback_ms,
        held: held::Held::new(
            Some(ctx.engine),
            limits.max_total_points as u64,
            admitted.held_bytes,
            budget::chunk_bytes(limits),
        ),
    };
    let data = if instant {
        answer::instant_data(&plan.root, ev.eval(&plan.root, &[req.start_ms]).await?)
    } else {
        // The answer's estimate is an upper bound: it holds to what was
        // reserved for it, which is less only when the budget is smaller
        // than the estimate.
        let held = held::Held::new(
            None,
            limits.max_total_points as u64,
            admitted.answer_bytes,
            admitted.answer_bytes,
        );
        let chunks = answer::Chunks {
            steps: prepared.steps,
            chunk: admitted.chunk,
            max_points: limits.max_total_points,
        };
        answer::range_data(&ev, &plan.root, req, chunks, &held).await?
    };
    Ok(Answer {
        data,
        rollups: prepared.rollup_groups,
        reserved: Some(Arc::new(admitted.reserved)),
    })
}

#[cfg(test)]
mod tests;
