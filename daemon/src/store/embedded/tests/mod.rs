//! Fixtures shared by the embedded store's unit tests (the other files of
//! this folder, one concern each), and test-only access to what the daemon itself never
//! asks of the store.

mod baselines;
mod bench;
mod catalog_index;
mod corrupt;
mod damaged;
mod durability;
mod fold;
mod fold_cost;
mod period_first;
mod read;
mod reopen;
mod retention;
mod split;
mod upgrade;
mod usage;
mod write;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use redb::{ReadableDatabase, TableDefinition};

use super::layout::{HourKey, DAY_MINUTES};
use super::EmbeddedStore;
use crate::model::{
    FlushBatch, Resolution, SampleKind, SeriesId, SeriesMinutes, Slot, Tier, DAY_S,
};
use crate::store::{DocRead, ReadQuery, Store, StoreError};

/// What tests check that nothing in the daemon asks for yet.
impl EmbeddedStore {
    /// Path of the database file.
    pub(super) fn path(&self) -> &Path {
        &self.inner.path
    }

    /// See `Db::durable_flush_id`.
    pub(super) fn durable_flush_id(&self) -> u64 {
        self.inner.durable_flush_id()
    }

    /// Makes every commit so far durable now. Blocking.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync_now()
    }

    /// Folds every pending minute into the stored documents. Blocking.
    pub(super) fn fold_all(&self) -> Result<(), StoreError> {
        self.inner.fold_some(usize::MAX)
    }

    /// Writes a checkpoint of what was applied since the last. Blocking.
    pub(super) fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint_now()
    }
}

/// Unix seconds of a UTC time.
pub(super) fn ts(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .unwrap()
        .timestamp()
}

/// One series' update from (unix seconds, value) samples.
pub(super) fn series(
    source: &str,
    metric: &str,
    kind: SampleKind,
    samples: &[(i64, f64)],
) -> SeriesMinutes {
    let mut minutes: BTreeMap<i64, Slot> = BTreeMap::new();
    for &(t, v) in samples {
        minutes
            .entry(t.div_euclid(60))
            .or_default()
            .add(t * 1000, v);
    }
    SeriesMinutes {
        catalog: crate::model::CatalogDue::Unknown,
        series: Arc::new(SeriesId::new(source, metric)),
        kind,
        minutes: minutes.into_iter().collect(),
    }
}

/// Minute `m` of a stand-in for one of a fleet's gauges, picked by `seed`:
/// a level, a triangle wave and noise at full precision, sampled every
/// second from `t0` (Unix seconds), as the load generator's gauges are.
pub(super) fn gauge_minute(seed: u64, t0: i64, m: u64) -> Slot {
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let unit = |x: u64| (mix(x) >> 11) as f64 / (1u64 << 53) as f64;
    let p = mix(seed);
    let base = unit(p ^ 1) * 1000.0 - 100.0;
    let amp = (0.05 + 0.3 * unit(p ^ 2)) * (base.abs() + 1.0);
    let period = 30 + (unit(p ^ 3) * 570.0) as u64;
    let mut slot = Slot::EMPTY;
    for s in 0..60 {
        let tick = m * 60 + s;
        let tri = 4.0 * ((tick % period) as f64 / period as f64 - 0.5).abs() - 1.0;
        let noise = unit(p.rotate_left(17) ^ tick) - 0.5;
        slot.add(
            (t0 + tick as i64) * 1000,
            base + amp * tri + noise * amp * 0.2,
        );
    }
    slot
}

pub(super) fn batch(id: u64, series: Vec<SeriesMinutes>) -> FlushBatch {
    FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: crate::model::FlushId(id),
        series,
    }
}

pub(super) fn query(tier: Tier, resolution: Resolution, from: i64, to: i64) -> ReadQuery {
    ReadQuery {
        series: SeriesId::new("db-01", "op_counter"),
        tier,
        resolution,
        from,
        to,
    }
}

pub(super) fn slot(n: u64, sum: f64, min: f64, max: f64) -> Slot {
    Slot::summary(n, sum, min, max)
}

/// `s` with the last sample `v` at Unix second `at_s`.
pub(super) fn with_last(mut s: Slot, at_s: i64, v: f64) -> Slot {
    s.see(at_s * 1000, v);
    s
}

/// Every (tier, resolution) a read may ask for.
pub(super) const EVERY_READ: [(Tier, Resolution); 5] = [
    (Tier::Hour, Resolution::Minute),
    (Tier::Hour, Resolution::Hour),
    (Tier::Day, Resolution::Minute),
    (Tier::Day, Resolution::Hour),
    (Tier::Day, Resolution::Day),
];

