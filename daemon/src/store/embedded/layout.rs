//! How the document model maps onto redb: the tables, their keys, the
//! sizes of their values, and the names errors give to single values. It
//! is separate because every other part (writes, reads, the catalog, the
//! retention sweep) must agree on it, and because changing it means a new
//! [`LAYOUT_VERSION`].
//!
//! redb is an ordered key-value store with copy-on-write B-trees and
//! serialisable transactions (one writer, many readers).
//!
//! # Slots and headers
//!
//! A document value is a fixed-size byte array of slots, updated in place by
//! read-modify-write inside *one* write transaction per flush. A slot is 48
//! bytes: `n` u64 LE, `sum` f64 LE, `min` f64 LE, `max` f64 LE, and the last
//! sample: `last` f64 LE and `last_ms` i64 LE. The empty slot is `n = 0, sum =
//! 0, min = +inf, max = -inf, last = 0, last_ms = i64::MIN`
//! ([`Slot::EMPTY`]), so merging is plain addition, `min`/`max` and the newer
//! last sample with no special case, exactly as `$inc`, `$min` and `$max`
//! behave on a pre-allocated MongoDB document.
//!
//! Why fixed-size values: a document never grows, so the pre-allocated and the
//! updated document have the same size and a B-tree leaf never has to split
//! because a document filled up (the "document growth" problem that
//! pre-allocation avoids on MongoDB); and the length alone tells a
//! well-formed value from a damaged or foreign one, so decoding can refuse
//! anything unexpected with [`StoreError::Corrupt`] instead of misreading it.
//!
//! Every document value that carries a header starts with 16 bytes: the kind
//! code (u8, [`SampleKind::code`], 0 = not known yet, e.g. pre-allocated), 7
//! reserved zero bytes, and the watermark (u64 LE): the highest
//! [`FlushId`](crate::model::FlushId) applied to the document. `apply` skips
//! a document whose watermark is already at or past the batch's id, which is
//! what makes a replayed flush count once (see the exactly-once notes in
//! [`crate::store`]). A day summary written by a fold split at the hour
//! holds a lower one: just below the first flush of the hour it does not
//! hold yet (`split.rs`).
//!
//! # Tables
//!
//! | table         | key                                           | value                        | bytes |
//! |---------------|-----------------------------------------------|------------------------------|-------|
//! | `hours_by_period` | `(hour_start: i64, source, metric)`       | header + 61 slots, packed    | 2,944 |
//! | `day_summaries_by_period` | `(day_start: i64, source, metric)` | header + 25 slots          | 1,216 |
//! | `day_minutes_by_period` | `(day_start: i64, hour: u8, source, metric)` | 60 slots (no header), packed | 2,880 |
//! | `series_catalog` | `"source|metric"` ([`SeriesId::key`])      | kind, first and last seen    |    17 |
//! | `catalog_by_metric` | `"metric|source|metric key"`            | as `series_catalog`          |    17 |
//! | `flush_log`   | `(flush id: u64, chunk: u32)`                 | minute slots of many series  | ≤ ~1 MiB |
//! | `checkpoint_log` | `(checkpoint id: u64, chunk: u32)`         | minute slots of many series  | ≤ ~1 MiB |
//! | `meta`        | `&str`                                        | `u64`                        |       |
//!
//! * Hour document: slot 0 is the hour's running slot, slots 1..=60 are
//!   minutes 0..59 (the document model's `values.<MINUTE>`).
//! * Packed (layout 6): hour documents and minute blocks are stored
//!   packed, about 1,750 bytes for a full hour of a gauge instead of 2,944,
//!   so that two share a 4 KiB page where each took one; the bytes column
//!   above is their size unpacked, which every reader and writer works
//!   with. How, and why day summaries stay as they are, is in
//!   `packed.rs`. A value of the raw length still reads as it is, so a
//!   file of layout 5 is marked 6 when opened and nothing else changes:
//!   its documents are packed as they are next written.
//! * Day document (the document model's `values.<HOUR>.<MINUTE>`), split in
//!   two tables: the summary holds slot 0 = the day's running slot and slots
//!   1..=24 = each hour's running slot; the minutes table holds one 60-slot block
//!   per hour. The day's kind and watermark live in the summary only; both
//!   parts are always written in the same transaction, so they cannot
//!   disagree.
//!
//!   Why split: it is the embedded equivalent of a MongoDB projection. An
//!   hourly or daily graph over a month reads 30 summaries of 1,216 bytes
//!   instead of 30 whole day documents of 70 KB. It matters even more for
//!   writes: redb stores and rewrites values whole, so a single 70 KB day
//!   value would be copied on every flush for every active series, while the
//!   split rewrites only the 1,216-byte summary and the touched hour's
//!   2,880-byte block.
//!
//!   A day's minute blocks are created by the writes that touch them:
//!   `preallocate` creates the summary only, and a fold creates the blocks
//!   of the hours it merges. An absent block reads as 60 empty slots, so
//!   readers cannot tell, and neither pre-allocation (69 KB per series per
//!   day otherwise, the whole fleet within `prealloc.day_window`) nor the
//!   flush hot path writes empty blocks.
//! * `series_catalog`: one entry per series for discovery
//!   ([`Store::catalog_list`](crate::store::Store::catalog_list)). The value
//!   is the kind code (u8), `first_seen` (i64 LE) and `last_seen` (i64 LE),
//!   Unix seconds. The key is the joined string rather than a
//!   `(source, metric)` tuple because listings and their pagination go in
//!   the byte order of `source|metric`, which is not tuple order (`a-b|m`
//!   sorts before `a|m`, while `("a", "m")` sorts before `("a-b", "m")`);
//!   how a listing scans it is in [`super::catalog`]. The table was added
//!   without a new layout version: opening creates it empty, older files
//!   gain it and nothing else changes.
//! * `catalog_by_metric`: `series_catalog` again, keyed by metric first, so
//!   that listing one metric across sources reads its entries only (see
//!   `catalog_index.rs`). Added without a new layout version: opening a file
//!   without it builds it from the catalog once (`meta.catalog_by_metric`).
//! * `checkpoint_log`: the minute slots flushed but not yet folded into the
//!   documents above, as each checkpoint found them; a document's true
//!   content is its stored value plus these. Why, and how reads and replays
//!   count them once, is in `pending.rs` and `checkpoint.rs`; the encoding
//!   is in `flush_log.rs`. `flush_log` is its predecessor (layout 3): one
//!   flush's minutes per entry, added rather than set. A file of layout 3
//!   keeps its entries until their series are folded, and gains no new ones.
//! * `meta`: `last_flush_id` (the last checkpoint: every flush up to it is
//!   in the documents or the checkpoint log, so a restarted daemon replays
//!   its write-ahead log from there), `max_fold_watermark` (the highest
//!   watermark a fold wrote: flushes replayed at or below it may already be
//!   in a document) and `layout_version` (this layout is 6).
//!   Layouts 1 to 4 keyed documents series first: opening any of them
//!   moves its documents to the period-first tables (why, and how, is
//!   below), values unchanged. Beyond that, layout 1 had no flush log: its
//!   files gain the empty table. Layout 2 had 32-byte slots without the
//!   last sample: opening rewrites its flush log (small: the minutes not
//!   yet folded) in the new encoding, and leaves its document values as
//!   they are. A document value of the old length reads as slots without a
//!   last sample ([`codec`] widens it), and the next write of that document
//!   stores it in the new layout. Layout 3 had no checkpoint log: its files
//!   gain the empty table. Every upgrade marks the file 6, so that an older
//!   tallyd, which would misread it (or not read the checkpoint log or
//!   the packed values), refuses it instead.
//!
//!   `meta.first_seen_baselines` marks a file whose catalog no longer holds
//!   a cumulative counter's baseline minute as its `first_seen`. A counter's
//!   first sample is only a baseline: its minute holds no sample (`n = 0`)
//!   and the catalog of a new series starts at the first minute with an
//!   increase. Files written before that took the baseline minute; opening
//!   one without the marker moves each such `first_seen` to the series'
//!   first later minute with a sample (in the minute blocks or pending, up to
//!   `last_seen`), in both catalog tables, in transactions of a bounded
//!   number of entries, then sets the marker (`baselines.rs`). No new
//!   layout version: an older tallyd reads the corrected entries as they
//!   are.
//!
//! [`codec`]: super::codec
//!
//! Why this key order (from layout 5): keys sort by period start first (redb
//! compares `i64` numerically, so periods before 1970 sort correctly too),
//! then source and metric. Documents are written when their hour closes, a
//! whole fleet's within minutes of each other; with the period first those
//! new keys all sort after every older one, so a fold's inserts fill new
//! leaf pages at the right edge of the tree. With the series first
//! (layouts 1 to 4: `hour_docs`, `day_summary`, `day_minutes`), each new
//! document's key sorted beside the series' previous one, whose 2.9 KB value
//! filled a 4 KiB page by itself, so every insert split that page and wrote
//! the previous hour's document again: about half of what a close wrote
//! (BENCHMARKS.md, "Disk in real time"). A day's summaries sit together
//! too, so a close's in-place updates of them share pages.
//!
//! The price is on reads: one series' range is a point lookup per period
//! instead of one range scan, bounded by the periods the table holds at
//! all (its first and last keys), so a query over an unbounded range costs
//! no more than one over what is stored. A dashboard's day of hours is 25
//! lookups.
//!
//! Layout 4 files are upgraded when opened: the file is marked 6 first (an
//! older tallyd then refuses it instead of reading the emptied tables),
//! then the documents move to the new tables in transactions of
//! [`MOVE_PER_TXN`] values, each one taking a value out of the old table
//! and into the new in the same commit, so that a crash midway leaves
//! every document in exactly one of them and the next open goes on. The
//! old tables are deleted once empty. Nothing reads the file until the move
//! is done (`period_first.rs`).

