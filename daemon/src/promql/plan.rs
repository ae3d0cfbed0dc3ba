//! From PromQL text to the tree the evaluator walks.
//!
//! `promql-parser` parses and type-checks; this module bounds the query's
//! size first (see `limits`), then rewrites the syntax tree into [`Node`]s
//! with everything the evaluation needs settled once: `@ start()` and
//! `@ end()` as times, offsets and ranges in milliseconds, a matrix
//! selector's range rounded to whole minutes, selectors numbered so they
//! can be resolved to series (and costed) before any data is read, and
//! step-invariant subtrees marked so they are evaluated once rather than
//! at every step (as Prometheus does).

use std::time::{Duration, SystemTime};

use promql_parser::label::Matcher;
use promql_parser::parser::{
    self as ast, AtModifier, BinModifier, Expr, LabelModifier, Offset, VectorMatchCardinality,
};

use super::limits;
use super::value::{bad, EvalError, EvalResult};
use crate::query::QueryConfig;

const MINUTE_MS: i64 = 60_000;

/// The subquery step when none is written: Prometheus' default
/// evaluation interval.
pub const DEFAULT_SUBQUERY_STEP_MS: i64 = 60_000;

/// A range rounded to the minute slots that serve it: to the nearest whole
/// minute (half a minute rounds up), and at least one minute. `[90s]` is
/// two minutes, `[75s]` and `[30s]` one.
pub fn round_range_ms(range_ms: i64) -> i64 {
    ((range_ms + MINUTE_MS / 2) / MINUTE_MS).max(1) * MINUTE_MS
}

/// What a node evaluates to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Scalar,
    Vector,
    Matrix,
    String,
}

/// Time modifiers of a selector or subquery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mods {
    pub offset_ms: i64,
    /// `@`: the one time it is evaluated at, whatever the step.
    pub at_ms: Option<i64>,
}

impl Mods {
    /// The time a node with these modifiers reads at, for evaluation time `t`.
    pub fn at(&self, t: i64) -> i64 {
        self.at_ms.unwrap_or(t) - self.offset_ms
    }
}

/// An aggregation operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggOp {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    Group,
    Stddev,
    Stdvar,
    Topk,
    Bottomk,
    Quantile,
    CountValues,
    Limitk,
    LimitRatio,
}

impl AggOp {
    fn parse(name: &str) -> Option<AggOp> {
        Some(match name {
            "sum" => AggOp::Sum,
            "avg" => AggOp::Avg,
            "min" => AggOp::Min,
            "max" => AggOp::Max,
            "count" => AggOp::Count,
            "group" => AggOp::Group,
            "stddev" => AggOp::Stddev,
            "stdvar" => AggOp::Stdvar,
            "topk" => AggOp::Topk,
            "bottomk" => AggOp::Bottomk,
            "quantile" => AggOp::Quantile,
            "count_values" => AggOp::CountValues,
            "limitk" => AggOp::Limitk,
            "limit_ratio" => AggOp::LimitRatio,
            _ => return None,
        })
    }
}

/// Which labels an aggregation keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grouping {
    By(Vec<String>),
    Without(Vec<String>),
}

impl Grouping {
    /// Whether a group keeps `label`.
    pub fn keeps(&self, label: &str) -> bool {
        match self {
            Grouping::By(ls) => ls.iter().any(|l| l == label),
            // `without` drops the metric name as well, as in Prometheus.
            Grouping::Without(ls) => {
                label != super::value::NAME_LABEL && !ls.iter().any(|l| l == label)
            }
        }
    }
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Atan2,
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    And,
    Or,
    Unless,
}

impl BinOp {
    fn parse(s: &str) -> Option<BinOp> {
        Some(match s {
            "+" => BinOp::Add,
            "-" => BinOp::Sub,
            "*" => BinOp::Mul,
            "/" => BinOp::Div,
            "%" => BinOp::Mod,
            "^" => BinOp::Pow,
            "atan2" => BinOp::Atan2,
            "==" => BinOp::Eq,
            "!=" => BinOp::Ne,
            ">" => BinOp::Gt,
            "<" => BinOp::Lt,
            ">=" => BinOp::Ge,
            "<=" => BinOp::Le,
            "and" => BinOp::And,
            "or" => BinOp::Or,
            "unless" => BinOp::Unless,
            _ => return None,
        })
    }

