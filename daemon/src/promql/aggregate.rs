//! Aggregation across series (`sum`, `avg`, `topk`, `quantile`,
//! `count_values`...), `by` and `without`, at each evaluation time, as
//! Prometheus computes them: the same incremental mean, the same
//! comparison rules for NaN, the same selection of the k largest.

use std::collections::HashMap;

use super::held::Held;
use super::plan::{AggOp, Grouping};
use super::samples;
use super::value::{bad, EvalResult, Labels, Series};

/// The labels a series' group keeps.
pub fn group_labels(labels: &Labels, grouping: &Grouping) -> Labels {
    match grouping {
        Grouping::By(ls) if ls.is_empty() => Labels::empty(),
        g => labels.filtered(|l| g.keeps(l)),
    }
}

/// The argument of an aggregation with a parameter, per evaluation time.
#[derive(Debug, Clone)]
pub enum Param {
    None,
    Number(Vec<f64>),
    /// `count_values`' label.
    Label(String),
}

/// `op` of `series` grouped by `grouping`, at each of `n` times; what
/// `count_values` makes is charged to `held` before it is allocated.
pub fn aggregate(
    op: AggOp,
    grouping: &Grouping,
    param: &Param,
    series: Vec<Series>,
    n: usize,
    held: &Held<'_>,
) -> EvalResult<Vec<Series>> {
    if op == AggOp::CountValues {
        let Param::Label(label) = param else {
            return Err(bad("count_values() takes a label name"));
        };
        return count_values(label, grouping, series, n, held);
    }
    let mut order: Vec<Labels> = Vec::new();
    let mut groups: HashMap<Labels, Vec<Series>> = HashMap::new();
    for s in series {
        let key = group_labels(&s.labels, grouping);
        groups
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(s);
    }
    let number = |i: usize| match param {
        Param::Number(v) => v.get(i).copied().unwrap_or(f64::NAN),
        _ => f64::NAN,
    };
    let mut out = Vec::new();
    for key in order {
        let Some(members) = groups.remove(&key) else {
            continue;
        };
        match op {
            AggOp::Topk | AggOp::Bottomk => {
                out.extend(select_k(op == AggOp::Topk, members, n, number)?)
            }
            _ => {
                let values: Vec<Option<f64>> = (0..n)
                    .map(|i| reduce(op, members.iter().filter_map(|m| m.values[i]), number(i)))
                    .collect();
                let s = Series {
                    labels: key,
                    values,
                };
                if s.has_any() {
                    out.push(s);
                }
            }
        }
    }
    Ok(out)
}

/// One group's value at one time, from its members' values there.
fn reduce(op: AggOp, values: impl Iterator<Item = f64>, q: f64) -> Option<f64> {
    let mut values = values.peekable();
    values.peek()?;
    Some(match op {
        // Prometheus sums plainly (no compensation) in aggregations.
        AggOp::Sum => values.sum(),
        AggOp::Avg => {
            let (mut mean, mut count) = (0.0f64, 0.0);
            for v in values {
                count += 1.0;
                if mean.is_infinite()
                    && ((v.is_infinite() && (mean > 0.0) == (v > 0.0))
                        || (!v.is_infinite() && !v.is_nan()))
                {
                    continue;
                }
                mean += v / count - mean / count;
            }
            mean
        }
        AggOp::Min => samples::min(values)?,
        AggOp::Max => samples::max(values)?,
        AggOp::Count => values.count() as f64,
        AggOp::Group => 1.0,
        AggOp::Stddev | AggOp::Stdvar => {
            let (mut count, mut mean, mut m2) = (0.0, 0.0, 0.0);
            for v in values {
                count += 1.0;
                let delta = v - mean;
                mean += delta / count;
                m2 += delta * (v - mean);
            }
            let var = m2 / count;
            if op == AggOp::Stddev {
                var.sqrt()
            } else {
                var
            }
        }
        AggOp::Quantile => samples::quantile(q, &mut values.collect::<Vec<_>>()),
        AggOp::Topk | AggOp::Bottomk | AggOp::CountValues | AggOp::Limitk | AggOp::LimitRatio => {
            return None
        }
    })
}

