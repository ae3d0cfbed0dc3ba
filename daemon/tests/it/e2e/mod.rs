//! End-to-end tests of the real `tallyd` binary over loopback, on both
//! stores: the embedded store, and MongoDB (the stand-in in
//! `tests/mongo-standin`, FerretDB on SQLite and on PostgreSQL, or the real
//! server in `MONGODB_URI`, each test in a fresh database).
//!
//! Every test starts its own daemon (see `tally_testkit::daemon`) on
//! ephemeral ports with a temporary data directory, talks to it only
//! through its public interfaces (gRPC ingest and query, the HTTP API,
//! `/readyz`, `/metrics`, `grpc.health.v1`, reflection, signals) and
//! compares what comes back with what the test computed itself from the
//! samples it sent. On MongoDB the documents themselves are also read with
//! the driver, to check what reached the store independently of the daemon.
//!
//! * `per_store`: the scenarios every store must pass, each run once per
//!   store (`<scenario>::embedded`, and `<scenario>::mongodb_standin`,
//!   `::mongodb_ferretdb`, `::mongodb_ferretdb_pg`, `::mongodb_uri` on the
//!   MongoDB targets): reads
//!   exact before any flush (memory only), after flushes (store, and store
//!   plus memory), and after SIGTERM and a restart on the same data (store
//!   only).
//! * `exactly_once`: `tally-loadgen` against `tallyd --store mongodb` on
//!   every MongoDB target, real time and `--max`, verified exactly across a
//!   restart of `tallyd` and an outage of the server (on FerretDB, its
//!   process stopped and started again).
//! * `embedded`: ingest and API behaviour tested on the embedded store only:
//!   streaming, rejections, request limits, probes and reflection, SIGTERM
//!   under load.
//! * `mongodb`: MongoDB's failures, through the stand-in's fault injection
//!   (against a real server these tests print a note and return): down at
//!   start, down in the middle with a memory bound, an ambiguous failure
//!   during a flush.
//! * `refusals`: a MongoDB server that refuses statements (one shape,
//!   every update, some at random) loses no acknowledged sample: dead
//!   letters, replayed with `tallyd dead-letters replay`, or a held flush
//!   and refused ingest while it refuses everything.
//! * `baseline`: a cumulative counter's baseline minute reads as empty
//!   everywhere, on every store, including as stored before that rule.
//! * `store`: the store a daemon runs on; `check`: what is sent and how
//!   reads are checked.
//!
//! Sample values are small integers and binary fractions, so every sum is
//! exact in any order and the expected aggregates compare with `==`. Every
//! wait is bounded.
//!
//! The tests run on a multi-thread runtime: a gRPC client's connection task
//! must keep running while a test blocks (e.g. waiting for the process), or
//! it cannot answer the daemon's GOAWAY and holds its graceful shutdown.
//! When a test fails, the daemon's log is printed (see `Daemon`'s `Drop`).

mod baseline;
mod check;
mod embedded;
mod exactly_once;
mod mongodb;
mod per_store;
mod refusals;
mod store;

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{http_get, within};
use tally_testkit::Daemon;
use tonic::transport::Channel;

use check::{push, request, Kind, Sent, MINUTE_MS, SECOND_MS};

// ---------------------------------------------------------------------------
// What the tests send.

/// Three series of one source starting at minute `t0`: a gauge with
/// samples in minutes 0, 1, 2 and 4 (sent newest first: order must not
/// matter), a delta counter in minutes 0, 1 and 3, and a cumulative counter
/// over minutes 0–3 with a reset. 29 samples in all.
fn standard_series(source: &str, t0: i64) -> Vec<Sent> {
    let mut gauge = Vec::new();
    for m in [0i64, 1, 2, 4] {
        for (off_s, v) in [(5i64, 0.5), (25, -1.25), (45, 3.0)] {
            gauge.push((t0 + m * MINUTE_MS + off_s * SECOND_MS, m as f64 * 2.0 + v));
        }
    }
    gauge.reverse();
    let mut delta = Vec::new();
    for m in [0i64, 1, 3] {
        for (k, off_s) in [10i64, 30, 50].into_iter().enumerate() {
            delta.push((
                t0 + m * MINUTE_MS + off_s * SECOND_MS,
                (3 + 2 * k as i64 + m) as f64,
            ));
        }
    }
    // Baseline 1000, then deltas 10, 20, 0, 70, reset to 50 (counts 50), 30, 120.
    let totals = [1000.0, 1010.0, 1030.0, 1030.0, 1100.0, 50.0, 80.0, 200.0];
    let cumulative = (0..8)
        .map(|i| {
            let m = (i / 2) as i64;
            let off_s = if i % 2 == 0 { 10 } else { 40 };
            (t0 + m * MINUTE_MS + off_s * SECOND_MS, totals[i])
        })
        .collect();
    vec![
        Sent::new(source, "cpu.load", Kind::Gauge, gauge),
        Sent::new(source, "ops/total", Kind::Delta, delta),
        Sent::new(source, "net:bytes_in", Kind::Cumulative, cumulative),
    ]
}

