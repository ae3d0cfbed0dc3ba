//! The view parser held to the owned conversion: for random requests of
//! every metric type, attribute type and odd case, encoded as prost
//! encodes them or with their fields reordered, split and replaced as
//! protobuf allows, the parse makes the view `PushView::of(&convert(..))`
//! makes, with the same refusals and the same points behind each series;
//! and damaged bytes are refused exactly when prost refuses them.

use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    summary_data_point::ValueAtQuantile, Exemplar, ExponentialHistogramDataPoint, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use proptest::prelude::*;
use prost::encoding::{encode_key, encode_varint, WireType};

use super::*;
use crate::aggregator::Rejection;
use crate::ingest::otlp::{convert, OtlpRequest};

const KEYS: [&str; 12] = [
    "service.instance.id",
    "host.name",
    "service.name",
    "service.namespace",
    "deployment.environment",
    "a.b",
    "a_b",
    "job",
    "le",
    "quantile",
    "0x",
    "__r",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[a-z]{0,2}".prop_map(Value::StringValue),
        1 => any::<bool>().prop_map(Value::BoolValue),
        1 => any::<i64>().prop_map(Value::IntValue),
        1 => prop_oneof![any::<f64>(), Just(f64::NAN), Just(0.5)].prop_map(Value::DoubleValue),
        1 => prop::collection::vec(any::<u8>(), 0..3).prop_map(Value::BytesValue),
        1 => any::<i32>().prop_map(Value::StringValueStrindex),
    ]
}

fn value() -> impl Strategy<Value = Option<AnyValue>> {
    let any = |v| AnyValue { value: Some(v) };
    let nested = prop_oneof![
        prop::collection::vec(scalar(), 0..3).prop_map(move |vs| {
            Value::ArrayValue(ArrayValue {
                values: vs.into_iter().map(any).collect(),
            })
        }),
        prop::collection::vec(("[a-z]", scalar()), 0..2).prop_map(move |kvs| {
            Value::KvlistValue(KeyValueList {
                values: kvs
                    .into_iter()
                    .map(|(key, v)| KeyValue {
                        key,
                        value: Some(any(v)),
                        ..Default::default()
                    })
                    .collect(),
            })
        }),
    ];
    prop_oneof![
        10 => scalar().prop_map(move |v| Some(any(v))),
        1 => nested.prop_map(move |v| Some(any(v))),
        1 => Just(None),
        1 => Just(Some(AnyValue { value: None })),
    ]
}

fn attrs(max: usize) -> impl Strategy<Value = Vec<KeyValue>> {
    let kv = (prop::sample::select(&KEYS[..]), value()).prop_map(|(key, value)| KeyValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    });
    prop::collection::vec(kv, 0..max)
}

fn point_attrs() -> impl Strategy<Value = Vec<KeyValue>> {
    prop_oneof![
        20 => attrs(4),
        1 => Just((0..65).map(|i| KeyValue { key: format!("k{i}"), ..Default::default() }).collect()),
    ]
}

/// Start time, time and flags of a point.
fn when() -> impl Strategy<Value = (u64, u64, u32)> {
    (
        prop_oneof![Just(0u64), Just(1_500_000_000u64), any::<u64>()],
        prop_oneof![1 => Just(0u64), 6 => Just(5_000_000_000u64), 1 => any::<u64>()],
        prop_oneof![6 => Just(0u32), 1 => Just(1u32), 1 => Just(2u32)],
    )
}

fn exemplars() -> impl Strategy<Value = Vec<Exemplar>> {
    prop::collection::vec(
        (attrs(2), any::<u64>()).prop_map(|(filtered_attributes, t)| Exemplar {
            filtered_attributes,
            time_unix_nano: t,
            span_id: vec![1, 2],
            ..Default::default()
        }),
        0..2,
    )
}

