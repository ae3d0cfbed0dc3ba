//! Ingest and API behaviour end to end on the embedded store only (these
//! tests exist for that store alone): client streaming, request limits,
//! probes, `grpc.health.v1` and reflection, the HTTP API's errors, and
//! SIGTERM under load. The rejections of bad input are in `rejections`.

mod labels;
mod rejections;
mod reopen;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_proto::v1 as pb;
use tally_testkit::client::{http_get, now_ms, within, CALL_TIMEOUT};
use tally_testkit::Daemon;
use tonic::Code;

use super::check::{
    check_reads, expects, http_range, minute_start_ms, push, range_around, request, Expect, Kind,
    Sent, EXIT_TIMEOUT, MINUTE_MS, SECOND_MS,
};
use super::{push_ok, standard_series, STANDARD_SAMPLES};
use crate::tallyd;

/// Client streaming: several messages, one summary with the summed counts;
/// a rejection names the message it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_stream_sums_accepted_counts_and_data_is_readable() {
    let d = Daemon::start_async(tallyd().flush_interval("300ms")).await;
    let t0 = minute_start_ms(7);
    let sent = standard_series("stream-host", t0);
    let (gauge, delta, cumulative) = (&sent[0], &sent[1], &sent[2]);
    let mut last = request(&[cumulative.part(4..8)]);
    last.sources[0].series.push(pb::SeriesSamples {
        labels: Vec::new(),
        metric: "gauge.inf".into(),
        kind: pb::SampleKind::Gauge as i32,
        timestamps_ms: vec![t0],
        values: vec![f64::INFINITY],
        start_times_ms: Vec::new(),
    });
    let messages = vec![
        request(std::slice::from_ref(gauge)),
        request(std::slice::from_ref(delta)),
        request(&[cumulative.part(0..4)]),
        last,
    ];
    let mut ingest = d.ingest_client().await;
    let resp = within(
        "PushStream",
        ingest.push_stream(tokio_stream::iter(messages)),
    )
    .await
    .unwrap_or_else(|s| panic!("PushStream failed: {s:?}"))
    .into_inner();
    assert_eq!(
        (resp.accepted, resp.rejected),
        (STANDARD_SAMPLES, 1),
        "{resp:?}"
    );
    assert_eq!(resp.rejections.len(), 1, "{resp:?}");
    let r = &resp.rejections[0];
    assert_eq!(r.reason, pb::RejectReason::NonFiniteValue as i32, "{r:?}");
    assert_eq!(r.message_index, 3, "{r:?}");
    assert_eq!((r.series_index, r.sample_index), (1, Some(0)), "{r:?}");

    let expects = expects(&sent);
    let (from, to) = range_around(t0);
    check_reads(&d, &expects, from, to).await;
}

fn gauge_request(source: &str, metric: &str, t0: i64, n: usize) -> pb::PushRequest {
    let samples = (0..n as i64)
        .map(|i| (t0 + i * SECOND_MS, i as f64))
        .collect();
    request(&[Sent::new(source, metric, Kind::Gauge, samples)])
}

/// Request-level limits refuse a request whole, with a status that names
/// the setting; the daemon keeps working afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_limits_refuse_whole_requests() {
    let d = Daemon::start_async(
        tallyd()
            .env("TALLYD_INGEST_MAX_BATCH_SAMPLES", "10")
            .env("TALLYD_INGEST_MAX_MESSAGE_BYTES", "2048"),
    )
    .await;
    let t0 = minute_start_ms(4);
    let mut ingest = d.ingest_client().await;
    let (from, to) = (t0 - 10 * MINUTE_MS, now_ms() + 2 * MINUTE_MS);
    let expect_none = |metric: &str| Expect::absent("limits", metric);

    // Over ingest.max_batch_samples.
    let err = push(&mut ingest, gauge_request("limits", "g.big", t0, 11))
        .await
        .expect_err("11 samples with max_batch_samples = 10 must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("ingest.max_batch_samples") && err.message().contains("11"),
        "the status should name the setting and the size: {err:?}"
    );

    // Over ingest.max_message_bytes (a 3000-byte metric name, one sample).
    let err = push(
        &mut ingest,
        gauge_request("limits", &"m".repeat(3000), t0, 1),
    )
    .await
    .expect_err("a 3 kB message with max_message_bytes = 2048 must be refused");
    assert!(
        matches!(err.code(), Code::ResourceExhausted | Code::OutOfRange),
        "an oversized message should be RESOURCE_EXHAUSTED or OUT_OF_RANGE: {err:?}"
    );

    // Still working, on the same connection and on a new one.
    let ok = push_ok(&mut ingest, gauge_request("limits", "g.ok", t0, 10)).await;
    assert_eq!((ok.accepted, ok.rejected), (10, 0), "{ok:?}");
    let mut fresh = d.ingest_client().await;
    let ok = push_ok(&mut fresh, gauge_request("limits", "g.ok2", t0, 3)).await;
    assert_eq!((ok.accepted, ok.rejected), (3, 0), "{ok:?}");

    // A stream: message 0 is taken, message 1 is too large and ends the stream.
    let err = within(
        "PushStream",
        ingest.push_stream(tokio_stream::iter(vec![
            gauge_request("limits", "g.stream", t0, 5),
            gauge_request("limits", "g.stream", t0 + MINUTE_MS, 11),
        ])),
    )
    .await
    .expect_err("message 1 of the stream is over the limit");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("message 1") && err.message().contains("ingest.max_batch_samples"),
        "{err:?}"
    );

    let ok_samples = |n: i64| (0..n).map(|i| (t0 + i * SECOND_MS, i as f64)).collect();
    let expects = [
        expect_none("g.big"),
        Expect {
            kind: Some(Kind::Gauge),
            stored: ok_samples(10),
            ..expect_none("g.ok")
        },
        Expect {
            kind: Some(Kind::Gauge),
            stored: ok_samples(3),
            ..expect_none("g.ok2")
        },
        Expect {
            kind: Some(Kind::Gauge),
            stored: ok_samples(5),
            ..expect_none("g.stream")
        },
    ];
    check_reads(&d, &expects, from, to).await;
}

