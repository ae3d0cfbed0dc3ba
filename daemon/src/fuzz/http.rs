//! The HTTP read APIs in process: random query strings (globs, times,
//! steps, limits, PromQL) against every native and Prometheus-compatible
//! endpoint of the real router (the dashboard's fleet page and small
//! charts too), over a real embedded store and aggregator holding a few
//! series. Bad input must be a 4xx with a reason; a 5xx is a
//! bug (503 is allowed where a limit of the house is full).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use tower::ServiceExt as _;

use super::soup;
use crate::aggregator::{Aggregator, AggregatorConfig, SeriesBatch};
use crate::flush::{FlushConfig, Pipeline};
use crate::ingest::IngestConfig;
use crate::model::SampleKind;
use crate::query::{QueryConfig, QueryEngine};
use crate::rollup::{RollupConfig, Rollups};
use crate::store::embedded::EmbeddedStore;
use crate::store::Store;
use crate::watch::{WatchConfig, WatchHub};

const PATHS: &[&str] = &[
    "/api/v1/range",
    "/api/v1/latest",
    "/api/v1/series",
    "/api/v1/sources",
    "/api/v1/metrics",
    "/api/v1/groups",
    "/api/v1/aggregate",
    "/api/v1/fleet",
    "/api/v1/charts",
    "/prometheus/api/v1/query",
    "/prometheus/api/v1/query_range",
    "/prometheus/api/v1/series",
    "/prometheus/api/v1/labels",
    "/prometheus/api/v1/label/source/values",
    "/prometheus/api/v1/label/__name__/values",
    "/prometheus/api/v1/metadata",
    "/healthz",
    "/readyz",
];

const KEYS: &[&str] = &[
    "source",
    "metric",
    "from",
    "to",
    "step",
    "agg",
    "group",
    "fan_out",
    "limit",
    "after",
    "kind",
    "seen_since",
    "max_points",
    "window",
    "series_per_metric",
    "points",
    "query",
    "start",
    "end",
    "time",
    "match[]",
    "timeout",
    "sort",
    "order",
    "stale_only",
    "stale_after",
    "offset",
    "bogus",
];

const VALUES: &[&str] = &[
    "*",
    "?",
    "db-*",
    "db-1",
    "op_counter",
    "m0",
    "",
    "now",
    "now-1h",
    "now-30d",
    "0",
    "-1",
    "9223372036854775807",
    "1e308",
    "NaN",
    "1m",
    "90s",
    "auto",
    "7d",
    "0s",
    "1000000000",
    "2026-11-23T00:00:00Z",
    "avg,rate",
    "rate",
    "count",
    "all",
    "true",
    "gauge",
    "%",
    "\u{0}",
    "é",
    ",",
    ",,",
    "[",
    "web-0*,cdn*",
];

const PROMQL: &[&str] = &[
    "sum(",
    "rate(",
    "avg_over_time(",
    "max_over_time(",
    "count_over_time(",
    "increase(",
    "topk(3,",
    "bottomk(",
    ")",
    "[",
    "]",
    "[5m]",
    "[1h:1m]",
    "{",
    "}",
    "source=\"db-1\"",
    "source=~\"db-.*\"",
    "source!~\"(a+)+$\"",
    "__name__=\"m0\"",
    "m0",
    "op_counter",
    "by (source)",
    "without (source)",
    " + ",
    " - ",
    " * ",
    " / ",
    " % ",
    " ^ ",
    " == ",
    " > bool ",
    " and ",
    " or ",
    " unless ",
    "1",
    "1e308",
    "-",
    "(",
    ",",
    "@ 0",
    " offset 5m",
    "on(source)",
    "ignoring(source)",
    "\"",
    "'",
    "\\",
    " ",
];

fn param() -> impl Strategy<Value = (String, String)> {
    let key = proptest::sample::select(KEYS).prop_map(str::to_string);
    let value = prop_oneof![
        4 => proptest::sample::select(VALUES).prop_map(str::to_string),
        3 => soup(PROMQL, 40),
        1 => soup(&["*", "?", "a", "-", "[", "!"], 60),
    ];
    (key, value)
}

/// Well-formed PromQL nested or chained `n` deep: valid syntax reaches the
/// planner and the evaluator, where recursion lives.
fn deep() -> impl Strategy<Value = String> {
    const SHAPES: &[(&str, &str, &str)] = &[
        ("", "1+", "1"),
        ("sum(", "", ")"),
        ("(", "", ")"),
        ("-", "", "1"),
        ("abs(", "", ")"),
        ("", "m0 * ", "m0"),
        ("rate(", "", "[5m])"),
    ];
    (proptest::sample::select(SHAPES), 1usize..3_000).prop_map(|((open, chain, close), n)| {
        if chain.is_empty() {
            let inner = if close == ")" { "m0" } else { "" };
            format!(
                "{}{inner}{}",
                open.repeat(n),
                close.repeat(if open == "-" { 1 } else { n })
            )
        } else {
            format!("{}{close}", chain.repeat(n))
        }
    })
}

