//! `histogram_quantile` over classic histograms: series named `*_bucket`
//! with an `le` label holding each bucket's upper bound, usually the
//! `rate` of each bucket's counter. At each time the buckets of a series
//! (its labels without `le`) are sorted by bound, merged where bounds
//! repeat, made monotonic, and the quantile interpolated linearly inside
//! the bucket it falls in, as Prometheus does.

use std::collections::HashMap;

use super::value::{Labels, Series, NAME_LABEL};

/// `histogram_quantile(q, buckets)` at each time; `q` per time.
pub fn histogram_quantile(q: &[f64], series: Vec<Series>, n: usize) -> Vec<Series> {
    let mut order: Vec<Labels> = Vec::new();
    // Grouped by every label but `le` (the metric name included), shown
    // without `le` and the name.
    let mut groups: HashMap<Labels, (Labels, Vec<(f64, usize)>)> = HashMap::new();
    for (idx, s) in series.iter().enumerate() {
        let Some(bound) = s.labels.get("le").and_then(parse_bound) else {
            continue;
        };
        let key = s.labels.filtered(|k| k != "le");
        groups
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key.clone());
                (key.filtered(|k| k != NAME_LABEL), Vec::new())
            })
            .1
            .push((bound, idx));
    }
    let mut out = Vec::new();
    for key in order {
        let Some((labels, members)) = groups.remove(&key) else {
            continue;
        };
        let mut buckets: Vec<(f64, f64)> = Vec::with_capacity(members.len());
        let values: Vec<Option<f64>> = (0..n)
            .map(|i| {
                buckets.clear();
                buckets.extend(
                    members
                        .iter()
                        .filter_map(|&(b, idx)| series[idx].values[i].map(|c| (b, c))),
                );
                (!buckets.is_empty()).then(|| bucket_quantile(q[i], &mut buckets))
            })
            .collect();
        let s = Series { labels, values };
        if s.has_any() {
            out.push(s);
        }
    }
    out
}

/// A bucket bound as Go's `strconv.ParseFloat` reads it.
fn parse_bound(s: &str) -> Option<f64> {
    match s.trim_start_matches('+').to_ascii_lowercase().as_str() {
        "inf" | "infinity" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

/// The φ-quantile of buckets `(upper bound, cumulative count)`.
pub fn bucket_quantile(q: f64, buckets: &mut [(f64, f64)]) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Coalesce equal bounds.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(b, c) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == b => last.1 += c,
            _ => merged.push((b, c)),
        }
    }
    // Counts must not decrease with the bound (partial scrapes and rates
    // can make them): take the running maximum.
    let mut max = merged[0].1;
    for b in merged.iter_mut().skip(1) {
        if b.1 > max {
            max = b.1;
        } else if b.1 < max {
            b.1 = max;
        }
    }
    if merged.len() < 2 {
        return f64::NAN;
    }
    let observations = merged[merged.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let last = merged.len() - 1;
    let b = merged[..last].partition_point(|x| x.1 < rank);
    if b == last {
        return merged[last - 1].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(le: &str, v: f64) -> Series {
        Series {
            labels: [("__name__", "h_bucket"), ("le", le), ("job", "a")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            values: vec![Some(v)],
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let series = vec![
            bucket("0.1", 10.0),
            bucket("0.5", 50.0),
            bucket("1", 90.0),
            bucket("+Inf", 100.0),
        ];
        let out = histogram_quantile(&[0.5], series.clone(), 1);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].labels.iter().collect::<Vec<_>>(), vec![("job", "a")]);
        assert!((out[0].values[0].unwrap() - 0.5).abs() < 1e-12);
        let p90 = histogram_quantile(&[0.9], series.clone(), 1)[0].values[0].unwrap();
        assert!((p90 - 1.0).abs() < 1e-12);
        // Beyond the last finite bound: that bound.
        let p99 = histogram_quantile(&[0.99], series.clone(), 1)[0].values[0].unwrap();
        assert_eq!(p99, 1.0);
        let p05 = histogram_quantile(&[0.05], series, 1)[0].values[0].unwrap();
        assert!((p05 - 0.05).abs() < 1e-12);
    }

    #[test]
    fn edge_cases_as_prometheus() {
        let mut no_inf = vec![(1.0, 1.0), (2.0, 2.0)];
        assert!(bucket_quantile(0.5, &mut no_inf).is_nan());
        let mut empty = vec![(1.0, 0.0), (f64::INFINITY, 0.0)];
        assert!(bucket_quantile(0.5, &mut empty).is_nan());
        let mut b = vec![(1.0, 5.0), (f64::INFINITY, 10.0)];
        assert_eq!(bucket_quantile(-1.0, &mut b), f64::NEG_INFINITY);
        assert_eq!(bucket_quantile(2.0, &mut b), f64::INFINITY);
        // Non-monotonic counts are evened out.
        let mut b = vec![(1.0, 8.0), (2.0, 6.0), (f64::INFINITY, 10.0)];
        assert!((bucket_quantile(0.5, &mut b) - 0.625).abs() < 1e-12);
        assert_eq!(parse_bound("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_bound("0.25"), Some(0.25));
        assert_eq!(parse_bound("x"), None);
    }
}
