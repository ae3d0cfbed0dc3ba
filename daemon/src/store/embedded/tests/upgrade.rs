//! Opening a file of layout 2 (32-byte slots without the last sample): its
//! documents read as slots without a last sample, its flush log is kept,
//! and the next write stores today's layout.

use redb::{Database, ReadableDatabase};

use super::*;
use crate::model::{Resolution, SampleKind, SeriesId, Slot, Tier, HOUR_S, MINUTE_S};
use crate::store::embedded::layout::{
    FILE_NAME, FLUSH_LOG, LAYOUT_VERSION, LEGACY_HOUR_DOCS, LEGACY_SLOT_LEN, META,
    META_LAST_FLUSH_ID, META_LAYOUT_VERSION,
};
use crate::store::Store;

fn legacy_slot(out: &mut Vec<u8>, s: &Slot) {
    out.extend_from_slice(&s.n.to_le_bytes());
    out.extend_from_slice(&s.sum.to_le_bytes());
    out.extend_from_slice(&s.min.to_le_bytes());
    out.extend_from_slice(&s.max.to_le_bytes());
}

/// An hour document of layout 2: kind gauge, watermark 1, one minute.
fn legacy_hour_doc(minute: usize, slot: &Slot) -> Vec<u8> {
    let mut v = vec![SampleKind::Gauge.code(), 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&1u64.to_le_bytes());
    let mut total = Slot::EMPTY;
    total.merge(slot);
    legacy_slot(&mut v, &total);
    for m in 0..60 {
        legacy_slot(&mut v, if m == minute { slot } else { &Slot::EMPTY });
    }
    assert_eq!(v.len(), 16 + 61 * LEGACY_SLOT_LEN);
    v
}

/// A flush-log chunk of layout 2 holding one series' one minute.
fn legacy_log_entry(series: &SeriesId, minute: i64, slot: &Slot) -> Vec<u8> {
    let mut v = Vec::new();
    let mk = series.metric_key();
    for s in [&*series.source, &*mk] {
        v.extend_from_slice(&(s.len() as u16).to_le_bytes());
        v.extend_from_slice(s.as_bytes());
    }
    v.push(SampleKind::Gauge.code());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&minute.to_le_bytes());
    legacy_slot(&mut v, slot);
    v
}

#[tokio::test]
async fn a_layout_2_file_opens_reads_and_upgrades_on_write() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(&dir));
    let hour = ts(2026, 3, 14, 10, 0);
    let series = SeriesId::new("db-01", "op_counter");
    let stored = Slot::summary(1, 5.0, 5.0, 5.0);
    let logged = Slot::summary(2, 3.0, 1.0, 2.0);
    {
        let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(META_LAYOUT_VERSION, 2).unwrap();
            meta.insert(META_LAST_FLUSH_ID, 2).unwrap();
            let mut hours = txn.open_table(LEGACY_HOUR_DOCS).unwrap();
            let doc = legacy_hour_doc(5, &stored);
            hours
                .insert(("db-01", "op_counter", hour), doc.as_slice())
                .unwrap();
            let mut log = txn.open_table(FLUSH_LOG).unwrap();
            let entry = legacy_log_entry(&series, hour / MINUTE_S + 7, &logged);
            log.insert((2, 0), entry.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }

    let store = open(&dir);
    let q = query(Tier::Hour, Resolution::Minute, hour, hour + HOUR_S);
    let docs = read(&store, q.clone()).await;
    assert_eq!(
        docs[0].slots,
        vec![(hour + 5 * MINUTE_S, stored), (hour + 7 * MINUTE_S, logged)],
        "old slots read without a last sample, the old log's minutes too"
    );
    {
        let txn = store.inner.database().unwrap().begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        assert_eq!(
            meta.get(META_LAYOUT_VERSION).unwrap().unwrap().value(),
            LAYOUT_VERSION
        );
    }

    // A write of the same hour keeps what was there and adds the new
    // minute with its last sample, in today's layout.
    let at = hour + 5 * MINUTE_S + 10;
    let b = batch(3, vec![series_minutes(&series, at, 4.0)]);
    store.apply(&b).await.unwrap();
    let docs = read(&store, q).await;
    let mut want = stored;
    want.add(at * 1000, 4.0);
    assert_eq!(docs[0].slots[0], (hour + 5 * MINUTE_S, want));
    assert_eq!(docs[0].slots[1], (hour + 7 * MINUTE_S, logged));
    store.close().await.unwrap();
    drop(store);
    let store = open(&dir);
    assert_eq!(
        read(
            &store,
            query(Tier::Hour, Resolution::Minute, hour, hour + HOUR_S)
        )
        .await[0]
            .slots[0]
            .1,
        want
    );
}

fn series_minutes(id: &SeriesId, at_s: i64, v: f64) -> crate::model::SeriesMinutes {
    series(&id.source, &id.metric, SampleKind::Gauge, &[(at_s, v)])
}
