//! Writing documents: folds and replayed flushes (`fold.rs` decides which),
//! and pre-allocation. Separate from reads because this is the daemon's hot
//! path, with its own concerns: key order, one transaction per flush, and
//! the watermark check that makes a replayed flush count once.
//!
//! Why one write transaction per flush: redb rewrites every touched leaf page
//! and syncs once per commit, so putting all of a flush's documents in one
//! transaction pays the page copies and the commit once per flush, not once
//! per series. It is the embedded equivalent of one bulk write per flush, and
//! it makes a flush atomic: either all of its documents move to the new
//! watermark or none do.

use redb::{ReadableTable, Table, WriteTransaction};

use super::codec::{document, empty_value, header, merge_slot, put_header, stored_watermark};
use super::db::{meta_value, Db};
use super::engine::begin_write;
use super::errors::{db_err, invalid};
use super::layout::{
    day_minutes_name, day_summary_name, hour_doc_name, DayKey, DaySummary, HourKey, MinutesKey,
    DAY_MINUTES, DAY_MINUTES_LEN, DAY_SUMMARY, DAY_SUMMARY_LEN, HEADER_LEN, HOURS_PER_DAY,
    HOUR_DOCS, HOUR_DOC_LEN, META, META_LAST_FLUSH_ID, MINUTES_PER_HOUR, SLOT_LEN,
};
use super::packed::pack;
use super::pending::Fold;
use crate::model::{
    DayDocUpdate, DayHourUpdate, DocKey, HourDocUpdate, SeriesUpdate, Slot, Tier, DAY_S, HOUR_S,
};
use crate::store::{ApplyStats, PreallocStats, StoreError};

type DocTable<'txn, K> = Table<'txn, K, &'static [u8]>;

/// The three document tables, opened once per write transaction.
pub(super) struct DocTables<'txn> {
    hours: DocTable<'txn, HourKey<'static>>,
    summaries: DocTable<'txn, DayKey<'static>>,
    blocks: DocTable<'txn, MinutesKey<'static>>,
}

impl<'txn> DocTables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Ok(DocTables {
            hours: txn.open_table(HOUR_DOCS).map_err(db_err)?,
            summaries: txn.open_table(DAY_SUMMARY).map_err(db_err)?,
            blocks: txn.open_table(DAY_MINUTES).map_err(db_err)?,
        })
    }

    /// The stored watermark of the day document of the first minute `f`
    /// folds: 0 if there is none, or if it is damaged (the write that
    /// follows says so).
    pub(super) fn day_watermark(&self, f: &Fold) -> Result<u64, StoreError> {
        let Some(&(m, _)) = f.folded().first() else {
            return Ok(0);
        };
        let met = f.series.metric_key();
        let key = (Tier::Day.period_start(m), &*f.series.source, &*met);
        let value = self.summaries.get(key).map_err(db_err)?;
        Ok(stored_watermark::<DAY_SUMMARY_LEN>(
            value.as_ref().map(|v| v.value()),
        ))
    }
}

impl Db {
    pub(super) fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let mut stats = PreallocStats::default();
        let db = self.database()?;
        let txn = begin_write(&db)?;
        {
            let DocTables {
                mut hours,
                mut summaries,
                ..
            } = DocTables::open(&txn)?;
            let empty_hour = pack(&empty_value::<HOUR_DOC_LEN>(HEADER_LEN), HEADER_LEN);
            let empty_summary: DaySummary = empty_value(HEADER_LEN);

            for doc in docs {
                let met = doc.series.metric_key();
                let (src, met) = (&*doc.series.source, &*met);
                if doc.period_start.rem_euclid(doc.tier.period_s()) != 0 {
                    return Err(invalid(format!(
                        "{}: {} document start {} is not on a period boundary",
                        doc.series,
                        doc.tier.as_str(),
                        doc.period_start
                    )));
                }
                let key = (doc.period_start, src, met);
                match doc.tier {
                    Tier::Hour => {
                        if hours.get(key).map_err(db_err)?.is_some() {
                            stats.already_present += 1;
                        } else {
                            hours.insert(key, &*empty_hour).map_err(db_err)?;
                            stats.created += 1;
                        }
                    }
                    // The summary only: an absent minute block reads as 60
                    // empty slots, so writing 24 empty ones (46 KB per
                    // series, every day, for the whole fleet within the
                    // day window) would change nothing a reader can see.
                    Tier::Day => {
                        if summaries.get(key).map_err(db_err)?.is_some() {
                            stats.already_present += 1;
                        } else {
                            summaries.insert(key, &empty_summary[..]).map_err(db_err)?;
                            stats.created += 1;
                        }
                    }
                }
            }
        }
        self.commit(txn, None, false, None)?;
        Ok(stats)
    }
}

