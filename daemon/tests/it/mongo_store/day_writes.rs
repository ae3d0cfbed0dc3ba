//! Day documents written about once per `mongodb.day_write_delay`: how
//! many statements a flush sends in steady state and across hour and day
//! boundaries, and that every day document ends up with exactly its hours'
//! minutes after a drain, a clean close, or a crash and the replay that
//! follows it.

use std::time::Duration;

use mongodb::bson::{Bson, Document};
use tally::model::{DocKey, FlushBatch, Resolution, SeriesId, SeriesMinutes, Tier, DAY_S, HOUR_S};
use tally::store::mongodb::MongoStore;
use tally::store::Store;
use tally_testkit::mongo::{MongoTarget, TargetKind};

use super::{batch, config, raw_doc, read, series, DAYS, HOURS, LONG_RETENTION};

per_mongo_target!(
    statements_per_flush_in_steady_state_and_at_boundaries,
    a_crash_replays_what_the_day_documents_lack
);

/// 2026-11-03 00:00 UTC: a midnight, so one hour before it is an hour
/// boundary inside a day and it is a day boundary.
const MIDNIGHT: i64 = 1_793_664_000;
/// Flush ids are wall-clock microseconds: flushes one second apart.
const FLUSH_0: u64 = 1_900_000_000_000_000;
const DELAY: Duration = Duration::from_secs(60);

fn flush_id(i: u64) -> u64 {
    FLUSH_0 + i * 1_000_000
}

fn names(n: usize, prefix: &str) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

/// Flush `i`: one sample (value 1) per source at each of `at`.
fn flush(i: u64, sources: &[String], at: &[i64]) -> FlushBatch {
    let samples: Vec<(i64, f64)> = at.iter().map(|&t| (t, 1.0)).collect();
    let all: Vec<SeriesMinutes> = sources.iter().map(|s| series(s, "m", &samples)).collect();
    batch(flush_id(i), &all)
}

async fn store_with(target: &MongoTarget, writer: &str) -> MongoStore {
    let cfg = tally::config::MongoDbConfig {
        day_write_delay: DELAY,
        ..config(target, &target.database)
    };
    MongoStore::connect(&cfg, LONG_RETENTION, writer)
        .await
        .unwrap()
}

/// Pre-allocates the documents the flushes touch, so statement counts are
/// updates alone.
async fn preallocate(store: &MongoStore, sources: &[String], hours: &[i64]) {
    let mut keys = Vec::new();
    for s in sources {
        let series = SeriesId::new(s, "m");
        for &h in hours {
            for (tier, start) in [(Tier::Hour, h), (Tier::Day, h.div_euclid(DAY_S) * DAY_S)] {
                keys.push(DocKey {
                    series: series.clone(),
                    tier,
                    period_start: start,
                });
            }
        }
    }
    keys.sort_by_key(|k| (k.series.key(), k.tier == Tier::Day, k.period_start));
    keys.dedup();
    store.preallocate(&keys).await.unwrap();
}

/// Applies `b` and returns the update statements it sent.
async fn updates_of(store: &MongoStore, b: &FlushBatch) -> u64 {
    let before = store.stats().update_statements;
    store.apply(b).await.unwrap();
    store.stats().update_statements - before
}

