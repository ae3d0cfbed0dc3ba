//! Binary operators: arithmetic, comparisons (filtering, or `bool`), and
//! the set operators `and`/`or`/`unless`, between scalars and vectors,
//! with Prometheus' vector matching (`on`/`ignoring`,
//! `group_left`/`group_right`) decided at each evaluation time, and its
//! errors where a match is ambiguous.

use std::collections::HashMap;

use super::held::Held;
use super::plan::{BinOp, Card, Matching};
use super::value::{execution, EvalResult, Labels, Series, Value, NAME_LABEL};

/// `op` of two numbers (see [`BinOp::apply`]).
pub fn scalar_op(op: BinOp, a: f64, b: f64) -> f64 {
    op.apply(a, b)
}

/// `op` of a vector element and another value: the result and whether the
/// element stays (comparisons filter).
fn element_op(op: BinOp, l: f64, r: f64) -> (f64, bool) {
    if op.is_comparison() {
        (l, scalar_op(op, l, r) == 1.0)
    } else {
        (scalar_op(op, l, r), true)
    }
}

/// Evaluates `op` of two evaluated operands.
pub fn binary(
    op: BinOp,
    lhs: Value,
    rhs: Value,
    matching: Option<&Matching>,
    return_bool: bool,
    held: &Held<'_>,
) -> EvalResult<Value> {
    Ok(match (lhs, rhs) {
        (Value::Scalar(a), Value::Scalar(b)) => Value::Scalar(
            a.iter()
                .zip(&b)
                .map(|(x, y)| scalar_op(op, *x, *y))
                .collect(),
        ),
        (Value::Vector(v), Value::Scalar(s)) => {
            Value::Vector(with_scalar(op, v, &s, false, return_bool))
        }
        (Value::Scalar(s), Value::Vector(v)) => {
            Value::Vector(with_scalar(op, v, &s, true, return_bool))
        }
        (Value::Vector(l), Value::Vector(r)) => {
            let default = Matching {
                card: if op.is_set() {
                    Card::ManyToMany
                } else {
                    Card::OneToOne
                },
                on: false,
                labels: Vec::new(),
                include: Vec::new(),
            };
            let m = matching.unwrap_or(&default);
            Value::Vector(match op {
                BinOp::And | BinOp::Or | BinOp::Unless => set_op(op, l, r, m),
                _ => vector_op(op, l, r, m, return_bool, held)?,
            })
        }
        (l, r) => {
            return Err(execution(format!(
                "binary operator between {} and {} is not defined",
                l.type_name(),
                r.type_name()
            )))
        }
    })
}

fn with_scalar(op: BinOp, v: Vec<Series>, s: &[f64], swap: bool, return_bool: bool) -> Vec<Series> {
    v.into_iter()
        .filter_map(|series| {
            let values: Vec<Option<f64>> = series
                .values
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let x = (*x)?;
                    let (l, r) = if swap { (s[i], x) } else { (x, s[i]) };
                    let (mut value, keep) = element_op(op, l, r);
                    // A comparison keeps the vector's value, whichever side.
                    if op.is_comparison() {
                        value = x;
                    }
                    if return_bool {
                        Some(if keep { 1.0 } else { 0.0 })
                    } else {
                        keep.then_some(value)
                    }
                })
                .collect();
            let labels = if op.drops_name() || return_bool {
                series.labels.without_name()
            } else {
                series.labels
            };
            let s = Series { labels, values };
            s.has_any().then_some(s)
        })
        .collect()
}

