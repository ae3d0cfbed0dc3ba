//! What an OTLP metrics request means in Tally's model, for both of OTLP's
//! transports (gRPC on the ingest port, HTTP on `/v1/metrics`): each
//! resource's source, each point's labels (`attrs`) and each metric type's
//! series and kinds (`points`). The request reaches the same admission as
//! every other protocol as a view, and the outcome comes back as OTLP's
//! `partial_success`.
//!
//! Protobuf bodies (gRPC, and HTTP's `application/x-protobuf`) are read
//! straight from their bytes into that view by [`parse()`] (`parse`, over
//! the wire readers of `wire`), with no owned message on the way. The
//! owned conversion, [`convert`], reads prost's decoded messages through
//! `attrs` and `points`; it serves OTLP/HTTP's JSON bodies, which serde
//! decodes into those messages, and it is the oracle a property test holds
//! the parser to: the same view, refusals and points for every request.

mod attrs;
mod config;
mod parse;
mod points;
mod wire;

pub use config::OtlpConfig;
pub use parse::{parse, OtlpView, ParseError};

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest,
};
use tally_proto::v1 as pb;

use super::builder::{Budget, Converted, Full, RequestBuilder};
use crate::aggregator::{IngestOutcome, RejectReason};

/// Most attributes a point may carry; more are refused unread, so that a
/// point's labels stay bounded before the label rules see them.
const MAX_POINT_ATTRIBUTES: usize = 64;

/// An OTLP request in `tally.v1` form.
pub struct OtlpRequest {
    pub converted: Converted,
    /// The point each series came from, by series ordinal.
    point_of: Vec<u32>,
    /// Points in the request.
    pub points: u32,
    /// Points refused while converting.
    refused_points: u64,
}

/// Converts `req`, refusing what cannot be read point by point. `Full`
/// when the converted request would exceed `budget`.
pub fn convert(
    req: &ExportMetricsServiceRequest,
    cfg: &OtlpConfig,
    cap: usize,
    budget: Budget,
) -> Result<OtlpRequest, Full> {
    let mut b = RequestBuilder::new(cap, budget);
    let mut point_of = Vec::new();
    let (mut points, mut refused_points) = (0u32, 0u64);
    for rm in &req.resource_metrics {
        let resource = rm.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        let source = attrs::first_present(resource, &cfg.source_attributes).map(|(_, v)| v);
        let mut resource_labels: Vec<pb::Label> = cfg
            .resource_labels
            .iter()
            .filter_map(|key| {
                let (_, value) = attrs::first_present(resource, std::slice::from_ref(key))?;
                Some(pb::Label {
                    name: attrs::label_name(key),
                    value,
                })
            })
            .collect();
        if cfg.job_label {
            resource_labels.extend(job(resource));
        }
        let mut t = points::Target {
            b: &mut b,
            source: source.as_deref().unwrap_or(""),
            resource_labels: &resource_labels,
            point_of: &mut point_of,
            points: &mut points,
            refused_points: &mut refused_points,
            max_attributes: MAX_POINT_ATTRIBUTES,
            start_ms: 0,
            ended: false,
        };
        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            if source.is_some() {
                points::metric(&mut t, m)?;
            } else {
                missing_source(&mut t, m, &cfg.source_attributes);
            }
        }
    }
    Ok(OtlpRequest {
        converted: b.finish(),
        point_of,
        points,
        refused_points,
    })
}

/// The `job` label of a resource: `service.namespace/service.name`, or
/// `service.name` alone; none without a service name.
fn job(resource: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Option<pb::Label> {
    let value = |key: &str| attrs::first_present(resource, &[key.to_string()]).map(|(_, v)| v);
    let name = value("service.name")?;
    let value = match value("service.namespace") {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    };
    Some(pb::Label {
        name: "job".into(),
        value,
    })
}

fn missing_source(
    t: &mut points::Target<'_>,
    m: &opentelemetry_proto::tonic::metrics::v1::Metric,
    keys: &[String],
) {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let n = match &m.data {
        None => 0,
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(s)) => s.data_points.len(),
        Some(Data::Histogram(h)) => h.data_points.len(),
        Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(Data::Summary(s)) => s.data_points.len(),
    };
    *t.points += n as u32;
    *t.refused_points += n as u64;
    t.b.refuse(n as u64, RejectReason::MissingSource, || {
        format!(
            "metric {:?}: its resource has none of the source attributes {} (otlp.source_attributes)",
            m.name,
            keys.join(", ")
        )
    });
}

impl OtlpRequest {
    /// The points `out` refused: those refused while converting, plus each
    /// point with a refused sample. Past the rejections the outcome lists,
    /// each further refused sample counts as a point of its own (exact for
    /// gauges and sums, an upper bound for histograms).
    pub fn rejected_points(&self, out: &IngestOutcome) -> u64 {
        let point = |r: &crate::aggregator::Rejection| {
            let ordinal = self
                .converted
                .ordinals
                .get(r.source_index as usize)?
                .get(r.series_index as usize)?;
            self.point_of.get(*ordinal as usize).copied()
        };
        count_rejected(out, self.refused_points, self.points, point)
    }
}

