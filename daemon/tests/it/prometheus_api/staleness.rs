//! Staleness markers through the real remote-write surface: a series that
//! gets Prometheus' marker is gone from instant answers (a bare selector,
//! `topk`, `count`) from the marker's time, on both stores and after a
//! SIGKILL (the write-ahead log replays the marker); a sample after the
//! marker brings it back; range functions still see the samples before it.

use prost::Message as _;
use serde_json::Value;
use tally_proto::prometheus as rw;
use tally_testkit::client::{http_client, now_ms};
use tally_testkit::settle::wait_settled;
use tally_testkit::{Daemon, DaemonOpts};

use super::within;

const MARKER: u64 = 0x7ff0_0000_0000_0002;
const METRIC: &str = "node_filesystem_avail_bytes";

fn series(mount: &str, samples: &[(i64, f64)]) -> rw::TimeSeries {
    let label = |name: &str, value: &str| rw::Label {
        name: name.into(),
        value: value.into(),
    };
    rw::TimeSeries {
        labels: vec![
            label("__name__", METRIC),
            label("instance", "h1"),
            label("mountpoint", mount),
        ],
        samples: samples
            .iter()
            .map(|&(timestamp, value)| rw::Sample { value, timestamp })
            .collect(),
    }
}

async fn write(d: &Daemon, timeseries: Vec<rw::TimeSeries>) {
    let req = rw::WriteRequest {
        timeseries,
        metadata: vec![],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy compression");
    let resp = within(
        "remote write",
        http_client()
            .post(format!("{}/api/v1/write", d.http_url()))
            .header("Content-Type", "application/x-protobuf")
            .header("Content-Encoding", "snappy")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .body(body)
            .send(),
    )
    .await
    .expect("remote write");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "remote write: {status} {text}");
}

/// The mountpoints an instant query answers at `at_ms`, sorted.
async fn mounts(d: &Daemon, query: &str, at_ms: i64) -> Vec<String> {
    let at = format!("{:.3}", at_ms as f64 / 1000.0);
    let body: Value = within(
        query,
        http_client()
            .get(format!("{}/prometheus/api/v1/query", d.http_url()))
            .query(&[("query", query), ("time", at.as_str())])
            .send(),
    )
    .await
    .expect("query")
    .json()
    .await
    .expect("a JSON answer");
    assert_eq!(body["status"], "success", "{query}: {body}");
    let mut out: Vec<String> = body["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|r| r["metric"]["mountpoint"].as_str().unwrap_or("").to_owned())
        .collect();
    out.sort();
    out
}

/// The one value of an instant query at `at_ms`.
async fn value(d: &Daemon, query: &str, at_ms: i64) -> Option<f64> {
    let at = format!("{:.3}", at_ms as f64 / 1000.0);
    let body: Value = within(
        query,
        http_client()
            .get(format!("{}/prometheus/api/v1/query", d.http_url()))
            .query(&[("query", query), ("time", at.as_str())])
            .send(),
    )
    .await
    .expect("query")
    .json()
    .await
    .expect("a JSON answer");
    let result = body["data"]["result"].as_array().expect("a vector");
    result
        .first()
        .map(|r| r["value"][1].as_str().unwrap().parse().unwrap())
}

async fn check(opts: DaemonOpts) {
    let mut d = Daemon::start_async(opts).await;
    let now = now_ms();
    // Three file systems every second for 20 s; /b and /c unmounted 5 s ago.
    let samples = |v: f64| -> Vec<(i64, f64)> {
        (0..20)
            .map(|i| (now - 25_000 + i * 1000, v + i as f64))
            .collect()
    };
    write(
        &d,
        vec![
            series("/a", &samples(100.0)),
            series("/b", &samples(200.0)),
            series("/c", &samples(300.0)),
        ],
    )
    .await;
    // New series are found through the catalog, which flushes write.
    wait_settled(&d.http_url()).await;
    let ended = now - 5_000;
    let marker = f64::from_bits(MARKER);
    write(
        &d,
        vec![
            series("/b", &[(ended, marker)]),
            series("/c", &[(ended, marker)]),
        ],
    )
    .await;
    let only_a = vec!["/a".to_owned()];
    let topk = format!("topk(3, {METRIC})");
    for at in [ended, ended + 1, now] {
        assert_eq!(mounts(&d, METRIC, at).await, only_a, "at {at}");
        assert_eq!(mounts(&d, &topk, at).await, only_a, "topk at {at}");
    }
    // Range functions skip the marker: the samples before it still count.
    let count = format!("count_over_time({METRIC}{{mountpoint=\"/b\"}}[3m])");
    let minute_after = now - now.rem_euclid(60_000) + 60_000 + 60_000;
    assert_eq!(value(&d, &count, minute_after).await, Some(20.0));
    // A sample after the marker starts the series again; /c stays ended.
    write(&d, vec![series("/b", &[(now - 2_000, 7.0)])]).await;
    let back = vec!["/a".to_owned(), "/b".to_owned()];
    assert_eq!(mounts(&d, METRIC, now).await, back);
    // The markers were acknowledged: a SIGKILL keeps them (replayed from
    // the write-ahead log, or read back from the store).
    d.crash_and_restart();
    assert_eq!(mounts(&d, METRIC, now).await, back, "after a crash");
    assert_eq!(mounts(&d, &topk, now).await, back, "after a crash");
    // And a clean restart, everything flushed to the store.
    d.restart();
    assert_eq!(mounts(&d, METRIC, now).await, back, "after a restart");
    assert_eq!(mounts(&d, &topk, now).await, back, "after a restart");
    assert_eq!(value(&d, &count, minute_after).await, Some(21.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_markers_end_series_on_the_embedded_store() {
    check(crate::tallyd().flush_interval("1s")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staleness_markers_end_series_on_the_mongodb_store() {
    let target = tally_testkit::mongo::mongo_target().await;
    let opts = crate::tallyd()
        .mongodb(&target.uri, &target.database)
        .env("TALLYD_WRITER_ID", "prom-stale")
        .flush_interval("1s");
    check(opts).await;
    target.cleanup().await;
}