/// `topk` / `bottomk`: at each time the k largest (smallest) members keep
/// their value there; a member never chosen is left out. NaN ranks last.
fn select_k(
    top: bool,
    members: Vec<Series>,
    n: usize,
    k_at: impl Fn(usize) -> f64,
) -> EvalResult<Vec<Series>> {
    let mut chosen = vec![vec![false; n]; members.len()];
    let mut order: Vec<usize> = Vec::with_capacity(members.len());
    #[allow(clippy::needless_range_loop)] // `i` indexes every member's values too
    for i in 0..n {
        let k = k_at(i);
        if k.is_nan() || k.abs() >= 9.2e18 {
            return Err(bad(format!("Scalar value {k} overflows int64")));
        }
        if k < 1.0 {
            continue;
        }
        order.clear();
        order.extend((0..members.len()).filter(|&m| members[m].values[i].is_some()));
        let rank = |m: usize| {
            let v = members[m].values[i].unwrap_or(f64::NAN);
            match (v.is_nan(), top) {
                (true, _) => f64::INFINITY,
                (false, true) => -v,
                (false, false) => v,
            }
        };
        order.sort_by(|&a, &b| rank(a).total_cmp(&rank(b)));
        for &m in order.iter().take(k as usize) {
            chosen[m][i] = true;
        }
    }
    // Within the group, in rank order at the first time (what an instant
    // query shows).
    let mut picked: Vec<(usize, Series)> = members
        .into_iter()
        .zip(chosen)
        .enumerate()
        .filter(|(_, (_, c))| c.iter().any(|x| *x))
        .map(|(i, (mut s, c))| {
            for (v, keep) in s.values.iter_mut().zip(c) {
                if !keep {
                    *v = None;
                }
            }
            (i, s)
        })
        .collect();
    let first = |s: &Series| s.values.iter().find_map(|v| *v).unwrap_or(f64::NAN);
    picked.sort_by(|(ia, a), (ib, b)| {
        let (x, y) = (first(a), first(b));
        let ord = if top {
            y.total_cmp(&x)
        } else {
            x.total_cmp(&y)
        };
        ord.then(ia.cmp(ib))
    });
    Ok(picked.into_iter().map(|(_, s)| s).collect())
}

/// `count_values`: per group, how many members have each value, the value
/// (formatted as Prometheus formats it) in `label`.
///
/// Every (group, value) pair seen at any time is a series with a slot at
/// every time, so a range over values that keep changing makes up to
/// members × times series: the counts are first gathered sparsely (one
/// entry per member and time, no more than the input), and the series
/// they make charged before any is allocated.
fn count_values(
    label: &str,
    grouping: &Grouping,
    series: Vec<Series>,
    n: usize,
    held: &Held<'_>,
) -> EvalResult<Vec<Series>> {
    let valid = label
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(bad(format!("invalid label name {label:?}")));
    }
    let grouping = match grouping {
        Grouping::By(ls) => {
            let mut ls = ls.clone();
            ls.push(label.to_string());
            Grouping::By(ls)
        }
        g => g.clone(),
    };
    let mut order: Vec<Labels> = Vec::new();
    let mut index: HashMap<Labels, usize> = HashMap::new();
    // (output series, time): counted sparsely.
    let mut counts: HashMap<(usize, usize), f64> = HashMap::new();
    let mut label_bytes = 0usize;
    for s in &series {
        // A member's value usually holds for many times in a row: its
        // group is looked up again only when the value changes.
        let mut last: Option<(u64, usize)> = None;
        for (i, v) in s.values.iter().enumerate() {
            let Some(v) = v else { continue };
            let out = match last {
                Some((bits, out)) if bits == v.to_bits() => out,
                _ => {
                    let mut labels = s.labels.clone();
                    let text = format_value(*v);
                    labels.set(label, &text);
                    let key = group_labels(&labels, &grouping);
                    let next = order.len();
                    let out = *index.entry(key.clone()).or_insert_with(|| {
                        label_bytes += text.len() + label.len();
                        order.push(key);
                        next
                    });
                    last = Some((v.to_bits(), out));
                    out
                }
            };
            *counts.entry((out, i)).or_insert(0.0) += 1.0;
        }
    }
    drop(series);
    held.charge("count_values()", order.len(), n, label_bytes)?;
    let mut values: Vec<Vec<Option<f64>>> = vec![vec![None; n]; order.len()];
    for ((out, i), c) in counts {
        values[out][i] = Some(c);
    }
    Ok(order
        .into_iter()
        .zip(values)
        .map(|(labels, values)| Series { labels, values })
        .collect())
}

/// A value as Prometheus writes it (Go's shortest `'f'` format).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
