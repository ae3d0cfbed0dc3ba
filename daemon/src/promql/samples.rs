//! Prometheus' own definitions of the range functions that need individual
//! samples, applied to a list of `(time ms, value)` points in time order.
//!
//! Tally feeds these either real samples (a subquery's results, where the
//! answers are Prometheus' exactly) or its per-minute sample view (each
//! non-empty minute's last sample), documented function by function in
//! `docs/promql.md`. The algorithms follow Prometheus 2.x's
//! `promql/functions.go`: extrapolation of `rate`/`increase`/`delta`,
//! compensated (Kahan) sums, the linear regression of `deriv` and
//! `predict_linear`, and the quantile interpolation shared with the
//! `quantile` aggregation.

/// A point: time in Unix milliseconds and value.
pub type Point = (i64, f64);

/// Kahan-Babuska summation step: the running sum and its compensation.
pub fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// `rate`, `increase` and `delta` over `points` in the window
/// `[range_start, range_end]` (ms): the difference between the last and
/// first point (counter resets corrected when `counter`), extrapolated
/// towards the window's edges when the points come close to them, per
/// second of `range_s` when `per_second`. None with fewer than two points.
pub fn extrapolated_rate(
    points: &[Point],
    range_start: i64,
    range_end: i64,
    range_s: f64,
    counter: bool,
    per_second: bool,
) -> Option<f64> {
    let (&(t0, v0), &(tn, vn)) = (points.first()?, points.last()?);
    if points.len() < 2 {
        return None;
    }
    let mut result = vn - v0;
    if counter {
        let mut prev = v0;
        for &(_, v) in &points[1..] {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
    }
    let mut to_start = (t0 - range_start) as f64 / 1000.0;
    let to_end = (range_end - tn) as f64 / 1000.0;
    let sampled = (tn - t0) as f64 / 1000.0;
    let avg_gap = sampled / (points.len() - 1) as f64;
    if counter && result > 0.0 && v0 >= 0.0 {
        // A counter starts at zero: do not extrapolate below it.
        let to_zero = sampled * (v0 / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = avg_gap * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        avg_gap / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        avg_gap / 2.0
    };
    let mut factor = interval / sampled;
    if per_second {
        factor /= range_s;
    }
    Some(result * factor)
}

/// `irate` (`per_second`, counter resets corrected) and `idelta`: from the
/// last two points.
pub fn instant_value(points: &[Point], per_second: bool) -> Option<f64> {
    let n = points.len();
    if n < 2 {
        return None;
    }
    let ((t1, v1), (t2, v2)) = (points[n - 2], points[n - 1]);
    let result = if per_second && v2 < v1 { v2 } else { v2 - v1 };
    let dt = t2 - t1;
    if dt == 0 {
        return None;
    }
    Some(if per_second {
        result / (dt as f64 / 1000.0)
    } else {
        result
    })
}

/// Least-squares slope and intercept of the points, with time measured in
/// seconds from `intercept_ms`.
pub fn linear_regression(points: &[Point], intercept_ms: i64) -> (f64, f64) {
    let (mut n, mut sx, mut cx, mut sy, mut cy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut sxy, mut cxy, mut sx2, mut cx2) = (0.0, 0.0, 0.0, 0.0);
    let init = points.first().map_or(0.0, |p| p.1);
    let mut constant = true;
    for (i, &(t, v)) in points.iter().enumerate() {
        if constant && i > 0 && v != init {
            constant = false;
        }
        n += 1.0;
        let x = (t - intercept_ms) as f64 / 1000.0;
        (sx, cx) = kahan_inc(x, sx, cx);
        (sy, cy) = kahan_inc(v, sy, cy);
        (sxy, cxy) = kahan_inc(x * v, sxy, cxy);
        (sx2, cx2) = kahan_inc(x * x, sx2, cx2);
    }
    if constant {
        if init.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, init);
    }
    let (sx, sy, sxy, sx2) = (sx + cx, sy + cy, sxy + cxy, sx2 + cx2);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

/// `deriv`: the regression's slope per second.
pub fn deriv(points: &[Point]) -> Option<f64> {
    (points.len() >= 2).then(|| linear_regression(points, points[0].0).0)
}

/// `predict_linear`: the regression's value `ahead_s` after `at_ms`.
pub fn predict_linear(points: &[Point], at_ms: i64, ahead_s: f64) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (slope, intercept) = linear_regression(points, at_ms);
    Some(slope * ahead_s + intercept)
}

/// `changes`: how often the value changed (NaN to NaN is no change).
pub fn changes(points: &[Point]) -> Option<f64> {
    let mut it = points.iter().map(|p| p.1);
    let mut prev = it.next()?;
    let mut n = 0;
    for v in it {
        if v != prev && !(v.is_nan() && prev.is_nan()) {
            n += 1;
        }
        prev = v;
    }
    Some(n as f64)
}

/// `resets`: how often the value decreased.
pub fn resets(points: &[Point]) -> Option<f64> {
    let mut it = points.iter().map(|p| p.1);
    let mut prev = it.next()?;
    let mut n = 0;
    for v in it {
        if v < prev {
            n += 1;
        }
        prev = v;
    }
    Some(n as f64)
}

/// The mean, by Prometheus' incremental method (which keeps infinities).
pub fn avg(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut mean, mut count, mut c) = (0.0f64, 0.0, 0.0);
    let mut any = false;
    for v in values {
        any = true;
        count += 1.0;
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        (mean, c) = kahan_inc(v / count - mean / count, mean, c);
    }
    if !any {
        return None;
    }
    Some(if mean.is_infinite() { mean } else { mean + c })
}

