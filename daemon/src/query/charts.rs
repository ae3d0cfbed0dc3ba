//! Many metrics of one source in one read, each cut to its first series:
//! what the dashboard's source page draws as small charts, a screenful per
//! request instead of a request per chart.
//!
//! The work of one request is bounded before anything is read: at most
//! [`MAX_CHART_METRICS`] metrics, at most `series_per_metric` series of
//! each, at most `query.max_series` series and [`MAX_CHART_POINTS`] points
//! together. Metrics are taken in the order asked until the next one would
//! pass a bound; the answer then says `truncated` and lists the metrics it
//! left `unread`, for another request. A first metric that alone passes the
//! bounds is refused, naming them, since asking again could never read it.
//! A reader may ask for fewer points than the bound (`points`), so that no
//! answer is more than it can take in at once: past the first metric, that
//! leaves metrics unread the same way, and never refuses. The read reserves
//! its share of the read budget like any range read.

use super::engine::SeriesRange;
use super::{Point, QueryEngine, QueryError, StepSpec, Window};
use crate::aggregator::RecentWanted;
use crate::model::{validate_metric, validate_source, SeriesId};

/// Metrics one request may name.
pub const MAX_CHART_METRICS: usize = 100;

/// Points one request may read, all its series together: about as many as
/// a screenful of small charts at the minute tier over a day.
pub const MAX_CHART_POINTS: usize = 250_000;

/// Lines a small chart gets unless the reader asks for another number,
/// and the most it may ask for.
pub const DEFAULT_SERIES_PER_METRIC: usize = 20;
pub const MAX_SERIES_PER_METRIC: usize = 100;

/// What a charts read asks for.
#[derive(Debug, Clone)]
pub struct ChartsQuery {
    /// One source, by its exact name.
    pub source: String,
    /// Exact metric names, answered in this order (repeats ignored).
    pub metrics: Vec<String>,
    pub from: i64,
    pub to: i64,
    pub step: StepSpec,
    pub series_per_metric: usize,
    /// Points the reader wants the answer held to, all series together:
    /// metrics past the first that would pass it are left unread.
    pub points: Option<usize>,
}

/// One metric's chart: its first series (by labels) with their points.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MetricChart {
    pub metric: String,
    /// Series the metric has on the source, counted up to `query.max_series`
    /// (one more means "more than that").
    pub matched: usize,
    pub series: Vec<SeriesRange>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChartsResult {
    pub source: String,
    pub step: String,
    pub step_s: i64,
    pub from: i64,
    pub to: i64,
    pub charts: Vec<MetricChart>,
    /// Some metrics were left out to stay within the request's bounds.
    pub truncated: bool,
    /// The metrics left out, in the order asked: ask for them again.
    pub unread: Vec<String>,
}

/// The bounds one request is read within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    pub(super) series: usize,
    pub(super) points: usize,
    /// The points the reader asked for: a bound past the first metric only.
    pub(super) wanted: usize,
}

/// How many of the metrics (each with `series` to read, in order) fit
/// within `caps` at `buckets` points per series. Refuses when not even the
/// first fits.
pub(super) fn fitting(series: &[usize], buckets: i64, caps: Caps) -> Result<usize, QueryError> {
    let buckets = buckets.max(0) as usize;
    let (mut n_series, mut n_points) = (0usize, 0usize);
    for (i, &n) in series.iter().enumerate() {
        n_series = n_series.saturating_add(n);
        n_points = n_points.saturating_add(n.saturating_mul(buckets));
        if n_series > caps.series || n_points > caps.points {
            if i == 0 {
                return Err(QueryError::Limit(format!(
                    "one metric's {n} series of {buckets} points each pass the bounds of a charts read ({} series, query.max_series; {} points): ask for fewer series per metric, a coarser step or a shorter range",
                    caps.series, caps.points
                )));
            }
            return Ok(i);
        }
        if i > 0 && n_points > caps.wanted {
            return Ok(i);
        }
    }
    Ok(series.len())
}

