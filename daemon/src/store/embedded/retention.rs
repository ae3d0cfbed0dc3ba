//! The retention sweep, the embedded equivalent of MongoDB's TTL index: it
//! deletes hour documents whose period starts before `now - retention.hour_s`,
//! and day documents (summary and minute blocks) whose period starts before
//! `now - retention.day_s`. Separate because it is the only deleter, and it
//! runs on the daemon's schedule, not on the flush or query path.
//!
//! Keys sort by period first (`layout.rs`), so what expired is each table's
//! first keys: one range, read only as far as it deletes. The sweep is
//! still a write transaction that flushes wait for, so the daemon's
//! minutely sweep ([`Swept::sweep_if_due`]) runs only when a period may have
//! expired since the last one. The newest expired hour changes every hour,
//! so that is still hourly: documents that late samples made in periods
//! already past retention, and expired catalog entries, wait at most that
//! long. In the same transaction it drops catalog
//! entries whose `last_seen` is before `now - retention.day_s` (by then the
//! series has no day document left), as the MongoDB store's TTL index on
//! `last_seen` does.

use parking_lot::Mutex;
use redb::Table;

use super::codec::decode_catalog;
use super::db::Db;
use super::engine::begin_write;
use super::errors::db_err;
use super::layout::{
    CATALOG_BY_METRIC, CATALOG_ENTRY_LEN, DAY_MINUTES, DAY_SUMMARY, HOUR_DOCS, SERIES_CATALOG,
};
use crate::model::{EpochMinute, Tier, HOUR_S};
use crate::store::StoreError;

/// How long hour and day documents are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retention {
    /// Hour documents whose period starts more than this many seconds before
    /// now are deleted.
    pub(super) hour_s: i64,
    /// Day documents whose period starts more than this many seconds before
    /// now are deleted.
    pub(super) day_s: i64,
}

/// What the last sweep of this process left expired: a later sweep that
/// would find the same periods expired has only late documents to find.
/// The store keeps it beside the database, which knows nothing of when
/// sweeps are due.
#[derive(Debug, Default)]
pub(super) struct Swept(Mutex<Option<SweptAt>>);

