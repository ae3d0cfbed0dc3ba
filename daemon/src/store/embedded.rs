//! The embedded store: the default, zero-setup store. Hour and day documents
//! live in one [redb](https://docs.rs/redb) file, `tally.redb` in
//! `--data-dir`, and survive restarts.
//!
//! # Layout
//!
//! redb is an ordered key-value store with copy-on-write B-trees and
//! serialisable transactions (one writer, many readers). The document model
//! maps onto it as follows.
//!
//! ## Slots and headers
//!
//! A document value is a fixed-size byte array of slots, updated in place by
//! read-modify-write inside *one* write transaction per flush. A slot is 32
//! bytes: `n` u64 LE, `sum` f64 LE, `min` f64 LE, `max` f64 LE. The empty slot
//! is `n = 0, sum = 0, min = +inf, max = -inf` ([`Slot::EMPTY`]), so merging
//! is plain addition and `min`/`max` with no special case, exactly as `$inc`,
//! `$min` and `$max` behave on a pre-allocated MongoDB document.
//!
//! Why fixed-size values: a document never grows, so the pre-allocated and the
//! updated document have the same size and a B-tree leaf never has to split
//! because a document filled up (the seed's "document growth" problem); and
//! the length alone tells a well-formed value from a damaged or foreign one,
//! so decoding can refuse anything unexpected with [`StoreError::Corrupt`]
//! instead of misreading it.
//!
//! Why one write transaction per flush: redb rewrites every touched leaf page
//! and syncs once per commit, so putting all of a flush's documents in one
//! transaction pays the page copies and the commit once per flush, not once
//! per series. It is the embedded equivalent of one bulk write per flush, and
//! it makes a flush atomic: either all of its documents move to the new
//! watermark or none do.
//!
//! Every document value that carries a header starts with 16 bytes: the kind
//! code (u8, [`SampleKind::code`], 0 = not known yet, e.g. pre-allocated), 7
//! reserved zero bytes, and the watermark (u64 LE): the highest [`FlushId`]
//! applied to the document. `apply` skips a document whose watermark is
//! already at or past the batch's id, which is what makes a replayed flush
//! count once (see the exactly-once notes in [`crate::store`]).
//!
//! ## Tables
//!
//! | table         | key                                           | value                        | bytes |
//! |---------------|-----------------------------------------------|------------------------------|-------|
//! | `hour_docs`   | `(source, metric, hour_start: i64)`           | header + 61 slots            | 1,968 |
//! | `day_summary` | `(source, metric, day_start: i64)`            | header + 25 slots            |   816 |
//! | `day_minutes` | `(source, metric, day_start: i64, hour: u8)`  | 60 slots (no header)         | 1,920 |
//! | `series_catalog` | `"source|metric"` ([`SeriesId::key`])      | kind, first and last seen    |    17 |
//! | `meta`        | `&str`                                        | `u64`                        |       |
//!
//! * Hour document: slot 0 is the hour's running slot, slots 1..=60 are
//!   minutes 0..59 (the seed's `values.<MINUTE>`).
//! * Day document (the seed's `values.<HOUR>.<MINUTE>`), split in two tables:
//!   the summary holds slot 0 = the day's running slot and slots 1..=24 = each
//!   hour's running slot; `day_minutes` holds one 60-slot block per hour. The
//!   day's kind and watermark live in the summary only; both parts are always
//!   written in the same transaction, so they cannot disagree.
//!
//!   Why split: it is the embedded equivalent of a MongoDB projection. An
//!   hourly or daily graph over a month reads 30 summaries of 816 bytes
//!   instead of 30 whole day documents of 47 KB. It matters even more for
//!   writes: redb stores and rewrites values whole, so a single 47 KB day
//!   value would be copied on every flush for every active series, while the
//!   split rewrites only the 816-byte summary and the touched hour's 1,920-byte
//!   block.
//!
//!   `preallocate` creates the summary and all 24 blocks. `apply` on a day
//!   nobody pre-allocated creates the summary and only the blocks it touches;
//!   an absent block reads as 60 empty slots, so the two are indistinguishable
//!   to readers, and the flush hot path does not write 23 empty blocks.
//! * `series_catalog`: one entry per series for discovery ([`Store::catalog_list`]).
//!   The value is the kind code (u8), `first_seen` (i64 LE) and `last_seen`
//!   (i64 LE), Unix seconds. The key is the joined string rather than a
//!   `(source, metric)` tuple because listings and their pagination go in
//!   the byte order of `source|metric`, which is not tuple order (`a-b|m`
//!   sorts before `a|m`, while `("a", "m")` sorts before `("a-b", "m")`).
//!   A listing is therefore one range scan: it starts at the larger of the
//!   cursor and the source matchers' literal prefix and stops at the first
//!   key without that prefix. Inside the range it skips, by seeking, the
//!   rest of a source the matchers refuse and the metrics outside a known
//!   metric prefix, once it has stepped over a few such keys one by one
//!   (a seek costs a B-tree descent, a step only a move along a leaf).
//!   The table was added without a new layout version: opening creates it
//!   empty, older files gain it and nothing else changes.
//! * `meta`: `last_flush_id` (highest flush id ever applied, so a restarted
//!   daemon continues above it) and `layout_version` (this layout is 1).
//!
//! Why this key order: keys sort by source, then metric, then period start
//! (redb compares `i64` numerically, so periods before 1970 sort correctly
//! too). One series' documents are therefore adjacent and in time order, and
//! a range read is one B-tree seek plus a sequential scan, the equivalent of
//! MongoDB's `(source, metric, period)` index; and one source's documents sit
//! together, as the brief's recommended shard key by source does on a
//! cluster.
//!
//! ## Durability
//!
//! Ordinary flushes commit with [`Durability::None`]: redb makes the commit
//! visible to readers at once but does not `fsync`. Every
//! [`EmbeddedOptions::durable_interval`] or every
//! [`EmbeddedOptions::durable_every_flushes`] commits (whichever comes
//! first), and always in [`Store::close`], a commit is made with
//! [`Durability::Immediate`], which persists it *and every non-durable commit
//! before it*. This is safe: redb's crash recovery always lands on the last
//! durable commit, a consistent snapshot (whole flushes, documents and
//! watermarks and `last_flush_id` together). A crash therefore loses only the
//! flushes committed since then, which hold only data that was in the
//! daemon's memory anyway; nothing is ever half-applied. Once the write-ahead
//! log exists, it must keep every flush above [`EmbeddedStore::durable_flush_id`]
//! for replay; the watermarks make that replay exactly-once.
//!
//! The cadence is a trade-off. A non-durable commit skips only the `fsync`;
//! its pages are still written. Leaves it copied can be reused only after
//! the next durable commit, so every non-durable commit in a row grows the
//! file by the pages it touched (about 100 MB per flush at 20,000 active
//! series), until a durable commit frees them for reuse. The defaults (5 s or
//! 8 commits) make one `fsync` cover several 1-second flushes while bounding
//! that growth.
//!
//! ## Retention
//!
//! [`EmbeddedStore::sweep_expired`] is the embedded equivalent of MongoDB's
//! TTL index: it deletes hour documents whose period starts before
//! `now - retention.hour_s`, and day documents (summary and minute blocks)
//! whose period starts before `now - retention.day_s`. It skip-scans: for each
//! series it seeks to the series' first document and deletes the expired
//! prefix, so it reads one key per series plus what it deletes, not the whole
//! table. In the same transaction it drops catalog entries whose `last_seen`
//! is before `now - retention.day_s` (by then the series has no day document
//! left), as the MongoDB store's TTL index on `last_seen` does. The daemon
//! schedules it.

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition, WriteTransaction,
};

use super::{
    check_catalog_entries, merge_catalog_entries, observe, ApplyStats, CatalogEntry, CatalogQuery,
    DocRead, PreallocStats, ReadQuery, Store, StoreError,
};
use crate::model::{
    DocKey, FlushBatch, Resolution, SampleKind, SeriesId, SeriesUpdate, Slot, Tier, DAY_S, HOUR_S,
    MINUTE_S,
};
use crate::selector::{all_match, combined_prefix};

/// The database file inside the data directory.
pub const FILE_NAME: &str = "tally.redb";

/// Version of the layout described in the module documentation.
const LAYOUT_VERSION: u64 = 1;

const META_LAST_FLUSH_ID: &str = "last_flush_id";
const META_LAYOUT_VERSION: &str = "layout_version";

type HourKey<'a> = (&'a str, &'a str, i64);
type DayKey<'a> = (&'a str, &'a str, i64);
type MinutesKey<'a> = (&'a str, &'a str, i64, u8);

const HOUR_DOCS: TableDefinition<HourKey, &[u8]> = TableDefinition::new("hour_docs");
const DAY_SUMMARY: TableDefinition<DayKey, &[u8]> = TableDefinition::new("day_summary");
const DAY_MINUTES: TableDefinition<MinutesKey, &[u8]> = TableDefinition::new("day_minutes");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SERIES_CATALOG: TableDefinition<&str, &[u8]> = TableDefinition::new("series_catalog");

const HEADER_LEN: usize = 16;
const SLOT_LEN: usize = 32;
const MINUTES_PER_HOUR: usize = 60;
const HOURS_PER_DAY: usize = 24;
const HOUR_DOC_SLOTS: usize = 1 + MINUTES_PER_HOUR;
const DAY_SUMMARY_SLOTS: usize = 1 + HOURS_PER_DAY;

/// Bytes of an `hour_docs` value: header + 61 slots.
pub const HOUR_DOC_LEN: usize = HEADER_LEN + HOUR_DOC_SLOTS * SLOT_LEN;
/// Bytes of a `day_summary` value: header + 25 slots.
pub const DAY_SUMMARY_LEN: usize = HEADER_LEN + DAY_SUMMARY_SLOTS * SLOT_LEN;
/// Bytes of a `day_minutes` value: 60 slots.
pub const DAY_MINUTES_LEN: usize = MINUTES_PER_HOUR * SLOT_LEN;

