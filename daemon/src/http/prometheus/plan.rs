//! From a PromQL syntax tree to what Tally can evaluate from its slots.
//!
//! Tally keeps per-slot summaries (count, sum, min, max per minute, hour
//! and day), not raw samples, so only expressions whose value is a function
//! of those summaries are accepted: range functions over whole minutes,
//! aggregations across series, and arithmetic with numbers. Everything else
//! is refused here, before any read, with a message naming the construct
//! and, where there is one, the expression to write instead. A refused
//! query is never answered approximately.

use std::fmt;

use promql_parser::label::{MatchOp as PromOp, Matcher};
use promql_parser::parser::{self as ast, Expr, LabelModifier};

use crate::model::MINUTE_S;
use crate::query::Aggregate;
use crate::query::QueryConfig;
use crate::selector::{MatchOp, NameMatcher, PatternLimits};

/// The range functions: each reads one slot aggregate of its window, and
/// `rate` and `increase` only of counters.
const RANGE_FNS: [(&str, Aggregate, bool); 7] = [
    ("avg_over_time", Aggregate::Avg, false),
    ("min_over_time", Aggregate::Min, false),
    ("max_over_time", Aggregate::Max, false),
    ("sum_over_time", Aggregate::Sum, false),
    ("count_over_time", Aggregate::Count, false),
    // The sum of the deltas in the window over its seconds.
    ("rate", Aggregate::Rate, true),
    // The sum of the deltas in the window.
    ("increase", Aggregate::Sum, true),
];

/// A function of the slots in a window: the slot aggregate it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RangeFn {
    name: &'static str,
    aggregate: Aggregate,
    counter_only: bool,
}

impl RangeFn {
    fn parse(name: &str) -> Option<RangeFn> {
        RANGE_FNS
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|&(name, aggregate, counter_only)| RangeFn {
                name,
                aggregate,
                counter_only,
            })
    }

    pub(crate) fn name(self) -> &'static str {
        self.name
    }

    /// What the function reads from its window's merged slot.
    pub(crate) fn aggregate(self) -> Aggregate {
        self.aggregate
    }

    pub(crate) fn needs_counter(self) -> bool {
        self.counter_only
    }
}

/// An aggregation across series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AggOp {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    Topk,
    Bottomk,
}

impl AggOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AggOp::Sum => "sum",
            AggOp::Avg => "avg",
            AggOp::Min => "min",
            AggOp::Max => "max",
            AggOp::Count => "count",
            AggOp::Topk => "topk",
            AggOp::Bottomk => "bottomk",
        }
    }
}

/// Which labels an aggregation keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Grouping {
    By(Vec<String>),
    Without(Vec<String>),
}

impl Grouping {
    /// Whether the group of a series keeps `label`.
    pub(crate) fn keeps(&self, label: &str) -> bool {
        match self {
            Grouping::By(ls) => ls.iter().any(|l| l == label),
            // `without` drops the metric name as well, as in Prometheus.
            Grouping::Without(ls) => {
                label != super::names::NAME_LABEL && !ls.iter().any(|l| l == label)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

impl ArithOp {
    pub(crate) fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            ArithOp::Add => a + b,
            ArithOp::Sub => a - b,
            ArithOp::Mul => a * b,
            ArithOp::Div => a / b,
            // Go's math.Mod, which Prometheus uses, truncates like Rust's %.
            ArithOp::Mod => a % b,
            ArithOp::Pow => a.powf(b),
        }
    }
}

/// A label matcher's comparison, with its pattern for the regex ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

/// One label matcher as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelMatch {
    pub(crate) label: String,
    pub(crate) op: Op,
    pub(crate) value: String,
}

impl LabelMatch {
    /// The matcher, with PromQL's anchored regular expressions, within
    /// `limits`.
    pub(crate) fn matcher(&self, limits: &PatternLimits) -> Result<NameMatcher, PlanError> {
        let op = match self.op {
            Op::Equal => MatchOp::Equal,
            Op::NotEqual => MatchOp::NotEqual,
            Op::Regex => MatchOp::Regex,
            Op::NotRegex => MatchOp::NotRegex,
        };
        NameMatcher::new_within(op, &self.value, limits)
            .map_err(|e| PlanError::Parse(format!("label {}: {e}", self.label)))
    }
}

/// A series selector: every matcher must accept a series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector {
    /// As written, for messages.
    pub(crate) text: String,
    pub(crate) matchers: Vec<LabelMatch>,
}

