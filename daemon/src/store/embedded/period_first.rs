//! Opening a file whose documents are keyed series first (layouts 1 to 4):
//! moving them to the period-first tables of layout 5 and later (why: `layout.rs`).
//! Separate because it runs once per file, when it is opened, before
//! anything reads a document, and nothing else knows the old tables.
//!
//! The file is already marked 5 when this runs (`db.rs`), so an older
//! tallyd refuses it rather than reading tables this move empties. Each
//! transaction takes up to [`MOVE_PER_TXN`] values out of the old tables
//! and puts them in the new ones, and commits durably: at any crash every
//! document is in exactly one of the two, and the next open goes on where
//! this one stopped. The old tables are deleted once empty, in the last
//! transaction. Values move as they are, bytes unchanged: a damaged one is
//! still reported by the reads that meet it.

use std::time::Instant;

use redb::{
    Database, ReadableDatabase, ReadableTableMetadata, TableDefinition, TableHandle,
    WriteTransaction,
};

use super::engine::begin_write;
use super::errors::db_err;
use super::layout::{
    DAY_MINUTES, DAY_SUMMARY, HOUR_DOCS, LEGACY_DAY_MINUTES, LEGACY_DAY_SUMMARY, LEGACY_HOUR_DOCS,
    MOVE_PER_TXN,
};
use crate::store::StoreError;

/// A series-first key, and its period-first twin.
trait SeriesFirst: redb::Key + 'static {
    type PeriodFirst: redb::Key + 'static;
    fn reorder<'a>(key: Self::SelfType<'a>) -> <Self::PeriodFirst as redb::Value>::SelfType<'a>;
}

/// Hour documents and day summaries.
impl SeriesFirst for (&'static str, &'static str, i64) {
    type PeriodFirst = (i64, &'static str, &'static str);
    fn reorder<'a>(key: Self::SelfType<'a>) -> <Self::PeriodFirst as redb::Value>::SelfType<'a> {
        let (source, metric, start) = key;
        (start, source, metric)
    }
}

/// Minute blocks.
impl SeriesFirst for (&'static str, &'static str, i64, u8) {
    type PeriodFirst = (i64, u8, &'static str, &'static str);
    fn reorder<'a>(key: Self::SelfType<'a>) -> <Self::PeriodFirst as redb::Value>::SelfType<'a> {
        let (source, metric, day, hour) = key;
        (day, hour, source, metric)
    }
}

/// Moves every document of the series-first tables, if the file has any;
/// returns how many moved.
pub(super) fn move_documents(db: &Database) -> Result<u64, StoreError> {
    if !has_series_first_tables(db)? {
        return Ok(0);
    }
    let started = Instant::now();
    let mut moved = 0u64;
    loop {
        let n = move_step(db, MOVE_PER_TXN)?;
        if n == 0 {
            break;
        }
        moved += n as u64;
        tracing::info!(
            moved,
            "embedded store: moving documents to the period-first layout"
        );
    }
    tracing::info!(
        moved,
        seconds = started.elapsed().as_secs_f64(),
        "embedded store: documents moved to the period-first layout"
    );
    Ok(moved)
}

/// Whether any series-first table is still in the file.
fn has_series_first_tables(db: &Database) -> Result<bool, StoreError> {
    let txn = db.begin_read().map_err(db_err)?;
    let names = [
        LEGACY_HOUR_DOCS.name(),
        LEGACY_DAY_SUMMARY.name(),
        LEGACY_DAY_MINUTES.name(),
    ];
    for table in txn.list_tables().map_err(db_err)? {
        if names.contains(&table.name()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One durable transaction of the move: up to `limit` values (at least
/// one), or, when none is left, the deletion of the emptied tables.
/// Returns how many values moved (0 once the old tables are gone).
pub(super) fn move_step(db: &Database, limit: usize) -> Result<usize, StoreError> {
    // A limit of 0 would find nothing to move and delete full tables.
    let limit = limit.max(1);
    let txn = begin_write(db)?;
    let mut n = move_some(&txn, LEGACY_HOUR_DOCS, HOUR_DOCS, limit)?;
    n += move_some(&txn, LEGACY_DAY_SUMMARY, DAY_SUMMARY, limit - n)?;
    n += move_some(&txn, LEGACY_DAY_MINUTES, DAY_MINUTES, limit - n)?;
    if n == 0 {
        txn.delete_table(LEGACY_HOUR_DOCS).map_err(db_err)?;
        txn.delete_table(LEGACY_DAY_SUMMARY).map_err(db_err)?;
        txn.delete_table(LEGACY_DAY_MINUTES).map_err(db_err)?;
    }
    txn.commit().map_err(db_err)?;
    Ok(n)
}

/// Moves up to `limit` values of `from` into `to`, first keys first.
fn move_some<K: SeriesFirst>(
    txn: &WriteTransaction,
    from: TableDefinition<K, &[u8]>,
    to: TableDefinition<K::PeriodFirst, &[u8]>,
    limit: usize,
) -> Result<usize, StoreError> {
    let mut old = txn.open_table(from).map_err(db_err)?;
    if limit == 0 || old.len().map_err(db_err)? == 0 {
        return Ok(0);
    }
    let mut new = txn.open_table(to).map_err(db_err)?;
    let mut n = 0;
    while n < limit {
        let Some((k, v)) = old.pop_first().map_err(db_err)? else {
            break;
        };
        new.insert(K::reorder(k.value()), v.value())
            .map_err(db_err)?;
        n += 1;
    }
    Ok(n)
}
