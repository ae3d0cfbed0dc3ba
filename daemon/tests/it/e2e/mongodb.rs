//! MongoDB's failures end to end, through the stand-in's fault injection:
//! these tests exist for the MongoDB store only (against a real server in
//! `MONGODB_URI` they print a note and return).
//!
//! * MongoDB down at start: the daemon starts, ingests into memory, reports
//!   itself not ready, and writes everything exactly once when MongoDB is
//!   back.
//! * MongoDB down in the middle with a small memory bound: pushes are taken
//!   up to `ingest.max_pending_slots`, then refused with
//!   `RESOURCE_EXHAUSTED`; taken again once MongoDB is back, and everything
//!   acknowledged is written exactly once.
//! * An ambiguous failure during a flush (the write applied, its reply lost)
//!   is retried by the daemon and counted once.

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{http_get, within};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::settle::{flushes_so_far, wait_flushed};
use tally_testkit::Daemon;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use super::check::{
    check_reads, expects, minute_start_in_one_hour_ms, minute_start_ms, push, range_around,
    request, restart, sigterm_and_exit, Expect, Kind, Sent, SECOND_MS,
};
use super::store::{Store, StoreKind};
use super::{fleet, push_all, push_stream_all};

/// How long the daemon may take to notice MongoDB going away or coming
/// back, or to flush what it holds.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// MongoDB down when the daemon starts: it starts, takes pushes into
/// memory, and says it is not ready; when MongoDB comes back it becomes
/// ready and writes everything it acknowledged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_down_at_start_then_everything_is_written_once() {
    let store = Store::new(StoreKind::MongoDb).await;
    let Some(standin) = store.standin_or_skip() else {
        return;
    };
    standin.set_down(true);
    let mut d = store.start("200ms").await;
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
    store.check_stored(&all).await;
    let (from, to) = range_around(t0);
    check_reads(&d, &all, from, to).await;

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from MongoDB alone");
    store.check_sealed(&all).await;
    sigterm_and_exit(&mut d).await;
}

/// `ingest.max_pending_slots` of the daemon that loses MongoDB in the
/// middle.
const MAX_PENDING: usize = 50;
/// New series in each push of a burst.
const SERIES_PER_PUSH: usize = 8;

/// The pushes of a burst: each one `SERIES_PER_PUSH` new series of one
/// sample each, so every accepted push adds that many slots the daemon
/// must hold.
struct Burst {
    t0: i64,
    next: usize,
}

impl Burst {
    fn next_push(&mut self) -> Vec<Sent> {
        let series: Vec<Sent> = (0..SERIES_PER_PUSH)
            .map(|i| {
                let k = self.next + i;
                Sent::new(
                    &format!("burst-{:03}", k / 4),
                    &format!("m{}", k % 4),
                    if k.is_multiple_of(2) {
                        Kind::Gauge
                    } else {
                        Kind::Delta
                    },
                    vec![(self.t0 + (k as i64 % 50) * SECOND_MS, (k % 7) as f64)],
                )
            })
            .collect();
        self.next += SERIES_PER_PUSH;
        series
    }
}

/// What was acknowledged and what was refused, series by series.
#[derive(Default)]
struct Outcomes {
    acked: Vec<Sent>,
    refused: Vec<Sent>,
}

type IngestClient = pb::ingest_client::IngestClient<Channel>;

