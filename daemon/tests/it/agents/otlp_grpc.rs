//! OTLP/gRPC's answers to bad input through the real binary, with the
//! generated OTLP client: refused points come back as `partial_success`
//! while the good points of the same request are kept, gzip-compressed
//! requests are read, an oversized message is refused whole, and the daemon
//! goes on serving. And a cumulative counter whose start time changes is
//! reset, even when its value did not go down.

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tally_testkit::client::{get_ok, now_ms, range_sum};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::Daemon;
use tonic::codec::CompressionEncoding;

use crate::tallyd;

fn attr(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn gauge(name: &str, t_ns: u64, values: &[f64]) -> Metric {
    let data_points = values
        .iter()
        .enumerate()
        .map(|(i, v)| NumberDataPoint {
            attributes: vec![attr("core", &i.to_string())],
            time_unix_nano: t_ns,
            value: Some(number_data_point::Value::AsDouble(*v)),
            ..Default::default()
        })
        .collect();
    Metric {
        name: name.into(),
        data: Some(Data::Gauge(Gauge { data_points })),
        ..Default::default()
    }
}

fn resource(host: Option<&str>, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: host.map(|h| attr("host.name", h)).into_iter().collect(),
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_grpc_keeps_good_points_of_bad_requests() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let mut client =
        MetricsServiceClient::new(d.channel().await).send_compressed(CompressionEncoding::Gzip);
    let t_ns = (now_ms() as u64) * 1_000_000;
    let bad_histogram = Metric {
        name: "lat".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: t_ns,
                count: 5,
                bucket_counts: vec![1, 1],
                explicit_bounds: vec![1.0],
                ..Default::default()
            }],
            aggregation_temporality: 2,
        })),
        ..Default::default()
    };
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![
            resource(
                Some("h1"),
                vec![
                    gauge("temp", t_ns, &[20.0, f64::INFINITY, 22.0]),
                    bad_histogram,
                ],
            ),
            resource(None, vec![gauge("temp", t_ns, &[1.0])]),
        ],
    };
    let resp = client.export(req).await.unwrap().into_inner();
    let partial = resp.partial_success.expect("partial success");
    assert_eq!(partial.rejected_data_points, 3, "{partial:?}");
    for reason in ["non_finite_value", "invalid_point", "missing_source"] {
        assert!(partial.error_message.contains(reason), "{partial:?}");
    }

    // The two good points were kept.
    let from = (now_ms() / 1000 - 120).to_string();
    let body = get_ok(
        &d,
        "/api/v1/range",
        &[
            ("source", "h1"),
            ("metric", "temp"),
            ("from", &from),
            ("step", "1m"),
        ],
    )
    .await;
    let sums: Vec<f64> = body["series"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["points"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p["sum"].as_f64())
        })
        .collect();
    assert_eq!(sums, [20.0, 22.0], "{body}");

    // A message over ingest.max_message_bytes is refused whole, and the
    // daemon goes on serving.
    let huge = ExportMetricsServiceRequest {
        resource_metrics: vec![resource(
            Some("h1"),
            vec![gauge(&"x".repeat(17 << 20), t_ns, &[1.0])],
        )],
    };
    let status = MetricsServiceClient::new(d.channel().await)
        .export(huge)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let ok = ExportMetricsServiceRequest {
        resource_metrics: vec![resource(Some("h2"), vec![gauge("temp", t_ns, &[1.0])])],
    };
    let resp = client.export(ok).await.unwrap().into_inner();
    assert_eq!(resp.partial_success, None);

    let m = metrics_text(&d).await;
    let accepted = metric(
        &m,
        "tally_samples_accepted_total",
        &[("protocol", "otlp_grpc")],
    );
    assert_eq!(accepted, Some(3.0), "{m}");
    let rejected = metric(
        &m,
        "tally_samples_rejected_total",
        &[("protocol", "otlp_grpc")],
    );
    assert_eq!(rejected, Some(3.0), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_start_time_resets_a_cumulative_counter() {
    let mut d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let mut client = MetricsServiceClient::new(d.channel().await);
    let t_ns = (now_ms() as u64 - 30_000) * 1_000_000;
    let (first_start, restart) = (t_ns - 60_000_000_000, t_ns + 1_500_000_000);
    // 10 is the baseline, then +20; then the agent restarted (a new start
    // time) and has counted 40 since, more than the 30 before it.
    for (i, (start, v)) in [(first_start, 10.0), (first_start, 30.0), (restart, 40.0)]
        .into_iter()
        .enumerate()
    {
        let point = NumberDataPoint {
            start_time_unix_nano: start,
            time_unix_nano: t_ns + i as u64 * 1_000_000_000,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        };
        let sum = Metric {
            name: "requests".into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![point],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![resource(Some("h1"), vec![sum])],
        };
        let resp = client.export(req).await.unwrap().into_inner();
        assert_eq!(resp.partial_success, None);
    }
    assert_eq!(range_sum(&d, "h1", "requests", 600).await, 60.0);
    // The same after a crash: the log replays the start times too.
    tokio::task::block_in_place(|| d.crash_and_restart());
    assert_eq!(
        range_sum(&d, "h1", "requests", 600).await,
        60.0,
        "{}",
        d.logs()
    );
}