fn number() -> impl Strategy<Value = NumberDataPoint> {
    let value = prop_oneof![
        Just(None),
        any::<f64>().prop_map(|v| Some(number_data_point::Value::AsDouble(v))),
        any::<i64>().prop_map(|v| Some(number_data_point::Value::AsInt(v))),
    ];
    (point_attrs(), when(), value, exemplars()).prop_map(
        |(attributes, (s, t, flags), value, exemplars)| NumberDataPoint {
            attributes,
            start_time_unix_nano: s,
            time_unix_nano: t,
            value,
            exemplars,
            flags,
        },
    )
}

fn histogram() -> impl Strategy<Value = HistogramDataPoint> {
    let bounds = prop_oneof![
        Just(vec![]),
        Just(vec![0.5, 1.0]),
        Just(vec![1.0, 0.5]),
        prop::collection::vec(any::<f64>(), 0..3),
    ];
    let counts = prop::collection::vec(0u64..5, 0..4);
    (
        point_attrs(),
        when(),
        bounds,
        counts,
        any::<bool>(),
        prop::option::of(any::<f64>()),
    )
        .prop_map(
            |(attributes, (s, t, flags), explicit_bounds, bucket_counts, honest, sum)| {
                let count = if honest {
                    bucket_counts.iter().sum()
                } else {
                    3
                };
                HistogramDataPoint {
                    attributes,
                    start_time_unix_nano: s,
                    time_unix_nano: t,
                    count,
                    sum,
                    bucket_counts,
                    explicit_bounds,
                    flags,
                    min: Some(1.0),
                    ..Default::default()
                }
            },
        )
}

fn exponential() -> impl Strategy<Value = ExponentialHistogramDataPoint> {
    (
        point_attrs(),
        when(),
        any::<u64>(),
        prop::option::of(any::<f64>()),
    )
        .prop_map(
            |(attributes, (s, t, flags), count, sum)| ExponentialHistogramDataPoint {
                attributes,
                start_time_unix_nano: s,
                time_unix_nano: t,
                count,
                sum,
                scale: -2,
                positive: Some(Buckets {
                    offset: -1,
                    bucket_counts: vec![1, 2],
                }),
                flags,
                ..Default::default()
            },
        )
}

fn summary() -> impl Strategy<Value = SummaryDataPoint> {
    let q = (any::<f64>(), any::<f64>())
        .prop_map(|(quantile, value)| ValueAtQuantile { quantile, value });
    (
        point_attrs(),
        when(),
        any::<u64>(),
        any::<f64>(),
        prop::collection::vec(q, 0..3),
    )
        .prop_map(|(attributes, (s, t, flags), count, sum, quantile_values)| {
            SummaryDataPoint {
                attributes,
                start_time_unix_nano: s,
                time_unix_nano: t,
                count,
                sum,
                quantile_values,
                flags,
            }
        })
}

fn points<S: Strategy>(s: S) -> impl Strategy<Value = Vec<S::Value>> {
    prop::collection::vec(s, 0..3)
}

fn data() -> impl Strategy<Value = Option<Data>> {
    use opentelemetry_proto::tonic::metrics::v1::{ExponentialHistogram, Gauge, Sum, Summary};
    let temporality = prop_oneof![Just(0i32), Just(1), Just(2), Just(7)];
    prop_oneof![
        1 => Just(None),
        3 => points(number()).prop_map(|data_points| Some(Data::Gauge(Gauge { data_points }))),
        4 => (points(number()), temporality.clone(), any::<bool>()).prop_map(|(data_points, t, m)| {
            Some(Data::Sum(Sum { data_points, aggregation_temporality: t, is_monotonic: m }))
        }),
        3 => (points(histogram()), temporality.clone()).prop_map(|(data_points, t)| {
            Some(Data::Histogram(Histogram { data_points, aggregation_temporality: t }))
        }),
        2 => (points(exponential()), temporality).prop_map(|(data_points, t)| {
            Some(Data::ExponentialHistogram(ExponentialHistogram { data_points, aggregation_temporality: t }))
        }),
        2 => points(summary()).prop_map(|data_points| Some(Data::Summary(Summary { data_points }))),
    ]
}