impl Swept {
    /// [`Db::sweep_expired`] if a period may have expired since the last
    /// sweep; otherwise 0 without a look.
    pub(super) fn sweep_if_due(
        &self,
        db: &Db,
        now_s: i64,
        retention: Retention,
    ) -> Result<usize, StoreError> {
        let at = SweptAt::of(now_s, retention);
        if *self.0.lock() == Some(at) {
            return Ok(0);
        }
        let deleted = db.sweep_expired(now_s, retention)?;
        *self.0.lock() = Some(at);
        Ok(deleted)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SweptAt {
    /// The newest hour and day period starts that had expired.
    hour: i64,
    day: i64,
}

impl SweptAt {
    fn of(now_s: i64, retention: Retention) -> SweptAt {
        // The newest period starting before the cutoff: the newest expired.
        let newest = |tier: Tier, retention_s: i64| {
            let cutoff = now_s.saturating_sub(retention_s);
            tier.period_start(cutoff.saturating_sub(1).div_euclid(crate::model::MINUTE_S))
        };
        SweptAt {
            hour: newest(Tier::Hour, retention.hour_s),
            day: newest(Tier::Day, retention.day_s),
        }
    }
}

impl Db {
    /// Deletes expired documents; returns how many documents (hour documents
    /// plus day documents, each day counted once) were deleted.
    ///
    /// An hour document expires when its period starts before
    /// `now_s - retention.hour_s`, a day document (summary and minute blocks)
    /// when its period starts before `now_s - retention.day_s`, as a MongoDB
    /// TTL index on the period start with `expireAfterSeconds` = retention
    /// would do. Catalog entries whose `last_seen` is before
    /// `now_s - retention.day_s` go too; they are not in the count, which is
    /// about documents (a MongoDB TTL index counts nothing at all).
    /// Blocking: call it from a blocking context.
    pub(super) fn sweep_expired(
        &self,
        now_s: i64,
        retention: Retention,
    ) -> Result<usize, StoreError> {
        let hour_cutoff = now_s
            .saturating_sub(retention.hour_s)
            .min(self.hour_documents_relied_on());
        let day_cutoff = now_s.saturating_sub(retention.day_s);
        let db = self.database()?;
        let txn = begin_write(&db)?;
        let (hours, days, blocks, series) = {
            let mut t = txn.open_table(HOUR_DOCS).map_err(db_err)?;
            let hours = sweep_periods(&mut t, hour_cutoff)?;
            let mut t = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
            let days = sweep_periods(&mut t, day_cutoff)?;
            let mut t = txn.open_table(DAY_MINUTES).map_err(db_err)?;
            let blocks = sweep_periods(&mut t, day_cutoff)?;
            let mut t = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
            let series = sweep_catalog(&mut t, day_cutoff)?;
            // The same entries, by metric.
            let mut t = txn.open_table(CATALOG_BY_METRIC).map_err(db_err)?;
            sweep_catalog(&mut t, day_cutoff)?;
            (hours, days, blocks, series)
        };
        self.commit(txn, None, true, None)?;
        tracing::debug!(
            hour_docs = hours,
            day_docs = days,
            minute_blocks = blocks,
            catalog_entries = series,
            "embedded store: swept expired documents"
        );
        Ok(hours + days)
    }

    /// The start of the earliest hour whose document the log may still rely
    /// on: an hour before the first minute of any pending run. A run a
    /// split fold left pending (`split.rs`) keeps the checkpoints logged
    /// before the split, whose minutes of the closed hour only that hour's
    /// document says are stored; it is kept, whatever the retention, until
    /// the run is folded. The runs are read in parts, as a checkpoint does.
    fn hour_documents_relied_on(&self) -> i64 {
        const PART: u32 = 4_096;
        let mut earliest: Option<EpochMinute> = None;
        let mut from = Some(0);
        while let Some(start) = from {
            let (first, next) = self.pending.lock().first_minute_in(start..start + PART);
            earliest = earliest.into_iter().chain(first).min();
            from = next;
        }
        earliest.map_or(i64::MAX, |m| {
            Tier::Hour.period_start(m).saturating_sub(HOUR_S)
        })
    }
}

/// A key whose first field is the period start: the expired values of a
/// table are the range below the cutoff's first key.
trait PeriodKey: redb::Key + 'static {
    /// The first key of period `start`.
    fn first_of(start: i64) -> Self::SelfType<'static>;
}

/// Hour documents and day summaries.
impl PeriodKey for (i64, &'static str, &'static str) {
    fn first_of(start: i64) -> Self::SelfType<'static> {
        (start, "", "")
    }
}

/// Minute blocks.
impl PeriodKey for (i64, u8, &'static str, &'static str) {
    fn first_of(start: i64) -> Self::SelfType<'static> {
        (start, 0, "", "")
    }
}

/// Deletes the values whose period starts before `cutoff`.
fn sweep_periods<K: PeriodKey>(
    table: &mut Table<K, &'static [u8]>,
    cutoff: i64,
) -> Result<usize, StoreError> {
    let mut deleted = 0usize;
    table
        .retain_in(..K::first_of(cutoff), |_, _| {
            deleted += 1;
            false
        })
        .map_err(db_err)?;
    Ok(deleted)
}

/// Deletes the catalog entries last seen before `cutoff`. A whole-table
/// scan: entries are small and not ordered by time. A value of the wrong
/// length is kept, so that listings report it rather than the sweep hiding
/// it.
fn sweep_catalog(table: &mut Table<&str, &[u8]>, cutoff: i64) -> Result<usize, StoreError> {
    let mut deleted = 0usize;
    table
        .retain(|_, v| {
            let Ok(buf) = <[u8; CATALOG_ENTRY_LEN]>::try_from(v) else {
                return true;
            };
            let keep = decode_catalog(&buf).2 >= cutoff;
            if !keep {
                deleted += 1;
            }
            keep
        })
        .map_err(db_err)?;
    Ok(deleted)
}