/// The labels two series are matched on.
fn signature(labels: &Labels, m: &Matching) -> Vec<(String, String)> {
    labels
        .iter()
        .filter(|(k, _)| {
            if m.on {
                m.labels.iter().any(|l| l == k)
            } else {
                *k != NAME_LABEL && !m.labels.iter().any(|l| l == k)
            }
        })
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `and`, `or`, `unless` at each time.
fn set_op(op: BinOp, l: Vec<Series>, r: Vec<Series>, m: &Matching) -> Vec<Series> {
    let n = l.first().or(r.first()).map_or(0, |s| s.values.len());
    let lsig: Vec<_> = l.iter().map(|s| signature(&s.labels, m)).collect();
    let rsig: Vec<_> = r.iter().map(|s| signature(&s.labels, m)).collect();
    // Per signature, the times any series of the other side is present.
    fn present<'s>(
        side: &[Series],
        sigs: &'s [Vec<(String, String)>],
        n: usize,
    ) -> HashMap<&'s [(String, String)], Vec<bool>> {
        let mut at: HashMap<&[(String, String)], Vec<bool>> = HashMap::new();
        for (s, sig) in side.iter().zip(sigs) {
            let e = at.entry(sig.as_slice()).or_insert_with(|| vec![false; n]);
            for (i, v) in s.values.iter().enumerate() {
                e[i] |= v.is_some();
            }
        }
        at
    }
    let filter = |s: Series, keep: &dyn Fn(usize) -> bool| {
        let values = s
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| v.filter(|_| keep(i)))
            .collect();
        Series {
            labels: s.labels,
            values,
        }
    };
    let mut out: Vec<Series> = Vec::new();
    match op {
        BinOp::And | BinOp::Unless => {
            let rp = present(&r, &rsig, n);
            let want = op == BinOp::And;
            for (s, sig) in l.into_iter().zip(&lsig) {
                let there = rp.get(sig.as_slice());
                out.push(filter(s, &|i| there.is_some_and(|p| p[i]) == want));
            }
        }
        _ => {
            let lp = present(&l, &lsig, n);
            out.extend(l);
            for (s, sig) in r.into_iter().zip(&rsig) {
                let there = lp.get(sig.as_slice());
                out.push(filter(s, &|i| !there.is_some_and(|p| p[i])));
            }
        }
    }
    out.retain(Series::has_any);
    out
}

/// The result's labels of a matched pair, `many` being the side whose
/// labels the result keeps.
fn result_labels(
    op: BinOp,
    many: &Labels,
    one: &Labels,
    m: &Matching,
    return_bool: bool,
) -> Labels {
    let mut labels = many.clone();
    if op.drops_name() || return_bool {
        labels.remove(NAME_LABEL);
    }
    if m.card == Card::OneToOne {
        labels = if m.on {
            labels.filtered(|k| m.labels.iter().any(|l| l == k))
        } else {
            labels.filtered(|k| !m.labels.iter().any(|l| l == k))
        };
    }
    for name in &m.include {
        labels.set(name, one.value(name));
    }
    labels
}

/// The series of one side by the signature they are matched on.
type BySig = HashMap<Vec<(String, String)>, Vec<usize>>;