/// MongoDB goes down while the daemon runs with a small memory bound:
/// pushes are taken until `ingest.max_pending_slots`, then refused whole
/// with `RESOURCE_EXHAUSTED`; once MongoDB is back they are taken again, and
/// everything acknowledged (and nothing refused) is in MongoDB, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_down_in_the_middle_pushes_back_then_recovers() {
    let store = Store::new(StoreKind::MongoDb).await;
    let Some(standin) = store.standin_or_skip() else {
        return;
    };
    // Without group rollups: their slots count against the same bound, and
    // this test counts the bound in member slots exactly.
    let mut d = Daemon::start_async(
        store
            .opts("100ms")
            .env("TALLYD_INGEST_MAX_PENDING_SLOTS", MAX_PENDING.to_string())
            .env("TALLYD_ROLLUP_ALL", "false"),
    )
    .await;
    let t0 = minute_start_ms(5);
    let mut out = Outcomes::default();
    let mut ingest = d.ingest_client().await;

    // Before: written normally.
    let before = fleet("steady", t0);
    push_all(&mut ingest, &before).await;
    out.acked.extend(before);
    wait_flushed(&d, 1.0, SETTLE_TIMEOUT).await;

    let mut burst = Burst { t0, next: 0 };
    standin.set_down(true);
    check_pushed_back_at_the_memory_bound(&mut ingest, &mut burst, &mut out).await;
    wait_health(&d, 503, ServingStatus::NotServing).await;

    standin.set_down(false);
    push_until_taken_again(&d, &mut ingest, &mut burst, &mut out).await;
    // And more, as usual, once the backlog is written: the first push
    // taken back can land while the retried batches still hold most of the
    // bound, and the next one would be pushed back again.
    wait_flushed(&d, 2.0, SETTLE_TIMEOUT).await;
    let after = fleet("steady-after", t0);
    push_all(&mut ingest, &after).await;
    out.acked.extend(after);
    drop(ingest);
    wait_flushed(&d, 2.0, SETTLE_TIMEOUT).await;

    restart(&mut d).await;
    let (from, to) = range_around(t0);
    let acked = expects(&out.acked);
    store.check_sealed(&acked).await;
    check_reads(&d, &acked, from, to).await;
    // Refused pushes were refused whole: none of their samples exists.
    let refused: Vec<Expect> = out
        .refused
        .iter()
        .map(|s| Expect::absent(&s.source, &s.metric))
        .collect();
    store.check_sealed(&refused).await;
    check_reads(&d, &refused[..SERIES_PER_PUSH], from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from MongoDB alone");
    sigterm_and_exit(&mut d).await;
}

/// With MongoDB down: pushes are taken whole until at least `MAX_PENDING`
/// series are held, then refused with `RESOURCE_EXHAUSTED` naming the
/// setting; still refused while MongoDB stays down, over the stream too.
async fn check_pushed_back_at_the_memory_bound(
    ingest: &mut IngestClient,
    burst: &mut Burst,
    out: &mut Outcomes,
) {
    let mut pushback = None;
    for _ in 0..200 {
        let series = burst.next_push();
        match push(ingest, request(&series)).await {
            Ok(resp) => {
                assert_eq!(resp.accepted, SERIES_PER_PUSH as u64, "{resp:?}");
                out.acked.extend(series);
            }
            Err(status) => {
                out.refused.extend(series);
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
    let accepted_while_down = out.acked.len() - 3;
    println!("taken while MongoDB was down: {accepted_while_down} series; then {status:?}");
    assert!(
        accepted_while_down >= MAX_PENDING,
        "only {accepted_while_down} series were taken before the pushback"
    );
    let series = burst.next_push();
    let err = within(
        "PushStream",
        ingest.push_stream(tokio_stream::iter(vec![request(&series)])),
    )
    .await
    .expect_err("a push beyond the memory bound");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    out.refused.extend(series);
}

/// With MongoDB back: pushes until one is taken, which must happen within
/// `SETTLE_TIMEOUT`; until then only `RESOURCE_EXHAUSTED` refusals.
async fn push_until_taken_again(
    d: &Daemon,
    ingest: &mut IngestClient,
    burst: &mut Burst,
    out: &mut Outcomes,
) {
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let series = burst.next_push();
        match push(ingest, request(&series)).await {
            Ok(resp) => {
                assert_eq!(resp.accepted, SERIES_PER_PUSH as u64, "{resp:?}");
                out.acked.extend(series);
                break;
            }
            Err(status) if status.code() == Code::ResourceExhausted => {
                out.refused.extend(series);
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
}

/// The stand-in applies a flush's first write command and drops the
/// connection without replying: the daemon cannot know it landed, retries
/// the whole flush, and the documents' watermarks make the retry skip what
/// was already applied. Every sample counts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_failure_during_a_flush_counts_once() {
    let store = Store::new(StoreKind::MongoDb).await;
    let Some(standin) = store.standin_or_skip() else {
        return;
    };
    // No pre-allocation: the next write command must be the flush's.
    // Day documents are sealed once the hour closes: the next write
    // command is the flush's own.
    let mut d =
        Daemon::start_async(store.opts("300ms").env("TALLYD_PREALLOC_ENABLED", "false")).await;
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
    store.check_stored(&all).await;
    let (from, to) = range_around(t0);
    check_reads(&d, &all, from, to).await;

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    store.check_sealed(&all).await;
    sigterm_and_exit(&mut d).await;
}
