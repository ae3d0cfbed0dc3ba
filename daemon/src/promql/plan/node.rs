//! The planned query's tree: its nodes, their operators and modifiers,
//! and the one walk over them that every pass uses ([`Node::children`],
//! [`Node::walk`]).

use promql_parser::label::Matcher;
use smallvec::{smallvec, SmallVec};

use crate::promql::value::NAME_LABEL;

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
    pub(super) fn parse(name: &str) -> Option<AggOp> {
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
            Grouping::Without(ls) => label != NAME_LABEL && !ls.iter().any(|l| l == label),
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
    pub(super) fn parse(s: &str) -> Option<BinOp> {
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

    /// The node's operands: the one place that knows where each kind of
    /// node keeps them. An aggregation's expression comes before its
    /// parameter.
    pub fn children(&self) -> SmallVec<[&Node; 2]> {
        match self {
            Node::Number(_) | Node::String(_) | Node::Selector { .. } | Node::Matrix { .. } => {
                SmallVec::new()
            }
            Node::Subquery { expr, .. } | Node::Neg(expr) | Node::Invariant(expr) => {
                smallvec![&**expr]
            }
            Node::Call { args, .. } => args.iter().collect(),
            Node::Aggregate { param, expr, .. } => {
                let mut out: SmallVec<[&Node; 2]> = smallvec![&**expr];
                out.extend(param.as_deref());
                out
            }
            Node::Binary { lhs, rhs, .. } => smallvec![&**lhs, &**rhs],
        }
    }

    /// [`Node::children`], to rewrite in place.
    pub fn children_mut(&mut self) -> SmallVec<[&mut Node; 2]> {
        match self {
            Node::Number(_) | Node::String(_) | Node::Selector { .. } | Node::Matrix { .. } => {
                SmallVec::new()
            }
            Node::Subquery { expr, .. } | Node::Neg(expr) | Node::Invariant(expr) => {
                smallvec![&mut **expr]
            }
            Node::Call { args, .. } => args.iter_mut().collect(),
            Node::Aggregate { param, expr, .. } => {
                let mut out: SmallVec<[&mut Node; 2]> = smallvec![&mut **expr];
                out.extend(param.as_deref_mut());
                out
            }
            Node::Binary { lhs, rhs, .. } => smallvec![&mut **lhs, &mut **rhs],
        }
    }

    /// Every node of the tree under this one, itself first, each before
    /// its children.
    pub fn walk(&self) -> Walk<'_> {
        Walk {
            todo: vec![self],
            last: None,
        }
    }

    /// A call whose first argument is a matrix selector (either under
    /// any `Invariant` marks): the function and the selector.
    pub fn call_on_matrix(&self) -> Option<(&'static str, MatrixRef)> {
        let Node::Call { func, args } = self.unwrapped() else {
            return None;
        };
        match args.first().map(Node::unwrapped) {
            Some(Node::Matrix {
                sel,
                range_ms,
                mods,
            }) => Some((
                func,
                MatrixRef {
                    sel: *sel,
                    range_ms: *range_ms,
                    mods: *mods,
                },
            )),
            _ => None,
        }
    }
}

/// A matrix selector's fields, as [`Node::call_on_matrix`] finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatrixRef {
    pub sel: usize,
    pub range_ms: i64,
    pub mods: Mods,
}

/// The nodes of a tree, each before its children (see [`Node::walk`]).
/// A node's children are taken when the next node is asked for, so a
/// walker may skip them first.
pub struct Walk<'a> {
    todo: Vec<&'a Node>,
    last: Option<&'a Node>,
}

impl Walk<'_> {
    /// Leaves out the children of the node just returned.
    pub fn skip_children(&mut self) {
        self.last = None;
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = &'a Node;

    fn next(&mut self) -> Option<&'a Node> {
        if let Some(node) = self.last.take() {
            self.todo.extend(node.children());
        }
        let node = self.todo.pop()?;
        self.last = Some(node);
        Some(node)
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
