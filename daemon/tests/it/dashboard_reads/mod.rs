//! End-to-end tests of the dashboard reads against the real `tallyd`, on the
//! embedded store and on MongoDB (the stand-in, or `MONGODB_URI`): ranges at
//! fixed, custom and automatic steps across minute, hour, day and month
//! boundaries; selectable aggregates; several series per call; latest;
//! series discovery with pagination; group rollups against their members;
//! watch over gRPC and Server-Sent Events; and the errors of bad queries.
//!
//! The samples sit around the most recent month start, up to 32 days back,
//! so the daemon runs with a lateness window that accepts them.
//!
//! Here: the fixture, the scenario and the tests. The checks are in
//! `ranges` (ranges and latest), `discovery`, `aggregates`, `errors` and
//! `watch`.

mod aggregates;
mod discovery;
mod errors;
mod ranges;
mod watch;

use std::time::{Duration, Instant};

use chrono::{Datelike, TimeZone, Utc};
use serde_json::Value;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, now_ms, push_ok, series, within};
use tally_testkit::metrics::{metric_sum, metrics_text};
use tally_testkit::mongo::{mongo_target, MongoTarget};
use tally_testkit::settle::eventually;
use tally_testkit::{Daemon, DaemonOpts};

use crate::tallyd;
use aggregates::check_aggregates;
use discovery::check_discovery;
use errors::check_errors;
use ranges::{check_latest, check_ranges};
use watch::{check_watch_grpc, check_watch_sse};

const SOURCES: [&str; 3] = ["web-1", "web-2", "db-1"];
/// The groups each source's agent declares. `db` repeats db-1's prefix
/// group: it must not count db-1 twice.
const DECLARED: [&[&str]; 3] = [&["eu"], &["us"], &["eu", "db"]];
/// How long catalog entries and rollups may take to appear (a few flushes).
const SETTLE: Duration = Duration::from_secs(20);
/// The issue's bound on watch delivery.
const WATCH_BOUND: Duration = Duration::from_millis(1500);

const CONFIG: &str = r#"
[rollup]
all = true
prefix_delimiter = "-"

[[rollup.groups]]
name = "frontends"
sources = ["web-*"]
"#;

/// The latest UTC month start at least ten minutes ago.
fn month_start() -> i64 {
    let now = Utc::now() - chrono::Duration::minutes(10);
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .map(|t| t.timestamp())
        .expect("a valid month start")
}

fn opts(config: &std::path::Path) -> DaemonOpts {
    tallyd()
        .arg("--config")
        .arg(config.display().to_string())
        .env("TALLYD_INGEST_LATENESS_WINDOW", "40d")
        // The fixture is up to a month old: keep its series in memory for
        // the whole test, or the idle sweep could evict them mid-check.
        .env("TALLYD_INGEST_SERIES_IDLE_TIMEOUT", "60d")
        .env("TALLYD_QUERY_MAX_TOTAL_POINTS", "20000")
        .env("TALLYD_RETENTION_HOUR", "60d")
        .flush_interval("500ms")
}

fn config_file() -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("a temporary config file");
    std::fs::write(f.path(), CONFIG).expect("writing the config file");
    f
}

/// Gauge `temp` of source `i`: four samples, 90 s and 30 s either side of
/// the month start `m`. Counter `reqs`: one delta either side.
fn temp(i: usize, m: i64) -> Vec<(i64, f64)> {
    let v = i as f64;
    vec![
        ((m - 90) * 1000, 10.0 + v),
        ((m - 30) * 1000, 20.0 + v),
        ((m + 30) * 1000, 30.0 + v),
        ((m + 90) * 1000, 40.0 + v),
    ]
}

fn reqs(i: usize, m: i64) -> Vec<(i64, f64)> {
    let k = (i + 1) as f64;
    vec![((m - 30) * 1000, 100.0 * k), ((m + 30) * 1000, 10.0 * k)]
}

