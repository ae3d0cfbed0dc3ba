//! The second audit's protocol findings, through the real binary:
//!
//! * a remote-write 2.0 request is refused 415 with the 2.0 `Written`
//!   headers at zero, and nothing is stored;
//! * a label named `tally_metric` is refused at ingest like `source`;
//! * `step=auto` over 30 days gets 30-minute steps when 1,440 of them fit;
//! * the Prometheus label-values endpoint answers an invalid UTF-8 name in
//!   Prometheus' JSON error;
//! * an OTLP/HTTP body over the limit gets 413 with a `google.rpc.Status`
//!   in the request's encoding, whether its length was declared or not;
//! * a remote-write series typed by metadata and later sent without it is
//!   taken (204), as the kind it has.

use prost::Message as _;
use tally_proto::prometheus as rw;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, get_ok, http_client, now_ms, series, within};
use tally_testkit::Daemon;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{batch, push};
use crate::tallyd;

fn rw_request(name: &str, instance: &str, samples: &[(i64, f64)]) -> rw::WriteRequest {
    rw::WriteRequest {
        timeseries: vec![rw::TimeSeries {
            labels: [("__name__", name), ("instance", instance)]
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
        }],
        metadata: vec![],
    }
}

/// POSTs `body` to `path` with `headers`: (status, headers, body).
async fn post(
    d: &Daemon,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = http_client().post(format!("{}{path}", d.http_url()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = within("POST", req.body(body).send()).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = within("body", resp.bytes()).await.unwrap().to_vec();
    (status, headers, body)
}

fn snappy(req: &rw::WriteRequest) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_audits_protocol_findings_stay_fixed() {
    let d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_INGEST_MAX_MESSAGE_BYTES", "4096"),
    )
    .await;
    remote_write_2_is_refused(&d).await;
    tally_metric_is_reserved(&d).await;
    auto_step_fits_a_month_in_half_hours(&d).await;
    label_values_refuse_invalid_utf8_in_json(&d).await;
    otlp_too_large_is_a_status(&d).await;
    remote_write_keeps_a_kind_from_metadata(&d).await;
}

async fn remote_write_2_is_refused(d: &Daemon) {
    let req = rw_request("up", "rw2-host", &[(now_ms(), 1.0)]);
    let (status, headers, body) = post(
        d,
        "/api/v1/write",
        &[
            (
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            ),
            ("content-encoding", "snappy"),
            ("x-prometheus-remote-write-version", "2.0.0"),
        ],
        snappy(&req),
    )
    .await;
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&body));
    for h in [
        "x-prometheus-remote-write-samples-written",
        "x-prometheus-remote-write-histograms-written",
        "x-prometheus-remote-write-exemplars-written",
    ] {
        assert_eq!(headers.get(h).map(|v| v.as_bytes()), Some(&b"0"[..]), "{h}");
    }
    let body = get_ok(d, "/api/v1/sources", &[("source", "rw2-host")]).await;
    assert_eq!(body["sources"].as_array().map(Vec::len), Some(0), "{body}");
}

async fn tally_metric_is_reserved(d: &Daemon) {
    let mut s = series("cpu", pb::SampleKind::Gauge, &[(now_ms(), 1.0)]);
    s.labels = vec![pb::Label {
        name: "tally_metric".into(),
        value: "other".into(),
    }];
    let resp = push(d, vec![batch("reserved-host", s)]).await;
    assert_eq!((resp.accepted, resp.rejected), (0, 1), "{resp:?}");
    let r = &resp.rejections[0];
    assert_eq!(r.reason, pb::RejectReason::InvalidLabel as i32, "{r:?}");
    assert!(r.detail.contains("\"tally_metric\" is reserved"), "{r:?}");
    // Remote-write: refused the same way (400, the rest of the batch kept).
    let mut req = rw_request("cpu", "reserved-host", &[(now_ms(), 1.0)]);
    req.timeseries[0].labels.push(rw::Label {
        name: "tally_metric".into(),
        value: "x".into(),
    });
    let (status, _, body) = post(
        d,
        "/api/v1/write",
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "snappy"),
        ],
        snappy(&req),
    )
    .await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("tally_metric"), "{text}");
}

async fn auto_step_fits_a_month_in_half_hours(d: &Daemon) {
    // From a half-hour boundary, thirty days are exactly 1,440 steps of
    // 30 minutes; a minute later they reach into one more.
    let now = now_ms() / 1000;
    let to = now - now.rem_euclid(1800);
    let from = to - 30 * 86_400;
    for (shift, want) in [(0, 1800), (60, 3600)] {
        let (f, t) = ((from + shift).to_string(), (to + shift).to_string());
        let (status, body) = get_json(
            d,
            "/api/v1/range",
            &[
                ("source", "nobody"),
                ("metric", "cpu"),
                ("from", &f),
                ("to", &t),
                ("step", "auto"),
                ("max_points", "1440"),
            ],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["step_s"], want, "shifted by {shift}: {body}");
    }
}

async fn label_values_refuse_invalid_utf8_in_json(d: &Daemon) {
    let (status, text) =
        tally_testkit::client::http_get(d, "/prometheus/api/v1/label/%ff%fe/values").await;
    assert_eq!(status, 400, "{text}");
    let body: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(body["status"], "error", "{body}");
    assert_eq!(body["errorType"], "bad_data", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("invalid label name"),
        "{body}"
    );
}

/// `google.rpc.Status` as OTLP/HTTP errors carry it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

async fn otlp_too_large_is_a_status(d: &Daemon) {
    let big = vec![0u8; 8192];
    // Declared too large: protobuf status.
    let (status, headers, body) = post(
        d,
        "/v1/metrics",
        &[("content-type", "application/x-protobuf")],
        big.clone(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(headers["content-type"], "application/x-protobuf");
    let st = RpcStatus::decode(&body[..]).unwrap();
    assert!(st.message.contains("ingest.max_message_bytes"), "{st:?}");
    // JSON, and a body of no declared length (chunked): refused as it
    // passes the limit.
    let addr = d.http_url().trim_start_matches("http://").to_string();
    let mut s = within("connect", tokio::net::TcpStream::connect(addr))
        .await
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 4000, " ".repeat(4000));
    let req = format!(
        "POST /v1/metrics HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n{chunk}{chunk}0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = within("the answer", s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("content-type: application/json"), "{text}");
    let json: serde_json::Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(json["code"].is_i64(), "{json}");
    assert!(
        json["message"]
            .as_str()
            .unwrap_or("")
            .contains("ingest.max_message_bytes"),
        "{json}"
    );
}

async fn remote_write_keeps_a_kind_from_metadata(d: &Daemon) {
    let now = now_ms();
    let mut typed = rw_request("queue_total", "kind-host", &[(now - 2_000, 5.0)]);
    typed.metadata = vec![rw::MetricMetadata {
        r#type: rw::metric_metadata::MetricType::Gauge as i32,
        metric_family_name: "queue_total".into(),
        ..Default::default()
    }];
    let bare = rw_request("queue_total", "kind-host", &[(now - 1_000, 3.0)]);
    for req in [&typed, &bare] {
        let (status, _, body) = post(
            d,
            "/api/v1/write",
            &[
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "snappy"),
            ],
            snappy(req),
        )
        .await;
        assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));
    }
    let body = get_ok(
        d,
        "/api/v1/latest",
        &[("source", "kind-host"), ("metric", "queue_total")],
    )
    .await;
    let s = &body["series"][0];
    assert_eq!(s["kind"], "gauge", "{body}");
}
