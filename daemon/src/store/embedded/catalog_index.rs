//! The catalog by metric: every catalog entry again, keyed
//! `metric|source|metric key`, so that a listing of one metric across many
//! sources (a fan-out aggregate over a source pattern, a fleet-wide PromQL
//! selector) reads that metric's entries only, instead of stepping through
//! the whole catalog in `source|metric` order. Within one metric the index
//! keys sort as the series keys do, so listings keep the catalog's order
//! and pagination.
//!
//! The index is written in the same transactions as `series_catalog` (upserts
//! and the retention sweep). A file made before the index existed gets it
//! built from the catalog when it is opened, once (`meta.catalog_by_metric`).

use std::ops::Bound;

use redb::{ReadOnlyTable, ReadableTable, WriteTransaction};

use super::codec::decode_entry;
use super::errors::db_err;
use super::layout::{CATALOG_BY_METRIC, META, META_CATALOG_BY_METRIC, SERIES_CATALOG};
use crate::model::SeriesId;
use crate::selector::{combined_prefix, NameMatcher};
use crate::store::{source_selected, CatalogEntry, CatalogQuery, StoreError};

type IndexTable = ReadOnlyTable<&'static str, &'static [u8]>;

/// The index key of the catalog entry of `series`, whose catalog key is
/// `series_key`.
pub(super) fn index_key(series: &SeriesId, series_key: &str) -> String {
    format!("{}|{series_key}", series.metric)
}

/// The metric a listing reads through the index: one named exactly, when
/// no source is (an exact source's entries are one range of the catalog
/// already).
pub(super) fn indexed_metric(q: &CatalogQuery) -> Option<&str> {
    if q.source.iter().any(|m| m.exact_name().is_some()) {
        return None;
    }
    q.metric.iter().find_map(NameMatcher::exact_name)
}

/// Appends to `out` what `q` lists of `metric`'s entries, in catalog order,
/// at most `q.limit`.
pub(super) fn list(
    table: &IndexTable,
    q: &CatalogQuery,
    metric: &str,
    out: &mut Vec<CatalogEntry>,
) -> Result<(), StoreError> {
    let prefix = format!("{metric}|{}", combined_prefix(&q.source));
    let metric_part = metric.len() + 1;
    let start = match &q.after {
        Some(after) if format!("{metric}|{}", after.key()) >= prefix => {
            Bound::Excluded(format!("{metric}|{}", after.key()))
        }
        _ => Bound::Included(prefix.clone()),
    };
    let bounds = (start.as_ref().map(String::as_str), Bound::Unbounded);
    for row in table.range::<&str>(bounds).map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value();
        if !key.starts_with(prefix.as_str()) {
            break;
        }
        let series_key = &key[metric_part..];
        let Some((source, metric_key)) = series_key.split_once('|') else {
            return Err(StoreError::Corrupt {
                doc: format!("catalog_by_metric[{key}]"),
                reason: "the key has no series key".into(),
            });
        };
        if !source_selected(&q.source, source) {
            continue;
        }
        let entry = decode_entry(series_key, source, metric_key, v.value())?;
        if q.accepts_beyond_source(&entry) {
            out.push(entry);
            if out.len() >= q.limit {
                break;
            }
        }
    }
    Ok(())
}

/// Builds the index from `series_catalog` unless the file already has it.
pub(super) fn build_once(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META).map_err(db_err)?;
    if meta.get(META_CATALOG_BY_METRIC).map_err(db_err)?.is_some() {
        return Ok(());
    }
    let catalog = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
    let mut index = txn.open_table(CATALOG_BY_METRIC).map_err(db_err)?;
    for row in catalog.iter().map_err(db_err)? {
        let (k, v) = row.map_err(db_err)?;
        let key = k.value();
        // A damaged key stays out of the index; listings of the catalog
        // itself report it.
        let Some(series) = SeriesId::from_key(key) else {
            continue;
        };
        index
            .insert(index_key(&series, key).as_str(), v.value())
            .map_err(db_err)?;
    }
    meta.insert(META_CATALOG_BY_METRIC, 1).map_err(db_err)?;
    Ok(())
}
