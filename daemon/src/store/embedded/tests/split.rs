//! Folds split at the hour (`split.rs`): the new hour's minutes stay
//! pending and out of the file, and whatever the flushes, retries, late
//! samples and crashes around a close, reads equal those of a store that
//! writes every flush straight into its documents; a read racing the
//! close's folds counts every minute once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::{FlushBatch, SampleKind, SeriesId, DAY_S};
use crate::store::embedded::layout::{DAY_SUMMARY, HOUR_DOCS};
use crate::store::embedded::retention::Retention;
use crate::store::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::store::{DocRead, ReadQuery};

const SERIES: [(&str, &str); 3] = [("a", "m"), ("a", "n"), ("b", "m")];

/// A checkpointed store, its close's folds spread over 30 s, a checkpoint
/// every `checkpoint_s` seconds of flush ids.
fn open_split(dir: &tempfile::TempDir, checkpoint_s: u64) -> EmbeddedStore {
    open_split_within(dir, checkpoint_s, 64 << 20)
}

/// [`open_split`], folding early past `max_bytes` of pending minutes.
fn open_split_within(
    dir: &tempfile::TempDir,
    checkpoint_s: u64,
    max_bytes: usize,
) -> EmbeddedStore {
    let config = EmbeddedConfig {
        fold_spread: Duration::from_secs(30),
        ..checkpointed(checkpoint_s * 1_000_000, max_bytes)
    };
    EmbeddedStore::open_with(dir.path(), config).unwrap()
}

/// Flush ids count microseconds, as the pipeline numbers them.
fn id_at(t: i64) -> u64 {
    t as u64 * 1_000_000
}

#[derive(Debug, Clone)]
enum Step {
    /// Time moves on this many seconds, then a flush: per series, samples
    /// as (seconds before the flush, value).
    Flush(i64, Vec<(usize, Vec<(i64, i32)>)>),
    /// The `k`-th earlier flush again (a retry after an ambiguous failure).
    Replay(usize),
    /// A crash: reopen, and the write-ahead log replays what the file did
    /// not hold durably.
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    let late = prop_oneof![4 => Just(0i64), 2 => 1i64..70, 1 => 70i64..200];
    let samples = prop::collection::vec((late, -50i32..50), 1..3);
    let flush = (
        prop_oneof![Just(5i64), Just(15), Just(35)],
        prop::collection::vec((0..SERIES.len(), samples), 1..4),
    )
        .prop_map(|(dt, parts)| Step::Flush(dt, parts));
    prop_oneof![
        8 => flush,
        1 => (0usize..30).prop_map(Step::Replay),
        1 => Just(Step::Crash),
    ]
}

fn make_batch(at: i64, parts: &[(usize, Vec<(i64, i32)>)]) -> FlushBatch {
    let mut by_series: Vec<Vec<(i64, f64)>> = vec![Vec::new(); SERIES.len()];
    for (s, samples) in parts {
        for &(ago, v) in samples {
            by_series[*s].push((at - ago, f64::from(v)));
        }
    }
    gauge_batch(id_at(at), &SERIES, &by_series)
}

/// Every read of the case's series around `t0`, without watermarks.
fn all_reads(store: &EmbeddedStore, t0: i64) -> Vec<String> {
    let mut out = Vec::new();
    for (src, met) in SERIES {
        for (tier, res) in EVERY_READ {
            let q = ReadQuery {
                series: SeriesId::new(src, met),
                tier,
                resolution: res,
                from: t0 - DAY_S,
                to: t0 + DAY_S,
            };
            let docs: Vec<_> = store
                .inner
                .read(&q)
                .unwrap()
                .into_iter()
                .map(|d| (d.period_start, d.kind, d.slots))
                .collect();
            out.push(format!("{src}/{met} {tier:?} {res:?} {docs:?}"));
        }
    }
    out
}

/// The reads that differ, each as (got, want).
fn same(got: Vec<String>, want: Vec<String>, when: &str) {
    let differ: Vec<_> = got.iter().zip(&want).filter(|(g, w)| g != w).collect();
    assert!(differ.is_empty(), "{when}: {differ:#?}");
}

