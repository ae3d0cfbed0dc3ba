//! The OpenTelemetry Python SDK (`tests/otel-agent/agent.py`, in a venv
//! the tests build) exporting a Counter, an UpDownCounter, a Histogram and
//! an observable Gauge over OTLP/gRPC and OTLP/HTTP, with cumulative and
//! delta temporality. Every minute slot of every resulting series is read
//! back and compared with a reference computed from the points the SDK
//! reports having exported.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tally_testkit::bins::workspace_root;
use tally_testkit::client::{get_ok, now_ms};
use tally_testkit::process;
use tally_testkit::settle::wait_flushed;
use tally_testkit::venv::PythonEnv;
use tally_testkit::Daemon;

use super::reference::{check_metric, Key, Kind, Reference};
use crate::tallyd;

const AGENT: PythonEnv = PythonEnv {
    name: "otel-agent",
    requirements: "tests/otel-agent/requirements.txt",
    imports: "opentelemetry.sdk.metrics, opentelemetry.exporter.otlp.proto.grpc.metric_exporter, opentelemetry.exporter.otlp.proto.http.metric_exporter",
};

const ROUNDS: &str = "4";

/// Runs the agent to completion and returns what it says it exported.
async fn run_agent(endpoint: String, transport: &str, temporality: &str, host: &str) -> Value {
    let args: Vec<String> = [transport, temporality, host, ROUNDS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokio::task::spawn_blocking(move || {
        let python = AGENT
            .python()
            .unwrap_or_else(|e| panic!("the OpenTelemetry SDK's venv: {e}"));
        let script = workspace_root().join("tests/otel-agent/agent.py");
        let mut all = vec![script.to_str().unwrap(), endpoint.as_str()];
        all.extend(args.iter().map(String::as_str));
        let run = process::run(&python, &all, Duration::from_secs(120));
        assert!(run.status.success(), "agent.py {all:?}: {}", run.describe());
        serde_json::from_str::<Value>(&run.stdout)
            .unwrap_or_else(|e| panic!("agent output: {e}: {}", run.describe()))
    })
    .await
    .unwrap()
}

/// A label name as Tally makes it from an attribute key.
fn label(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A point's labels: its attributes, and `job` from the agent's resource
/// (`service.name` is "otel-agent"), as `otlp.job_label` makes it.
fn labels(point: &Value) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = point["attributes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                label(k),
                v.as_str().map_or_else(|| v.to_string(), String::from),
            )
        })
        .collect();
    labels.insert("job".into(), "otel-agent".into());
    labels
}

/// The reference of everything the agent exported.
fn reference(exported: &Value) -> Reference {
    let mut r = Reference::default();
    for p in exported["points"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let ts = (p["time_unix_nano"].as_u64().unwrap() / 1_000_000) as i64;
        let counter = if p["delta"].as_bool() == Some(true) {
            Kind::Delta
        } else {
            Kind::Cumulative
        };
        match p["kind"].as_str().unwrap() {
            "gauge" => r.sample(
                (name.into(), labels(p)),
                Kind::Gauge,
                ts,
                p["value"].as_f64().unwrap(),
            ),
            "sum" => {
                let kind = if p["monotonic"].as_bool().unwrap() {
                    counter
                } else {
                    Kind::Gauge
                };
                r.sample(
                    (name.into(), labels(p)),
                    kind,
                    ts,
                    p["value"].as_f64().unwrap(),
                );
            }
            "histogram" => histogram(&mut r, name, p, counter, ts),
            other => panic!("unexpected kind {other}"),
        }
    }
    r.finish()
}

fn histogram(r: &mut Reference, name: &str, p: &Value, kind: Kind, ts: i64) {
    let l = labels(p);
    let key = |suffix: &str, l: BTreeMap<String, String>| -> Key { (format!("{name}{suffix}"), l) };
    r.sample(
        key("_count", l.clone()),
        kind,
        ts,
        p["count"].as_f64().unwrap(),
    );
    r.sample(key("_sum", l.clone()), kind, ts, p["sum"].as_f64().unwrap());
    let bounds = p["explicit_bounds"].as_array().unwrap();
    let mut cumulative = 0.0;
    for (i, n) in p["bucket_counts"].as_array().unwrap().iter().enumerate() {
        cumulative += n.as_f64().unwrap();
        let le = bounds
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| b.as_f64().unwrap().to_string());
        let mut l = l.clone();
        l.insert("le".into(), le);
        r.sample(key("_bucket", l), kind, ts, cumulative);
    }
}

/// Every metric of `r`, read back from `host` and compared.
async fn check_all(d: &Daemon, host: &str, r: &Reference, from: i64) {
    let metrics: std::collections::BTreeSet<&str> =
        r.series.keys().map(|(m, _)| m.as_str()).collect();
    let expected = [
        "db.client.connections.usage",
        "http.server.duration_bucket",
        "http.server.duration_count",
        "http.server.duration_sum",
        "http.server.requests",
        "system.temperature",
    ];
    assert_eq!(metrics.iter().copied().collect::<Vec<_>>(), expected);
    let from = from.to_string();
    for m in metrics {
        let body = get_ok(
            d,
            "/api/v1/range",
            &[
                ("source", host),
                ("metric", m),
                ("from", &from),
                ("step", "1m"),
            ],
        )
        .await;
        check_metric(r, m, &body);
    }
}

/// Over gRPC the daemon keeps its default source attributes, so the source
/// is the `service.instance.id` the SDK generates; over HTTP it is
/// configured to take `host.name`.
async fn scenario(transport: &str, temporality: &str) {
    let mut opts = tallyd().flush_interval("200ms");
    if transport == "http" {
        opts = opts.env("TALLYD_OTLP_SOURCE_ATTRIBUTES", "[\"host.name\"]");
    }
    let mut d = Daemon::start_async(opts).await;
    let host = format!("otel-{transport}-{temporality}");
    let endpoint = match transport {
        "grpc" => d.grpc_url().trim_start_matches("http://").to_owned(),
        _ => format!("{}/v1/metrics", d.http_url()),
    };
    let from = now_ms() / 1000 - 120;
    let exported = run_agent(endpoint, transport, temporality, &host).await;
    let results = exported["results"].as_array().unwrap();
    assert!(
        !results.is_empty() && results.iter().all(|r| r.as_bool() == Some(true)),
        "every export must succeed: {results:?}"
    );
    let source = match transport {
        "grpc" => exported["resource"]["service.instance.id"]
            .as_str()
            .unwrap()
            .to_owned(),
        _ => host,
    };
    let r = reference(&exported);
    check_all(&d, &source, &r, from).await;
    // And from the store, after a restart.
    wait_flushed(&d, 1.0, Duration::from_secs(20)).await;
    d.restart();
    check_all(&d, &source, &r, from).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_over_grpc_cumulative() {
    scenario("grpc", "cumulative").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_over_grpc_delta() {
    scenario("grpc", "delta").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_over_http_cumulative() {
    scenario("http", "cumulative").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_over_http_delta() {
    scenario("http", "delta").await;
}
