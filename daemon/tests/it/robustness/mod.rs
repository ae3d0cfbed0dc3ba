//! No single request can crash or starve the daemon, and the audit's
//! findings stay fixed, through the real binary:
//!
//! * `promql`: queries over the length, depth and node limits are 400
//!   `bad_data` naming the setting (before the parser, which would
//!   otherwise overflow the stack), and the daemon answers the next query.
//! * `patterns`: a glob of ten thousand stars answers at once; patterns
//!   over the length or compiled-size limits are refused by name.
//! * `connections`: a thousand idle connections, a slow reader and a
//!   trickling client do not keep a normal client waiting; the connection
//!   cap, the header deadline and the size limits answer as documented.
//! * `backfill`: an agent 150 minutes behind, with a three-hour lateness
//!   window, keeps every cumulative-counter increase through SIGKILLs and
//!   clean restarts (idleness is by arrival, not by sample time).
//! * `findings`: a late sample lowers `first_seen` (on both stores, across
//!   a restart), finite input never sums to infinity, and `/readyz` says
//!   503 while the final flush drains.
//! * `silent`: 1,100 silent HTTP bodies and 20,000 silent gRPC connections
//!   (plain and TLS) under a lowered open-file limit: health, a push and a
//!   read still answer, and every silent connection is closed and counted.
//! * `protocol_findings`: remote-write 2.0 is 415 with nothing written;
//!   `tally_metric` is reserved; `step=auto` counts its buckets exactly;
//!   label values, OTLP 413 and remote-write kinds answer in their
//!   protocols' terms.
//! * `grpc_edges`: reflection `v1alpha` from the stock Python client,
//!   `RESOURCE_EXHAUSTED` for an oversized message, `INVALID_ARGUMENT`
//!   naming the field for invalid UTF-8, and the 400s of `agg=rate` on a
//!   gauge and of `limit` above `query.max_page`.

mod backfill;
mod connections;
mod findings;
mod grpc_edges;
mod patterns;
mod promql;
mod protocol_findings;
mod read_memory;
mod silent;

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, http_client, within};
use tally_testkit::Daemon;

/// A generous bound on requests that must not be slow: far above their
/// usual milliseconds, far below the seconds the audit measured.
const PROMPT: Duration = Duration::from_secs(2);

/// Pushes `sources`, returning the daemon's answer whatever it accepted.
async fn push(d: &Daemon, sources: Vec<pb::SourceBatch>) -> pb::PushResponse {
    let mut ingest = d.ingest_client().await;
    within("Push", ingest.push(pb::PushRequest { sources }))
        .await
        .unwrap_or_else(|s| panic!("Push: {s:?}"))
        .into_inner()
}

/// One source's batch of one series.
fn batch(source: &str, series: pb::SeriesSamples) -> pb::SourceBatch {
    pb::SourceBatch {
        source: source.to_string(),
        series: vec![series],
        groups: Vec::new(),
    }
}

/// A Prometheus API GET: (status, JSON body).
async fn prom(d: &Daemon, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    get_json(d, &format!("/prometheus/api/v1/{path}"), params).await
}

/// A Prometheus API form POST (for queries too long for a URL): (status,
/// JSON body).
async fn prom_post(d: &Daemon, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    let url = format!("{}/prometheus/api/v1/{path}", d.http_url());
    let resp = within(
        "POST",
        http_client()
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send(),
    )
    .await
    .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status().as_u16();
    let text = within("POST body", resp.text()).await.unwrap_or_default();
    let json = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("POST {url} answered {status}, not JSON ({e})"));
    (status, json)
}

/// Asserts a Prometheus `bad_data` answer whose message names `setting`.
fn assert_bad_data(status: u16, body: &serde_json::Value, setting: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["status"], "error", "{body}");
    assert_eq!(body["errorType"], "bad_data", "{body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains(setting),
        "the error should name {setting}: {msg}"
    );
}