/// Probes, the HTTP API's errors, `grpc.health.v1` and reflection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reflection_and_http_errors() {
    let d = Daemon::start_async(tallyd()).await;
    check_probes_answer_ok(&d).await;
    check_grpc_health_says_serving(&d).await;
    check_reflection_lists_services(&d).await;
    let now = now_ms() / 1000;
    check_http_range_errors(&d, now).await;
    check_http_unknown_series_has_no_points(&d).await;
    check_grpc_range_errors_and_unknown_series(&d, now).await;
}

async fn check_probes_answer_ok(d: &Daemon) {
    let (status, body) = http_get(d, "/healthz").await;
    assert_eq!(status, 200, "/healthz: {body}");
    let (status, body) = http_get(d, "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}");
    let (status, body) = http_get(d, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {body}");
}

/// `grpc.health.v1`: the server and both services are serving.
async fn check_grpc_health_says_serving(d: &Daemon) {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut health = tonic_health::pb::health_client::HealthClient::new(d.channel().await);
    for service in ["", "tally.v1.Ingest", "tally.v1.Query"] {
        let resp = within(
            "Health.Check",
            health.check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            }),
        )
        .await
        .unwrap_or_else(|s| panic!("Health.Check({service:?}): {s:?}"))
        .into_inner();
        assert_eq!(
            ServingStatus::try_from(resp.status).ok(),
            Some(ServingStatus::Serving),
            "Health.Check({service:?}) = {resp:?}"
        );
    }
}

async fn check_reflection_lists_services(d: &Daemon) {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(
            d.channel().await,
        );
    let request = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = within(
        "ServerReflectionInfo",
        reflection.server_reflection_info(tokio_stream::iter(vec![request])),
    )
    .await
    .expect("ServerReflectionInfo")
    .into_inner();
    let reply = within("reflection reply", stream.message())
        .await
        .expect("reflection stream")
        .expect("one reflection reply");
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("not a ListServices answer: {reply:?}");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    for want in ["tally.v1.Ingest", "tally.v1.Query", "grpc.health.v1.Health"] {
        assert!(
            names.contains(&want),
            "reflection lists {names:?}, not {want}"
        );
    }
}

/// HTTP API errors: 400 with a JSON {"error": "..."}; `now` in seconds.
async fn check_http_range_errors(d: &Daemon, now: i64) {
    let p = |k: &'static str, v: &str| (k, v.to_string());
    let error_of = |status: u16, body: &serde_json::Value, what: &str| -> String {
        assert_eq!(status, 400, "{what}: {body}");
        body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no \"error\" string in {body}"))
            .to_string()
    };
    let (status, body) = http_range(d, &[p("metric", "cpu")]).await;
    let msg = error_of(status, &body, "missing source");
    assert!(msg.contains("source"), "missing source: {msg}");
    let (status, body) =
        http_range(d, &[p("source", "h"), p("metric", "cpu"), p("step", "90s")]).await;
    let msg = error_of(status, &body, "bad step");
    assert!(msg.contains("90s"), "bad step: {msg}");
    let (status, body) = http_range(
        d,
        &[
            p("source", "h"),
            p("metric", "cpu"),
            p("from", &now.to_string()),
            p("to", &(now - 3_600).to_string()),
        ],
    )
    .await;
    error_of(status, &body, "`to` before `from`");
    let (status, body) = http_range(d, &[p("source", "bad host!"), p("metric", "cpu")]).await;
    let msg = error_of(status, &body, "invalid source");
    assert!(msg.contains("source"), "invalid source: {msg}");
    let (status, body) = http_range(
        d,
        &[p("source", "h"), p("metric", "cpu"), p("from", "yesterday")],
    )
    .await;
    error_of(status, &body, "unparsable from");
}

