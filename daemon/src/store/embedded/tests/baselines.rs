//! The one-time move of cumulative counters' `first_seen` off their
//! baseline minute, in files whose catalog was written before it: on open,
//! in both catalog tables, once.

use super::*;
use crate::selector::NameMatcher;
use crate::store::embedded::baselines::correct_once;
use crate::store::embedded::layout::{META, META_FIRST_SEEN_BASELINES};
use crate::store::{CatalogEntry, CatalogQuery};

/// A counter's first sample: its value only, nothing counted.
fn baseline(at_s: i64) -> Slot {
    let mut s = Slot::EMPTY;
    s.see(at_s * 1000, 100.0);
    s
}

/// A counter's increase of 5 seen at `at_s`.
fn increase(at_s: i64) -> Slot {
    let mut s = Slot::EMPTY;
    s.add_value(5.0);
    s.see(at_s * 1000, 105.0);
    s
}

fn stored(source: &str, kind: SampleKind, minutes: &[(i64, Slot)]) -> SeriesMinutes {
    SeriesMinutes {
        catalog: crate::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new(source, "m")),
        kind,
        minutes: minutes.iter().copied().collect(),
    }
}

/// Series `c` (a counter increasing two minutes after its baseline),
/// `late` (the same, its increase still pending), `flat` (a baseline only),
/// `k` (a counter whose first minute counts), `g` (a gauge of a last value
/// only); their catalog entries as written before the fix, from the hour's
/// start `h`, with the marker removed.
fn old_file(dir: &tempfile::TempDir, h: i64) -> EmbeddedStore {
    let m0 = h / 60;
    let store = open_direct(dir);
    let counter = SampleKind::CumulativeCounter;
    let all = vec![
        stored(
            "c",
            counter,
            &[(m0, baseline(h)), (m0 + 2, increase(h + 120))],
        ),
        stored("flat", counter, &[(m0, baseline(h))]),
        stored("g", SampleKind::Gauge, &[(m0, baseline(h))]),
        stored("k", counter, &[(m0, increase(h))]),
        stored("late", counter, &[(m0, baseline(h))]),
    ];
    store.inner.apply(&Arc::new(batch(1, all))).unwrap();
    let entries: Vec<CatalogEntry> = ["c", "flat", "g", "k", "late"]
        .iter()
        .map(|s| CatalogEntry {
            series: Arc::new(SeriesId::new(s, "m")),
            kind: if *s == "g" {
                SampleKind::Gauge
            } else {
                counter
            },
            first_seen: h,
            last_seen: h + 600,
        })
        .collect();
    store.inner.catalog_upsert(&entries.into()).unwrap();
    let db = store.inner.database().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .remove(META_FIRST_SEEN_BASELINES)
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    store.sync().unwrap();
    store
}

async fn first_seen(store: &EmbeddedStore, by_metric: bool) -> Vec<(String, i64)> {
    let mut q = CatalogQuery::everything(100);
    if by_metric {
        q.metric = vec![NameMatcher::exact("m")];
    }
    store
        .catalog_list(&q)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.series.source.to_string(), e.first_seen))
        .collect()
}

#[tokio::test]
async fn a_counter_first_seen_at_its_baseline_moves_to_its_first_increase_once() {
    let dir = tempfile::tempdir().unwrap();
    let h = ts(2026, 3, 14, 10, 0);
    let store = old_file(&dir, h);
    // The increase of `late` is flushed but not folded when it opens again.
    let config = crate::store::embedded::EmbeddedConfig::default();
    drop(store);
    let store = EmbeddedStore::open_with(dir.path(), config.clone()).unwrap();
    let late = stored(
        "late",
        SampleKind::CumulativeCounter,
        &[(h / 60 + 5, increase(h + 300))],
    );
    store.inner.apply(&Arc::new(batch(2, vec![late]))).unwrap();
    store.checkpoint().unwrap();
    // Marked done by that open: written the old way again, then reopened.
    let db = store.inner.database().unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .remove(META_FIRST_SEEN_BASELINES)
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    store.sync().unwrap();
    drop(store);

    let store = EmbeddedStore::open_with(dir.path(), config).unwrap();
    let want = vec![
        ("c".to_owned(), h + 120),
        ("flat".to_owned(), h),
        ("g".to_owned(), h),
        ("k".to_owned(), h),
        ("late".to_owned(), h + 300),
    ];
    assert_eq!(first_seen(&store, false).await, want);
    assert_eq!(
        first_seen(&store, true).await,
        want,
        "catalog_by_metric too"
    );
}

#[test]
fn the_pass_goes_in_bounded_transactions_and_then_never_again() {
    let dir = tempfile::tempdir().unwrap();
    let h = ts(2026, 3, 14, 10, 0);
    let store = old_file(&dir, h);
    let db = store.inner.database().unwrap();
    let pending = crate::store::embedded::pending::Pending::default();
    // Five entries, two a transaction: three transactions.
    assert_eq!(correct_once(&db, &pending, 2).unwrap(), 1);
    assert_eq!(correct_once(&db, &pending, 2).unwrap(), 0, "marked done");
    let txn = redb::ReadableDatabase::begin_read(&*db).unwrap();
    let meta = txn.open_table(META).unwrap();
    assert!(meta.get(META_FIRST_SEEN_BASELINES).unwrap().is_some());
}
