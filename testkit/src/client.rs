//! Small clients for tests that drive a running `tallyd`: every call
//! bounded in time, pushes over gRPC, GETs over HTTP. Scrapes of `/metrics`
//! are in [`crate::metrics`], waits for a state in [`crate::settle`].

use std::future::Future;
use std::time::Duration;

use tally_proto::v1 as pb;
use tonic::transport::Channel;

use crate::daemon::Daemon;

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

/// The sum of the points of `source`'s `metric` (its first series) from
/// `since_s` seconds ago, hourly, through the range API; 0 when it has none.
pub async fn range_sum(d: &Daemon, source: &str, metric: &str, since_s: i64) -> f64 {
    let from = (now_ms() / 1000 - since_s).to_string();
    let params = [
        ("source", source),
        ("metric", metric),
        ("from", from.as_str()),
        ("step", "1h"),
    ];
    let body = get_ok(d, "/api/v1/range", &params).await;
    body["series"][0]["points"]
        .as_array()
        .map_or(0.0, |p| p.iter().filter_map(|p| p["sum"].as_f64()).sum())
}

/// A push of `series`, all of `source`.
pub fn push_of(source: &str, series: Vec<pb::SeriesSamples>) -> pb::PushRequest {
    pb::PushRequest {
        sources: vec![pb::SourceBatch {
            source: source.to_string(),
            series,
            groups: Vec::new(),
        }],
    }
}

/// One series' samples for a push.
pub fn series(metric: &str, kind: pb::SampleKind, samples: &[(i64, f64)]) -> pb::SeriesSamples {
    pb::SeriesSamples {
        labels: Vec::new(),
        metric: metric.to_string(),
        kind: kind as i32,
        timestamps_ms: samples.iter().map(|s| s.0).collect(),
        values: samples.iter().map(|s| s.1).collect(),
        start_times_ms: Vec::new(),
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

/// GET `url` with query `params` (none: the URL as given): (status, body).
pub async fn get_text(url: &str, params: &[(&str, &str)]) -> (u16, String) {
    let resp = within(
        &format!("GET {url}"),
        http_client().get(url).query(params).send(),
    )
    .await
    .unwrap_or_else(|e| panic!("GET {url} {params:?}: {e}"));
    let status = resp.status().as_u16();
    let body = within(&format!("body of GET {url}"), resp.text())
        .await
        .unwrap_or_else(|e| panic!("reading GET {url}: {e}"));
    (status, body)
}

/// GET `path` (with its query string, if any) of the daemon: (status, body).
pub async fn http_get(d: &Daemon, path: &str) -> (u16, String) {
    get_text(&format!("{}{path}", d.http_url()), &[]).await
}

/// GET `path` (e.g. `/api/v1/range`) with query `params`: (status, JSON
/// body). Panics when the body is not JSON.
pub async fn get_json(d: &Daemon, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let url = format!("{}{path}", d.http_url());
    let (status, text) = get_text(&url, params).await;
    let body = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("GET {url} {params:?} answered {status}, not JSON ({e}): {text}")
    });
    (status, body)
}

/// GET expecting 200; returns the body.
pub async fn get_ok(d: &Daemon, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
    let (status, body) = get_json(d, path, params).await;
    assert_eq!(status, 200, "GET {path} {params:?}: {body}");
    body
}