fn count(stats: &mut ApplyStats, written: bool) {
    if written {
        stats.documents_written += 1;
    } else {
        stats.documents_skipped += 1;
    }
}

/// Merges `su` into its documents with watermarks `(hour, day)` (the same
/// but for a fold split at the hour, see `split.rs`), skipping each
/// document that already holds its watermark. Callers go in series order
/// (redb compares `&str` bytewise, as `SeriesId`'s `Ord` does): within a
/// period, the key order, so that consecutive updates land in the same or
/// neighbouring B-tree pages, already cached and copied for the
/// transaction.
pub(super) fn write_series(
    tables: &mut DocTables<'_>,
    su: &SeriesUpdate,
    (hour_id, day_id): (u64, u64),
    stats: &mut ApplyStats,
) -> Result<(), StoreError> {
    let met = su.series.metric_key();
    let mut series = SeriesWrite {
        src: &su.series.source,
        met: &met,
        kind: su.kind.code(),
        id: hour_id,
    };
    for h in &su.hours {
        count(stats, series.hour(&mut tables.hours, h)?);
    }
    series.id = day_id;
    for d in &su.days {
        count(stats, series.day(tables, d)?);
    }
    Ok(())
}

/// Moves `meta.last_flush_id` up to `id`; it never goes down.
pub(super) fn raise_last_flush_id(txn: &WriteTransaction, id: u64) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META).map_err(db_err)?;
    let old = meta_value(&meta, META_LAST_FLUSH_ID)?.unwrap_or(0);
    if id > old {
        meta.insert(META_LAST_FLUSH_ID, id).map_err(db_err)?;
    }
    Ok(())
}

/// One series' share of a flush: whose documents, of which kind, from which
/// flush.
struct SeriesWrite<'a> {
    src: &'a str,
    met: &'a str,
    kind: u8,
    id: u64,
}