/// With N series at one sample a second and a 60 s delay, every flush sends
/// N hour statements and the day statements of ceil(waiting / 60) series:
/// N + 2 for N = 120. A flush whose minutes lie in two hours sends 2N hour
/// statements; a day statement whose minutes lie in two days is two.
async fn statements_per_flush_in_steady_state_and_at_boundaries(target: MongoTarget) {
    let n = if target.kind == TargetKind::FerretDb {
        12
    } else {
        120
    };
    let sources = names(n, "steady");
    let store = store_with(&target, "w-steady").await;
    let hour = MIDNIGHT - HOUR_S;
    preallocate(&store, &sources, &[hour - HOUR_S, hour, MIDNIGHT]).await;
    // ceil((n - share) / 60): the series folded by a flush wait again only
    // from the next one.
    let share: u64 = if n == 120 { 2 } else { 1 };

    // Across 23:00, inside one day: exact counts.
    let first = updates_of(&store, &flush(0, &sources, &[hour - 45])).await;
    assert_eq!(first, n as u64, "the first flush: hour documents only");
    let mut total = first;
    for i in 1..=90u64 {
        let t = hour - 45 + i as i64;
        let (at, hours) = if i == 45 {
            (vec![t - 1, t], 2)
        } else {
            (vec![t], 1)
        };
        let sent = updates_of(&store, &flush(i, &sources, &at)).await;
        assert_eq!(sent, hours * n as u64 + share, "flush {i} at {t}");
        total += sent;
    }
    let ratio = total as f64 / (91 * n) as f64;
    assert!(ratio <= 1.1, "{ratio:.3} statements per series per flush");
    println!("{n} series, 91 flushes across an hour boundary: {ratio:.4} statements per series per flush");

    // Across midnight: folds holding minutes of both days write two day
    // documents.
    for i in 91..=200u64 {
        let t = MIDNIGHT - 45 + (i as i64 - 91);
        let (at, hours) = if t == MIDNIGHT {
            (vec![t - 1, t], 2)
        } else {
            (vec![t], 1)
        };
        let sent = updates_of(&store, &flush(i, &sources, &at)).await;
        let days = sent - hours * n as u64;
        let most = if t >= MIDNIGHT { 2 * share } else { share };
        assert!(
            (share..=most).contains(&days),
            "flush {i} at {t}: {sent} statements"
        );
    }

    // Reads merge what waits; after a drain the documents hold it.
    check_day_reads_equal_hour_reads(&store, &sources, hour - HOUR_S, MIDNIGHT + HOUR_S).await;
    assert!(store.sync_idle().await.unwrap().is_some());
    for s in &sources {
        check_day_doc_equals_hours(&target, s, &[hour, MIDNIGHT]).await;
    }
    target.cleanup().await;
}

/// Store A applies flushes and dies without closing: the day parts that
/// waited are lost with it, and the flushes they came from are not
/// complete. Store B, as a restarted daemon does, replays the flushes after
/// the complete point and closes: every day document equals its hours, and
/// no minute counts twice.
async fn a_crash_replays_what_the_day_documents_lack(target: MongoTarget) {
    for (variant, asks_last_flush_id) in [("a", true), ("b", false)] {
        let sources = names(5, &format!("crash-{variant}"));
        let writer = format!("w-crash-{variant}");
        let hour = MIDNIGHT - 3 * HOUR_S;
        let flushes: Vec<FlushBatch> = (0..30u64)
            .map(|i| flush(i, &sources, &[hour + 30 + 7 * i as i64]))
            .collect();

        let a = store_with(&target, &writer).await;
        for b in &flushes {
            a.apply(b).await.unwrap();
        }
        // Something waits, and the durable point says so.
        let last = flushes.last().map(|b| b.id.0).unwrap_or(0);
        assert!(a.durable_through(last) < last);
        drop(a);

        let b = store_with(&target, &writer).await;
        let complete = b.complete_flush_id().await.unwrap();
        assert!(complete < last, "{complete} must be before {last}");
        if asks_last_flush_id {
            b.last_flush_id().await.unwrap();
        }
        for f in flushes.iter().filter(|f| f.id.0 > complete) {
            b.apply(f).await.unwrap();
        }
        b.close().await.unwrap();
        assert_eq!(b.complete_flush_id().await.unwrap(), last);

        for s in &sources {
            check_day_doc_equals_hours(&target, s, &[hour]).await;
            let day = MIDNIGHT - DAY_S;
            let docs = read(&b, s, "m", Tier::Day, Resolution::Day, day, MIDNIGHT).await;
            let n: u64 = docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
            assert_eq!(n, 30, "{s}: every sample once");
        }
    }
    target.cleanup().await;
}

