//! The one-time correction of cumulative counters' `first_seen` in files
//! written before a counter's first sample was taken as a baseline only.
//!
//! A counter's first sample has nothing to count an increase from: its
//! minute holds no sample (`n = 0`, only the last value), reads as empty,
//! and the catalog of a new series starts at its first minute with an
//! increase. Catalog entries written before that still start at the
//! baseline minute. When a file without `meta.first_seen_baselines` is
//! opened, each counter entry whose `first_seen` minute holds no sample
//! is moved to the first later minute that does, up to its `last_seen`,
//! in `series_catalog` and `catalog_by_metric` alike; an entry whose
//! minute is not stored any more (retention) or that has no such later
//! minute stays as it is.
//!
//! Minutes are read from the day documents' minute blocks, which keep every minute as long
//! as the day documents live (the hour documents go sooner), and from the
//! pending minutes not folded yet. The pass goes through the catalog in
//! transactions of [`ENTRIES_PER_TXN`] entries, so that a million series
//! do not make one giant transaction; it only ever moves `first_seen` to a
//! minute with a sample, so a crash midway and the pass again from the
//! start changes nothing twice. The last transaction sets the marker.

use std::ops::Bound;

use redb::{Database, ReadableTable, Table, WriteTransaction};

use super::catalog_index::index_key;
use super::codec::{checked, decode_catalog, document, encode_catalog, slot_at};
use super::engine::begin_write;
use super::errors::db_err;
use super::layout::{
    catalog_name, MinutesKey, CATALOG_BY_METRIC, CATALOG_ENTRY_LEN, DAY_MINUTES, DAY_MINUTES_LEN,
    META, META_FIRST_SEEN_BASELINES, MINUTES_PER_HOUR, SERIES_CATALOG,
};
use super::pending::Pending;
use crate::model::{SampleKind, SeriesId, Tier, HOUR_S, MINUTE_S};
use crate::store::StoreError;

/// Catalog entries per transaction of the pass.
pub(super) const ENTRIES_PER_TXN: usize = 10_000;

type MinutesTable<'txn> = Table<'txn, MinutesKey<'static>, &'static [u8]>;

