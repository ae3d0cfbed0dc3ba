//! How big a PromQL query may be: its length, the nesting of its
//! expression and its number of nodes (`query.max_promql_bytes`,
//! `query.max_promql_depth`, `query.max_promql_nodes`).
//!
//! The parser, the planner and the evaluator all walk the expression
//! recursively, so an expression nested a few thousand levels deep (1,400
//! nested `sum(`, or a chain of 3,000 `+`) would overflow a worker
//! thread's stack and abort the daemon. The parser is the first to recurse,
//! so the text is measured before it is parsed: its length, how deeply its
//! brackets nest and how many operators it has. Both counts are at most the
//! parsed expression's depth and node count, so a query within the limits
//! is never refused here. Once parsed, the exact depth and node count are
//! measured without recursion and checked again, which bounds every
//! recursive walk that follows by `query.max_promql_depth`.

use promql_parser::parser::Expr;

use crate::query::QueryConfig;

/// A query over one of the limits, with a message naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TooBig(String);

/// Checks the text of `query` before it is parsed.
pub(crate) fn check_text(query: &str, limits: &QueryConfig) -> Result<(), TooBig> {
    if query.len() > limits.max_promql_bytes {
        return Err(TooBig(format!(
            "the query is {} bytes long; the limit is {} (query.max_promql_bytes)",
            query.len(),
            limits.max_promql_bytes
        )));
    }
    let scan = scan(query.as_bytes());
    if scan.nesting > limits.max_promql_depth {
        return Err(too_deep(scan.nesting, limits));
    }
    if scan.operators >= limits.max_promql_nodes {
        return Err(TooBig(format!(
            "the query has {} operators, so more than {} nodes; the limit is query.max_promql_nodes",
            scan.operators, limits.max_promql_nodes
        )));
    }
    Ok(())
}

/// Checks the parsed expression's exact depth and node count.
pub(crate) fn check_expr(expr: &Expr, limits: &QueryConfig) -> Result<(), TooBig> {
    let (depth, nodes) = measure(expr);
    if depth > limits.max_promql_depth {
        return Err(too_deep(depth, limits));
    }
    if nodes > limits.max_promql_nodes {
        return Err(TooBig(format!(
            "the query has {nodes} nodes; the limit is {} (query.max_promql_nodes)",
            limits.max_promql_nodes
        )));
    }
    Ok(())
}

fn too_deep(depth: usize, limits: &QueryConfig) -> TooBig {
    TooBig(format!(
        "the query nests {depth} levels deep; the limit is {} (query.max_promql_depth)",
        limits.max_promql_depth
    ))
}

/// What the text says about the expression's size before parsing.
#[derive(Debug, Default, PartialEq, Eq)]
struct Scan {
    /// Deepest nesting of brackets of any kind.
    nesting: usize,
    /// Arithmetic, comparison and set operators; each is a node.
    operators: usize,
}