fn request() -> impl Strategy<Value = ExportMetricsServiceRequest> {
    let metric = (
        prop::sample::select(&["m", "http.requests", "temp", ""][..]),
        data(),
    )
        .prop_map(|(name, data)| Metric {
            name: name.to_owned(),
            unit: "s".into(),
            data,
            ..Default::default()
        });
    let scope = prop::option::of(attrs(2).prop_map(|attributes| InstrumentationScope {
        name: "lib".into(),
        version: "1".into(),
        attributes,
        dropped_attributes_count: 0,
    }));
    let sm =
        (scope, prop::collection::vec(metric, 0..4)).prop_map(|(scope, metrics)| ScopeMetrics {
            scope,
            metrics,
            schema_url: String::new(),
        });
    let resource = prop::option::of(attrs(6).prop_map(|attributes| Resource {
        attributes,
        ..Default::default()
    }));
    let rm = (resource, prop::collection::vec(sm, 0..3)).prop_map(|(resource, scope_metrics)| {
        ResourceMetrics {
            resource,
            scope_metrics,
            schema_url: "u".into(),
        }
    });
    prop::collection::vec(rm, 0..4)
        .prop_map(|resource_metrics| ExportMetricsServiceRequest { resource_metrics })
}

fn config() -> impl Strategy<Value = OtlpConfig> {
    (
        any::<bool>(),
        prop::sample::subsequence(vec!["deployment.environment", "a.b", "a_b", "le"], 0..3),
    )
        .prop_map(|(job_label, labels)| OtlpConfig {
            job_label,
            resource_labels: labels.into_iter().map(String::from).collect(),
            ..OtlpConfig::default()
        })
}

/// A length-delimited field.
fn field(tag: u32, body: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// `req` encoded as protobuf allows but prost does not write it: each
/// resource after its metrics and split in two, each metric's name after
/// its data, its data split in two (the first half without its
/// temporality) after a member of the oneof that it replaces.
fn odd_bytes(req: &ExportMetricsServiceRequest) -> Vec<u8> {
    use prost::Message as _;
    let mut out = Vec::new();
    for rm in &req.resource_metrics {
        let mut rm_body = Vec::new();
        for sm in &rm.scope_metrics {
            let mut sm_body = ScopeMetrics {
                metrics: vec![],
                ..sm.clone()
            }
            .encode_to_vec();
            for m in &sm.metrics {
                field(2, &odd_metric(m), &mut sm_body);
            }
            field(2, &sm_body, &mut rm_body);
        }
        if let Some(r) = &rm.resource {
            let half = r.attributes.len() / 2;
            for attributes in [&r.attributes[..half], &r.attributes[half..]] {
                let part = Resource {
                    attributes: attributes.to_vec(),
                    ..Default::default()
                };
                field(1, &part.encode_to_vec(), &mut rm_body);
            }
        }
        field(1, &rm_body, &mut out);
    }
    out
}

fn odd_metric(m: &Metric) -> Vec<u8> {
    use opentelemetry_proto::tonic::metrics::v1::Gauge;
    use prost::Message as _;
    let replaced = match &m.data {
        Some(Data::Gauge(_)) => Data::Histogram(Histogram::default()),
        _ => Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint::default()],
        }),
    };
    let mut body = Metric {
        data: Some(replaced),
        ..Default::default()
    }
    .encode_to_vec();
    let (first, second) = split(m.data.clone());
    for data in [first, second] {
        body.extend(
            Metric {
                data,
                ..Default::default()
            }
            .encode_to_vec(),
        );
    }
    body.extend(
        Metric {
            data: None,
            ..m.clone()
        }
        .encode_to_vec(),
    );
    body
}

