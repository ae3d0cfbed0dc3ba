//! End-to-end tests of the real `tallyd` binary over loopback.
//!
//! Every test starts its own daemon (see `support::daemon`) on ephemeral
//! ports with a temporary data directory, talks to it only through its
//! public interfaces (gRPC ingest and query, the HTTP API, `/metrics`,
//! `grpc.health.v1`, reflection, signals) and compares what comes back with
//! what the test computed itself from the samples it sent. Every wait is
//! bounded.
//!
//! Sample values are small integers and binary fractions, so every sum is
//! exact in any order and the expected aggregates compare with `==`.
//!
//! The tests run on a multi-thread runtime: a gRPC client's connection task
//! must keep running while a test blocks (e.g. waiting for the process), or
//! it cannot answer the daemon's GOAWAY and holds its graceful shutdown.
//! When a test fails, the daemon's log is printed (see `Daemon`'s `Drop`).

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_proto::v1 as pb;
use tonic::transport::Channel;
use tonic::Code;

use support::client::{now_ms, within, CALL_TIMEOUT};
use support::daemon::{Daemon, DaemonOpts};
use support::e2e::{
    check_reads, expects, flushes_so_far, http_get, http_range, metric, metrics_text,
    minute_start_ms, push, range_around, request, restart, wait_flushed, Expect, Kind, Sent,
    EXIT_TIMEOUT, MINUTE_MS, SECOND_MS,
};

/// How long a flush may take to settle.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------------------
// The standard data.

/// Three series of one source starting at minute `t0`: a gauge with
/// samples in minutes 0, 1, 2 and 4 (sent newest first: order must not
/// matter), a delta counter in minutes 0, 1 and 3, and a cumulative counter
/// over minutes 0–3 with a reset. 29 samples in all.
fn standard_series(source: &str, t0: i64) -> Vec<Sent> {
    let mut gauge = Vec::new();
    for m in [0i64, 1, 2, 4] {
        for (off_s, v) in [(5i64, 0.5), (25, -1.25), (45, 3.0)] {
            gauge.push((t0 + m * MINUTE_MS + off_s * SECOND_MS, m as f64 * 2.0 + v));
        }
    }
    gauge.reverse();
    let mut delta = Vec::new();
    for m in [0i64, 1, 3] {
        for (k, off_s) in [10i64, 30, 50].into_iter().enumerate() {
            delta.push((
                t0 + m * MINUTE_MS + off_s * SECOND_MS,
                (3 + 2 * k as i64 + m) as f64,
            ));
        }
    }
    // Baseline 1000, then deltas 10, 20, 0, 70, reset to 50 (counts 50), 30, 120.
    let totals = [1000.0, 1010.0, 1030.0, 1030.0, 1100.0, 50.0, 80.0, 200.0];
    let cumulative = (0..8)
        .map(|i| {
            let m = (i / 2) as i64;
            let off_s = if i % 2 == 0 { 10 } else { 40 };
            (t0 + m * MINUTE_MS + off_s * SECOND_MS, totals[i])
        })
        .collect();
    vec![
        Sent::new(source, "cpu.load", Kind::Gauge, gauge),
        Sent::new(source, "ops/total", Kind::Delta, delta),
        Sent::new(source, "net:bytes_in", Kind::Cumulative, cumulative),
    ]
}

const STANDARD_SAMPLES: u64 = 29;

// ---------------------------------------------------------------------------
// Talking to the daemon.

async fn push_ok(
    client: &mut pb::ingest_client::IngestClient<Channel>,
    req: pb::PushRequest,
) -> pb::PushResponse {
    push(client, req)
        .await
        .unwrap_or_else(|s| panic!("Push failed: {s:?}"))
}