pub(super) fn open(dir: &tempfile::TempDir) -> EmbeddedStore {
    EmbeddedStore::open(dir.path()).unwrap()
}

/// A store that merges every flush straight into its documents, as a
/// replayed flush always is.
pub(super) fn open_direct(dir: &tempfile::TempDir) -> EmbeddedStore {
    let config = super::EmbeddedConfig {
        write_through: true,
        ..Default::default()
    };
    EmbeddedStore::open_with(dir.path(), config).unwrap()
}

/// A checkpointed store that checkpoints at every flush whose id is at
/// least `every` above the last checkpoint's (tests number flushes 1, 2,
/// ...: every `every` flushes), and folds the series waiting longest
/// whenever the pending minutes pass `max_bytes`.
pub(super) fn checkpointed(every: u64, max_bytes: usize) -> super::EmbeddedConfig {
    super::EmbeddedConfig {
        checkpoint_interval: std::time::Duration::from_micros(every),
        pending_max_bytes: max_bytes,
        ..Default::default()
    }
}

/// Reads with `read`, at every tier and resolution, again and again until
/// `writer` has finished (a last round after it), at least six times.
pub(super) fn read_while(
    writer: std::thread::JoinHandle<()>,
    mut read: impl FnMut(Tier, Resolution),
) {
    let mut reads = 0;
    loop {
        let done = writer.is_finished();
        for (tier, res) in EVERY_READ {
            read(tier, res);
            reads += 1;
        }
        if done {
            break;
        }
    }
    writer.join().unwrap();
    assert!(reads > 5, "{reads}");
}

/// Flush `id` of gauge samples: `by_series[i]` of series `names[i]`, but
/// for series without any.
pub(super) fn gauge_batch(
    id: u64,
    names: &[(&str, &str)],
    by_series: &[Vec<(i64, f64)>],
) -> FlushBatch {
    let series = by_series
        .iter()
        .zip(names)
        .filter(|(samples, _)| !samples.is_empty())
        .map(|(samples, (src, met))| super::tests::series(src, met, SampleKind::Gauge, samples))
        .collect();
    batch(id, series)
}

/// Samples of db-01/op_counter on 2026-03-14: two at 10:05, one at 10:59,
/// one at 11:00.
pub(super) fn sample_batch(id: u64) -> FlushBatch {
    batch(
        id,
        vec![series(
            "db-01",
            "op_counter",
            SampleKind::Gauge,
            &[
                (ts(2026, 3, 14, 10, 5) + 1, 2.0),
                (ts(2026, 3, 14, 10, 5) + 30, 4.0),
                (ts(2026, 3, 14, 10, 59) + 59, -1.0),
                (ts(2026, 3, 14, 11, 0), 10.0),
            ],
        )],
    )
}

pub(super) async fn read(store: &EmbeddedStore, q: ReadQuery) -> Vec<DocRead> {
    store.read(&q).await.unwrap()
}

/// All of the day starting at `day`, of db-01/op_counter.
pub(super) async fn read_day(
    store: &EmbeddedStore,
    tier: Tier,
    resolution: Resolution,
    day: i64,
) -> Vec<DocRead> {
    read(store, query(tier, resolution, day, day + DAY_S)).await
}

pub(super) fn raw_len(
    store: &EmbeddedStore,
    table: TableDefinition<HourKey, &[u8]>,
    key: HourKey,
) -> Option<usize> {
    let txn = store.inner.database().unwrap().begin_read().unwrap();
    let t = txn.open_table(table).unwrap();
    let len = t.get(key).unwrap().map(|v| v.value().len());
    len
}

pub(super) fn raw_blocks(
    store: &EmbeddedStore,
    src: &str,
    met: &str,
    day: i64,
) -> Vec<(u8, Vec<u8>)> {
    let txn = store.inner.database().unwrap().begin_read().unwrap();
    let t = txn.open_table(DAY_MINUTES).unwrap();
    let blocks = (0..24u8)
        .filter_map(|h| {
            let v = t.get((day, h, src, met)).unwrap()?;
            Some((h, v.value().to_vec()))
        })
        .collect();
    blocks
}

pub(super) fn write_raw<K: redb::Key + 'static>(
    store: &EmbeddedStore,
    table: TableDefinition<K, &[u8]>,
    key: K::SelfType<'_>,
    value: &[u8],
) {
    let txn = store.inner.database().unwrap().begin_write().unwrap();
    txn.open_table(table).unwrap().insert(key, value).unwrap();
    txn.commit().unwrap();
}
