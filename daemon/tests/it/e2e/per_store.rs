//! The end-to-end scenarios every store must pass, each run once per store:
//! `<scenario>::embedded` and `<scenario>::mongodb_<target>` on every
//! MongoDB target (the stand-in, FerretDB on SQLite and on PostgreSQL, the
//! server in `MONGODB_URI`). What a store adds to a scenario (MongoDB's
//! documents read with the driver) is behind [`Store`].

use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::settle::{flushes_so_far, wait_flushed};

use super::check::{
    check_reads, expects, minute_start_ms, range_around, request, restart, sigterm_and_exit,
    Expect, Sent,
};
use super::store::{Store, StoreKind};
use super::{
    fleet, past_first_flush_tick, push_all, push_ok, push_stream_all, standard_series,
    FLEET_SAMPLES, STANDARD_SAMPLES,
};

/// Runs each scenario `async fn <name>(store: Store)` once per store, as the
/// tests `<name>::embedded` and, once per MongoDB target,
/// `<name>::mongodb_standin`, `<name>::mongodb_ferretdb`,
/// `<name>::mongodb_ferretdb_pg` and `<name>::mongodb_uri` (a target not
/// available here prints why and passes).
macro_rules! per_store {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::{Store, StoreKind};

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn embedded() {
                super::$scenario(Store::new(StoreKind::Embedded).await).await;
            }

            mongo_target_tests!($scenario, Store::mongodb);
        }
    )*};
}

per_store!(
    reads_from_memory_then_after_restart_from_the_store_alone,
    reads_after_flushes_and_across_the_store_and_memory_and_restart,
);

/// With a one-hour flush interval nothing reaches the store while the
/// daemon runs, so reads are served from the in-memory accumulators alone:
/// a sample is readable as soon as its Push (or PushStream) is
/// acknowledged, at every step, over both APIs. SIGTERM: the daemon exits 0
/// within the deadline, and the data can only reach the store through the
/// shutdown flush, so identical reads from the restarted daemon (which
/// flushes nothing) on the same data prove that a clean shutdown loses
/// nothing acknowledged.
async fn reads_from_memory_then_after_restart_from_the_store_alone(store: Store) {
    let mut d = store.start("1h").await;
    // Ready: the store (MongoDB too) is up.
    past_first_flush_tick(&d).await;
    let t0 = minute_start_ms(8);
    let standard = standard_series("host-a.example:9100", t0);
    let mut ingest = d.ingest_client().await;
    let resp = push_ok(&mut ingest, request(&standard)).await;
    assert_eq!(
        (resp.accepted, resp.rejected),
        (STANDARD_SAMPLES, 0),
        "{resp:?}"
    );
    assert!(resp.rejections.is_empty(), "{resp:?}");
    let m = metrics_text(&d).await;
    assert_eq!(
        metric(&m, "tally_samples_accepted_total", &[]),
        Some(STANDARD_SAMPLES as f64)
    );
    // The gauges of what is held are current at the scrape, not as of the
    // last flush tick: 4 + 3 + 4 (series, minute) slots in 3 series.
    assert_eq!(metric(&m, "tally_pending_slots", &[]), Some(11.0), "{m}");
    assert_eq!(metric(&m, "tally_series", &[]), Some(3.0), "{m}");
    assert_eq!(
        metric(&m, "tally_flush_inflight_batches", &[]),
        Some(0.0),
        "{m}"
    );

    let unary = fleet("db-01.example:27017", t0);
    let streamed = fleet("db-02", t0);
    push_all(&mut ingest, &unary).await;
    push_stream_all(&mut ingest, &streamed).await;
    drop(ingest);
    let all = expects(&[standard, unary, streamed].concat());
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
        Some((STANDARD_SAMPLES + 2 * FLEET_SAMPLES) as f64)
    );
    // Nothing in the store before the shutdown flush.
    store
        .check_stored(&[Expect::absent("db-01.example:27017", "cpu.load")])
        .await;

    restart(&mut d).await;
    store.check_sealed(&all).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(
        flushes_so_far(&d).await,
        0.0,
        "the restarted daemon flushed nothing: the reads came from the store"
    );
    // And it shuts down cleanly again with nothing to flush.
    sigterm_and_exit(&mut d).await;
    store.cleanup().await;
}

/// The first half of every series.
fn first_halves(sent: &[Sent]) -> Vec<Sent> {
    sent.iter()
        .map(|s| s.part(0..s.samples.len() / 2))
        .collect()
}

/// The second half of every series.
fn second_halves(sent: &[Sent]) -> Vec<Sent> {
    sent.iter()
        .map(|s| s.part(s.samples.len() / 2..s.samples.len()))
        .collect()
}

/// With a 100 ms flush interval: reads once the data is in the store, while
/// one minute's data is split between the store and memory (a second push
/// into minutes already flushed), once everything is flushed again, and
/// after SIGTERM and a restart (the store alone).
async fn reads_after_flushes_and_across_the_store_and_memory_and_restart(store: Store) {
    let mut d = store.start("100ms").await;
    let t0 = minute_start_ms(9);
    let standard = standard_series("host-b", t0);
    let fleets = [fleet("web-1", t0), fleet("web-2", t0)].concat();
    let all = expects(&[standard.clone(), fleets.clone()].concat());
    let (from, to) = range_around(t0);
    {
        let mut ingest = d.ingest_client().await;
        // First half of every series, unary, flushed.
        let r1 = push_ok(&mut ingest, request(&first_halves(&standard))).await;
        assert_eq!((r1.accepted, r1.rejected), (14, 0), "{r1:?}");
        push_all(&mut ingest, &first_halves(&fleets)).await;
        wait_flushed(&d, 1.0, store.flush_timeout()).await;
        let half = expects(&[first_halves(&standard), first_halves(&fleets)].concat());
        check_reads(&d, &half, from, to).await;
        store.check_stored(&half).await;

        // Second half (unary, and streamed): read at once (store + whatever
        // is in memory or in flight).
        let before = flushes_so_far(&d).await;
        let r2 = push_ok(&mut ingest, request(&second_halves(&standard))).await;
        assert_eq!((r2.accepted, r2.rejected), (15, 0), "{r2:?}");
        push_stream_all(&mut ingest, &second_halves(&fleets)).await;
        check_reads(&d, &all, from, to).await;

        // And again once everything is in the store.
        wait_flushed(&d, before + 1.0, store.flush_timeout()).await;
        check_reads(&d, &all, from, to).await;
        store.check_stored(&all).await;
    }
    let m = metrics_text(&d).await;
    assert!(
        m.contains("tally_flush_duration_seconds"),
        "no flush duration metric:\n{m}"
    );

    restart(&mut d).await;
    check_reads(&d, &all, from, to).await;
    assert_eq!(flushes_so_far(&d).await, 0.0, "reads from the store alone");
    store.check_stored(&all).await;
    sigterm_and_exit(&mut d).await;
    store.cleanup().await;
}