/// A metric's data as two that merge into it.
fn split(data: Option<Data>) -> (Option<Data>, Option<Data>) {
    macro_rules! halves {
        ($v:ident, $d:expr, |$x:ident| $first:expr) => {{
            let mut $x = $d.clone();
            let half = $x.data_points.len() / 2;
            let rest = $x.data_points.split_off(half);
            let first = $first;
            let mut second = $d;
            second.data_points = rest;
            (Some(Data::$v(first)), Some(Data::$v(second)))
        }};
    }
    match data {
        None => (None, None),
        Some(Data::Gauge(g)) => halves!(Gauge, g, |x| x),
        Some(Data::Summary(s)) => halves!(Summary, s, |x| x),
        Some(Data::Sum(s)) => halves!(Sum, s, |x| {
            x.aggregation_temporality = 0;
            x.is_monotonic = false;
            x
        }),
        Some(Data::Histogram(h)) => halves!(Histogram, h, |x| {
            x.aggregation_temporality = 0;
            x
        }),
        Some(Data::ExponentialHistogram(h)) => halves!(ExponentialHistogram, h, |x| {
            x.aggregation_temporality = 0;
            x
        }),
    }
}

fn budget() -> Budget {
    Budget {
        samples: usize::MAX,
        bytes: usize::MAX,
    }
}

/// The point behind each series of the view, source by source.
fn points_of_oracle(want: &OtlpRequest) -> Vec<Vec<u32>> {
    want.converted
        .ordinals
        .iter()
        .map(|s| s.iter().map(|o| want.point_of[*o as usize]).collect())
        .collect()
}

fn points_of_view(got: &OtlpView<'_>) -> Vec<Vec<u32>> {
    got.view
        .sources()
        .enumerate()
        .map(|(i, src)| {
            (0..src.series_len())
                .map(|j| {
                    let at = got.view.series_at(i as u32, j as u32).unwrap();
                    let read = got.read_order.get(at).map_or(at, |&o| o as usize);
                    got.point_of[read]
                })
                .collect()
        })
        .collect()
}

/// Asserts the parse of `bytes` is the conversion of prost's decoding.
fn holds(bytes: &[u8], cfg: &OtlpConfig) -> Result<(), TestCaseError> {
    use prost::Message as _;
    let decoded = ExportMetricsServiceRequest::decode(bytes);
    let arena = Bump::new();
    let got = parse(bytes, &arena, cfg, 1000, budget());
    let (decoded, got) = match (decoded, got) {
        (Ok(d), Ok(g)) => (d, g),
        (Err(_), Err(ParseError::Wire(_))) => return Ok(()),
        (d, g) => {
            return Err(TestCaseError::fail(format!(
                "prost: {:?}; parse: {:?}",
                d.err(),
                g.err()
            )))
        }
    };
    let want = convert(&decoded, cfg, 1000, budget()).unwrap();
    let want_view = PushView::of(&want.converted.request);
    prop_assert_eq!(
        got.view.to_request().encode_to_vec(),
        want_view.to_request().encode_to_vec()
    );
    prop_assert_eq!(got.points, want.points);
    prop_assert_eq!(got.refused_points, want.refused_points);
    let (a, b) = (&got.refused, &want.converted.refused);
    prop_assert_eq!(a.rejected, b.rejected);
    prop_assert_eq!(&a.rejections, &b.rejections);
    prop_assert_eq!(a.rejected_by_reason, b.rejected_by_reason);
    prop_assert_eq!(points_of_view(&got), points_of_oracle(&want));
    // Every series refused at admission: the same points answered.
    let mut out = IngestOutcome::default();
    for (i, src) in got.view.sources().enumerate() {
        for j in 0..src.series_len() {
            out.rejected += 1;
            out.rejections.push(Rejection {
                source_index: i as u32,
                series_index: j as u32,
                sample_index: None,
                reason: RejectReason::InvalidLabel,
                detail: String::new(),
            });
        }
    }
    prop_assert_eq!(got.rejected_points(&out), want.rejected_points(&out));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_request_parses_as_its_conversion(req in request(), cfg in config()) {
        use prost::Message as _;
        holds(&req.encode_to_vec(), &cfg)?;
    }

    /// Fields out of prost's order, messages split, oneofs replaced.
    #[test]
    fn odd_encodings_parse_as_prost_merges_them(req in request(), cfg in config()) {
        holds(&odd_bytes(&req), &cfg)?;
    }

    /// Damaged bytes are refused exactly when prost refuses them, and
    /// read as their conversion when it does not.
    #[test]
    fn damaged_bytes_fail_as_prost_fails(
        req in request(),
        odd in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        use prost::Message as _;
        let mut bytes = if odd { odd_bytes(&req) } else { req.encode_to_vec() };
        if bytes.is_empty() {
            return Ok(());
        }
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        holds(&bytes, &OtlpConfig::default())?;
    }
}