/// A compensated sum.
pub fn sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut s, mut c) = (0.0, 0.0);
    for v in values {
        (s, c) = kahan_inc(v, s, c);
    }
    if s.is_infinite() {
        s
    } else {
        s + c
    }
}

/// Population variance (`stdvar_over_time`; its root is `stddev_over_time`).
pub fn variance(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut count, mut mean, mut cmean, mut aux, mut caux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for v in values {
        count += 1.0;
        let delta = v - (mean + cmean);
        (mean, cmean) = kahan_inc(delta / count, mean, cmean);
        (aux, caux) = kahan_inc(delta * (v - (mean + cmean)), aux, caux);
    }
    (count > 0.0).then(|| (aux + caux) / count)
}

/// Minimum, where any number beats NaN.
pub fn min(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |acc: Option<f64>, v| match acc {
        Some(a) if !(v < a || a.is_nan()) => Some(a),
        _ => Some(v),
    })
}

/// Maximum, where any number beats NaN.
pub fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |acc: Option<f64>, v| match acc {
        Some(a) if !(v > a || a.is_nan()) => Some(a),
        _ => Some(v),
    })
}

/// The φ-quantile of `values` by linear interpolation between the closest
/// ranks (`quantile`, `quantile_over_time`): NaN for none, ±Inf for φ out
/// of [0, 1]. Sorts `values`.
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // NaN sorts first, as Go's sort with Prometheus' comparator has it.
    values.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.total_cmp(b),
    });
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Median absolute deviation from the median (`mad_over_time`).
pub fn mad(values: &mut [f64]) -> f64 {
    let median = quantile(0.5, values);
    let mut dev: Vec<f64> = values.iter().map(|v| (v - median).abs()).collect();
    quantile(0.5, &mut dev)
}

