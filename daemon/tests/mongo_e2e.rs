//! `tallyd --store mongodb` end to end: the real binary (see
//! `support::daemon`) against the MongoDB stand-in (`tests/mongo-standin`),
//! or against the real server in `MONGODB_URI`, each test in a fresh
//! database (`TALLYD_MONGODB_DATABASE`). Everything goes through the
//! daemon's public interfaces: gRPC `Push` and `PushStream`, gRPC
//! `Query.Range`, HTTP `/api/v1/range`, `/readyz`, `/metrics`,
//! `grpc.health.v1`, SIGTERM. The documents themselves are also read with
//! the driver, to check what reached MongoDB independently of the daemon.
//!
//! * Reads are exact before any flush (memory only), after flushes (store,
//!   and store plus memory), and after SIGTERM and a restart on the same
//!   database (store only).
//! * MongoDB down at start: the daemon starts, ingests into memory, reports
//!   itself not ready, and writes everything exactly once when MongoDB is
//!   back.
//! * MongoDB down in the middle with a small memory bound: pushes are taken
//!   up to `ingest.max_pending_slots`, then refused with
//!   `RESOURCE_EXHAUSTED`; taken again once MongoDB is back, and everything
//!   acknowledged is written exactly once.
//! * An ambiguous failure during a flush (the write applied, its reply lost)
//!   is retried by the daemon and counted once.
//!
//! The fault-injection tests need the stand-in; against a real server they
//! print a note and return. Values are small integers and binary fractions,
//! so every sum is exact in any order and compares with `==`. Every wait is
//! bounded; the tests run on a multi-thread runtime so gRPC connection tasks
//! keep running while a test blocks on the process.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{doc, Document};
use tally_proto::v1 as pb;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use support::client::within;
use support::daemon::{Daemon, DaemonOpts};
use support::e2e::{
    check_reads, expects, flushes_so_far, http_get, metric, metrics_text,
    minute_start_in_one_hour_ms, minute_start_ms, push, range_around, request, restart,
    sigterm_and_exit, wait_flushed, Expect, Kind, Sent, MINUTE_MS, SECOND_MS,
};
use support::standin::{mongo_target, MongoTarget};

/// How long the daemon may take to notice MongoDB going away or coming
/// back, or to flush what it holds.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

const HOURS: &str = "metrics_by_hour";
const DAYS: &str = "metrics_by_day";
const WRITER: &str = "e2e-writer";

// ---------------------------------------------------------------------------
// The daemon under test.

/// The URI tallyd gets. On the stand-in, server selection gives up after 2 s
/// instead of 5 s, so a daemon started while MongoDB is down, and each flush
/// attempt while it is down, fail (and retry) sooner.
fn daemon_uri(target: &MongoTarget) -> String {
    if target.is_real_server() {
        target.uri.clone()
    } else {
        target.uri.replace(
            "serverSelectionTimeoutMS=5000",
            "serverSelectionTimeoutMS=2000",
        )
    }
}

/// `tallyd --store mongodb` on the target's database, flushing every
/// `flush_interval`, retrying failed flushes at least every 500 ms.
fn opts(target: &MongoTarget, flush_interval: &str) -> DaemonOpts {
    DaemonOpts::new()
        .arg("--store")
        .arg("mongodb")
        .arg("--mongodb-uri")
        .arg(daemon_uri(target))
        .env("TALLYD_MONGODB_DATABASE", &target.database)
        .env("TALLYD_WRITER_ID", WRITER)
        .env("TALLYD_FLUSH_RETRY_MAX_BACKOFF", "500ms")
        .flush_interval(flush_interval)
}

/// Starts a daemon without blocking the runtime's worker (the harness waits
/// for the listening line synchronously).
async fn start(opts: DaemonOpts) -> Daemon {
    tokio::task::spawn_blocking(move || Daemon::start(opts))
        .await
        .expect("starting tallyd panicked")
}

// ---------------------------------------------------------------------------
// What the tests send.

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