use redb::TableDefinition;

#[cfg(doc)]
use crate::model::{SampleKind, SeriesId, Slot};
#[cfg(doc)]
use crate::store::StoreError;

/// The database file inside the data directory.
pub(super) const FILE_NAME: &str = "tally.redb";

/// Version of the layout described in the module documentation.
pub(super) const LAYOUT_VERSION: u64 = 6;

/// Older layouts this one opens, upgrading them in place (see above).
pub(super) const UPGRADABLE_LAYOUTS: &[u64] = &[1, 2, 3, 4, 5];

/// Documents moved to the period-first tables per transaction when a file
/// of an older layout is opened.
pub(super) const MOVE_PER_TXN: usize = 20_000;

/// Layouts whose flush log holds slots without the last sample.
pub(super) const LEGACY_SLOT_LAYOUTS: &[u64] = &[2];

pub(super) const META_LAST_FLUSH_ID: &str = "last_flush_id";
pub(super) const META_LAYOUT_VERSION: &str = "layout_version";
pub(super) const META_CATALOG_BY_METRIC: &str = "catalog_by_metric";
pub(super) const META_FIRST_SEEN_BASELINES: &str = "first_seen_baselines";
pub(super) const META_MAX_FOLD_WATERMARK: &str = "max_fold_watermark";

