//! The ingest endpoints' answers to good and bad bodies, in process.

use std::io::Write as _;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;
use tally_proto::prometheus as rw;
use tower::ServiceExt as _;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn now_ns() -> u64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64
}

fn gauge(name: &str, values: &[f64]) -> Metric {
    Metric {
        name: name.into(),
        data: Some(Data::Gauge(Gauge {
            data_points: values
                .iter()
                .enumerate()
                .map(|(i, v)| NumberDataPoint {
                    attributes: vec![kv("cpu", &i.to_string())],
                    time_unix_nano: now_ns(),
                    value: Some(number_data_point::Value::AsDouble(*v)),
                    ..Default::default()
                })
                .collect(),
        })),
        ..Default::default()
    }
}

fn histogram(counts: Vec<u64>, bounds: Vec<f64>, count: u64) -> Metric {
    Metric {
        name: "latency".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: now_ns(),
                count,
                sum: Some(1.5),
                bucket_counts: counts,
                explicit_bounds: bounds,
                ..Default::default()
            }],
            aggregation_temporality: 2,
        })),
        ..Default::default()
    }
}

fn export(resources: Vec<(Option<&str>, Vec<Metric>)>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: resources
            .into_iter()
            .map(|(host, metrics)| ResourceMetrics {
                resource: Some(Resource {
                    attributes: host.map(|h| kv("host.name", h)).into_iter().collect(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

async fn post(
    app: &axum::Router,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (StatusCode, Vec<u8>, Option<String>) {
    let mut req = Request::post(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes.to_vec(), retry)
}

const PB: (&str, &str) = ("content-type", "application/x-protobuf");

fn app() -> (tempfile::TempDir, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let app = crate::fuzz::http::router(dir.path());
    (dir, app)
}

#[tokio::test]
async fn otlp_protobuf_takes_good_points_and_reports_the_rest() {
    let (_dir, app) = app();
    let req = export(vec![
        (
            Some("h1"),
            vec![
                gauge("cpu.util", &[0.5, f64::NAN]),
                histogram(vec![1, 2, 0], vec![0.1, 1.0], 3),
            ],
        ),
        (None, vec![gauge("orphan", &[1.0])]),
        (Some("h2"), vec![histogram(vec![1, 2], vec![0.1, 1.0], 3)]),
    ]);
    let (status, body, _) = post(&app, "/v1/metrics", &[PB], req.encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let resp = ExportMetricsServiceResponse::decode(&body[..]).unwrap();
    let partial = resp.partial_success.expect("partial success");
    // The point without a source, the mismatched histogram; NaN is data.
    assert_eq!(partial.rejected_data_points, 2, "{partial:?}");
    for want in ["missing_source", "invalid_point"] {
        assert!(
            partial.error_message.contains(want),
            "{}",
            partial.error_message
        );
    }
}

#[tokio::test]
async fn otlp_all_good_has_no_partial_success() {
    let (_dir, app) = app();
    let req = export(vec![(Some("h1"), vec![gauge("g", &[1.0, 2.0])])]);
    let (status, body, _) = post(&app, "/v1/metrics", &[PB], req.encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let resp = ExportMetricsServiceResponse::decode(&body[..]).unwrap();
    assert_eq!(resp.partial_success, None);
}

#[tokio::test]
async fn otlp_json_and_gzip_are_read() {
    let (_dir, app) = app();
    let json = serde_json::json!({
        "resourceMetrics": [{
            "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": "h1"}}]},
            "scopeMetrics": [{"metrics": [{
                "name": "temp",
                "gauge": {"dataPoints": [{"timeUnixNano": now_ns().to_string(), "asDouble": 21.5}]}
            }]}]
        }]
    });
    let ct = ("content-type", "application/json");
    let (status, body, _) = post(&app, "/v1/metrics", &[ct], json.to_string().into_bytes()).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"{}", "an all-good JSON answer is an empty object");

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&export(vec![(Some("h1"), vec![gauge("g", &[1.0])])]).encode_to_vec())
        .unwrap();
    let enc = ("content-encoding", "gzip");
    let (status, _, _) = post(&app, "/v1/metrics", &[PB, enc], gz.finish().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn otlp_bad_bodies_are_refused_with_a_status() {
    let (_dir, app) = app();
    let (status, body, _) = post(&app, "/v1/metrics", &[PB], vec![0xff, 0xff, 0xff]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("ExportMetricsServiceRequest"));

    let ct = ("content-type", "text/plain");
    let (status, _, _) = post(&app, "/v1/metrics", &[ct], b"x".to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let enc = ("content-encoding", "br");
    let (status, _, _) = post(&app, "/v1/metrics", &[PB, enc], b"x".to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let (status, _, _) = post(
        &app,
        "/v1/metrics",
        &[("content-type", "application/json")],
        b"{".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // 32 MiB of zeros gzip to a few KiB: refused as it inflates.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; 32 << 20]).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20);
    let (status, _, _) = post(
        &app,
        "/v1/metrics",
        &[PB, ("content-encoding", "gzip")],
        bomb,
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

fn rw_series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> rw::TimeSeries {
    rw::TimeSeries {
        labels: labels
            .iter()
            .map(|(n, v)| rw::Label {
                name: (*n).into(),
                value: (*v).into(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|(t, v)| rw::Sample {
                timestamp: *t,
                value: *v,
            })
            .collect(),
    }
}

fn snappy(req: &rw::WriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .unwrap()
}

const SNAPPY: (&str, &str) = ("content-encoding", "snappy");

#[tokio::test]
async fn remote_write_answers_204_400_and_415() {
    let (_dir, app) = app();
    let now = chrono::Utc::now().timestamp_millis();
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let good = rw::WriteRequest {
        timeseries: vec![rw_series(
            &[
                ("__name__", "node_load1"),
                ("instance", "h1"),
                ("job", "node"),
            ],
            &[(now - 1000, 0.5), (now, stale)],
        )],
        metadata: vec![],
    };
    let (status, body, _) = post(&app, "/api/v1/write", &[PB, SNAPPY], snappy(&good)).await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "{}",
        String::from_utf8_lossy(&body)
    );

    let mixed = rw::WriteRequest {
        timeseries: vec![
            rw_series(&[("__name__", "up"), ("instance", "h1")], &[(now, 1.0)]),
            rw_series(&[("__name__", "up"), ("job", "x")], &[(now, 1.0)]),
        ],
        metadata: vec![],
    };
    let (status, body, _) = post(&app, "/api/v1/write", &[PB, SNAPPY], snappy(&mixed)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.starts_with("1 accepted;") && text.contains("missing_source"),
        "{text}"
    );

    let (status, _, _) = post(&app, "/api/v1/write", &[PB], good.encode_to_vec()).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, _, _) = post(
        &app,
        "/api/v1/write",
        &[PB, SNAPPY],
        b"\xff\xff\xff\xff".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let junk = snap::raw::Encoder::new()
        .compress_vec(b"\xff\xff\xff")
        .unwrap();
    let (status, _, _) = post(&app, "/api/v1/write", &[PB, SNAPPY], junk).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Arbitrary bytes, raw or compressed, never crash the endpoints or get
/// anything but a 2xx or a 4xx.
#[test]
fn arbitrary_bodies_are_answered_2xx_or_4xx() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_dir, app) = rt.block_on(async { app() });
    let cfg = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    proptest!(cfg, |(body in proptest::collection::vec(any::<u8>(), 0..512), compress in 0u8..3, json in any::<bool>())| {
        let (path, ct, enc, bytes) = match compress {
            0 => ("/v1/metrics", if json { "application/json" } else { "application/x-protobuf" }, "", body),
            1 => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&body).unwrap();
                ("/v1/metrics", "application/x-protobuf", "gzip", gz.finish().unwrap())
            }
            _ => ("/api/v1/write", "application/x-protobuf", "snappy", snappy_raw(&body)),
        };
        let mut headers = vec![("content-type", ct)];
        if !enc.is_empty() {
            headers.push(("content-encoding", enc));
        }
        let (status, _, _) = rt.block_on(post(&app, path, &headers, bytes));
        prop_assert!(status.is_success() || status.is_client_error(), "{path}: {status}");
    });
}

fn snappy_raw(body: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(body).unwrap()
}

/// A remote-write 2.0 request is refused 415 with the 2.0 `Written`
/// headers at zero, whatever its body; `proto=prometheus.WriteRequest` is
/// 1.0 spelt out and taken.
#[tokio::test]
async fn remote_write_2_is_415_with_nothing_written() {
    let (_dir, app) = app();
    let now = chrono::Utc::now().timestamp_millis();
    let req = rw::WriteRequest {
        timeseries: vec![rw_series(
            &[("__name__", "up"), ("instance", "h1")],
            &[(now, 1.0)],
        )],
        metadata: vec![],
    };
    for (ct, want) in [
        (
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "application/x-protobuf; proto=\"io.prometheus.write.v2.Request\"",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "application/x-protobuf;proto=example.Other",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "application/x-protobuf;proto=prometheus.WriteRequest",
            StatusCode::NO_CONTENT,
        ),
    ] {
        let resp = app
            .clone()
            .oneshot(
                Request::post("/api/v1/write")
                    .header("content-type", ct)
                    .header("content-encoding", "snappy")
                    .header("x-prometheus-remote-write-version", "2.0.0")
                    .body(Body::from(snappy(&req)))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), want, "{ct}");
        if want == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            for h in [
                "x-prometheus-remote-write-samples-written",
                "x-prometheus-remote-write-histograms-written",
                "x-prometheus-remote-write-exemplars-written",
            ] {
                assert_eq!(resp.headers().get(h).unwrap(), "0", "{ct}: {h}");
            }
            let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains("remote-write 1.0"), "{text}");
        }
    }
}

/// A series typed by metadata against its name, then sent without
/// metadata, is taken as the kind it has: 204, not 400 `kind_conflict`.
#[tokio::test]
async fn remote_write_keeps_a_kind_that_came_from_metadata() {
    use rw::metric_metadata::MetricType as T;
    let (_dir, app) = app();
    let now = chrono::Utc::now().timestamp_millis();
    let series = |t: i64, v: f64| {
        rw_series(
            &[("__name__", "queue_total"), ("instance", "h1"), ("q", "a")],
            &[(t, v)],
        )
    };
    let typed = rw::WriteRequest {
        timeseries: vec![series(now - 2_000, 5.0)],
        metadata: vec![rw::MetricMetadata {
            r#type: T::Gauge as i32,
            metric_family_name: "queue_total".into(),
            ..Default::default()
        }],
    };
    let bare = rw::WriteRequest {
        timeseries: vec![series(now - 1_000, 3.0)],
        metadata: vec![],
    };
    for req in [&typed, &bare, &typed] {
        let (status, body, _) = post(&app, "/api/v1/write", &[PB, SNAPPY], snappy(req)).await;
        assert_eq!(
            status,
            StatusCode::NO_CONTENT,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// Bodies up to `ingest.max_message_bytes` (16 MiB) reach the handler,
/// past the HTTP framework's own 2 MiB default: a 3 MiB body that is not
/// snappy is 400 (unreadable), not 413.
#[tokio::test]
async fn ingest_bodies_over_two_mib_are_read() {
    let (_dir, app) = app();
    let body = vec![0xffu8; 3 << 20];
    let (status, text, _) = post(&app, "/api/v1/write", &[PB, SNAPPY], body).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        String::from_utf8_lossy(&text)
    );
}
