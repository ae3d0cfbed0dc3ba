//! Comparing what the daemon answered with what it must hold: each
//! expected series is found among a read's series by its label set, then
//! compared minute by minute.
//!
//! `n`, `min` and `max` must match exactly: they do not depend on the order
//! of the samples. `sum` is compared within a bound (see
//! [`sum_tolerance`]). A minute the daemon has that was not expected (an
//! extra point) is a mismatch, as is a series whose kind differs, and a
//! series with points under the read's source and metric whose label set
//! the run never sent (an extra series). Label sets left out of
//! verification (see `expect`) are neither checked nor extra.

use std::collections::{BTreeMap, HashSet};

use super::read::{PointBody, RangeBody};
use super::Check;

/// The bound on `|daemon sum − expected sum|` for a slot of `n` values whose
/// absolute values add up to `abs_sum`.
///
/// Floating-point addition is not associative. The daemon adds a minute's
/// values in arrival order into an in-memory slot, and a read then merges
/// partial slots (flushed documents, batches in flight, still-pending
/// accumulators): a different parenthesisation of the same terms than the
/// loadgen's left-to-right sum. Any order of recursive summation of n terms
/// is within `(n − 1)·u·Σ|xᵢ|` of the exact sum (u = 2⁻⁵³, the unit
/// roundoff), so two of them are within `2(n − 1)·u·Σ|xᵢ| < n·2⁻⁵²·Σ|xᵢ|`
/// of each other. Whole-number values (counters) sum exactly below 2⁵³, so
/// for them the bound is slack and a wrong count still shows up in `n`.
pub fn sum_tolerance(n: u64, abs_sum: f64) -> f64 {
    n as f64 * f64::EPSILON * abs_sum
}

/// What one read's comparison found.
#[derive(Debug, Default)]
pub struct Found {
    pub lines: Vec<String>,
    pub extra: u64,
    pub missing: u64,
    pub extra_series: u64,
}

/// Compares the series of one read (`bodies`, by the canonical text of
/// their labels) with the `checks` of its source and metric; `skipped` are
/// the label sets of that source and metric left out of verification.
pub fn compare_read(
    checks: &[Check],
    skipped: &HashSet<String>,
    mut bodies: BTreeMap<String, RangeBody>,
) -> Found {
    let mut found = Found::default();
    let none = RangeBody::default();
    for check in checks {
        let body = bodies.remove(&check.series.labels);
        compare(check, body.as_ref().unwrap_or(&none), &mut found);
    }
    let Some(first) = checks.first() else {
        return found;
    };
    for (labels, body) in bodies {
        if body.points.is_empty() || skipped.contains(&labels) {
            continue;
        }
        found.extra_series += 1;
        found.extra += body.points.len() as u64;
        let name = first.series.with_labels(&labels);
        found.lines.push(format!(
            "{name}: extra series: {} points of a label set the run did not send",
            body.points.len()
        ));
    }
    found
}

fn minute_name(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| t.to_string())
}

/// One series, minute by minute, adding what differs to `found`.
pub fn compare(check: &Check, body: &RangeBody, found: &mut Found) {
    let name = check.series.to_string();
    if let Some(kind) = &body.kind {
        if kind != check.kind.api_name() {
            found.lines.push(format!(
                "{name}: kind: expected {}, got {kind}",
                check.kind.api_name()
            ));
        }
    }
    let mut points: Vec<&PointBody> = body.points.iter().collect();
    points.sort_by_key(|p| p.t);
    let (mut i, mut j) = (0, 0);
    while i < check.slots.len() || j < points.len() {
        match (check.slots.get(i), points.get(j)) {
            (Some((t, e)), Some(p)) if *t == p.t => {
                let at = format!("{name} minute {}", minute_name(*t));
                compare_slot(&at, e, p, &mut found.lines);
                i += 1;
                j += 1;
            }
            (Some((t, e)), p) if p.is_none_or(|p| *t < p.t) => {
                found.missing += 1;
                found.lines.push(format!(
                    "{name} minute {}: missing: expected n={} sum={:?}, the daemon has no point",
                    minute_name(*t),
                    e.n,
                    e.sum
                ));
                i += 1;
            }
            (_, Some(p)) => {
                found.extra += 1;
                found.lines.push(format!(
                    "{name} minute {}: extra point n={} sum={:?} where none was expected",
                    minute_name(p.t),
                    p.n,
                    p.sum
                ));
                j += 1;
            }
            (_, None) => break,
        }
    }
}

