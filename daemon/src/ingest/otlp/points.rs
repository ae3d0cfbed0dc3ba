//! OTLP data points as Tally samples, one metric type at a time.
//!
//! | OTLP | Tally series (kind) |
//! |---|---|
//! | Gauge | `<name>` (gauge) |
//! | Sum, monotonic, cumulative | `<name>` (cumulative counter) |
//! | Sum, monotonic, delta | `<name>` (delta counter) |
//! | Sum, not monotonic, cumulative | `<name>` (gauge: the running total) |
//! | Histogram | `<name>_count`, `<name>_sum`, `<name>_bucket{le}` (counters of the point's temporality, buckets cumulative over `le` as Prometheus keeps them) |
//! | Exponential histogram | `<name>_count`, `<name>_sum` |
//! | Summary | `<name>_count`, `<name>_sum` (cumulative counters), `<name>{quantile}` (gauges) |
//!
//! A non-monotonic delta Sum has no Tally kind (a delta counter cannot go
//! down) and is refused with a reason, as is a point without a time or
//! value, or a histogram whose bucket counts disagree with its bounds or
//! its count. A point flagged "no recorded value" ends its series: each
//! series the point names (a histogram's buckets as far as the point lists
//! them, a summary's quantiles likewise) gets a staleness marker at its
//! time, as Prometheus' OTLP receiver writes them.

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, ExponentialHistogramDataPoint,
    HistogramDataPoint, Metric, NumberDataPoint, SummaryDataPoint,
};
use tally_proto::v1 as pb;

use super::attrs;
use crate::aggregator::RejectReason;
use crate::ingest::builder::{Full, RequestBuilder};
use crate::model::stale_marker;

/// `DataPointFlags.NO_RECORDED_VALUE`: the point marks a gap, a Prometheus
/// staleness marker.
pub(super) const NO_RECORDED_VALUE: u32 = 1;

/// Where one resource's points go.
pub(super) struct Target<'a> {
    pub b: &'a mut RequestBuilder,
    pub source: &'a str,
    pub resource_labels: &'a [pb::Label],
    /// The point each series came from, by series ordinal.
    pub point_of: &'a mut Vec<u32>,
    /// Points seen so far (their ordinals).
    pub points: &'a mut u32,
    /// Points refused before the aggregator.
    pub refused_points: &'a mut u64,
    /// Most attributes a point may carry before it is refused unread.
    pub max_attributes: usize,
    /// The open point's start time in milliseconds (0: not given), which
    /// its cumulative counters carry: a new one is a reset.
    pub start_ms: i64,
    /// Whether the open point is flagged "no recorded value": its series
    /// get a staleness marker instead of a value.
    pub ended: bool,
}

impl Target<'_> {
    fn next_point(&mut self) -> u32 {
        *self.points += 1;
        *self.points - 1
    }

    fn refuse(&mut self, reason: RejectReason, detail: impl FnOnce() -> String) {
        *self.refused_points += 1;
        self.b.refuse(1, reason, detail);
    }

    /// Adds one sample of one series.
    fn sample(
        &mut self,
        point: u32,
        metric: String,
        kind: pb::SampleKind,
        labels: Vec<pb::Label>,
        (ts_ms, value): (i64, f64),
    ) -> Result<(), Full> {
        let value = if self.ended { stale_marker() } else { value };
        let start_times_ms = match kind {
            pb::SampleKind::CumulativeCounter if self.start_ms != 0 => vec![self.start_ms],
            _ => Vec::new(),
        };
        let ordinal = self.b.push(
            self.source,
            pb::SeriesSamples {
                metric,
                kind: kind as i32,
                timestamps_ms: vec![ts_ms],
                values: vec![value],
                start_times_ms,
                labels,
            },
        )?;
        debug_assert_eq!(ordinal as usize, self.point_of.len());
        self.point_of.push(point);
        Ok(())
    }

    /// The point's ordinal, time and labels, or None when it is skipped or
    /// refused (already counted).
    fn open(&mut self, name: &str, p: &impl DataPoint) -> Option<(u32, i64, Vec<pb::Label>)> {
        let point = self.next_point();
        let (attributes, (time_unix_nano, start_time_unix_nano), flags) =
            (p.attributes(), p.times(), p.flags());
        self.start_ms = (start_time_unix_nano / 1_000_000).min(i64::MAX as u64) as i64;
        self.ended = flags & NO_RECORDED_VALUE != 0;
        if time_unix_nano == 0 {
            self.refuse(RejectReason::InvalidPoint, || {
                format!("metric {name:?}: a data point has no time_unix_nano")
            });
            return None;
        }
        if attributes.len() > self.max_attributes {
            let (n, max) = (attributes.len(), self.max_attributes);
            self.refuse(RejectReason::InvalidLabel, || {
                format!("metric {name:?}: a data point has {n} attributes; at most {max} are read")
            });
            return None;
        }
        let ts_ms = (time_unix_nano / 1_000_000).min(i64::MAX as u64) as i64;
        Some((
            point,
            ts_ms,
            attrs::labels(attributes, self.resource_labels),
        ))
    }
}

