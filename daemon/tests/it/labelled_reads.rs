//! Labelled series through the native read surfaces of the real binary:
//! `range`, `latest`, `aggregate` (pooled and grouped `by` a label), the
//! gRPC `Watch` snapshot, series and label listings, over HTTP and gRPC,
//! with every matcher op; first from memory, then from the store after a
//! restart.

use std::time::Duration;

use serde_json::{json, Value};
use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, now_ms, within};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use crate::tallyd;

const METRIC: &str = "cpu_busy";
const SOURCES: [&str; 2] = ["h1", "h2"];
const CPUS: [&str; 2] = ["0", "1"];
const MODES: [&str; 2] = ["idle", "user"];

/// The value each series gets: distinct per series, so a wrong selection
/// or grouping shows in the sums.
fn value(source: usize, cpu: usize, mode: usize) -> f64 {
    (100 * (source + 1) + 10 * cpu + mode) as f64
}

/// One sample per series, of the fleet above plus one unlabelled series of
/// the same metric on h1.
fn fleet(t: i64) -> pb::PushRequest {
    let mut sources = Vec::new();
    for (si, source) in SOURCES.iter().enumerate() {
        let mut series = Vec::new();
        for (ci, cpu) in CPUS.iter().enumerate() {
            for (mi, mode) in MODES.iter().enumerate() {
                series.push(pb::SeriesSamples {
                    // Out of order on purpose: the set is the same.
                    labels: vec![label("mode", mode), label("cpu", cpu)],
                    metric: METRIC.into(),
                    kind: pb::SampleKind::Gauge as i32,
                    timestamps_ms: vec![t],
                    values: vec![value(si, ci, mi)],
                    start_times_ms: Vec::new(),
                });
            }
        }
        if si == 0 {
            series.push(pb::SeriesSamples {
                labels: Vec::new(),
                metric: METRIC.into(),
                kind: pb::SampleKind::Gauge as i32,
                timestamps_ms: vec![t],
                values: vec![1.0],
                start_times_ms: Vec::new(),
            });
        }
        sources.push(pb::SourceBatch {
            source: (*source).into(),
            series,
            groups: Vec::new(),
        });
    }
    pb::PushRequest { sources }
}