const STANDARD_SAMPLES: u64 = 29;

/// Three series of `source` over the five minutes from `t0`: a gauge
/// (sent newest first: order must not matter), a delta counter, and a
/// cumulative counter with a reset. 30 samples, 28 of them stored (the
/// counter's first sample is its baseline).
fn fleet(source: &str, t0: i64) -> Vec<Sent> {
    let mut gauge = Vec::new();
    for m in [0i64, 1, 3, 4] {
        for (off_s, v) in [(2i64, 1.5), (31, -0.75), (58, 4.0)] {
            gauge.push((t0 + m * MINUTE_MS + off_s * SECOND_MS, v - m as f64));
        }
    }
    gauge.reverse();
    let mut delta = Vec::new();
    for m in [0i64, 2, 3] {
        for (k, off_s) in [7i64, 27, 47].into_iter().enumerate() {
            delta.push((
                t0 + m * MINUTE_MS + off_s * SECOND_MS,
                (k as i64 + 2 * m) as f64,
            ));
        }
    }
    // Baseline 500, then +4, +12, +0, +40, reset to 8 (counts 8), +16, +64, +0.
    let totals = [500.0, 504.0, 516.0, 516.0, 556.0, 8.0, 24.0, 88.0, 88.0];
    let cumulative = totals
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let m = (i / 2) as i64;
            let off_s = if i % 2 == 0 { 15 } else { 45 };
            (t0 + m * MINUTE_MS + off_s * SECOND_MS, v)
        })
        .collect();
    vec![
        Sent::new(source, "cpu.load", Kind::Gauge, gauge),
        Sent::new(source, "ops/total", Kind::Delta, delta),
        Sent::new(source, "net:bytes_in", Kind::Cumulative, cumulative),
    ]
}

const FLEET_SAMPLES: u64 = 30;

// ---------------------------------------------------------------------------
// Talking to the daemon.

/// One `Push` that must not fail as a whole (samples may be rejected).
async fn push_ok(
    client: &mut pb::ingest_client::IngestClient<Channel>,
    req: pb::PushRequest,
) -> pb::PushResponse {
    push(client, req)
        .await
        .unwrap_or_else(|s| panic!("Push failed: {s:?}"))
}

/// Pushes and checks that every sample was taken.
async fn push_all(client: &mut pb::ingest_client::IngestClient<Channel>, series: &[Sent]) {
    let want: usize = series.iter().map(|s| s.samples.len()).sum();
    let resp = push_ok(client, request(series)).await;
    assert_eq!((resp.accepted, resp.rejected), (want as u64, 0), "{resp:?}");
}

/// One series per `PushStream` message; checks every sample was taken.
async fn push_stream_all(client: &mut pb::ingest_client::IngestClient<Channel>, series: &[Sent]) {
    let want: usize = series.iter().map(|s| s.samples.len()).sum();
    let messages: Vec<pb::PushRequest> = series
        .iter()
        .map(|s| request(std::slice::from_ref(s)))
        .collect();
    let resp = within(
        "PushStream",
        client.push_stream(tokio_stream::iter(messages)),
    )
    .await
    .unwrap_or_else(|s| panic!("PushStream failed: {s:?}"))
    .into_inner();
    assert_eq!((resp.accepted, resp.rejected), (want as u64, 0), "{resp:?}");
}

/// The flush loop's first tick fires as soon as its task first runs, which
/// can be just after the listeners are up; a push that lands before it is
/// flushed at once even with `flush.interval = 1h`. Tests that must know
/// nothing was flushed wait for the daemon to be ready and then a moment.
async fn past_first_flush_tick(d: &Daemon) {
    let (status, body) = http_get(d, "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
}
