//! Reads of hour and day documents, and the small reads of `meta`.
//! Separate from writes because reads never touch a watermark or a write
//! transaction; they turn stored slots into the points of one tier and
//! resolution, reading only the parts of a day that resolution needs, and
//! add the series' minutes not yet folded into them (`pending.rs`).

use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable};

use super::codec::{decode_kind, document, header, slot_at};
use super::db::{meta_value, Db};
use super::errors::{db_err, invalid};
use super::layout::{
    day_minutes_name, day_summary_name, hour_doc_name, DaySummary, HourDoc, HourKey, MinuteBlock,
    MinutesKey, DAY_MINUTES, DAY_SUMMARY, HEADER_LEN, HOURS_PER_DAY, HOUR_DOCS, META,
    META_LAST_FLUSH_ID, META_LAYOUT_VERSION, MINUTES_PER_HOUR,
};
use crate::model::{Resolution, Slot, Tier, HOUR_S, MINUTE_S};
use crate::store::{DocRead, ReadQuery, StoreError};

type Slots = Vec<(i64, Slot)>;

impl Db {
    pub(super) fn read(&self, q: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        if q.tier == Tier::Hour && q.resolution == Resolution::Day {
            return Err(invalid(
                "hour documents hold no day slot; read daily points from the day tier".into(),
            ));
        }
        if q.from >= q.to {
            return Ok(Vec::new());
        }
        // The document holding `from` may start before it.
        // (Clamped so that the period arithmetic cannot overflow for an
        // unbounded `from`; no document starts that early.)
        let lo = q
            .tier
            .period_start(q.from.max(i64::MIN / 2).div_euclid(MINUTE_S));
        let db = self.database()?;
        // The pending minutes before the documents, and under the database
        // lock so that no reopen comes between: see `pending.rs` for why
        // this order counts every minute once.
        let pending = self.pending.lock().view(&q.series);
        let txn = db.begin_read().map_err(db_err)?;
        let mut docs = match q.tier {
            Tier::Hour => read_hour_docs(&txn, q, lo)?,
            Tier::Day => read_day_docs(&txn, q, lo)?,
        };
        if let Some(pending) = pending {
            pending.merge_into(q, lo, &mut docs);
        }
        Ok(docs)
    }

    pub(super) fn last_flush_id(&self) -> Result<u64, StoreError> {
        let db = self.database()?;
        let txn = db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        Ok(meta_value(&meta, META_LAST_FLUSH_ID)?.unwrap_or(0))
    }

    pub(super) fn health(&self) -> Result<(), StoreError> {
        let db = self.database()?;
        let txn = db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        meta_value(&meta, META_LAYOUT_VERSION)?;
        Ok(())
    }
}

type DocTable = ReadOnlyTable<HourKey<'static>, &'static [u8]>;

/// Hour documents of `q.series` starting in `[lo, q.to)`.
fn read_hour_docs(
    txn: &ReadTransaction,
    q: &ReadQuery,
    lo: i64,
) -> Result<Vec<DocRead>, StoreError> {
    let table = txn.open_table(HOUR_DOCS).map_err(db_err)?;
    read_docs(
        &table,
        q,
        lo,
        hour_doc_name,
        |doc: &HourDoc, start, slots| {
            if q.resolution == Resolution::Minute {
                let minutes = (0..MINUTES_PER_HOUR).map(|m| slot_at(doc, HEADER_LEN, 1 + m));
                push_in_range(q, minutes, start, MINUTE_S, slots);
            } else {
                push_in_range(q, [slot_at(doc, HEADER_LEN, 0)], start, 0, slots);
            }
            Ok(())
        },
    )
}

/// Day documents of `q.series` starting in `[lo, q.to)`: the summaries, and
/// for a per-minute read the minute blocks too.
fn read_day_docs(
    txn: &ReadTransaction,
    q: &ReadQuery,
    lo: i64,
) -> Result<Vec<DocRead>, StoreError> {
    let table = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
    let minutes = match q.resolution {
        Resolution::Minute => Some(txn.open_table(DAY_MINUTES).map_err(db_err)?),
        _ => None,
    };
    read_docs(
        &table,
        q,
        lo,
        day_summary_name,
        |summary: &DaySummary, start, slots| {
            match (q.resolution, &minutes) {
                (Resolution::Minute, Some(minutes)) => {
                    read_minute_blocks(minutes, q, start, slots)?
                }
                (Resolution::Hour, _) => {
                    let hours = (0..HOURS_PER_DAY).map(|h| slot_at(summary, HEADER_LEN, 1 + h));
                    push_in_range(q, hours, start, HOUR_S, slots);
                }
                _ => push_in_range(q, [slot_at(summary, HEADER_LEN, 0)], start, 0, slots),
            }
            Ok(())
        },
    )
}