/// Bytes of a `series_catalog` value: kind, first seen, last seen.
pub const CATALOG_ENTRY_LEN: usize = 1 + 8 + 8;

/// Keys a listing steps over one by one inside a region it could skip by
/// seeking, before it seeks.
const CATALOG_STEPS_BEFORE_SEEK: usize = 16;

type HourDoc = [u8; HOUR_DOC_LEN];
type DaySummary = [u8; DAY_SUMMARY_LEN];
type MinuteBlock = [u8; DAY_MINUTES_LEN];

// ---------------------------------------------------------------------------
// Encoding. Every function below works on a buffer whose length was checked
// when it was made (a fixed-size array), so the slicing cannot go out of
// bounds for any slot index the callers pass (they validate those too).

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

fn f64_at(buf: &[u8], at: usize) -> f64 {
    f64::from_bits(u64_at(buf, at))
}

/// Slot `i` of a value whose slots start at byte `base`.
fn slot_at(buf: &[u8], base: usize, i: usize) -> Slot {
    let o = base + i * SLOT_LEN;
    Slot {
        n: u64_at(buf, o),
        sum: f64_at(buf, o + 8),
        min: f64_at(buf, o + 16),
        max: f64_at(buf, o + 24),
    }
}

fn put_slot(buf: &mut [u8], base: usize, i: usize, s: &Slot) {
    let o = base + i * SLOT_LEN;
    buf[o..o + 8].copy_from_slice(&s.n.to_le_bytes());
    buf[o + 8..o + 16].copy_from_slice(&s.sum.to_le_bytes());
    buf[o + 16..o + 24].copy_from_slice(&s.min.to_le_bytes());
    buf[o + 24..o + 32].copy_from_slice(&s.max.to_le_bytes());
}

fn merge_slot(buf: &mut [u8], base: usize, i: usize, add: &Slot) {
    let mut s = slot_at(buf, base, i);
    s.merge(add);
    put_slot(buf, base, i, &s);
}

/// (kind code, watermark) of a value with a header.
fn header(buf: &[u8]) -> (u8, u64) {
    (buf[0], u64_at(buf, 8))
}

fn put_header(buf: &mut [u8], kind: u8, watermark: u64) {
    buf[0] = kind;
    buf[1..8].fill(0);
    buf[8..16].copy_from_slice(&watermark.to_le_bytes());
}

/// An all-empty value of `N` bytes: a zero header (if `base` is
/// [`HEADER_LEN`]) and every slot [`Slot::EMPTY`].
fn empty_value<const N: usize>(base: usize) -> [u8; N] {
    let mut buf = [0u8; N];
    for i in 0..(N - base) / SLOT_LEN {
        put_slot(&mut buf, base, i, &Slot::EMPTY);
    }
    buf
}

/// Checks a stored value's length and copies it into a fixed-size buffer.
fn checked<const N: usize>(
    raw: &[u8],
    doc: impl FnOnce() -> String,
) -> Result<[u8; N], StoreError> {
    <[u8; N]>::try_from(raw).map_err(|_| StoreError::Corrupt {
        doc: doc(),
        reason: format!("value is {} bytes long; expected {N}", raw.len()),
    })
}

fn decode_kind(code: u8, doc: impl FnOnce() -> String) -> Result<Option<SampleKind>, StoreError> {
    match code {
        0 => Ok(None),
        c => SampleKind::from_code(c)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt {
                doc: doc(),
                reason: format!("unknown kind code {c}"),
            }),
    }
}

/// `(kind code, first_seen, last_seen)` of a catalog value.
fn decode_catalog(buf: &[u8; CATALOG_ENTRY_LEN]) -> (u8, i64, i64) {
    (buf[0], u64_at(buf, 1) as i64, u64_at(buf, 9) as i64)
}

fn encode_catalog(kind: SampleKind, first_seen: i64, last_seen: i64) -> [u8; CATALOG_ENTRY_LEN] {
    let mut buf = [0u8; CATALOG_ENTRY_LEN];
    buf[0] = kind.code();
    buf[1..9].copy_from_slice(&first_seen.to_le_bytes());
    buf[9..17].copy_from_slice(&last_seen.to_le_bytes());
    buf
}

fn catalog_name(key: &str) -> String {
    format!("series_catalog[{key}]")
}

fn hour_doc_name(source: &str, metric: &str, start: i64) -> String {
    format!("hour_docs[{source}/{metric}@{start}]")
}

fn day_summary_name(source: &str, metric: &str, start: i64) -> String {
    format!("day_summary[{source}/{metric}@{start}]")
}

fn day_minutes_name(source: &str, metric: &str, start: i64, hour: u8) -> String {
    format!("day_minutes[{source}/{metric}@{start} hour {hour}]")
}

/// Maps a redb error onto the store's error kinds.
fn db_err(e: impl Into<redb::Error>) -> StoreError {
    match e.into() {
        redb::Error::Corrupted(reason) => StoreError::Corrupt {
            doc: FILE_NAME.to_string(),
            reason,
        },
        e @ (redb::Error::TableTypeMismatch { .. }
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::UpgradeRequired(_)) => StoreError::Corrupt {
            doc: FILE_NAME.to_string(),
            reason: e.to_string(),
        },
        redb::Error::DatabaseAlreadyOpen => StoreError::Unavailable(format!(
            "{FILE_NAME} is already open (is another tallyd using the same --data-dir?)"
        )),
        e => StoreError::Io(e.to_string()),
    }
}

fn invalid(msg: String) -> StoreError {
    StoreError::Invalid(msg)
}

// ---------------------------------------------------------------------------

/// How long hour and day documents are kept; see
/// [`EmbeddedStore::sweep_expired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Hour documents whose period starts more than this many seconds before
    /// now are deleted.
    pub hour_s: i64,
    /// Day documents whose period starts more than this many seconds before
    /// now are deleted.
    pub day_s: i64,
}

/// Tuning of the embedded store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// A commit is made durable (fsync) when at least this long has passed
    /// since the last durable commit.
    pub durable_interval: Duration,
    /// ... or when this many commits have been made since it. 1 makes every
    /// commit durable.
    pub durable_every_flushes: u32,
    /// Bytes of B-tree pages cached in memory.
    pub cache_size_bytes: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            durable_interval: Duration::from_secs(5),
            durable_every_flushes: 8,
            cache_size_bytes: 64 * 1024 * 1024,
        }
    }
}

/// When the last durable commit was, and how many commits followed it.
#[derive(Debug)]
struct SyncState {
    last_durable: Instant,
    commits_since_durable: u32,
}

struct Inner {
    db: Database,
    path: PathBuf,
    options: EmbeddedOptions,
    sync: Mutex<SyncState>,
    /// Highest flush id committed (durably or not) in this process.
    committed_flush_id: AtomicU64,
    /// Highest flush id known to be on disk.
    durable_flush_id: AtomicU64,
}

/// The embedded store. Cheap to clone; clones share the database.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens (creating if needed) `dir` and `dir/tally.redb` with the default
    /// [`EmbeddedOptions`].
    pub fn open(dir: &Path) -> Result<EmbeddedStore, StoreError> {
        Self::open_with(dir, EmbeddedOptions::default())
    }

    /// Opens (creating if needed) `dir` and `dir/tally.redb`.
    pub fn open_with(dir: &Path, options: EmbeddedOptions) -> Result<EmbeddedStore, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Io(format!(
                "cannot create data directory {}: {e}",
                dir.display()
            ))
        })?;
        let path = dir.join(FILE_NAME);
        let db = redb::Builder::new()
            .set_cache_size(options.cache_size_bytes)
            .create(&path)
            .map_err(|e| match db_err(e) {
                StoreError::Io(msg) => {
                    StoreError::Io(format!("cannot open {}: {msg}", path.display()))
                }
                other => other,
            })?;

        // Create every table, so that read transactions always find them, and
        // check the layout version.
        let txn = db.begin_write().map_err(db_err)?;
        let last_flush_id = {
            txn.open_table(HOUR_DOCS).map_err(db_err)?;
            txn.open_table(DAY_SUMMARY).map_err(db_err)?;
            txn.open_table(DAY_MINUTES).map_err(db_err)?;
            txn.open_table(SERIES_CATALOG).map_err(db_err)?;
            let mut meta = txn.open_table(META).map_err(db_err)?;
            let version = meta
                .get(META_LAYOUT_VERSION)
                .map_err(db_err)?
                .map(|g| g.value());
            match version {
                None => {
                    meta.insert(META_LAYOUT_VERSION, LAYOUT_VERSION)
                        .map_err(db_err)?;
                }
                Some(LAYOUT_VERSION) => {}
                Some(v) => {
                    return Err(StoreError::Corrupt {
                        doc: path.display().to_string(),
                        reason: format!(
                            "layout version {v}; this version of Tally reads {LAYOUT_VERSION}"
                        ),
                    })
                }
            }
            let last = meta
                .get(META_LAST_FLUSH_ID)
                .map_err(db_err)?
                .map(|g| g.value());
            last.unwrap_or(0)
        };
        txn.commit().map_err(db_err)?;

        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                db,
                path,
                options,
                sync: Mutex::new(SyncState {
                    last_durable: Instant::now(),
                    commits_since_durable: 0,
                }),
                committed_flush_id: AtomicU64::new(last_flush_id),
                durable_flush_id: AtomicU64::new(last_flush_id),
            }),
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The highest flush id known to be on disk: a crash now would lose
    /// nothing at or below it. A write-ahead log may drop flushes up to here.
    pub fn durable_flush_id(&self) -> u64 {
        self.inner.durable_flush_id.load(Ordering::Acquire)
    }

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
    pub fn sweep_expired(&self, now_s: i64, retention: Retention) -> Result<usize, StoreError> {
        let hour_cutoff = now_s.saturating_sub(retention.hour_s);
        let day_cutoff = now_s.saturating_sub(retention.day_s);
        let txn = self.inner.db.begin_write().map_err(db_err)?;
        let (hours, days, blocks, series) = {
            let mut t = txn.open_table(HOUR_DOCS).map_err(db_err)?;
            let hours = sweep_3(&mut t, hour_cutoff)?;
            let mut t = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
            let days = sweep_3(&mut t, day_cutoff)?;
            let mut t = txn.open_table(DAY_MINUTES).map_err(db_err)?;
            let blocks = sweep_minutes(&mut t, day_cutoff)?;
            let mut t = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
            let series = sweep_catalog(&mut t, day_cutoff)?;
            (hours, days, blocks, series)
        };
        self.inner.commit(txn, None, true)?;
        tracing::debug!(
            hour_docs = hours,
            day_docs = days,
            minute_blocks = blocks,
            catalog_entries = series,
            "embedded store: swept expired documents"
        );
        Ok(hours + days)
    }

    /// Makes every commit so far durable now. Blocking.
    pub fn sync(&self) -> Result<(), StoreError> {
        let txn = self.inner.db.begin_write().map_err(db_err)?;
        self.inner.commit(txn, None, true)
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Io(format!("embedded store task failed: {e}")))?
    }
}