fn label(name: &str, value: &str) -> pb::Label {
    pb::Label {
        name: name.into(),
        value: value.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_series_read_back_through_every_native_surface() {
    let mut d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let minute = (now_ms() / 60_000 - 1) * 60;
    let mut ingest = d.ingest_client().await;
    let resp = within("Push", ingest.push(fleet(minute * 1000 + 5_000)))
        .await
        .unwrap_or_else(|s| panic!("{s:?}"))
        .into_inner();
    assert_eq!((resp.accepted, resp.rejected), (9, 0), "{resp:?}");

    check_reads(&d, minute).await;
    check_watch_snapshot(&d).await;
    wait_flushed(&d, 1.0, Duration::from_secs(15)).await;
    d.restart();
    check_reads(&d, minute).await;
    check_listings(&d).await;
}

async fn check_reads(d: &Daemon, minute: i64) {
    let from = (minute - 60).to_string();
    let range = |labels: &'static str| {
        let from = from.clone();
        async move {
            let mut p = vec![
                ("source", "h1"),
                ("metric", METRIC),
                ("from", from.as_str()),
                ("step", "1m"),
                ("agg", "sum"),
            ];
            if !labels.is_empty() {
                p.push(("labels", labels));
            }
            sums(&get_ok(d, "/api/v1/range", &p).await)
        }
    };
    // No matcher: every label set of h1's metric, the unlabelled one too.
    assert_eq!(
        range("").await,
        vec![
            (json!(null), 1.0),
            (json!({"cpu": "0", "mode": "idle"}), 100.0),
            (json!({"cpu": "0", "mode": "user"}), 101.0),
            (json!({"cpu": "1", "mode": "idle"}), 110.0),
            (json!({"cpu": "1", "mode": "user"}), 111.0),
        ]
    );
    let values = |rows: Vec<(Value, f64)>| rows.into_iter().map(|r| r.1).collect::<Vec<_>>();
    assert_eq!(values(range(r#"mode="idle""#).await), [100.0, 110.0]);
    assert_eq!(
        values(range(r#"{mode!="idle"}"#).await),
        [1.0, 101.0, 111.0]
    );
    assert_eq!(values(range(r#"cpu=~"1|2""#).await), [110.0, 111.0]);
    assert_eq!(values(range(r#"mode!~"i.*",cpu="0""#).await), [101.0]);
    assert_eq!(values(range(r#"mode="""#).await), [1.0]);

    let latest = get_ok(
        d,
        "/api/v1/latest",
        &[
            ("source", "h2"),
            ("metric", METRIC),
            ("labels", r#"cpu="1""#),
        ],
    )
    .await;
    let got: Vec<&Value> = latest["series"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().collect());
    assert_eq!(got.len(), 2, "{latest}");
    assert_eq!(
        got[0]["labels"],
        json!({"cpu": "1", "mode": "idle"}),
        "{latest}"
    );

    check_aggregates(d, &from).await;
    check_grpc_reads(d, minute).await;
}

/// Each series' labels (null when it has none) and its one point's sum.
fn sums(body: &Value) -> Vec<(Value, f64)> {
    let mut out: Vec<(Value, f64)> = body["series"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|s| {
            let sum: f64 = s["points"]
                .as_array()
                .map_or(0.0, |p| p.iter().filter_map(|p| p["sum"].as_f64()).sum());
            (s["labels"].clone(), sum)
        })
        .collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

/// A fleet-wide aggregate pooled, filtered by a label, and grouped by one.
async fn check_aggregates(d: &Daemon, from: &str) {
    let agg = |extra: Vec<(&'static str, &'static str)>| {
        let mut p = vec![
            ("metric", METRIC),
            // Named sources: a glob is looked up in the catalog, which
            // has the series only after their first flush.
            ("source", "h1,h2"),
            ("from", from),
            ("step", "1h"),
            ("agg", "sum"),
        ];
        p.extend(extra);
        async move { get_ok(d, "/api/v1/aggregate", &p).await }
    };
    let total: f64 = (0..2)
        .flat_map(|s| (0..2).flat_map(move |c| (0..2).map(move |m| value(s, c, m))))
        .sum::<f64>()
        + 1.0;
    let body = agg(vec![]).await;
    assert_eq!(body["points"][0]["sum"], json!(total), "{body}");
    let body = agg(vec![("labels", r#"mode="user""#)]).await;
    assert_eq!(
        body["points"][0]["sum"],
        json!(101.0 + 111.0 + 201.0 + 211.0),
        "{body}"
    );
    let body = agg(vec![("by", "mode")]).await;
    let groups: Vec<(Value, Value)> = body["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|g| (g["labels"].clone(), g["points"][0]["sum"].clone()))
        .collect();
    assert_eq!(
        groups,
        vec![
            (json!({}), json!(1.0)),
            (
                json!({"mode": "idle"}),
                json!(100.0 + 110.0 + 200.0 + 210.0)
            ),
            (
                json!({"mode": "user"}),
                json!(101.0 + 111.0 + 201.0 + 211.0)
            ),
        ],
        "{body}"
    );
}

fn matcher(name: &str, op: pb::MatchOp, value: &str) -> pb::LabelMatcher {
    pb::LabelMatcher {
        name: name.into(),
        op: op as i32,
        value: value.into(),
    }
}

async fn check_grpc_reads(d: &Daemon, minute: i64) {
    let mut q = d.query_client().await;
    let r = within(
        "Range",
        q.range(pb::RangeRequest {
            source: "h1,h2".into(),
            metric: METRIC.into(),
            from_ms: (minute - 60) * 1000,
            to_ms: (minute + 120) * 1000,
            step: pb::Step::Minute as i32,
            labels: vec![
                matcher("mode", pb::MatchOp::Equal, "idle"),
                matcher("cpu", pb::MatchOp::NotRegex, "1"),
            ],
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"))
    .into_inner();
    let got: Vec<(String, Vec<pb::Label>)> = r
        .series
        .iter()
        .map(|s| (s.source.clone(), s.labels.clone()))
        .collect();
    let want_labels = vec![label("cpu", "0"), label("mode", "idle")];
    assert_eq!(
        got,
        vec![
            ("h1".to_string(), want_labels.clone()),
            ("h2".to_string(), want_labels)
        ]
    );
    let r = within(
        "Aggregate",
        q.aggregate(pb::AggregateRequest {
            metric: METRIC.into(),
            sources: Some(pb::aggregate_request::Sources::Source("h2".into())),
            from_ms: (minute - 60) * 1000,
            to_ms: (minute + 120) * 1000,
            step: pb::Step::Hour as i32,
            by: vec!["cpu".into()],
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"))
    .into_inner();
    let sums: Vec<(Vec<pb::Label>, Option<f64>)> = r
        .groups
        .iter()
        .map(|g| (g.labels.clone(), g.points.first().and_then(|p| p.sum)))
        .collect();
    assert_eq!(
        sums,
        vec![
            (vec![label("cpu", "0")], Some(200.0 + 201.0)),
            (vec![label("cpu", "1")], Some(210.0 + 211.0)),
        ]
    );
}

/// The first Watch message carries every selected series with its labels.
async fn check_watch_snapshot(d: &Daemon) {
    let mut q = d.query_client().await;
    let mut stream = within(
        "Watch",
        q.watch(pb::WatchRequest {
            source: "h2".into(),
            metric: METRIC.into(),
            labels: vec![matcher("mode", pb::MatchOp::Regex, "us.*")],
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"))
    .into_inner();
    let first = within("a watch snapshot", stream.message())
        .await
        .unwrap_or_else(|s| panic!("{s:?}"))
        .unwrap_or_else(|| panic!("the watch stream ended"));
    assert!(first.snapshot);
    let labels: Vec<Vec<pb::Label>> = first.series.iter().map(|s| s.labels.clone()).collect();
    assert_eq!(
        labels,
        vec![
            vec![label("cpu", "0"), label("mode", "user")],
            vec![label("cpu", "1"), label("mode", "user")],
        ]
    );
}

/// Series, label names and label values, over HTTP and gRPC.
async fn check_listings(d: &Daemon) {
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("source", "h1"), ("labels", r#"cpu="1""#)],
    )
    .await;
    let labels: Vec<&Value> = body["series"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().map(|s| &s["labels"]).collect());
    assert_eq!(
        labels,
        [
            &json!({"cpu": "1", "mode": "idle"}),
            &json!({"cpu": "1", "mode": "user"})
        ],
        "{body}"
    );
    let body = get_ok(d, "/api/v1/labels", &[("metric", METRIC)]).await;
    assert_eq!(body["labels"], json!(["cpu", "mode"]), "{body}");
    let body = get_ok(d, "/api/v1/label/mode/values", &[("source", "h2")]).await;
    assert_eq!(body["values"], json!(["idle", "user"]), "{body}");
    let mut q = d.query_client().await;
    let r = within(
        "ListLabelValues",
        q.list_label_values(pb::ListLabelsRequest {
            name: "cpu".into(),
            labels: vec![matcher("mode", pb::MatchOp::NotEqual, "idle")],
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"))
    .into_inner();
    assert_eq!(r.names, ["0", "1"]);
    let r = within(
        "ListLabelNames",
        q.list_label_names(pb::ListLabelsRequest {
            source: "h*".into(),
            ..Default::default()
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("{s:?}"))
    .into_inner();
    assert_eq!(r.names, ["cpu", "mode"]);
}
