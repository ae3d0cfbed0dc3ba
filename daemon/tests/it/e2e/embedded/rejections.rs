//! Every kind of bad sample, series, source or group on the embedded store
//! (this test exists for that store alone): its own reason, a useful
//! detail, and the good samples of the same batch kept.

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::now_ms;
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;
use tonic::transport::Channel;

use super::super::check::{check_reads, minute_start_ms, Expect, Kind, MINUTE_MS, SECOND_MS};
use super::super::push_ok;
use crate::tallyd;

/// How long a flush may take to settle.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

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

/// The source of every good sample in these tests.
const HOST: &str = "good-host";

fn gauge(metric: &str, timestamps_ms: Vec<i64>, values: Vec<f64>) -> pb::SeriesSamples {
    pb::SeriesSamples {
        labels: Vec::new(),
        metric: metric.into(),
        kind: pb::SampleKind::Gauge as i32,
        timestamps_ms,
        values,
        start_times_ms: Vec::new(),
    }
}

fn with_kind(kind: pb::SampleKind, mut series: pb::SeriesSamples) -> pb::SeriesSamples {
    series.kind = kind as i32;
    series
}

/// Every kind of bad sample gets its own reason and a useful detail, and
/// the good samples of the same batch are stored; the rejections show up
/// in `/metrics` by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_specific_rejections_and_good_samples_are_kept() {
    let d = Daemon::start_async(tallyd().flush_interval("100ms")).await;
    let b = minute_start_ms(5);
    let now = now_ms();
    let mut ingest = d.ingest_client().await;
    let resp = push_ok(&mut ingest, batch_with_every_kind_of_bad_input(b, now)).await;
    check_every_kind_of_bad_input_is_rejected(&resp);
    check_kind_conflict_keeps_the_good_sample(&mut ingest, b).await;

    let expects = good_samples_kept(b);
    let (from, to) = (b - 10 * MINUTE_MS, now_ms() + 2 * MINUTE_MS);
    check_reads(&d, &expects, from, to).await;
    wait_flushed(&d, 1.0, FLUSH_TIMEOUT).await;
    check_reads(&d, &expects, from, to).await;

    check_rejection_metrics(&metrics_text(&d).await);
}

/// One push with good samples next to bad samples, series, sources and
/// groups of every kind; `b` is a minute start a few minutes ago, `now`
/// the current time (both in ms).
fn batch_with_every_kind_of_bad_input(b: i64, now: i64) -> pb::PushRequest {
    let s = |x: i64| b + x * SECOND_MS;
    let g = gauge;
    pb::PushRequest {
        sources: vec![
            pb::SourceBatch {
                source: HOST.into(),
                series: vec![
                    g(
                        "g.mixed",
                        vec![s(5), s(6), s(7), s(8)],
                        vec![1.0, f64::NEG_INFINITY, 3.0, f64::INFINITY],
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
    }
}

/// The answer to `batch_with_every_kind_of_bad_input`: the counts, and one
/// rejection with its own reason and detail per bad series or sample.
fn check_every_kind_of_bad_input_is_rejected(resp: &pb::PushResponse) {
    use pb::RejectReason as R;
    // Accepted: g.mixed 2, g.window 2, c.delta 2, c.cum 3 (baseline included).
    // Rejected (samples): 2 + 2 + 1 + 1 + 2 + 3 + 1 + 1 + 1 + 2 + 1 + 2 + 1.
    assert_eq!((resp.accepted, resp.rejected), (9, 20), "{resp:#?}");
    check_rejections(
        resp,
        &[
            want(
                0,
                0,
                Some(1),
                R::NonFiniteValue,
                "-inf is not a finite number",
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
}

/// Kind conflict: g.mixed is a gauge; the good sample next to it lands.
async fn check_kind_conflict_keeps_the_good_sample(
    ingest: &mut pb::ingest_client::IngestClient<Channel>,
    b: i64,
) {
    let s = |x: i64| b + x * SECOND_MS;
    let req = pb::PushRequest {
        sources: vec![pb::SourceBatch {
            source: HOST.into(),
            series: vec![
                with_kind(
                    pb::SampleKind::DeltaCounter,
                    gauge("g.mixed", vec![s(9)], vec![1.0]),
                ),
                with_kind(
                    pb::SampleKind::DeltaCounter,
                    gauge("c.delta", vec![s(4)], vec![10.0]),
                ),
            ],
            groups: Vec::new(),
        }],
    };
    let resp = push_ok(ingest, req).await;
    assert_eq!((resp.accepted, resp.rejected), (1, 1), "{resp:#?}");
    check_rejections(
        &resp,
        &[want(
            0,
            0,
            None,
            pb::RejectReason::KindConflict,
            "series is a gauge but this batch says delta_counter",
        )],
    );
}

/// What reads must return after both pushes: the good samples, and
/// nothing of the series rejected whole.
fn good_samples_kept(b: i64) -> Vec<Expect> {
    let s = |x: i64| b + x * SECOND_MS;
    let e = |metric: &str, kind: Option<Kind>, stored: Vec<(i64, f64)>| Expect {
        source: HOST.into(),
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
    expects
        .into_iter()
        .chain([refused("m"), refused("n")])
        .collect()
}

/// `/metrics` after both pushes and a flush: accepted and rejected samples
/// by reason, and flush durations.
fn check_rejection_metrics(m: &str) {
    let rejected = |reason: &str| metric(m, "tally_samples_rejected_total", &[("reason", reason)]);
    assert_eq!(
        metric(m, "tally_samples_accepted_total", &[]),
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