/// Deletes, per series, the documents of a `(source, metric, start)` table
/// whose start is before `cutoff`.
fn sweep_3(table: &mut Table<HourKey, &[u8]>, cutoff: i64) -> Result<usize, StoreError> {
    let mut deleted = 0usize;
    let mut after: Option<(String, String)> = None;
    loop {
        // The first document of the next series, if any.
        let next = {
            let mut it = match &after {
                None => table.range::<HourKey>(..),
                Some((s, m)) => table.range::<HourKey>((
                    Bound::Excluded((s.as_str(), m.as_str(), i64::MAX)),
                    Bound::Unbounded,
                )),
            }
            .map_err(db_err)?;
            match it.next() {
                None => None,
                Some(entry) => {
                    let (k, _) = entry.map_err(db_err)?;
                    let (s, m, start) = k.value();
                    Some((s.to_string(), m.to_string(), start))
                }
            }
        };
        let Some((s, m, first)) = next else { break };
        if first < cutoff {
            table
                .retain_in::<HourKey, _>(
                    (s.as_str(), m.as_str(), i64::MIN)..(s.as_str(), m.as_str(), cutoff),
                    |_, _| {
                        deleted += 1;
                        false
                    },
                )
                .map_err(db_err)?;
        }
        after = Some((s, m));
    }
    Ok(deleted)
}

