//! From the parser's syntax tree to the planned [`Node`]s: the query's
//! size bounded first (see `limits`), then `@ start()` and `@ end()`
//! settled as times, offsets and ranges as milliseconds, a matrix
//! selector's range rounded to whole minutes, selectors numbered, and the
//! step-invariant subtrees marked (`invariant.rs`).

use std::time::{Duration, SystemTime};

use promql_parser::label::Matcher;
use promql_parser::parser::{
    self as ast, AtModifier, BinModifier, Expr, LabelModifier, Offset, VectorMatchCardinality,
};

use super::invariant;
use super::node::{AggOp, BinOp, Card, Grouping, Matching, Mods, Node, Plan, SelectorSpec, Ty};
use crate::promql::limits;
use crate::promql::value::{bad, EvalError, EvalResult};
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
    let mut root = b.node(&expr, false)?;
    invariant::mark(&mut root);
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
                if !crate::promql::is_supported(func) {
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

impl From<limits::TooBig> for EvalError {
    fn from(e: limits::TooBig) -> EvalError {
        bad(e.to_string())
    }
}
