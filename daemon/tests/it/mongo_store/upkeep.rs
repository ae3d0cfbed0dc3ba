//! The store's upkeep beside the flushes: a day boundary whose
//! pre-allocation failed for its last 15 minutes stalls no flush (the
//! flushes upsert what is missing while pre-allocation retries and seals
//! run beside them), and feature probes answered with codes no server is
//! expected to use mark the features missing instead of stopping the
//! store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally::model::{DocKey, Resolution, SeriesId, Tier, DAY_S, HOUR_S};
use tally::store::mongodb::{Feature, MongoStore};
use tally::store::Store;
use tally_testkit::mongo::mongo_target;
use tokio_util::sync::CancellationToken;

use super::{batch, config, read, series, LONG_RETENTION};

/// 2026-11-04 00:00 UTC.
const MIDNIGHT: i64 = 1_793_750_400;
/// The real time between two flushes of the simulated run.
const INTERVAL: Duration = Duration::from_secs(1);
/// The simulated time between two flushes.
const STEP_S: i64 = 30;
/// The server's answer to an operation that ran out of time.
const MAX_TIME_MS_EXPIRED: i32 = 50;

fn names(n: usize, prefix: &str) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

/// The documents a maintenance tick pre-allocates before midnight: the
/// next day's and the first hour's of it.
fn next_period_keys(sources: &[String]) -> Vec<DocKey> {
    sources
        .iter()
        .flat_map(|s| {
            [Tier::Hour, Tier::Day].map(|tier| DocKey {
                series: SeriesId::new(s, "m"),
                tier,
                period_start: MIDNIGHT,
            })
        })
        .collect()
}

/// From 23:45 to 00:04 (simulated), one flush every 30 s carries one
/// sample per series; inserts fail from 23:45 until midnight, so the next
/// day's pre-allocation fails all along, and the upkeep (seals, the day
/// documents first seen) and pre-allocation retries run beside the flushes
/// as the daemon runs them. No flush waits for any of it: the longest gap
/// between two flushes stays within two intervals, no flush sends an
/// insert, and every sample counts once in both tiers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_boundary_with_preallocation_failing_stalls_no_flush() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let sources = names(40, "edge");
    let store = Arc::new(
        MongoStore::connect(&config(&target, &target.database), LONG_RETENTION, "w-edge")
            .await
            .unwrap(),
    );
    // Inserts time out on the server from 23:45, before anything is
    // pre-allocated, as in the run this reproduces. (A state-change code
    // such as 91 would make the driver clear its pool and fail the
    // flushes in flight too: a server going down, not this fault.)
    standin.fail_inserts(Some(MAX_TIME_MS_EXPIRED));
    let stop = CancellationToken::new();
    let beside = {
        let (store, stop, keys) = (store.clone(), stop.clone(), next_period_keys(&sources));
        tokio::spawn(async move {
            let mut failed = 0u32;
            while !stop.is_cancelled() {
                // Pre-allocation retried with backoff, and the upkeep.
                if store.preallocate(&keys).await.is_err() {
                    failed += 1;
                }
                let _ = store.upkeep().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            failed
        })
    };

    let start = MIDNIGHT - 15 * 60;
    let steps = (19 * 60 / STEP_S) as usize;
    let began = Instant::now();
    let mut last_done: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    for step in 0..steps {
        let t = start + step as i64 * STEP_S;
        let failing = (MIDNIGHT - 15 * 60..MIDNIGHT).contains(&t);
        standin.fail_inserts(failing.then_some(MAX_TIME_MS_EXPIRED));
        tokio::time::sleep_until((began + INTERVAL * step as u32).into()).await;
        let samples: Vec<_> = sources
            .iter()
            .map(|s| series(s, "m", &[(t, 1.0)]))
            .collect();
        let b = batch((t + 1) as u64 * 1_000_000, &samples);
        let stats = store.apply(&b).await.unwrap();
        assert_eq!(stats.documents_written, sources.len(), "flush at {t}");
        let done = Instant::now();
        if let Some(prev) = last_done {
            longest = longest.max(done - prev);
        }
        last_done = Some(done);
    }
    stop.cancel();
    let failed = beside.await.unwrap();
    standin.fail_inserts(None);
    println!(
        "{steps} flushes across midnight, pre-allocation failed {failed} times; longest gap {longest:?}; {:?}",
        store.stats()
    );
    assert!(
        failed > 0,
        "pre-allocation was meant to fail before midnight"
    );
    assert!(
        longest <= 2 * INTERVAL,
        "a flush waited: longest gap {longest:?}"
    );
    assert!(
        store.stats().fallback_upserts > 0,
        "the boundary's documents were upserted"
    );

    // Every sample once, in the hour and in the day documents.
    store.close().await.unwrap();
    let want = steps as u64;
    for s in &sources {
        for tier in [Tier::Hour, Tier::Day] {
            let docs = read(
                &*store,
                s,
                "m",
                tier,
                Resolution::Minute,
                start - DAY_S,
                start + DAY_S,
            )
            .await;
            let n: u64 = docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
            assert_eq!(n, want, "{s} {tier:?}");
        }
        let days = read(
            &*store,
            s,
            "m",
            Tier::Day,
            Resolution::Day,
            start - DAY_S,
            start + DAY_S,
        )
        .await;
        let n: u64 = days.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
        assert_eq!(n, want, "{s}: day totals");
    }
    target.cleanup().await;
}

/// Every probe answered with an error code a server is not expected to
/// use (or a transient one, for longer than the probes wait): the store
/// starts, marks every feature missing, falls back, and stores exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answered_with_unexpected_codes_fall_back() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    for (i, code) in [2, 9, 14, 72, 20, 12345, 91].into_iter().enumerate() {
        standin.probe_code(Some(code));
        let writer = format!("w-probe-{i}");
        let store =
            MongoStore::connect(&config(&target, &target.database), LONG_RETENTION, &writer)
                .await
                .unwrap();
        assert_eq!(store.last_flush_id().await.unwrap(), 0, "code {code}");
        let source = format!("probe-{i}");
        let t = MIDNIGHT - HOUR_S + 30;
        let b = batch(
            1_000 + i as u64,
            &[series(&source, "m", &[(t, 2.0), (t + 1, 4.0)])],
        );
        // A transient answer is tried again for a few first contacts.
        let mut tries = 0;
        while let Err(e) = store.apply(&b).await {
            tries += 1;
            assert!(e.is_retryable() && tries < 10, "code {code}: {e:?}");
        }
        let mut missing = store.missing_features();
        missing.sort_by_key(|f| f.as_str());
        let mut all = Feature::ALL.to_vec();
        all.sort_by_key(|f| f.as_str());
        assert_eq!(missing, all, "code {code}");
        store.close().await.unwrap();
        let docs = read(
            &store,
            &source,
            "m",
            Tier::Day,
            Resolution::Minute,
            t - 60,
            t + 60,
        )
        .await;
        let n: u64 = docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
        assert_eq!(n, 2, "code {code}");
    }
    standin.probe_code(None);
    target.cleanup().await;
}