/// What to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    Number(f64),
    /// A range function of each selected series; `range_s` is a whole
    /// number of minutes.
    Range {
        func: RangeFn,
        sel: Selector,
        range_s: i64,
    },
    Aggregate {
        op: AggOp,
        grouping: Grouping,
        /// topk/bottomk's k.
        k: Option<f64>,
        inner: Box<Plan>,
    },
    /// At least one side is a number: vector-vector matching is not
    /// supported.
    Arith {
        op: ArithOp,
        lhs: Box<Plan>,
        rhs: Box<Plan>,
    },
    Neg(Box<Plan>),
}

impl Plan {
    /// Whether this evaluates to a number rather than to series.
    pub(crate) fn is_scalar(&self) -> bool {
        match self {
            Plan::Number(_) => true,
            Plan::Range { .. } | Plan::Aggregate { .. } => false,
            Plan::Arith { lhs, rhs, .. } => lhs.is_scalar() && rhs.is_scalar(),
            Plan::Neg(p) => p.is_scalar(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlanError {
    /// PromQL that does not parse.
    #[error("{0}")]
    Parse(String),
    /// Valid PromQL that Tally cannot answer exactly; the message names the
    /// construct.
    #[error("{0}")]
    Unsupported(String),
    /// A query over one of the `[query]` size limits, which it names.
    #[error(transparent)]
    TooBig(#[from] super::limits::TooBig),
}

/// Range functions, for messages.
fn supported_functions() -> String {
    RANGE_FNS.map(|(name, ..)| name).join(", ")
}

/// Parses and plans `query`, within the PromQL size limits of `limits`.
pub(crate) fn plan_within(query: &str, limits: &QueryConfig) -> Result<Plan, PlanError> {
    if query.trim().is_empty() {
        return Err(PlanError::Parse("the query is empty".into()));
    }
    // Before the parser: it recurses as deeply as the text nests.
    super::limits::check_text(query, limits)?;
    let expr = ast::parse(query).map_err(|e| PlanError::Parse(format!("parse error: {e}")))?;
    super::limits::check_expr(&expr, limits)?; // before anything recurses
    plan_expr(&expr)
}

fn unsupported(msg: impl fmt::Display) -> PlanError {
    PlanError::Unsupported(msg.to_string())
}

fn plan_expr(expr: &Expr) -> Result<Plan, PlanError> {
    match expr {
        Expr::NumberLiteral(n) => Ok(Plan::Number(n.val)),
        Expr::Paren(p) => plan_expr(&p.expr),
        Expr::Unary(u) => Ok(match plan_expr(&u.expr)? {
            Plan::Number(v) => Plan::Number(-v),
            p => Plan::Neg(Box::new(p)),
        }),
        Expr::VectorSelector(vs) => Err(unsupported(format!(
            "a bare selector (`{vs}`) asks for raw samples, which Tally does not keep (it keeps per-minute count, sum, min and max): wrap it in a range function, e.g. avg_over_time({vs}[1m]), or rate({vs}[5m]) for a counter"
        ))),
        Expr::MatrixSelector(ms) => Err(unsupported(format!(
            "a range selector (`{ms}`) on its own returns raw samples, which Tally does not keep: wrap it in one of {}",
            supported_functions()
        ))),
        Expr::Subquery(sq) => Err(unsupported(format!(
            "subqueries (`{sq}`) are not supported: use a range function over a selector, e.g. max_over_time(cpu[1h])"
        ))),
        Expr::StringLiteral(s) => Err(unsupported(format!(
            "a string literal ({s}) is not a value Tally can graph"
        ))),
        Expr::Extension(_) => Err(unsupported("this expression is not supported")),
        Expr::Call(call) => plan_call(call),
        Expr::Aggregate(agg) => plan_aggregate(agg),
        Expr::Binary(bin) => plan_binary(bin),
    }
}

fn plan_call(call: &ast::Call) -> Result<Plan, PlanError> {
    let name = call.func.name;
    let Some(func) = RangeFn::parse(name) else {
        let hint = match name {
            "irate" => ": use rate(x[5m]), the average rate over the window",
            "delta" | "idelta" | "deriv" => {
                ": for a counter use increase(x[5m]); for a gauge min_over_time/max_over_time"
            }
            "last_over_time" => {
                ": Tally keeps no last sample per minute; use avg_over_time(x[1m]) or max_over_time(x[1m])"
            }
            "histogram_quantile" | "quantile_over_time" => {
                ": Tally keeps count, sum, min and max per minute, not distributions"
            }
            _ => "",
        };
        return Err(unsupported(format!(
            "function {name}() is not supported{hint}; supported functions are {}",
            supported_functions()
        )));
    };
    let [arg] = call.args.args.as_slice() else {
        return Err(PlanError::Parse(format!(
            "{name}() takes one range selector, e.g. {name}(x[5m])"
        )));
    };
    let ms = match arg.as_ref() {
        Expr::MatrixSelector(ms) => ms,
        Expr::Subquery(sq) => {
            return Err(unsupported(format!(
                "subqueries (`{sq}`) are not supported: {name}() takes a range selector such as {name}(x[5m])"
            )))
        }
        other => {
            return Err(PlanError::Parse(format!(
                "{name}() takes a range selector such as {name}(x[5m]), got `{other}`"
            )))
        }
    };
    if let Some(offset) = &ms.vs.offset {
        return Err(unsupported(format!(
            "the offset modifier (`offset {offset}` in `{ms}`) is not supported: query the earlier range directly"
        )));
    }
    if let Some(at) = &ms.vs.at {
        return Err(unsupported(format!(
            "the @ modifier (`{at}` in `{ms}`) is not supported: query that time directly"
        )));
    }
    let range_ms = ms.range.as_millis();
    let minute_ms = MINUTE_S as u128 * 1000;
    if range_ms < minute_ms || range_ms % minute_ms != 0 {
        let minutes = range_ms.div_ceil(minute_ms).max(1);
        return Err(unsupported(format!(
            "range [{}] in `{ms}` is not a whole number of minutes: minute slots are the finest data Tally keeps; use [{minutes}m] (in Grafana, set the query's Min step to 1m)",
            display_range(range_ms)
        )));
    }
    let range_s = i64::try_from(range_ms / 1000)
        .map_err(|_| unsupported(format!("range in `{ms}` is too long")))?;
    Ok(Plan::Range {
        func,
        sel: selector(&ms.vs)?,
        range_s,
    })
}

fn display_range(ms: u128) -> String {
    let (secs, rest) = (ms / 1000, ms % 1000);
    if rest == 0 {
        format!("{secs}s")
    } else {
        format!("{ms}ms")
    }
}

pub(crate) fn selector(vs: &ast::VectorSelector) -> Result<Selector, PlanError> {
    if !vs.matchers.or_matchers.is_empty() {
        return Err(unsupported(format!(
            "`or` between label matchers (`{vs}`) is not supported: use a regular expression, e.g. source=~\"a|b\""
        )));
    }
    let mut matchers = Vec::with_capacity(vs.matchers.matchers.len() + 1);
    if let Some(name) = &vs.name {
        matchers.push(LabelMatch {
            label: super::names::NAME_LABEL.into(),
            op: Op::Equal,
            value: name.clone(),
        });
    }
    matchers.extend(vs.matchers.matchers.iter().map(label_match));
    Ok(Selector {
        text: vs.to_string(),
        matchers,
    })
}

fn label_match(m: &Matcher) -> LabelMatch {
    LabelMatch {
        label: m.name.clone(),
        op: match m.op {
            PromOp::Equal => Op::Equal,
            PromOp::NotEqual => Op::NotEqual,
            PromOp::Re(_) => Op::Regex,
            PromOp::NotRe(_) => Op::NotRegex,
        },
        value: m.value.clone(),
    }
}

fn plan_aggregate(agg: &ast::AggregateExpr) -> Result<Plan, PlanError> {
    let name = agg.op.to_string();
    let op = match name.as_str() {
        "sum" => AggOp::Sum,
        "avg" => AggOp::Avg,
        "min" => AggOp::Min,
        "max" => AggOp::Max,
        "count" => AggOp::Count,
        "topk" => AggOp::Topk,
        "bottomk" => AggOp::Bottomk,
        other => {
            return Err(unsupported(format!(
                "aggregation {other}() is not supported; supported aggregations are sum, avg, min, max, count, topk and bottomk"
            )))
        }
    };
    let grouping = match &agg.modifier {
        None => Grouping::By(Vec::new()),
        Some(LabelModifier::Include(ls)) => Grouping::By(ls.labels.clone()),
        Some(LabelModifier::Exclude(ls)) => Grouping::Without(ls.labels.clone()),
    };
    let k = match op {
        AggOp::Topk | AggOp::Bottomk => {
            let param = agg.param.as_deref().map(plan_expr).transpose()?;
            match param {
                Some(Plan::Number(k)) => Some(k),
                _ => {
                    return Err(unsupported(format!(
                        "{name}() needs a number literal as its first argument, e.g. {name}(5, …)"
                    )))
                }
            }
        }
        _ => None,
    };
    let inner = plan_expr(&agg.expr)?;
    if inner.is_scalar() {
        return Err(PlanError::Parse(format!(
            "{name}() aggregates series, not a number"
        )));
    }
    Ok(Plan::Aggregate {
        op,
        grouping,
        k,
        inner: Box::new(inner),
    })
}

fn plan_binary(bin: &ast::BinaryExpr) -> Result<Plan, PlanError> {
    let name = bin.op.to_string();
    let op = match name.as_str() {
        "+" => ArithOp::Add,
        "-" => ArithOp::Sub,
        "*" => ArithOp::Mul,
        "/" => ArithOp::Div,
        "%" => ArithOp::Mod,
        "^" => ArithOp::Pow,
        other => {
            return Err(unsupported(format!(
                "the operator `{other}` is not supported; only arithmetic (+ - * / % ^) between series and a number is"
            )))
        }
    };
    let (lhs, rhs) = (plan_expr(&bin.lhs)?, plan_expr(&bin.rhs)?);
    if !lhs.is_scalar() && !rhs.is_scalar() {
        return Err(unsupported(format!(
            "arithmetic between two sets of series (`{bin}`) is not supported; only between series and a number, e.g. rate(x[5m]) * 60"
        )));
    }
    if let (Plan::Number(a), Plan::Number(b)) = (&lhs, &rhs) {
        return Ok(Plan::Number(op.apply(*a, *b)));
    }
    Ok(Plan::Arith {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(query: &str) -> Result<Plan, PlanError> {
        plan_within(query, &QueryConfig::default())
    }

    fn err(q: &str) -> String {
        match plan(q) {
            Ok(p) => panic!("{q} planned as {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn range_functions() {
        let p = plan("avg_over_time(cpu{source=\"a\", tally_metric=~\"c.*\"}[5m])").unwrap();
        let Plan::Range { func, sel, range_s } = p else {
            panic!("{p:?}")
        };
        assert_eq!(
            (func.name(), func.aggregate(), range_s),
            ("avg_over_time", Aggregate::Avg, 300)
        );
        assert_eq!(
            sel.matchers,
            vec![
                LabelMatch {
                    label: "__name__".into(),
                    op: Op::Equal,
                    value: "cpu".into()
                },
                LabelMatch {
                    label: "source".into(),
                    op: Op::Equal,
                    value: "a".into()
                },
                LabelMatch {
                    label: "tally_metric".into(),
                    op: Op::Regex,
                    value: "c.*".into()
                },
            ]
        );
        let Plan::Range { func, range_s, .. } = plan("rate(x[1h])").unwrap() else {
            panic!("rate")
        };
        assert_eq!((func.aggregate(), range_s), (Aggregate::Rate, 3600));
        assert!(func.needs_counter());
        let Plan::Range { func, .. } = plan("increase(x[5m])").unwrap() else {
            panic!("increase")
        };
        assert_eq!(
            (func.name(), func.aggregate()),
            ("increase", Aggregate::Sum)
        );
        assert!(func.needs_counter());
    }

    #[test]
    fn aggregations_and_arithmetic() {
        let p = plan("topk(5, sum by (source) (rate(x[5m])))").unwrap();
        let Plan::Aggregate {
            op, k, ref inner, ..
        } = p
        else {
            panic!("{p:?}")
        };
        assert_eq!((op, k), (AggOp::Topk, Some(5.0)));
        assert!(matches!(
            **inner,
            Plan::Aggregate {
                op: AggOp::Sum,
                grouping: Grouping::By(ref l),
                ..
            } if l == &["source".to_string()]
        ));
        assert!(matches!(
            plan("sum without (source) (increase(x[5m]))").unwrap(),
            Plan::Aggregate {
                grouping: Grouping::Without(_),
                ..
            }
        ));
        assert!(matches!(
            plan("rate(x[5m]) * 60").unwrap(),
            Plan::Arith {
                op: ArithOp::Mul,
                ..
            }
        ));
        assert_eq!(plan("2 * (3 + 1)").unwrap(), Plan::Number(8.0));
        assert!(matches!(
            plan("-sum_over_time(x[1m])").unwrap(),
            Plan::Neg(_)
        ));
        assert!(Grouping::Without(vec!["source".into()]).keeps("tally_metric"));
        assert!(!Grouping::Without(vec!["source".into()]).keeps("__name__"));
        assert!(!Grouping::By(vec![]).keeps("source"));
    }

    #[test]
    fn unsupported_constructs_are_named() {
        let e = err("cpu");
        assert!(
            e.contains("bare selector") && e.contains("avg_over_time(cpu[1m])"),
            "{e}"
        );
        assert!(err("cpu[5m]").contains("range selector"));
        assert!(err("rate(x[5m] offset 1h)").contains("offset"));
        assert!(err("rate(x[5m] @ 1700000000)").contains("@ modifier"));
        assert!(err("max_over_time(rate(x[5m])[1h:1m])").contains("subqueries"));
        let e = err("irate(x[5m])");
        assert!(e.contains("irate()") && e.contains("use rate"), "{e}");
        assert!(err("histogram_quantile(0.9, rate(x[5m]))").contains("histogram_quantile"));
        assert!(err("quantile(0.9, rate(x[5m]))").contains("quantile()"));
        assert!(err("rate(a[5m]) / rate(b[5m])").contains("two sets of series"));
        assert!(err("rate(a[5m]) > 1").contains("`>`"));
        assert!(err("rate(a[5m]) and rate(b[5m])").contains("`and`"));
        assert!(err("rate(a[90s])").contains("whole number of minutes"));
        assert!(err("rate(a[30s])").contains("[1m]"));
        assert!(err("avg_over_time({source=\"a\" or source=\"b\"}[1m])").contains("`or`"));
        assert!(matches!(plan("rate(x)"), Err(PlanError::Parse(_))));
        assert!(matches!(plan("sum("), Err(PlanError::Parse(_))));
        assert!(matches!(plan(""), Err(PlanError::Parse(_))));
    }
}