/// A request of one resource, whose `key` attribute is "h", holding
/// `metric`.
fn one_metric(key: &str, metric: Metric) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: key.into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue("h".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![metric],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A request over its budget is refused whole, unless its bytes are
/// damaged further on, which prost says first.
#[test]
fn a_request_over_budget_is_full_unless_it_does_not_decode() {
    use prost::Message as _;
    let metric = Metric {
        name: "m".into(),
        data: Some(Data::Gauge(
            opentelemetry_proto::tonic::metrics::v1::Gauge {
                data_points: vec![
                    NumberDataPoint {
                        time_unix_nano: 1,
                        value: Some(number_data_point::Value::AsInt(1)),
                        ..Default::default()
                    };
                    3
                ],
            },
        )),
        ..Default::default()
    };
    let req = one_metric("host.name", metric);
    let small = Budget {
        samples: 2,
        bytes: 1 << 20,
    };
    let arena = Bump::new();
    let cfg = OtlpConfig::default();
    let mut bytes = req.encode_to_vec();
    assert!(matches!(
        parse(&bytes, &arena, &cfg, 10, small),
        Err(ParseError::Full)
    ));
    // A field with a wire type its message does not allow, at the end.
    bytes.extend_from_slice(&[0x0b]);
    assert!(matches!(
        parse(&bytes, &arena, &cfg, 10, small),
        Err(ParseError::Wire(_))
    ));
}

/// A sum's points are found while its shape is read up to
/// `GATHERED_POINTS`; past that the metric is walked again for them. Both
/// read as the conversion reads them.
#[test]
fn a_sum_with_more_points_than_are_gathered_parses_as_its_conversion() {
    use opentelemetry_proto::tonic::metrics::v1::Sum;
    use prost::Message as _;
    for n in [GATHERED_POINTS, GATHERED_POINTS + 3] {
        let point = |i: usize| NumberDataPoint {
            attributes: vec![KeyValue {
                key: "i".into(),
                value: Some(AnyValue {
                    value: Some(Value::IntValue(i as i64 % 7)),
                }),
                ..Default::default()
            }],
            time_unix_nano: 1_000_000 * (i as u64 + 1),
            value: Some(number_data_point::Value::AsDouble(i as f64)),
            ..Default::default()
        };
        let metric = Metric {
            name: "requests_total".into(),
            data: Some(Data::Sum(Sum {
                data_points: (0..n).map(point).collect(),
                aggregation_temporality: 2,
                is_monotonic: true,
            })),
            ..Default::default()
        };
        let req = one_metric("service.instance.id", metric);
        let bytes = req.encode_to_vec();
        holds(&bytes, &OtlpConfig::default()).unwrap();
        let arena = Bump::new();
        let got = parse(&bytes, &arena, &OtlpConfig::default(), 10, budget()).unwrap();
        assert_eq!(got.view.samples(), n, "{n} points");
    }
}
