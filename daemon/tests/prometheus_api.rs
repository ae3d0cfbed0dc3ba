//! The Prometheus-compatible API (`/prometheus/api/v1/…`) of the real
//! `tallyd` binary over loopback, on the embedded store and on MongoDB
//! (the stand-in, or `MONGODB_URI`).
//!
//! Known samples (gauges, delta and cumulative counters, several sources)
//! are pushed into past minutes; after a flush, every supported function
//! and aggregation is checked against values this file computes from what
//! it pushed, and against the native `/api/v1/range`. The rollup path must
//! equal the fan-out path, hour slots must equal minute slots, discovery
//! must list exactly what was pushed, unsupported PromQL must be refused in
//! Prometheus' error format naming the construct, and `promtool` (Debian's
//! `prometheus` package, installed by `scripts/setup-test-deps`) must read
//! the same values through its own client.
//!
//! Values are small integers and binary fractions, so sums are exact in any
//! order. Every wait is bounded.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tally_proto::v1 as pb;

use support::daemon::{Daemon, DaemonOpts};
use support::standin::mongo_target;

const RPC_TIMEOUT: Duration = Duration::from_secs(20);
const MINUTE_MS: i64 = 60_000;
const HOUR_S: i64 = 3_600;

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(RPC_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {RPC_TIMEOUT:?}"),
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

// ---------------------------------------------------------------------------
// What is pushed, and what every query must answer.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Gauge,
    Delta,
    Cumulative,
}

/// One series as pushed, and its samples as the daemon stores them
/// (cumulative counters as deltas).
#[derive(Debug, Clone)]
struct Series {
    source: &'static str,
    metric: &'static str,
    kind: Kind,
    sent: Vec<(i64, f64)>,
    stored: Vec<(i64, f64)>,
}

const SOURCES: [&str; 3] = ["db-1", "web-1", "web-2"];
/// Tally metric, Prometheus name, kind.
const METRICS: [(&str, &str, Kind); 4] = [
    ("bytes/out", "bytes_out", Kind::Cumulative),
    ("cpu.load", "cpu_load", Kind::Gauge),
    ("requests", "requests", Kind::Delta),
    ("temp", "temp", Kind::Gauge),
];
/// Minutes with data, counted from `t0`.
const MINUTES: i64 = 7;

fn fleet(t0: i64) -> Vec<Series> {
    let mut out = Vec::new();
    for (s, source) in SOURCES.iter().enumerate() {
        let w = (s + 1) as f64;
        for (metric, _, kind) in METRICS {
            let mut sent = Vec::new();
            for m in 0..MINUTES {
                let at = |sec: i64| t0 + m * MINUTE_MS + sec * 1000;
                match metric {
                    "cpu.load" => {
                        for (k, v) in [0.5, -1.25, 3.0].into_iter().enumerate() {
                            sent.push((at(5 + 20 * k as i64), w * m as f64 + v));
                        }
                    }
                    "temp" => {
                        for k in 0..2 {
                            sent.push((
                                at(10 + 30 * k),
                                20.0 + 2.0 * w + 0.5 * m as f64 + k as f64,
                            ));
                        }
                    }
                    "requests" => {
                        // db-1 reports nothing in minute 3: a gap.
                        if !(*source == "db-1" && m == 3) {
                            for k in 0..3 {
                                sent.push((at(15 + 20 * k), w + (m + 2 * k) as f64));
                            }
                        }
                    }
                    _ => {
                        for k in 0..2 {
                            let j = (2 * m + k) as f64;
                            // web-2's process restarts at its 8th sample.
                            let v = if *source == "web-2" && j >= 7.0 {
                                j
                            } else {
                                1000.0 * w + j * (j + 1.0) * w
                            };
                            sent.push((at(20 + 30 * k), v));
                        }
                    }
                }
            }
            let stored = match kind {
                Kind::Cumulative => sent
                    .windows(2)
                    .map(|p| {
                        let ((_, prev), (ts, v)) = (p[0], p[1]);
                        (ts, if v >= prev { v - prev } else { v })
                    })
                    .collect(),
                _ => sent.clone(),
            };
            out.push(Series {
                source,
                metric,
                kind,
                sent,
                stored,
            });
        }
    }
    out
}