/// What every kind of OTLP data point has that [`Target::open`] reads.
trait DataPoint {
    fn attributes(&self) -> &[KeyValue];
    /// `time_unix_nano` and `start_time_unix_nano`.
    fn times(&self) -> (u64, u64);
    fn flags(&self) -> u32;
}

macro_rules! data_point {
    ($($t:ty),*) => {$(
        impl DataPoint for $t {
            fn attributes(&self) -> &[KeyValue] {
                &self.attributes
            }
            fn times(&self) -> (u64, u64) {
                (self.time_unix_nano, self.start_time_unix_nano)
            }
            fn flags(&self) -> u32 {
                self.flags
            }
        }
    )*};
}

data_point!(
    NumberDataPoint,
    HistogramDataPoint,
    ExponentialHistogramDataPoint,
    SummaryDataPoint
);

/// Adds every point of `m`.
pub(super) fn metric(t: &mut Target<'_>, m: &Metric) -> Result<(), Full> {
    match &m.data {
        None => Ok(()),
        Some(Data::Gauge(g)) => numbers(t, m, &g.data_points, Ok(pb::SampleKind::Gauge)),
        Some(Data::Sum(s)) => {
            let kind = match (s.is_monotonic, temporality(s.aggregation_temporality)) {
                (true, Some(delta)) => Ok(counter(delta)),
                (false, Some(false)) => Ok(pb::SampleKind::Gauge),
                (false, Some(true)) => Err("a non-monotonic delta sum has no Tally kind; export UpDownCounters with cumulative temporality"),
                (_, None) => Err("a sum without aggregation temporality"),
            };
            numbers(t, m, &s.data_points, kind)
        }
        Some(Data::Histogram(h)) => match temporality(h.aggregation_temporality) {
            Some(delta) => h
                .data_points
                .iter()
                .try_for_each(|p| histogram(t, &m.name, p, counter(delta))),
            None => refuse_all(
                t,
                m,
                h.data_points.len(),
                "a histogram without aggregation temporality",
            ),
        },
        Some(Data::ExponentialHistogram(h)) => match temporality(h.aggregation_temporality) {
            Some(delta) => h
                .data_points
                .iter()
                .try_for_each(|p| exponential(t, &m.name, p, counter(delta))),
            None => refuse_all(
                t,
                m,
                h.data_points.len(),
                "a histogram without aggregation temporality",
            ),
        },
        Some(Data::Summary(s)) => s
            .data_points
            .iter()
            .try_for_each(|p| summary(t, &m.name, p)),
    }
}

/// Some(true) for delta, Some(false) for cumulative.
pub(super) fn temporality(t: i32) -> Option<bool> {
    match AggregationTemporality::try_from(t).ok()? {
        AggregationTemporality::Delta => Some(true),
        AggregationTemporality::Cumulative => Some(false),
        AggregationTemporality::Unspecified => None,
    }
}

pub(super) fn counter(delta: bool) -> pb::SampleKind {
    if delta {
        pb::SampleKind::DeltaCounter
    } else {
        pb::SampleKind::CumulativeCounter
    }
}

fn refuse_all(t: &mut Target<'_>, m: &Metric, n: usize, why: &str) -> Result<(), Full> {
    for _ in 0..n {
        t.next_point();
        t.refuse(RejectReason::InvalidPoint, || {
            format!("metric {:?}: {why}", m.name)
        });
    }
    Ok(())
}

fn numbers(
    t: &mut Target<'_>,
    m: &Metric,
    points: &[NumberDataPoint],
    kind: Result<pb::SampleKind, &str>,
) -> Result<(), Full> {
    let kind = match kind {
        Ok(k) => k,
        Err(why) => return refuse_all(t, m, points.len(), why),
    };
    for p in points {
        let Some((point, ts, labels)) = t.open(&m.name, p) else {
            continue;
        };
        let value = match p.value {
            Some(number_data_point::Value::AsDouble(v)) => v,
            Some(number_data_point::Value::AsInt(v)) => v as f64,
            // The marker replaces the value (see `Target::sample`).
            None if t.ended => 0.0,
            None => {
                t.refuse(RejectReason::InvalidPoint, || {
                    format!("metric {:?}: a data point has no value", m.name)
                });
                continue;
            }
        };
        t.sample(point, m.name.clone(), kind, labels, (ts, value))?;
    }
    Ok(())
}

