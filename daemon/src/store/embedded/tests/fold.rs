//! Checkpoints and folds: whatever their cadence, replays and crashes
//! (followed by the write-ahead log's replay), reads equal those of a store that writes every flush straight
//! into its documents; and a read racing flushes and folds counts every
//! minute once.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::{FlushBatch, Resolution, SampleKind, SeriesId, Tier, DAY_S};
use crate::store::embedded::{EmbeddedConfig, EmbeddedStore};
use crate::store::{DocRead, ReadQuery, StoreError};

/// Minute offsets from 22:30 on a day: they cross an hour and a day.
const OFFSETS: [i64; 8] = [0, 1, 29, 30, 31, 89, 90, 150];
const SERIES: [(&str, &str); 3] = [("a", "m"), ("a", "n"), ("b", "m")];

fn t0() -> i64 {
    ts(2026, 3, 14, 22, 30)
}

#[derive(Debug, Clone)]
enum Step {
    /// A new flush: per series, samples as (offset index, value).
    Flush(Vec<(usize, Vec<(usize, i32)>)>),
    /// The `k`-th earlier flush again (a retry after an ambiguous failure).
    Replay(usize),
    /// Close and open the store again.
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    let samples = prop::collection::vec((0..OFFSETS.len(), -50i32..50), 1..4);
    let flush = prop::collection::vec((0..SERIES.len(), samples), 1..4).prop_map(Step::Flush);
    prop_oneof![
        6 => flush,
        1 => (0usize..20).prop_map(Step::Replay),
        1 => Just(Step::Reopen),
    ]
}

fn make_batch(id: u64, parts: &[(usize, Vec<(usize, i32)>)]) -> FlushBatch {
    let mut by_series: Vec<Vec<(i64, f64)>> = vec![Vec::new(); SERIES.len()];
    for (s, samples) in parts {
        for &(o, v) in samples {
            by_series[*s].push((t0() + 60 * OFFSETS[o], f64::from(v)));
        }
    }
    gauge_batch(id, &SERIES, &by_series)
}

/// A store writing through with `spread` 1, or checkpointing every
/// `spread` flushes and folding when more than about `spread` series'
/// minutes are pending.
fn open_spread(dir: &tempfile::TempDir, spread: u32) -> EmbeddedStore {
    let config = if spread <= 1 {
        EmbeddedConfig {
            write_through: true,
            ..Default::default()
        }
    } else {
        checkpointed(u64::from(spread), 200 * spread as usize)
    };
    EmbeddedStore::open_with(dir.path(), config).unwrap()
}

/// Every read the store answers about the case's series, without watermarks
/// (they differ by design: a pending watermark covers the whole series).
fn all_reads(store: &EmbeddedStore) -> Vec<(usize, Tier, Resolution, Vec<DocRead>)> {
    let mut out = Vec::new();
    for (i, (src, met)) in SERIES.iter().enumerate() {
        for (tier, res) in EVERY_READ {
            let q = ReadQuery {
                series: SeriesId::new(src, met),
                tier,
                resolution: res,
                from: t0() - DAY_S,
                to: t0() + 2 * DAY_S,
            };
            let docs = store.inner.read(&q).unwrap();
            out.push((i, tier, res, docs));
        }
    }
    out
}

fn strip(reads: &[(usize, Tier, Resolution, Vec<DocRead>)]) -> Vec<String> {
    reads
        .iter()
        .map(|(i, tier, res, docs)| {
            let docs: Vec<_> = docs
                .iter()
                .map(|d| (d.period_start, d.kind, d.slots.clone()))
                .collect();
            format!("{i} {tier:?} {res:?} {docs:?}")
        })
        .collect()
}