fn run(start: i64, steps: &[Step], checkpoint_s: u64, max_bytes: usize) {
    let (dir, direct_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut store = open_split_within(&dir, checkpoint_s, max_bytes);
    let direct = open_direct(&direct_dir);
    let mut sent: Vec<Arc<FlushBatch>> = Vec::new();
    let mut now = start;
    for step in steps {
        let b = match step {
            Step::Flush(dt, parts) => {
                now += dt;
                let b = Arc::new(make_batch(now, parts));
                sent.push(b.clone());
                b
            }
            Step::Replay(k) if !sent.is_empty() => sent[k % sent.len()].clone(),
            Step::Replay(_) => continue,
            Step::Crash => {
                let durable = store.durable_flush_id();
                drop(store);
                store = open_split_within(&dir, checkpoint_s, max_bytes);
                for b in sent.iter().filter(|b| b.id.0 > durable) {
                    store.inner.apply(b).unwrap();
                }
                same(
                    all_reads(&store, start),
                    all_reads(&direct, start),
                    "after a crash",
                );
                continue;
            }
        };
        store.inner.apply(&b).unwrap();
        direct.inner.apply(&b).unwrap();
        same(
            all_reads(&store, start),
            all_reads(&direct, start),
            &format!("at {now}"),
        );
    }
    store.fold_all().unwrap();
    same(
        all_reads(&store, start),
        all_reads(&direct, start),
        "folded",
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// From 10:58, or 23:58 so that the new hour is a new day too: enough
    /// steps to pass the close, its grace and its spread; with folds to
    /// bring memory down (whole) among the close's (split) at times.
    #[test]
    fn split_folds_read_as_direct_writes_through_retries_late_samples_and_crashes(
        steps in prop::collection::vec(step(), 10..40),
        checkpoint_s in prop_oneof![Just(5u64), Just(20), Just(60)],
        max_bytes in prop_oneof![3 => Just(64usize << 20), 1 => Just(800usize)],
        midnight in any::<bool>(),
    ) {
        let start = if midnight { ts(2026, 3, 14, 23, 58) } else { ts(2026, 3, 14, 10, 58) };
        run(start, &steps, checkpoint_s, max_bytes);
    }
}

/// Flushes every 10 s from 10:58 to 11:03:50, one sample each per series:
/// the close's folds are split by the end.
fn across_the_close(store: &EmbeddedStore) -> Vec<Arc<FlushBatch>> {
    let mut sent = Vec::new();
    for k in 0..36 {
        let at = ts(2026, 3, 14, 10, 58) + 10 * k;
        let all = SERIES
            .iter()
            .map(|(src, met)| series(src, met, SampleKind::Gauge, &[(at, 1.0)]))
            .collect();
        let b = Arc::new(batch(id_at(at), all));
        store.inner.apply(&b).unwrap();
        sent.push(b);
    }
    sent
}

/// The samples of a/m that each read of the day finds.
fn counts(store: &EmbeddedStore) -> Vec<u64> {
    let day = ts(2026, 3, 14, 0, 0);
    EVERY_READ
        .iter()
        .map(|&(tier, res)| {
            let q = ReadQuery {
                series: SeriesId::new("a", "m"),
                tier,
                resolution: res,
                from: day,
                to: day + DAY_S,
            };
            let docs = store.inner.read(&q).unwrap();
            docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum()
        })
        .collect()
}

/// A crash: the store opened again, and every flush above its durable
/// point replayed.
fn crash(store: EmbeddedStore, dir: &tempfile::TempDir, sent: &[Arc<FlushBatch>]) -> EmbeddedStore {
    let durable = store.durable_flush_id();
    drop(store);
    let store = open_split(dir, 60);
    for b in sent.iter().filter(|b| b.id.0 > durable) {
        store.inner.apply(b).unwrap();
    }
    store
}

/// The close's folds write 10:00 and leave 11:00 pending, out of the file;
/// reads count every sample once, after a crash too.
#[test]
fn the_close_folds_the_closed_hour_and_leaves_the_new_one_pending() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_split(&dir, 60);
    let sent = across_the_close(&store);
    let (ten, eleven, day) = (
        ts(2026, 3, 14, 10, 0),
        ts(2026, 3, 14, 11, 0),
        ts(2026, 3, 14, 0, 0),
    );
    for (src, met) in SERIES {
        assert!(raw_len(&store, HOUR_DOCS, (ten, src, met)).is_some());
        assert!(
            raw_len(&store, HOUR_DOCS, (eleven, src, met)).is_none(),
            "{src}/{met}: the new hour was written"
        );
        let hours: Vec<u8> = raw_blocks(&store, src, met, day)
            .iter()
            .map(|b| b.0)
            .collect();
        assert_eq!(hours, [10], "{src}/{met}: minute blocks");
    }
    assert_eq!(counts(&store), [36; 5]);
    let store = crash(store, &dir, &sent);
    assert_eq!(counts(&store), [36; 5], "after a crash");
    assert!(raw_len(&store, DAY_SUMMARY, (day, "a", "m")).is_some());
}

/// The closed hour's document outlives its retention while what a split
/// left is pending: the checkpoints before the split rely on it after a
/// crash. Folded, it goes.
#[test]
fn the_sweep_keeps_the_closed_hour_while_its_split_run_is_pending() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_split(&dir, 60);
    let sent = across_the_close(&store);
    let ten = ts(2026, 3, 14, 10, 0);
    let (later, hour) = (
        ts(2026, 3, 15, 12, 0),
        Retention {
            hour_s: 3600,
            day_s: 400 * DAY_S,
        },
    );
    store.inner.sweep_expired(later, hour).unwrap();
    assert!(raw_len(&store, HOUR_DOCS, (ten, "a", "m")).is_some());
    let store = crash(store, &dir, &sent);
    store.inner.sweep_expired(later, hour).unwrap();
    let store = crash(store, &dir, &sent);
    assert_eq!(counts(&store), [36, 36, 36, 36, 36], "after two crashes");
    store.fold_all().unwrap();
    store.inner.sweep_expired(later, hour).unwrap();
    assert!(raw_len(&store, HOUR_DOCS, (ten, "a", "m")).is_none());
    let store = crash(store, &dir, &sent);
    // The hour tier has nothing left of that day; the day tier all of it.
    assert_eq!(counts(&store)[2..], [36, 36, 36]);
}