/// The names asked for, repeats dropped, each checked.
fn checked(q: &ChartsQuery) -> Result<Vec<String>, QueryError> {
    validate_source(&q.source)
        .map_err(|e| QueryError::Invalid(format!("source {:?} {e}", q.source)))?;
    if q.metrics.len() > MAX_CHART_METRICS {
        return Err(QueryError::Limit(format!(
            "{} metrics asked for; a charts read takes at most {MAX_CHART_METRICS}: ask for the rest in another request",
            q.metrics.len()
        )));
    }
    if !(1..=MAX_SERIES_PER_METRIC).contains(&q.series_per_metric) {
        return Err(QueryError::Invalid(format!(
            "series_per_metric must be 1 to {MAX_SERIES_PER_METRIC}, not {}",
            q.series_per_metric
        )));
    }
    if q.points == Some(0) {
        return Err(QueryError::Invalid("points must be at least 1".into()));
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(q.metrics.len());
    for m in &q.metrics {
        validate_metric(m).map_err(|e| QueryError::Invalid(format!("metric {m:?} {e}")))?;
        if seen.insert(m.as_str()) {
            out.push(m.clone());
        }
    }
    Ok(out)
}

impl QueryEngine {
    /// The first series of each asked metric of one source over one window,
    /// as many metrics as the request's bounds allow (see the module docs).
    pub async fn charts(&self, q: &ChartsQuery) -> Result<ChartsResult, QueryError> {
        let metrics = checked(q)?;
        let w: Window = self.window(q.from, q.to, q.step)?;
        let limit = self.limits().max_series;
        let mut found: Vec<(String, usize, Vec<SeriesId>)> = Vec::with_capacity(metrics.len());
        for m in metrics {
            let mut ids = self.series_of(&q.source, &m, limit).await?;
            let matched = ids.len();
            ids.truncate(q.series_per_metric);
            found.push((m, matched, ids));
        }
        let caps = Caps {
            series: limit,
            points: MAX_CHART_POINTS.min(self.limits().max_total_points),
            wanted: q.points.unwrap_or(usize::MAX),
        };
        let per_metric: Vec<usize> = found.iter().map(|(_, _, ids)| ids.len()).collect();
        let fit = fitting(&per_metric, w.buckets(), caps)?;
        let unread: Vec<String> = found.drain(fit..).map(|(m, _, _)| m).collect();
        let ids: Vec<SeriesId> = found.iter().flat_map(|(_, _, ids)| ids.clone()).collect();
        let _reserved = self
            .reserve_points((ids.len() as u64).saturating_mul(w.buckets().max(0) as u64))
            .await?;
        let mut buckets = self
            .many_buckets(&ids, &w, RecentWanted::No)
            .await?
            .into_iter();
        let charts = found
            .into_iter()
            .map(|(metric, matched, ids)| MetricChart {
                metric,
                matched,
                series: buckets
                    .by_ref()
                    .take(ids.len())
                    .map(|b| SeriesRange {
                        points: Point::all(&b.buckets, w.step.width_s, b.is_counter(), &[]),
                        labels: b.series.labels.to_map(),
                        source: b.series.source.to_string(),
                        metric: b.series.metric.to_string(),
                        kind: b.kind,
                    })
                    .collect(),
            })
            .collect();
        Ok(ChartsResult {
            source: q.source.clone(),
            step: w.step.label(),
            step_s: w.step.width_s,
            from: w.from,
            to: w.to,
            charts,
            truncated: !unread.is_empty(),
            unread,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        series: 10,
        points: 1_000,
        wanted: usize::MAX,
    };

    #[test]
    fn metrics_are_taken_in_order_until_a_bound() {
        assert_eq!(fitting(&[2, 3, 4], 60, CAPS).unwrap(), 3);
        // 2 + 3 + 4 series of 120 points: the third passes 1,000 points.
        assert_eq!(fitting(&[2, 3, 4], 120, CAPS).unwrap(), 2);
        // The series bound, whatever the points.
        assert_eq!(fitting(&[5, 5, 1], 1, CAPS).unwrap(), 2);
        assert_eq!(fitting(&[], 60, CAPS).unwrap(), 0);
        // A metric without series costs nothing.
        assert_eq!(fitting(&[0, 0, 10], 100, CAPS).unwrap(), 3);
    }

    #[test]
    fn the_points_asked_for_bound_all_but_the_first_metric() {
        let wanted = Caps {
            wanted: 300,
            ..CAPS
        };
        // 2 × 60 + 3 × 60 = 300 points fit; the third metric's 240 do not.
        assert_eq!(fitting(&[2, 3, 4], 60, wanted).unwrap(), 2);
        // A first metric past them is read all the same, alone.
        assert_eq!(fitting(&[4, 1], 100, wanted).unwrap(), 1);
        // The bounds still refuse it.
        assert!(fitting(&[2], 501, wanted).is_err());
    }

    #[test]
    fn a_first_metric_past_the_bounds_is_refused_in_words() {
        let e = fitting(&[11], 1, CAPS).unwrap_err();
        assert!(
            matches!(&e, QueryError::Limit(m) if m.contains("query.max_series") && m.contains("coarser step")),
            "{e}"
        );
        assert!(fitting(&[2], 501, CAPS).is_err());
    }

    fn query(metrics: &[&str], per_metric: usize) -> ChartsQuery {
        ChartsQuery {
            source: "web-1".into(),
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            from: 0,
            to: 3600,
            step: StepSpec::parse("1m", None).unwrap(),
            series_per_metric: per_metric,
            points: None,
        }
    }

    #[test]
    fn names_are_checked_and_repeats_dropped() {
        assert_eq!(
            checked(&query(&["a", "b", "a"], 20)).unwrap(),
            vec!["a", "b"]
        );
        let many: Vec<String> = (0..=MAX_CHART_METRICS).map(|i| format!("m{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let e = checked(&query(&many, 20)).unwrap_err();
        assert!(e.to_string().contains("another request"), "{e}");
        assert!(checked(&query(&["a"], 0)).is_err());
        assert!(checked(&query(&["a"], MAX_SERIES_PER_METRIC + 1)).is_err());
        let no_points = ChartsQuery {
            points: Some(0),
            ..query(&["a"], 20)
        };
        assert!(checked(&no_points).is_err());
        assert!(checked(&query(&["bad name!"], 20)).is_err());
        let mut glob = query(&["a"], 20);
        glob.source = "web-*".into();
        assert!(checked(&glob).is_err());
    }
}
