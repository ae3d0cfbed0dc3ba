//! Conversions between the `tally.v1` messages and the daemon's own types:
//! kinds, rejection reasons, selections, steps, aggregates, points and
//! errors. Both services use them, and keeping them out of the services
//! leaves those to say what each call does.

use tally_proto::v1 as pb;
use tonic::Status;

use crate::aggregator::RejectReason;
pub(crate) use crate::ingest::kind_from_proto;
use crate::labels::validate_label_name;
use crate::model::{SampleKind, SeriesId};
use crate::query::{
    Aggregate, LabelMap, Latest, Point, QueryError, Selection, SeriesInfo, SeriesRange, Step,
    StepSpec,
};
use crate::selector::{LabelMatcher, MatchOp, NameMatcher, PatternLimits};

pub(crate) fn kind_to_proto(k: Option<SampleKind>) -> pb::SampleKind {
    match k {
        Some(SampleKind::Gauge) => pb::SampleKind::Gauge,
        Some(SampleKind::DeltaCounter) => pb::SampleKind::DeltaCounter,
        Some(SampleKind::CumulativeCounter) => pb::SampleKind::CumulativeCounter,
        None => pb::SampleKind::Unspecified,
    }
}

pub(crate) fn reason_to_proto(r: RejectReason) -> pb::RejectReason {
    match r {
        RejectReason::InvalidSource => pb::RejectReason::InvalidSource,
        RejectReason::InvalidMetric => pb::RejectReason::InvalidMetric,
        RejectReason::InvalidKind => pb::RejectReason::InvalidKind,
        RejectReason::NonFiniteValue => pb::RejectReason::NonFiniteValue,
        RejectReason::TooOld => pb::RejectReason::TooOld,
        RejectReason::TooFarAhead => pb::RejectReason::TooFarAhead,
        RejectReason::LengthMismatch => pb::RejectReason::LengthMismatch,
        RejectReason::KindConflict => pb::RejectReason::KindConflict,
        RejectReason::OutOfOrder => pb::RejectReason::OutOfOrder,
        RejectReason::NegativeDelta => pb::RejectReason::NegativeDelta,
        RejectReason::SeriesLimit => pb::RejectReason::SeriesLimit,
        RejectReason::InvalidGroup => pb::RejectReason::InvalidGroup,
        RejectReason::SourceNotAllowed => pb::RejectReason::SourceNotAllowed,
        RejectReason::Overflow => pb::RejectReason::Overflow,
        RejectReason::InvalidLabel => pb::RejectReason::InvalidLabel,
        RejectReason::SourceSeriesLimit => pb::RejectReason::SourceSeriesLimit,
        RejectReason::MissingSource => pb::RejectReason::MissingSource,
        RejectReason::InvalidPoint => pb::RejectReason::InvalidPoint,
    }
}

impl From<QueryError> for Status {
    fn from(e: QueryError) -> Status {
        match e {
            QueryError::Invalid(msg) | QueryError::Limit(msg) => Status::invalid_argument(msg),
            QueryError::Busy(msg) => Status::resource_exhausted(msg),
            QueryError::Store(e) if e.is_retryable() => Status::unavailable(e.to_string()),
            QueryError::Store(e) => Status::internal(e.to_string()),
        }
    }
}

/// An optional name filter: empty selects everything.
pub(crate) fn matcher(
    value: &str,
    name: &str,
    limits: &PatternLimits,
) -> Result<Vec<NameMatcher>, Status> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    NameMatcher::parse_list_within(value, limits)
        .map(|m| vec![m])
        .map_err(|e| Status::invalid_argument(format!("{name}: {e}")))
}

/// A selection that must name its sources and metrics (`*` for all).
pub(crate) fn selection(
    source: &str,
    metric: &str,
    labels: &[pb::LabelMatcher],
    limits: &PatternLimits,
) -> Result<Selection, Status> {
    if source.is_empty() || metric.is_empty() {
        return Err(Status::invalid_argument(
            "source and metric are required: names, comma-separated lists or globs (\"*\" selects all)",
        ));
    }
    Ok(Selection {
        source: matcher(source, "source", limits)?,
        metric: matcher(metric, "metric", limits)?,
        labels: label_matchers(labels, limits)?,
    })
}

/// A request's label matchers, each name a valid label name.
pub(crate) fn label_matchers(
    labels: &[pb::LabelMatcher],
    limits: &PatternLimits,
) -> Result<Vec<LabelMatcher>, Status> {
    labels
        .iter()
        .enumerate()
        .map(|(i, m)| {
            validate_label_name(&m.name)
                .map_err(|e| Status::invalid_argument(format!("labels[{i}].name: {e}")))?;
            let op = match pb::MatchOp::try_from(m.op) {
                Ok(pb::MatchOp::Equal) => MatchOp::Equal,
                Ok(pb::MatchOp::NotEqual) => MatchOp::NotEqual,
                Ok(pb::MatchOp::Regex) => MatchOp::Regex,
                Ok(pb::MatchOp::NotRegex) => MatchOp::NotRegex,
                Err(_) => {
                    return Err(Status::invalid_argument(format!(
                        "labels[{i}].op: unknown match op {}",
                        m.op
                    )))
                }
            };
            LabelMatcher::new(&m.name, op, &m.value, limits)
                .map_err(|e| Status::invalid_argument(format!("labels[{i}]: {e}")))
        })
        .collect()
}

