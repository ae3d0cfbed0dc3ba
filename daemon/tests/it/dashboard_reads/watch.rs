//! Watch over gRPC and Server-Sent Events, delivered within the bound.

use std::time::{Duration, Instant};

use serde_json::Value;
use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, push_ok, series, within};
use tally_testkit::Daemon;

use super::WATCH_BOUND;

/// A live sample reaches a gRPC watcher within [`WATCH_BOUND`], several
/// times over; returns the delays.
pub(super) async fn check_watch_grpc(d: &Daemon, source: &str) -> Vec<Duration> {
    let mut query = d.query_client().await;
    let mut stream = within(
        "Watch",
        query.watch(pb::WatchRequest {
            labels: Vec::new(),
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
pub(super) async fn check_watch_sse(d: &Daemon) {
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
