//! A real Prometheus (the Debian `prometheus` package the test setup
//! installs) scraping a real node exporter (`prometheus-node-exporter`)
//! every second and remote-writing to `tallyd`. Node exporter's series
//! arrive with their labels (`node_cpu_seconds_total{cpu,mode}`), and for
//! gauges the per-minute count, sum, min and max that Prometheus itself
//! answers (`count_over_time` and friends over each minute) equal Tally's
//! minute slots.
//!
//! Skips, saying why, when either program is missing (the test setup
//! installs both).

use std::time::{Duration, Instant};

use serde_json::Value;
use tally_testkit::client::{get_ok, http_client, now_ms};
use tally_testkit::prometheus::{programs, start_node_exporter, start_prometheus};
use tally_testkit::Daemon;

use crate::tallyd;

/// A Prometheus instant query's single value, if there is one.
async fn prom_value(prom: &str, query: &str, at_ms: i64) -> Option<f64> {
    let at = format!("{:.3}", at_ms as f64 / 1000.0);
    let body: Value = http_client()
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", query), ("time", at.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["status"], "success", "{query}: {body}");
    let result = body["data"]["result"].as_array().unwrap();
    assert!(result.len() <= 1, "{query}: {body}");
    result
        .first()
        .map(|r| r["value"][1].as_str().unwrap().parse().unwrap())
}

/// Prometheus' own count, sum, min and max of `selector` over the minute
/// starting at `minute` (Unix seconds): the range `[start, end]` ending a
/// millisecond before the next minute, as Prometheus 2 includes both ends.
async fn prom_minute(prom: &str, selector: &str, minute: i64) -> Option<[f64; 4]> {
    let end = (minute + 60) * 1000 - 1;
    let mut out = [0.0; 4];
    for (i, f) in ["count", "sum", "min", "max"].iter().enumerate() {
        out[i] = prom_value(prom, &format!("{f}_over_time({selector}[59999ms])"), end).await?;
    }
    Some(out)
}

/// Tally's count, sum, min and max per minute of the one series `labels`
/// selects.
async fn tally_minutes(
    d: &Daemon,
    source: &str,
    metric: &str,
    labels: &str,
    from: i64,
) -> Vec<(i64, [f64; 4])> {
    let from = from.to_string();
    let body = get_ok(
        d,
        "/api/v1/range",
        &[
            ("source", source),
            ("metric", metric),
            ("labels", labels),
            ("from", &from),
            ("step", "1m"),
        ],
    )
    .await;
    let series = body["series"].as_array().unwrap();
    assert_eq!(series.len(), 1, "{body}");
    series[0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["n"].as_u64().is_some_and(|n| n > 0))
        .map(|p| {
            let f = |k: &str| p[k].as_f64().unwrap();
            (
                p["t"].as_i64().unwrap(),
                [f("n"), f("sum"), f("min"), f("max")],
            )
        })
        .collect()
}

fn config(node: &str, tally_http: &str) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
         scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['{node}']\n\
         remote_write:\n  - url: {tally_http}/api/v1/write\n    queue_config:\n      batch_send_deadline: 500ms\n      min_backoff: 100ms\n      max_backoff: 1s\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_remote_writes_node_exporter_exactly() {
    let (prometheus, node_exporter) = match programs() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut node = start_node_exporter(&node_exporter, dir.path()).await;
    let prom = start_prometheus(
        "prometheus",
        &prometheus,
        dir.path(),
        |_| config(node.address(), &d.http_url()),
        &[],
    )
    .await;
    let from = now_ms() / 60_000 * 60 - 60;
    // About fifteen scrapes; then the exporter goes away, so nothing new
    // arrives while the two sides are compared.
    tokio::time::sleep(Duration::from_secs(15)).await;
    node.stop();
    let source = node.address().to_string();
    check_labels(&d, &source).await;
    for metric in [
        "node_load1",
        "node_memory_MemFree_bytes",
        "node_procs_running",
    ] {
        compare_gauge(&d, prom.url(), &source, metric, from).await;
    }
    drop(prom);
}

/// `node_cpu_seconds_total` arrives per cpu and mode, as a counter.
async fn check_labels(d: &Daemon, source: &str) {
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("source", source), ("metric", "node_cpu_seconds_total")],
    )
    .await;
    let series = body["series"].as_array().unwrap();
    assert!(!series.is_empty(), "{body}");
    for s in series {
        let l = &s["labels"];
        assert_eq!(l["job"], "node", "{s}");
        assert!(l["cpu"].is_string() && l["mode"].is_string(), "{s}");
        assert_eq!(s["kind"], "cumulative_counter", "{s}");
    }
    assert!(
        series.iter().any(|s| s["labels"]["mode"] == "idle"),
        "{body}"
    );
}

/// Count, min and max equal; sums equal but for the order of addition
/// (Prometheus compensates its float sums).
fn same(a: &[(i64, [f64; 4])], b: &[(i64, [f64; 4])]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ta, x), (tb, y))| {
            ta == tb
                && x[0] == y[0]
                && x[2] == y[2]
                && x[3] == y[3]
                && (x[1] - y[1]).abs() <= 1e-12 * x[1].abs().max(y[1].abs()).max(1.0)
        })
}

/// Waits (at most 30 s) until Tally's minutes of `metric` equal what
/// Prometheus answers for the same minutes, which they must once the
/// remote-write queue has drained.
async fn compare_gauge(d: &Daemon, prom: &str, source: &str, metric: &str, from: i64) {
    let selector = format!("{metric}{{job=\"node\"}}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tally = tally_minutes(d, source, metric, "job=\"node\"", from).await;
        let mut want = Vec::new();
        for minute in (from..=now_ms() / 1000).step_by(60) {
            if let Some(v) = prom_minute(prom, &selector, minute).await {
                want.push((minute, v));
            }
        }
        assert!(!want.is_empty(), "Prometheus has no {metric}");
        if same(&tally, &want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{metric}: Tally {tally:?}, Prometheus {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