fn push_request(fleet: &[Series]) -> pb::PushRequest {
    let mut sources: Vec<pb::SourceBatch> = Vec::new();
    for s in fleet {
        let series = pb::SeriesSamples {
            metric: s.metric.into(),
            kind: match s.kind {
                Kind::Gauge => pb::SampleKind::Gauge,
                Kind::Delta => pb::SampleKind::DeltaCounter,
                Kind::Cumulative => pb::SampleKind::CumulativeCounter,
            } as i32,
            timestamps_ms: s.sent.iter().map(|x| x.0).collect(),
            values: s.sent.iter().map(|x| x.1).collect(),
        };
        match sources.iter_mut().find(|b| b.source == s.source) {
            Some(b) => b.series.push(series),
            None => sources.push(pb::SourceBatch {
                source: s.source.into(),
                series: vec![series],
                groups: Vec::new(),
            }),
        }
    }
    pb::PushRequest { sources }
}

/// A range function of one series' stored samples over the window at `t_s`
/// with range `r_s`: the minutes starting in `[floor_minute(t) - r,
/// floor_minute(t))`.
fn window(s: &Series, func: &str, t_s: i64, r_s: i64) -> Option<f64> {
    let end = t_s.div_euclid(60) * 60;
    let vals: Vec<f64> = s
        .stored
        .iter()
        .filter(|(ts, _)| {
            let minute = ts.div_euclid(MINUTE_MS) * 60;
            minute >= end - r_s && minute < end
        })
        .map(|x| x.1)
        .collect();
    if vals.is_empty() {
        return None;
    }
    let sum: f64 = vals.iter().sum();
    Some(match func {
        "avg_over_time" => sum / vals.len() as f64,
        "min_over_time" => vals.iter().copied().fold(f64::INFINITY, f64::min),
        "max_over_time" => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "sum_over_time" | "increase" => sum,
        "count_over_time" => vals.len() as f64,
        "rate" => sum / r_s as f64,
        other => panic!("no model for {other}"),
    })
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

// ---------------------------------------------------------------------------
// The daemon and its API.

struct Fixture {
    d: Daemon,
    http: reqwest::Client,
    fleet: Vec<Series>,
    t0: i64,
}

/// `{label: value}` of a result series.
type Labels = BTreeMap<String, String>;

/// A matrix: labels to (t seconds, value) points.
type Matrix = BTreeMap<Labels, Vec<(f64, f64)>>;

impl Fixture {
    async fn start(opts: DaemonOpts) -> Fixture {
        let d = tokio::task::spawn_blocking(move || Daemon::start(opts))
            .await
            .expect("starting tallyd panicked");
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(RPC_TIMEOUT)
            .build()
            .expect("an HTTP client");
        // Nine minutes back: every minute with data is over by the checks.
        let now = now_ms();
        let t0 = now - now.rem_euclid(MINUTE_MS) - 9 * MINUTE_MS;
        let fleet = fleet(t0);
        let mut ingest = d.ingest_client().await;
        let resp = within("Push", ingest.push(push_request(&fleet)))
            .await
            .unwrap_or_else(|s| panic!("Push failed: {s:?}"))
            .into_inner();
        let sent: usize = fleet.iter().map(|s| s.sent.len()).sum();
        assert_eq!(resp.accepted as usize, sent, "{resp:?}");
        let fx = Fixture {
            d,
            http,
            fleet,
            t0: t0 / 1000,
        };
        fx.wait_flushed().await;
        fx
    }

    fn url(&self, path: &str) -> String {
        format!("{}/prometheus/api/v1/{path}", self.d.http_url())
    }

    /// Waits until a flush has applied everything: the catalog and the
    /// rollups are written by flushes.
    async fn wait_flushed(&self) {
        support::client::wait_settled(&self.d.http_url()).await;
    }

    /// GET (or form POST) an API path: (status, body, rollup header).
    async fn call(
        &self,
        path: &str,
        params: &[(&str, String)],
        post: bool,
    ) -> (u16, Value, Option<String>) {
        let url = self.url(path);
        let req = if post {
            self.http.post(&url).form(params)
        } else {
            self.http.get(&url).query(params)
        };
        let resp = within(&url, req.send())
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = resp.status().as_u16();
        let rollup = resp
            .headers()
            .get("x-tally-rollup")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let text = within(&url, resp.text()).await.expect("a body");
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{url} {params:?}: not JSON ({e}): {text}"));
        (status, body, rollup)
    }

    async fn ok(&self, path: &str, params: &[(&str, String)]) -> Value {
        let (status, body, _) = self.call(path, params, false).await;
        assert_eq!(status, 200, "{path} {params:?}: {body}");
        assert_eq!(body["status"], "success", "{body}");
        body["data"].clone()
    }

    /// query_range (POSTed, as Grafana does): the matrix and the rollup
    /// header.
    async fn range(&self, q: &str, start: i64, end: i64, step: &str) -> (Matrix, Option<String>) {
        let params = [
            ("query", q.to_string()),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", step.to_string()),
        ];
        let (status, body, rollup) = self.call("query_range", &params, true).await;
        assert_eq!(status, 200, "{q}: {body}");
        assert_eq!(body["data"]["resultType"], "matrix", "{q}: {body}");
        (parse_matrix(&body["data"]["result"], "values"), rollup)
    }

    /// An instant query's vector.
    async fn instant(&self, q: &str, t: i64) -> Matrix {
        let data = self
            .ok(
                "query",
                &[("query", q.to_string()), ("time", t.to_string())],
            )
            .await;
        assert_eq!(data["resultType"], "vector", "{q}: {data}");
        parse_matrix(&data["result"], "value")
    }

    /// The native API's points of one series: t to the point's fields.
    async fn native(
        &self,
        source: &str,
        metric: &str,
        from: i64,
        to: i64,
        step: &str,
    ) -> BTreeMap<i64, Value> {
        let url = format!("{}/api/v1/range", self.d.http_url());
        let params = [
            ("source", source.to_string()),
            ("metric", metric.to_string()),
            ("from", from.to_string()),
            ("to", to.to_string()),
            ("step", step.to_string()),
        ];
        let resp = within(&url, self.http.get(&url).query(&params).send())
            .await
            .expect("native range");
        let body: Value = within(&url, resp.json()).await.expect("JSON");
        body["series"][0]["points"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|p| (p["t"].as_i64().expect("t"), p.clone()))
            .collect()
    }

    fn series(&self, source: &str, metric: &str) -> &Series {
        self.fleet
            .iter()
            .find(|s| s.source == source && s.metric == metric)
            .expect("a pushed series")
    }

    /// Evaluation times of the checks: the minute after the first one with
    /// data to the minute after the last, every minute.
    fn span(&self) -> (i64, i64) {
        (self.t0 + 60, self.t0 + (MINUTES + 1) * 60)
    }
}

fn parse_matrix(result: &Value, key: &str) -> Matrix {
    let mut out = Matrix::new();
    for s in result.as_array().expect("a result array") {
        let labels: Labels = s["metric"]
            .as_object()
            .expect("metric labels")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("a label value").to_string()))
            .collect();
        let points: Vec<&Value> = if key == "value" {
            vec![&s["value"]]
        } else {
            s["values"].as_array().expect("values").iter().collect()
        };
        let points = points
            .into_iter()
            .map(|p| {
                let t = p[0].as_f64().expect("a timestamp");
                let v: f64 = p[1]
                    .as_str()
                    .expect("a string value")
                    .parse()
                    .expect("a number");
                (t, v)
            })
            .collect();
        assert!(out.insert(labels, points).is_none(), "duplicate series");
    }
    out
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Asserts `got` has exactly the series and points of `want` (None
/// values: no point).
fn assert_matrix(q: &str, got: &Matrix, want: &BTreeMap<Labels, Vec<(i64, Option<f64>)>>) {
    let want: BTreeMap<&Labels, Vec<(i64, f64)>> = want
        .iter()
        .map(|(l, pts)| {
            (
                l,
                pts.iter()
                    .filter_map(|(t, v)| v.map(|v| (*t, v)))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().copied().collect::<Vec<_>>(),
        "{q}: series differ; got {got:?}"
    );
    for (l, pts) in &want {
        let g = &got[*l];
        assert_eq!(g.len(), pts.len(), "{q} {l:?}: got {g:?}, want {pts:?}");
        for ((gt, gv), (wt, wv)) in g.iter().zip(pts) {
            assert_eq!(*gt, *wt as f64, "{q} {l:?}");
            assert!(close(*gv, *wv), "{q} {l:?} at {wt}: got {gv}, want {wv}");
        }
    }
}

/// Asserts two matrices have the same series and points, values equal up
/// to rounding (a rollup divides a sum where a fan-out sums quotients).
fn assert_same(q: &str, a: &Matrix, b: &Matrix) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{q}: {a:?} vs {b:?}"
    );
    for (l, pa) in a {
        let pb = &b[l];
        assert_eq!(pa.len(), pb.len(), "{q} {l:?}: {pa:?} vs {pb:?}");
        for (x, y) in pa.iter().zip(pb) {
            assert!(x.0 == y.0 && close(x.1, y.1), "{q} {l:?}: {pa:?} vs {pb:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// The checks.

/// Every range function of every series at every minute, against the
/// model; `avg_over_time(x[1m])` also against the native 1m average.
async fn check_range_functions(fx: &Fixture) {
    let (start, end) = fx.span();
    let times: Vec<i64> = (start..=end).step_by(60).collect();
    for (metric, prom, kind) in METRICS {
        let mut funcs = vec![
            "avg_over_time",
            "min_over_time",
            "max_over_time",
            "sum_over_time",
            "count_over_time",
        ];
        if kind != Kind::Gauge {
            funcs.extend(["rate", "increase"]);
        }
        for func in funcs {
            for r in [60, 180] {
                let q = format!("{func}({prom}[{}m])", r / 60);
                let (got, rollup) = fx.range(&q, start, end, "60").await;
                assert_eq!(rollup, None, "{q} reads series, not rollups");
                let want = SOURCES
                    .iter()
                    .map(|src| {
                        let s = fx.series(src, metric);
                        (
                            labels(&[("source", src), ("tally_metric", metric)]),
                            times.iter().map(|t| (*t, window(s, func, *t, r))).collect(),
                        )
                    })
                    .collect();
                assert_matrix(&q, &got, &want);
            }
        }
        // The native API's 1m buckets are labelled by their start; a
        // Prometheus point by the end of its window.
        for src in SOURCES {
            let q = format!("avg_over_time({prom}{{source=\"{src}\"}}[1m])");
            let (got, _) = fx.range(&q, start, end, "1m").await;
            let native = fx.native(src, metric, start - 60, end, "1m").await;
            let pts = &got[&labels(&[("source", src), ("tally_metric", metric)])];
            assert_eq!(pts.len(), native.len(), "{q}: {pts:?} vs native {native:?}");
            for (t, v) in pts {
                let n = &native[&(*t as i64 - 60)];
                assert!(close(*v, n["avg"].as_f64().expect("avg")), "{q} at {t}");
            }
        }
    }
    // Sub-minute steps evaluate every step; the data changes per minute.
    let q = "max_over_time(temp{source=\"web-1\"}[1m])";
    let (got, _) = fx.range(q, start, start + 45, "15s").await;
    let pts = &got[&labels(&[("source", "web-1"), ("tally_metric", "temp")])];
    let want = window(fx.series("web-1", "temp"), "max_over_time", start, 60).expect("data");
    assert_eq!(pts.len(), 4, "{pts:?}");
    assert!(pts.iter().all(|(_, v)| *v == want), "{pts:?}");
    // Arithmetic with numbers.
    let q = "rate(requests{source=\"web-2\"}[2m]) * 120";
    let (got, _) = fx.range(q, start, end, "60").await;
    let s = fx.series("web-2", "requests");
    let want = [(
        labels(&[("source", "web-2"), ("tally_metric", "requests")]),
        times
            .iter()
            .map(|t| (*t, window(s, "increase", *t, 120)))
            .collect(),
    )]
    .into_iter()
    .collect();
    assert_matrix(q, &got, &want);
}

/// `sum`, `avg`, `min`, `max`, `count`, `topk`, `bottomk`, with and
/// without grouping, against the model.
async fn check_aggregations(fx: &Fixture) {
    let (start, end) = fx.span();
    let times: Vec<i64> = (start..=end).step_by(60).collect();
    let per_source = |metric: &str, func: &str, t: i64, r: i64| -> Vec<(&str, f64)> {
        SOURCES
            .iter()
            .filter_map(|src| window(fx.series(src, metric), func, t, r).map(|v| (*src, v)))
            .collect()
    };
    let reduce = |op: &str, vals: &[(&str, f64)]| -> Option<f64> {
        if vals.is_empty() {
            return None;
        }
        let it = vals.iter().map(|x| x.1);
        Some(match op {
            "sum" => it.sum(),
            "avg" => it.sum::<f64>() / vals.len() as f64,
            "min" => it.fold(f64::INFINITY, f64::min),
            "max" => it.fold(f64::NEG_INFINITY, f64::max),
            "count" => vals.len() as f64,
            _ => unreachable!(),
        })
    };
    for (op, func, metric, prom) in [
        ("sum", "rate", "requests", "requests"),
        ("avg", "avg_over_time", "cpu.load", "cpu_load"),
        ("min", "min_over_time", "temp", "temp"),
        ("max", "max_over_time", "cpu.load", "cpu_load"),
        ("count", "count_over_time", "requests", "requests"),
        ("max", "increase", "bytes/out", "bytes_out"),
    ] {
        // A source regex that is not a rollup group: the fan-out path.
        let q = format!("{op}({func}({prom}{{source=~\"(web|db)-.*\"}}[2m]))");
        let (got, _) = fx.range(&q, start, end, "60").await;
        let want = [(
            Labels::new(),
            times
                .iter()
                .map(|t| (*t, reduce(op, &per_source(metric, func, *t, 120))))
                .collect(),
        )]
        .into_iter()
        .collect();
        assert_matrix(&q, &got, &want);

        let q = format!("{op} by (source) ({func}({prom}[2m]))");
        let (got, _) = fx.range(&q, start, end, "60").await;
        let want = SOURCES
            .iter()
            .map(|src| {
                (
                    labels(&[("source", src)]),
                    times
                        .iter()
                        .map(|t| {
                            let v = window(fx.series(src, metric), func, *t, 120);
                            (*t, v.map(|v| if op == "count" { 1.0 } else { v }))
                        })
                        .collect(),
                )
            })
            .collect();
        assert_matrix(&q, &got, &want);

        let q = format!("{op} without (source) ({func}({prom}[2m]))");
        let (got, _) = fx.range(&q, start, end, "60").await;
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            vec![&labels(&[("tally_metric", metric)])],
            "{q}"
        );
    }
    // topk / bottomk at one time, and per step over a range.
    let t = fx.t0 + 5 * 60;
    let mut ranked = per_source("temp", "avg_over_time", t, 300);
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let got = fx.instant("topk(2, avg_over_time(temp[5m]))", t).await;
    let want: Vec<(&str, f64)> = ranked[..2].to_vec();
    assert_eq!(got.len(), 2, "{got:?}");
    for (src, v) in &want {
        let pts = &got[&labels(&[("source", src), ("tally_metric", "temp")])];
        assert_eq!(pts, &vec![(t as f64, *v)]);
    }
    let got = fx.instant("bottomk(1, avg_over_time(temp[5m]))", t).await;
    let low = ranked.last().expect("a source");
    assert_eq!(
        got[&labels(&[("source", low.0), ("tally_metric", "temp")])],
        vec![(t as f64, low.1)]
    );
    let (got, _) = fx
        .range("topk(1, increase(requests[1m]))", start, end, "60")
        .await;
    for t in &times {
        let best = per_source("requests", "increase", *t, 60)
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let chosen: Vec<(&Labels, f64)> = got
            .iter()
            .filter_map(|(l, pts)| pts.iter().find(|p| p.0 == *t as f64).map(|p| (l, p.1)))
            .collect();
        match best {
            None => assert!(chosen.is_empty()),
            Some((src, v)) => assert_eq!(
                chosen,
                vec![(&labels(&[("source", src), ("tally_metric", "requests")]), v)],
                "topk at {t}"
            ),
        }
    }
    // Instant queries: a vector, and a scalar.
    let got = fx
        .instant("sum_over_time(cpu_load{source=\"db-1\"}[5m])", t)
        .await;
    let want = window(fx.series("db-1", "cpu.load"), "sum_over_time", t, 300).expect("data");
    assert_eq!(
        got[&labels(&[("source", "db-1"), ("tally_metric", "cpu.load")])],
        vec![(t as f64, want)]
    );
    let data = fx
        .ok(
            "query",
            &[("query", "1 + 2 * 3".into()), ("time", t.to_string())],
        )
        .await;
    assert_eq!(data["resultType"], "scalar");
    assert_eq!(data["result"], serde_json::json!([t, "7"]));
}

/// The rollup path (no source matcher: the `all` group) and the fan-out
/// path (a source regex) give the same answers; the header says which ran.
async fn check_rollups(fx: &Fixture) {
    let (start, end) = fx.span();
    for (op, func, prom) in [
        ("sum", "sum_over_time", "cpu_load"),
        ("sum", "sum_over_time", "requests"),
        ("sum", "rate", "requests"),
        ("sum", "increase", "bytes_out"),
        ("sum", "count_over_time", "temp"),
        ("min", "min_over_time", "temp"),
        ("max", "max_over_time", "cpu_load"),
    ] {
        for by in ["", " by (tally_metric)"] {
            let rolled = format!("{op}{by} ({func}({prom}[3m]))");
            let fanned = format!("{op}{by} ({func}({prom}{{source=~\".+\"}}[3m]))");
            let (r, header) = fx.range(&rolled, start, end, "60").await;
            assert_eq!(header.as_deref(), Some("all"), "{rolled} reads the rollup");
            let (f, header) = fx.range(&fanned, start, end, "60").await;
            assert_eq!(header, None, "{fanned} fans out");
            assert!(!r.is_empty(), "{rolled}: no data");
            assert_same(&rolled, &r, &f);
        }
    }
    // Several metrics through one name regex.
    let q = "sum by (tally_metric) (sum_over_time({__name__=~\"requests|temp\"}[2m]))";
    let (r, header) = fx.range(q, start, end, "60").await;
    assert_eq!(header.as_deref(), Some("all"));
    let fanned = q
        .replace("[2m]", "")
        .replace("\"}", "\", source!=\"\"}[2m]");
    let (f, _) = fx.range(&fanned, start, end, "60").await;
    assert_eq!(r.len(), 2, "{r:?}");
    assert_same(q, &r, &f);
    // Instant queries too.
    let t = fx.t0 + 6 * 60;
    assert_eq!(
        fx.instant("sum(increase(requests[5m]))", t).await,
        fx.instant("sum(increase(requests{source=~\".*-.*\"}[5m]))", t)
            .await
    );
}

/// Whole-hour windows at whole hours are read from hour slots (and whole
/// days from day slots); the answer equals the minute slots'.
async fn check_tiers(fx: &Fixture) {
    let now = now_ms() / 1000;
    let h = (now / HOUR_S + 1) * HOUR_S;
    for (func, prom, metric) in [
        ("sum_over_time", "cpu_load", "cpu.load"),
        ("max_over_time", "temp", "temp"),
        ("increase", "bytes_out", "bytes/out"),
    ] {
        let q = format!("{func}({prom}[2h])");
        let (hours, _) = fx.range(&q, h, h + HOUR_S, "1h").await;
        let (minutes, _) = fx.range(&q, h, h + HOUR_S, "30m").await;
        let want = SOURCES
            .iter()
            .map(|src| {
                let s = fx.series(src, metric);
                (
                    labels(&[("source", src), ("tally_metric", metric)]),
                    [h, h + HOUR_S]
                        .iter()
                        .map(|t| (*t, window(s, func, *t, 2 * HOUR_S)))
                        .collect(),
                )
            })
            .collect();
        assert_matrix(&q, &hours, &want);
        let thinned: Matrix = minutes
            .into_iter()
            .map(|(l, pts)| {
                (
                    l,
                    pts.into_iter()
                        .filter(|p| p.0 as i64 % HOUR_S == 0)
                        .collect(),
                )
            })
            .filter(|(_, pts): &(Labels, Vec<(f64, f64)>)| !pts.is_empty())
            .collect();
        assert_eq!(hours, thinned, "{q}: hour slots vs minute slots");
        let day = (now / 86_400 + 1) * 86_400;
        let q = format!("{func}({prom}[1d])");
        let got = fx.instant(&q, day).await;
        let want = SOURCES
            .iter()
            .map(|src| {
                (
                    labels(&[("source", src), ("tally_metric", metric)]),
                    vec![(day, window(fx.series(src, metric), func, day, 86_400))],
                )
            })
            .collect();
        assert_matrix(&q, &got, &want);
    }
}

/// series, labels, label values, metadata and buildinfo list exactly what
/// was pushed (never the rollup series).
async fn check_discovery(fx: &Fixture) {
    let strings = |v: Value| -> Vec<String> {
        v.as_array()
            .expect("an array")
            .iter()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let sources: Vec<String> = SOURCES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        strings(fx.ok("label/source/values", &[]).await),
        sources,
        "no rollup sources"
    );
    let mut prom: Vec<String> = METRICS.iter().map(|m| m.1.to_string()).collect();
    prom.sort();
    assert_eq!(strings(fx.ok("label/__name__/values", &[]).await), prom);
    let tally: Vec<String> = METRICS.iter().map(|m| m.0.to_string()).collect();
    assert_eq!(
        strings(fx.ok("label/tally_metric/values", &[]).await),
        tally
    );
    assert!(strings(fx.ok("label/job/values", &[]).await).is_empty());
    assert_eq!(
        strings(
            fx.ok(
                "label/source/values",
                &[("match[]", "requests{source=~\"web.*\"}".into())]
            )
            .await
        ),
        ["web-1", "web-2"]
    );
    assert_eq!(
        strings(fx.ok("labels", &[]).await),
        ["__name__", "source", "tally_metric"]
    );
    assert!(strings(fx.ok("labels", &[("match[]", "nothing_here".into())]).await).is_empty());

    let (start, end) = (fx.t0 - 600, now_ms() / 1000);
    let listed = |v: Value| -> Vec<Labels> {
        v.as_array()
            .expect("series")
            .iter()
            .map(|s| {
                s.as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("value").to_string()))
                    .collect()
            })
            .collect()
    };
    let got = listed(
        fx.ok(
            "series",
            &[
                ("match[]", "cpu_load".into()),
                ("start", start.to_string()),
                ("end", end.to_string()),
            ],
        )
        .await,
    );
    let want: Vec<Labels> = SOURCES
        .iter()
        .map(|s| {
            labels(&[
                ("__name__", "cpu_load"),
                ("source", s),
                ("tally_metric", "cpu.load"),
            ])
        })
        .collect();
    assert_eq!(got, want);
    let got = listed(
        fx.ok(
            "series",
            &[
                ("match[]", "{source=\"db-1\"}".into()),
                ("match[]", "temp{tally_metric=\"temp\"}".into()),
            ],
        )
        .await,
    );
    assert_eq!(got.len(), 4 + 2, "{got:?}");
    let (status, body, _) = fx.call("series", &[], false).await;
    assert_eq!(
        (status, body["errorType"].as_str()),
        (400, Some("bad_data"))
    );

    let meta = fx.ok("metadata", &[]).await;
    assert_eq!(meta["cpu_load"][0]["type"], "gauge", "{meta}");
    assert_eq!(meta["requests"][0]["type"], "counter", "{meta}");
    assert_eq!(meta["bytes_out"][0]["type"], "counter", "{meta}");
    let info = fx.ok("status/buildinfo", &[]).await;
    assert_eq!(info["version"], "2.42.0");
    assert!(info["tallyVersion"].as_str().is_some_and(|v| !v.is_empty()));
}

/// Unsupported or invalid PromQL: Prometheus' error format, the construct
/// named, never an answer.
async fn check_refusals(fx: &Fixture) {
    let (start, end) = fx.span();
    for (q, names) in [
        (
            "cpu_load",
            vec!["bare selector", "avg_over_time(cpu_load[1m])"],
        ),
        ("cpu_load[5m]", vec!["range selector"]),
        ("rate(requests[5m] offset 1m)", vec!["offset"]),
        ("rate(requests[5m] @ 1700000000)", vec!["@ modifier"]),
        ("max_over_time(temp[10m:1m])", vec!["subqueries"]),
        ("irate(requests[5m])", vec!["irate()", "rate(x[5m])"]),
        (
            "histogram_quantile(0.9, rate(requests[5m]))",
            vec!["histogram_quantile"],
        ),
        ("stddev(avg_over_time(temp[1m]))", vec!["stddev()"]),
        (
            "rate(requests[5m]) / rate(bytes_out[5m])",
            vec!["two sets of series"],
        ),
        ("rate(requests[5m]) > 1", vec!["`>`"]),
        (
            "avg_over_time(temp[90s])",
            vec!["whole number of minutes", "[2m]"],
        ),
        ("rate(temp[5m])", vec!["rate()", "gauge", "avg_over_time"]),
        ("sum(", vec!["parse error"]),
    ] {
        for post in [false, true] {
            let params = [
                ("query", q.to_string()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", "60".to_string()),
            ];
            let (status, body, _) = fx.call("query_range", &params, post).await;
            assert_eq!(status, 400, "{q}: {body}");
            assert_eq!(body["status"], "error", "{q}: {body}");
            assert_eq!(body["errorType"], "bad_data", "{q}: {body}");
            let msg = body["error"].as_str().expect("a message");
            for n in &names {
                assert!(msg.contains(n), "{q}: {msg:?} does not name {n:?}");
            }
        }
    }
    let bad = |params: Vec<(&'static str, String)>, needle: &'static str| async move {
        let (status, body, _) = fx.call("query_range", &params, false).await;
        assert_eq!(status, 400, "{params:?}: {body}");
        assert_eq!(body["errorType"], "bad_data");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(needle)),
            "{body}"
        );
    };
    let q = || ("query", "avg_over_time(temp[1m])".to_string());
    bad(
        vec![
            ("start", "1".into()),
            ("end", "2".into()),
            ("step", "1".into()),
        ],
        "query",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "10".into()),
            ("end", "5".into()),
            ("step", "1".into()),
        ],
        "before start",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "1".into()),
            ("end", "5".into()),
            ("step", "0".into()),
        ],
        "zero or negative",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "0".into()),
            ("end", "100000000".into()),
            ("step", "1".into()),
        ],
        "maximum resolution",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "yesterday".into()),
            ("end", "5".into()),
            ("step", "1".into()),
        ],
        "start",
    )
    .await;
    // Valid, but its windows need more minute slots than the engine reads
    // at once: a limit, so 422 `execution`.
    let params = [
        ("query", "avg_over_time(temp[61m])".to_string()),
        ("start", (fx.t0 - 200 * 86_400).to_string()),
        ("end", fx.t0.to_string()),
        ("step", "1d".to_string()),
    ];
    let (status, body, _) = fx.call("query_range", &params, true).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errorType"], "execution", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("query.max_points")),
        "{body}"
    );
}

