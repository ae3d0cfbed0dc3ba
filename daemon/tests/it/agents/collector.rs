//! The OpenTelemetry Collector (core v0.165.0, contrib v0.165.1, built from
//! the Go module proxy by `tests/otelcol/install`) with its `hostmetrics`
//! receiver (cpu, memory, load, filesystem, network scrapers, every
//! second), the `resource` processor naming the host, and two exporters in
//! the same pipeline: `otlp` to the daemon's gRPC port (once more `otlphttp`
//! to its HTTP port) and `file`, whose output is what the Collector sent.
//! `system.cpu.time` and friends arrive with their attributes, every minute
//! slot equals what the file says was sent, and the Collector's own log
//! shows no export error.
//!
//! Skips, saying why, when Go is missing (`TALLY_OTELCOL=off` skips too).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use tally_testkit::client::{get_ok, now_ms};
use tally_testkit::gotool::{self, Availability};
use tally_testkit::settle::eventually;
use tally_testkit::Daemon;

use super::reference::{check_metric, Key, Kind, Reference};
use crate::tallyd;

const HOST: &str = "collector-test";

/// The Collector's binary, built on first use; None (and why) to skip.
fn collector() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<Availability, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| match std::env::var("TALLY_OTELCOL").as_deref() {
        Ok("off" | "0") => Ok(Availability::Skipped("TALLY_OTELCOL=off".into())),
        _ => gotool::install("tests/otelcol/install", "otelcol-tally"),
    });
    match found.clone() {
        Ok(Availability::Ready(bin)) => Ok(bin),
        Ok(Availability::Skipped(why)) => Err(why),
        Err(e) => panic!("building the OpenTelemetry Collector: {e}"),
    }
}

/// The pipeline: hostmetrics → resource → the exporter `name` (its YAML
/// block `exporter`) and the file exporter writing to `out`.
fn config(name: &str, exporter: &str, out: &Path) -> String {
    format!(
        "receivers:\n  hostmetrics:\n    collection_interval: 1s\n    scrapers:\n      cpu: {{}}\n      memory: {{}}\n      load: {{}}\n      filesystem: {{}}\n      network: {{}}\n\
         processors:\n  resource:\n    attributes:\n      - key: host.name\n        value: {HOST}\n        action: upsert\n\
         exporters:\n{exporter}\n  file:\n    path: {out}\n\
         service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    metrics:\n      receivers: [hostmetrics]\n      processors: [resource]\n      exporters: [{name}, file]\n",
        out = out.display()
    )
}