/// The flush loop's first tick fires as soon as its task first runs, which
/// can be just after the listeners are up; a push that lands before it is
/// flushed at once even with `flush.interval = 1h`. Tests that must know
/// nothing was flushed wait for the daemon to be ready and then a moment.
async fn past_first_flush_tick(d: &Daemon) {
    let (status, body) = http_get(d, "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
}

// ---------------------------------------------------------------------------
// The tests.

/// With a one-hour flush interval nothing reaches the store, so these reads
/// are served from the in-memory accumulators alone: a sample is readable
/// as soon as its Push is acknowledged, at every step, over both APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_exact_right_after_the_ack_before_any_flush() {
    let d = Daemon::start(DaemonOpts::new().flush_interval("1h"));
    past_first_flush_tick(&d).await;
    let t0 = minute_start_ms(8);
    let sent = standard_series("host-a.example:9100", t0);
    let mut ingest = d.ingest_client().await;
    let resp = push_ok(&mut ingest, request(&sent)).await;
    assert_eq!(
        (resp.accepted, resp.rejected),
        (STANDARD_SAMPLES, 0),
        "{resp:?}"
    );
    assert!(resp.rejections.is_empty(), "{resp:?}");

    let expects = expects(&sent);
    let (from, to) = range_around(t0);
    check_reads(&d, &expects, from, to).await;

    let m = metrics_text(&d).await;
    assert_eq!(
        metric(&m, "tally_flushes_total", &[]).unwrap_or(0.0),
        0.0,
        "nothing may have been flushed with flush.interval = 1h:\n{m}"
    );
    assert_eq!(
        metric(&m, "tally_samples_accepted_total", &[]),
        Some(STANDARD_SAMPLES as f64)
    );
    // The gauges of what is held are current at the scrape, not as of the
    // last flush tick: 4 + 3 + 4 (series, minute) slots in 3 series.
    assert_eq!(metric(&m, "tally_pending_slots", &[]), Some(11.0), "{m}");
    assert_eq!(metric(&m, "tally_series", &[]), Some(3.0), "{m}");
    assert_eq!(
        metric(&m, "tally_flush_inflight_batches", &[]),
        Some(0.0),
        "{m}"
    );
}

/// With a 100 ms flush interval: the same reads once the data is in the
/// store, and while one minute's data is split between the store and
/// memory (a second push into minutes already flushed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_exact_after_flushes_and_across_store_and_memory() {
    let d = Daemon::start(DaemonOpts::new().flush_interval("100ms"));
    let t0 = minute_start_ms(9);
    let sent = standard_series("host-b", t0);
    let expects = expects(&sent);
    let mut ingest = d.ingest_client().await;

    // First half of every series, flushed.
    let first: Vec<Sent> = sent
        .iter()
        .map(|s| s.part(0..s.samples.len() / 2))
        .collect();
    let second: Vec<Sent> = sent
        .iter()
        .map(|s| s.part(s.samples.len() / 2..s.samples.len()))
        .collect();
    let r1 = push_ok(&mut ingest, request(&first)).await;
    assert_eq!((r1.accepted, r1.rejected), (14, 0), "{r1:?}");
    wait_flushed(&d, 1.0, FLUSH_TIMEOUT).await;
    let before = flushes_so_far(&d).await;

    // Second half: read at once (store + whatever is in memory or in flight).
    let r2 = push_ok(&mut ingest, request(&second)).await;
    assert_eq!((r2.accepted, r2.rejected), (15, 0), "{r2:?}");
    let (from, to) = range_around(t0);
    check_reads(&d, &expects, from, to).await;

    // And again once everything is in the store.
    wait_flushed(&d, before + 1.0, FLUSH_TIMEOUT).await;
    check_reads(&d, &expects, from, to).await;
    let m = metrics_text(&d).await;
    assert!(
        m.contains("tally_flush_duration_seconds"),
        "no flush duration metric:\n{m}"
    );
}

