//! Combining series: arithmetic with numbers, and aggregation across
//! series at each evaluation time (`sum`, `avg`, `topk`...). Pure
//! functions of values already read: nothing here touches the engine, so
//! they are tested without one.

use std::collections::BTreeMap;

use super::value::{Labels, Series, Value};
use crate::http::prometheus::names::NAME_LABEL;
use crate::http::prometheus::plan::{AggOp, ArithOp, Grouping};

/// Sum, min or max of two optional values.
pub(super) fn combine(op: AggOp, a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(match op {
            AggOp::Min => a.min(b),
            AggOp::Max => a.max(b),
            _ => a + b,
        }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Vector-scalar and scalar-scalar arithmetic. Series lose their metric
/// name, as in Prometheus.
pub(super) fn arith(op: ArithOp, l: Value, r: Value) -> Value {
    match (l, r) {
        (Value::Scalar(a), Value::Scalar(b)) => {
            Value::Scalar(a.iter().zip(&b).map(|(x, y)| op.apply(*x, *y)).collect())
        }
        (Value::Vector(v), Value::Scalar(s)) => {
            Value::Vector(map_vector(v, |x, i| op.apply(x, s[i])))
        }
        (Value::Scalar(s), Value::Vector(v)) => {
            Value::Vector(map_vector(v, |x, i| op.apply(s[i], x)))
        }
        // The planner refuses vector-vector arithmetic.
        (Value::Vector(_), Value::Vector(_)) => Value::Vector(Vec::new()),
    }
}

fn map_vector(v: Vec<Series>, f: impl Fn(f64, usize) -> f64) -> Vec<Series> {
    v.into_iter()
        .map(|mut s| {
            s.labels.remove(NAME_LABEL);
            for (i, x) in s.values.iter_mut().enumerate() {
                *x = x.map(|x| f(x, i));
            }
            s
        })
        .collect()
}

/// An aggregation across series at each time.
pub(super) fn aggregate(
    op: AggOp,
    grouping: &Grouping,
    k: Option<f64>,
    series: Vec<Series>,
    n: usize,
) -> Vec<Series> {
    let mut groups: BTreeMap<Labels, Vec<Series>> = BTreeMap::new();
    for s in series {
        let key: Labels = s
            .labels
            .iter()
            .filter(|(l, _)| grouping.keeps(l))
            .map(|(l, v)| (l.clone(), v.clone()))
            .collect();
        groups.entry(key).or_default().push(s);
    }
    let mut out = Vec::new();
    for (labels, members) in groups {
        match op {
            AggOp::Topk | AggOp::Bottomk => {
                out.extend(select_k(op == AggOp::Topk, k.unwrap_or(0.0), members, n))
            }
            _ => {
                let values: Vec<Option<f64>> = (0..n)
                    .map(|i| {
                        let present = members.iter().filter_map(|m| m.values[i]);
                        reduce(op, present)
                    })
                    .collect();
                if values.iter().any(Option::is_some) {
                    out.push(Series { labels, values });
                }
            }
        }
    }
    out
}

fn reduce(op: AggOp, values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut count = 0usize;
    let mut acc: Option<f64> = None;
    for v in values {
        count += 1;
        acc = Some(match (op, acc) {
            (_, None) => v,
            (AggOp::Min, Some(a)) => {
                // Prometheus' min prefers any number to NaN.
                if v < a || a.is_nan() {
                    v
                } else {
                    a
                }
            }
            (AggOp::Max, Some(a)) => {
                if v > a || a.is_nan() {
                    v
                } else {
                    a
                }
            }
            (_, Some(a)) => a + v,
        });
    }
    match op {
        AggOp::Count => (count > 0).then_some(count as f64),
        AggOp::Avg => acc.map(|s| s / count as f64),
        _ => acc,
    }
}

/// topk / bottomk at each time: a member keeps its value at the times it
/// is among the k, and is left out if it never is.
fn select_k(top: bool, k: f64, members: Vec<Series>, n: usize) -> Vec<Series> {
    if k.is_nan() || k < 1.0 {
        return Vec::new();
    }
    let k = k.min(members.len() as f64) as usize;
    let picks: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            let mut order: Vec<usize> = (0..members.len())
                .filter(|&m| members[m].values[i].is_some())
                .collect();
            // NaN ranks last either way, as in Prometheus.
            let rank = |m: usize| {
                let v = members[m].values[i].unwrap_or(f64::NAN);
                match (v.is_nan(), top) {
                    (true, _) => f64::INFINITY,
                    (false, true) => -v,
                    (false, false) => v,
                }
            };
            order.sort_by(|&a, &b| rank(a).total_cmp(&rank(b)));
            order.truncate(k);
            order
        })
        .collect();
    let mut chosen = vec![vec![false; n]; members.len()];
    for (i, ms) in picks.iter().enumerate() {
        for &m in ms {
            chosen[m][i] = true;
        }
    }
    members
        .into_iter()
        .zip(chosen)
        .filter(|(_, c)| c.iter().any(|x| *x))
        .map(|(mut s, c)| {
            for (v, keep) in s.values.iter_mut().zip(c) {
                if !keep {
                    *v = None;
                }
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(source: &str, values: &[Option<f64>]) -> Series {
        Series {
            labels: [
                ("source".to_string(), source.to_string()),
                ("tally_metric".to_string(), "m".to_string()),
            ]
            .into_iter()
            .collect(),
            values: values.to_vec(),
        }
    }

    #[test]
    fn aggregations() {
        let v = vec![
            series("a", &[Some(1.0), None, Some(3.0)]),
            series("b", &[Some(5.0), Some(2.0), None]),
            series("c", &[Some(2.0), Some(8.0), None]),
        ];
        let all = Grouping::By(vec![]);
        let one = |op| aggregate(op, &all, None, v.clone(), 3);
        assert_eq!(
            one(AggOp::Sum)[0].values,
            [Some(8.0), Some(10.0), Some(3.0)]
        );
        assert_eq!(
            one(AggOp::Avg)[0].values,
            [Some(8.0 / 3.0), Some(5.0), Some(3.0)]
        );
        assert_eq!(one(AggOp::Min)[0].values, [Some(1.0), Some(2.0), Some(3.0)]);
        assert_eq!(one(AggOp::Max)[0].values, [Some(5.0), Some(8.0), Some(3.0)]);
        assert_eq!(
            one(AggOp::Count)[0].values,
            [Some(3.0), Some(2.0), Some(1.0)]
        );
        assert!(one(AggOp::Sum)[0].labels.is_empty());

        let by_source = aggregate(
            AggOp::Sum,
            &Grouping::By(vec!["source".into()]),
            None,
            v.clone(),
            3,
        );
        assert_eq!(by_source.len(), 3);
        assert_eq!(by_source[0].labels.len(), 1);
        let without = aggregate(
            AggOp::Max,
            &Grouping::Without(vec!["source".into()]),
            None,
            v.clone(),
            3,
        );
        assert_eq!(without.len(), 1);
        assert_eq!(
            without[0].labels.get("tally_metric").map(String::as_str),
            Some("m")
        );

        let top = aggregate(AggOp::Topk, &all, Some(1.0), v.clone(), 3);
        let got: Vec<(&str, Vec<Option<f64>>)> = top
            .iter()
            .map(|s| (s.labels["source"].as_str(), s.values.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", vec![None, None, Some(3.0)]),
                ("b", vec![Some(5.0), None, None]),
                ("c", vec![None, Some(8.0), None]),
            ]
        );
        let bottom = aggregate(AggOp::Bottomk, &all, Some(2.0), v.clone(), 3);
        assert_eq!(bottom.len(), 3);
        assert_eq!(bottom[1].values, [None, Some(2.0), None]);
        assert!(aggregate(AggOp::Topk, &all, Some(0.0), v, 3).is_empty());
    }

    #[test]
    fn arithmetic_with_numbers() {
        let v = Value::Vector(vec![series("a", &[Some(2.0), None])]);
        let Value::Vector(out) = arith(ArithOp::Div, v, Value::Scalar(vec![4.0, 4.0])) else {
            panic!()
        };
        assert_eq!(out[0].values, [Some(0.5), None]);
        let Value::Scalar(s) = arith(
            ArithOp::Sub,
            Value::Scalar(vec![1.0]),
            Value::Scalar(vec![3.0]),
        ) else {
            panic!()
        };
        assert_eq!(s, [-2.0]);
    }
}
