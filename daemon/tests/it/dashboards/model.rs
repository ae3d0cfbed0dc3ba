//! The dashboard model: its panels and templating variables, the PromQL
//! of every query with Grafana's variables substituted, and what each
//! expression reads (metric names, label filters and groupings) taken from
//! the PromQL syntax tree.

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::label::MatchOp;
use promql_parser::parser::{self as promql, Expr, LabelModifier};
use promql_parser::util::{walk_expr, ExprVisitor};
use serde_json::Value;

/// Every panel, rows' nested panels (collapsed rows keep theirs inside)
/// included.
pub(super) fn all_panels(dash: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().into_iter().flatten() {
        out.push(p);
        for inner in p["panels"].as_array().into_iter().flatten() {
            out.push(inner);
        }
    }
    out
}

/// One PromQL expression of the dashboard and where it comes from.
#[derive(Debug, Clone)]
pub(super) struct Query {
    /// `panel 9 "Ingest rate" target A`, `variable instance`.
    pub(super) place: String,
    /// The panel's title; empty for templating queries.
    pub(super) title: String,
    /// As written, Grafana variables and all.
    pub(super) expr: String,
}

/// Every panel target's `expr`, and the PromQL inside every templating
/// query (`label_values(<selector>, label)`, `query_result(<expr>)`).
pub(super) fn queries(dash: &Value) -> Result<Vec<Query>, String> {
    let mut out = Vec::new();
    for p in all_panels(dash) {
        let title = p["title"].as_str().unwrap_or("").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            let place = format!(
                "panel {} {:?} target {}",
                p["id"],
                title,
                t["refId"].as_str().unwrap_or("?")
            );
            let expr = t["expr"]
                .as_str()
                .ok_or_else(|| format!("{place} has no `expr`"))?;
            out.push(Query {
                place,
                title: title.clone(),
                expr: expr.to_string(),
            });
        }
    }
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let place = format!("variable {}", v["name"].as_str().unwrap_or("?"));
        // Older Grafana stores the query as a string, newer as an object.
        let q = match &v["query"] {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("query")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            other => {
                return Err(format!(
                    "{place}: query {other} is neither string nor object"
                ))
            }
        };
        if let Some(expr) = templating_promql(&q).map_err(|e| format!("{place}: {e}"))? {
            out.push(Query {
                place,
                title: String::new(),
                expr,
            });
        }
    }
    Ok(out)
}

/// The PromQL inside a Prometheus templating query, if it has any.
pub(super) fn templating_promql(q: &str) -> Result<Option<String>, String> {
    let q = q.trim();
    let inner = |prefix: &str| -> Option<&str> { q.strip_prefix(prefix)?.strip_suffix(')') };
    if let Some(args) = inner("label_values(") {
        // `label_values(label)` has no selector; `label_values(sel, label)`
        // does, and the label is after its last comma (a selector's own
        // commas are inside braces).
        return Ok(args
            .rsplit_once(',')
            .map(|(selector, _label)| selector.trim().to_string()));
    }
    if let Some(expr) = inner("query_result(") {
        return Ok(Some(expr.to_string()));
    }
    if inner("label_names(").is_some() || inner("metrics(").is_some() {
        return Ok(None);
    }
    Err(format!("unrecognised templating query {q:?}"))
}

/// What `$instance` and the other dashboard variables become before
/// parsing: any concrete value does, this one is recognisable.
pub(super) const INSTANCE_VALUE: &str = "tallyd-under-test:8080";