/// An aggregate's `by` label names, each a valid label name.
pub(crate) fn group_by(by: &[String]) -> Result<Vec<String>, Status> {
    for (i, name) in by.iter().enumerate() {
        validate_label_name(name).map_err(|e| Status::invalid_argument(format!("by[{i}]: {e}")))?;
    }
    Ok(by.to_vec())
}

/// Labels as the proto carries them, sorted by name.
pub(crate) fn labels_to_proto(labels: &LabelMap) -> Vec<pb::Label> {
    labels
        .iter()
        .map(|(name, value)| pb::Label {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

pub(crate) fn step_spec(step: i32, step_ms: i64, max_points: u32) -> Result<StepSpec, Status> {
    if step_ms != 0 {
        if step_ms % 1000 != 0 {
            return Err(Status::invalid_argument(format!(
                "step_ms {step_ms} is not a whole number of minutes"
            )));
        }
        return Ok(StepSpec::Fixed(Step::fixed(step_ms / 1000)?));
    }
    Ok(match pb::Step::try_from(step) {
        Ok(pb::Step::Minute) => StepSpec::Fixed(Step::MINUTE),
        Ok(pb::Step::Hour) => StepSpec::Fixed(Step::HOUR),
        Ok(pb::Step::Day) => StepSpec::Fixed(Step::DAY),
        Ok(pb::Step::Auto) => StepSpec::Auto {
            max_points: (max_points > 0).then_some(max_points as usize),
        },
        _ => {
            return Err(Status::invalid_argument(
                "step must be STEP_MINUTE, STEP_HOUR, STEP_DAY or STEP_AUTO, or step_ms a whole number of minutes",
            ))
        }
    })
}

pub(crate) fn aggregates(list: &[i32]) -> Result<Vec<Aggregate>, Status> {
    let mut out = Vec::new();
    for a in list {
        out.push(match pb::Aggregate::try_from(*a) {
            Ok(pb::Aggregate::Avg) => Aggregate::Avg,
            Ok(pb::Aggregate::Min) => Aggregate::Min,
            Ok(pb::Aggregate::Max) => Aggregate::Max,
            Ok(pb::Aggregate::Sum) => Aggregate::Sum,
            Ok(pb::Aggregate::Count) => Aggregate::Count,
            Ok(pb::Aggregate::Rate) => Aggregate::Rate,
            Ok(pb::Aggregate::Last) => Aggregate::Last,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "aggregate {a} is not one of AGGREGATE_AVG … AGGREGATE_LAST"
                )))
            }
        });
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `[from, to)` in seconds from milliseconds; `to` rounds up so a
/// sub-second end keeps its bucket.
pub(crate) fn seconds(from_ms: i64, to_ms: i64) -> (i64, i64) {
    (from_ms.div_euclid(1000), (to_ms + 999).div_euclid(1000))
}

pub(crate) fn point(p: &Point) -> pb::Point {
    pb::Point {
        t_ms: p.t * 1000,
        n: p.n,
        sum: p.sum,
        min: p.min,
        max: p.max,
        avg: p.avg,
        rate: p.rate,
        last: p.last,
        last_t_ms: p.last_ms,
    }
}

pub(crate) fn series_points(s: &SeriesRange) -> pb::SeriesPoints {
    pb::SeriesPoints {
        source: s.source.clone(),
        metric: s.metric.clone(),
        kind: kind_to_proto(s.kind) as i32,
        points: s.points.iter().map(point).collect(),
        labels: labels_to_proto(&s.labels),
    }
}

pub(crate) fn latest_series(l: Latest) -> pb::LatestSeries {
    pb::LatestSeries {
        kind: kind_to_proto(l.kind) as i32,
        last_t_ms: l.last.as_ref().map(|v| v.t_ms),
        last_value: l.last.as_ref().map(|v| v.value),
        minute: l.minute.as_ref().map(point),
        labels: labels_to_proto(&l.labels),
        source: l.source,
        metric: l.metric,
    }
}

pub(crate) fn series_info(s: SeriesInfo) -> pb::SeriesInfo {
    pb::SeriesInfo {
        kind: kind_to_proto(Some(s.kind)) as i32,
        first_seen_ms: s.first_seen * 1000,
        last_seen_ms: s.last_seen * 1000,
        labels: labels_to_proto(&s.labels),
        source: s.source,
        metric: s.metric,
    }
}

/// The page size a request asks for; 0 means the default.
pub(crate) fn page_size(n: u32) -> usize {
    if n == 0 {
        100
    } else {
        n as usize
    }
}

/// A page's `next_page_token`: empty on the last page.
pub(crate) fn token(next: Option<String>) -> String {
    next.unwrap_or_default()
}

/// The series a `ListSeries` page starts after, from the previous page's
/// token (a series key, `source|metric{labels}`).
pub(crate) fn series_after(page_token: &str) -> Result<Option<SeriesId>, Status> {
    match page_token {
        "" => Ok(None),
        t => match SeriesId::from_key(t) {
            Some(after) => Ok(Some(after)),
            None => Err(Status::invalid_argument(
                "page_token: pass next_page_token of the previous page",
            )),
        },
    }
}