/// A split fold written twice (its commit reported an error, yet landed,
/// and the fold is tried again) writes its documents once.
#[test]
fn a_split_fold_tried_again_after_it_landed_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_split(&dir, 3600);
    let t = |m: i64| ts(2026, 3, 14, 10, 59) + m * 20;
    for k in 0..6 {
        let b = batch(
            id_at(t(k)),
            vec![series("a", "m", SampleKind::Gauge, &[(t(k), 1.0)])],
        );
        store.inner.apply(&Arc::new(b)).unwrap();
    }
    let db = store.inner.database().unwrap();
    let eleven = ts(2026, 3, 14, 11, 0) / 60;
    let mut folds = store.inner.pending.lock().start_fold(1, Some(eleven));
    assert!(folds[0].split.is_some(), "{folds:?}");
    let again = folds.clone();
    for f in [&mut folds, &mut again.clone()] {
        let txn = db.begin_write().unwrap();
        crate::store::embedded::fold::write_folds(&txn, f, &mut None).unwrap();
        txn.commit().unwrap();
    }
    assert!(folds[0].split.is_some(), "still split");
    store.inner.pending.lock().end_fold(&folds);
    drop(db);
    assert_eq!(counts(&store), [6; 5]);
}

/// One sample per flush into the flush's own minute, across the close:
/// a read's count lies between the flushes applied before it began and
/// those applied when it ended, whatever fold it races.
#[test]
fn reads_racing_the_close_count_every_minute_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_split(&dir, 20);
    let day = ts(2026, 3, 14, 0, 0);
    let applied = Arc::new(AtomicU64::new(0));
    let others: Vec<_> = (0..6).map(|i| format!("o{i}")).collect();
    let writer = {
        let (store, applied) = (store.clone(), applied.clone());
        std::thread::spawn(move || {
            for k in 0..240 {
                let at = ts(2026, 3, 14, 10, 59) + k;
                let mut all = vec![series("a", "m", SampleKind::Gauge, &[(at, 1.0)])];
                all.extend(
                    others
                        .iter()
                        .map(|o| series(o, "m", SampleKind::Gauge, &[(at, 1.0)])),
                );
                store.inner.apply(&Arc::new(batch(id_at(at), all))).unwrap();
                applied.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    read_while(writer, |tier, res| {
        let before = applied.load(Ordering::SeqCst);
        let docs: Vec<DocRead> = store
            .inner
            .read(&ReadQuery {
                series: SeriesId::new("a", "m"),
                tier,
                resolution: res,
                from: day,
                to: day + DAY_S,
            })
            .unwrap();
        let after = applied.load(Ordering::SeqCst);
        let n: u64 = docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum();
        // A flush's minutes are readable just before it is counted.
        assert!(
            before <= n && n <= after + 1,
            "{tier:?} {res:?}: {n} not in {before}..={after}: {docs:?}"
        );
    });
}

/// A fold whose commit reported an error: the reopen that follows looks
/// whether it landed. If it did, its series are folded (what the split
/// left goes on), and their minutes count once however the run grows
/// before the next fold; if not, they are folded again.
#[test]
fn a_fold_whose_commit_failed_is_ended_if_it_landed() {
    for landed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_split(&dir, 3600);
        let t = |k: i64| ts(2026, 3, 14, 10, 59) + k * 20;
        let flush = |k: i64| {
            let b = batch(
                id_at(t(k)),
                vec![series("a", "m", SampleKind::Gauge, &[(t(k), 1.0)])],
            );
            store.inner.apply(&Arc::new(b)).unwrap();
        };
        // 10:59:00 to 11:00:40: nothing is due yet.
        (0..6).for_each(flush);
        let db = store.inner.database().unwrap();
        let eleven = ts(2026, 3, 14, 11, 0) / 60;
        let mut folds = store.inner.pending.lock().start_fold(1, Some(eleven));
        assert!(folds[0].split.is_some(), "{folds:?}");
        let txn = db.begin_write().unwrap();
        crate::store::embedded::fold::write_folds(&txn, &mut folds, &mut None).unwrap();
        if landed {
            txn.commit().unwrap();
        } else {
            txn.abort().unwrap();
        }
        drop(db);
        store.inner.pending.lock().abort_fold(&folds);
        *store.inner.unsure_fold.lock() = folds;
        *store.inner.io_failure.lock() = Some(StoreError::Unavailable("a failed commit".into()));
        store.inner.reopen_if_needed().unwrap();
        // The run grows, and the close's folds come, then all of them.
        (6..12).for_each(flush);
        store.fold_all().unwrap();
        assert_eq!(counts(&store), [12; 5], "landed: {landed}");
    }
}