/// One pass over the text, skipping string literals and comments, which
/// may hold any bracket or operator character.
fn scan(text: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(text, i + 1, q),
            b'#' => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                out.nesting = out.nesting.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'<' | b'>' => out.operators += 1,
            b'=' | b'!' if text.get(i + 1) == Some(&b'=') => {
                out.operators += 1;
                i += 1;
            }
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while i < text.len() && (text[i].is_ascii_alphanumeric() || text[i] == b'_') {
                    i += 1;
                }
                if matches!(&text[start..i], b"and" | b"or" | b"unless" | b"atan2") {
                    out.operators += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The index of the closing quote of a string starting at `i`, or the end.
fn skip_string(text: &[u8], mut i: usize, quote: u8) -> usize {
    while i < text.len() && text[i] != quote {
        // Raw (backquoted) strings have no escapes.
        if text[i] == b'\\' && quote != b'`' {
            i += 1;
        }
        i += 1;
    }
    i
}

/// The expression's depth (a lone number is 1) and node count, walked with
/// a stack of its own rather than by recursion.
fn measure(root: &Expr) -> (usize, usize) {
    let (mut max_depth, mut nodes) = (0, 0);
    let mut todo: Vec<(&Expr, usize)> = vec![(root, 1)];
    while let Some((e, depth)) = todo.pop() {
        nodes += 1;
        max_depth = max_depth.max(depth);
        let next = depth + 1;
        match e {
            Expr::Aggregate(a) => {
                todo.push((&a.expr, next));
                if let Some(p) = &a.param {
                    todo.push((p, next));
                }
            }
            Expr::Unary(u) => todo.push((&u.expr, next)),
            Expr::Binary(b) => {
                todo.push((&b.lhs, next));
                todo.push((&b.rhs, next));
            }
            Expr::Paren(p) => todo.push((&p.expr, next)),
            Expr::Subquery(s) => todo.push((&s.expr, next)),
            Expr::Call(c) => todo.extend(c.args.args.iter().map(|a| (&**a, next))),
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::VectorSelector(_)
            | Expr::MatrixSelector(_)
            | Expr::Extension(_) => {}
        }
    }
    (max_depth, nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(bytes: usize, depth: usize, nodes: usize) -> QueryConfig {
        QueryConfig {
            max_promql_bytes: bytes,
            max_promql_depth: depth,
            max_promql_nodes: nodes,
            ..QueryConfig::default()
        }
    }

    fn parsed(q: &str) -> Expr {
        promql_parser::parser::parse(q).unwrap()
    }

    #[test]
    fn the_scan_skips_strings_and_comments() {
        let s = scan(br#"sum(rate(x{a="((+",b='\'))',c=`\`}[5m])) # ((((+"#);
        assert_eq!(
            s,
            Scan {
                nesting: 3,
                operators: 0
            }
        );
        let s = scan(b"a + b - c * (d / e) and f or g unless h >= 1 != 2");
        assert_eq!(s.operators, 9);
        // Names holding a keyword are not operators.
        assert_eq!(scan(b"sum(random_or_and)").operators, 0);
    }

    #[test]
    fn the_scan_never_exceeds_the_parsed_measure() {
        for q in [
            "sum by (source) (rate(x{source=~\"a|b\"}[5m])) * 60",
            "topk(5, avg_over_time(cpu[1h]) / 2 + 1)",
            "((1 + 2) * (3 - 4)) ^ 2",
            "-sum(x) % 3 > bool 1",
            "max_over_time(rate(x[5m])[1h:1m])",
        ] {
            let s = scan(q.as_bytes());
            let (depth, nodes) = measure(&parsed(q));
            assert!(
                s.nesting <= depth,
                "{q}: nesting {} > depth {depth}",
                s.nesting
            );
            assert!(
                s.operators < nodes,
                "{q}: {} operators, {nodes} nodes",
                s.operators
            );
        }
    }

    #[test]
    fn measures_depth_and_nodes() {
        assert_eq!(measure(&parsed("1")), (1, 1));
        assert_eq!(measure(&parsed("sum(rate(x[5m]))")), (3, 3));
        assert_eq!(measure(&parsed("a + b + c")), (3, 5));
        assert_eq!(measure(&parsed("topk(3, x)")), (2, 3));
    }

    #[test]
    fn limits_name_their_setting() {
        let l = limits(100, 4, 8);
        let e = check_text(&"1+".repeat(60), &l).unwrap_err().to_string();
        assert!(e.contains("query.max_promql_bytes"), "{e}");
        let deep = format!("{}x{}", "sum(".repeat(5), ")".repeat(5));
        let e = check_text(&deep, &l).unwrap_err().to_string();
        assert!(
            e.contains("query.max_promql_depth") && e.contains('5'),
            "{e}"
        );
        let e = check_text(&["1"; 9].join("+"), &l).unwrap_err().to_string();
        assert!(e.contains("query.max_promql_nodes"), "{e}");
        // Depth from operators rather than brackets is caught once parsed.
        let chain = "a + b + c + d + e";
        check_text(chain, &l).unwrap();
        let e = check_expr(&parsed(chain), &l).unwrap_err().to_string();
        assert!(e.contains("query.max_promql_depth"), "{e}");
        check_expr(&parsed("sum(rate(x[5m])) * 2"), &l).unwrap();
    }

    /// The audit's two queries, on a thread with a worker's stack: refused
    /// before the parser sees them.
    #[test]
    fn the_audit_queries_are_refused_before_parsing() {
        let l = QueryConfig::default();
        let plus = vec!["1"; 3000].join("+");
        assert!(plus.len() > 5_000);
        let nested = format!("{}x{}", "sum(".repeat(1400), ")".repeat(1400));
        for q in [plus, nested] {
            let e = check_text(&q, &l).unwrap_err().to_string();
            assert!(e.contains("query.max_promql_"), "{e}");
        }
    }
}