/// Replaces Grafana's variables (`$name`, `${name}`, `${name:format}`,
/// `[[name]]`) with concrete values so the text is plain PromQL. Grafana's
/// interval variables become durations; the dashboard's own variables
/// (`variables`) become [`INSTANCE_VALUE`]. Any other variable is an error:
/// it would be left unexpanded in Grafana too.
pub(super) fn substitute(expr: &str, variables: &BTreeSet<String>) -> Result<String, String> {
    let value = |name: &str| -> Result<&str, String> {
        Ok(match name {
            "__rate_interval" | "__interval" => "1m",
            "__range" => "1h",
            "__interval_ms" => "60000",
            "__range_s" => "3600",
            "__range_ms" => "3600000",
            n if variables.contains(n) => INSTANCE_VALUE,
            n => return Err(format!("unknown Grafana variable ${n} in {expr:?}")),
        })
    };
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(i) = rest.find(['$', '[']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("${") {
            let end = t
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {expr:?}"))?;
            let name = t[..end].split(':').next().unwrap_or("");
            out.push_str(value(name)?);
            rest = &t[end + 1..];
        } else if let Some(t) = tail.strip_prefix("[[") {
            let end = t
                .find("]]")
                .ok_or_else(|| format!("unclosed [[ in {expr:?}"))?;
            let name = t[..end].split(':').next().unwrap_or("");
            out.push_str(value(name)?);
            rest = &t[end + 2..];
        } else if let Some(t) = tail.strip_prefix('$') {
            let end = t.find(|c: char| !is_name(c)).unwrap_or(t.len());
            if end == 0 {
                // A lone `$`, e.g. in a regex: not a variable.
                out.push('$');
            } else {
                out.push_str(value(&t[..end])?);
            }
            rest = &t[end..];
        } else {
            out.push('[');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// What one PromQL expression reads.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Reads {
    /// Metric name -> label names its selectors match on (beyond the name).
    pub(super) selectors: BTreeMap<String, BTreeSet<String>>,
    /// (labels an aggregation groups by, metric names under it).
    pub(super) groupings: Vec<(BTreeSet<String>, BTreeSet<String>)>,
    /// Selectors on `instance` that do not match [`INSTANCE_VALUE`] with `=~`.
    pub(super) unfiltered: Vec<String>,
}

/// Parses `promql` (plain PromQL, variables already substituted) and
/// collects what it reads by walking the syntax tree.
pub(super) fn reads(promql_text: &str) -> Result<Reads, String> {
    let ast = promql::parse(promql_text).map_err(|e| format!("{promql_text:?}: {e}"))?;
    let mut v = Collect::default();
    walk_expr(&mut v, &ast)?;
    let mut out = Reads {
        unfiltered: v.unfiltered,
        ..Reads::default()
    };
    for (name, labels) in v.selectors {
        out.selectors.entry(name).or_default().extend(labels);
    }
    for (by, inner) in v.aggregations {
        let mut names = Collect::default();
        walk_expr(&mut names, &inner)?;
        out.groupings.push((
            by,
            names.selectors.into_iter().map(|(name, _)| name).collect(),
        ));
    }
    Ok(out)
}

#[derive(Default)]
pub(super) struct Collect {
    pub(super) selectors: Vec<(String, BTreeSet<String>)>,
    pub(super) aggregations: Vec<(BTreeSet<String>, Expr)>,
    pub(super) unfiltered: Vec<String>,
}

impl ExprVisitor for Collect {
    type Error = String;

    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, String> {
        let vs = match expr {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(ms) => &ms.vs,
            Expr::Aggregate(agg) => {
                if let Some(LabelModifier::Include(labels)) = &agg.modifier {
                    self.aggregations
                        .push((labels.labels.iter().cloned().collect(), (*agg.expr).clone()));
                }
                return Ok(true);
            }
            _ => return Ok(true),
        };
        let matchers = vs
            .matchers
            .matchers
            .iter()
            .chain(vs.matchers.or_matchers.iter().flatten());
        let mut name = vs.name.clone();
        let mut labels = BTreeSet::new();
        let mut instance_filtered = false;
        for m in matchers {
            if m.name == "__name__" {
                if m.op == MatchOp::Equal {
                    name = Some(m.value.clone());
                } else {
                    return Err(format!("{vs}: a regex on __name__ names no metric"));
                }
            } else {
                if m.name == "instance"
                    && matches!(m.op, MatchOp::Re(_))
                    && m.value == INSTANCE_VALUE
                {
                    instance_filtered = true;
                }
                labels.insert(m.name.clone());
            }
        }
        let name = name.ok_or_else(|| format!("{vs}: a selector without a metric name"))?;
        if !instance_filtered {
            self.unfiltered.push(vs.to_string());
        }
        self.selectors.push((name, labels));
        Ok(true)
    }
}

/// The dashboard's own variable names.
pub(super) fn variable_names(dash: &Value) -> BTreeSet<String> {
    dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect()
}