/// [`sweep_3`] for `day_minutes`.
fn sweep_minutes(table: &mut Table<MinutesKey, &[u8]>, cutoff: i64) -> Result<usize, StoreError> {
    let mut deleted = 0usize;
    let mut after: Option<(String, String)> = None;
    loop {
        let next = {
            let mut it = match &after {
                None => table.range::<MinutesKey>(..),
                Some((s, m)) => table.range::<MinutesKey>((
                    Bound::Excluded((s.as_str(), m.as_str(), i64::MAX, u8::MAX)),
                    Bound::Unbounded,
                )),
            }
            .map_err(db_err)?;
            match it.next() {
                None => None,
                Some(entry) => {
                    let (k, _) = entry.map_err(db_err)?;
                    let (s, m, start, _) = k.value();
                    Some((s.to_string(), m.to_string(), start))
                }
            }
        };
        let Some((s, m, first)) = next else { break };
        if first < cutoff {
            table
                .retain_in::<MinutesKey, _>(
                    (s.as_str(), m.as_str(), i64::MIN, 0)..(s.as_str(), m.as_str(), cutoff, 0),
                    |_, _| {
                        deleted += 1;
                        false
                    },
                )
                .map_err(db_err)?;
        }
        after = Some((s, m));
    }
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

/// Read-modify-write of one fixed-size value in one B-tree descent.
///
/// `update` gets the stored value (length-checked) or, if absent, an
/// all-empty one (slots from byte `empty_base`), and returns whether to write
/// it back. Returns whether it was written.
fn update_value<'k, K: redb::Key + 'static, const N: usize>(
    table: &mut Table<K, &'static [u8]>,
    key: &K::SelfType<'k>,
    empty_base: usize,
    name: impl FnOnce() -> String,
    update: impl FnOnce(&mut [u8; N]) -> Result<bool, StoreError>,
) -> Result<bool, StoreError> {
    if let Some(mut guard) = table.get_mut(key).map_err(db_err)? {
        let mut buf: [u8; N] = checked(guard.value(), name)?;
        if !update(&mut buf)? {
            return Ok(false);
        }
        // Same size, so redb replaces it in the (already copied) leaf.
        guard.insert(&buf[..]).map_err(db_err)?;
        return Ok(true);
    }
    let mut buf: [u8; N] = empty_value(empty_base);
    if !update(&mut buf)? {
        return Ok(false);
    }
    table.insert(key, &buf[..]).map_err(db_err)?;
    Ok(true)
}

impl Inner {
    /// Commits `txn`, durably if `force_durable` or if the policy says one is
    /// due (see the module documentation), and records `flush_id`.
    ///
    /// Writers are serialised by redb (one write transaction at a time), and
    /// `txn` is still open here, so no other commit can interleave.
    fn commit(
        &self,
        mut txn: WriteTransaction,
        flush_id: Option<u64>,
        force_durable: bool,
    ) -> Result<(), StoreError> {
        let durable = force_durable || {
            let st = self.sync.lock();
            st.commits_since_durable.saturating_add(1) >= self.options.durable_every_flushes
                || st.last_durable.elapsed() >= self.options.durable_interval
        };
        if !durable {
            txn.set_durability(Durability::None).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        if let Some(id) = flush_id {
            self.committed_flush_id.fetch_max(id, Ordering::AcqRel);
        }
        let mut st = self.sync.lock();
        if durable {
            st.last_durable = Instant::now();
            st.commits_since_durable = 0;
            // A durable commit persists every commit before it as well.
            let committed = self.committed_flush_id.load(Ordering::Acquire);
            self.durable_flush_id.fetch_max(committed, Ordering::AcqRel);
        } else {
            st.commits_since_durable = st.commits_since_durable.saturating_add(1);
        }
        Ok(())
    }

    fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let id = batch.id.0;
        if id == 0 {
            return Err(invalid(
                "flush id 0 is reserved (it is the watermark of a document no flush has touched)"
                    .into(),
            ));
        }
        // Visit the documents in key order (redb compares `&str` bytewise, as
        // `SeriesId`'s `Ord` does): consecutive updates then land in the same
        // or neighbouring B-tree pages, which are already cached and already
        // copied for this transaction. Batches come out of a hash map in
        // random order; sorting costs far less than it saves.
        let mut order: Vec<&SeriesUpdate> = batch.series.iter().collect();
        order.sort_unstable_by(|a, b| a.series.cmp(&b.series));

        let mut stats = ApplyStats::default();
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut hours = txn.open_table(HOUR_DOCS).map_err(db_err)?;
            let mut summaries = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
            let mut blocks = txn.open_table(DAY_MINUTES).map_err(db_err)?;
            let mut meta = txn.open_table(META).map_err(db_err)?;

            for su in order {
                let (src, met) = (&*su.series.source, &*su.series.metric);
                let kind = su.kind.code();

                for h in &su.hours {
                    if h.hour_start.rem_euclid(HOUR_S) != 0 {
                        return Err(invalid(format!(
                            "{src}/{met}: hour_start {} is not on an hour boundary",
                            h.hour_start
                        )));
                    }
                    let written = update_value::<HourKey, HOUR_DOC_LEN>(
                        &mut hours,
                        &(src, met, h.hour_start),
                        HEADER_LEN,
                        || hour_doc_name(src, met, h.hour_start),
                        |doc| {
                            if header(doc).1 >= id {
                                return Ok(false);
                            }
                            merge_slot(doc, HEADER_LEN, 0, &h.total);
                            for &(minute, ref slot) in &h.minutes {
                                if usize::from(minute) >= MINUTES_PER_HOUR {
                                    return Err(invalid(format!(
                                        "{src}/{met}: minute {minute} of hour {} is out of range",
                                        h.hour_start
                                    )));
                                }
                                merge_slot(doc, HEADER_LEN, 1 + usize::from(minute), slot);
                            }
                            put_header(doc, kind, id);
                            Ok(true)
                        },
                    )?;
                    if written {
                        stats.documents_written += 1;
                    } else {
                        stats.documents_skipped += 1;
                    }
                }

                for d in &su.days {
                    if d.day_start.rem_euclid(DAY_S) != 0 {
                        return Err(invalid(format!(
                            "{src}/{met}: day_start {} is not on a day boundary",
                            d.day_start
                        )));
                    }
                    let written = update_value::<DayKey, DAY_SUMMARY_LEN>(
                        &mut summaries,
                        &(src, met, d.day_start),
                        HEADER_LEN,
                        || day_summary_name(src, met, d.day_start),
                        |summary| {
                            if header(summary).1 >= id {
                                return Ok(false);
                            }
                            merge_slot(summary, HEADER_LEN, 0, &d.total);
                            for hu in &d.hours {
                                if usize::from(hu.hour) >= HOURS_PER_DAY {
                                    return Err(invalid(format!(
                                        "{src}/{met}: hour {} of day {} is out of range",
                                        hu.hour, d.day_start
                                    )));
                                }
                                merge_slot(
                                    summary,
                                    HEADER_LEN,
                                    1 + usize::from(hu.hour),
                                    &hu.total,
                                );
                            }
                            put_header(summary, kind, id);
                            Ok(true)
                        },
                    )?;
                    if !written {
                        stats.documents_skipped += 1;
                        continue;
                    }
                    // The summary moved to watermark `id`, so its minute
                    // blocks must too: same transaction, no watermark of
                    // their own.
                    for hu in &d.hours {
                        update_value::<MinutesKey, DAY_MINUTES_LEN>(
                            &mut blocks,
                            &(src, met, d.day_start, hu.hour),
                            0,
                            || day_minutes_name(src, met, d.day_start, hu.hour),
                            |block| {
                                for &(minute, ref slot) in &hu.minutes {
                                    if usize::from(minute) >= MINUTES_PER_HOUR {
                                        return Err(invalid(format!(
                                            "{src}/{met}: minute {minute} of hour {} of day {} is out of range",
                                            hu.hour, d.day_start
                                        )));
                                    }
                                    merge_slot(block, 0, usize::from(minute), slot);
                                }
                                Ok(true)
                            },
                        )?;
                    }
                    stats.documents_written += 1;
                }
            }

            let old = meta
                .get(META_LAST_FLUSH_ID)
                .map_err(db_err)?
                .map(|g| g.value())
                .unwrap_or(0);
            if id > old {
                meta.insert(META_LAST_FLUSH_ID, id).map_err(db_err)?;
            }
        }
        // On any error above, dropping `txn` aborts it: nothing of the batch
        // is written.
        self.commit(txn, Some(id), false)?;
        Ok(stats)
    }

    fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let mut stats = PreallocStats::default();
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut hours = txn.open_table(HOUR_DOCS).map_err(db_err)?;
            let mut summaries = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
            let mut blocks = txn.open_table(DAY_MINUTES).map_err(db_err)?;
            let empty_hour: HourDoc = empty_value(HEADER_LEN);
            let empty_summary: DaySummary = empty_value(HEADER_LEN);
            let empty_block: MinuteBlock = empty_value(0);

            for doc in docs {
                let (src, met) = (&*doc.series.source, &*doc.series.metric);
                if doc.period_start.rem_euclid(doc.tier.period_s()) != 0 {
                    return Err(invalid(format!(
                        "{}: {} document start {} is not on a period boundary",
                        doc.series,
                        doc.tier.as_str(),
                        doc.period_start
                    )));
                }
                let key = (src, met, doc.period_start);
                match doc.tier {
                    Tier::Hour => {
                        if hours.get(key).map_err(db_err)?.is_some() {
                            stats.already_present += 1;
                        } else {
                            hours.insert(key, &empty_hour[..]).map_err(db_err)?;
                            stats.created += 1;
                        }
                    }
                    Tier::Day => {
                        if summaries.get(key).map_err(db_err)?.is_some() {
                            stats.already_present += 1;
                            continue;
                        }
                        summaries.insert(key, &empty_summary[..]).map_err(db_err)?;
                        for hour in 0..HOURS_PER_DAY as u8 {
                            let bkey = (src, met, doc.period_start, hour);
                            if blocks.get(bkey).map_err(db_err)?.is_none() {
                                blocks.insert(bkey, &empty_block[..]).map_err(db_err)?;
                            }
                        }
                        stats.created += 1;
                    }
                }
            }
        }
        self.commit(txn, None, false)?;
        Ok(stats)
    }

    fn read(&self, q: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        if q.tier == Tier::Hour && q.resolution == Resolution::Day {
            return Err(invalid(
                "hour documents hold no day slot; read daily points from the day tier".into(),
            ));
        }
        if q.from >= q.to {
            return Ok(Vec::new());
        }
        let (src, met) = (&*q.series.source, &*q.series.metric);
        let in_range = |t: i64| q.from <= t && t < q.to;
        // The document holding `from` may start before it.
        // (Clamped so that the period arithmetic cannot overflow for an
        // unbounded `from`; no document starts that early.)
        let lo = q
            .tier
            .period_start(q.from.max(i64::MIN / 2).div_euclid(MINUTE_S));
        let txn = self.db.begin_read().map_err(db_err)?;
        let mut out = Vec::new();

        match q.tier {
            Tier::Hour => {
                let table = txn.open_table(HOUR_DOCS).map_err(db_err)?;
                for entry in table
                    .range::<HourKey>((src, met, lo)..(src, met, q.to))
                    .map_err(db_err)?
                {
                    let (k, v) = entry.map_err(db_err)?;
                    let start = k.value().2;
                    let name = || hour_doc_name(src, met, start);
                    let doc: HourDoc = checked(v.value(), name)?;
                    let (code, watermark) = header(&doc);
                    let mut slots = Vec::new();
                    if q.resolution == Resolution::Minute {
                        for m in 0..MINUTES_PER_HOUR {
                            let t = start.saturating_add(MINUTE_S * m as i64);
                            let s = slot_at(&doc, HEADER_LEN, 1 + m);
                            if in_range(t) && !s.is_empty() {
                                slots.push((t, s));
                            }
                        }
                    } else {
                        let s = slot_at(&doc, HEADER_LEN, 0);
                        if in_range(start) && !s.is_empty() {
                            slots.push((start, s));
                        }
                    }
                    out.push(DocRead {
                        period_start: start,
                        kind: decode_kind(code, name)?,
                        watermark,
                        slots,
                    });
                }
            }
            Tier::Day => {
                let table = txn.open_table(DAY_SUMMARY).map_err(db_err)?;
                let minutes = match q.resolution {
                    Resolution::Minute => Some(txn.open_table(DAY_MINUTES).map_err(db_err)?),
                    _ => None,
                };
                for entry in table
                    .range::<DayKey>((src, met, lo)..(src, met, q.to))
                    .map_err(db_err)?
                {
                    let (k, v) = entry.map_err(db_err)?;
                    let start = k.value().2;
                    let name = || day_summary_name(src, met, start);
                    let summary: DaySummary = checked(v.value(), name)?;
                    let (code, watermark) = header(&summary);
                    let mut slots = Vec::new();
                    match (q.resolution, &minutes) {
                        (Resolution::Minute, Some(minutes)) => {
                            // Only the hour blocks that overlap [from, to).
                            let first =
                                q.from.saturating_sub(start).div_euclid(HOUR_S).clamp(0, 23) as u8;
                            let last = (q.to.saturating_sub(1).saturating_sub(start))
                                .div_euclid(HOUR_S)
                                .clamp(0, 23) as u8;
                            for entry in minutes
                                .range::<MinutesKey>(
                                    (src, met, start, first)..=(src, met, start, last),
                                )
                                .map_err(db_err)?
                            {
                                let (k, v) = entry.map_err(db_err)?;
                                let hour = k.value().3;
                                let bname = || day_minutes_name(src, met, start, hour);
                                if usize::from(hour) >= HOURS_PER_DAY {
                                    return Err(StoreError::Corrupt {
                                        doc: bname(),
                                        reason: "hour out of range".into(),
                                    });
                                }
                                let block: MinuteBlock = checked(v.value(), bname)?;
                                let hour_start = start.saturating_add(HOUR_S * i64::from(hour));
                                for m in 0..MINUTES_PER_HOUR {
                                    let t = hour_start.saturating_add(MINUTE_S * m as i64);
                                    let s = slot_at(&block, 0, m);
                                    if in_range(t) && !s.is_empty() {
                                        slots.push((t, s));
                                    }
                                }
                            }
                        }
                        (Resolution::Hour, _) => {
                            for h in 0..HOURS_PER_DAY {
                                let t = start.saturating_add(HOUR_S * h as i64);
                                let s = slot_at(&summary, HEADER_LEN, 1 + h);
                                if in_range(t) && !s.is_empty() {
                                    slots.push((t, s));
                                }
                            }
                        }
                        _ => {
                            let s = slot_at(&summary, HEADER_LEN, 0);
                            if in_range(start) && !s.is_empty() {
                                slots.push((start, s));
                            }
                        }
                    }
                    out.push(DocRead {
                        period_start: start,
                        kind: decode_kind(code, name)?,
                        watermark,
                        slots,
                    });
                }
            }
        }
        Ok(out)
    }

    fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        check_catalog_entries(entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
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
                }
            }
        }
        self.commit(txn, None, false)
    }

    fn catalog_list(&self, q: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let mut out = Vec::new();
        if q.limit == 0 {
            return Ok(out);
        }
        let prefix = q.key_prefix();
        let metric_prefix = combined_prefix(&q.metric);
        let (mut from, mut inclusive) = q.scan_start(&prefix);
        let txn = self.db.begin_read().map_err(db_err)?;
        let table = txn.open_table(SERIES_CATALOG).map_err(db_err)?;
        // The last source the matchers accepted, so that their regexes run
        // once per source rather than once per key.
        let mut accepted_source: Option<String> = None;
        loop {
            let lower = if inclusive {
                Bound::Included(from.as_str())
            } else {
                Bound::Excluded(from.as_str())
            };
            // A region of keys known to be refused: everything below the
            // key `skip.0`, of which `skip.1` were stepped over so far.
            let mut skip: Option<(String, usize)> = None;
            let mut seek_to = None;
            for entry in table
                .range::<&str>((lower, Bound::Unbounded))
                .map_err(db_err)?
            {
                let (k, v) = entry.map_err(db_err)?;
                let key = k.value();
                if !key.starts_with(prefix.as_str()) {
                    return Ok(out);
                }
                if let Some((end, steps)) = &mut skip {
                    if key < end.as_str() {
                        *steps += 1;
                        if *steps >= CATALOG_STEPS_BEFORE_SEEK {
                            seek_to = Some(std::mem::take(end));
                            break;
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
                // Every key of a source lies in [`source|`, `source}`): the
                // characters of names all sort below `|` (0x7C) and `}`
                // follows it, so longer sources sort before `source|`.
                let region_end = if accepted_source.as_deref() == Some(source) {
                    None
                } else if all_match(&q.source, source) {
                    accepted_source = Some(source.to_string());
                    None
                } else {
                    Some(format!("{source}}}"))
                };
                let region_end = region_end.or_else(|| {
                    if metric.starts_with(metric_prefix) {
                        None
                    } else if metric < metric_prefix {
                        Some(format!("{source}|{metric_prefix}"))
                    } else {
                        Some(format!("{source}}}"))
                    }
                });
                if let Some(end) = region_end {
                    skip = Some((end, 0));
                    continue;
                }
                let value: [u8; CATALOG_ENTRY_LEN] = checked(v.value(), || catalog_name(key))?;
                let (code, first_seen, last_seen) = decode_catalog(&value);
                let kind = SampleKind::from_code(code).ok_or_else(|| StoreError::Corrupt {
                    doc: catalog_name(key),
                    reason: format!("unknown kind code {code}"),
                })?;
                let entry = CatalogEntry {
                    series: SeriesId::new(source, metric),
                    kind,
                    first_seen,
                    last_seen,
                };
                if q.accepts_beyond_source(&entry) {
                    out.push(entry);
                    if out.len() >= q.limit {
                        return Ok(out);
                    }
                }
            }
            match seek_to {
                Some(key) => {
                    from = key;
                    inclusive = true;
                }
                None => return Ok(out),
            }
        }
    }

    fn last_flush_id(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        let id = meta
            .get(META_LAST_FLUSH_ID)
            .map_err(db_err)?
            .map(|g| g.value());
        Ok(id.unwrap_or(0))
    }

    fn health(&self) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(db_err)?;
        let meta = txn.open_table(META).map_err(db_err)?;
        meta.get(META_LAYOUT_VERSION).map_err(db_err)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Store for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        // spawn_blocking needs an owned batch.
        let batch = batch.clone();
        self.blocking(move |inner| inner.apply(&batch)).await
    }

    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let docs = docs.to_vec();
        self.blocking(move |inner| inner.preallocate(&docs)).await
    }

    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        let query = query.clone();
        self.blocking(move |inner| inner.read(&query)).await
    }

    async fn last_flush_id(&self) -> Result<u64, StoreError> {
        self.blocking(|inner| inner.last_flush_id()).await
    }

    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        let entries = entries.to_vec();
        let started = Instant::now();
        let r = self
            .blocking(move |inner| inner.catalog_upsert(&entries))
            .await;
        observe(self.name(), "catalog_upsert", started, &r);
        r
    }

    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let query = query.clone();
        let started = Instant::now();
        let r = self.blocking(move |inner| inner.catalog_list(&query)).await;
        observe(self.name(), "catalog_list", started, &r);
        r
    }

    async fn health(&self) -> Result<(), StoreError> {
        self.blocking(|inner| inner.health()).await
    }

    /// The embedded equivalent of MongoDB's TTL index: documents go once
    /// their period started more than the tier's retention ago.
    async fn expire(
        &self,
        now_s: i64,
        hour_retention_s: i64,
        day_retention_s: i64,
    ) -> Result<usize, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            store.sweep_expired(
                now_s,
                Retention {
                    hour_s: hour_retention_s,
                    day_s: day_retention_s,
                },
            )
        })
        .await
        .map_err(|e| StoreError::Io(format!("retention sweep task failed: {e}")))?
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.blocking(|inner| {
            let txn = inner.db.begin_write().map_err(db_err)?;
            inner.commit(txn, None, true)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SeriesId, SeriesMinutes, SeriesUpdate, DAY_S, HOUR_S};
    use chrono::{TimeZone, Utc};
    use std::collections::BTreeMap;

    /// Unix seconds of a UTC time.
    fn ts(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0)
            .unwrap()
            .timestamp()
    }

    /// One series' update from (unix seconds, value) samples.
    fn series(
        source: &str,
        metric: &str,
        kind: SampleKind,
        samples: &[(i64, f64)],
    ) -> SeriesUpdate {
        let mut minutes: BTreeMap<i64, Slot> = BTreeMap::new();
        for &(t, v) in samples {
            minutes.entry(t.div_euclid(60)).or_default().add(v);
        }
        SeriesUpdate::from_minutes(&SeriesMinutes {
            series: Arc::new(SeriesId::new(source, metric)),
            kind,
            minutes: minutes.into_iter().collect(),
        })
    }

    fn batch(id: u64, series: Vec<SeriesUpdate>) -> FlushBatch {
        FlushBatch {
            id: crate::model::FlushId(id),
            series,
        }
    }

    fn query(tier: Tier, resolution: Resolution, from: i64, to: i64) -> ReadQuery {
        ReadQuery {
            series: SeriesId::new("db-01", "op_counter"),
            tier,
            resolution,
            from,
            to,
        }
    }

    fn slot(n: u64, sum: f64, min: f64, max: f64) -> Slot {
        Slot { n, sum, min, max }
    }

    fn open(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(dir.path()).unwrap()
    }

    /// Samples of db-01/op_counter on 2026-03-14: two at 10:05, one at 10:59,
    /// one at 11:00.
    fn sample_batch(id: u64) -> FlushBatch {
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

    async fn read(store: &EmbeddedStore, q: ReadQuery) -> Vec<DocRead> {
        store.read(&q).await.unwrap()
    }

    #[tokio::test]
    async fn apply_then_read_each_tier_and_resolution() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        assert_eq!(store.name(), "embedded");
        let stats = store.apply(&sample_batch(1)).await.unwrap();
        // Two hour docs and one day doc.
        assert_eq!(stats.documents_written, 3);
        assert_eq!(stats.documents_skipped, 0);
        assert_eq!(store.last_flush_id().await.unwrap(), 1);

        let (h10, h11, day) = (
            ts(2026, 3, 14, 10, 0),
            ts(2026, 3, 14, 11, 0),
            ts(2026, 3, 14, 0, 0),
        );
        let m5 = slot(2, 6.0, 2.0, 4.0);
        let m59 = slot(1, -1.0, -1.0, -1.0);
        let m60 = slot(1, 10.0, 10.0, 10.0);

        // Hour tier, minutes.
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Minute, h10, h11 + HOUR_S),
        )
        .await;
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].period_start, h10);
        assert_eq!(docs[0].kind, Some(SampleKind::Gauge));
        assert_eq!(docs[0].watermark, 1);
        assert_eq!(docs[0].slots, vec![(h10 + 300, m5), (h10 + 59 * 60, m59)]);
        assert_eq!(docs[1].slots, vec![(h11, m60)]);

        // Hour tier, hours: the running slots.
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Hour, h10, h11 + HOUR_S),
        )
        .await;
        assert_eq!(docs[0].slots, vec![(h10, slot(3, 5.0, -1.0, 4.0))]);
        assert_eq!(docs[1].slots, vec![(h11, m60)]);

        // Hour tier, days: refused.
        let err = store
            .read(&query(Tier::Hour, Resolution::Day, day, day + DAY_S))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");

        // Day tier, minutes.
        let docs = read(
            &store,
            query(Tier::Day, Resolution::Minute, day, day + DAY_S),
        )
        .await;
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].period_start, day);
        assert_eq!(docs[0].watermark, 1);
        assert_eq!(docs[0].kind, Some(SampleKind::Gauge));
        assert_eq!(
            docs[0].slots,
            vec![(h10 + 300, m5), (h10 + 59 * 60, m59), (h11, m60)]
        );

        // Day tier, hours.
        let docs = read(&store, query(Tier::Day, Resolution::Hour, day, day + DAY_S)).await;
        assert_eq!(
            docs[0].slots,
            vec![(h10, slot(3, 5.0, -1.0, 4.0)), (h11, m60)]
        );

        // Day tier, days.
        let docs = read(&store, query(Tier::Day, Resolution::Day, day, day + DAY_S)).await;
        assert_eq!(docs[0].slots, vec![(day, slot(4, 15.0, -1.0, 10.0))]);

        // Sub-ranges: a `from` inside a document still finds it, and `to` is
        // exclusive.
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Minute, h10 + 30 * 60, h11),
        )
        .await;
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].slots, vec![(h10 + 59 * 60, m59)]);
        let docs = read(
            &store,
            query(Tier::Day, Resolution::Minute, h10 + 6 * 60, h11 + 60),
        )
        .await;
        assert_eq!(docs[0].slots, vec![(h10 + 59 * 60, m59), (h11, m60)]);
        let docs = read(&store, query(Tier::Day, Resolution::Hour, h11, day + DAY_S)).await;
        assert_eq!(docs[0].slots, vec![(h11, m60)]);
        // A daily read starting mid-day returns the document (its watermark)
        // but not its day slot, which starts before `from`.
        let docs = read(&store, query(Tier::Day, Resolution::Day, h10, day + DAY_S)).await;
        assert_eq!(docs.len(), 1);
        assert!(docs[0].slots.is_empty());

        // Unbounded ranges.
        for (tier, res) in [
            (Tier::Hour, Resolution::Minute),
            (Tier::Day, Resolution::Minute),
            (Tier::Day, Resolution::Hour),
            (Tier::Day, Resolution::Day),
        ] {
            let docs = read(&store, query(tier, res, i64::MIN, i64::MAX)).await;
            let n: usize = docs.iter().map(|d| d.slots.len()).sum();
            assert!(n >= 1, "{tier:?} {res:?}");
        }

        // Empty range, and a series that does not exist.
        assert!(
            read(&store, query(Tier::Hour, Resolution::Minute, h11, h10))
                .await
                .is_empty()
        );
        let mut q = query(Tier::Day, Resolution::Minute, day, day + DAY_S);
        q.series = SeriesId::new("db-01", "op_counte");
        assert!(read(&store, q).await.is_empty());
    }

    #[tokio::test]
    async fn same_batch_twice_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let b = sample_batch(7);
        store.apply(&b).await.unwrap();
        let day = ts(2026, 3, 14, 0, 0);
        let before_h = read(
            &store,
            query(Tier::Hour, Resolution::Minute, day, day + DAY_S),
        )
        .await;
        let before_d = read(
            &store,
            query(Tier::Day, Resolution::Minute, day, day + DAY_S),
        )
        .await;

        let stats = store.apply(&b).await.unwrap();
        assert_eq!(stats.documents_written, 0);
        assert_eq!(stats.documents_skipped, b.document_count());
        assert_eq!(stats.statements, 0);
        assert_eq!(stats.round_trips, 0);
        assert_eq!(
            read(
                &store,
                query(Tier::Hour, Resolution::Minute, day, day + DAY_S)
            )
            .await,
            before_h
        );
        assert_eq!(
            read(
                &store,
                query(Tier::Day, Resolution::Minute, day, day + DAY_S)
            )
            .await,
            before_d
        );
        assert_eq!(store.last_flush_id().await.unwrap(), 7);
    }

    #[tokio::test]
    async fn later_flush_applies_and_older_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        store.apply(&sample_batch(1)).await.unwrap();
        let stats = store.apply(&sample_batch(2)).await.unwrap();
        assert_eq!(stats.documents_written, 3);
        assert_eq!(stats.documents_skipped, 0);
        let day = ts(2026, 3, 14, 0, 0);
        let docs = read(&store, query(Tier::Day, Resolution::Day, day, day + DAY_S)).await;
        assert_eq!(docs[0].slots, vec![(day, slot(8, 30.0, -1.0, 10.0))]);
        assert_eq!(docs[0].watermark, 2);
        let h10 = ts(2026, 3, 14, 10, 0);
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Minute, h10, h10 + HOUR_S),
        )
        .await;
        assert_eq!(docs[0].slots[0], (h10 + 300, slot(4, 12.0, 2.0, 4.0)));

        // A replay of flush 1 now changes nothing.
        let stats = store.apply(&sample_batch(1)).await.unwrap();
        assert_eq!((stats.documents_written, stats.documents_skipped), (0, 3));
        let docs = read(&store, query(Tier::Day, Resolution::Day, day, day + DAY_S)).await;
        assert_eq!(docs[0].slots, vec![(day, slot(8, 30.0, -1.0, 10.0))]);
        // last_flush_id never goes down.
        assert_eq!(store.last_flush_id().await.unwrap(), 2);

        // A flush touching one new document and one already-applied one
        // writes only the new one.
        let mut b = sample_batch(3);
        b.series.push(series(
            "db-02",
            "op_counter",
            SampleKind::DeltaCounter,
            &[(h10, 1.0)],
        ));
        store.apply(&b).await.unwrap();
        let mut b4 = b.clone();
        b4.id = crate::model::FlushId(3);
        b4.series[1] = series(
            "db-03",
            "op_counter",
            SampleKind::DeltaCounter,
            &[(h10, 1.0)],
        );
        let stats = store.apply(&b4).await.unwrap();
        assert_eq!((stats.documents_written, stats.documents_skipped), (2, 3));
    }

    #[tokio::test]
    async fn flush_id_zero_and_malformed_updates_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let err = store.apply(&sample_batch(0)).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");

        // A bad minute index is an error, not a panic, and the batch is not
        // applied at all (the good document before it is rolled back).
        let mut b = sample_batch(1);
        let mut bad = series(
            "db-09",
            "m",
            SampleKind::Gauge,
            &[(ts(2026, 3, 14, 10, 0), 1.0)],
        );
        bad.hours[0].minutes[0].0 = 60;
        b.series.push(bad);
        let err = store.apply(&b).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
        let day = ts(2026, 3, 14, 0, 0);
        assert!(read(
            &store,
            query(Tier::Hour, Resolution::Minute, day, day + DAY_S)
        )
        .await
        .is_empty());
        assert_eq!(store.last_flush_id().await.unwrap(), 0);

        let mut b = sample_batch(1);
        b.series[0].days[0].hours[0].hour = 24;
        assert!(matches!(store.apply(&b).await, Err(StoreError::Invalid(_))));
        let mut b = sample_batch(1);
        b.series[0].hours[0].hour_start += 60;
        assert!(matches!(store.apply(&b).await, Err(StoreError::Invalid(_))));
    }

    fn raw_len(
        store: &EmbeddedStore,
        table: TableDefinition<HourKey, &[u8]>,
        key: HourKey,
    ) -> Option<usize> {
        let txn = store.inner.db.begin_read().unwrap();
        let t = txn.open_table(table).unwrap();
        let len = t.get(key).unwrap().map(|v| v.value().len());
        len
    }

    fn raw_blocks(store: &EmbeddedStore, src: &str, met: &str, day: i64) -> Vec<(u8, Vec<u8>)> {
        let txn = store.inner.db.begin_read().unwrap();
        let t = txn.open_table(DAY_MINUTES).unwrap();
        let blocks = t
            .range::<MinutesKey>((src, met, day, 0)..=(src, met, day, u8::MAX))
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value().3, v.value().to_vec())
            })
            .collect();
        blocks
    }

    #[tokio::test]
    async fn preallocate_creates_empty_docs_and_never_modifies() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let id = SeriesId::new("db-01", "op_counter");
        let h10 = ts(2026, 3, 14, 10, 0);
        let day = ts(2026, 3, 14, 0, 0);
        let keys = vec![
            DocKey {
                series: id.clone(),
                tier: Tier::Hour,
                period_start: h10,
            },
            DocKey {
                series: id.clone(),
                tier: Tier::Day,
                period_start: day,
            },
        ];
        let stats = store.preallocate(&keys).await.unwrap();
        assert_eq!(
            stats,
            PreallocStats {
                created: 2,
                already_present: 0
            }
        );

        // Sizes and contents on disk.
        assert_eq!(
            raw_len(&store, HOUR_DOCS, ("db-01", "op_counter", h10)),
            Some(HOUR_DOC_LEN)
        );
        assert_eq!(
            raw_len(&store, DAY_SUMMARY, ("db-01", "op_counter", day)),
            Some(DAY_SUMMARY_LEN)
        );
        assert_eq!(
            (HOUR_DOC_LEN, DAY_SUMMARY_LEN, DAY_MINUTES_LEN),
            (1968, 816, 1920)
        );
        let blocks = raw_blocks(&store, "db-01", "op_counter", day);
        assert_eq!(blocks.len(), 24);
        for (h, (hour, bytes)) in blocks.iter().enumerate() {
            assert_eq!(usize::from(*hour), h);
            assert_eq!(bytes.len(), DAY_MINUTES_LEN);
            for m in 0..60 {
                assert_eq!(slot_at(bytes, 0, m), Slot::EMPTY);
            }
        }
        {
            let txn = store.inner.db.begin_read().unwrap();
            let t = txn.open_table(HOUR_DOCS).unwrap();
            let v = t.get(("db-01", "op_counter", h10)).unwrap().unwrap();
            let v = v.value();
            assert_eq!(header(v), (0, 0));
            assert_eq!(&v[1..8], &[0u8; 7]);
            for i in 0..61 {
                assert_eq!(slot_at(v, HEADER_LEN, i), Slot::EMPTY);
            }
        }

        // Reads see the documents, unknown kind, watermark 0, no slots.
        for (tier, res) in [
            (Tier::Hour, Resolution::Minute),
            (Tier::Hour, Resolution::Hour),
            (Tier::Day, Resolution::Minute),
            (Tier::Day, Resolution::Hour),
            (Tier::Day, Resolution::Day),
        ] {
            let docs = read(&store, query(tier, res, day, day + DAY_S)).await;
            assert_eq!(docs.len(), 1, "{tier:?} {res:?}");
            assert_eq!(docs[0].kind, None);
            assert_eq!(docs[0].watermark, 0);
            assert!(docs[0].slots.is_empty());
        }

        // Apply into the pre-allocated documents, then pre-allocate again:
        // nothing changes.
        store.apply(&sample_batch(1)).await.unwrap();
        let h_before = read(
            &store,
            query(Tier::Hour, Resolution::Minute, day, day + DAY_S),
        )
        .await;
        let d_before = read(
            &store,
            query(Tier::Day, Resolution::Minute, day, day + DAY_S),
        )
        .await;
        let s_before = read(&store, query(Tier::Day, Resolution::Hour, day, day + DAY_S)).await;
        assert_eq!(d_before[0].kind, Some(SampleKind::Gauge));
        let mut more = keys.clone();
        // 11:00 was created by apply, not pre-allocated.
        more.push(DocKey {
            series: id.clone(),
            tier: Tier::Hour,
            period_start: h10 + HOUR_S,
        });
        let stats = store.preallocate(&more).await.unwrap();
        assert_eq!(
            stats,
            PreallocStats {
                created: 0,
                already_present: 3
            }
        );
        assert_eq!(
            read(
                &store,
                query(Tier::Hour, Resolution::Minute, day, day + DAY_S)
            )
            .await,
            h_before
        );
        assert_eq!(
            read(
                &store,
                query(Tier::Day, Resolution::Minute, day, day + DAY_S)
            )
            .await,
            d_before
        );
        assert_eq!(
            read(&store, query(Tier::Day, Resolution::Hour, day, day + DAY_S)).await,
            s_before
        );

        // A day created by apply has only its touched blocks; pre-allocating
        // it does not fill in the rest (absent blocks read as empty).
        let other = series("db-02", "m", SampleKind::Gauge, &[(h10, 1.0)]);
        store.apply(&batch(2, vec![other])).await.unwrap();
        assert_eq!(raw_blocks(&store, "db-02", "m", day).len(), 1);
        let stats = store
            .preallocate(&[DocKey {
                series: SeriesId::new("db-02", "m"),
                tier: Tier::Day,
                period_start: day,
            }])
            .await
            .unwrap();
        assert_eq!(stats.already_present, 1);
        assert_eq!(raw_blocks(&store, "db-02", "m", day).len(), 1);

        // A misaligned key is refused.
        let err = store
            .preallocate(&[DocKey {
                series: id,
                tier: Tier::Day,
                period_start: h10,
            }])
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    }

    #[tokio::test]
    async fn reads_across_hour_day_month_and_year_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        // 2026-01-31 23:58 .. 2026-02-01 00:01, and a year boundary.
        let jan31_2358 = ts(2026, 1, 31, 23, 58);
        let mut samples: Vec<(i64, f64)> = (0..4)
            .map(|i| (jan31_2358 + 60 * i, i as f64 + 1.0))
            .collect();
        let dec31_2359 = ts(2025, 12, 31, 23, 59);
        samples.insert(0, (dec31_2359, 100.0));
        samples.insert(1, (dec31_2359 + 60, 200.0));
        let b = batch(
            1,
            vec![series(
                "db-01",
                "op_counter",
                SampleKind::DeltaCounter,
                &samples,
            )],
        );
        store.apply(&b).await.unwrap();

        let feb1 = ts(2026, 2, 1, 0, 0);
        let jan31 = ts(2026, 1, 31, 0, 0);
        // Minutes across the hour/day/month boundary, from the hour tier.
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Minute, jan31_2358, feb1 + 120),
        )
        .await;
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![feb1 - HOUR_S, feb1]
        );
        let all: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
        assert_eq!(
            all,
            (0..4)
                .map(|i| (jan31_2358 + 60 * i, Slot::of(i as f64 + 1.0)))
                .collect::<Vec<_>>()
        );
        assert!(docs
            .iter()
            .all(|d| d.kind == Some(SampleKind::DeltaCounter)));
        // ... and from the day tier.
        let docs = read(
            &store,
            query(Tier::Day, Resolution::Minute, jan31_2358, feb1 + 120),
        )
        .await;
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![jan31, feb1]
        );
        let all2: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
        assert_eq!(all2, all);
        // Hours across the day boundary.
        let docs = read(
            &store,
            query(Tier::Day, Resolution::Hour, feb1 - HOUR_S, feb1 + HOUR_S),
        )
        .await;
        assert_eq!(docs[0].slots, vec![(feb1 - HOUR_S, slot(2, 3.0, 1.0, 2.0))]);
        assert_eq!(docs[1].slots, vec![(feb1, slot(2, 7.0, 3.0, 4.0))]);
        // Days across the month boundary.
        let docs = read(
            &store,
            query(Tier::Day, Resolution::Day, jan31, feb1 + DAY_S),
        )
        .await;
        assert_eq!(docs[0].slots, vec![(jan31, slot(2, 3.0, 1.0, 2.0))]);
        assert_eq!(docs[1].slots, vec![(feb1, slot(2, 7.0, 3.0, 4.0))]);
        // Days across the year boundary, over a long range (two months)
        // reading only the summaries.
        let dec31 = ts(2025, 12, 31, 0, 0);
        let jan1 = ts(2026, 1, 1, 0, 0);
        let docs = read(
            &store,
            query(
                Tier::Day,
                Resolution::Day,
                ts(2025, 12, 1, 0, 0),
                ts(2026, 3, 1, 0, 0),
            ),
        )
        .await;
        let days: Vec<_> = docs.iter().flat_map(|d| d.slots.iter().copied()).collect();
        assert_eq!(
            days,
            vec![
                (dec31, Slot::of(100.0)),
                (jan1, Slot::of(200.0)),
                (jan31, slot(2, 3.0, 1.0, 2.0)),
                (feb1, slot(2, 7.0, 3.0, 4.0)),
            ]
        );
    }

    #[tokio::test]
    async fn pre_epoch_periods_sort_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let t = -90; // 1969-12-31 23:58:30
        let b = batch(
            1,
            vec![series(
                "db-01",
                "op_counter",
                SampleKind::Gauge,
                &[(t, 1.0), (30, 2.0)],
            )],
        );
        store.apply(&b).await.unwrap();
        let docs = read(
            &store,
            query(Tier::Hour, Resolution::Minute, -HOUR_S, HOUR_S),
        )
        .await;
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![-HOUR_S, 0]
        );
        assert_eq!(docs[0].slots, vec![(-120, Slot::of(1.0))]);
        let docs = read(&store, query(Tier::Day, Resolution::Minute, -119, 60)).await;
        assert_eq!(
            docs.iter().map(|d| d.period_start).collect::<Vec<_>>(),
            vec![-DAY_S, 0]
        );
        assert!(docs[0].slots.is_empty(), "bucket -120 starts before from");
        assert_eq!(docs[1].slots, vec![(0, Slot::of(2.0))]);
    }

    #[tokio::test]
    async fn survives_close_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let day = ts(2026, 3, 14, 0, 0);
        let before = {
            let store = open(&dir);
            store.apply(&sample_batch(5)).await.unwrap();
            // Not durable yet under the default policy...
            assert_eq!(store.durable_flush_id(), 0);
            store.close().await.unwrap();
            // ... and durable after close.
            assert_eq!(store.durable_flush_id(), 5);
            read(
                &store,
                query(Tier::Day, Resolution::Minute, day, day + DAY_S),
            )
            .await
        };
        let store = open(&dir);
        assert_eq!(store.path(), dir.path().join(FILE_NAME));
        store.health().await.unwrap();
        assert_eq!(store.last_flush_id().await.unwrap(), 5);
        assert_eq!(store.durable_flush_id(), 5);
        assert_eq!(
            read(
                &store,
                query(Tier::Day, Resolution::Minute, day, day + DAY_S)
            )
            .await,
            before
        );
        // The replayed flush is still recognised after the restart.
        let stats = store.apply(&sample_batch(5)).await.unwrap();
        assert_eq!(stats.documents_written, 0);
    }

    #[tokio::test]
    async fn second_open_of_the_same_dir_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let _store = open(&dir);
        let err = EmbeddedStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn durable_policy_every_k_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_with(
            dir.path(),
            EmbeddedOptions {
                durable_interval: Duration::from_secs(3600),
                durable_every_flushes: 3,
                ..EmbeddedOptions::default()
            },
        )
        .unwrap();
        store.apply(&sample_batch(1)).await.unwrap();
        store.apply(&sample_batch(2)).await.unwrap();
        assert_eq!(store.durable_flush_id(), 0);
        store.apply(&sample_batch(3)).await.unwrap();
        assert_eq!(store.durable_flush_id(), 3);
        store.apply(&sample_batch(4)).await.unwrap();
        assert_eq!(store.durable_flush_id(), 3);
        store.sync().unwrap();
        assert_eq!(store.durable_flush_id(), 4);
    }

    #[tokio::test]
    async fn expire_through_the_store_trait_sweeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let old = ts(2026, 3, 1, 10, 0);
        let b = batch(1, vec![series("a", "m", SampleKind::Gauge, &[(old, 1.0)])]);
        store.apply(&b).await.unwrap();
        let dyn_store: &dyn Store = &store;
        // Ten days later, with 1 h / 2 d retention: the hour and day docs go.
        let gone = dyn_store
            .expire(old + 10 * DAY_S, HOUR_S, 2 * DAY_S)
            .await
            .unwrap();
        assert!(gone >= 2, "{gone}");
        assert_eq!(
            dyn_store
                .expire(old + 10 * DAY_S, HOUR_S, 2 * DAY_S)
                .await
                .unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn sweep_expired_deletes_only_old_docs() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let now = ts(2026, 3, 14, 12, 0);
        let mut samples = Vec::new();
        // Samples on 03-10 .. 03-14, at 10:00 and 11:00 each day.
        for d in 10..=14 {
            samples.push((ts(2026, 3, d, 10, 0), 1.0));
            samples.push((ts(2026, 3, d, 11, 0), 1.0));
        }
        let b = batch(
            1,
            vec![
                series("a", "m", SampleKind::Gauge, &samples),
                series("b", "m", SampleKind::Gauge, &samples),
                series("b", "n", SampleKind::Gauge, &samples[samples.len() - 2..]),
            ],
        );
        store.apply(&b).await.unwrap();
        store
            .preallocate(&[DocKey {
                series: SeriesId::new("c", "m"),
                tier: Tier::Day,
                period_start: ts(2026, 3, 1, 0, 0),
            }])
            .await
            .unwrap();
        // Keep hour docs starting at or after 11:00 today (1 h + slack), and
        // day docs starting at or after 03-12.
        let retention = Retention {
            hour_s: HOUR_S,
            day_s: 2 * DAY_S + 12 * HOUR_S,
        };
        let deleted = store.sweep_expired(now, retention).unwrap();
        // Hour docs: a and b have 10 each, 1 kept; b/n has 2, 1 kept.
        // Day docs: a and b have 5 each, 3 kept; b/n has 1, kept; c has 1, gone.
        assert_eq!(deleted, (9 + 9 + 1) + (2 + 2 + 1));
        for s in ["a", "b"] {
            let mut q = query(
                Tier::Hour,
                Resolution::Hour,
                ts(2026, 3, 1, 0, 0),
                now + DAY_S,
            );
            q.series = SeriesId::new(s, "m");
            let hours = read(&store, q.clone()).await;
            assert_eq!(
                hours.iter().map(|d| d.period_start).collect::<Vec<_>>(),
                vec![ts(2026, 3, 14, 11, 0)]
            );
            q.tier = Tier::Day;
            let days = read(&store, q.clone()).await;
            assert_eq!(
                days.iter().map(|d| d.period_start).collect::<Vec<_>>(),
                vec![
                    ts(2026, 3, 12, 0, 0),
                    ts(2026, 3, 13, 0, 0),
                    ts(2026, 3, 14, 0, 0)
                ]
            );
            for day in [10, 11] {
                assert!(raw_blocks(&store, s, "m", ts(2026, 3, day, 0, 0)).is_empty());
            }
            assert_eq!(raw_blocks(&store, s, "m", ts(2026, 3, 12, 0, 0)).len(), 2);
        }
        assert!(raw_blocks(&store, "c", "m", ts(2026, 3, 1, 0, 0)).is_empty());
        // Nothing more to do the second time.
        assert_eq!(store.sweep_expired(now, retention).unwrap(), 0);
        // The kept documents still hold their data.
        let mut q = query(Tier::Day, Resolution::Minute, ts(2026, 3, 14, 0, 0), now);
        q.series = SeriesId::new("b", "n");
        assert_eq!(read(&store, q).await[0].slots.len(), 2);
    }

    fn write_raw<K: redb::Key + 'static>(
        store: &EmbeddedStore,
        table: TableDefinition<K, &[u8]>,
        key: K::SelfType<'_>,
        value: &[u8],
    ) {
        let txn = store.inner.db.begin_write().unwrap();
        txn.open_table(table).unwrap().insert(key, value).unwrap();
        txn.commit().unwrap();
    }

    #[tokio::test]
    async fn bad_catalog_values_are_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let list = CatalogQuery {
            source: Vec::new(),
            metric: Vec::new(),
            kind: None,
            seen_since: None,
            after: None,
            limit: 10,
        };
        write_raw(&store, SERIES_CATALOG, "a|m", &[1, 2, 3]);
        for err in [
            store.catalog_list(&list).await.unwrap_err(),
            store
                .catalog_upsert(&[CatalogEntry {
                    series: SeriesId::new("a", "m"),
                    kind: SampleKind::Gauge,
                    first_seen: 0,
                    last_seen: 0,
                }])
                .await
                .unwrap_err(),
        ] {
            assert!(
                matches!(&err, StoreError::Corrupt { doc, .. } if doc.contains("a|m")),
                "{err:?}"
            );
        }
        // The sweep keeps what it cannot read, for listings to report.
        store
            .sweep_expired(
                i64::MAX / 2,
                Retention {
                    hour_s: 1,
                    day_s: 1,
                },
            )
            .unwrap();
        assert!(store.catalog_list(&list).await.is_err());

        let mut bad_kind = encode_catalog(SampleKind::Gauge, 0, 0);
        bad_kind[0] = 9;
        write_raw(&store, SERIES_CATALOG, "a|m", &bad_kind);
        let err = store.catalog_list(&list).await.unwrap_err();
        assert!(matches!(&err, StoreError::Corrupt { reason, .. } if reason.contains("kind")));
        write_raw(
            &store,
            SERIES_CATALOG,
            "no-separator",
            &encode_catalog(SampleKind::Gauge, 0, 0),
        );
        write_raw(
            &store,
            SERIES_CATALOG,
            "a|m",
            &encode_catalog(SampleKind::Gauge, 0, 0),
        );
        let err = store.catalog_list(&list).await.unwrap_err();
        assert!(matches!(&err, StoreError::Corrupt { doc, .. } if doc.contains("no-separator")));
    }

    #[tokio::test]
    async fn wrong_value_length_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let h10 = ts(2026, 3, 14, 10, 0);
        let day = ts(2026, 3, 14, 0, 0);
        write_raw(&store, HOUR_DOCS, ("db-01", "op_counter", h10), &[1, 2, 3]);
        let err = store
            .read(&query(Tier::Hour, Resolution::Minute, h10, h10 + HOUR_S))
            .await
            .unwrap_err();
        match &err {
            StoreError::Corrupt { doc, reason } => {
                assert!(
                    doc.contains("hour_docs") && doc.contains("db-01/op_counter"),
                    "{doc}"
                );
                assert!(reason.contains("3 bytes"), "{reason}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(!err.is_retryable());
        assert!(matches!(
            store.apply(&sample_batch(1)).await,
            Err(StoreError::Corrupt { .. })
        ));

        // Day summary one byte too long.
        write_raw(
            &store,
            DAY_SUMMARY,
            ("db-02", "m", day),
            &[0u8; DAY_SUMMARY_LEN + 1],
        );
        let mut q = query(Tier::Day, Resolution::Day, day, day + DAY_S);
        q.series = SeriesId::new("db-02", "m");
        assert!(matches!(
            store.read(&q).await,
            Err(StoreError::Corrupt { .. })
        ));

        // A minute block cut short: the summary is fine, the block is not.
        let b = batch(
            2,
            vec![series("db-03", "m", SampleKind::Gauge, &[(h10, 1.0)])],
        );
        store.apply(&b).await.unwrap();
        write_raw(&store, DAY_MINUTES, ("db-03", "m", day, 10), &[0u8; 100]);
        let mut q = query(Tier::Day, Resolution::Minute, day, day + DAY_S);
        q.series = SeriesId::new("db-03", "m");
        match store.read(&q).await {
            Err(StoreError::Corrupt { doc, .. }) => assert!(doc.contains("day_minutes"), "{doc}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // The hourly read does not touch the block, so it still works.
        q.resolution = Resolution::Hour;
        assert_eq!(read(&store, q).await[0].slots.len(), 1);
        let b = batch(
            3,
            vec![series("db-03", "m", SampleKind::Gauge, &[(h10, 1.0)])],
        );
        assert!(matches!(
            store.apply(&b).await,
            Err(StoreError::Corrupt { .. })
        ));

        // An unknown kind code.
        let mut bad: HourDoc = empty_value(HEADER_LEN);
        put_header(&mut bad, 9, 1);
        write_raw(&store, HOUR_DOCS, ("db-04", "m", h10), &bad);
        let mut q = query(Tier::Hour, Resolution::Hour, h10, h10 + HOUR_S);
        q.series = SeriesId::new("db-04", "m");
        assert!(matches!(
            store.read(&q).await,
            Err(StoreError::Corrupt { .. })
        ));
    }

    /// Flush cost per active series. Run with
    /// `cargo test --release -p tallyd --lib store::embedded::tests::bench_apply -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread")]
    #[ignore]
    async fn bench_apply_20k_series_one_minute() {
        const SERIES: usize = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let t0 = ts(2026, 3, 14, 10, 0);
        let make = |id: u64, minute: i64| {
            batch(
                id,
                (0..SERIES)
                    .map(|i| {
                        series(
                            &format!("db-{:05}", i / 20),
                            &format!("metric_{:02}", i % 20),
                            SampleKind::Gauge,
                            &[(t0 + 60 * minute, i as f64)],
                        )
                    })
                    .collect(),
            )
        };
        let keys: Vec<DocKey> = (0..SERIES)
            .flat_map(|i| {
                let series = SeriesId::new(
                    &format!("db-{:05}", i / 20),
                    &format!("metric_{:02}", i % 20),
                );
                [
                    DocKey {
                        series: series.clone(),
                        tier: Tier::Hour,
                        period_start: t0 + HOUR_S,
                    },
                    DocKey {
                        series,
                        tier: Tier::Day,
                        period_start: t0 - 10 * HOUR_S + DAY_S,
                    },
                ]
            })
            .collect();

        let report = |what: &str, d: Duration| {
            println!(
                "{what:<58} {:>8.1} ms  {:>6.2} µs/series",
                d.as_secs_f64() * 1e3,
                d.as_secs_f64() * 1e6 / SERIES as f64
            );
        };
        let file_mb = || {
            std::fs::metadata(store.path())
                .map(|m| m.len())
                .unwrap_or(0) as f64
                / 1e6
        };
        let b = make(1, 0);
        let start = Instant::now();
        let _ = b.clone();
        report("clone of the batch (part of apply)", start.elapsed());

        let start = Instant::now();
        let stats = store.apply(&b).await.unwrap();
        report(
            "apply #1: creates 20k hour + 20k day docs (non-durable)",
            start.elapsed(),
        );
        assert_eq!(stats.documents_written, 2 * SERIES);
        store.sync().unwrap();
        println!("file after #1 + sync: {:.0} MB", file_mb());
        for id in 2..=5 {
            let b = make(id, id as i64);
            let start = Instant::now();
            store.apply(&b).await.unwrap();
            report(
                &format!("apply #{id}: updates, key order (non-durable)"),
                start.elapsed(),
            );
        }
        println!("file after 4 non-durable applies: {:.0} MB", file_mb());
        let start = Instant::now();
        store.sync().unwrap();
        report("durable empty commit (fsync of the above)", start.elapsed());
        for id in 6..=9 {
            let mut b = make(id, id as i64);
            rand::seq::SliceRandom::shuffle(&mut b.series[..], &mut rand::rng());
            let start = Instant::now();
            store.apply(&b).await.unwrap();
            report(
                &format!("apply #{id}: updates, random order (non-durable)"),
                start.elapsed(),
            );
        }
        let b = make(10, 10);
        let start = Instant::now();
        store.inner.apply(&b).unwrap();
        let d = start.elapsed();
        let start = Instant::now();
        store.sync().unwrap();
        report("apply #10 without clone/spawn_blocking", d);
        report("apply #10 then durable commit", d + start.elapsed());
        println!("file after 10 applies: {:.0} MB", file_mb());

        let start = Instant::now();
        let stats = store.preallocate(&keys).await.unwrap();
        report(
            "preallocate next hour + next day (24 blocks each)",
            start.elapsed(),
        );
        assert_eq!(stats.created, 2 * SERIES);
        let start = Instant::now();
        store.sync().unwrap();
        report("durable commit after preallocate", start.elapsed());
        println!("file after preallocate: {:.0} MB", file_mb());
    }
}
