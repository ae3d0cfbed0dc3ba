//! End-to-end tests of the dashboard reads against the real `tallyd`, on the
//! embedded store and on MongoDB (the stand-in, or `MONGODB_URI`): ranges at
//! fixed, custom and automatic steps across minute, hour, day and month
//! boundaries; selectable aggregates; several series per call; latest;
//! series discovery with pagination; group rollups against their members;
//! watch over gRPC and Server-Sent Events; and the errors of bad queries.
//!
//! The samples sit around the most recent month start, up to 32 days back,
//! so the daemon runs with a lateness window that accepts them.

mod support;

use std::time::{Duration, Instant};

use chrono::{Datelike, TimeZone, Utc};
use serde_json::{json, Value};
use tally_proto::v1 as pb;
use tonic::Code;

use support::client::{eventually, get_json, get_ok, now_ms, push_ok, series, within};
use support::daemon::{Daemon, DaemonOpts};
use support::standin::{mongo_target, MongoTarget};

const SOURCES: [&str; 3] = ["web-1", "web-2", "db-1"];
/// The groups each source's agent declares. `db` repeats db-1's prefix
/// group: it must not count db-1 twice.
const DECLARED: [&[&str]; 3] = [&["eu"], &["us"], &["eu", "db"]];
/// How long catalog entries and rollups may take to appear (a few flushes).
const SETTLE: Duration = Duration::from_secs(20);
/// The issue's bound on watch delivery.
const WATCH_BOUND: Duration = Duration::from_millis(1500);

const CONFIG: &str = r#"
[rollup]
all = true
prefix_delimiter = "-"

[[rollup.groups]]
name = "frontends"
sources = ["web-*"]
"#;

/// The latest UTC month start at least ten minutes ago.
fn month_start() -> i64 {
    let now = Utc::now() - chrono::Duration::minutes(10);
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .map(|t| t.timestamp())
        .expect("a valid month start")
}

fn opts(config: &std::path::Path) -> DaemonOpts {
    DaemonOpts::new()
        .arg("--config")
        .arg(config.display().to_string())
        .env("TALLYD_INGEST_LATENESS_WINDOW", "40d")
        // The fixture is up to a month old: keep its series in memory for
        // the whole test, or the idle sweep could evict them mid-check.
        .env("TALLYD_INGEST_SERIES_IDLE_TIMEOUT", "60d")
        .env("TALLYD_QUERY_MAX_TOTAL_POINTS", "20000")
        .env("TALLYD_RETENTION_HOUR", "60d")
        .flush_interval("500ms")
}

fn config_file() -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("a temporary config file");
    std::fs::write(f.path(), CONFIG).expect("writing the config file");
    f
}

/// Gauge `temp` of source `i`: four samples, 90 s and 30 s either side of
/// the month start `m`. Counter `reqs`: one delta either side.
fn temp(i: usize, m: i64) -> Vec<(i64, f64)> {
    let v = i as f64;
    vec![
        ((m - 90) * 1000, 10.0 + v),
        ((m - 30) * 1000, 20.0 + v),
        ((m + 30) * 1000, 30.0 + v),
        ((m + 90) * 1000, 40.0 + v),
    ]
}

fn reqs(i: usize, m: i64) -> Vec<(i64, f64)> {
    let k = (i + 1) as f64;
    vec![((m - 30) * 1000, 100.0 * k), ((m + 30) * 1000, 10.0 * k)]
}

async fn push_fixture(d: &Daemon, m: i64) {
    let mut ingest = d.ingest_client().await;
    let sources = SOURCES
        .iter()
        .enumerate()
        .map(|(i, s)| pb::SourceBatch {
            source: s.to_string(),
            series: vec![
                series("temp", pb::SampleKind::Gauge, &temp(i, m)),
                series("reqs", pb::SampleKind::DeltaCounter, &reqs(i, m)),
            ],
            groups: DECLARED[i].iter().map(|g| g.to_string()).collect(),
        })
        .collect();
    push_ok(&mut ingest, sources).await;
}