/// `(period start, source, metric key)`.
pub(super) type HourKey<'a> = (i64, &'a str, &'a str);
pub(super) type DayKey<'a> = (i64, &'a str, &'a str);
/// `(day start, hour of the day, source, metric key)`.
pub(super) type MinutesKey<'a> = (i64, u8, &'a str, &'a str);

pub(super) const HOUR_DOCS: TableDefinition<HourKey, &[u8]> =
    TableDefinition::new("hours_by_period");
pub(super) const DAY_SUMMARY: TableDefinition<DayKey, &[u8]> =
    TableDefinition::new("day_summaries_by_period");
pub(super) const DAY_MINUTES: TableDefinition<MinutesKey, &[u8]> =
    TableDefinition::new("day_minutes_by_period");

/// The tables of layouts 1 to 4, keyed series first; only the upgrade
/// (and tests making files of those layouts) opens them.
pub(super) type LegacyKey<'a> = (&'a str, &'a str, i64);
pub(super) type LegacyMinutesKey<'a> = (&'a str, &'a str, i64, u8);
pub(super) const LEGACY_HOUR_DOCS: TableDefinition<LegacyKey, &[u8]> =
    TableDefinition::new("hour_docs");
pub(super) const LEGACY_DAY_SUMMARY: TableDefinition<LegacyKey, &[u8]> =
    TableDefinition::new("day_summary");
