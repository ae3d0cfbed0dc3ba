//! Opening a file of layout 4 (documents keyed series first): its documents
//! move to the period-first tables and read as before, also when the move
//! was cut short by a crash.

use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableHandle};

use super::*;
use crate::model::{SampleKind, SeriesId, Tier, DAY_S};
use crate::store::embedded::layout::{
    HourKey, LegacyKey, DAY_MINUTES, DAY_SUMMARY, FILE_NAME, HOUR_DOCS, LAYOUT_VERSION,
    LEGACY_DAY_MINUTES, LEGACY_DAY_SUMMARY, LEGACY_HOUR_DOCS, META, META_LAYOUT_VERSION,
};
use crate::store::embedded::period_first::move_step;
use crate::store::Store;

const SOURCES: [&str; 3] = ["db-01", "db-02", "web-1"];
const METRICS: [&str; 2] = ["cpu", "op_counter"];

/// A store holding documents of several series over two days (hour
/// documents, summaries and minute blocks), all folded, and every read of
/// every series.
async fn filled(dir: &tempfile::TempDir) -> Vec<Vec<DocRead>> {
    let store = open(dir);
    let t0 = ts(2026, 3, 14, 22, 0);
    for (i, minute) in [0, 61, 125, 1_500, 1_561].into_iter().enumerate() {
        let t = t0 + minute * 60 + 7;
        let all = SOURCES
            .iter()
            .flat_map(|s| METRICS.iter().map(move |m| (s, m)))
            .map(|(s, m)| series(s, m, SampleKind::Gauge, &[(t, minute as f64)]))
            .collect();
        store.apply(&batch(i as u64 + 1, all)).await.unwrap();
    }
    store.fold_all().unwrap();
    let reads = every_read(&store, t0).await;
    store.close().await.unwrap();
    reads
}

async fn every_read(store: &EmbeddedStore, t0: i64) -> Vec<Vec<DocRead>> {
    let mut out = Vec::new();
    for s in SOURCES {
        for m in METRICS {
            for (tier, resolution) in EVERY_READ {
                let mut q = query(tier, resolution, t0 - DAY_S, t0 + 3 * DAY_S);
                q.series = SeriesId::new(s, m);
                out.push(read(store, q).await);
            }
        }
    }
    out
}

/// Rewrites the file as layout 4 kept it: every document in the
/// series-first tables.
fn make_layout_4(dir: &tempfile::TempDir) -> usize {
    let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    let mut n = back_to_series_first(&txn, HOUR_DOCS, LEGACY_HOUR_DOCS)
        + back_to_series_first(&txn, DAY_SUMMARY, LEGACY_DAY_SUMMARY);
    {
        let mut old = txn.open_table(LEGACY_DAY_MINUTES).unwrap();
        let mut new = txn.open_table(DAY_MINUTES).unwrap();
        while let Some((k, v)) = new.pop_first().unwrap() {
            let (d, h, s, m) = k.value();
            old.insert((s, m, d, h), v.value()).unwrap();
            n += 1;
        }
        txn.open_table(META)
            .unwrap()
            .insert(META_LAYOUT_VERSION, 4)
            .unwrap();
    }
    txn.delete_table(HOUR_DOCS).unwrap();
    txn.delete_table(DAY_SUMMARY).unwrap();
    txn.delete_table(DAY_MINUTES).unwrap();
    txn.commit().unwrap();
    n
}

fn back_to_series_first(
    txn: &redb::WriteTransaction,
    from: redb::TableDefinition<HourKey, &[u8]>,
    to: redb::TableDefinition<LegacyKey, &[u8]>,
) -> usize {
    let mut new = txn.open_table(from).unwrap();
    let mut old = txn.open_table(to).unwrap();
    let mut n = 0;
    while let Some((k, v)) = new.pop_first().unwrap() {
        let (p, s, m) = k.value();
        old.insert((s, m, p), v.value()).unwrap();
        n += 1;
    }
    n
}

fn table_names(dir: &tempfile::TempDir) -> Vec<String> {
    let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
    let txn = db.begin_read().unwrap();
    let names = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_string())
        .collect();
    names
}

#[tokio::test]
async fn a_layout_4_file_opens_with_its_documents_moved() {
    let dir = tempfile::tempdir().unwrap();
    let want = filled(&dir).await;
    assert!(want.iter().any(|r| !r.is_empty()));
    let moved = make_layout_4(&dir);
    // 6 series: 5 hours over 3 days, so 5 hour documents, 3 day summaries
    // and 5 minute blocks each.
    assert_eq!(moved, 6 * (5 + 3 + 5));

    let store = open(&dir);
    let t0 = ts(2026, 3, 14, 22, 0);
    assert_eq!(every_read(&store, t0).await, want);
    {
        let txn = store.inner.database().unwrap().begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let version = meta.get(META_LAYOUT_VERSION).unwrap().unwrap().value();
        assert_eq!(version, LAYOUT_VERSION);
    }
    store.close().await.unwrap();
    drop(store);
    let names = table_names(&dir);
    for old in [LEGACY_HOUR_DOCS.name(), LEGACY_DAY_SUMMARY.name()] {
        assert!(!names.iter().any(|n| n == old), "{old} left in {names:?}");
    }
    assert!(!names.iter().any(|n| n == LEGACY_DAY_MINUTES.name()));
}

/// A move that stopped after some of its transactions (a crash between
/// two) goes on at the next open: every document is read once. Cut past
/// the hour documents, into the summaries; and cut after the last value
/// moved, before the old tables went.
#[tokio::test]
async fn a_move_cut_short_goes_on_at_the_next_open() {
    for steps in [&[25usize, 25][..], &[78]] {
        let dir = tempfile::tempdir().unwrap();
        let want = filled(&dir).await;
        let total = make_layout_4(&dir);
        assert_eq!(total, 78);
        {
            let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
            for &n in steps {
                assert_eq!(move_step(&db, n).unwrap(), n);
            }
            let txn = db.begin_read().unwrap();
            let summaries = txn.open_table(DAY_SUMMARY).unwrap().len().unwrap();
            assert!(summaries > 0, "the cut is past the hour documents");
        }
        let store = open(&dir);
        assert_eq!(every_read(&store, ts(2026, 3, 14, 22, 0)).await, want);
        store.close().await.unwrap();
        drop(store);
        // Each document once, in the new tables, none left behind.
        let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let count = |n: u64| n as usize;
        let held = count(txn.open_table(HOUR_DOCS).unwrap().len().unwrap())
            + count(txn.open_table(DAY_SUMMARY).unwrap().len().unwrap())
            + count(txn.open_table(DAY_MINUTES).unwrap().len().unwrap());
        assert_eq!(held, total);
        assert!(txn.open_table(LEGACY_HOUR_DOCS).is_err());
    }
}

/// Reads are bounded by what the table holds: a query over all of time
/// on a file of five hours looks up those hours, not every hour since
/// the epoch (which would not end).
#[tokio::test]
async fn an_unbounded_read_looks_up_what_the_file_holds() {
    let dir = tempfile::tempdir().unwrap();
    let want = filled(&dir).await;
    let store = open(&dir);
    let mut q = query(Tier::Hour, Resolution::Minute, i64::MIN, i64::MAX);
    q.series = SeriesId::new(SOURCES[0], METRICS[0]);
    let all = read(&store, q).await;
    assert_eq!(all.len(), 5);
    assert_eq!(all, want[0]);
}