/// Client streaming: several messages, one summary with the summed counts;
/// a rejection names the message it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_stream_sums_accepted_counts_and_data_is_readable() {
    let d = Daemon::start(DaemonOpts::new().flush_interval("300ms"));
    let t0 = minute_start_ms(7);
    let sent = standard_series("stream-host", t0);
    let (gauge, delta, cumulative) = (&sent[0], &sent[1], &sent[2]);
    let mut last = request(&[cumulative.part(4..8)]);
    last.sources[0].series.push(pb::SeriesSamples {
        metric: "gauge.nan".into(),
        kind: pb::SampleKind::Gauge as i32,
        timestamps_ms: vec![t0],
        values: vec![f64::NAN],
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

/// SIGTERM: the daemon exits 0 within the deadline, and with a one-hour
/// flush interval the data can only reach the store through the shutdown
/// flush, so identical reads after a restart on the same data directory
/// prove that a clean shutdown loses nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_restart_reads_the_same_points() {
    let mut d = Daemon::start(DaemonOpts::new().flush_interval("1h"));
    past_first_flush_tick(&d).await;
    let t0 = minute_start_ms(6);
    let sent = standard_series("restart-host", t0);
    let expects = expects(&sent);
    let mut ingest = d.ingest_client().await;
    let resp = push_ok(&mut ingest, request(&sent)).await;
    assert_eq!((resp.accepted, resp.rejected), (STANDARD_SAMPLES, 0));
    let (from, _) = range_around(t0);
    check_reads(&d, &expects, from, now_ms() + 2 * MINUTE_MS).await;
    assert_eq!(
        flushes_so_far(&d).await,
        0.0,
        "nothing may be flushed before the shutdown"
    );
    drop(ingest);

    restart(&mut d).await;
    check_reads(&d, &expects, from, now_ms() + 2 * MINUTE_MS).await;
    assert_eq!(
        flushes_so_far(&d).await,
        0.0,
        "the restarted daemon has flushed nothing: these reads came from the store"
    );

    // And it shuts down cleanly again with nothing to flush.
    d.sigterm();
    let status = d.wait_async(EXIT_TIMEOUT).await;
    assert!(status.success(), "second exit: {status}");
}

/// The rejection expected for one series or sample.
struct Want {
    source_index: u32,
    series_index: u32,
    sample_index: Option<u32>,
    reason: pb::RejectReason,
    /// Must appear in the detail.
    detail: &'static str,
}

fn want(
    source_index: u32,
    series_index: u32,
    sample_index: Option<u32>,
    reason: pb::RejectReason,
    detail: &'static str,
) -> Want {
    Want {
        source_index,
        series_index,
        sample_index,
        reason,
        detail,
    }
}

fn check_rejections(resp: &pb::PushResponse, wants: &[Want]) {
    assert!(!resp.rejections_truncated, "{resp:#?}");
    assert_eq!(
        resp.rejections.len(),
        wants.len(),
        "one rejection per bad series or sample: {resp:#?}"
    );
    for w in wants {
        let found = resp.rejections.iter().find(|r| {
            (r.source_index, r.series_index, r.sample_index)
                == (w.source_index, w.series_index, w.sample_index)
        });
        let Some(r) = found else {
            panic!(
                "no rejection for source {} series {} sample {:?} ({:?}) in {resp:#?}",
                w.source_index, w.series_index, w.sample_index, w.reason
            );
        };
        assert_eq!(
            pb::RejectReason::try_from(r.reason).ok(),
            Some(w.reason),
            "{r:?}"
        );
        assert!(
            r.detail.contains(w.detail),
            "{:?}: detail {:?} should contain {:?}",
            w.reason,
            r.detail,
            w.detail
        );
        assert_eq!(r.message_index, 0, "{r:?}");
    }
}

/// Every kind of bad sample gets its own reason and a useful detail, and
/// the good samples of the same batch are stored; the rejections show up
/// in `/metrics` by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_specific_rejections_and_good_samples_are_kept() {
    use pb::RejectReason as R;
    let d = Daemon::start(DaemonOpts::new().flush_interval("100ms"));
    let b = minute_start_ms(5);
    let s = |x: i64| b + x * SECOND_MS;
    let now = now_ms();
    let host = "good-host";
    let g = |metric: &str, ts: Vec<i64>, vs: Vec<f64>| pb::SeriesSamples {
        metric: metric.into(),
        kind: pb::SampleKind::Gauge as i32,
        timestamps_ms: ts,
        values: vs,
    };
    let with_kind = |kind: pb::SampleKind, mut series: pb::SeriesSamples| {
        series.kind = kind as i32;
        series
    };
    let req = pb::PushRequest {
        sources: vec![
            pb::SourceBatch {
                source: host.into(),
                series: vec![
                    g(
                        "g.mixed",
                        vec![s(5), s(6), s(7), s(8)],
                        vec![1.0, f64::NAN, 3.0, f64::INFINITY],
                    ),
                    g(
                        "g.window",
                        vec![s(10), now - 2 * 3_600_000, now + 3_600_000, s(11)],
                        vec![5.0, 6.0, 7.0, 8.0],
                    ),
                    g("bad metric!", vec![s(1)], vec![1.0]),
                    g(&"m".repeat(201), vec![s(1)], vec![1.0]),
                    with_kind(
                        pb::SampleKind::Unspecified,
                        g("g.nokind", vec![s(1), s(2)], vec![1.0, 2.0]),
                    ),
                    g("g.len", vec![s(1), s(2), s(3)], vec![1.0, 2.0]),
                    with_kind(
                        pb::SampleKind::DeltaCounter,
                        g("c.delta", vec![s(1), s(2), s(3)], vec![4.0, -1.0, 6.0]),
                    ),
                    with_kind(
                        pb::SampleKind::CumulativeCounter,
                        g(
                            "c.cum",
                            vec![s(10), s(20), s(15), s(30)],
                            vec![100.0, 110.0, 120.0, 130.0],
                        ),
                    ),
                ],
                groups: Vec::new(),
            },
            pb::SourceBatch {
                source: "bad source!".into(),
                series: vec![g("m", vec![s(1)], vec![1.0])],
                groups: Vec::new(),
            },
            pb::SourceBatch {
                source: "h".repeat(129),
                series: vec![g("m", vec![s(1), s(2)], vec![1.0, 2.0])],
                groups: Vec::new(),
            },
            pb::SourceBatch {
                source: String::new(),
                series: vec![g("m", vec![s(1)], vec![1.0])],
                groups: Vec::new(),
            },
            pb::SourceBatch {
                source: "grouped-host".into(),
                series: vec![g("m", vec![s(1), s(2)], vec![1.0, 2.0])],
                groups: vec!["eu".into(), "bad group".into()],
            },
            pb::SourceBatch {
                source: "grouped-host".into(),
                series: vec![g("n", vec![s(1)], vec![1.0])],
                groups: (0..9).map(|i| format!("g{i}")).collect(),
            },
        ],
    };
    let mut ingest = d.ingest_client().await;
    let resp = push_ok(&mut ingest, req).await;
    // Accepted: g.mixed 2, g.window 2, c.delta 2, c.cum 3 (baseline included).
    // Rejected (samples): 2 + 2 + 1 + 1 + 2 + 3 + 1 + 1 + 1 + 2 + 1 + 2 + 1.
    assert_eq!((resp.accepted, resp.rejected), (9, 20), "{resp:#?}");
    check_rejections(
        &resp,
        &[
            want(
                0,
                0,
                Some(1),
                R::NonFiniteValue,
                "NaN is not a finite number",
            ),
            want(
                0,
                0,
                Some(3),
                R::NonFiniteValue,
                "inf is not a finite number",
            ),
            want(0, 1, Some(1), R::TooOld, "ingest.lateness_window = 3600s"),
            want(
                0,
                1,
                Some(2),
                R::TooFarAhead,
                "ingest.max_future_skew = 300s",
            ),
            want(0, 2, None, R::InvalidMetric, "contains ' '"),
            want(
                0,
                3,
                None,
                R::InvalidMetric,
                "is 201 bytes long; the limit is 200",
            ),
            want(
                0,
                4,
                None,
                R::InvalidKind,
                "kind must be gauge, delta counter or cumulative counter",
            ),
            want(0, 5, None, R::LengthMismatch, "3 timestamps but 2 values"),
            want(
                0,
                6,
                Some(1),
                R::NegativeDelta,
                "delta counter value -1 is negative",
            ),
            want(0, 7, Some(2), R::OutOfOrder, "older than the previous one"),
            want(1, 0, None, R::InvalidSource, "contains ' '"),
            want(
                2,
                0,
                None,
                R::InvalidSource,
                "is 129 bytes long; the limit is 128",
            ),
            want(3, 0, None, R::InvalidSource, "is empty"),
            want(
                4,
                0,
                None,
                R::InvalidGroup,
                "group name \"bad group\" contains ' '",
            ),
            want(
                5,
                0,
                None,
                R::InvalidGroup,
                "9 groups declared; at most 8 per source",
            ),
        ],
    );

    // Kind conflict: g.mixed is a gauge; the good sample next to it lands.
    let req = pb::PushRequest {
        sources: vec![pb::SourceBatch {
            source: host.into(),
            series: vec![
                with_kind(
                    pb::SampleKind::DeltaCounter,
                    g("g.mixed", vec![s(9)], vec![1.0]),
                ),
                with_kind(
                    pb::SampleKind::DeltaCounter,
                    g("c.delta", vec![s(4)], vec![10.0]),
                ),
            ],
            groups: Vec::new(),
        }],
    };
    let resp = push_ok(&mut ingest, req).await;
    assert_eq!((resp.accepted, resp.rejected), (1, 1), "{resp:#?}");
    check_rejections(
        &resp,
        &[want(
            0,
            0,
            None,
            R::KindConflict,
            "series is a gauge but this batch says delta_counter",
        )],
    );

    let e = |metric: &str, kind: Option<Kind>, stored: Vec<(i64, f64)>| Expect {
        source: host.into(),
        metric: metric.into(),
        kind,
        stored,
    };
    let expects = [
        e("g.mixed", Some(Kind::Gauge), vec![(s(5), 1.0), (s(7), 3.0)]),
        e(
            "g.window",
            Some(Kind::Gauge),
            vec![(s(10), 5.0), (s(11), 8.0)],
        ),
        e(
            "c.delta",
            Some(Kind::Delta),
            vec![(s(1), 4.0), (s(3), 6.0), (s(4), 10.0)],
        ),
        e(
            "c.cum",
            Some(Kind::Cumulative),
            vec![(s(20), 10.0), (s(30), 20.0)],
        ),
        // Rejected whole: nothing stored, the series is unknown.
        e("g.nokind", None, vec![]),
        e("g.len", None, vec![]),
    ];
    let refused = |metric: &str| Expect {
        source: "grouped-host".into(),
        metric: metric.into(),
        kind: None,
        stored: vec![],
    };
    let expects: Vec<Expect> = expects
        .into_iter()
        .chain([refused("m"), refused("n")])
        .collect();
    let (from, to) = (b - 10 * MINUTE_MS, now_ms() + 2 * MINUTE_MS);
    check_reads(&d, &expects, from, to).await;
    wait_flushed(&d, 1.0, FLUSH_TIMEOUT).await;
    check_reads(&d, &expects, from, to).await;

    let m = metrics_text(&d).await;
    let rejected = |reason: &str| metric(&m, "tally_samples_rejected_total", &[("reason", reason)]);
    assert_eq!(
        metric(&m, "tally_samples_accepted_total", &[]),
        Some(10.0),
        "{m}"
    );
    assert_eq!(rejected("non_finite_value"), Some(2.0), "{m}");
    assert_eq!(rejected("invalid_source"), Some(4.0), "{m}");
    assert_eq!(rejected("invalid_metric"), Some(2.0), "{m}");
    assert_eq!(rejected("invalid_kind"), Some(2.0), "{m}");
    assert_eq!(rejected("too_old"), Some(1.0), "{m}");
    assert_eq!(rejected("too_far_ahead"), Some(1.0), "{m}");
    assert_eq!(rejected("length_mismatch"), Some(3.0), "{m}");
    assert_eq!(rejected("kind_conflict"), Some(1.0), "{m}");
    assert_eq!(rejected("out_of_order"), Some(1.0), "{m}");
    assert_eq!(rejected("invalid_group"), Some(3.0), "{m}");
    assert_eq!(rejected("negative_delta"), Some(1.0), "{m}");
    assert!(
        m.contains("tally_flush_duration_seconds"),
        "no tally_flush_duration_seconds after flushes:\n{m}"
    );
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
    let d = Daemon::start(
        DaemonOpts::new()
            .env("TALLYD_INGEST_MAX_BATCH_SAMPLES", "10")
            .env("TALLYD_INGEST_MAX_MESSAGE_BYTES", "2048"),
    );
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
    let d = Daemon::start_default();

    let (status, body) = http_get(&d, "/healthz").await;
    assert_eq!(status, 200, "/healthz: {body}");
    let (status, body) = http_get(&d, "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}");
    let (status, body) = http_get(&d, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {body}");

    // grpc.health.v1
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

    // Reflection lists the services.
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

    // HTTP API errors: 400 with a JSON {"error": "..."}.
    let now = now_ms() / 1000;
    let p = |k: &'static str, v: &str| (k, v.to_string());
    let error_of = |status: u16, body: &serde_json::Value, what: &str| -> String {
        assert_eq!(status, 400, "{what}: {body}");
        body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: no \"error\" string in {body}"))
            .to_string()
    };
    let (status, body) = http_range(&d, &[p("metric", "cpu")]).await;
    let msg = error_of(status, &body, "missing source");
    assert!(msg.contains("source"), "missing source: {msg}");
    let (status, body) = http_range(
        &d,
        &[p("source", "h"), p("metric", "cpu"), p("step", "90s")],
    )
    .await;
    let msg = error_of(status, &body, "bad step");
    assert!(msg.contains("90s"), "bad step: {msg}");
    let (status, body) = http_range(
        &d,
        &[
            p("source", "h"),
            p("metric", "cpu"),
            p("from", &now.to_string()),
            p("to", &(now - 3_600).to_string()),
        ],
    )
    .await;
    error_of(status, &body, "`to` before `from`");
    let (status, body) = http_range(&d, &[p("source", "bad host!"), p("metric", "cpu")]).await;
    let msg = error_of(status, &body, "invalid source");
    assert!(msg.contains("source"), "invalid source: {msg}");
    let (status, body) = http_range(
        &d,
        &[p("source", "h"), p("metric", "cpu"), p("from", "yesterday")],
    )
    .await;
    error_of(status, &body, "unparsable from");

    // An unknown series is not an error: no points.
    let (status, body) = http_range(
        &d,
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

    // gRPC query errors.
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
    let mut d = Daemon::start(DaemonOpts::new().flush_interval("1h"));
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