/// Runs the pass unless the file is marked as done; `per_txn` entries a
/// transaction. Returns how many entries it moved.
pub(super) fn correct_once(
    db: &Database,
    pending: &Pending,
    per_txn: usize,
) -> Result<usize, StoreError> {
    let mut after: Option<String> = None;
    let mut moved = 0;
    loop {
        let txn = begin_write(db)?;
        if txn
            .open_table(META)
            .map_err(db_err)?
            .get(META_FIRST_SEEN_BASELINES)
            .map_err(db_err)?
            .is_some()
        {
            return Ok(moved);
        }
        let step = correct_step(&txn, pending, after.as_deref(), per_txn.max(1))?;
        moved += step.moved;
        if step.last.is_none() {
            txn.open_table(META)
                .map_err(db_err)?
                .insert(META_FIRST_SEEN_BASELINES, 1)
                .map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        match step.last {
            Some(key) => after = Some(key),
            None => {
                if moved > 0 {
                    tracing::info!(
                        entries = moved,
                        "moved counters' first_seen off their baseline minute"
                    );
                }
                return Ok(moved);
            }
        }
    }
}

/// What one transaction of the pass did.
struct Step {
    moved: usize,
    /// The last key it looked at, when there may be more.
    last: Option<String>,
}

/// Corrects up to `limit` catalog entries after `after`, inside `txn`.
fn correct_step(
    txn: &WriteTransaction,
    pending: &Pending,
    after: Option<&str>,
    limit: usize,
) -> Result<Step, StoreError> {
    let mut catalog = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
    let minutes = txn.open_table(DAY_MINUTES).map_err(db_err)?;
    let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut moves = Vec::new();
    let mut seen = 0;
    let mut last = None;
    for row in catalog
        .range::<&str>((lower, Bound::Unbounded))
        .map_err(db_err)?
    {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value();
        seen += 1;
        last = Some(key.to_owned());
        let value: [u8; CATALOG_ENTRY_LEN] = checked(v.value(), || catalog_name(key))?;
        let (code, first, last_seen) = decode_catalog(&value);
        // A damaged key is left to the listings, which report it.
        let (Some(SampleKind::CumulativeCounter), Some(series)) =
            (SampleKind::from_code(code), SeriesId::from_key(key))
        else {
            if seen >= limit {
                break;
            }
            continue;
        };
        if let Some(to) = first_counted(&minutes, pending, &series, first, last_seen)? {
            moves.push((key.to_owned(), series, to, last_seen));
        }
        if seen >= limit {
            break;
        }
    }
    let mut index = txn.open_table(CATALOG_BY_METRIC).map_err(db_err)?;
    for (key, series, first, last_seen) in &moves {
        let value = encode_catalog(SampleKind::CumulativeCounter, *first, *last_seen);
        catalog.insert(key.as_str(), &value[..]).map_err(db_err)?;
        index
            .insert(index_key(series, key).as_str(), &value[..])
            .map_err(db_err)?;
    }
    Ok(Step {
        moved: moves.len(),
        last: (seen >= limit).then_some(last).flatten(),
    })
}

/// Where `series`' `first_seen` belongs if it now names a baseline: the
/// start of its first minute after `first` with a sample, up to
/// `last_seen`; None when `first`'s minute has a sample, is not stored, or
/// no later minute has one.
fn first_counted(
    minutes: &MinutesTable<'_>,
    pending: &Pending,
    series: &SeriesId,
    first: i64,
    last_seen: i64,
) -> Result<Option<i64>, StoreError> {
    let (src, met) = (&*series.source, series.metric_key());
    let counted = pending.counted_minutes(series);
    let m0 = first.div_euclid(MINUTE_S);
    if counted.contains(&m0) {
        return Ok(None);
    }
    let day0 = Tier::Day.period_start(m0);
    let hour0 = ((first - day0) / HOUR_S) as u8;
    let Some(block) = block_at(minutes, (day0, hour0, src, &*met))? else {
        return Ok(None);
    };
    if slot_at(&block, 0, minute_of_hour(first)).n > 0 {
        return Ok(None);
    }
    let pending_first = counted
        .iter()
        .map(|m| m * MINUTE_S)
        .find(|&t| t > first && t <= last_seen);
    // Hour by hour from `first`'s (one lookup each: `layout.rs`), up to
    // `last_seen` or the first pending minute.
    let mut hour_start = day0 + i64::from(hour0) * HOUR_S;
    while hour_start <= last_seen && pending_first.is_none_or(|p| p >= hour_start) {
        let day = Tier::Day.period_start(hour_start.div_euclid(MINUTE_S));
        let hour = ((hour_start - day) / HOUR_S) as u8;
        if let Some(v) = block_at(minutes, (day, hour, src, &*met))? {
            for i in 0..MINUTES_PER_HOUR {
                let t = hour_start + i as i64 * MINUTE_S;
                if t <= first {
                    continue;
                }
                if t > last_seen || pending_first.is_some_and(|p| p <= t) {
                    break;
                }
                if slot_at(&v, 0, i).n > 0 {
                    return Ok(Some(t));
                }
            }
        }
        let Some(next) = hour_start.checked_add(HOUR_S) else {
            break;
        };
        hour_start = next;
    }
    Ok(pending_first)
}

/// The minute block under `key`, if there is one and it reads (a damaged
/// one is left to the reads, which report it).
fn block_at(
    minutes: &MinutesTable<'_>,
    key: MinutesKey<'_>,
) -> Result<Option<[u8; DAY_MINUTES_LEN]>, StoreError> {
    let Some(v) = minutes.get(key).map_err(db_err)? else {
        return Ok(None);
    };
    Ok(document(v.value(), String::new).ok())
}

/// The index of the minute starting at `t` (Unix seconds) in its hour.
fn minute_of_hour(t: i64) -> usize {
    (t.rem_euclid(HOUR_S) / MINUTE_S) as usize
}