/// An unknown series is not an error: no points.
async fn check_http_unknown_series_has_no_points(d: &Daemon) {
    let p = |k: &'static str, v: &str| (k, v.to_string());
    let (status, body) = http_range(
        d,
        &[
            p("source", "nobody"),
            p("metric", "nothing"),
            p("from", "now-1h"),
            p("step", "1m"),
        ],
    )
    .await;
    assert_eq!(status, 200, "unknown series: {body}");
    assert_eq!(
        body["series"][0]["points"],
        serde_json::json!([]),
        "unknown series: {body}"
    );
}

/// A gRPC range without a step is refused; one of an unknown series is
/// answered with no points. `now` in seconds.
async fn check_grpc_range_errors_and_unknown_series(d: &Daemon, now: i64) {
    let mut query = d.query_client().await;
    let err = within(
        "Range without a step",
        query.range(pb::RangeRequest {
            source: "h".into(),
            metric: "cpu".into(),
            from_ms: (now - 3_600) * 1000,
            to_ms: now * 1000,
            step: pb::Step::Unspecified as i32,
            ..Default::default()
        }),
    )
    .await
    .expect_err("STEP_UNSPECIFIED must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let resp = within(
        "Range of an unknown series",
        query.range(pb::RangeRequest {
            source: "nobody".into(),
            metric: "nothing".into(),
            from_ms: (now - 3_600) * 1000,
            to_ms: now * 1000,
            step: pb::Step::Minute as i32,
            ..Default::default()
        }),
    )
    .await
    .expect("Range of an unknown series")
    .into_inner();
    assert_eq!(resp.series.len(), 1, "{resp:?}");
    assert_eq!(
        resp.series[0].kind,
        pb::SampleKind::Unspecified as i32,
        "{resp:?}"
    );
    assert!(resp.series[0].points.is_empty(), "{resp:?}");
}

/// SIGTERM while agents are pushing: every sample whose Push was
/// acknowledged must be in the store after a restart. (Samples of a Push
/// whose answer was lost may or may not be there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_nothing_acknowledged() {
    let mut d = Daemon::start_async(tallyd().flush_interval("1h")).await;
    const WRITERS: usize = 3;
    const BATCH: usize = 50;
    let stop = Arc::new(AtomicBool::new(false));
    let acks: Arc<[AtomicU64; WRITERS]> = Arc::new(Default::default());
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut ingest = d.ingest_client().await;
        let stop = stop.clone();
        let acks = acks.clone();
        tasks.push(tokio::spawn(async move {
            let metric = format!("load.w{w}");
            let (mut acked, mut sent) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let t = now_ms() - 1_000;
                let samples = (0..BATCH as i64).map(|i| (t - i, 1.0)).collect();
                let req = request(&[Sent::new("load-host", &metric, Kind::Gauge, samples)]);
                sent += BATCH as u64;
                match tokio::time::timeout(CALL_TIMEOUT, ingest.push(req)).await {
                    Ok(Ok(resp)) => {
                        acked += resp.into_inner().accepted;
                        acks[w].store(acked, Ordering::Relaxed);
                    }
                    _ => break,
                }
            }
            (metric, acked, sent)
        }));
    }
    // The signal must land while every writer is mid-stream, however slow
    // the machine is to get them going.
    let all_pushing = Instant::now() + Duration::from_secs(20);
    while acks.iter().any(|a| a.load(Ordering::Relaxed) == 0) {
        assert!(
            Instant::now() < all_pushing,
            "writers never got an ack: {acks:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    d.sigterm();
    let status = d.wait_async(EXIT_TIMEOUT).await;
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for t in tasks {
        results.push(within("writer", t).await.expect("writer task"));
    }
    assert!(status.success(), "exit {status} under load");

    d.restart();
    let mut query = d.query_client().await;
    for (metric, acked, sent) in results {
        assert!(
            acked > 0,
            "{metric}: nothing acknowledged before the SIGTERM"
        );
        let resp = within(
            "Range",
            query.range(pb::RangeRequest {
                source: "load-host".into(),
                metric: metric.clone(),
                from_ms: now_ms() - 30 * MINUTE_MS,
                to_ms: now_ms() + MINUTE_MS,
                step: pb::Step::Minute as i32,
                ..Default::default()
            }),
        )
        .await
        .expect("Range")
        .into_inner();
        let stored: u64 = resp
            .series
            .iter()
            .flat_map(|s| &s.points)
            .filter_map(|p| p.n)
            .sum();
        assert!(
            stored >= acked && stored <= sent,
            "{metric}: {acked} samples acknowledged, {sent} sent, {stored} stored after a clean shutdown"
        );
    }
}
