//! Labels at the ingest door, through the real binary: every bad label set
//! is rejected with `REJECT_REASON_INVALID_LABEL` and a detail naming the
//! rule, the rest of the batch is kept, label order does not make another
//! series, an empty value is an absent label, and one source cannot take
//! more than `ingest.max_series_per_source` series while others still can.

use tally_proto::v1 as pb;
use tally_testkit::client::now_ms;
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::Daemon;

use super::super::push_ok;
use crate::tallyd;

fn labelled(metric: &str, labels: &[(&str, &str)], t: i64) -> pb::SeriesSamples {
    pb::SeriesSamples {
        labels: labels
            .iter()
            .map(|(n, v)| pb::Label {
                name: (*n).into(),
                value: (*v).into(),
            })
            .collect(),
        metric: metric.into(),
        kind: pb::SampleKind::Gauge as i32,
        timestamps_ms: vec![t],
        values: vec![1.0],
        start_times_ms: Vec::new(),
    }
}

/// (series index, expected substring of the detail) of every bad set in
/// [`bad_label_sets`].
const BAD: [(u32, &str); 8] = [
    (2, "names are [A-Za-z_][A-Za-z0-9_]*"),
    (3, "\"__name__\" is reserved"),
    (4, "\"source\" is reserved"),
    (5, "\"tally_metric\" is reserved"),
    (6, "label \"a\" is given twice"),
    (7, "257-byte value; the limit is 256"),
    (8, "9 labels; the limit is 8 (ingest.max_labels)"),
    (9, "the limit is 2048 (source, metric and labels together)"),
];

/// Two good series first (one labelled set given in two orders, so one
/// series), then every kind of bad set, then a set whose only label is
/// empty: the unlabelled series.
fn bad_label_sets(t: i64) -> Vec<pb::SeriesSamples> {
    let long_value = "v".repeat(257);
    let nine: Vec<(String, String)> = (0..9).map(|i| (format!("l{i}"), "x".into())).collect();
    let nine: Vec<(&str, &str)> = nine.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    // Eight labels of 122-byte names and 256-byte values: each within its
    // own limit, about 3 KB together.
    let wide: Vec<(String, String)> = (0..8)
        .map(|i| (format!("n{i}{}", "x".repeat(120)), "w".repeat(256)))
        .collect();
    let wide: Vec<(&str, &str)> = wide.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    vec![
        labelled("cpu", &[("cpu", "0"), ("mode", "idle")], t),
        labelled("cpu", &[("mode", "idle"), ("cpu", "0")], t + 1),
        labelled("cpu", &[("1cpu", "0")], t),
        labelled("cpu", &[("__name__", "x")], t),
        labelled("cpu", &[("source", "x")], t),
        labelled("cpu", &[("tally_metric", "x")], t),
        labelled("cpu", &[("a", "1"), ("a", "2")], t),
        labelled("cpu", &[("a", &long_value)], t),
        labelled("cpu", &nine, t),
        labelled("cpu", &wide, t),
        labelled("cpu", &[("mode", "")], t + 2),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_label_sets_get_their_reason_and_the_rest_is_kept() {
    let d = Daemon::start_async(
        tallyd()
            .env("TALLYD_INGEST_MAX_LABELS", "8")
            .env("TALLYD_INGEST_MAX_SERIES_PER_SOURCE", "5"),
    )
    .await;
    let mut ingest = d.ingest_client().await;
    let t = now_ms() - 5_000;
    let resp = push_ok(
        &mut ingest,
        pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: "lab-host".into(),
                series: bad_label_sets(t),
                groups: Vec::new(),
            }],
        },
    )
    .await;
    assert_eq!((resp.accepted, resp.rejected), (3, 8), "{resp:#?}");
    assert_eq!(resp.rejections.len(), BAD.len(), "{resp:#?}");
    for (r, (series, detail)) in resp.rejections.iter().zip(BAD) {
        assert_eq!(r.series_index, series, "{r:?}");
        assert_eq!(r.sample_index, None, "{r:?}");
        assert_eq!(r.reason, pb::RejectReason::InvalidLabel as i32, "{r:?}");
        assert!(
            r.detail.contains(detail),
            "{:?} should say {detail:?}",
            r.detail
        );
    }

    check_per_source_limit(&mut ingest, t).await;

    let text = metrics_text(&d).await;
    let reason = |r| metric(&text, "tally_samples_rejected_total", &[("reason", r)]);
    assert_eq!(reason("invalid_label"), Some(8.0), "{text}");
    assert_eq!(reason("source_series_limit"), Some(2.0), "{text}");
    let refused = metric(&text, "tally_series_refused_total", &[("limit", "source")]);
    assert_eq!(refused, Some(2.0), "{text}");
    // lab-host: cpu{cpu="0",mode="idle"} and cpu; flood-host 5; calm-host 1.
    assert_eq!(metric(&text, "tally_series", &[]), Some(8.0), "{text}");
    assert_eq!(metric(&text, "tally_sources", &[]), Some(3.0), "{text}");
}

/// One source sending seven label values gets five series and two
/// rejections; a series it already has still takes samples, and another
/// source is unaffected.
async fn check_per_source_limit(
    ingest: &mut pb::ingest_client::IngestClient<tonic::transport::Channel>,
    t: i64,
) {
    let ids: Vec<String> = (0..7).map(|i| format!("req-{i}")).collect();
    let flood: Vec<pb::SeriesSamples> = ids
        .iter()
        .map(|id| labelled("http_requests", &[("request_id", id)], t))
        .collect();
    let resp = push_ok(
        ingest,
        pb::PushRequest {
            sources: vec![
                pb::SourceBatch {
                    source: "flood-host".into(),
                    series: flood,
                    groups: Vec::new(),
                },
                pb::SourceBatch {
                    source: "calm-host".into(),
                    series: vec![labelled("http_requests", &[("code", "200")], t)],
                    groups: Vec::new(),
                },
            ],
        },
    )
    .await;
    assert_eq!((resp.accepted, resp.rejected), (6, 2), "{resp:#?}");
    for r in &resp.rejections {
        assert_eq!(r.source_index, 0, "{r:?}");
        assert!(r.series_index >= 5, "{r:?}");
        assert_eq!(
            r.reason,
            pb::RejectReason::SourceSeriesLimit as i32,
            "{r:?}"
        );
        assert!(
            r.detail.contains("ingest.max_series_per_source"),
            "{}",
            r.detail
        );
    }
    let again = labelled("http_requests", &[("request_id", "req-0")], t + 1);
    let resp = push_ok(
        ingest,
        pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: "flood-host".into(),
                series: vec![again],
                groups: Vec::new(),
            }],
        },
    )
    .await;
    assert_eq!((resp.accepted, resp.rejected), (1, 0), "{resp:#?}");
}