/// The documents of `q.series` in `table` (hour documents or day
/// summaries, `N` bytes with a header) starting in `[lo, q.to)`; `points`
/// gathers the slots of one document, given its period start. One lookup
/// per period, within the periods the table holds at all (`layout.rs`).
fn read_docs<const N: usize>(
    table: &DocTable,
    q: &ReadQuery,
    lo: i64,
    doc_name: fn(&str, &str, i64) -> String,
    mut points: impl FnMut(&[u8; N], i64, &mut Slots) -> Result<(), StoreError>,
) -> Result<Vec<DocRead>, StoreError> {
    let met = q.series.metric_key();
    let (src, met) = (&*q.series.source, &*met);
    let mut out = Vec::new();
    let step = q.tier.period_s();
    // A range of a few periods is looked up as it is: finding the table's
    // bounds would cost as many lookups as it could save.
    let periods =
        q.to.saturating_sub(lo)
            .saturating_add(step - 1)
            .div_euclid(step);
    let (first, last) = if periods <= FEW_PERIODS {
        (lo, q.to.saturating_sub(1))
    } else {
        match held_periods(table)? {
            Some(held) => held,
            None => return Ok(out),
        }
    };
    // Stepping from `lo`, a period start, visits period starts only.
    let skip = first.saturating_sub(lo).max(0).div_euclid(step);
    let mut start = lo.saturating_add(skip.saturating_mul(step));
    while start < q.to && start <= last {
        if let Some(v) = table.get((start, src, met)).map_err(db_err)? {
            let name = || doc_name(src, met, start);
            let doc: [u8; N] = document(v.value(), name)?;
            let (code, watermark) = header(&doc);
            let mut slots = Vec::new();
            points(&doc, start, &mut slots)?;
            out.push(DocRead {
                period_start: start,
                kind: decode_kind(code, name)?,
                watermark,
                slots,
            });
        }
        let Some(next) = start.checked_add(step) else {
            break;
        };
        start = next;
    }
    Ok(out)
}

/// Up to this many periods in a range, [`read_docs`] looks each one up
/// without first finding which periods the table holds (two lookups).
const FEW_PERIODS: i64 = 2;

/// The first and last period start `table` holds, if any.
fn held_periods(table: &DocTable) -> Result<Option<(i64, i64)>, StoreError> {
    let first = table.first().map_err(db_err)?;
    let last = table.last().map_err(db_err)?;
    Ok(first
        .zip(last)
        .map(|((f, _), (l, _))| (f.value().0, l.value().0)))
}

/// The minutes in `[q.from, q.to)` of the day starting at `start`, reading
/// only the hour blocks that overlap the range.
fn read_minute_blocks(
    minutes: &ReadOnlyTable<MinutesKey<'static>, &'static [u8]>,
    q: &ReadQuery,
    start: i64,
    slots: &mut Slots,
) -> Result<(), StoreError> {
    let met = q.series.metric_key();
    let (src, met) = (&*q.series.source, &*met);
    let first = q.from.saturating_sub(start).div_euclid(HOUR_S).clamp(0, 23) as u8;
    let last = (q.to.saturating_sub(1).saturating_sub(start))
        .div_euclid(HOUR_S)
        .clamp(0, 23) as u8;
    for hour in first..=last {
        let Some(v) = minutes.get((start, hour, src, met)).map_err(db_err)? else {
            continue;
        };
        let name = || day_minutes_name(src, met, start, hour);
        let block: MinuteBlock = document(v.value(), name)?;
        let hour_start = start.saturating_add(HOUR_S * i64::from(hour));
        let block_slots = (0..MINUTES_PER_HOUR).map(|m| slot_at(&block, 0, m));
        push_in_range(q, block_slots, hour_start, MINUTE_S, slots);
    }
    Ok(())
}

/// Appends the non-empty ones of consecutive slots, the `i`-th of which
/// starts at `start + i * width`, that start in `[q.from, q.to)`.
fn push_in_range(
    q: &ReadQuery,
    consecutive: impl IntoIterator<Item = Slot>,
    start: i64,
    width: i64,
    out: &mut Slots,
) {
    for (i, s) in consecutive.into_iter().enumerate() {
        let t = start.saturating_add(width * i as i64);
        if q.from <= t && t < q.to && !s.is_empty() {
            out.push((t, s));
        }
    }
}