/// SIGTERM (the Collector drains its exporters), then a bounded wait.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A label name as Tally makes it from an attribute key.
fn label(key: &str) -> String {
    key.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn point_value(p: &Value) -> f64 {
    match (&p["asDouble"], &p["asInt"]) {
        (Value::Number(n), _) => n.as_f64().unwrap(),
        (_, Value::String(s)) => s.parse::<i64>().unwrap() as f64,
        (_, Value::Number(n)) => n.as_f64().unwrap(),
        other => panic!("a point without a value: {other:?} in {p}"),
    }
}

/// What Tally must hold of everything the file exporter wrote.
fn reference(file: &str) -> Reference {
    let mut r = Reference::default();
    for line in file.lines().filter(|l| !l.trim().is_empty()) {
        let export: Value = serde_json::from_str(line).unwrap();
        for rm in export["resourceMetrics"].as_array().unwrap() {
            for m in rm["scopeMetrics"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["metrics"].as_array().unwrap())
            {
                metric_points(&mut r, m);
            }
        }
    }
    r.finish()
}

fn metric_points(r: &mut Reference, m: &Value) {
    let name = m["name"].as_str().unwrap();
    let (data, kind) = if m["gauge"].is_object() {
        (&m["gauge"], Kind::Gauge)
    } else if m["sum"].is_object() {
        let sum = &m["sum"];
        let monotonic = sum["isMonotonic"].as_bool() == Some(true);
        // Temporality 1 is delta, 2 cumulative.
        let kind = match (monotonic, sum["aggregationTemporality"].as_i64()) {
            (false, _) => Kind::Gauge,
            (true, Some(1)) => Kind::Delta,
            (true, _) => Kind::Cumulative,
        };
        (sum, kind)
    } else {
        panic!("hostmetrics sent an unexpected type: {m}");
    };
    for p in data["dataPoints"].as_array().unwrap() {
        let labels: BTreeMap<String, String> = p["attributes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|kv| {
                        let v = &kv["value"];
                        let text = v["stringValue"]
                            .as_str()
                            .map_or_else(|| v.to_string(), str::to_owned);
                        (label(kv["key"].as_str().unwrap()), text)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let ts: i64 = p["timeUnixNano"].as_str().unwrap().parse::<i64>().unwrap() / 1_000_000;
        let key: Key = (name.to_owned(), labels);
        r.sample(key, kind, ts, point_value(p));
    }
}

async fn scenario(transport: &str) {
    let bin = match collector() {
        Ok(bin) => bin,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_OTLP_SOURCE_ATTRIBUTES", "[\"host.name\"]"),
    )
    .await;
    let (name, exporter) = match transport {
        "grpc" => (
            "otlp/tally",
            format!(
                "  otlp/tally:\n    endpoint: {}\n    tls:\n      insecure: true",
                d.grpc_url().trim_start_matches("http://")
            ),
        ),
        _ => (
            "otlphttp/tally",
            format!("  otlphttp/tally:\n    endpoint: {}", d.http_url()),
        ),
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sent.json");
    let conf = dir.path().join("collector.yaml");
    std::fs::write(&conf, config(name, &exporter, &out)).unwrap();
    let log = dir.path().join("collector.log");
    let sink = std::fs::File::create(&log).unwrap();
    let from = now_ms() / 60_000 * 60 - 60;
    let mut child = Command::new(&bin)
        .arg(format!("--config={}", conf.display()))
        .stdin(Stdio::null())
        .stdout(sink.try_clone().unwrap())
        .stderr(sink)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    tokio::time::sleep(Duration::from_secs(12)).await;
    tokio::task::block_in_place(|| stop(&mut child));
    let collector_log = std::fs::read_to_string(&log).unwrap_or_default();
    for bad in ["Exporting failed", "\terror\t", "\"error\""] {
        assert!(
            !collector_log.contains(bad),
            "the Collector's log shows {bad:?}:\n{collector_log}"
        );
    }
    let sent = std::fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the file exporter's output: {e}\n{collector_log}"));
    let r = reference(&sent);
    let metrics: BTreeSet<&str> = r.series.keys().map(|(m, _)| m.as_str()).collect();
    for want in [
        "system.cpu.time",
        "system.cpu.load_average.1m",
        "system.memory.usage",
        "system.filesystem.usage",
        "system.network.io",
    ] {
        assert!(
            metrics.contains(want),
            "{want} in {metrics:?}\n{collector_log}"
        );
    }
    check_attributes(&d).await;
    let from = from.to_string();
    for m in metrics {
        let body = get_ok(
            &d,
            "/api/v1/range",
            &[
                ("source", HOST),
                ("metric", m),
                ("from", &from),
                ("step", "1m"),
            ],
        )
        .await;
        check_metric(&r, m, &body);
    }
}

/// `system.cpu.time` per state as a counter; memory per state, filesystem
/// per device and mountpoint, network per device and direction.
async fn check_attributes(d: &Daemon) {
    for (metric, labels, kind) in [
        ("system.cpu.time", &["state"][..], "cumulative_counter"),
        ("system.memory.usage", &["state"][..], "gauge"),
        (
            "system.filesystem.usage",
            &["device", "mountpoint", "type", "state"][..],
            "gauge",
        ),
        (
            "system.network.io",
            &["device", "direction"][..],
            "cumulative_counter",
        ),
    ] {
        // Catalogued once a flush has recorded them.
        eventually(metric, Duration::from_secs(30), || async {
            let body = get_ok(d, "/api/v1/series", &[("source", HOST), ("metric", metric)]).await;
            match body["series"].as_array() {
                Some(s) if !s.is_empty() => Ok(()),
                _ => Err(body.to_string()),
            }
        })
        .await;
        let body = get_ok(d, "/api/v1/series", &[("source", HOST), ("metric", metric)]).await;
        let series = body["series"].as_array().unwrap();
        for s in series {
            for l in labels {
                assert!(s["labels"][l].is_string(), "{metric} without {l}: {s}");
            }
            assert_eq!(s["kind"], kind, "{s}");
        }
    }
    let idle = get_ok(
        d,
        "/api/v1/series",
        &[("source", HOST), ("metric", "system.cpu.time")],
    )
    .await;
    assert!(
        idle["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["labels"]["state"] == "idle"),
        "{idle}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_collector_hostmetrics_over_otlp_grpc() {
    scenario("grpc").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_collector_hostmetrics_over_otlp_http() {
    scenario("http").await;
}