/// Pushes and checks that every sample was taken.
async fn push_all(
    client: &mut pb::ingest_client::IngestClient<Channel>,
    series: &[Sent],
) -> pb::PushResponse {
    let want: usize = series.iter().map(|s| s.samples.len()).sum();
    let resp = push(client, request(series))
        .await
        .unwrap_or_else(|s| panic!("Push failed: {s:?}"));
    assert_eq!((resp.accepted, resp.rejected), (want as u64, 0), "{resp:?}");
    resp
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

/// The status of `/readyz`.
async fn readyz(d: &Daemon) -> u16 {
    http_get(d, "/readyz").await.0
}

/// The daemon's overall `grpc.health.v1` status.
async fn grpc_health(d: &Daemon) -> Option<ServingStatus> {
    let mut health = tonic_health::pb::health_client::HealthClient::new(d.channel().await);
    let resp = within(
        "Health.Check",
        health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        }),
    )
    .await
    .unwrap_or_else(|s| panic!("Health.Check: {s:?}"))
    .into_inner();
    ServingStatus::try_from(resp.status).ok()
}

/// Polls until `/readyz` answers `status` and the gRPC health status is
/// `grpc`, within [`SETTLE_TIMEOUT`].
async fn wait_health(d: &Daemon, status: u16, grpc: ServingStatus) {
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let (r, g) = (readyz(d).await, grpc_health(d).await);
        if r == status && g == Some(grpc) {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "/readyz = {r}, gRPC health = {g:?} after {SETTLE_TIMEOUT:?}; expected {status} and {grpc:?}\n{}",
                d.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------
// What reached MongoDB, read with the driver.

/// Running totals `(n, sum)` per series (source, metric), added up over
/// its hour documents (`[0]`) and over its day documents (`[1]`).
type StoredTotals = BTreeMap<(String, String), [(i64, f64); 2]>;

/// Every document of both collections, read with the driver.
async fn stored_totals(target: &MongoTarget) -> StoredTotals {
    let db = target.db().await;
    let mut out = StoredTotals::new();
    for (i, coll) in [HOURS, DAYS].into_iter().enumerate() {
        let mut cursor = db
            .collection::<Document>(coll)
            .find(doc! {})
            .await
            .unwrap_or_else(|e| panic!("find in {coll}: {e}"));
        while let Some(d) = cursor.try_next().await.expect("reading documents") {
            let field = |name: &str| {
                d.get_str(name)
                    .unwrap_or_else(|e| panic!("{coll} document without {name} ({e}): {d}"))
                    .to_string()
            };
            let total = d
                .get_document("total")
                .unwrap_or_else(|e| panic!("{coll} document without total ({e}): {d}"));
            let entry = out.entry((field("s"), field("m"))).or_default();
            entry[i].0 += total.get_i64("n").expect("total.n is an Int64");
            entry[i].1 += total.get_f64("sum").expect("total.sum is a Double");
        }
    }
    out
}

/// The documents of every expected series hold exactly its samples: each
/// written once, in the hour and in the day tier.
async fn check_stored(target: &MongoTarget, expects: &[Expect]) {
    let stored = stored_totals(target).await;
    for e in expects {
        let n = e.stored.len() as i64;
        let sum: f64 = e.stored.iter().map(|s| s.1).sum();
        let got = stored
            .get(&(e.source.clone(), e.metric.clone()))
            .copied()
            .unwrap_or_default();
        assert_eq!(
            got,
            [(n, sum); 2],
            "{}/{}: (n, sum) of the hour and the day documents in MongoDB",
            e.source,
            e.metric
        );
    }
}

fn skip_on_real_server(target: &MongoTarget) -> bool {
    if target.is_real_server() {
        println!("note: fault injection needs the MongoDB stand-in; skipped against MONGODB_URI");
        return true;
    }
    false
}

// ---------------------------------------------------------------------------
// The tests.

/// With a one-hour flush interval nothing reaches MongoDB while the daemon
/// runs: reads come from memory alone. SIGTERM writes everything with the
/// shutdown flush, and the restarted daemon (which flushes nothing) reads
/// the same points from MongoDB alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_memory_then_after_restart_from_mongodb_alone() {
    let target = mongo_target().await;
    let mut d = start(opts(&target, "1h")).await;
    assert_eq!(readyz(&d).await, 200, "MongoDB is up");
    let t0 = minute_start_ms(7);
    let unary = fleet("db-01.example:27017", t0);
    let streamed = fleet("db-02", t0);
    {
        let mut ingest = d.ingest_client().await;
        push_all(&mut ingest, &unary).await;
        push_stream_all(&mut ingest, &streamed).await;
    }
    let all = expects(&[unary, streamed].concat());
    let (from, to) = range_around(t0);
    check_reads(&d, &all, from, to).await;
    check_reads(&d, &[Expect::absent("db-03", "cpu.load")], from, to).await;
    let m = metrics_text(&d).await;
    assert_eq!(
        metric(&m, "tally_flushes_total", &[]).unwrap_or(0.0),
        0.0,
        "nothing may be flushed with flush.interval = 1h:\n{m}"
    );
    assert_eq!(
        metric(&m, "tally_samples_accepted_total", &[]),
        Some(2.0 * FLEET_SAMPLES as f64)
    );
    // Nothing in MongoDB before the shutdown flush.
    check_stored(
        &target,
        &[Expect::absent("db-01.example:27017", "cpu.load")],
    )
    .await;

    restart(&mut d).await;
    check_stored(&target, &all).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(
        flushes_so_far(&d).await,
        0.0,
        "the restarted daemon flushed nothing: the reads came from MongoDB"
    );
    sigterm_and_exit(&mut d).await;
    target.cleanup().await;
}

/// With a 100 ms flush interval: reads once the data is in MongoDB, while a
/// minute is split between MongoDB and memory (a second push into minutes
/// already flushed), once everything is flushed again, and after SIGTERM
/// and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_flushes_and_across_mongodb_and_memory_and_restart() {
    let target = mongo_target().await;
    let mut d = start(opts(&target, "100ms")).await;
    let t0 = minute_start_ms(8);
    let sent = [fleet("web-1", t0), fleet("web-2", t0)].concat();
    let all = expects(&sent);
    let first: Vec<Sent> = sent
        .iter()
        .map(|s| s.part(0..s.samples.len() / 2))
        .collect();
    let second: Vec<Sent> = sent
        .iter()
        .map(|s| s.part(s.samples.len() / 2..s.samples.len()))
        .collect();
    let (from, to) = range_around(t0);
    {
        let mut ingest = d.ingest_client().await;
        // Unary for the first half, streaming for the second.
        push_all(&mut ingest, &first).await;
        wait_flushed(&d, 1.0, SETTLE_TIMEOUT).await;
        let half: Vec<Expect> = expects(&first);
        check_reads(&d, &half, from, to).await;
        check_stored(&target, &half).await;

        let before = flushes_so_far(&d).await;
        push_stream_all(&mut ingest, &second).await;
        check_reads(&d, &all, from, to).await;
        wait_flushed(&d, before + 1.0, SETTLE_TIMEOUT).await;
        check_reads(&d, &all, from, to).await;
        check_stored(&target, &all).await;
    }

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from MongoDB alone");
    check_stored(&target, &all).await;
    sigterm_and_exit(&mut d).await;
    target.cleanup().await;
}