    /// The operator of two numbers; comparisons give 1 or 0 (scalars
    /// compare only with `bool`), set operators NaN (they take vectors).
    pub fn apply(self, a: f64, b: f64) -> f64 {
        let bool_of = |x: bool| if x { 1.0 } else { 0.0 };
        match self {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            // Go's math.Mod, which Prometheus uses, truncates like Rust's %.
            BinOp::Mod => a % b,
            BinOp::Pow => a.powf(b),
            BinOp::Atan2 => a.atan2(b),
            BinOp::Eq => bool_of(a == b),
            BinOp::Ne => bool_of(a != b),
            BinOp::Gt => bool_of(a > b),
            BinOp::Lt => bool_of(a < b),
            BinOp::Ge => bool_of(a >= b),
            BinOp::Le => bool_of(a <= b),
            BinOp::And | BinOp::Or | BinOp::Unless => f64::NAN,
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Lt | BinOp::Ge | BinOp::Le
        )
    }

    pub fn is_set(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Unless)
    }

    /// Arithmetic drops the metric name; comparisons keep it. So does
    /// `atan2`: Prometheus 2 drops it only for `+ - * / % ^`, so the
    /// result keeps the name of the side whose labels it keeps (the left,
    /// or the right under `group_right`).
    pub fn drops_name(self) -> bool {
        matches!(
            self,
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Pow
        )
    }
}

/// Vector matching of a binary operator between two vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matching {
    pub card: Card,
    /// `on(...)` rather than `ignoring(...)`.
    pub on: bool,
    pub labels: Vec<String>,
    /// `group_left(...)`/`group_right(...)`'s labels from the "one" side.
    pub include: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    OneToOne,
    ManyToOne,
    OneToMany,
    ManyToMany,
}

/// A selector as written: resolved to series before evaluation.
#[derive(Debug, Clone)]
pub struct SelectorSpec {
    /// As written, for messages.
    pub text: String,
    /// Matchers ANDed (the metric name included as `__name__`)...
    pub matchers: Vec<Matcher>,
    /// ...or, when `or` is used between matchers, each alternative.
    pub alternatives: Vec<Vec<Matcher>>,
    /// Under an aggregation: the fan-out limit applies, not the response's.
    pub fan_out: bool,
}

/// The tree the evaluator walks.
#[derive(Debug, Clone)]
pub enum Node {
    Number(f64),
    String(String),
    /// An instant vector selector; `sel` indexes [`Plan::selectors`].
    Selector {
        sel: usize,
        mods: Mods,
    },
    /// A matrix selector; `range_ms` rounded to whole minutes.
    Matrix {
        sel: usize,
        range_ms: i64,
        mods: Mods,
    },
    Subquery {
        expr: Box<Node>,
        range_ms: i64,
        step_ms: i64,
        mods: Mods,
    },
    Call {
        func: &'static str,
        args: Vec<Node>,
    },
    Aggregate {
        /// Indexes the evaluator's per-aggregation state (rollups).
        id: usize,
        op: AggOp,
        param: Option<Box<Node>>,
        expr: Box<Node>,
        grouping: Grouping,
    },
    Binary {
        op: BinOp,
        lhs: Box<Node>,
        rhs: Box<Node>,
        /// Only between two vectors.
        matching: Option<Matching>,
        return_bool: bool,
    },
    Neg(Box<Node>),
    /// Its value does not depend on the evaluation time (every selector in
    /// it has `@`): evaluated once and repeated.
    Invariant(Box<Node>),
}

impl Node {
    pub fn ty(&self) -> Ty {
        match self {
            Node::Number(_) => Ty::Scalar,
            Node::String(_) => Ty::String,
            Node::Selector { .. } | Node::Aggregate { .. } => Ty::Vector,
            Node::Matrix { .. } | Node::Subquery { .. } => Ty::Matrix,
            Node::Call { func, .. } => match *func {
                "time" | "scalar" | "pi" => Ty::Scalar,
                _ => Ty::Vector,
            },
            Node::Binary { lhs, rhs, .. } => {
                if lhs.ty() == Ty::Scalar && rhs.ty() == Ty::Scalar {
                    Ty::Scalar
                } else {
                    Ty::Vector
                }
            }
            Node::Neg(n) | Node::Invariant(n) => n.ty(),
        }
    }

