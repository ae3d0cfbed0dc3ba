//! Step-invariant subtrees: a subtree whose value does not depend on the
//! evaluation time (every selector in it has `@`) is marked
//! [`Node::Invariant`], so it is evaluated once rather than at every step,
//! as Prometheus' preprocessing does. Only the largest such subtrees are
//! marked, and literals are left alone (they cost nothing).

use super::node::Node;

/// Marks the tree's largest step-invariant subtrees.
pub fn mark(root: &mut Node) {
    let inv = invariant(root);
    wrap(root, inv);
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

/// Marks `node` invariant if it is, and if marking means anything.
fn wrap(node: &mut Node, invariant: bool) {
    match node {
        Node::Number(_) | Node::String(_) | Node::Invariant(_) => {}
        // A range vector is not repeated per step: its own `@` fixes it.
        Node::Matrix { .. } | Node::Subquery { .. } => {}
        _ if invariant => {
            let inner = std::mem::replace(node, Node::Number(0.0));
            *node = Node::Invariant(Box::new(inner));
        }
        _ => {}
    }
}

/// Marks the invariant children of `node`, and says whether it is
/// invariant itself. An invariant node's children are left unmarked: the
/// mark goes on the largest subtree. A subquery marks its expression
/// whatever its own `@`, since it evaluates it at inner times of its own.
fn invariant(node: &mut Node) -> bool {
    if let Node::Invariant(inner) = node {
        let inner = std::mem::replace(&mut **inner, Node::Number(0.0));
        *node = inner;
        return true;
    }
    let children: Vec<bool> = node.children_mut().into_iter().map(invariant).collect();
    let all = children.iter().all(|i| *i);
    let (inv, mark_children) = match node {
        Node::Number(_) | Node::String(_) => (true, false),
        Node::Selector { mods, .. } | Node::Matrix { mods, .. } => (mods.at_ms.is_some(), false),
        Node::Subquery { mods, .. } => (mods.at_ms.is_some(), true),
        Node::Call { func, .. } => {
            let inv = !time_dependent(func) && all;
            (inv, !inv)
        }
        Node::Aggregate { .. } | Node::Binary { .. } | Node::Neg(_) | Node::Invariant(_) => {
            (all, !all)
        }
    };
    if mark_children {
        for (child, inv) in node.children_mut().into_iter().zip(children) {
            wrap(child, inv);
        }
    }
    inv
}