impl SeriesWrite<'_> {
    /// Merges `h` into its hour document unless the document already holds
    /// this flush. Returns whether it was written.
    fn hour(
        &self,
        hours: &mut DocTable<'_, HourKey<'static>>,
        h: &HourDocUpdate,
    ) -> Result<bool, StoreError> {
        let (src, met) = (self.src, self.met);
        if h.hour_start.rem_euclid(HOUR_S) != 0 {
            return Err(invalid(format!(
                "{src}/{met}: hour_start {} is not on an hour boundary",
                h.hour_start
            )));
        }
        update_value::<HourKey, HOUR_DOC_LEN>(
            hours,
            &(h.hour_start, src, met),
            Form::Packed,
            || hour_doc_name(src, met, h.hour_start),
            |doc| {
                let minutes = h.minutes.iter().map(|(minute, slot)| (*minute, slot));
                self.merge_unless_applied(doc, &h.total, minutes, MINUTES_PER_HOUR, |minute| {
                    format!(
                        "{src}/{met}: minute {minute} of hour {} is out of range",
                        h.hour_start
                    )
                })
            },
        )
    }

    /// The update of a value with a header (an hour document or a day
    /// summary), unless its watermark says it already holds this flush:
    /// `total` goes into the running slot 0, each `(i, slot)` of `parts`
    /// into slot `1 + i`, refused with `out_of_range(i)` unless `i < count`.
    /// Returns whether `doc` changed.
    fn merge_unless_applied<'p>(
        &self,
        doc: &mut [u8],
        total: &Slot,
        parts: impl Iterator<Item = (u8, &'p Slot)>,
        count: usize,
        out_of_range: impl Fn(u8) -> String,
    ) -> Result<bool, StoreError> {
        if header(doc).1 >= self.id {
            return Ok(false);
        }
        merge_slot(doc, HEADER_LEN, 0, total);
        for (i, slot) in parts {
            if usize::from(i) >= count {
                return Err(invalid(out_of_range(i)));
            }
            merge_slot(doc, HEADER_LEN, 1 + usize::from(i), slot);
        }
        put_header(doc, self.kind, self.id);
        Ok(true)
    }

    /// Merges `d` into its day document (summary and the touched minute
    /// blocks) unless the document already holds this flush. Returns whether
    /// it was written.
    fn day(&self, tables: &mut DocTables<'_>, d: &DayDocUpdate) -> Result<bool, StoreError> {
        if d.day_start.rem_euclid(DAY_S) != 0 {
            return Err(invalid(format!(
                "{}/{}: day_start {} is not on a day boundary",
                self.src, self.met, d.day_start
            )));
        }
        if !self.day_summary(&mut tables.summaries, d)? {
            return Ok(false);
        }
        // The summary moved to watermark `id`, so its minute blocks must too:
        // same transaction, no watermark of their own.
        for hu in &d.hours {
            self.minute_block(&mut tables.blocks, d.day_start, hu)?;
        }
        Ok(true)
    }

    fn day_summary(
        &self,
        summaries: &mut DocTable<'_, DayKey<'static>>,
        d: &DayDocUpdate,
    ) -> Result<bool, StoreError> {
        let (src, met) = (self.src, self.met);
        update_value::<DayKey, DAY_SUMMARY_LEN>(
            summaries,
            &(d.day_start, src, met),
            Form::Raw,
            || day_summary_name(src, met, d.day_start),
            |summary| {
                let hours = d.hours.iter().map(|hu| (hu.hour, &hu.total));
                self.merge_unless_applied(summary, &d.total, hours, HOURS_PER_DAY, |hour| {
                    format!(
                        "{src}/{met}: hour {hour} of day {} is out of range",
                        d.day_start
                    )
                })
            },
        )
    }

    fn minute_block(
        &self,
        blocks: &mut DocTable<'_, MinutesKey<'static>>,
        day_start: i64,
        hu: &DayHourUpdate,
    ) -> Result<(), StoreError> {
        let (src, met) = (self.src, self.met);
        update_value::<MinutesKey, DAY_MINUTES_LEN>(
            blocks,
            &(day_start, hu.hour, src, met),
            Form::Packed,
            || day_minutes_name(src, met, day_start, hu.hour),
            |block| {
                for &(minute, ref slot) in &hu.minutes {
                    if usize::from(minute) >= MINUTES_PER_HOUR {
                        return Err(invalid(format!(
                            "{src}/{met}: minute {minute} of hour {} of day {day_start} is out of range",
                            hu.hour
                        )));
                    }
                    merge_slot(block, 0, usize::from(minute), slot);
                }
                Ok(true)
            },
        )?;
        Ok(())
    }
}

/// How a document table stores its values (why, in `packed.rs`).
#[derive(Clone, Copy)]
enum Form {
    /// As they are, fixed-size: updated in place in one B-tree descent.
    Raw,
    /// Packed: written once when their hour closes, then rarely again.
    Packed,
}

/// Read-modify-write of one fixed-size document value.
///
/// `update` gets the stored value (unpacked, length-checked) or, if
/// absent, an all-empty one (a header of `N % SLOT_LEN` bytes, then empty
/// slots), and returns whether to write it back. Returns whether it was
/// written.
fn update_value<'k, K: redb::Key + 'static, const N: usize>(
    table: &mut Table<K, &'static [u8]>,
    key: &K::SelfType<'k>,
    form: Form,
    name: impl Fn() -> String,
    update: impl FnOnce(&mut [u8; N]) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    let base = N % SLOT_LEN;
    if let Form::Packed = form {
        let stored = match table.get(key).map_err(db_err)? {
            Some(v) => Some(document::<N>(v.value(), &name)?),
            None => None,
        };
        let mut buf = stored.unwrap_or_else(|| empty_value(base));
        if !update(&mut buf)? {
            return Ok(false);
        }
        // A plain insert, not the in-place replacement below: a value that
        // grew must split its page rather than get a larger page of its own.
        table.insert(key, &*pack(&buf, base)).map_err(db_err)?;
        return Ok(true);
    }
    if let Some(mut guard) = table.get_mut(key).map_err(db_err)? {
        let mut buf: [u8; N] = document(guard.value(), &name)?;
        if !update(&mut buf)? {
            return Ok(false);
        }
        // Same size, so redb replaces it in the (already copied) leaf.
        guard.insert(&buf[..]).map_err(db_err)?;
        return Ok(true);
    }
    let mut buf: [u8; N] = empty_value(base);
    if !update(&mut buf)? {
        return Ok(false);
    }
    table.insert(key, &buf[..]).map_err(db_err)?;
    Ok(true)
}