fn histogram(
    t: &mut Target<'_>,
    name: &str,
    p: &HistogramDataPoint,
    kind: pb::SampleKind,
) -> Result<(), Full> {
    let Some((point, ts, labels)) = t.open(name, p) else {
        return Ok(());
    };
    // A point with no recorded value may have no counts to check.
    let checked = match t.ended {
        true => Ok(()),
        false => check_buckets(&p.bucket_counts, &p.explicit_bounds, p.count),
    };
    if let Err(why) = checked {
        t.refuse(RejectReason::InvalidPoint, || {
            format!("histogram {name:?}: {why}")
        });
        return Ok(());
    }
    count_and_sum(t, point, name, kind, &labels, (ts, p.count, p.sum))?;
    let mut cumulative = 0u64;
    for (i, n) in p.bucket_counts.iter().enumerate() {
        cumulative = cumulative.saturating_add(*n);
        let le = p
            .explicit_bounds
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), f64::to_string);
        let mut labels = labels.clone();
        labels.retain(|l| l.name != "le");
        labels.push(pb::Label {
            name: "le".into(),
            value: le,
        });
        t.sample(
            point,
            format!("{name}_bucket"),
            kind,
            labels,
            (ts, cumulative as f64),
        )?;
    }
    Ok(())
}

/// Why a histogram point's buckets cannot be read, if they cannot.
pub(super) fn check_buckets(
    bucket_counts: &[u64],
    explicit_bounds: &[f64],
    count: u64,
) -> Result<(), String> {
    let (counts, bounds) = (bucket_counts.len(), explicit_bounds.len());
    if counts == 0 && bounds == 0 {
        return Ok(());
    }
    if counts != bounds + 1 {
        return Err(format!(
            "{counts} bucket counts for {bounds} explicit bounds; there must be one more count than bounds"
        ));
    }
    let increasing = explicit_bounds
        .windows(2)
        .all(|w| w[0].partial_cmp(&w[1]) == Some(std::cmp::Ordering::Less));
    if !increasing || explicit_bounds.iter().any(|b| !b.is_finite()) {
        return Err("explicit bounds are not strictly increasing numbers".into());
    }
    let total = bucket_counts.iter().fold(0u64, |a, n| a.saturating_add(*n));
    if total != count {
        return Err(format!(
            "bucket counts add up to {total} but count is {count}"
        ));
    }
    Ok(())
}

fn exponential(
    t: &mut Target<'_>,
    name: &str,
    p: &ExponentialHistogramDataPoint,
    kind: pb::SampleKind,
) -> Result<(), Full> {
    let Some((point, ts, labels)) = t.open(name, p) else {
        return Ok(());
    };
    count_and_sum(t, point, name, kind, &labels, (ts, p.count, p.sum))
}

fn summary(t: &mut Target<'_>, name: &str, p: &SummaryDataPoint) -> Result<(), Full> {
    let Some((point, ts, labels)) = t.open(name, p) else {
        return Ok(());
    };
    let kind = pb::SampleKind::CumulativeCounter;
    count_and_sum(t, point, name, kind, &labels, (ts, p.count, Some(p.sum)))?;
    for q in &p.quantile_values {
        let mut labels = labels.clone();
        labels.retain(|l| l.name != "quantile");
        labels.push(pb::Label {
            name: "quantile".into(),
            value: q.quantile.to_string(),
        });
        t.sample(
            point,
            name.to_owned(),
            pb::SampleKind::Gauge,
            labels,
            (ts, q.value),
        )?;
    }
    Ok(())
}

fn count_and_sum(
    t: &mut Target<'_>,
    point: u32,
    name: &str,
    kind: pb::SampleKind,
    labels: &[pb::Label],
    (ts, count, sum): (i64, u64, Option<f64>),
) -> Result<(), Full> {
    t.sample(
        point,
        format!("{name}_count"),
        kind,
        labels.to_vec(),
        (ts, count as f64),
    )?;
    if let Some(sum) = sum {
        t.sample(
            point,
            format!("{name}_sum"),
            kind,
            labels.to_vec(),
            (ts, sum),
        )?;
    }
    Ok(())
}
