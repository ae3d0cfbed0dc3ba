//! The Prometheus-compatible API (`/prometheus/api/v1/…`) of the real
//! `tallyd` binary over loopback, on the embedded store and on MongoDB
//! (the stand-in, or `MONGODB_URI`).
//!
//! Known samples (gauges, delta and cumulative counters, several sources)
//! are pushed into past minutes; after a flush, every supported function
//! and aggregation is checked against values this module computes from what
//! it pushed, and against the native `/api/v1/range`. The rollup path must
//! equal the fan-out path, hour slots must equal minute slots, discovery
//! must list exactly what was pushed, unsupported PromQL must be refused in
//! Prometheus' error format naming the construct, and `promtool` (Debian's
//! `prometheus` package, installed by `scripts/setup-test-deps`) must read
//! the same values through its own client.
//!
//! Values are small integers and binary fractions, so sums are exact in any
//! order. Every wait is bounded.
//!
//! Here: what is pushed and what every query must answer. The daemon and
//! its API are in `fixture`; the checks in `queries` (functions,
//! aggregations, rollups, tiers), `discovery`, `refusals` and `promtool`.

mod discovery;
mod fixture;
mod labelled;
mod promtool;
mod queries;
mod refusals;
mod staleness;

use std::future::Future;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::mongo::mongo_target;

use crate::tallyd;
use discovery::check_discovery;
use fixture::Fixture;
use promtool::check_promtool;
use queries::{check_aggregations, check_range_functions, check_rollups, check_tiers};
use refusals::check_refusals;

const RPC_TIMEOUT: Duration = Duration::from_secs(20);
const MINUTE_MS: i64 = 60_000;
const HOUR_S: i64 = 3_600;

async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(RPC_TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {RPC_TIMEOUT:?}"),
    }
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
            labels: Vec::new(),
            metric: s.metric.into(),
            kind: match s.kind {
                Kind::Gauge => pb::SampleKind::Gauge,
                Kind::Delta => pb::SampleKind::DeltaCounter,
                Kind::Cumulative => pb::SampleKind::CumulativeCounter,
            } as i32,
            timestamps_ms: s.sent.iter().map(|x| x.0).collect(),
            values: s.sent.iter().map(|x| x.1).collect(),
            start_times_ms: Vec::new(),
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
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_on_the_embedded_store() {
    let fx = Fixture::start(tallyd().flush_interval("1s")).await;
    check_range_functions(&fx).await;
    check_aggregations(&fx).await;
    check_rollups(&fx).await;
    check_tiers(&fx).await;
    check_discovery(&fx).await;
    check_refusals(&fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_reads_what_the_native_api_reads() {
    let fx = Fixture::start(tallyd().flush_interval("1s")).await;
    check_promtool(&fx).await;
}

/// The same core checks with `--store mongodb`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promql_on_the_mongodb_store() {
    let target = mongo_target().await;
    let opts = tallyd()
        .mongodb(&target.uri, &target.database)
        .env("TALLYD_WRITER_ID", "prom-e2e")
        .flush_interval("1s");
    let fx = Fixture::start(opts).await;
    check_range_functions(&fx).await;
    check_rollups(&fx).await;
    check_discovery(&fx).await;
    drop(fx);
    target.cleanup().await;
}