    /// The node under any `Invariant` marks.
    pub fn unwrapped(&self) -> &Node {
        match self {
            Node::Invariant(n) => n.unwrapped(),
            n => n,
        }
    }
}

/// A planned query.
#[derive(Debug, Clone)]
pub struct Plan {
    pub root: Node,
    pub selectors: Vec<SelectorSpec>,
    /// Number of aggregation nodes.
    pub aggregates: usize,
}

/// Parses and plans `query` for evaluation between `start_ms` and `end_ms`
/// (`@ start()` and `@ end()`), within the size limits of `limits`.
pub fn plan(query: &str, limits_cfg: &QueryConfig, start_ms: i64, end_ms: i64) -> EvalResult<Plan> {
    if query.trim().is_empty() {
        return Err(bad("invalid parameter \"query\": the query is empty"));
    }
    // Before the parser: it recurses as deeply as the text nests.
    limits::check_text(query, limits_cfg).map_err(|e| bad(e.to_string()))?;
    let expr = ast::parse(query).map_err(|e| bad(format!("invalid parameter \"query\": {e}")))?;
    limits::check_expr(&expr, limits_cfg).map_err(|e| bad(e.to_string()))?;
    let mut b = Builder {
        start_ms,
        end_ms,
        selectors: Vec::new(),
        aggregates: 0,
    };
    let root = b.node(&expr, false)?;
    let root = b.mark_invariant(root);
    Ok(Plan {
        root,
        selectors: b.selectors,
        aggregates: b.aggregates,
    })
}

struct Builder {
    start_ms: i64,
    end_ms: i64,
    selectors: Vec<SelectorSpec>,
    aggregates: usize,
}

fn millis(d: &Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

fn system_ms(t: &SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => millis(&d),
        Err(e) => -millis(&e.duration()),
    }
}

impl Builder {
    fn mods(&self, offset: &Option<Offset>, at: &Option<AtModifier>) -> Mods {
        Mods {
            offset_ms: match offset {
                None => 0,
                Some(Offset::Pos(d)) => millis(d),
                Some(Offset::Neg(d)) => -millis(d),
            },
            at_ms: at.as_ref().map(|a| match a {
                AtModifier::Start => self.start_ms,
                AtModifier::End => self.end_ms,
                AtModifier::At(t) => system_ms(t),
            }),
        }
    }

    fn selector(&mut self, vs: &ast::VectorSelector, fan_out: bool) -> usize {
        let mut matchers = vs.matchers.matchers.clone();
        let mut alternatives = vs.matchers.or_matchers.clone();
        if let Some(name) = &vs.name {
            let m = Matcher::new(promql_parser::label::MatchOp::Equal, "__name__", name);
            matchers.push(m.clone());
            for alt in &mut alternatives {
                alt.push(m.clone());
            }
        }
        self.selectors.push(SelectorSpec {
            text: vs.to_string(),
            matchers,
            alternatives,
            fan_out,
        });
        self.selectors.len() - 1
    }