fn compare_slot(at: &str, e: &crate::expect::ExpSlot, p: &PointBody, lines: &mut Vec<String>) {
    if p.n != e.n {
        lines.push(format!("{at}: n: expected {}, got {}", e.n, p.n));
    }
    if p.min != e.min {
        lines.push(format!("{at}: min: expected {:?}, got {:?}", e.min, p.min));
    }
    if p.max != e.max {
        lines.push(format!("{at}: max: expected {:?}, got {:?}", e.max, p.max));
    }
    let tol = sum_tolerance(e.n.max(p.n), e.abs_sum);
    if (p.sum - e.sum).abs() > tol || p.sum.is_nan() {
        lines.push(format!(
            "{at}: sum: expected {:?}, got {:?} (difference {:.3e} exceeds the rounding bound {:.3e})",
            e.sum,
            p.sum,
            (p.sum - e.sum).abs(),
            tol
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::ExpSlot;
    use crate::fleet::Kind;
    use crate::verify::SeriesKey;

    fn slot(n: u64, sum: f64, min: f64, max: f64) -> ExpSlot {
        ExpSlot {
            n,
            sum,
            min,
            max,
            abs_sum: sum.abs(),
        }
    }

    fn point(t: i64, n: u64, sum: f64, min: f64, max: f64) -> PointBody {
        PointBody {
            t,
            n,
            sum,
            min,
            max,
        }
    }

    fn body(kind: &str, points: Vec<PointBody>) -> RangeBody {
        RangeBody {
            kind: Some(kind.into()),
            points,
        }
    }

    fn check(labels: &str, slots: Vec<(i64, ExpSlot)>) -> Check {
        Check {
            series: SeriesKey {
                source: "src-000001".into(),
                metric: "m_0001".into(),
                labels: labels.into(),
            },
            kind: Kind::Gauge,
            slots,
        }
    }

    #[test]
    fn sums_within_the_rounding_bound_pass() {
        // 0.1 + 0.2 + 0.3 in two orders differ in the last bit.
        let a: f64 = (0.1 + 0.2) + 0.3;
        let b: f64 = 0.1 + (0.2 + 0.3);
        assert_ne!(a, b);
        assert!((a - b).abs() <= sum_tolerance(3, 0.6));
        // One whole unit off is far outside it.
        assert!(1.0 > sum_tolerance(60, 6000.0));
    }

    #[test]
    fn compare_finds_each_kind_of_difference() {
        let check = check(
            "",
            vec![
                (60, slot(2, 3.0, 1.0, 2.0)),
                (120, slot(1, 5.0, 5.0, 5.0)),
                (180, slot(1, 1.0, 1.0, 1.0)),
            ],
        );
        let ok = body(
            "gauge",
            vec![
                point(120, 1, 5.0, 5.0, 5.0),
                point(60, 2, 3.0, 1.0, 2.0),
                point(180, 1, 1.0, 1.0, 1.0),
            ],
        );
        let mut f = Found::default();
        compare(&check, &ok, &mut f);
        assert!(f.lines.is_empty());
        let bad = body(
            "delta_counter",
            vec![
                point(0, 1, 9.0, 9.0, 9.0),
                point(60, 3, 4.0, 1.0, 2.0),
                point(180, 1, 1.0, 0.5, 1.0),
            ],
        );
        let mut f = Found::default();
        compare(&check, &bad, &mut f);
        assert_eq!((f.extra, f.missing), (1, 1));
        let text = f.lines.join("\n");
        assert!(
            text.contains("kind: expected gauge, got delta_counter"),
            "{text}"
        );
        assert!(
            text.contains("src-000001/m_0001 minute 1970-01-01T00:01:00Z: n: expected 2, got 3"),
            "{text}"
        );
        assert!(text.contains("sum: expected 3.0, got 4.0"), "{text}");
        assert!(text.contains("min: expected 1.0, got 0.5"), "{text}");
        assert!(text.contains("00:02:00Z: missing"), "{text}");
        assert!(text.contains("00:00:00Z: extra point"), "{text}");
        assert_eq!(f.lines.len(), 6);
    }

    /// A read of one source and metric answers every label set; each check
    /// takes the series with its labels, whatever the order of the answer.
    #[test]
    fn series_are_matched_by_their_labels() {
        let a = r#"cpu="0",mode="1""#;
        let b = r#"cpu="1",mode="0""#;
        let checks = [
            check(a, vec![(60, slot(1, 1.0, 1.0, 1.0))]),
            check(b, vec![(60, slot(1, 2.0, 2.0, 2.0))]),
        ];
        let answer = |pairs: &[(&str, f64)]| -> BTreeMap<String, RangeBody> {
            pairs
                .iter()
                .map(|(l, v)| (l.to_string(), body("gauge", vec![point(60, 1, *v, *v, *v)])))
                .collect()
        };
        let none = HashSet::new();
        let f = compare_read(&checks, &none, answer(&[(b, 2.0), (a, 1.0)]));
        assert!(f.lines.is_empty(), "{:?}", f.lines);
        // Swapped values: both series are named with their labels.
        let f = compare_read(&checks, &none, answer(&[(a, 2.0), (b, 1.0)]));
        let text = f.lines.join("\n");
        assert!(
            text.contains(r#"src-000001/m_0001{cpu="0",mode="1"} minute 1970-01-01T00:01:00Z: sum: expected 1.0, got 2.0"#),
            "{text}"
        );
        // A set the run never sent is an extra series, unless it was one
        // left out of verification; a set with no points is no extra.
        let c = r#"cpu="2",mode="0""#;
        let mut bodies = answer(&[(a, 1.0), (b, 2.0), (c, 7.0)]);
        bodies.insert(String::new(), RangeBody::default());
        let f = compare_read(&checks, &none, bodies.clone());
        assert_eq!((f.extra_series, f.extra, f.lines.len()), (1, 1, 1));
        assert!(
            f.lines[0].starts_with(r#"src-000001/m_0001{cpu="2",mode="0"}: extra series"#),
            "{:?}",
            f.lines
        );
        let skipped = HashSet::from([c.to_string()]);
        assert!(compare_read(&checks, &skipped, bodies).lines.is_empty());
        // An expected set the daemon does not have: every minute missing.
        let f = compare_read(&checks, &none, answer(&[(a, 1.0)]));
        assert_eq!((f.missing, f.lines.len()), (1, 1));
        assert!(f.lines[0].contains(r#"{cpu="1",mode="0"} minute"#));
    }
}