fn encode(params: &[(String, String)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    q.finish()
}

fn request() -> impl Strategy<Value = (bool, &'static str, String)> {
    let any_endpoint = (
        any::<bool>(),
        proptest::sample::select(PATHS),
        proptest::collection::vec(param(), 0..6).prop_map(|p| encode(&p)),
    );
    // Half the inputs are PromQL, where nesting and long chains live.
    let text = prop_oneof![3 => soup(PROMQL, 60), 1 => deep()];
    let promql = (
        any::<bool>(),
        proptest::sample::select(
            &["/prometheus/api/v1/query", "/prometheus/api/v1/query_range"][..],
        ),
        (text, proptest::collection::vec(param(), 0..3)).prop_map(|(q, mut p)| {
            p.insert(0, ("query".to_string(), q));
            encode(&p)
        }),
    );
    prop_oneof![any_endpoint, promql]
}

/// A router over an embedded store in `dir`, with a few series in memory.
pub(crate) fn router(dir: &std::path::Path) -> axum::Router {
    super::super::http::router(state(dir), &crate::http::HttpConfig::default())
}

/// The HTTP server's state over an embedded store in `dir`, with a few
/// series in memory.
pub(crate) fn state(dir: &std::path::Path) -> crate::http::HttpState {
    let store: Arc<dyn Store> = match EmbeddedStore::open(dir) {
        Ok(s) => Arc::new(s),
        Err(e) => panic!("store: {e}"),
    };
    let agg = Arc::new(Aggregator::new(
        &AggregatorConfig { shards: 2 },
        &IngestConfig::default(),
    ));
    let now_ms = chrono::Utc::now().timestamp_millis();
    let ts = [now_ms - 120_000, now_ms - 60_000, now_ms];
    for (source, metric, kind) in [
        ("db-1", "m0", SampleKind::Gauge),
        ("db-2", "m0", SampleKind::Gauge),
        ("web-01", "op_counter", SampleKind::CumulativeCounter),
    ] {
        agg.ingest(
            &[SeriesBatch {
                labels: "",
                source,
                metric,
                kind: Some(kind),
                timestamps_ms: &ts,
                values: &[1.0, 5.0, 9.0],
                start_times_ms: &[],
                source_index: 0,
                series_index: 0,
            }],
            now_ms,
        );
    }
    let rollups = match Rollups::new(RollupConfig::default()) {
        Ok(r) => Arc::new(r),
        Err(e) => panic!("rollups: {e}"),
    };
    let pipeline = Arc::new(Pipeline::new(
        agg.clone(),
        store.clone(),
        FlushConfig::default(),
        0,
    ));
    let ingest = Arc::new(crate::ingest::Ingestor::new(
        agg.clone(),
        rollups.clone(),
        Arc::new(crate::ingest::IngestGate::default()),
    ));
    let fleet = Arc::new(crate::fleet::Fleet::new(agg.clone(), Default::default()));
    let engine = Arc::new(QueryEngine::new(
        store.clone(),
        agg,
        rollups,
        pipeline.inflight().clone(),
        QueryConfig::default(),
        14 * 86_400,
    ));
    let watch = Arc::new(WatchHub::new(engine.clone(), WatchConfig::default()));
    let state = super::super::http::HttpState {
        query: engine,
        pipeline,
        watch,
        store,
        metrics: None,
        draining: tokio_util::sync::CancellationToken::new(),
        auth: match crate::auth::Authenticator::load(&crate::auth::AuthConfig::default()) {
            Ok(a) => a,
            Err(e) => panic!("auth off: {e}"),
        },
        push: std::sync::Arc::new(super::super::http::PushShared {
            ingest,
            otlp: Default::default(),
            remote_write: Default::default(),
            influx: Default::default(),
        }),
        fleet,
        ui: Default::default(),
        prometheus: Default::default(),
    };
    state
}

#[test]
fn fuzz_http_query_parameters() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("temp dir: {e}"),
    };
    let app = router(dir.path());
    let mut runner = TestRunner::new(super::runner());
    let result = runner.run(&request(), |(post, path, query)| {
        let req = if post && path.starts_with("/prometheus") {
            Request::builder()
                .method(Method::POST)
                .uri(path)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Body::from(query.clone()))
        } else {
            Request::builder()
                .uri(format!("{path}?{query}"))
                .body(Body::empty())
        };
        // Past the `http` crate's URI bound there is no request to send: a
        // server refuses it before routing.
        let Ok(req) = req else { return Ok(()) };
        let status = rt
            .block_on(app.clone().oneshot(req))
            .map_err(|e| TestCaseError::fail(format!("router: {e}")))?
            .status();
        prop_assert!(
            !status.is_server_error() || status == StatusCode::SERVICE_UNAVAILABLE,
            "{status} for {path}?{query}"
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