/// `(t, n, sum, min, max)` of each point.
fn summary(points: &Value) -> Vec<(i64, u64, f64, f64, f64)> {
    points
        .as_array()
        .unwrap_or_else(|| panic!("no points array: {points}"))
        .iter()
        .map(|p| {
            (
                p["t"].as_i64().unwrap_or(-1),
                p["n"].as_u64().unwrap_or(0),
                p["sum"].as_f64().unwrap_or(f64::NAN),
                p["min"].as_f64().unwrap_or(f64::NAN),
                p["max"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// The expected buckets of `samples` (ms, value) at `width` seconds.
fn expect(samples: &[(i64, f64)], width: i64) -> Vec<(i64, u64, f64, f64, f64)> {
    let mut out: Vec<(i64, u64, f64, f64, f64)> = Vec::new();
    let mut sorted = samples.to_vec();
    sorted.sort_by_key(|s| s.0);
    for (t_ms, v) in sorted {
        let t = (t_ms / 1000).div_euclid(width) * width;
        match out.last_mut() {
            Some(b) if b.0 == t => {
                b.1 += 1;
                b.2 += v;
                b.3 = b.3.min(v);
                b.4 = b.4.max(v);
            }
            _ => out.push((t, 1, v, v, v)),
        }
    }
    out
}

async fn range(d: &Daemon, params: &[(&str, &str)]) -> Value {
    get_ok(d, "/api/v1/range", params).await
}

async fn check_ranges(d: &Daemon, m: i64) {
    let (from, to) = ((m - 86_400).to_string(), (m + 86_400).to_string());
    let samples = temp(0, m);
    for (step, width) in [
        ("1m", 60),
        ("5m", 300),
        ("1h", 3_600),
        ("1d", 86_400),
        ("2h", 7_200),
    ] {
        let body = range(
            d,
            &[
                ("source", "web-1"),
                ("metric", "temp"),
                ("from", &from),
                ("to", &to),
                ("step", step),
            ],
        )
        .await;
        assert_eq!(body["step_s"], width, "step {step}: {body}");
        let s = &body["series"][0];
        assert_eq!(s["kind"], "gauge", "step {step}: {body}");
        assert_eq!(
            summary(&s["points"]),
            expect(&samples, width),
            "step {step} across the month boundary: {body}"
        );
        let avg = s["points"][0]["avg"].as_f64().unwrap_or(f64::NAN);
        let (_, n, sum, ..) = expect(&samples, width)[0];
        assert_eq!(avg, sum / n as f64, "step {step}: avg");
    }

    // step=auto: two days in at most 10 points is 6h steps.
    let body = range(
        d,
        &[
            ("source", "web-1"),
            ("metric", "temp"),
            ("from", &from),
            ("to", &to),
            ("step", "auto"),
            ("max_points", "10"),
        ],
    )
    .await;
    assert_eq!(
        (body["step"].clone(), body["step_s"].clone()),
        (json!("6h"), json!(21_600)),
        "{body}"
    );
    assert_eq!(
        summary(&body["series"][0]["points"]),
        expect(&samples, 21_600)
    );

    // Only the aggregates asked for.
    let body = range(
        d,
        &[
            ("source", "web-1"),
            ("metric", "reqs"),
            ("from", &from),
            ("to", &to),
            ("step", "1m"),
            ("agg", "max,rate"),
        ],
    )
    .await;
    let p = &body["series"][0]["points"][0];
    assert_eq!(
        p,
        &json!({ "t": m - 60, "max": 100.0, "rate": 100.0 / 60.0 }),
        "{body}"
    );

    // Several series: an explicit list, then a glob through the catalog.
    let body = range(
        d,
        &[
            ("source", "web-1,web-2,nobody"),
            ("metric", "temp"),
            ("from", &from),
            ("to", &to),
            ("step", "1h"),
        ],
    )
    .await;
    let got: Vec<(&str, usize)> = body["series"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["source"].as_str().unwrap_or(""),
                        s["points"].as_array().map_or(0, Vec::len),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(got, [("nobody", 0), ("web-1", 2), ("web-2", 2)], "{body}");
    eventually("a glob range lists both web sources", SETTLE, || async {
        let body = range(
            d,
            &[
                ("source", "web-*"),
                ("metric", "temp,reqs"),
                ("from", &from),
                ("to", &to),
                ("step", "1d"),
            ],
        )
        .await;
        let names: Vec<String> = body["series"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        format!(
                            "{}/{}",
                            s["source"].as_str().unwrap_or(""),
                            s["metric"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if names == ["web-1/reqs", "web-1/temp", "web-2/reqs", "web-2/temp"] {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
}

async fn check_discovery(d: &Daemon, m: i64) {
    eventually("the catalog lists the pushed series", SETTLE, || async {
        let body = get_ok(d, "/api/v1/series", &[("metric", "temp,reqs")]).await;
        let n = body["series"].as_array().map_or(0, Vec::len);
        if n == 6 {
            Ok(())
        } else {
            Err(body.to_string())
        }
    })
    .await;
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("source", "web-*"), ("metric", "temp")],
    )
    .await;
    assert_eq!(
        body["series"],
        json!([
            { "source": "web-1", "metric": "temp", "kind": "gauge", "first_seen": m - 120, "last_seen": m + 60 },
            { "source": "web-2", "metric": "temp", "kind": "gauge", "first_seen": m - 120, "last_seen": m + 60 },
        ]),
        "{body}"
    );
    // Pagination: one per page, every entry exactly once, in key order.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let mut params = vec![("metric", "temp"), ("limit", "1")];
        if let Some(a) = after.as_deref() {
            params.push(("after", a));
        }
        let page = get_ok(d, "/api/v1/series", &params).await;
        for s in page["series"].as_array().into_iter().flatten() {
            seen.push(s["source"].as_str().unwrap_or("").to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["db-1", "web-1", "web-2"]);
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("kind", "delta_counter"), ("source", "db-1")],
    )
    .await;
    assert_eq!(body["series"][0]["metric"], "reqs", "{body}");
    assert_eq!(body["series"].as_array().map(Vec::len), Some(1), "{body}");

    let body = get_ok(d, "/api/v1/sources", &[("metric", "temp")]).await;
    assert_eq!(body["sources"], json!(["db-1", "web-1", "web-2"]), "{body}");
    let body = get_ok(d, "/api/v1/sources", &[("metric", "temp"), ("limit", "2")]).await;
    assert_eq!(
        (body["sources"].clone(), body["next"].clone()),
        (json!(["db-1", "web-1"]), json!("web-1")),
        "{body}"
    );
    let body = get_ok(
        d,
        "/api/v1/sources",
        &[("metric", "temp"), ("after", "web-1")],
    )
    .await;
    assert_eq!(body["sources"], json!(["web-2"]), "{body}");
    let body = get_ok(d, "/api/v1/metrics", &[("source", "web-2")]).await;
    assert_eq!(body["metrics"], json!(["reqs", "temp"]), "{body}");

    // The same over gRPC.
    let mut query = d.query_client().await;
    let resp = within(
        "ListSeries",
        query.list_series(pb::ListSeriesRequest {
            source: "web-*".into(),
            metric: "reqs".into(),
            page_size: 1,
            ..Default::default()
        }),
    )
    .await
    .expect("ListSeries")
    .into_inner();
    assert_eq!(resp.series.len(), 1, "{resp:?}");
    assert_eq!(resp.series[0].first_seen_ms, (m - 60) * 1000);
    assert_eq!(resp.series[0].kind, pb::SampleKind::DeltaCounter as i32);
    assert_eq!(resp.next_page_token, "web-1|reqs");
    let names = within(
        "ListSources",
        query.list_sources(pb::ListNamesRequest {
            metric: "reqs".into(),
            page_size: 2,
            ..Default::default()
        }),
    )
    .await
    .expect("ListSources")
    .into_inner();
    assert_eq!(
        (names.names, names.next_page_token),
        (
            vec!["db-1".to_string(), "web-1".to_string()],
            "web-1".to_string()
        )
    );
    let names = within(
        "ListMetrics",
        query.list_metrics(pb::ListNamesRequest {
            source: "web-2".into(),
            ..Default::default()
        }),
    )
    .await
    .expect("ListMetrics")
    .into_inner();
    assert_eq!(names.names, ["reqs", "temp"]);
}

/// Pooled expectation: every member's samples in one bucket list.
fn pooled(
    members: &[usize],
    m: i64,
    f: fn(usize, i64) -> Vec<(i64, f64)>,
    width: i64,
) -> Vec<(i64, u64, f64, f64, f64)> {
    let all: Vec<(i64, f64)> = members.iter().flat_map(|i| f(*i, m)).collect();
    expect(&all, width)
}

async fn check_aggregates(d: &Daemon, m: i64) {
    let (from, to) = ((m - 3_600).to_string(), (m + 3_600).to_string());
    let agg = |params: Vec<(&'static str, String)>| {
        let from = from.clone();
        let to = to.clone();
        async move {
            let mut p: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
            p.push(("from", &from));
            p.push(("to", &to));
            get_json(d, "/api/v1/aggregate", &p).await
        }
    };
    // Rollups are fresh to the flush: wait until they hold the fixture.
    for (group, members) in [
        ("web", vec![0, 1]),
        ("frontends", vec![0, 1]),
        ("all", vec![0, 1, 2]),
        ("db", vec![2]),
        // Declared by the agents.
        ("eu", vec![0, 2]),
        ("us", vec![1]),
    ] {
        let want = pooled(&members, m, temp, 60);
        eventually(
            &format!("rollup {group} holds its members' samples"),
            SETTLE,
            || async {
                let (status, body) = agg(vec![
                    ("metric", "temp".into()),
                    ("group", group.into()),
                    ("step", "1m".into()),
                ])
                .await;
                if status != 200 {
                    return Err(body.to_string());
                }
                if body["rollup"] != group {
                    return Err(format!("not served from the rollup: {body}"));
                }
                if summary(&body["points"]) == want {
                    Ok(())
                } else {
                    Err(format!("{body}"))
                }
            },
        )
        .await;
        // The same from the members, fanned out.
        let (status, body) = agg(vec![
            ("metric", "temp".into()),
            ("group", group.into()),
            ("step", "1m".into()),
            ("fan_out", "true".into()),
        ])
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["rollup"], Value::Null, "{body}");
        assert_eq!(body["fanned_out"], members.len(), "{body}");
        assert_eq!(
            summary(&body["points"]),
            want,
            "group {group}: fan-out equals the rollup"
        );
    }
    // A source selector equal to a group's definition reads its rollup.
    let (_, body) = agg(vec![
        ("metric", "temp".into()),
        ("source", "web-*".into()),
        ("step", "1h".into()),
    ])
    .await;
    assert_eq!(body["rollup"], "frontends", "{body}");
    assert_eq!(summary(&body["points"]), pooled(&[0, 1], m, temp, 3_600));
    // Any other selector fans out.
    let (_, body) = agg(vec![
        ("metric", "temp".into()),
        ("source", "web-2,db-1".into()),
        ("step", "1h".into()),
    ])
    .await;
    assert_eq!(
        (body["rollup"].clone(), body["fanned_out"].clone()),
        (Value::Null, json!(2)),
        "{body}"
    );
    assert_eq!(summary(&body["points"]), pooled(&[1, 2], m, temp, 3_600));
    // Counters: the fleet rate is the total per second.
    let (_, body) = agg(vec![
        ("metric", "reqs".into()),
        ("group", "all".into()),
        ("step", "1m".into()),
        ("agg", "rate,sum".into()),
    ])
    .await;
    assert_eq!(
        body["points"],
        json!([
            { "t": m - 60, "sum": 600.0, "rate": 10.0 },
            { "t": m, "sum": 60.0, "rate": 1.0 },
        ]),
        "{body}"
    );
    assert_eq!(body["kind"], "delta_counter");
    // The same over gRPC.
    let mut query = d.query_client().await;
    let resp = within(
        "Aggregate",
        query.aggregate(pb::AggregateRequest {
            metric: "reqs".into(),
            sources: Some(pb::aggregate_request::Sources::Group("web".into())),
            from_ms: (m - 3_600) * 1000,
            to_ms: (m + 3_600) * 1000,
            step: pb::Step::Hour as i32,
            aggregates: vec![pb::Aggregate::Sum as i32, pb::Aggregate::Count as i32],
            ..Default::default()
        }),
    )
    .await
    .expect("Aggregate")
    .into_inner();
    assert_eq!(resp.rollup.as_deref(), Some("web"), "{resp:?}");
    type Row = (i64, Option<u64>, Option<f64>, Option<f64>);
    let got: Vec<Row> = resp
        .points
        .iter()
        .map(|p| (p.t_ms, p.n, p.sum, p.max))
        .collect();
    assert_eq!(
        got,
        [
            ((m - 3_600) * 1000, Some(2), Some(300.0), None),
            (m * 1000, Some(2), Some(30.0), None)
        ],
        "{resp:?}"
    );
    let groups = get_ok(d, "/api/v1/groups", &[]).await;
    assert_eq!(
        groups,
        json!({
            "groups": [
                { "name": "all", "rule": "all", "sources": ["*"], "declared_members": 0 },
                { "name": "frontends", "rule": "globs", "sources": ["web-*"], "declared_members": 0 },
                { "name": "db", "rule": "agent", "sources": [], "declared_members": 1 },
                { "name": "eu", "rule": "agent", "sources": [], "declared_members": 2 },
                { "name": "us", "rule": "agent", "sources": [], "declared_members": 1 },
            ],
            "prefix_delimiter": "-",
        })
    );
    // Errors.
    let (status, body) = agg(vec![("metric", "temp".into()), ("group", "nope-x".into())]).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("no group"),
        "{body}"
    );
    let (status, body) = agg(vec![
        ("metric", "temp".into()),
        ("group", "all".into()),
        ("agg", "rate".into()),
    ])
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("counters"),
        "{body}"
    );
}

async fn check_latest(d: &Daemon, m: i64) {
    let body = get_ok(
        d,
        "/api/v1/latest",
        &[("source", "web-1,web-2"), ("metric", "temp")],
    )
    .await;
    assert_eq!(
        body["series"][1]["last"],
        json!({ "t_ms": (m + 90) * 1000, "value": 41.0 }),
        "{body}"
    );
    // A fresh sample: the current minute's slot, before any flush.
    let mut ingest = d.ingest_client().await;
    let t = now_ms();
    push_ok(
        &mut ingest,
        vec![pb::SourceBatch {
            source: "db-1".into(),
            series: vec![series("live", pb::SampleKind::Gauge, &[(t, 7.5)])],
            groups: Vec::new(),
        }],
    )
    .await;
    let body = get_ok(
        d,
        "/api/v1/latest",
        &[("source", "db-1"), ("metric", "live")],
    )
    .await;
    let s = &body["series"][0];
    assert_eq!(s["last"], json!({ "t_ms": t, "value": 7.5 }), "{body}");
    let minute = (t / 1000).div_euclid(60) * 60;
    // The sample may have landed in the previous minute by the time of the read.
    if s["minute"]["t"] == minute {
        assert_eq!(s["minute"]["n"], 1, "{body}");
        assert_eq!(s["minute"]["max"], 7.5, "{body}");
    }
    let mut query = d.query_client().await;
    let resp = within(
        "Latest",
        query.latest(pb::LatestRequest {
            source: "db-1".into(),
            metric: "live".into(),
        }),
    )
    .await
    .expect("Latest")
    .into_inner();
    assert_eq!(resp.series[0].last_value, Some(7.5), "{resp:?}");
    assert_eq!(resp.series[0].last_t_ms, Some(t), "{resp:?}");
}

async fn check_errors(d: &Daemon) {
    let cases: [(&[(&str, &str)], &str); 11] = [
        (
            &[("source", "a"), ("metric", "m"), ("step", "30s")],
            "whole number of minutes",
        ),
        (
            &[("source", "a"), ("metric", "m"), ("step", "weekly")],
            "not `auto` or a duration",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "now"),
                ("to", "now-1h"),
            ],
            "empty range",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "now-400d"),
                ("step", "1m"),
            ],
            "query.max_points",
        ),
        (
            &[("source", "a"), ("metric", "m"), ("agg", "p99")],
            "not one of",
        ),
        (&[("source", ""), ("metric", "m")], "source"),
        (&[("metric", "m")], "required"),
        (
            &[("source", "a"), ("metric", "m"), ("metrics", "x")],
            "unknown field",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "-99999999999999"),
            ],
            "is not Unix seconds",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("step", "9223372036854775800"),
            ],
            "longer than ten years",
        ),
        (
            &[
                ("source", "a,b,c"),
                ("metric", "m,n,o"),
                ("step", "1d"),
                ("from", "now-4000d"),
            ],
            "query.max_total_points",
        ),
    ];
    for (params, reason) in cases {
        let (status, body) = get_json(d, "/api/v1/range", params).await;
        assert_eq!(status, 400, "{params:?}: {body}");
        let msg = body["error"].as_str().unwrap_or("");
        assert!(
            msg.contains(reason),
            "{params:?}: {msg:?} should say {reason:?}"
        );
    }
    // An unknown series is an empty result.
    let body = range(d, &[("source", "nobody"), ("metric", "nothing")]).await;
    assert_eq!(
        body["series"],
        json!([{ "source": "nobody", "metric": "nothing", "kind": null, "points": [] }])
    );
    // gRPC: INVALID_ARGUMENT with the reason.
    let mut query = d.query_client().await;
    let err = within(
        "Range with a 30 s step",
        query.range(pb::RangeRequest {
            source: "a".into(),
            metric: "m".into(),
            from_ms: 0,
            to_ms: 3_600_000,
            step_ms: 30_000,
            ..Default::default()
        }),
    )
    .await
    .expect_err("a 30 s step must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("minutes"), "{err:?}");
    let err = within(
        "Range from the beginning of i64",
        query.range(pb::RangeRequest {
            source: "a".into(),
            metric: "m".into(),
            from_ms: i64::MIN,
            to_ms: 3_600_000,
            step: pb::Step::Auto as i32,
            ..Default::default()
        }),
    )
    .await
    .expect_err("a time beyond any data must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("out of range"), "{err:?}");
    let resp = within(
        "Range with STEP_AUTO",
        query.range(pb::RangeRequest {
            source: "web-1".into(),
            metric: "temp".into(),
            from_ms: 0,
            to_ms: 30 * 86_400_000,
            step: pb::Step::Auto as i32,
            max_points: 40,
            ..Default::default()
        }),
    )
    .await
    .expect("STEP_AUTO")
    .into_inner();
    assert_eq!(resp.step_ms, 86_400_000, "30 days in 40 points: daily");
}

/// A live sample reaches a gRPC watcher within [`WATCH_BOUND`], several
/// times over; returns the delays.
async fn check_watch_grpc(d: &Daemon, source: &str) -> Vec<Duration> {
    let mut query = d.query_client().await;
    let mut stream = within(
        "Watch",
        query.watch(pb::WatchRequest {
            source: source.into(),
            metric: "watched".into(),
            window_minutes: 5,
        }),
    )
    .await
    .expect("Watch")
    .into_inner();
    let first = within("the snapshot", stream.message())
        .await
        .expect("snapshot")
        .expect("a first message");
    assert!(first.snapshot, "{first:?}");
    let mut ingest = d.ingest_client().await;
    let mut delays = Vec::new();
    let mut sent = 0u64;
    for i in 0..6 {
        // From before the push: the ack is part of the delay a user sees.
        let pushed = Instant::now();
        let t = now_ms();
        push_ok(
            &mut ingest,
            vec![pb::SourceBatch {
                source: source.into(),
                series: vec![series("watched", pb::SampleKind::Gauge, &[(t, i as f64)])],
                groups: Vec::new(),
            }],
        )
        .await;
        sent += 1;
        let minute_ms = t.div_euclid(60_000) * 60_000;
        loop {
            let msg = within("a watch update", stream.message())
                .await
                .expect("watch stream")
                .expect("the stream stays open");
            assert!(!msg.snapshot);
            let hit = msg.series.iter().flat_map(|s| &s.points).any(|p| {
                p.t_ms == minute_ms && p.max.is_some_and(|mx| mx >= i as f64) && p.n.is_some()
            });
            if hit {
                delays.push(pushed.elapsed());
                break;
            }
            assert!(
                pushed.elapsed() < Duration::from_secs(5),
                "no update for the pushed sample: {msg:?}"
            );
        }
        // Pushes land at different phases of the one-second tick.
        tokio::time::sleep(Duration::from_millis(170 * (i + 1))).await;
    }
    assert_eq!(sent, 6);
    for d in &delays {
        assert!(
            *d <= WATCH_BOUND,
            "watch delivered after {d:?}; the bound is {WATCH_BOUND:?}: {delays:?}"
        );
    }
    delays
}

/// The same over Server-Sent Events.
async fn check_watch_sse(d: &Daemon) {
    let url = format!("{}/api/v1/watch", d.http_url());
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("HTTP client")
        .get(&url)
        .query(&[("source", "sse-1"), ("metric", "watched"), ("window", "5m")])
        .send()
        .await
        .expect("GET /api/v1/watch");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let mut body = resp;
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains("event: snapshot") {
        let chunk = within("the SSE snapshot", body.chunk())
            .await
            .expect("reading the event stream")
            .expect("the event stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        assert!(Instant::now() < deadline, "{text}");
    }
    let mut ingest = d.ingest_client().await;
    let pushed = Instant::now();
    push_ok(
        &mut ingest,
        vec![pb::SourceBatch {
            source: "sse-1".into(),
            series: vec![series(
                "watched",
                pb::SampleKind::Gauge,
                &[(now_ms(), 3.25)],
            )],
            groups: Vec::new(),
        }],
    )
    .await;
    loop {
        let chunk = within("an SSE update", body.chunk())
            .await
            .expect("reading the event stream")
            .expect("the event stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(at) = text.find("event: update") {
            let data = text[at..]
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .expect("a data line");
            let ev: Value = serde_json::from_str(data).expect("JSON update");
            assert_eq!(ev["series"][0]["source"], "sse-1", "{ev}");
            assert_eq!(ev["series"][0]["points"][0]["max"], 3.25, "{ev}");
            break;
        }
        assert!(pushed.elapsed() < Duration::from_secs(5), "{text}");
    }
    assert!(
        pushed.elapsed() <= WATCH_BOUND,
        "SSE delivered after {:?}",
        pushed.elapsed()
    );
}

async fn scenario(d: &Daemon) {
    let m = month_start();
    push_fixture(d, m).await;
    check_ranges(d, m).await;
    // Discovery first: it waits for the catalog, which fan-outs rely on.
    check_discovery(d, m).await;
    check_latest(d, m).await;
    check_errors(d).await;
    check_aggregates(d, m).await;
    let delays = check_watch_grpc(d, "watch-1").await;
    eprintln!("watch delivery delays: {delays:?}");
    check_watch_sse(d).await;
}

async fn start(opts: DaemonOpts) -> Daemon {
    tokio::task::spawn_blocking(move || Daemon::start(opts))
        .await
        .expect("starting tallyd panicked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_reads_on_the_embedded_store() {
    let config = config_file();
    let d = start(opts(config.path())).await;
    scenario(&d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_reads_on_mongodb() {
    let target: MongoTarget = mongo_target().await;
    let config = config_file();
    let d = start(
        opts(config.path())
            .arg("--store")
            .arg("mongodb")
            .arg("--mongodb-uri")
            .arg(target.uri.clone())
            .env("TALLYD_MONGODB_DATABASE", &target.database),
    )
    .await;
    scenario(&d).await;
    drop(d);
    target.cleanup().await;
}

/// A watcher that stops reading is skipped, then dropped, and never holds
/// up ingest or the other watchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_does_not_stall_ingest() {
    let config = config_file();
    let d = start(
        opts(config.path())
            .env("TALLYD_WATCH_BUFFER", "1")
            .env("TALLYD_QUERY_MAX_TOTAL_POINTS", "10000000")
            .env("TALLYD_WATCH_MAX_LAG", "2s"),
    )
    .await;
    // Ten hours of history for 100 series make the stalled watcher's first
    // message alone (60,000 points) larger than every transport buffer on
    // the way, while each tick's live reads stay small.
    const SERIES: usize = 100;
    const HISTORY_MINUTES: i64 = 600;
    let mut ingest = d.ingest_client().await;
    let start_ms = now_ms() - (HISTORY_MINUTES - 1) * 60_000;
    for chunk in (0..SERIES).collect::<Vec<_>>().chunks(10) {
        let sources = chunk
            .iter()
            .map(|i| pb::SourceBatch {
                source: format!("slow-{i:04}"),
                series: vec![series(
                    "load",
                    pb::SampleKind::Gauge,
                    &(0..HISTORY_MINUTES)
                        .map(|k| (start_ms + k * 60_000, k as f64))
                        .collect::<Vec<_>>(),
                )],
                groups: Vec::new(),
            })
            .collect();
        push_ok(&mut ingest, sources).await;
    }
    let selector: String = (0..SERIES)
        .map(|i| format!("slow-{i:04}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut stalled_client = d.query_client().await;
    // Opened, never read.
    let _stalled = within(
        "the stalled Watch",
        stalled_client.watch(pb::WatchRequest {
            source: selector,
            metric: "load".into(),
            window_minutes: HISTORY_MINUTES as u32,
        }),
    )
    .await
    .expect("Watch");

    // Meanwhile ingest runs at full speed and a healthy watcher keeps up.
    // Updates only flow while samples arrive, so the watcher is told when
    // the pushing stops rather than outliving it on a clock of its own.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let healthy = tokio::spawn({
        let d_grpc = d.grpc_url();
        async move {
            let mut q = pb::query_client::QueryClient::connect(d_grpc)
                .await
                .expect("connect");
            let mut s = q
                .watch(pb::WatchRequest {
                    source: "slow-0000".into(),
                    metric: "load".into(),
                    window_minutes: 1,
                })
                .await
                .expect("Watch")
                .into_inner();
            let mut updates = 0;
            loop {
                tokio::select! {
                    _ = stop_rx.changed() => break,
                    m = tokio::time::timeout(Duration::from_secs(5), s.message()) => match m {
                        Ok(Ok(Some(m))) if !m.snapshot => updates += 1,
                        Ok(Ok(Some(_))) => {}
                        other => panic!("healthy watcher: {other:?}"),
                    },
                }
            }
            updates
        }
    });
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(6);
    let mut pushes = 0;
    while Instant::now() < until {
        let t = now_ms();
        let sources = (0..SERIES)
            .step_by(10)
            .map(|i| pb::SourceBatch {
                source: format!("slow-{i:04}"),
                series: vec![series("load", pb::SampleKind::Gauge, &[(t, pushes as f64)])],
                groups: Vec::new(),
            })
            .collect();
        let started = Instant::now();
        push_ok(&mut ingest, sources).await;
        slowest = slowest.max(started.elapsed());
        pushes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop_tx.send(true);
    let updates = healthy.await.expect("healthy watcher task");
    assert!(
        updates >= 3,
        "the healthy watcher got {updates} updates in 6 s"
    );
    assert!(pushes >= 20, "only {pushes} pushes in 6 s");
    assert!(
        slowest < Duration::from_secs(1),
        "a push took {slowest:?} while a watcher was stalled"
    );
    eventually(
        "the stalled watcher is skipped and then dropped",
        SETTLE,
        || async {
            let text = support::client::metrics_text(&d).await;
            let skipped = support::client::metric_sum(&text, "tally_watch_skipped_total");
            let dropped = support::client::metric_sum(&text, "tally_watch_dropped_total");
            if skipped >= 1.0 && dropped >= 1.0 {
                Ok(())
            } else {
                Err(format!("skipped {skipped}, dropped {dropped}"))
            }
        },
    )
    .await;
}