/// Replies lost after a flush's hour and day commands were applied: the
/// retry plans the same day writes again (the waiting series go back to
/// the front of the queue), so the day documents skip them as applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_of_day_writes_count_once() {
    let target = tally_testkit::mongo::mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: fault injection needs the stand-in; skipped against MONGODB_URI");
        return;
    };
    let sources = names(4, "lost");
    let store = store_with(&target, "w-lost").await;
    let hour = MIDNIGHT - 5 * HOUR_S;
    for i in 0..40u64 {
        let b = flush(i, &sources, &[hour + 60 + i as i64]);
        if i % 10 == 5 {
            standin.drop_after_apply(1 + (i % 20 == 5) as u32).await;
            assert!(store.apply(&b).await.is_err(), "flush {i}");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while let Err(e) = store.apply(&b).await {
            assert!(
                e.is_retryable() && std::time::Instant::now() < deadline,
                "{e:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    store.close().await.unwrap();
    for s in &sources {
        check_day_doc_equals_hours(&target, s, &[hour]).await;
        let docs = read(
            &store,
            s,
            "m",
            Tier::Day,
            Resolution::Hour,
            hour,
            hour + HOUR_S,
        )
        .await;
        let n: u64 = docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
        assert_eq!(n, 40, "{s}: every sample once");
    }
    target.cleanup().await;
}

/// A day read of every minute in `[from, to)` gives what the hour
/// documents give: the store merges what waits.
async fn check_day_reads_equal_hour_reads(
    store: &MongoStore,
    sources: &[String],
    from: i64,
    to: i64,
) {
    for s in sources {
        let of = |docs: Vec<tally::store::DocRead>| -> Vec<_> {
            docs.into_iter().flat_map(|d| d.slots).collect()
        };
        let hours = of(read(store, s, "m", Tier::Hour, Resolution::Minute, from, to).await);
        let days = of(read(store, s, "m", Tier::Day, Resolution::Minute, from, to).await);
        assert!(!hours.is_empty(), "{s}");
        assert_eq!(days, hours, "{s}");
    }
}

/// The stored day document of `source` holds, for each of `hours`, exactly
/// the hour document's minute slots and running slot.
async fn check_day_doc_equals_hours(target: &MongoTarget, source: &str, hours: &[i64]) {
    for &h in hours {
        let key = |t: i64, fmt: &str| {
            chrono::DateTime::from_timestamp(t, 0)
                .map(|d| d.format(fmt).to_string())
                .unwrap_or_default()
        };
        let hour_id = format!("{source}|m|{}", key(h, "%Y%m%d%H"));
        let day_id = format!("{source}|m|{}", key(h, "%Y%m%d"));
        let hour_doc = raw_doc(target, HOURS, &hour_id).await.unwrap();
        let day_doc = raw_doc(target, DAYS, &day_id).await.unwrap();
        let hour_index = ((h.rem_euclid(DAY_S)) / HOUR_S).to_string();
        let block = day_doc
            .get_document("values")
            .and_then(|v| v.get_document(&hour_index))
            .unwrap();
        let minutes = hour_doc.get_document("values").unwrap();
        for m in 0..60 {
            let m = m.to_string();
            assert_eq!(
                slot_of(block.get(&m)),
                slot_of(minutes.get(&m)),
                "{day_id} values.{hour_index}.{m}"
            );
        }
        assert_eq!(
            slot_of(block.get("total")),
            slot_of(hour_doc.get("total")),
            "{day_id} values.{hour_index}.total"
        );
    }
}

/// A stored slot's count and sum: `min`/`max` of an empty slot differ by
/// server, and a count of 0 says empty either way.
fn slot_of(v: Option<&Bson>) -> (i64, f64) {
    let d: Option<&Document> = v.and_then(Bson::as_document);
    let n = match d.and_then(|d| d.get("n")) {
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Int32(n)) => i64::from(*n),
        _ => 0,
    };
    let sum = d.and_then(|d| d.get_f64("sum").ok()).unwrap_or(0.0);
    (n, sum)
}