// ---------------------------------------------------------------------------
// promtool.

/// Runs promtool with `args`, bounded in time; its stdout.
async fn promtool(args: &[String]) -> String {
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "promtool is not on PATH: run scripts/setup-test-deps (it installs Debian's `prometheus` package)"
    );
    let mut cmd = tokio::process::Command::new("promtool");
    cmd.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("promtool {args:?} did not finish within 30 s"))
        .expect("running promtool");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn check_promtool(fx: &Fixture) {
    let server = format!("{}/prometheus", fx.d.http_url());
    let (start, end) = fx.span();
    let s = |x: &str| x.to_string();

    // Range: promtool's JSON output against the native API and the model.
    let q = "avg_over_time(cpu_load[1m])";
    let out = promtool(&[
        s("query"),
        s("range"),
        s("-o"),
        s("json"),
        format!("--start={start}"),
        format!("--end={end}"),
        s("--step=1m"),
        server.clone(),
        s(q),
    ])
    .await;
    let got = parse_matrix(
        &serde_json::from_str(&out).unwrap_or_else(|e| panic!("promtool output ({e}): {out}")),
        "values",
    );
    assert_eq!(got.len(), SOURCES.len(), "{out}");
    for src in SOURCES {
        let native = fx.native(src, "cpu.load", start - 60, end, "1m").await;
        let pts = &got[&labels(&[("source", src), ("tally_metric", "cpu.load")])];
        assert_eq!(pts.len(), native.len(), "{src}: {pts:?} vs {native:?}");
        for (t, v) in pts {
            let n = native[&(*t as i64 - 60)]["avg"].as_f64().expect("avg");
            assert!(close(*v, n), "{src} at {t}: promtool {v}, native {n}");
            let m = window(fx.series(src, "cpu.load"), "avg_over_time", *t as i64, 60);
            assert_eq!(m, Some(*v));
        }
    }

    // Instant: the default (PromQL text) output, one line per series.
    let t = fx.t0 + 6 * 60;
    let out = promtool(&[
        s("query"),
        s("instant"),
        format!("--time={t}"),
        server.clone(),
        s("sum by (source) (increase(requests[5m]))"),
    ])
    .await;
    let mut lines = 0;
    for src in SOURCES {
        let want = window(fx.series(src, "requests"), "increase", t, 300).expect("data");
        let line = out
            .lines()
            .find(|l| l.contains(&format!("source=\"{src}\"")))
            .unwrap_or_else(|| panic!("no {src} in {out}"));
        // `{source="web-1"} => 42 @[1700000000]`
        let v: f64 = line
            .split("=>")
            .nth(1)
            .and_then(|r| r.split('@').next())
            .map(str::trim)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("cannot read {line:?}"));
        assert_eq!(v, want, "{line}");
        lines += 1;
    }
    assert_eq!(lines, SOURCES.len());

    // Series and label values.
    let out = promtool(&[
        s("query"),
        s("series"),
        s("--match=temp"),
        format!("--start={}", fx.t0 - 600),
        format!("--end={}", now_ms() / 1000),
        server.clone(),
    ])
    .await;
    for src in SOURCES {
        assert!(
            out.lines().any(|l| l.contains("__name__=\"temp\"")
                && l.contains(&format!("source=\"{src}\""))
                && l.contains("tally_metric=\"temp\"")),
            "{src} missing from promtool's series: {out}"
        );
    }
    assert_eq!(
        out.lines().filter(|l| !l.trim().is_empty()).count(),
        SOURCES.len(),
        "{out}"
    );
    let out = promtool(&[s("query"), s("labels"), server.clone(), s("source")]).await;
    let listed: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(listed, SOURCES, "{out}");
    let out = promtool(&[s("query"), s("labels"), server, s("__name__")]).await;
    let listed: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        listed,
        ["bytes_out", "cpu_load", "requests", "temp"],
        "{out}"
    );
}

// ---------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_on_the_embedded_store() {
    let fx = Fixture::start(DaemonOpts::new().flush_interval("1s")).await;
    check_range_functions(&fx).await;
    check_aggregations(&fx).await;
    check_rollups(&fx).await;
    check_tiers(&fx).await;
    check_discovery(&fx).await;
    check_refusals(&fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_reads_what_the_native_api_reads() {
    let fx = Fixture::start(DaemonOpts::new().flush_interval("1s")).await;
    check_promtool(&fx).await;
}

/// The same core checks with `--store mongodb`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_on_the_mongodb_store() {
    let target = mongo_target().await;
    let opts = DaemonOpts::new()
        .arg("--store")
        .arg("mongodb")
        .arg("--mongodb-uri")
        .arg(&target.uri)
        .env("TALLYD_MONGODB_DATABASE", &target.database)
        .env("TALLYD_WRITER_ID", "prom-e2e")
        .flush_interval("1s");
    let fx = Fixture::start(opts).await;
    check_range_functions(&fx).await;
    check_rollups(&fx).await;
    check_discovery(&fx).await;
    drop(fx);
    target.cleanup().await;
}