async fn push_fixture(d: &Daemon, m: i64) {
    let mut ingest = d.ingest_client().await;
    let sources = SOURCES
        .iter()
        .enumerate()
        .map(|(i, s)| pb::SourceBatch {
            source: s.to_string(),
            series: vec![
                series("temp", pb::SampleKind::Gauge, &temp(i, m)),
                series("reqs", pb::SampleKind::DeltaCounter, &reqs(i, m)),
            ],
            groups: DECLARED[i].iter().map(|g| g.to_string()).collect(),
        })
        .collect();
    push_ok(&mut ingest, sources).await;
}

/// `(t, n, sum, min, max)` of each point.
fn summary(points: &Value) -> Vec<(i64, u64, f64, f64, f64)> {
    points
        .as_array()
        .unwrap_or_else(|| panic!("no points array: {points}"))
        .iter()
        .map(|p| {
            (
                p["t"].as_i64().unwrap_or(-1),
                p["n"].as_u64().unwrap_or(0),
                p["sum"].as_f64().unwrap_or(f64::NAN),
                p["min"].as_f64().unwrap_or(f64::NAN),
                p["max"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// The expected buckets of `samples` (ms, value) at `width` seconds.
fn expect(samples: &[(i64, f64)], width: i64) -> Vec<(i64, u64, f64, f64, f64)> {
    let mut out: Vec<(i64, u64, f64, f64, f64)> = Vec::new();
    let mut sorted = samples.to_vec();
    sorted.sort_by_key(|s| s.0);
    for (t_ms, v) in sorted {
        let t = (t_ms / 1000).div_euclid(width) * width;
        match out.last_mut() {
            Some(b) if b.0 == t => {
                b.1 += 1;
                b.2 += v;
                b.3 = b.3.min(v);
                b.4 = b.4.max(v);
            }
            _ => out.push((t, 1, v, v, v)),
        }
    }
    out
}

async fn range(d: &Daemon, params: &[(&str, &str)]) -> Value {
    get_ok(d, "/api/v1/range", params).await
}

async fn scenario(d: &Daemon) {
    let m = month_start();
    push_fixture(d, m).await;
    check_ranges(d, m).await;
    // Discovery first: it waits for the catalog, which fan-outs rely on.
    check_discovery(d, m).await;
    check_latest(d, m).await;
    check_errors(d).await;
    check_aggregates(d, m).await;
    let delays = check_watch_grpc(d, "watch-1").await;
    eprintln!("watch delivery delays: {delays:?}");
    check_watch_sse(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_reads_on_the_embedded_store() {
    let config = config_file();
    let d = Daemon::start_async(opts(config.path())).await;
    scenario(&d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_reads_on_mongodb() {
    let target: MongoTarget = mongo_target().await;
    let config = config_file();
    let d = Daemon::start_async(opts(config.path()).mongodb(&target.uri, &target.database)).await;
    scenario(&d).await;
    drop(d);
    target.cleanup().await;
}

/// Series of the slow-watcher test: `slow-0000/load` ... `slow-0099/load`.
const SLOW_SERIES: usize = 100;
/// Ten hours of history for 100 series make the stalled watcher's first
/// message alone (60,000 points) larger than every transport buffer on the
/// way, while each tick's live reads stay small.
const SLOW_HISTORY_MINUTES: i64 = 600;

/// A watcher that stops reading is skipped, then dropped, and never holds
/// up ingest or the other watchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_does_not_stall_ingest() {
    let config = config_file();
    let d = Daemon::start_async(
        opts(config.path())
            .env("TALLYD_WATCH_BUFFER", "1")
            .env("TALLYD_QUERY_MAX_TOTAL_POINTS", "10000000")
            .env("TALLYD_WATCH_MAX_LAG", "2s"),
    )
    .await;
    let mut ingest = d.ingest_client().await;
    push_slow_history(&mut ingest).await;
    let selector: String = (0..SLOW_SERIES)
        .map(|i| format!("slow-{i:04}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut stalled_client = d.query_client().await;
    // Opened, never read.
    let _stalled = within(
        "the stalled Watch",
        stalled_client.watch(pb::WatchRequest {
            labels: Vec::new(),
            source: selector,
            metric: "load".into(),
            window_minutes: SLOW_HISTORY_MINUTES as u32,
        }),
    )
    .await
    .expect("Watch");

    // Meanwhile ingest runs at full speed and a healthy watcher keeps up.
    // Updates only flow while samples arrive, so the watcher is told when
    // the pushing stops rather than outliving it on a clock of its own.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let healthy = tokio::spawn(count_healthy_watch_updates(d.grpc_url(), stop_rx));
    let (pushes, slowest) = push_live_samples_for_6s(&mut ingest).await;
    let _ = stop_tx.send(true);
    let updates = healthy.await.expect("healthy watcher task");
    assert!(
        updates >= 3,
        "the healthy watcher got {updates} updates in 6 s"
    );
    assert!(pushes >= 20, "only {pushes} pushes in 6 s");
    assert!(
        slowest < Duration::from_secs(1),
        "a push took {slowest:?} while a watcher was stalled"
    );
    wait_stalled_watcher_skipped_and_dropped(&d).await;
}

type IngestClient = pb::ingest_client::IngestClient<tonic::transport::Channel>;

/// `SLOW_HISTORY_MINUTES` of history for every slow series, ten sources
/// per push.
async fn push_slow_history(ingest: &mut IngestClient) {
    let start_ms = now_ms() - (SLOW_HISTORY_MINUTES - 1) * 60_000;
    for chunk in (0..SLOW_SERIES).collect::<Vec<_>>().chunks(10) {
        let sources = chunk
            .iter()
            .map(|i| pb::SourceBatch {
                source: format!("slow-{i:04}"),
                series: vec![series(
                    "load",
                    pb::SampleKind::Gauge,
                    &(0..SLOW_HISTORY_MINUTES)
                        .map(|k| (start_ms + k * 60_000, k as f64))
                        .collect::<Vec<_>>(),
                )],
                groups: Vec::new(),
            })
            .collect();
        push_ok(ingest, sources).await;
    }
}

/// Watches `slow-0000/load` over gRPC at `grpc_url` until `stop` changes;
/// every message must come within 5 s. Returns the number of updates
/// (messages other than snapshots).
async fn count_healthy_watch_updates(
    grpc_url: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> usize {
    let mut q = pb::query_client::QueryClient::connect(grpc_url)
        .await
        .expect("connect");
    let mut s = q
        .watch(pb::WatchRequest {
            labels: Vec::new(),
            source: "slow-0000".into(),
            metric: "load".into(),
            window_minutes: 1,
        })
        .await
        .expect("Watch")
        .into_inner();
    let mut updates = 0;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            m = tokio::time::timeout(Duration::from_secs(5), s.message()) => match m {
                Ok(Ok(Some(m))) if !m.snapshot => updates += 1,
                Ok(Ok(Some(_))) => {}
                other => panic!("healthy watcher: {other:?}"),
            },
        }
    }
    updates
}

/// For six seconds, every 100 ms, one sample for every tenth slow series.
/// Returns the number of pushes and the slowest push.
async fn push_live_samples_for_6s(ingest: &mut IngestClient) -> (usize, Duration) {
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(6);
    let mut pushes = 0;
    while Instant::now() < until {
        let t = now_ms();
        let sources = (0..SLOW_SERIES)
            .step_by(10)
            .map(|i| pb::SourceBatch {
                source: format!("slow-{i:04}"),
                series: vec![series("load", pb::SampleKind::Gauge, &[(t, pushes as f64)])],
                groups: Vec::new(),
            })
            .collect();
        let started = Instant::now();
        push_ok(ingest, sources).await;
        slowest = slowest.max(started.elapsed());
        pushes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (pushes, slowest)
}

async fn wait_stalled_watcher_skipped_and_dropped(d: &Daemon) {
    eventually(
        "the stalled watcher is skipped and then dropped",
        SETTLE,
        || async {
            let text = metrics_text(d).await;
            let skipped = metric_sum(&text, "tally_watch_skipped_total");
            let dropped = metric_sum(&text, "tally_watch_dropped_total");
            if skipped >= 1.0 && dropped >= 1.0 {
                Ok(())
            } else {
                Err(format!("skipped {skipped}, dropped {dropped}"))
            }
        },
    )
    .await;
}
