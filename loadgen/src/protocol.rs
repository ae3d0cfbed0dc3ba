//! The protocols the load generator speaks besides `tally.v1`: the same
//! batches as OTLP metrics (over gRPC or HTTP) or as a Prometheus
//! remote-write request, so one fleet and one `--verify` measure every
//! front door of the daemon. The requests are encoded by
//! [`crate::foreign_wire`]; the reference built with the generated types,
//! which the tests hold that encoding to, is here.
//!
//! Kinds map as the daemon maps them back: a gauge is an OTLP Gauge, a
//! delta counter a monotonic delta Sum, a cumulative counter a monotonic
//! cumulative Sum. Remote-write has no types and no delta counters: there a
//! cumulative counter's name ends in `_total` (see [`crate::fleet`]), which
//! is how the daemon tells it from a gauge, and `--kinds` may not ask for
//! delta counters. The source is the resource's `service.instance.id`
//! (OTLP) or the `instance` label (remote-write), the daemon's defaults.
//!
//! InfluxDB line protocol and Graphite plaintext carry numbers only: the
//! daemon keeps them as gauges, so `--kinds` may ask for gauges only. In
//! line protocol a metric `m_0001` is field `0001` of measurement `m` (the
//! daemon names it `<measurement>_<field>` again), the source is the tag
//! `host`, and a source's samples of one tick and label set share a line;
//! in Graphite a sample is the line `<source>.<metric>[;label=value…]
//! <value> <seconds>.<milliseconds>`.

#[cfg(test)]
pub use reference::{otlp, remote_write};

/// How batches reach the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// `tally.v1.Ingest` over gRPC (--target).
    Tally,
    /// OTLP `MetricsService/Export` over gRPC (--target).
    OtlpGrpc,
    /// OTLP `POST /v1/metrics`, binary protobuf (--http).
    OtlpHttp,
    /// Prometheus remote-write 1.0, `POST /api/v1/write` (--http).
    RemoteWrite,
    /// InfluxDB line protocol, `POST /api/v2/write` (--http).
    Influx,
    /// Graphite plaintext over TCP (--graphite).
    Graphite,
}

impl Protocol {
    /// Whether the protocol's batches go over tallyd's gRPC port, which the
    /// run then checks first (the others may be sent to any server that
    /// speaks them).
    pub fn uses_grpc(self) -> bool {
        matches!(self, Protocol::Tally | Protocol::OtlpGrpc)
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tally => "tally",
            Protocol::OtlpGrpc => "otlp-grpc",
            Protocol::OtlpHttp => "otlp-http",
            Protocol::RemoteWrite => "remote-write",
            Protocol::Influx => "influx",
            Protocol::Graphite => "graphite",
        }
    }

    /// Whether the protocol carries gauges only.
    pub fn gauges_only(self) -> bool {
        matches!(self, Protocol::Influx | Protocol::Graphite)
    }
}

/// The requests built with the generated types: slower than
/// [`crate::foreign_wire`], which must produce the same messages, and kept
/// as its reference.
#[cfg(test)]
mod reference {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use tally_proto::prometheus as rw;
    use tally_proto::v1 as pb;