    fn node(&mut self, expr: &Expr, fan_out: bool) -> EvalResult<Node> {
        Ok(match expr {
            Expr::NumberLiteral(n) => Node::Number(n.val),
            Expr::StringLiteral(s) => Node::String(s.val.clone()),
            Expr::Paren(p) => self.node(&p.expr, fan_out)?,
            Expr::Unary(u) => match self.node(&u.expr, fan_out)? {
                Node::Number(v) => Node::Number(-v),
                n => Node::Neg(Box::new(n)),
            },
            Expr::VectorSelector(vs) => Node::Selector {
                mods: self.mods(&vs.offset, &vs.at),
                sel: self.selector(vs, fan_out),
            },
            Expr::MatrixSelector(ms) => Node::Matrix {
                mods: self.mods(&ms.vs.offset, &ms.vs.at),
                range_ms: round_range_ms(millis(&ms.range)),
                sel: self.selector(&ms.vs, fan_out),
            },
            Expr::Subquery(sq) => {
                let step_ms = sq.step.as_ref().map_or(DEFAULT_SUBQUERY_STEP_MS, millis);
                if step_ms <= 0 {
                    return Err(bad("zero or negative subquery step"));
                }
                Node::Subquery {
                    expr: Box::new(self.node(&sq.expr, fan_out)?),
                    range_ms: millis(&sq.range),
                    step_ms,
                    mods: self.mods(&sq.offset, &sq.at),
                }
            }
            Expr::Call(call) => {
                let func = call.func.name;
                if !super::is_supported(func) {
                    return Err(bad(format!(
                        "function {func}() is experimental in Prometheus and not supported"
                    )));
                }
                let args = call
                    .args
                    .args
                    .iter()
                    .map(|a| self.node(a, fan_out))
                    .collect::<EvalResult<Vec<_>>>()?;
                Node::Call { func, args }
            }
            Expr::Aggregate(agg) => self.aggregate(agg)?,
            Expr::Binary(bin) => self.binary(bin, fan_out)?,
            Expr::Extension(_) => return Err(bad("unsupported expression")),
        })
    }

    fn aggregate(&mut self, agg: &ast::AggregateExpr) -> EvalResult<Node> {
        let name = agg.op.to_string();
        let op = AggOp::parse(&name).ok_or_else(|| bad(format!("unknown aggregation {name}()")))?;
        if matches!(op, AggOp::Limitk | AggOp::LimitRatio) {
            // As Prometheus 3 without its experimental-functions flag.
            return Err(bad(format!(
                "aggregation {name}() is experimental in Prometheus and not supported"
            )));
        }
        let grouping = match &agg.modifier {
            None => Grouping::By(Vec::new()),
            Some(LabelModifier::Include(ls)) => Grouping::By(ls.labels.clone()),
            Some(LabelModifier::Exclude(ls)) => Grouping::Without(ls.labels.clone()),
        };
        let param = match &agg.param {
            None => None,
            Some(p) => Some(Box::new(self.node(p, true)?)),
        };
        let id = self.aggregates;
        self.aggregates += 1;
        Ok(Node::Aggregate {
            id,
            op,
            param,
            expr: Box::new(self.node(&agg.expr, true)?),
            grouping,
        })
    }

    fn binary(&mut self, bin: &ast::BinaryExpr, fan_out: bool) -> EvalResult<Node> {
        let name = bin.op.to_string();
        let op = BinOp::parse(&name).ok_or_else(|| bad(format!("unknown operator {name}")))?;
        let lhs = self.node(&bin.lhs, fan_out)?;
        let rhs = self.node(&bin.rhs, fan_out)?;
        let both_vectors = lhs.ty() == Ty::Vector && rhs.ty() == Ty::Vector;
        if op.is_set() && !both_vectors {
            return Err(bad(format!(
                "set operator \"{name}\" not allowed in binary scalar expression"
            )));
        }
        let modifier = bin.modifier.as_ref();
        if let Some(m) = modifier {
            if m.fill_values.lhs.is_some() || m.fill_values.rhs.is_some() {
                return Err(bad(
                    "fill modifiers are experimental in Prometheus and not supported",
                ));
            }
        }
        let return_bool = modifier.is_some_and(|m| m.return_bool);
        let matching = both_vectors.then(|| matching(op, modifier));
        if let (Node::Number(a), Node::Number(b)) = (&lhs, &rhs) {
            if !op.is_comparison() {
                return Ok(Node::Number(op.apply(*a, *b)));
            }
        }
        Ok(Node::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
            matching,
            return_bool,
        })
    }

    /// Marks the largest step-invariant subtrees, as Prometheus'
    /// preprocessing does; literals are left alone (they cost nothing).
    fn mark_invariant(&self, node: Node) -> Node {
        let (node, inv) = invariant(node);
        wrap(node, inv)
    }
}