pub(super) const LEGACY_DAY_MINUTES: TableDefinition<LegacyMinutesKey, &[u8]> =
    TableDefinition::new("day_minutes");
pub(super) const CATALOG_BY_METRIC: TableDefinition<&str, &[u8]> =
    TableDefinition::new("catalog_by_metric");
pub(super) type FlushLogKey = (u64, u32);
pub(super) const FLUSH_LOG: TableDefinition<FlushLogKey, &[u8]> = TableDefinition::new("flush_log");
pub(super) const CHECKPOINT_LOG: TableDefinition<FlushLogKey, &[u8]> =
    TableDefinition::new("checkpoint_log");
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub(super) const SERIES_CATALOG: TableDefinition<&str, &[u8]> =
    TableDefinition::new("series_catalog");

pub(super) const HEADER_LEN: usize = 16;
pub(super) const SLOT_LEN: usize = 48;
/// A slot of layout 2 and older: `n`, `sum`, `min`, `max`, no last sample.
pub(super) const LEGACY_SLOT_LEN: usize = 32;
pub(super) const MINUTES_PER_HOUR: usize = 60;
pub(super) const HOURS_PER_DAY: usize = 24;
const HOUR_DOC_SLOTS: usize = 1 + MINUTES_PER_HOUR;
const DAY_SUMMARY_SLOTS: usize = 1 + HOURS_PER_DAY;

/// Bytes of an hour document: header + 61 slots.
pub(super) const HOUR_DOC_LEN: usize = HEADER_LEN + HOUR_DOC_SLOTS * SLOT_LEN;
/// Bytes of a day summary: header + 25 slots.
pub(super) const DAY_SUMMARY_LEN: usize = HEADER_LEN + DAY_SUMMARY_SLOTS * SLOT_LEN;
/// Bytes of a day's minute block: 60 slots.
pub(super) const DAY_MINUTES_LEN: usize = MINUTES_PER_HOUR * SLOT_LEN;

/// Bytes of a `series_catalog` value: kind, first seen, last seen.
pub(super) const CATALOG_ENTRY_LEN: usize = 1 + 8 + 8;

pub(super) type HourDoc = [u8; HOUR_DOC_LEN];
pub(super) type DaySummary = [u8; DAY_SUMMARY_LEN];
pub(super) type MinuteBlock = [u8; DAY_MINUTES_LEN];

// Names of single values, for errors that must say which value is damaged.

pub(super) fn catalog_name(key: &str) -> String {
    format!("series_catalog[{key}]")
}

pub(super) fn hour_doc_name(source: &str, metric: &str, start: i64) -> String {
    format!("hours_by_period[{start}/{source}/{metric}]")
}

pub(super) fn day_summary_name(source: &str, metric: &str, start: i64) -> String {
    format!("day_summaries_by_period[{start}/{source}/{metric}]")
}

pub(super) fn day_minutes_name(source: &str, metric: &str, start: i64, hour: u8) -> String {
    format!("day_minutes_by_period[{start} hour {hour}/{source}/{metric}]")
}

pub(super) fn flush_log_name(id: u64, chunk: u32) -> String {
    format!("flush_log[flush {id} chunk {chunk}]")
}

pub(super) fn checkpoint_log_name(id: u64, chunk: u32) -> String {
    format!("checkpoint_log[checkpoint {id} chunk {chunk}]")
}
