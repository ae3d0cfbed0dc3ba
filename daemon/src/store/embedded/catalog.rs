//! The series catalog: upserts from the flush pipeline and the listings of
//! discovery. Separate because a listing is a scan with its own strategy,
//! unlike the document reads, and because the catalog shares nothing with
//! documents but the file.
//!
//! A listing of one metric named exactly, across sources not named exactly,
//! reads the metric's entries in `catalog_by_metric` (`catalog_index.rs`).
//! Any other listing is one range scan over `series_catalog` (keyed `source|metric`,
//! see [`super::layout`]): it starts at the larger of the cursor and the
//! source matchers' literal prefix and stops at the first key without that
//! prefix. Inside the range it skips, by seeking, the rest of a source the
//! matchers refuse and the metrics outside a known metric prefix, once it has
//! stepped over a few such keys one by one (a seek costs a B-tree descent, a
//! step only a move along a leaf).

use std::ops::Bound;
use std::sync::Arc;

use redb::{Database, ReadOnlyTable, ReadableDatabase, ReadableTable};

use super::catalog_index;
use super::codec::{checked, decode_catalog, decode_entry, encode_catalog};
use super::db::{Db, Redo};
use super::engine::begin_write;
use super::errors::db_err;
use super::layout::{catalog_name, CATALOG_BY_METRIC, CATALOG_ENTRY_LEN, SERIES_CATALOG};
use crate::selector::combined_prefix;
use crate::store::{check_catalog_entries, merge_catalog_entries, CatalogEntry, CatalogQuery};
use crate::store::{source_selected, StoreError};

/// Keys a listing steps over one by one inside a region it could skip by
/// seeking, before it seeks.
const CATALOG_STEPS_BEFORE_SEEK: usize = 16;

type CatalogTable = ReadOnlyTable<&'static str, &'static [u8]>;

impl Db {
    pub(super) fn catalog_upsert(&self, entries: &Arc<[CatalogEntry]>) -> Result<(), StoreError> {
        self.catalog_upsert_on(&*self.database()?, entries)
    }

    pub(super) fn catalog_upsert_on(
        &self,
        db: &Database,
        entries: &Arc<[CatalogEntry]>,
    ) -> Result<(), StoreError> {
        check_catalog_entries(entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let txn = begin_write(db)?;
        {
            let mut table = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
            let mut index = txn.open_table(CATALOG_BY_METRIC).map_err(db_err)?;
            // In key order, for the same page locality as `apply`.
            for (key, e) in merge_catalog_entries(entries) {
                let key = key.as_str();
                let merged = match table.get(key).map_err(db_err)? {
                    None => Some(encode_catalog(e.kind, e.first_seen, e.last_seen)),
                    Some(old) => {
                        let old: [u8; CATALOG_ENTRY_LEN] =
                            checked(old.value(), || catalog_name(key))?;
                        let (_, first, last) = decode_catalog(&old);
                        let new =
                            encode_catalog(e.kind, first.min(e.first_seen), last.max(e.last_seen));
                        // An unchanged entry is not rewritten: a write would
                        // copy its leaf page for nothing.
                        (new != old).then_some(new)
                    }
                };
                if let Some(value) = merged {
                    table.insert(key, &value[..]).map_err(db_err)?;
                    let index_key = catalog_index::index_key(&e.series, key);
                    index
                        .insert(index_key.as_str(), &value[..])
                        .map_err(db_err)?;
                }
            }
        }
        self.commit(txn, None, false, Some(Redo::Catalog(entries.clone())))
    }

    pub(super) fn catalog_list(&self, q: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let mut out = Vec::new();
        if q.limit == 0 {
            return Ok(out);
        }
        let mut listing = Listing {
            q,
            prefix: q.key_prefix(),
            metric_prefix: combined_prefix(&q.metric),
            accepted_source: None,
        };
        let (mut from, mut inclusive) = q.scan_start(&listing.prefix);
        let db = self.database()?;
        let txn = db.begin_read().map_err(db_err)?;
        if let Some(metric) = catalog_index::indexed_metric(q) {
            let index = txn.open_table(CATALOG_BY_METRIC).map_err(db_err)?;
            catalog_index::list(&index, q, metric, &mut out)?;
            return Ok(out);
        }
        let table = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
        while let Some(key) = listing.scan(&table, &from, inclusive, &mut out)? {
            from = key;
            inclusive = true;
        }
        Ok(out)
    }
}

/// One listing in progress.
struct Listing<'q> {
    q: &'q CatalogQuery,
    /// What every listed key starts with.
    prefix: String,
    /// What every listed metric starts with.
    metric_prefix: &'q str,
    /// The last source the matchers accepted, so that their regexes run
    /// once per source rather than once per key.
    accepted_source: Option<String>,
}

impl Listing<'_> {
    /// Scans from `from` and appends what the query accepts to `out`.
    /// Returns the key to seek to when it met a long enough run of refused
    /// keys, or `None` when the listing is complete.
    fn scan(
        &mut self,
        table: &CatalogTable,
        from: &str,
        inclusive: bool,
        out: &mut Vec<CatalogEntry>,
    ) -> Result<Option<String>, StoreError> {
        let lower = if inclusive {
            Bound::Included(from)
        } else {
            Bound::Excluded(from)
        };
        // A region of keys known to be refused: everything below the key
        // `skip.0`, of which `skip.1` were stepped over so far.
        let mut skip: Option<(String, usize)> = None;
        for entry in table
            .range::<&str>((lower, Bound::Unbounded))
            .map_err(db_err)?
        {
            let (k, v) = entry.map_err(db_err)?;
            let key = k.value();
            if !key.starts_with(self.prefix.as_str()) {
                return Ok(None);
            }
            if let Some((end, steps)) = &mut skip {
                if key < end.as_str() {
                    *steps += 1;
                    if *steps >= CATALOG_STEPS_BEFORE_SEEK {
                        return Ok(Some(std::mem::take(end)));
                    }
                    continue;
                }
                skip = None;
            }
            let Some((source, metric)) = key.split_once('|') else {
                return Err(StoreError::Corrupt {
                    doc: catalog_name(key),
                    reason: "the key has no `|`".into(),
                });
            };
            if let Some(end) = self.refused_region_end(source, metric) {
                skip = Some((end, 0));
                continue;
            }
            let entry = decode_entry(key, source, metric, v.value())?;
            if self.q.accepts_beyond_source(&entry) {
                out.push(entry);
                if out.len() >= self.q.limit {
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// If the matchers refuse `source|metric`, the end (exclusive) of the
    /// run of keys refused for the same reason.
    fn refused_region_end(&mut self, source: &str, metric: &str) -> Option<String> {
        // Every key of a source lies in [`source|`, `source}`): the
        // characters of names all sort below `|` (0x7C) and `}` follows it,
        // so longer sources sort before `source|`.
        if self.accepted_source.as_deref() != Some(source) {
            if !source_selected(&self.q.source, source) {
                return Some(format!("{source}}}"));
            }
            self.accepted_source = Some(source.to_string());
        }
        let metric_prefix = self.metric_prefix;
        if metric.starts_with(metric_prefix) {
            None
        } else if metric < metric_prefix {
            Some(format!("{source}|{metric_prefix}"))
        } else {
            Some(format!("{source}}}"))
        }
    }
}