fn matching(op: BinOp, modifier: Option<&BinModifier>) -> Matching {
    let card = if op.is_set() {
        Card::ManyToMany
    } else {
        match modifier.map(|m| &m.card) {
            Some(VectorMatchCardinality::ManyToOne(_)) => Card::ManyToOne,
            Some(VectorMatchCardinality::OneToMany(_)) => Card::OneToMany,
            Some(VectorMatchCardinality::ManyToMany) => Card::ManyToMany,
            _ => Card::OneToOne,
        }
    };
    let include = modifier
        .and_then(|m| m.card.labels())
        .map(|l| l.labels.clone())
        .unwrap_or_default();
    let (on, labels) = match modifier.and_then(|m| m.matching.as_ref()) {
        Some(LabelModifier::Include(l)) => (true, l.labels.clone()),
        Some(LabelModifier::Exclude(l)) => (false, l.labels.clone()),
        None => (false, Vec::new()),
    };
    Matching {
        card,
        on,
        labels,
        include,
    }
}

/// Functions whose value depends on the evaluation time itself, so never
/// step-invariant (Prometheus' list).
fn time_dependent(func: &str) -> bool {
    matches!(
        func,
        "days_in_month"
            | "day_of_month"
            | "day_of_week"
            | "day_of_year"
            | "hour"
            | "minute"
            | "month"
            | "year"
            | "predict_linear"
            | "time"
            | "timestamp"
    )
}

fn wrap(node: Node, invariant: bool) -> Node {
    match node {
        Node::Number(_) | Node::String(_) | Node::Invariant(_) => node,
        // A range vector is not repeated per step: its own `@` fixes it.
        Node::Matrix { .. } | Node::Subquery { .. } => node,
        n if invariant => Node::Invariant(Box::new(n)),
        n => n,
    }
}

/// The node with its invariant children marked, and whether it is
/// invariant itself.
fn invariant(node: Node) -> (Node, bool) {
    match node {
        Node::Number(_) | Node::String(_) => (node, true),
        Node::Selector { mods, .. } | Node::Matrix { mods, .. } => (node, mods.at_ms.is_some()),
        Node::Subquery {
            expr,
            range_ms,
            step_ms,
            mods,
        } => {
            let (expr, inv) = invariant(*expr);
            let node = Node::Subquery {
                expr: Box::new(wrap(expr, inv)),
                range_ms,
                step_ms,
                mods,
            };
            (node, mods.at_ms.is_some())
        }
        Node::Neg(n) => {
            let (n, inv) = invariant(*n);
            (Node::Neg(Box::new(n)), inv)
        }
        Node::Invariant(n) => (*n, true),
        Node::Aggregate {
            id,
            op,
            param,
            expr,
            grouping,
        } => {
            let (expr, e_inv) = invariant(*expr);
            let (param, p_inv) = match param {
                None => (None, true),
                Some(p) => {
                    let (p, inv) = invariant(*p);
                    (Some(Box::new(p)), inv)
                }
            };
            let inv = e_inv && p_inv;
            let node = Node::Aggregate {
                id,
                op,
                param: param.map(|p| Box::new(if inv { *p } else { wrap(*p, p_inv) })),
                expr: Box::new(if inv { expr } else { wrap(expr, e_inv) }),
                grouping,
            };
            (node, inv)
        }
        Node::Binary {
            op,
            lhs,
            rhs,
            matching,
            return_bool,
        } => {
            let (lhs, l_inv) = invariant(*lhs);
            let (rhs, r_inv) = invariant(*rhs);
            let inv = l_inv && r_inv;
            let (lhs, rhs) = if inv {
                (lhs, rhs)
            } else {
                (wrap(lhs, l_inv), wrap(rhs, r_inv))
            };
            let node = Node::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
                matching,
                return_bool,
            };
            (node, inv)
        }
        Node::Call { func, args } => {
            let marked: Vec<(Node, bool)> = args.into_iter().map(invariant).collect();
            let inv = !time_dependent(func) && marked.iter().all(|(_, i)| *i);
            let args = marked
                .into_iter()
                .map(|(a, i)| if inv { a } else { wrap(a, i) })
                .collect();
            (Node::Call { func, args }, inv)
        }
    }
}

impl From<limits::TooBig> for EvalError {
    fn from(e: limits::TooBig) -> EvalError {
        bad(e.to_string())
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