    fn string_kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_owned())),
            }),
            ..Default::default()
        }
    }

    /// `req` as an OTLP export: one resource per source, one metric per run of
    /// series with the same name, one data point per sample.
    pub fn otlp(req: &pb::PushRequest) -> ExportMetricsServiceRequest {
        let resource_metrics = req
            .sources
            .iter()
            .map(|src| {
                let mut metrics: Vec<Metric> = Vec::new();
                for s in &src.series {
                    let points = points(s);
                    match metrics.last_mut() {
                        Some(m) if m.name == s.metric => append(m, points),
                        _ => metrics.push(metric(s, points)),
                    }
                }
                ResourceMetrics {
                    resource: Some(Resource {
                        attributes: vec![string_kv("service.instance.id", &src.source)],
                        ..Default::default()
                    }),
                    scope_metrics: vec![ScopeMetrics {
                        metrics,
                        ..Default::default()
                    }],
                    ..Default::default()
                }
            })
            .collect();
        ExportMetricsServiceRequest { resource_metrics }
    }

    fn points(s: &pb::SeriesSamples) -> Vec<NumberDataPoint> {
        let attributes: Vec<KeyValue> = s
            .labels
            .iter()
            .map(|l| string_kv(&l.name, &l.value))
            .collect();
        s.timestamps_ms
            .iter()
            .zip(&s.values)
            .map(|(t, v)| NumberDataPoint {
                attributes: attributes.clone(),
                time_unix_nano: (*t as u64).saturating_mul(1_000_000),
                value: Some(number_data_point::Value::AsDouble(*v)),
                ..Default::default()
            })
            .collect()
    }

    fn metric(s: &pb::SeriesSamples, data_points: Vec<NumberDataPoint>) -> Metric {
        let sum = |t: AggregationTemporality, data_points| {
            Data::Sum(Sum {
                data_points,
                aggregation_temporality: t as i32,
                is_monotonic: true,
            })
        };
        let data = match pb::SampleKind::try_from(s.kind) {
            Ok(pb::SampleKind::DeltaCounter) => sum(AggregationTemporality::Delta, data_points),
            Ok(pb::SampleKind::CumulativeCounter) => {
                sum(AggregationTemporality::Cumulative, data_points)
            }
            _ => Data::Gauge(Gauge { data_points }),
        };
        Metric {
            name: s.metric.clone(),
            data: Some(data),
            ..Default::default()
        }
    }

    fn append(m: &mut Metric, mut more: Vec<NumberDataPoint>) {
        match &mut m.data {
            Some(Data::Gauge(g)) => g.data_points.append(&mut more),
            Some(Data::Sum(s)) => s.data_points.append(&mut more),
            _ => {}
        }
    }

    /// `req` as a remote-write request: one time series per series, its labels
    /// sorted by name as the specification asks.
    pub fn remote_write(req: &pb::PushRequest) -> rw::WriteRequest {
        let label = |name: &str, value: &str| rw::Label {
            name: name.to_owned(),
            value: value.to_owned(),
        };
        let timeseries = req
            .sources
            .iter()
            .flat_map(|src| {
                src.series.iter().map(move |s| {
                    let mut labels =
                        vec![label("__name__", &s.metric), label("instance", &src.source)];
                    labels.extend(s.labels.iter().map(|l| label(&l.name, &l.value)));
                    labels.sort_by(|a, b| a.name.cmp(&b.name));
                    rw::TimeSeries {
                        labels,
                        samples: s
                            .timestamps_ms
                            .iter()
                            .zip(&s.values)
                            .map(|(t, v)| rw::Sample {
                                timestamp: *t,
                                value: *v,
                            })
                            .collect(),
                    }
                })
            })
            .collect();
        rw::WriteRequest {
            timeseries,
            metadata: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, AggregationTemporality};
    use tally_proto::v1 as pb;

    fn req() -> pb::PushRequest {
        let series = |metric: &str, kind: pb::SampleKind, cpu: &str| pb::SeriesSamples {
            metric: metric.into(),
            kind: kind as i32,
            timestamps_ms: vec![1_000, 2_000],
            values: vec![1.0, 2.0],
            start_times_ms: Vec::new(),
            labels: vec![pb::Label {
                name: "cpu".into(),
                value: cpu.into(),
            }],
        };
        pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: "h1".into(),
                series: vec![
                    series("g", pb::SampleKind::Gauge, "0"),
                    series("g", pb::SampleKind::Gauge, "1"),
                    series("c_total", pb::SampleKind::CumulativeCounter, "0"),
                    series("d", pb::SampleKind::DeltaCounter, "0"),
                ],
                groups: Vec::new(),
            }],
        }
    }

    #[test]
    fn otlp_groups_runs_of_a_metric_and_maps_kinds() {
        let out = otlp(&req());
        let rm = &out.resource_metrics[0];
        assert_eq!(
            rm.resource.as_ref().unwrap().attributes[0].key,
            "service.instance.id"
        );
        let metrics = &rm.scope_metrics[0].metrics;
        assert_eq!(metrics.len(), 3);
        match &metrics[0].data {
            Some(Data::Gauge(g)) => assert_eq!(g.data_points.len(), 4),
            other => panic!("{other:?}"),
        }
        match &metrics[1].data {
            Some(Data::Sum(s)) => {
                assert!(s.is_monotonic);
                assert_eq!(
                    s.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32
                );
                assert_eq!(s.data_points[1].time_unix_nano, 2_000_000_000);
            }
            other => panic!("{other:?}"),
        }
        match &metrics[2].data {
            Some(Data::Sum(s)) => assert_eq!(
                s.aggregation_temporality,
                AggregationTemporality::Delta as i32
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn remote_write_sorts_labels_and_names_the_instance() {
        let out = remote_write(&req());
        assert_eq!(out.timeseries.len(), 4);
        let names: Vec<&str> = out.timeseries[0]
            .labels
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(names, ["__name__", "cpu", "instance"]);
        assert_eq!(out.timeseries[0].samples.len(), 2);
    }
}