/// The points `out` refused, of a request of `points` points of which
/// `refused_points` were refused while reading it; `point` names the point
/// a rejection's series came from (None: a rejection of no series).
fn count_rejected(
    out: &IngestOutcome,
    refused_points: u64,
    points: u32,
    point: impl Fn(&crate::aggregator::Rejection) -> Option<u32>,
) -> u64 {
    let mut seen = hashbrown::HashSet::new();
    let mut listed_samples = 0u64;
    for r in &out.rejections {
        // A rejection that names no series of the view was made while
        // reading, and is counted in `refused_points`.
        let Some(p) = point(r) else {
            continue;
        };
        listed_samples += 1;
        seen.insert(p);
    }
    let unplaced = out.rejected.saturating_sub(refused_points);
    let unlisted = unplaced.saturating_sub(listed_samples);
    (refused_points + seen.len() as u64 + unlisted).min(u64::from(points))
}

/// OTLP's answer to a request some of whose points were refused (`rejected`
/// of them, as [`OtlpView::rejected_points`] or
/// [`OtlpRequest::rejected_points`] counts them); None when all were taken.
pub fn partial_success(rejected: u64, out: &IngestOutcome) -> Option<ExportMetricsPartialSuccess> {
    (rejected > 0 || out.rejected > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: rejected as i64,
        error_message: super::first_problems(out),
    })
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    use super::*;

    fn point(start_ns: u64, time_ns: u64, v: f64) -> NumberDataPoint {
        NumberDataPoint {
            start_time_unix_nano: start_ns,
            time_unix_nano: time_ns,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        }
    }

    #[test]
    fn cumulative_counters_carry_their_start_times_and_nothing_else_does() {
        let (series, _) = requests_and_temp(point(1_000_000_000, 5_000_000_000, 20.0));
        assert_eq!(series[0].metric, "requests");
        assert_eq!(series[0].start_times_ms, vec![1_000]);
        assert_eq!(series[1].metric, "temp");
        assert!(series[1].start_times_ms.is_empty());
        assert!(series[0].labels.is_empty(), "no service.name, no job");
    }

    #[test]
    fn a_point_with_no_recorded_value_is_a_staleness_marker() {
        let mut ended = point(1_000_000_000, 6_000_000_000, 0.0);
        ended.value = None;
        ended.flags = points::NO_RECORDED_VALUE;
        let (series, rejected) = requests_and_temp(ended);
        assert_eq!(rejected, 0);
        assert_eq!(series[1].metric, "temp");
        assert_eq!(series[1].timestamps_ms, vec![6_000]);
        assert!(crate::model::is_stale_marker(series[1].values[0]));
    }

    /// A cumulative sum of one point and a gauge of `gauge_point`, from
    /// one resource, as converted: the series and the points refused.
    fn requests_and_temp(gauge_point: NumberDataPoint) -> (Vec<pb::SeriesSamples>, u64) {
        let sum = Metric {
            name: "requests".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![point(1_000_000_000, 5_000_000_000, 7.0)],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        };
        let gauge = Metric {
            name: "temp".into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vec![gauge_point],
            })),
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "host.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("h1".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![sum, gauge],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let budget = Budget {
            samples: 100,
            bytes: 1 << 20,
        };
        let out = convert(&req, &OtlpConfig::default(), 10, budget).unwrap();
        let refused = out.converted.refused.rejected;
        (out.converted.request.sources[0].series.clone(), refused)
    }

    fn text(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn job_comes_from_the_service_as_prometheus_translates_it() {
        let request = |resource: Vec<KeyValue>, point_attrs: Vec<KeyValue>| {
            let mut p = point(0, 5_000_000_000, 1.0);
            p.attributes = point_attrs;
            ExportMetricsServiceRequest {
                resource_metrics: vec![ResourceMetrics {
                    resource: Some(Resource {
                        attributes: resource,
                        ..Default::default()
                    }),
                    scope_metrics: vec![ScopeMetrics {
                        metrics: vec![Metric {
                            name: "temp".into(),
                            data: Some(Data::Gauge(Gauge {
                                data_points: vec![p],
                            })),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
        };
        let budget = Budget {
            samples: 100,
            bytes: 1 << 20,
        };
        let labels = |req: &ExportMetricsServiceRequest, cfg: &OtlpConfig| {
            let out = convert(req, cfg, 10, budget).unwrap();
            out.converted.request.sources[0].series[0]
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect::<Vec<_>>()
        };
        let id = text("service.instance.id", "i-1");
        let job = |v: &str| vec![("job".to_string(), v.to_string())];
        let req = request(vec![id.clone(), text("service.name", "api")], vec![]);
        assert_eq!(labels(&req, &OtlpConfig::default()), job("api"));
        let req = request(
            vec![
                id.clone(),
                text("service.name", "api"),
                text("service.namespace", "shop"),
            ],
            vec![],
        );
        assert_eq!(labels(&req, &OtlpConfig::default()), job("shop/api"));
        let off = OtlpConfig {
            job_label: false,
            ..OtlpConfig::default()
        };
        assert!(labels(&req, &off).is_empty());
        let req = request(
            vec![id, text("service.name", "api")],
            vec![text("job", "own")],
        );
        assert_eq!(labels(&req, &OtlpConfig::default()), job("own"));
    }
}