/// Double exponential smoothing (`holt_winters`,
/// `double_exponential_smoothing`) with smoothing factor `sf` and trend
/// factor `tf`, both in (0, 1). None with fewer than two points.
pub fn double_exponential_smoothing(values: &[f64], sf: f64, tf: f64) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let trend = |i: usize, s0: f64, s1: f64, b: f64| {
        if i == 0 {
            b
        } else {
            tf * (s1 - s0) + (1.0 - tf) * b
        }
    };
    let (mut s0, mut s1, mut b) = (0.0, values[0], values[1] - values[0]);
    for (i, &v) in values.iter().enumerate().skip(1) {
        let x = sf * v;
        b = trend(i - 1, s0, s1, b);
        let y = (1.0 - sf) * (s1 + b);
        (s0, s1) = (s1, x + y);
    }
    Some(s1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pts(vs: &[(i64, f64)]) -> Vec<Point> {
        vs.iter().map(|&(s, v)| (s * 1000, v)).collect()
    }

    #[test]
    fn rate_extrapolates_as_prometheus_does() {
        // A counter rising 1/s sampled every 15 s across a 60 s window that
        // its samples nearly fill: extrapolated to the edges.
        let p = pts(&[(5, 5.0), (20, 20.0), (35, 35.0), (50, 50.0)]);
        let r = extrapolated_rate(&p, 0, 60_000, 60.0, true, true).unwrap();
        assert!((r - 1.0).abs() < 1e-12, "{r}");
        let inc = extrapolated_rate(&p, 0, 60_000, 60.0, true, false).unwrap();
        assert!((inc - 60.0).abs() < 1e-9, "{inc}");
        // A reset adds the value before it: 10, reset to 2, then +3.
        let p = pts(&[(0, 10.0), (30, 2.0), (60, 5.0)]);
        let inc = extrapolated_rate(&p, 0, 60_000, 60.0, true, false).unwrap();
        assert_eq!(inc, 5.0);
        // Not towards zero beyond the counter's start: it started at 2 and
        // rose 1 per 10 s, so it was zero 20 s before the first sample.
        let p = pts(&[(50, 2.0), (60, 3.0), (70, 4.0)]);
        let inc = extrapolated_rate(&p, 0, 70_000, 70.0, true, false).unwrap();
        assert!((inc - 2.0 * 25.0 / 20.0).abs() < 1e-9, "{inc}");
        assert_eq!(extrapolated_rate(&p[..1], 0, 1, 1.0, true, true), None);
        // delta: no reset correction.
        let p = pts(&[(0, 10.0), (60, 4.0)]);
        assert_eq!(
            extrapolated_rate(&p, 0, 60_000, 60.0, false, false),
            Some(-6.0)
        );
    }

    #[test]
    fn instant_values() {
        let p = pts(&[(0, 1.0), (10, 5.0), (20, 2.0)]);
        assert_eq!(instant_value(&p, true), Some(0.2));
        assert_eq!(instant_value(&p, false), Some(-3.0));
        assert_eq!(instant_value(&p[..1], false), None);
    }

    #[test]
    fn regression() {
        let p = pts(&[(0, 1.0), (10, 3.0), (20, 5.0)]);
        assert!((deriv(&p).unwrap() - 0.2).abs() < 1e-12);
        let ahead = predict_linear(&p, 20_000, 10.0).unwrap();
        assert!((ahead - 7.0).abs() < 1e-9, "{ahead}");
        let flat = pts(&[(0, 4.0), (10, 4.0)]);
        assert_eq!(linear_regression(&flat, 0), (0.0, 4.0));
    }

    #[test]
    fn counts_of_changes_and_resets() {
        let p = pts(&[
            (0, 1.0),
            (1, 1.0),
            (2, 3.0),
            (3, 2.0),
            (4, f64::NAN),
            (5, f64::NAN),
        ]);
        assert_eq!(changes(&p), Some(3.0));
        assert_eq!(resets(&p), Some(1.0));
        assert_eq!(changes(&[]), None);
    }

    #[test]
    fn statistics() {
        assert_eq!(avg([1.0, 2.0, 6.0].into_iter()), Some(3.0));
        assert_eq!(avg([f64::INFINITY, 1.0].into_iter()), Some(f64::INFINITY));
        assert_eq!(sum([0.1; 10].into_iter()), 1.0);
        assert_eq!(variance([2.0, 4.0].into_iter()), Some(1.0));
        assert_eq!(min([f64::NAN, 3.0, 1.0].into_iter()), Some(1.0));
        assert_eq!(max([2.0, f64::NAN].into_iter()), Some(2.0));
        assert_eq!(quantile(0.5, &mut [3.0, 1.0, 2.0, 4.0]), 2.5);
        assert_eq!(quantile(2.0, &mut [1.0]), f64::INFINITY);
        assert!(quantile(0.5, &mut []).is_nan());
        assert_eq!(mad(&mut [1.0, 1.0, 2.0, 2.0, 4.0, 6.0, 9.0]), 1.0);
        // Smoothing a straight line follows it.
        let line = [1.0, 2.0, 3.0, 4.0, 5.0];
        let s = double_exponential_smoothing(&line, 0.5, 0.5).unwrap();
        assert!((s - 5.0).abs() < 1e-9, "{s}");
    }

    proptest! {
        /// rate of a steady counter over a window its samples span exactly
        /// is the counter's slope, whatever the spacing.
        #[test]
        fn steady_counters_rate_their_slope(slope in 0.01f64..1000.0, gap_s in 1i64..120, n in 2usize..50) {
            let p: Vec<Point> = (0..n).map(|i| (i as i64 * gap_s * 1000, slope * (i as i64 * gap_s) as f64)).collect();
            let span = (n as i64 - 1) * gap_s * 1000;
            let r = extrapolated_rate(&p, 0, span, span as f64 / 1000.0, true, true).unwrap();
            prop_assert!((r - slope).abs() <= 1e-9 * slope.max(1.0), "{} vs {}", r, slope);
        }

        /// The quantile lies between the extremes and is monotonic in φ.
        #[test]
        fn quantiles_are_bounded_and_monotonic(mut v in proptest::collection::vec(-1e6f64..1e6, 1..40), a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let (lo, hi) = (a.min(b), a.max(b));
            let (qa, qb) = (quantile(lo, &mut v.clone()), quantile(hi, &mut v));
            let (mn, mx) = (min(v.iter().copied()).unwrap(), max(v.iter().copied()).unwrap());
            prop_assert!(qa <= qb + 1e-9);
            prop_assert!(qa >= mn - 1e-9 && qb <= mx + 1e-9);
        }
    }
}