/// Arithmetic and comparisons between two vectors, as Prometheus matches
/// them at each time. The pairs are gathered sparsely (a many-side series
/// matches at most one series at a time, so no more entries than the many
/// side holds values), and the series they make charged to `held` before
/// they are allocated: a "one" side whose series change over the range
/// can pair every many-side series with several of them.
fn vector_op(
    op: BinOp,
    l: Vec<Series>,
    r: Vec<Series>,
    m: &Matching,
    return_bool: bool,
    held: &Held<'_>,
) -> EvalResult<Vec<Series>> {
    let n = l.first().or(r.first()).map_or(0, |s| s.values.len());
    if l.is_empty() || r.is_empty() {
        return Ok(Vec::new());
    }
    // The "one" side is the right one, unless group_right swaps them.
    let swapped = m.card == Card::OneToMany;
    let (many, one) = if swapped { (r, l) } else { (l, r) };
    let mut by_sig: BySig = HashMap::new();
    for (j, s) in one.iter().enumerate() {
        by_sig.entry(signature(&s.labels, m)).or_default().push(j);
    }
    let many_sigs: Vec<_> = many.iter().map(|s| signature(&s.labels, m)).collect();
    // Pairs (many, one) in order of first match, and their values.
    let mut pair_index: HashMap<(usize, usize), usize> = HashMap::new();
    let mut pair_order: Vec<(usize, usize)> = Vec::new();
    let mut entries: Vec<(usize, usize, f64)> = Vec::new();
    for i in 0..n {
        if !many.iter().any(|s| s.values[i].is_some()) {
            continue;
        }
        check_one_side(&one, &by_sig, swapped, i)?;
        let mut used: HashMap<&[(String, String)], Vec<Labels>> = HashMap::new();
        for (a, (s, sig)) in many.iter().zip(&many_sigs).enumerate() {
            let Some(x) = s.values[i] else { continue };
            let Some(j) = by_sig
                .get(sig)
                .and_then(|c| c.iter().copied().find(|&j| one[j].values[i].is_some()))
            else {
                continue;
            };
            let y = one[j].values[i].unwrap_or(f64::NAN);
            let (vl, vr) = if swapped { (y, x) } else { (x, y) };
            let (value, keep) = element_op(op, vl, vr);
            let value = match (return_bool, keep) {
                (true, _) => f64::from(u8::from(keep)),
                (false, true) => value,
                (false, false) => continue,
            };
            let seen = used.entry(sig.as_slice()).or_default();
            unique_match(op, seen, &s.labels, &one[j].labels, m, return_bool)?;
            let next = pair_order.len();
            let p = *pair_index.entry((a, j)).or_insert_with(|| {
                pair_order.push((a, j));
                next
            });
            entries.push((p, i, value));
        }
    }
    held.charge("vector matching", pair_order.len(), n, 0)?;
    let mut values: Vec<Vec<Option<f64>>> = vec![vec![None; n]; pair_order.len()];
    for (p, i, v) in entries {
        values[p][i] = Some(v);
    }
    Ok(pair_order
        .into_iter()
        .zip(values)
        .map(|((a, j), values)| Series {
            labels: result_labels(op, &many[a].labels, &one[j].labels, m, return_bool),
            values,
        })
        .collect())
}

/// Prometheus refuses two series of the "one" side with the same
/// signature at a time when both sides have series, whether or not the
/// many side has a series of that signature.
fn check_one_side(one: &[Series], by_sig: &BySig, swapped: bool, i: usize) -> EvalResult<()> {
    for (sig, members) in by_sig.iter().filter(|(_, c)| c.len() > 1) {
        let mut present = members.iter().filter(|&&j| one[j].values[i].is_some());
        if let (Some(&first), Some(&dup)) = (present.next(), present.next()) {
            let side = if swapped { "left" } else { "right" };
            let group: Labels = sig.iter().cloned().collect();
            return Err(execution(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{}, {}];many-to-many matching not allowed: matching labels must be unique on one side",
                labels_text(&group),
                labels_text(&one[dup].labels),
                labels_text(&one[first].labels)
            )));
        }
    }
    Ok(())
}

/// Prometheus' checks that a match is unambiguous: one-to-one matching
/// allows one pair per signature and time; many-to-one requires each
/// result's labels to be unique within its signature.
fn unique_match(
    op: BinOp,
    seen: &mut Vec<Labels>,
    many: &Labels,
    one: &Labels,
    m: &Matching,
    return_bool: bool,
) -> EvalResult<()> {
    if m.card == Card::OneToOne {
        if !seen.is_empty() {
            return Err(execution(
                "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)",
            ));
        }
        seen.push(Labels::empty());
    } else {
        let out = result_labels(op, many, one, m, return_bool);
        if seen.contains(&out) {
            return Err(execution(
                "multiple matches for labels: grouping labels must ensure unique matches",
            ));
        }
        seen.push(out);
    }
    Ok(())
}

/// Labels written as Prometheus writes them in messages.
pub fn labels_text(labels: &Labels) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

#[cfg(test)]
#[path = "binary_tests.rs"]
mod tests;