fn run(steps: &[Step], spread: u32) {
    let (dir, direct_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut store = open_spread(&dir, spread);
    let direct = open_direct(&direct_dir);
    let mut sent: Vec<Arc<FlushBatch>> = Vec::new();
    for step in steps {
        let b = match step {
            Step::Flush(parts) => {
                let b = Arc::new(make_batch(sent.len() as u64 + 1, parts));
                sent.push(b.clone());
                b
            }
            Step::Replay(k) if !sent.is_empty() => sent[k % sent.len()].clone(),
            Step::Replay(_) => continue,
            Step::Reopen => {
                // A crash: what the file does not hold durably comes back
                // from the write-ahead log, which replays every flush above
                // the store's durable id.
                let durable = store.durable_flush_id();
                drop(store);
                store = open_spread(&dir, spread);
                for b in sent.iter().filter(|b| b.id.0 > durable) {
                    store.inner.apply(b).unwrap();
                }
                continue;
            }
        };
        store.inner.apply(&b).unwrap();
        direct.inner.apply(&b).unwrap();
        let (got, want) = (all_reads(&store), all_reads(&direct));
        assert_eq!(strip(&got), strip(&want));
        for ((_, _, _, g), (_, _, _, w)) in got.iter().zip(&want) {
            for (g, w) in g.iter().zip(w) {
                assert!(g.watermark >= w.watermark, "{g:?} holds less than {w:?}");
            }
        }
    }
    store.fold_all().unwrap();
    assert_eq!(strip(&all_reads(&store)), strip(&all_reads(&direct)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn folded_reads_equal_direct_writes(
        steps in prop::collection::vec(step(), 1..24),
        spread in 2u32..6,
    ) {
        run(&steps, spread);
    }
}

/// One sample per flush into one minute: a read is right exactly when each
/// slot's count equals its watermark, whatever flushes and folds it races.
#[test]
fn reads_racing_flushes_and_folds_count_every_minute_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_spread(&dir, 3);
    let (h, day) = (ts(2026, 3, 14, 10, 0), ts(2026, 3, 14, 0, 0));
    // Other series, so that folds take a few at a time.
    let others: Vec<_> = (0..6).map(|i| format!("o{i}")).collect();
    let writer = {
        let store = store.clone();
        let others = others.clone();
        std::thread::spawn(move || {
            for id in 1..=300u64 {
                let mut all = vec![series(
                    "db-01",
                    "op_counter",
                    SampleKind::Gauge,
                    &[(h, 1.0)],
                )];
                all.extend(
                    others
                        .iter()
                        .map(|o| series(o, "m", SampleKind::Gauge, &[(h, 1.0)])),
                );
                store.inner.apply(&Arc::new(batch(id, all))).unwrap();
            }
        })
    };
    read_while(writer, |tier, res| {
        let docs = store
            .inner
            .read(&query(tier, res, day, day + DAY_S))
            .unwrap();
        for d in docs {
            let n: u64 = d.slots.iter().map(|(_, s)| s.n).sum();
            assert_eq!(n, d.watermark, "{tier:?} {res:?}: {d:?}");
        }
    });
}

/// A damaged document holds up only its own series: when a fold meets it,
/// that series' pending minutes are dropped and every flush still lands.
#[test]
fn a_damaged_document_drops_its_series_not_every_later_flush() {
    use crate::store::embedded::layout::HOUR_DOCS;
    let dir = tempfile::tempdir().unwrap();
    let store = open_spread(&dir, 2);
    let h = ts(2026, 3, 14, 10, 0);
    write_raw(&store, HOUR_DOCS, (h, "bad", "m"), &[1, 2, 3]);
    for id in 1..=10u64 {
        let all = vec![
            series("bad", "m", SampleKind::Gauge, &[(h, 1.0)]),
            series("good", "m", SampleKind::Gauge, &[(h, 1.0)]),
        ];
        store.inner.apply(&Arc::new(batch(id, all))).unwrap();
    }
    // An idle fold that meets the damage fails once, dropping the series.
    if let Err(e) = store.fold_all() {
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e:?}");
    }
    store.fold_all().unwrap();
    let q = ReadQuery {
        series: SeriesId::new("good", "m"),
        tier: Tier::Day,
        resolution: Resolution::Minute,
        from: h,
        to: h + 60,
    };
    let docs = store.inner.read(&q).unwrap();
    assert_eq!(docs[0].slots[0].1.n, 10, "{docs:?}");
}

/// Flushes 5 s apart from 10:50 to 11:10 touching `names`, on a store with
/// `config`: after each, how many series are pending and how many bytes
/// they take; then the store's count of samples per series after a fold of
/// everything.
fn flushes_across_an_hour(
    config: EmbeddedConfig,
    names: &[String],
) -> (Vec<(i64, usize, usize)>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
    let start = ts(2026, 3, 14, 10, 50);
    let mut seen = Vec::new();
    for k in 0..240i64 {
        let at = start + 5 * k;
        // Flush ids count microseconds, as the pipeline numbers them.
        let id = at as u64 * 1_000_000;
        let all = names
            .iter()
            .map(|n| series(n, "m", SampleKind::Gauge, &[(at, 1.0)]))
            .collect();
        store.inner.apply(&Arc::new(batch(id, all))).unwrap();
        let pending = store.inner.pending.lock();
        seen.push((
            at,
            pending.queued_before(ts(2026, 3, 14, 11, 0) as u64 * 1_000_000),
            pending.bytes(),
        ));
    }
    store.fold_all().unwrap();
    let counts = names
        .iter()
        .map(|n| {
            let q = ReadQuery {
                series: SeriesId::new(n, "m"),
                tier: Tier::Day,
                resolution: Resolution::Day,
                from: ts(2026, 3, 14, 0, 0),
                to: ts(2026, 3, 15, 0, 0),
            };
            let docs = store.inner.read(&q).unwrap();
            docs.iter().flat_map(|d| &d.slots).map(|(_, s)| s.n).sum()
        })
        .collect();
    (seen, counts)
}

/// Each series is folded once its hour has closed: not before the grace
/// after the hour, and all of them by the end of the spread after it; and
/// every sample is still read once.
#[test]
fn series_fold_once_their_hour_has_closed_spread_over_the_fold_spread() {
    let names: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
    let config = EmbeddedConfig {
        fold_spread: Duration::from_secs(120),
        ..Default::default()
    };
    let (seen, counts) = flushes_across_an_hour(config, &names);
    let eleven = ts(2026, 3, 14, 11, 0);
    for &(at, before_eleven, _) in &seen {
        if at < eleven + 60 {
            assert_eq!(before_eleven, 40, "none folded before the grace, at {at}");
        }
        if at >= eleven + 180 {
            assert_eq!(before_eleven, 0, "all folded after the spread, at {at}");
        }
    }
    let midway = seen.iter().find(|s| s.0 == eleven + 120).unwrap().1;
    assert!((5..35).contains(&midway), "spread: {midway} left midway");
    assert!(counts.iter().all(|&n| n == 240), "{counts:?}");
}

/// Past `pending_max_bytes` the series waiting longest fold early, so the
/// pending minutes stay near the bound; every sample is still read once.
#[test]
fn pending_minutes_stay_near_their_memory_bound() {
    let names: Vec<String> = (0..40).map(|i| format!("s{i:02}")).collect();
    let max = 40 * 400;
    let config = EmbeddedConfig {
        pending_max_bytes: max,
        ..Default::default()
    };
    let (seen, counts) = flushes_across_an_hour(config, &names);
    let most = seen.iter().map(|s| s.2).max().unwrap();
    // One flush's minutes may come on top before the next fold, and each
    // list's room for one more ahead of it.
    assert!(most <= max + 40 * 2 * 56, "{most} bytes pending");
    assert!(counts.iter().all(|&n| n == 240), "{counts:?}");
}

/// With a flush every second, a close's folds by the hour still come at
/// least 5 s apart (`FOLD_EVERY_US`: each durable commit also saves the
/// allocator state), each taking the share of the time since the last.
#[test]
fn a_close_folds_at_most_every_five_seconds_whatever_the_flush_interval() {
    let config = EmbeddedConfig {
        fold_spread: Duration::from_secs(120),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
    let eleven = ts(2026, 3, 14, 11, 0);
    let names: Vec<String> = (0..400).map(|i| format!("s{i:03}")).collect();
    let mut folds_at = Vec::new();
    let mut left = usize::MAX;
    for at in (eleven - 10)..(eleven + 120) {
        let all = names
            .iter()
            .map(|n| series(n, "m", SampleKind::Gauge, &[(at, 1.0)]))
            .collect();
        store
            .inner
            .apply(&Arc::new(batch(at as u64 * 1_000_000, all)))
            .unwrap();
        let now = store
            .inner
            .pending
            .lock()
            .queued_before(eleven as u64 * 1_000_000);
        if now < left && left != usize::MAX {
            folds_at.push(at);
        }
        left = now;
    }
    assert!(folds_at.len() >= 5, "folds at {folds_at:?}");
    assert!(
        folds_at.windows(2).all(|w| w[1] - w[0] >= 5),
        "folds at {folds_at:?}"
    );
    assert!(
        left > 0 && left < 400,
        "{left} of 400 left after a minute of the spread"
    );
}
