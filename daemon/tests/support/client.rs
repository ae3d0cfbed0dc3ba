//! Small clients for tests that drive a running `tallyd`: bounded waits,
//! pushes over gRPC, JSON reads over HTTP and `/metrics` scrapes.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use tally_proto::v1 as pb;
use tonic::transport::Channel;

use super::daemon::Daemon;

/// Every network call of a test is bounded by this.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Awaits `fut`, panicking with `what` if it takes longer than [`CALL_TIMEOUT`].
pub async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL_TIMEOUT:?}"))
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One series' samples for a push.
pub fn series(metric: &str, kind: pb::SampleKind, samples: &[(i64, f64)]) -> pb::SeriesSamples {
    pb::SeriesSamples {
        metric: metric.to_string(),
        kind: kind as i32,
        timestamps_ms: samples.iter().map(|s| s.0).collect(),
        values: samples.iter().map(|s| s.1).collect(),
    }
}

/// Pushes and asserts every sample was accepted.
pub async fn push_ok(
    ingest: &mut pb::ingest_client::IngestClient<Channel>,
    sources: Vec<pb::SourceBatch>,
) {
    let want: usize = sources
        .iter()
        .flat_map(|s| &s.series)
        .map(|s| s.values.len())
        .sum();
    let resp = within("Push", ingest.push(pb::PushRequest { sources }))
        .await
        .unwrap_or_else(|s| panic!("Push: {s:?}"))
        .into_inner();
    assert_eq!(
        resp.accepted as usize, want,
        "every sample must be accepted: {resp:?}"
    );
}

/// Never through a proxy from the environment: the daemon is on loopback.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(CALL_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

/// GET `path` (e.g. `/api/v1/range`) with query `params`: (status, JSON body).
pub async fn get_json(d: &Daemon, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let url = format!("{}{path}", d.http_url());
    let resp = within(
        &format!("GET {path}"),
        http_client().get(&url).query(params).send(),
    )
    .await
    .unwrap_or_else(|e| panic!("GET {url} {params:?}: {e}"));
    let status = resp.status().as_u16();
    let text = within("response body", resp.text())
        .await
        .unwrap_or_else(|e| panic!("reading GET {url}: {e}"));
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("GET {url} {params:?}: not JSON ({e}): {text}"));
    (status, body)
}

/// GET expecting 200; returns the body.
pub async fn get_ok(d: &Daemon, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
    let (status, body) = get_json(d, path, params).await;
    assert_eq!(status, 200, "GET {path} {params:?}: {body}");
    body
}

/// The daemon's `/metrics` text; the scrape must answer 200.
pub async fn metrics_text(d: &Daemon) -> String {
    metrics_text_at(&d.http_url()).await
}

/// `/metrics` of the HTTP listener at `base` (`http://127.0.0.1:PORT`).
pub async fn metrics_text_at(base: &str) -> String {
    let url = format!("{base}/metrics");
    let resp = within("GET /metrics", http_client().get(&url).send())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let body = within("metrics body", resp.text())
        .await
        .unwrap_or_else(|e| panic!("reading {url}: {e}"));
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    body
}

/// Sum of the samples of metric `name` (exact name, any further labels)
/// whose labels include every `labels` pair; None if no line matches.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_part, value) = if let Some(r) = rest.strip_prefix('{') {
            match r.split_once('}') {
                Some(parts) => parts,
                None => continue,
            }
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue;
        };
        if !labels
            .iter()
            .all(|(k, v)| label_part.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// The sum of every sample of metric `name` (all label sets) in a scrape.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric(text, name, &[]).unwrap_or(0.0)
}

/// Waits until the daemon at `base` has applied a flush and holds nothing
/// unflushed, three scrapes in a row (catalog entries and rollups are
/// written by flushes).
pub async fn wait_settled(base: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut settled = 0;
    loop {
        let m = metrics_text_at(base).await;
        if metric_sum(&m, "tally_flushes_total") >= 1.0
            && metric_sum(&m, "tally_pending_slots") == 0.0
            && metric_sum(&m, "tally_flush_inflight_batches") == 0.0
        {
            settled += 1;
            if settled == 3 {
                return;
            }
        } else {
            settled = 0;
        }
        assert!(std::time::Instant::now() < deadline, "no flush:\n{m}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Retries `check` every 100 ms until it returns `Ok`, for reads that
/// become true within a flush or two (catalog, rollups). Panics with the
/// last `Err` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if std::time::Instant::now() >= deadline => {
                panic!("{what}: still not true after {timeout:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