/// MongoDB down when the daemon starts: it starts, takes pushes into
/// memory, and says it is not ready; when MongoDB comes back it becomes
/// ready and writes everything it acknowledged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_down_at_start_then_everything_is_written_once() {
    let target = mongo_target().await;
    if skip_on_real_server(&target) {
        return;
    }
    let standin = target.standin().expect("a stand-in");
    standin.set_down(true);
    let mut d = start(opts(&target, "200ms")).await;
    let t0 = minute_start_ms(6);
    let unary = fleet("early-1", t0);
    let streamed = fleet("early-2", t0);
    {
        let mut ingest = d.ingest_client().await;
        push_all(&mut ingest, &unary).await;
        push_stream_all(&mut ingest, &streamed).await;
    }
    wait_health(&d, 503, ServingStatus::NotServing).await;
    let (status, body) = http_get(&d, "/readyz").await;
    assert!(
        body.contains("mongodb store not ready"),
        "/readyz {status}: {body}"
    );
    // Still taking samples while MongoDB is down.
    let late = vec![Sent::new(
        "early-3",
        "queue.depth",
        Kind::Gauge,
        vec![(t0 + 30 * SECOND_MS, 2.0), (t0 + 90 * SECOND_MS, 6.0)],
    )];
    push_all(&mut d.ingest_client().await, &late).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "nothing can have landed");

    standin.set_down(false);
    wait_health(&d, 200, ServingStatus::Serving).await;
    wait_flushed(&d, 1.0, SETTLE_TIMEOUT).await;
    let all = expects(&[unary, streamed, late].concat());
    check_stored(&target, &all).await;
    let (from, to) = range_around(t0);
    check_reads(&d, &all, from, to).await;

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from MongoDB alone");
    check_stored(&target, &all).await;
    sigterm_and_exit(&mut d).await;
}

