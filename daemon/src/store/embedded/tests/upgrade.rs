//! Opening a file of layout 2 (32-byte slots without the last sample): its
//! documents read as slots without a last sample, its flush log is kept,
//! and the next write stores today's layout. Opening one of layout 5
//! (documents not packed): they read as they are, and are packed when next
//! written.

use redb::{Database, ReadableDatabase};

use super::*;
use crate::model::{Resolution, SampleKind, SeriesId, Slot, Tier, HOUR_S, MINUTE_S};
use crate::store::embedded::codec::document;
use crate::store::embedded::layout::{
    DAY_MINUTES, DAY_MINUTES_LEN, FILE_NAME, FLUSH_LOG, HOUR_DOCS, HOUR_DOC_LEN, LAYOUT_VERSION,
    LEGACY_HOUR_DOCS, LEGACY_SLOT_LEN, META, META_LAST_FLUSH_ID, META_LAYOUT_VERSION,
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

/// Every hour document and minute block of the file in `dir` unpacked, as
/// layout 5 stored them, and the file marked 5.
fn unpack_all_as_layout_5(dir: &tempfile::TempDir) {
    use redb::ReadableTable;
    let db = Database::open(dir.path().join(FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut hours = txn.open_table(HOUR_DOCS).unwrap();
        let raw: Vec<_> = hours
            .iter()
            .unwrap()
            .map(|row| {
                let (k, v) = row.unwrap();
                let doc: [u8; HOUR_DOC_LEN] = document(v.value(), String::new).unwrap();
                (
                    k.value().0,
                    k.value().1.to_owned(),
                    k.value().2.to_owned(),
                    doc,
                )
            })
            .collect();
        assert!(!raw.is_empty());
        for (start, src, met, doc) in &raw {
            hours.insert((*start, &**src, &**met), &doc[..]).unwrap();
        }
        let mut blocks = txn.open_table(DAY_MINUTES).unwrap();
        let raw: Vec<_> = blocks
            .iter()
            .unwrap()
            .map(|row| {
                let (k, v) = row.unwrap();
                let (day, hour, src, met) = k.value();
                let block: [u8; DAY_MINUTES_LEN] = document(v.value(), String::new).unwrap();
                (day, hour, src.to_owned(), met.to_owned(), block)
            })
            .collect();
        assert!(!raw.is_empty());
        for (day, hour, src, met, block) in &raw {
            blocks
                .insert((*day, *hour, &**src, &**met), &block[..])
                .unwrap();
        }
        txn.open_table(META)
            .unwrap()
            .insert(META_LAYOUT_VERSION, 5)
            .unwrap();
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_layout_5_file_reads_as_it_is_and_packs_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let day = ts(2026, 3, 14, 0, 0);
    let hour = ts(2026, 3, 14, 10, 0);
    let store = open_direct(&dir);
    store.apply(&sample_batch(1)).await.unwrap();
    let mut before = Vec::new();
    for (tier, res) in EVERY_READ {
        before.push(read_day(&store, tier, res, day).await);
    }
    store.close().await.unwrap();
    drop(store);
    unpack_all_as_layout_5(&dir);

    let store = open_direct(&dir);
    assert_eq!(
        raw_len(&store, HOUR_DOCS, (hour, "db-01", "op_counter")),
        Some(HOUR_DOC_LEN)
    );
    for ((tier, res), want) in EVERY_READ.into_iter().zip(&before) {
        assert_eq!(
            &read_day(&store, tier, res, day).await,
            want,
            "{tier:?} {res:?}"
        );
    }
    {
        let txn = store.inner.database().unwrap().begin_read().unwrap();
        let meta = txn.open_table(META).unwrap();
        let version = meta.get(META_LAYOUT_VERSION).unwrap().unwrap().value();
        assert_eq!(version, LAYOUT_VERSION);
    }

    // The next write of the hour packs it, and keeps what it held.
    let series = SeriesId::new("db-01", "op_counter");
    let at = hour + 20 * MINUTE_S;
    store
        .apply(&batch(2, vec![series_minutes(&series, at, 6.0)]))
        .await
        .unwrap();
    let packed = raw_len(&store, HOUR_DOCS, (hour, "db-01", "op_counter")).unwrap();
    assert!(packed < HOUR_DOC_LEN / 2, "{packed}");
    let docs = read(
        &store,
        query(Tier::Hour, Resolution::Minute, hour, hour + HOUR_S),
    )
    .await;
    let old = &before[0][0].slots;
    assert_eq!(docs[0].slots.len(), old.len() + 1);
    for kept in old {
        assert!(docs[0].slots.contains(kept), "{kept:?}");
    }
    let new = docs[0].slots.iter().find(|(t, _)| *t == at);
    assert_eq!(new.map(|(_, s)| (s.n, s.last)), Some((1, 6.0)));
}
