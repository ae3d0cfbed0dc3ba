//! Load on two real daemons, one per store, to take the scrapes the
//! dashboard is checked against: every metric the dashboard queries must
//! exist in one of them, so the MongoDB daemon is also taken through a
//! store outage and a refused flush (on the stand-in).

use std::sync::OnceLock;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{http_get, now_ms, series, within};
use tally_testkit::metrics::metrics_text;
use tally_testkit::mongo::{mongo_target, MongoTarget};
use tally_testkit::Daemon;
use tonic::transport::Channel;

use super::scrape::{metric_value, Scrape};
use super::SETTLE_TIMEOUT;
use crate::tallyd;

/// Polls `/metrics` until `done` holds for it; panics after
/// [`SETTLE_TIMEOUT`] naming `what`.
pub(super) async fn wait_metrics(d: &Daemon, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    loop {
        let m = metrics_text(d).await;
        if done(&m) {
            return m;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("{what}: not within {SETTLE_TIMEOUT:?}\n{m}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until more than `flushes` flushes were applied and nothing is
/// pending or in flight.
pub(super) async fn wait_flushed(d: &Daemon, flushes: f64) -> String {
    wait_metrics(
        d,
        &format!("more than {flushes} flushes, all applied"),
        |m| {
            metric_value(m, "tally_flushes_total").unwrap_or(0.0) > flushes
                && metric_value(m, "tally_pending_slots") == Some(0.0)
                && metric_value(m, "tally_flush_inflight_batches").unwrap_or(0.0) == 0.0
        },
    )
    .await
}

/// One push of good samples (a gauge, a delta counter, a cumulative counter
/// going down once: a reset) and bad ones (an invalid metric name, an infinity),
/// so the labelled ingest counters exist. `round` keeps pushes distinct;
/// each push is newer than the last (counters must not go back in time).
pub(super) async fn push_load(client: &mut pb::ingest_client::IngestClient<Channel>, round: u32) {
    let t = now_ms() - 2_000;
    let mut batch = Vec::new();
    for host in 0..5 {
        let source = format!("dash-host-{host}");
        let v = f64::from(round);
        batch.push(pb::SourceBatch {
            source,
            series: vec![
                series(
                    "cpu.load",
                    pb::SampleKind::Gauge,
                    &[(t - 1_000, v + 0.5), (t, v + 1.5)],
                ),
                series("ops", pb::SampleKind::DeltaCounter, &[(t, 3.0)]),
                series(
                    "net.bytes_in",
                    pb::SampleKind::CumulativeCounter,
                    &[(t - 2, 1_000.0), (t - 1, 1_200.0), (t, 40.0)],
                ),
                series("bad metric!", pb::SampleKind::Gauge, &[(t, 1.0)]),
                series("mem.free", pb::SampleKind::Gauge, &[(t, f64::INFINITY)]),
            ],
            groups: Vec::new(),
        });
    }
    let resp = within("Push", client.push(pb::PushRequest { sources: batch }))
        .await
        .unwrap_or_else(|s| panic!("Push failed: {s:?}"))
        .into_inner();
    assert_eq!(resp.accepted, 5 * 6, "{resp:?}");
    assert_eq!(resp.rejected, 5 * 2, "{resp:?}");
}

/// A range read over HTTP, so the query and store-read metrics exist.
pub(super) async fn range_read(d: &Daemon) {
    let (status, body) = http_get(
        d,
        "/api/v1/range?source=dash-host-0&metric=cpu.load&from=now-10m&step=1m",
    )
    .await;
    assert_eq!(status, 200, "range read: {body}");
}

/// The embedded store under load, flushed.
pub(super) async fn embedded_scrape() -> Scrape {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let mut client = d.ingest_client().await;
    push_load(&mut client, 1).await;
    wait_flushed(&d, 0.0).await;
    range_read(&d).await;
    push_load(&mut client, 2).await;
    wait_flushed(&d, 1.0).await;
    Scrape::parse("embedded", &metrics_text(&d).await)
}

/// The MongoDB store under load; on the stand-in also through an outage
/// (store errors, deferred flush ticks) and a flush the store refuses
/// (dropped). Returns the scrape and whether the faults were injected.
pub(super) async fn mongodb_scrape() -> (Scrape, bool) {
    let target = mongo_target().await;
    let scrape = mongodb_load(&target).await;
    target.cleanup().await;
    (scrape, target.standin().is_some())
}

pub(super) async fn mongodb_load(target: &MongoTarget) -> Scrape {
    // Server selection gives up sooner while the stand-in is down.
    let opts = tallyd()
        .mongodb(&target.uri_selecting_within(1000), &target.database)
        // One flush in flight at most, so an outage defers the next ticks;
        // no pre-allocation, so the next write after `fail_next` is a flush.
        .env("TALLYD_FLUSH_QUEUE_DEPTH", "1")
        .env("TALLYD_PREALLOC_ENABLED", "false")
        .env("TALLYD_FLUSH_RETRY_MAX_BACKOFF", "200ms")
        .flush_interval("100ms");
    let d = Daemon::start_async(opts).await;
    let mut client = d.ingest_client().await;
    push_load(&mut client, 1).await;
    wait_flushed(&d, 0.0).await;
    range_read(&d).await;

    if let Some(standin) = target.standin() {
        // An outage: the flush fails (and is retried), later ticks defer.
        standin.set_down(true);
        push_load(&mut client, 2).await;
        wait_metrics(&d, "store errors and deferred flush ticks", |m| {
            metric_value(m, "tally_store_errors_total").unwrap_or(0.0) > 0.0
                && metric_value(m, "tally_flush_deferred_total").unwrap_or(0.0) > 0.0
        })
        .await;
        standin.set_down(false);
        let m = wait_flushed(&d, 1.0).await;
        let flushes = metric_value(&m, "tally_flushes_total").unwrap_or(0.0);

        // Refusals (BadValue) of some statements: the rest lands, the
        // refused documents are retried, then kept as dead letters. At
        // random, so it is tried again until a document stays refused.
        let mut round = 3;
        while !refuse_a_flush(&d, standin, &mut client, round).await {
            round += 1;
            assert!(
                round < 8,
                "no document was kept as a dead letter in five tries"
            );
        }
        // And the pipeline goes on.
        push_load(&mut client, round + 1).await;
        wait_flushed(&d, flushes).await;
    } else {
        push_load(&mut client, 2).await;
        wait_flushed(&d, 1.0).await;
    }
    Scrape::parse("mongodb", &metrics_text(&d).await)
}

/// Makes the stand-in refuse update statements at random and pushes
/// `round`: whether a refused document was kept as a dead letter within a
/// few seconds (a document is retried a few times first).
async fn refuse_a_flush(
    d: &Daemon,
    standin: &tally_testkit::mongo::Standin,
    client: &mut pb::ingest_client::IngestClient<Channel>,
    round: u32,
) -> bool {
    standin.refuse_updates("random 60");
    push_load(client, round).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut kept = false;
    while !kept && tokio::time::Instant::now() < deadline {
        let m = metrics_text(d).await;
        kept = metric_value(&m, "tally_dead_letters_total").unwrap_or(0.0) >= 1.0;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    standin.refuse_updates("off");
    kept
}

pub(super) struct Scrapes {
    pub(super) embedded: Scrape,
    pub(super) mongodb: Scrape,
    /// Whether the MongoDB daemon went through the injected faults.
    pub(super) faults: bool,
}

/// Both scrapes, taken once per test process and shared by the tests.
pub(super) fn scrapes() -> &'static Scrapes {
    static SCRAPES: OnceLock<Scrapes> = OnceLock::new();
    SCRAPES.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("building a runtime");
        rt.block_on(async {
            let (embedded, (mongodb, faults)) = tokio::join!(embedded_scrape(), mongodb_scrape());
            Scrapes {
                embedded,
                mongodb,
                faults,
            }
        })
    })
}