/// MongoDB goes down while the daemon runs with a small memory bound:
/// pushes are taken until `ingest.max_pending_slots`, then refused whole
/// with `RESOURCE_EXHAUSTED`; once MongoDB is back they are taken again, and
/// everything acknowledged (and nothing refused) is in MongoDB, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_down_in_the_middle_pushes_back_then_recovers() {
    const MAX_PENDING: usize = 50;
    const SERIES_PER_PUSH: usize = 8;
    let target = mongo_target().await;
    if skip_on_real_server(&target) {
        return;
    }
    let standin = target.standin().expect("a stand-in");
    // Without group rollups: their slots count against the same bound, and
    // this test counts the bound in member slots exactly.
    let mut d = start(
        opts(&target, "100ms")
            .env("TALLYD_INGEST_MAX_PENDING_SLOTS", MAX_PENDING.to_string())
            .env("TALLYD_ROLLUP_ALL", "false"),
    )
    .await;
    let t0 = minute_start_ms(5);
    let mut acked: Vec<Sent> = Vec::new();
    let mut refused: Vec<Sent> = Vec::new();
    let mut ingest = d.ingest_client().await;

    // Before: written normally.
    let before = fleet("steady", t0);
    push_all(&mut ingest, &before).await;
    acked.extend(before);
    wait_flushed(&d, 1.0, SETTLE_TIMEOUT).await;

    // Each push: SERIES_PER_PUSH new series of one sample each, so every
    // accepted push adds that many slots the daemon must hold.
    let mut next = 0usize;
    let mut batch = || {
        let series: Vec<Sent> = (0..SERIES_PER_PUSH)
            .map(|i| {
                let k = next + i;
                Sent::new(
                    &format!("burst-{:03}", k / 4),
                    &format!("m{}", k % 4),
                    if k.is_multiple_of(2) {
                        Kind::Gauge
                    } else {
                        Kind::Delta
                    },
                    vec![(t0 + (k as i64 % 50) * SECOND_MS, (k % 7) as f64)],
                )
            })
            .collect();
        next += SERIES_PER_PUSH;
        series
    };

    standin.set_down(true);
    let mut pushback = None;
    for _ in 0..200 {
        let series = batch();
        match push(&mut ingest, request(&series)).await {
            Ok(resp) => {
                assert_eq!(resp.accepted, SERIES_PER_PUSH as u64, "{resp:?}");
                acked.extend(series);
            }
            Err(status) => {
                refused.extend(series);
                pushback = Some(status);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = pushback.expect("no push was refused while MongoDB was down");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("ingest.max_pending_slots"),
        "{status:?}"
    );
    let accepted_while_down = acked.len() - 3;
    println!("taken while MongoDB was down: {accepted_while_down} series; then {status:?}");
    assert!(
        accepted_while_down >= MAX_PENDING,
        "only {accepted_while_down} series were taken before the pushback"
    );
    // Still refused while MongoDB stays down, over the stream too.
    let series = batch();
    let err = within(
        "PushStream",
        ingest.push_stream(tokio_stream::iter(vec![request(&series)])),
    )
    .await
    .expect_err("a push beyond the memory bound");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    refused.extend(series);
    wait_health(&d, 503, ServingStatus::NotServing).await;

    standin.set_down(false);
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let series = batch();
        match push(&mut ingest, request(&series)).await {
            Ok(resp) => {
                assert_eq!(resp.accepted, SERIES_PER_PUSH as u64, "{resp:?}");
                acked.extend(series);
                break;
            }
            Err(status) if status.code() == Code::ResourceExhausted => {
                refused.extend(series);
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "pushes still refused {SETTLE_TIMEOUT:?} after MongoDB came back: {status:?}\n{}",
                    d.logs()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("unexpected refusal: {status:?}"),
        }
    }
    // And more, as usual, once the backlog is written: the first push
    // taken back can land while the retried batches still hold most of the
    // bound, and the next one would be pushed back again.
    wait_flushed(&d, 2.0, SETTLE_TIMEOUT).await;
    let after = fleet("steady-after", t0);
    push_all(&mut ingest, &after).await;
    acked.extend(after);
    drop(ingest);
    wait_flushed(&d, 2.0, SETTLE_TIMEOUT).await;

    restart(&mut d).await;
    let (from, to) = range_around(t0);
    let acked = expects(&acked);
    check_stored(&target, &acked).await;
    check_reads(&d, &acked, from, to).await;
    // Refused pushes were refused whole: none of their samples exists.
    let refused: Vec<Expect> = refused
        .iter()
        .map(|s| Expect::absent(&s.source, &s.metric))
        .collect();
    check_stored(&target, &refused).await;
    check_reads(&d, &refused[..SERIES_PER_PUSH], from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from MongoDB alone");
    sigterm_and_exit(&mut d).await;
}

/// The stand-in applies a flush's first write command and drops the
/// connection without replying: the daemon cannot know it landed, retries
/// the whole flush, and the documents' watermarks make the retry skip what
/// was already applied. Every sample counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_failure_during_a_flush_counts_once() {
    let target = mongo_target().await;
    if skip_on_real_server(&target) {
        return;
    }
    let standin = target.standin().expect("a stand-in");
    // No pre-allocation: the next write command must be the flush's.
    let mut d = start(opts(&target, "300ms").env("TALLYD_PREALLOC_ENABLED", "false")).await;
    // The data's five minutes lie in one hour, so the retried flush finds
    // every document it updates already there.
    let t0 = minute_start_in_one_hour_ms(4, 5);
    let sent = fleet("ambiguous", t0);
    let first: Vec<Sent> = sent.iter().map(|s| s.part(0..4)).collect();
    let second: Vec<Sent> = sent.iter().map(|s| s.part(4..s.samples.len())).collect();
    let mut ingest = d.ingest_client().await;
    // Warm-up: the documents exist, the indexes are made and the flush ids
    // reserved, so the next write command is the update of the next flush.
    push_all(&mut ingest, &first).await;
    wait_flushed(&d, 1.0, SETTLE_TIMEOUT).await;

    standin.drop_after_apply(1).await;
    push_all(&mut ingest, &second).await;
    drop(ingest);
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let m = metrics_text(&d).await;
        let ambiguous = metric(
            &m,
            "tally_store_errors_total",
            &[("op", "apply"), ("kind", "ambiguous")],
        )
        .unwrap_or(0.0);
        let skipped = metric(&m, "tally_flush_documents_skipped_total", &[]).unwrap_or(0.0);
        if ambiguous >= 1.0 && skipped >= 1.0 {
            println!(
                "ambiguous apply failures: {ambiguous}; documents skipped on retry: {skipped}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ambiguous failure and skipped retry seen: ambiguous={ambiguous} skipped={skipped}\n{m}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_flushed(&d, 2.0, SETTLE_TIMEOUT).await;
    let all = expects(&sent);
    check_stored(&target, &all).await;
    let (from, to) = range_around(t0);
    check_reads(&d, &all, from, to).await;

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    check_stored(&target, &all).await;
    sigterm_and_exit(&mut d).await;
}
