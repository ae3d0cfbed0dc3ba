//! The MongoDB store: the document model of the brief on a MongoDB server or
//! sharded cluster, written through the official `mongodb` driver.
//!
//! # Documents
//!
//! Two collections, [`MongoDbConfig::hour_collection`] and
//! [`MongoDbConfig::day_collection`], in [`MongoDbConfig::database`]. A
//! slot is `{n: Int64, sum: Double, min: Double, max: Double}`; the empty slot
//! is `{n: 0, sum: 0.0, min: +Infinity, max: -Infinity}`, because `$min` and
//! `$max` on a real server replace an infinity with any finite value, while a
//! null would win every `$min` (null sorts below all numbers).
//!
//! ```text
//! hour: { _id: "db-01|op_counter|2026031410",           // <source>|<metric>|<YYYYMMDDHH> UTC
//!         s: "db-01", m: "op_counter", t: Date(2026-03-14T10:00Z),
//!         k: "gauge",                                    // absent until the first write
//!         w: { <writer id>: Int64(flush id) },           // per-writer watermark
//!         total: <slot>,                                 // the hour's running slot
//!         values: { "0": <slot>, ..., "59": <slot> } }   // the seed's values.<MINUTE>
//! day:  { _id: "db-01|op_counter|20260314", s, m, t, k, w,
//!         total: <slot>,                                 // the day's running slot
//!         values: { "0": { total: <slot>, "0": <slot>, ..., "59": <slot> },
//!                   ...,
//!                   "23": { ... } } }                    // the seed's values.<HOUR>.<MINUTE>
//! ```
//!
//! A pre-allocated document has every slot present and empty, `w: {}` and no
//! `k`; it is [`hour_doc_bson_size`] (about 3.7 KB) or [`day_doc_bson_size`]
//! (about 86 KB) bytes of BSON, and it never grows afterwards, since every
//! update only changes numbers that are already there.
//!
//! # Ids, indexes and the shard key
//!
//! `_id` is a string, `"<source>|<metric>|<period key>"`, with the period key
//! `YYYYMMDDHH` (hour documents) or `YYYYMMDD` (day documents) in UTC. Source
//! and metric names cannot contain `|`, so the id is unambiguous, and because
//! the key is fixed-width, one series' documents sort by time. A range read of
//! one series is therefore an `_id` index range scan,
//! `{_id: {$gte: "<s>|<m>|<from key>", $lt: "<s>|<m>|<to key>"}}` sorted by
//! `_id`, and every write filters on `_id` alone: no secondary index is
//! needed for reads or writes.
//!
//! The only other index is the TTL index `{t: 1}` with `expireAfterSeconds`
//! set to the tier's retention, so a document is deleted `retention` after
//! its period starts. It is created (or, when the retention changed, altered
//! with `collMod`) lazily before the first operation that reaches the server,
//! and retried until that works: the daemon starts, and keeps ingesting within
//! its memory bound, while MongoDB is down. The series catalog's TTL index
//! (below) is made the same way.
//!
//! **Recommended shard key: `{_id: 1}` (ranged)** for both collections. The
//! id starts with the source, so one source's documents are contiguous in the
//! key space and live together on one shard, as the brief recommends, while
//! different sources spread over chunks. Every statement Tally sends carries
//! an `_id` equality (writes) or an `_id` range inside one series (reads), so
//! mongos sends each one to exactly one shard. A hashed key would scatter a
//! series' range read over every shard. And with `_id` as the shard key, the
//! uniqueness of `_id`, which the exactly-once scheme below relies on, holds
//! across the whole cluster; with any other shard key it holds per shard
//! only.
//!
//! # Writes
//!
//! One upsert per touched document per flush:
//!
//! ```text
//! q: { _id: X, "w.<writer>": { $not: { $gte: Int64(flush id) } } }
//! u: { $inc: { "values.M.n", "values.M.sum", ..., "total.n", "total.sum" },
//!      $min: { "values.M.min", ..., "total.min" },  $max: { ... },
//!      $set: { "w.<writer>": Int64(flush id), k: "<kind>" },
//!      $setOnInsert: { s, m, t } },  upsert: true
//! ```
//!
//! Day documents get the same at the minute (`values.H.M`), hour
//! (`values.H.total`) and day (`total`) levels. No path appears twice across
//! the operators, which a real server would reject.
//!
//! Statements go out as the `update` command with many statements,
//! `ordered: false`, in commands of at most
//! [`MongoDbConfig::statements_per_batch`] statements and about 12 MiB, with
//! at most [`MongoDbConfig::max_concurrent_batches`] commands in flight. The
//! `update` command is used rather than `bulkWrite` because `bulkWrite` needs
//! MongoDB 8.0, while a multi-statement `update` works on every server the
//! driver supports. **Supported servers: MongoDB 4.4 and later** (the `mongodb`
//! 3.x driver's floor, wire version 9), standalone, replica set or sharded.
//!
//! First sighting: the store remembers (bounded, in memory) which documents
//! it knows to exist. Before the first update of a document it does not know,
//! it looks the id up (an `_id`-only, index-covered `find`) and inserts the
//! full pre-allocated document if it is missing; so updates fill slots that
//! are already there, and the upsert stays only as the fallback (e.g. after
//! the memory is full, or if a document vanished). The look-up comes first
//! because a blind insert would resend 86 KB per day document after every
//! restart, or when another daemon already pre-allocated.
//!
//! # The series catalog
//!
//! [`MongoDbConfig::series_collection`] holds one small document per series,
//! for discovery ([`Store::catalog_list`]):
//!
//! ```text
//! { _id: "db-01|op_counter",                 // SeriesId::key: <source>|<metric>
//!   source: "db-01", metric: "op_counter",
//!   kind: "gauge",                           // SampleKind::as_str
//!   first_seen: Date(...), last_seen: Date(...) }   // minute starts
//! ```
//!
//! [`Store::catalog_upsert`] sends one statement per series,
//! `{q: {_id}, u: {$min: {first_seen}, $max: {last_seen}, $set: {kind},
//! $setOnInsert: {source, metric}}, upsert: true}`, in multi-statement
//! `update` commands as above. The daemon calls it for new series and when
//! a series' `last_seen` moved on by a coarse step, not per flush, so it
//! costs little next to the document writes. Two daemons upserting the same
//! new series at once can get a duplicate key error; those statements are
//! sent once more (the document exists by then), as for documents.
//!
//! A listing is one `find` over an `_id` range sorted by `_id`, which is the
//! key order listings and their pagination are defined in: from the larger
//! of the cursor (`after`, exclusive) and the literal prefix the source
//! matchers impose (with an exact source, `<source>|` plus the metric
//! matchers' prefix), up to the end of that prefix. Equalities (an exact
//! metric, the kind, `last_seen >= seen_since`) are sent along, since they
//! mean the same on every server; regular expressions and globs never are:
//! the store filters with [`NameMatcher::matches`] itself, so every store
//! speaks the same regex dialect (Rust's `regex`, as PromQL's RE2) whatever
//! the server's own engine would accept. The cursor is read in batches and
//! dropped (the driver kills it) as soon as `limit` entries passed, so a
//! call's work is bounded by what it returns plus what the matchers refuse
//! on the way; there is no cap on the documents one call may scan, so it
//! never returns fewer entries than exist.
//!
//! Its TTL index is `{last_seen: 1}` with `expireAfterSeconds` = the day
//! retention: an entry goes when the series' last day document would have
//! gone too (give or take the daemon's refresh step).
//!
//! # Exactly once
//!
//! Every document keeps, per writer, the highest flush id applied to it
//! (`w.<writer>`). The filter above matches only while that watermark is
//! below the flush's id, so a replayed flush (after an ambiguous failure, or
//! later from a write-ahead log) does not match a document it already
//! updated. The upsert then tries to insert `_id: X` and fails with a
//! duplicate key error (11000): "already applied", counted as skipped. A
//! duplicate key can also be a genuine race (the document was inserted by
//! pre-allocation between the match and the insert), so statements that got
//! 11000 are sent once more; the document exists by then, so a second 11000
//! can only mean the watermark is already there.
//!
//! Failures: a network error once a write was sent is
//! [`StoreError::Ambiguous`]; no server, a server that is not a writable
//! primary, other transient server errors, and a deployment problem
//! (credentials, roles, a server older than 4.4) are
//! [`StoreError::Unavailable`], so the daemon holds its data under
//! backpressure rather than dropping flushes; a statement the server refuses
//! for good (for example code 40, a path conflict, which would be a bug here)
//! is [`StoreError::Invalid`]. The flush pipeline retries the retryable ones
//! with the whole batch, and the watermark filter makes that replay safe.
//!
//! Flush ids: before the first write of a flush whose id is above what it
//! reserved, the store records `{_id: <writer>, next: id + 60 s}` in the
//! small collection [`WRITERS_COLLECTION`] with `$max`, and
//! [`Store::last_flush_id`] returns that reservation. It is an upper bound of
//! every watermark this writer has written, so a restarted daemon continues
//! above all of them even if the clock went back, at the cost of one small
//! write per minute.

use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use bson::spec::ElementType;
use bson::{doc, Bson, Document};
use chrono::{Datelike, Timelike};
use futures::stream::{self, StreamExt, TryStreamExt};
use mongodb::error::{Error as DriverError, ErrorKind, RETRYABLE_WRITE_ERROR};
use mongodb::options::{Acknowledgment, ClientOptions};
use mongodb::{Client, Collection, Database};
use parking_lot::Mutex;
use tracing::{debug, error, info, warn};

use super::{
    check_catalog_entries, merge_catalog_entries, observe, prefix_successor, ApplyStats,
    CatalogEntry, CatalogQuery, DocRead, PreallocStats, ReadQuery, Store, StoreError,
};
use crate::config::MongoDbConfig;
use crate::model::{
    validate_metric, validate_stored_source, DayDocUpdate, DocKey, FlushBatch, HourDocUpdate,
    Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S, MINUTE_S,
};
use crate::selector::NameMatcher;

/// Where each writer's flush-id reservation lives (one tiny document per
/// writer, in [`MongoDbConfig::database`]).
pub const WRITERS_COLLECTION: &str = "tally_writers";

/// Field of the hour and day documents' TTL index.
const PERIOD_FIELD: &str = "t";

/// Field of the series catalog's TTL index.
const LAST_SEEN_FIELD: &str = "last_seen";

/// Catalog documents per listing batch: a few hundred bytes each, so a batch
/// stays well below a megabyte, while a small `limit` does not fetch many
/// more than it needs.
const CATALOG_MIN_BATCH: usize = 100;
const CATALOG_MAX_BATCH: usize = 2_000;

/// A command stays below this many bytes of BSON: well under the 16 MiB
/// (+16 KiB) a server accepts, with room for the envelope.
const MAX_COMMAND_BYTES: usize = 12 * 1024 * 1024;

/// A server's `maxWriteBatchSize` since 3.6.
const MAX_WRITE_BATCH: usize = 100_000;

/// Ids per existence look-up: ~70 bytes each, so well under a megabyte.
const IDS_PER_LOOKUP: usize = 10_000;

const DUPLICATE_KEY: i32 = 11_000;

/// How far ahead of a flush id the store reserves ids: 60 s of the
/// wall-clock microseconds flush ids are made of, so about one reservation a
/// minute.
const ID_RESERVATION: u64 = 60_000_000;

/// Upper bound of `health()`: it backs a readiness probe polled every 2 s.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// After index creation failed for a reason retrying cannot fix (say, the
/// user may not run `collMod`), writes go on without it and the next attempt
/// waits this long, so the log is not flooded.
const INDEX_RETRY_AFTER_FAILURE: Duration = Duration::from_secs(300);

/// Documents the first-sighting memory holds at most (8 bytes each plus
/// hash-table overhead: about 40 MB when full).
const KNOWN_DOCS_CAP: usize = 2_000_000;

/// Writer ids are `[A-Za-z0-9_-]{1,64}`: they become a field name.
const MAX_WRITER_ID_LEN: usize = 64;

/// Period starts whose key has a four-digit year: 0000-01-01T00:00Z and the
/// last second of 9999. Keys outside would not sort as time does.
const MIN_KEYED_S: i64 = -62_167_219_200;
const MAX_KEYED_S: i64 = 253_402_300_799;

const MINUTES: usize = 60;
const HOURS: usize = 24;

// ---------------------------------------------------------------------------
// Ids

/// The period part of an `_id`, or `None` outside years 0000–9999.
fn period_key(tier: Tier, start: i64) -> Option<String> {
    if !(MIN_KEYED_S..=MAX_KEYED_S).contains(&start) {
        return None;
    }
    let t = chrono::DateTime::from_timestamp(start, 0)?;
    let (y, mo, d, h) = (t.year(), t.month(), t.day(), t.hour());
    Some(match tier {
        Tier::Hour => format!("{y:04}{mo:02}{d:02}{h:02}"),
        Tier::Day => format!("{y:04}{mo:02}{d:02}"),
    })
}

fn series_prefix(series: &SeriesId) -> String {
    format!("{}|{}|", series.source, series.metric)
}

/// The `_id` of one document; `Invalid` for names or periods that have none.
fn doc_id(series: &SeriesId, tier: Tier, start: i64) -> Result<String, StoreError> {
    if start.rem_euclid(tier.period_s()) != 0 {
        return Err(StoreError::Invalid(format!(
            "{series}: {} document start {start} is not on a period boundary",
            tier.as_str()
        )));
    }
    let key = period_key(tier, start).ok_or_else(|| {
        StoreError::Invalid(format!(
            "{series}: {} document start {start} is outside the years 0000-9999",
            tier.as_str()
        ))
    })?;
    Ok(format!("{}{key}", series_prefix(series)))
}

/// The `|` separator is only unambiguous if names cannot contain it; the
/// ingest path validates names, this guards every other caller.
fn check_series(series: &SeriesId) -> Result<(), StoreError> {
    // Rollup series (`@<group>`) come from the flush pipeline, not agents.
    validate_stored_source(&series.source)
        .map_err(|e| StoreError::Invalid(format!("source {:?} {e}", series.source)))?;
    validate_metric(&series.metric)
        .map_err(|e| StoreError::Invalid(format!("metric {:?} {e}", series.metric)))?;
    Ok(())
}

fn check_writer_id(writer_id: &str) -> Result<(), StoreError> {
    let ok = !writer_id.is_empty()
        && writer_id.len() <= MAX_WRITER_ID_LEN
        && writer_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "writer id {writer_id:?}: expected 1-{MAX_WRITER_ID_LEN} characters of [A-Za-z0-9_-]"
        )))
    }
}

// ---------------------------------------------------------------------------
// Pre-allocated documents

fn empty_slot() -> RawDocumentBuf {
    let mut s = RawDocumentBuf::new();
    s.append("n", 0_i64);
    s.append("sum", 0.0_f64);
    s.append("min", f64::INFINITY);
    s.append("max", f64::NEG_INFINITY);
    s
}

/// The constant parts of pre-allocated documents, serialised once, so a
/// pre-allocated document costs a few memory copies.
struct Templates {
    slot: RawDocumentBuf,
    empty: RawDocumentBuf,
    hour_values: RawDocumentBuf,
    day_values: RawDocumentBuf,
}

impl Templates {
    fn new() -> Templates {
        let slot = empty_slot();
        let mut hour_values = RawDocumentBuf::new();
        for m in 0..MINUTES {
            hour_values.append_ref(m.to_string(), &slot);
        }
        // `total` first: an hourly read of a day document finds it at once.
        let mut day_hour = RawDocumentBuf::new();
        day_hour.append_ref("total", &slot);
        for m in 0..MINUTES {
            day_hour.append_ref(m.to_string(), &slot);
        }
        let mut day_values = RawDocumentBuf::new();
        for h in 0..HOURS {
            day_values.append_ref(h.to_string(), &day_hour);
        }
        Templates {
            slot,
            empty: RawDocumentBuf::new(),
            hour_values,
            day_values,
        }
    }

    /// The full empty document: every slot present, `w: {}`, no `k`.
    fn document(&self, id: &str, series: &SeriesId, tier: Tier, start: i64) -> RawDocumentBuf {
        let mut d = RawDocumentBuf::new();
        d.append_ref("_id", id);
        d.append_ref("s", &*series.source);
        d.append_ref("m", &*series.metric);
        d.append_ref("t", period_date(start));
        d.append_ref("w", &self.empty);
        d.append_ref("total", &self.slot);
        match tier {
            Tier::Hour => d.append_ref("values", &self.hour_values),
            Tier::Day => d.append_ref("values", &self.day_values),
        }
        d
    }
}

fn period_date(start: i64) -> bson::DateTime {
    bson::DateTime::from_millis(start.saturating_mul(1000))
}

fn reference_size(tier: Tier) -> usize {
    let series = SeriesId::new("db-00001", "op_counter");
    let start = 1_773_446_400; // 2026-03-14T00:00Z
    let id = doc_id(&series, tier, start).unwrap_or_default();
    Templates::new()
        .document(&id, &series, tier, start)
        .as_bytes()
        .len()
}

/// BSON bytes of a pre-allocated hour document of the series
/// `db-00001/op_counter`; every byte of a longer source or metric name adds
/// two (it is in `_id` and in `s` or `m`).
pub fn hour_doc_bson_size() -> usize {
    reference_size(Tier::Hour)
}

/// BSON bytes of a pre-allocated day document of `db-00001/op_counter`; see
/// [`hour_doc_bson_size`].
pub fn day_doc_bson_size() -> usize {
    reference_size(Tier::Day)
}

// ---------------------------------------------------------------------------
// Update statements

/// The three operator documents of one statement.
#[derive(Default)]
struct SlotOps {
    inc: RawDocumentBuf,
    min: RawDocumentBuf,
    max: RawDocumentBuf,
}

impl SlotOps {
    fn add(&mut self, prefix: &str, slot: &Slot) -> Result<(), StoreError> {
        let n = i64::try_from(slot.n).map_err(|_| {
            StoreError::Invalid(format!("slot count {} does not fit an Int64", slot.n))
        })?;
        self.inc.append(format!("{prefix}.n"), n);
        self.inc.append(format!("{prefix}.sum"), slot.sum);
        self.min.append(format!("{prefix}.min"), slot.min);
        self.max.append(format!("{prefix}.max"), slot.max);
        Ok(())
    }
}

/// The parts of a statement every document of a flush shares.
struct StatementCtx<'a> {
    watermark_path: &'a str,
    flush_id: i64,
}

impl StatementCtx<'_> {
    fn statement(
        &self,
        id: &str,
        series: &SeriesId,
        kind: SampleKind,
        start: i64,
        ops: SlotOps,
    ) -> RawDocumentBuf {
        let mut gte = RawDocumentBuf::new();
        gte.append("$gte", self.flush_id);
        let mut not = RawDocumentBuf::new();
        not.append("$not", gte);
        let mut q = RawDocumentBuf::new();
        q.append_ref("_id", id);
        q.append(self.watermark_path, not);

        let mut set = RawDocumentBuf::new();
        set.append(self.watermark_path, self.flush_id);
        set.append_ref("k", kind.as_str());
        let mut on_insert = RawDocumentBuf::new();
        on_insert.append_ref("s", &*series.source);
        on_insert.append_ref("m", &*series.metric);
        on_insert.append_ref("t", period_date(start));

        let mut u = RawDocumentBuf::new();
        u.append("$inc", ops.inc);
        u.append("$min", ops.min);
        u.append("$max", ops.max);
        u.append("$set", set);
        u.append("$setOnInsert", on_insert);

        let mut stmt = RawDocumentBuf::new();
        stmt.append("q", q);
        stmt.append("u", u);
        stmt.append_ref("upsert", true);
        stmt
    }
}

/// The slot operations of one hour document. Minutes are merged first, so a
/// minute listed twice is added twice (as the embedded store does) instead
/// of becoming a duplicate path the server would refuse.
fn hour_ops(series: &SeriesId, h: &HourDocUpdate) -> Result<SlotOps, StoreError> {
    let mut minutes = [None::<Slot>; MINUTES];
    for &(minute, ref slot) in &h.minutes {
        let cell = minutes.get_mut(usize::from(minute)).ok_or_else(|| {
            StoreError::Invalid(format!(
                "{series}: minute {minute} of hour {} is out of range",
                h.hour_start
            ))
        })?;
        cell.get_or_insert(Slot::EMPTY).merge(slot);
    }
    let mut ops = SlotOps::default();
    for (m, slot) in minutes.iter().enumerate() {
        if let Some(slot) = slot {
            ops.add(&format!("values.{m}"), slot)?;
        }
    }
    ops.add("total", &h.total)?;
    Ok(ops)
}

fn day_ops(series: &SeriesId, d: &DayDocUpdate) -> Result<SlotOps, StoreError> {
    let mut hours: Vec<Option<(Slot, [Option<Slot>; MINUTES])>> = vec![None; HOURS];
    for hu in &d.hours {
        let entry = hours.get_mut(usize::from(hu.hour)).ok_or_else(|| {
            StoreError::Invalid(format!(
                "{series}: hour {} of day {} is out of range",
                hu.hour, d.day_start
            ))
        })?;
        let (total, minutes) = entry.get_or_insert((Slot::EMPTY, [None; MINUTES]));
        total.merge(&hu.total);
        for &(minute, ref slot) in &hu.minutes {
            let cell = minutes.get_mut(usize::from(minute)).ok_or_else(|| {
                StoreError::Invalid(format!(
                    "{series}: minute {minute} of hour {} of day {} is out of range",
                    hu.hour, d.day_start
                ))
            })?;
            cell.get_or_insert(Slot::EMPTY).merge(slot);
        }
    }
    let mut ops = SlotOps::default();
    for (h, entry) in hours.iter().enumerate() {
        if let Some((total, minutes)) = entry {
            for (m, slot) in minutes.iter().enumerate() {
                if let Some(slot) = slot {
                    ops.add(&format!("values.{h}.{m}"), slot)?;
                }
            }
            ops.add(&format!("values.{h}.total"), total)?;
        }
    }
    ops.add("total", &d.total)?;
    Ok(ops)
}

// ---------------------------------------------------------------------------
// Write commands

/// Builds `{<verb>: <collection>, <field>: [...], ordered: false,
/// writeConcern: ...}` byte by byte, so each statement is copied once, into
/// the command (the bson crate can only append owned documents to an
/// array).
struct WriteCommand {
    buf: Vec<u8>,
    array_at: usize,
    count: usize,
}

impl WriteCommand {
    fn new(verb: &str, collection: &str, field: &str) -> WriteCommand {
        let mut buf = Vec::with_capacity(64 * 1024);
        buf.extend_from_slice(&[0; 4]);
        buf.push(ElementType::String as u8);
        push_cstring(&mut buf, verb);
        let len = i32::try_from(collection.len() + 1).unwrap_or(i32::MAX);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(collection.as_bytes());
        buf.push(0);
        buf.push(ElementType::Array as u8);
        push_cstring(&mut buf, field);
        let array_at = buf.len();
        buf.extend_from_slice(&[0; 4]);
        WriteCommand {
            buf,
            array_at,
            count: 0,
        }
    }

    fn push(&mut self, doc: &RawDocument) {
        self.buf.push(ElementType::EmbeddedDocument as u8);
        // Writing to a Vec cannot fail.
        let _ = write!(self.buf, "{}", self.count);
        self.buf.push(0);
        self.buf.extend_from_slice(doc.as_bytes());
        self.count += 1;
    }

    fn finish(mut self, write_concern: Option<&RawDocument>) -> Result<RawDocumentBuf, StoreError> {
        self.buf.push(0);
        let array_len = self.buf.len() - self.array_at;
        put_len(&mut self.buf, self.array_at, array_len)?;
        self.buf.push(ElementType::Boolean as u8);
        push_cstring(&mut self.buf, "ordered");
        self.buf.push(0);
        if let Some(wc) = write_concern {
            self.buf.push(ElementType::EmbeddedDocument as u8);
            push_cstring(&mut self.buf, "writeConcern");
            self.buf.extend_from_slice(wc.as_bytes());
        }
        self.buf.push(0);
        let total = self.buf.len();
        put_len(&mut self.buf, 0, total)?;
        RawDocumentBuf::from_bytes(self.buf)
            .map_err(|e| StoreError::Invalid(format!("building a write command: {e}")))
    }
}

fn push_cstring(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

fn put_len(buf: &mut [u8], at: usize, len: usize) -> Result<(), StoreError> {
    let len = i32::try_from(len)
        .map_err(|_| StoreError::Invalid(format!("a write command of {len} bytes")))?;
    if let Some(dst) = buf.get_mut(at..at + 4) {
        dst.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

/// Splits statements into commands of at most `per_command` statements and
/// [`MAX_COMMAND_BYTES`] bytes (never empty: one oversized statement still
/// gets a command, and the server judges it).
fn chunk_by_size(sizes: impl Iterator<Item = usize>, per_command: usize) -> Vec<(usize, usize)> {
    let mut chunks = Vec::new();
    let (mut start, mut count, mut bytes) = (0usize, 0usize, 0usize);
    for (i, size) in sizes.enumerate() {
        if count > 0 && (count >= per_command || bytes + size > MAX_COMMAND_BYTES) {
            chunks.push((start, i));
            start = i;
            count = 0;
            bytes = 0;
        }
        count += 1;
        bytes += size + 16;
    }
    if count > 0 {
        chunks.push((start, start + count));
    }
    chunks
}

/// What one write command did.
#[derive(Debug, Default)]
struct WriteReply {
    /// Statements the server reports as matched, upserted or inserted.
    n: u64,
    /// Indexes (within the command) of statements refused with 11000.
    duplicates: Vec<usize>,
    /// Documents an upsert created: the fallback, when neither
    /// pre-allocation nor the first-sighting insert made them.
    upserted: usize,
}

/// Server error codes worth retrying: the server is stepping down, shutting
/// down, interrupted, overloaded or timed out, or not a writable primary.
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    50,    // MaxTimeMSExpired
    64,    // WriteConcernFailed
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    134,   // ReadConcernMajorityNotAvailableYet
    189,   // PrimarySteppedDown
    202,   // NetworkInterfaceExceededTimeLimit
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10058, // LegacyNotPrimary
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11601, // Interrupted
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// Refusals that are about the deployment, not the request: wrong
/// credentials or roles. Retrying keeps the data in memory (with
/// backpressure) until an operator fixes them, instead of dropping flushes.
const ACCESS_CODES: &[i32] = &[
    13, // Unauthorized
    18, // AuthenticationFailed
];

/// Commands that were refused before doing anything.
const NOTHING_DONE_CODES: &[i32] = &[91, 10058, 10107, 13435, 13436, 13, 18];

fn as_i64(v: &Bson) -> Option<i64> {
    match *v {
        Bson::Int32(n) => Some(i64::from(n)),
        Bson::Int64(n) => Some(n),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
        _ => None,
    }
}

/// Reads the reply of an `update` or `insert` command.
fn parse_write_reply(reply: &Document, statements: usize) -> Result<WriteReply, StoreError> {
    let mut out = WriteReply {
        n: reply
            .get("n")
            .and_then(as_i64)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        duplicates: Vec::new(),
        upserted: match reply.get("upserted") {
            Some(Bson::Array(a)) => a.len(),
            _ => 0,
        },
    };
    let mut refused: Option<String> = None;
    let mut transient: Option<String> = None;
    let mut refused_count = 0usize;
    if let Some(errors) = reply.get("writeErrors") {
        let Bson::Array(errors) = errors else {
            return Err(StoreError::Ambiguous(format!(
                "unexpected writeErrors in reply: {errors}"
            )));
        };
        for e in errors {
            let Bson::Document(e) = e else {
                return Err(StoreError::Ambiguous(format!(
                    "unexpected write error in reply: {e}"
                )));
            };
            let index = e
                .get("index")
                .and_then(as_i64)
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < statements);
            let code = e
                .get("code")
                .and_then(as_i64)
                .and_then(|c| i32::try_from(c).ok());
            let (Some(index), Some(code)) = (index, code) else {
                return Err(StoreError::Ambiguous(format!(
                    "unexpected write error in reply: {e}"
                )));
            };
            let msg = e.get_str("errmsg").unwrap_or("");
            if code == DUPLICATE_KEY {
                out.duplicates.push(index);
            } else if TRANSIENT_CODES.contains(&code) || ACCESS_CODES.contains(&code) {
                transient.get_or_insert_with(|| format!("statement {index}: code {code}: {msg}"));
            } else {
                refused_count += 1;
                refused.get_or_insert_with(|| format!("statement {index}: code {code}: {msg}"));
            }
        }
    }
    if let Some(first) = refused {
        return Err(StoreError::Invalid(format!(
            "the server refused {refused_count} statement(s); first: {first}"
        )));
    }
    if let Some(wce) = reply.get("writeConcernError") {
        // Applied on the primary, not (yet) acknowledged by the write concern.
        return Err(StoreError::Ambiguous(format!("write concern error: {wce}")));
    }
    if let Some(first) = transient {
        return Err(StoreError::Unavailable(format!(
            "statements failed transiently; first: {first}"
        )));
    }
    Ok(out)
}

/// Maps a driver error onto the store's kinds. `sent_write` says whether the
/// operation was a write that may have reached the server.
fn classify(e: &DriverError, sent_write: bool) -> StoreError {
    let msg = e.to_string();
    let maybe_applied = |msg: String| {
        if sent_write {
            StoreError::Ambiguous(msg)
        } else {
            StoreError::Unavailable(msg)
        }
    };
    match &*e.kind {
        // The deployment, not the request, is at fault: retrying keeps the
        // data (under backpressure) until it is fixed, where a refusal
        // would make the pipeline drop every flush.
        ErrorKind::ServerSelection { .. }
        | ErrorKind::DnsResolve { .. }
        | ErrorKind::Authentication { .. }
        | ErrorKind::IncompatibleServer { .. }
        | ErrorKind::InvalidTlsConfig { .. }
        | ErrorKind::Shutdown => StoreError::Unavailable(msg),
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
            if e.contains_label("NoWritesPerformed") {
                StoreError::Unavailable(msg)
            } else {
                maybe_applied(msg)
            }
        }
        ErrorKind::Command(c) => {
            if NOTHING_DONE_CODES.contains(&c.code) {
                StoreError::Unavailable(msg)
            } else if TRANSIENT_CODES.contains(&c.code)
                || ACCESS_CODES.contains(&c.code)
                || e.contains_label(RETRYABLE_WRITE_ERROR)
                || e.contains_label("RetryableError")
                || e.contains_label("SystemOverloadedError")
            {
                maybe_applied(msg)
            } else {
                StoreError::Invalid(msg)
            }
        }
        ErrorKind::InvalidResponse { .. } | ErrorKind::Internal { .. } => maybe_applied(msg),
        ErrorKind::BsonDeserialization(_) => StoreError::Corrupt {
            doc: "reply".into(),
            reason: msg,
        },
        _ => StoreError::Invalid(msg),
    }
}

/// Orders errors of concurrent commands: the one to report first. A refusal
/// is reported over a transient failure because retrying cannot fix it.
fn severity(e: &StoreError) -> u8 {
    match e {
        StoreError::Corrupt { .. } => 4,
        StoreError::Invalid(_) => 3,
        StoreError::Ambiguous(_) => 2,
        StoreError::Io(_) => 1,
        StoreError::Unavailable(_) => 0,
    }
}

fn keep_worst(slot: &mut Option<StoreError>, e: StoreError) {
    match slot {
        Some(old) if severity(old) >= severity(&e) => {}
        _ => *slot = Some(e),
    }
}

/// Every result of concurrent commands, or the worst of their errors: all
/// of them ran, so the caller learns the most telling failure, not the first.
fn all_or_worst<T>(results: Vec<Result<T, StoreError>>) -> Result<Vec<T>, StoreError> {
    let mut worst = None;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(v) => out.push(v),
            Err(e) => keep_worst(&mut worst, e),
        }
    }
    match worst {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

// ---------------------------------------------------------------------------
// Reads

#[derive(Debug, thiserror::Error)]
enum DecodeError {
    #[error("`{0}` is missing")]
    Missing(String),
    #[error("`{field}` is {found:?}; expected {expected}")]
    Type {
        field: String,
        found: ElementType,
        expected: &'static str,
    },
    #[error("`{field}`: {reason}")]
    Value { field: String, reason: String },
    #[error("malformed BSON: {0}")]
    Bson(#[from] bson::raw::Error),
}

fn type_error(field: impl Into<String>, v: RawBsonRef<'_>, expected: &'static str) -> DecodeError {
    DecodeError::Type {
        field: field.into(),
        found: v.element_type(),
        expected,
    }
}

/// A count, stored as Int64 but accepted as Int32 or an integral Double too,
/// in case someone rewrote the document.
fn count_of(v: RawBsonRef<'_>) -> Option<u64> {
    match v {
        RawBsonRef::Int64(n) => u64::try_from(n).ok(),
        RawBsonRef::Int32(n) => u64::try_from(n).ok(),
        RawBsonRef::Double(f) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => Some(f as u64),
        _ => None,
    }
}

fn number_of(v: RawBsonRef<'_>) -> Option<f64> {
    match v {
        RawBsonRef::Double(f) => Some(f),
        RawBsonRef::Int32(n) => Some(f64::from(n)),
        RawBsonRef::Int64(n) => Some(n as f64),
        _ => None,
    }
}

fn decode_slot(v: RawBsonRef<'_>, path: &dyn Fn() -> String) -> Result<Slot, DecodeError> {
    let RawBsonRef::Document(d) = v else {
        return Err(type_error(path(), v, "a slot document"));
    };
    let field = |name: &str| -> Result<RawBsonRef<'_>, DecodeError> {
        d.get(name)?
            .ok_or_else(|| DecodeError::Missing(format!("{}.{name}", path())))
    };
    let n = field("n")?;
    let n = count_of(n).ok_or_else(|| type_error(format!("{}.n", path()), n, "a count"))?;
    let num = |name: &str| -> Result<f64, DecodeError> {
        let v = field(name)?;
        number_of(v).ok_or_else(|| type_error(format!("{}.{name}", path()), v, "a number"))
    };
    Ok(Slot {
        n,
        sum: num("sum")?,
        min: num("min")?,
        max: num("max")?,
    })
}

/// A numeric field name of `values` (a minute or an hour) below `limit`.
fn slot_index(key: &str, limit: usize, path: &dyn Fn() -> String) -> Result<i64, DecodeError> {
    match key.parse::<usize>() {
        Ok(i) if i < limit && (i == 0 || !key.starts_with('0')) => Ok(i as i64),
        _ => Err(DecodeError::Value {
            field: format!("{}.{key}", path()),
            reason: format!("not a slot name (0-{})", limit - 1),
        }),
    }
}

fn document_field<'a>(
    doc: &'a RawDocument,
    name: &str,
) -> Result<Option<&'a RawDocument>, DecodeError> {
    match doc.get(name)? {
        None => Ok(None),
        Some(RawBsonRef::Document(d)) => Ok(Some(d)),
        Some(v) => Err(type_error(name, v, "a document")),
    }
}

/// Which documents and slots a read wants; everything `decode` needs.
struct ReadPlan<'a> {
    query: &'a ReadQuery,
    prefix: String,
    writer: &'a str,
}

impl ReadPlan<'_> {
    fn in_range(&self, t: i64) -> bool {
        self.query.from <= t && t < self.query.to
    }

    fn decode(&self, raw: &RawDocument) -> Result<DocRead, DecodeError> {
        let q = self.query;
        let t = match raw.get("t")? {
            Some(RawBsonRef::DateTime(t)) => t.timestamp_millis(),
            Some(v) => return Err(type_error("t", v, "a date")),
            None => return Err(DecodeError::Missing("t".into())),
        };
        let period_ms = q.tier.period_s() * 1000;
        if t.rem_euclid(period_ms) != 0 {
            return Err(DecodeError::Value {
                field: "t".into(),
                reason: format!("{t} ms is not the start of a {} period", q.tier.as_str()),
            });
        }
        let start = t / 1000;
        // The id and `t` must name the same period, or the range scan could
        // return a document under the wrong time.
        let expected = period_key(q.tier, start).map(|k| format!("{}{k}", self.prefix));
        match raw.get("_id")? {
            Some(RawBsonRef::String(id)) if Some(id) == expected.as_deref() => {}
            other => {
                return Err(DecodeError::Value {
                    field: "_id".into(),
                    reason: format!("{other:?} does not match t = {start}"),
                })
            }
        }
        let kind = match raw.get("k")? {
            None | Some(RawBsonRef::Null) => None,
            Some(RawBsonRef::String(s)) => {
                Some(kind_from_str(s).ok_or_else(|| DecodeError::Value {
                    field: "k".into(),
                    reason: format!("unknown kind {s:?}"),
                })?)
            }
            Some(v) => return Err(type_error("k", v, "a kind string")),
        };
        let watermark = match document_field(raw, "w")? {
            None => 0,
            Some(w) => match w.get(self.writer)? {
                None => 0,
                Some(v) => count_of(v)
                    .ok_or_else(|| type_error(format!("w.{}", self.writer), v, "a flush id"))?,
            },
        };
        let mut slots = Vec::new();
        let values = || "values".to_string();
        match (q.tier, q.resolution) {
            (_, Resolution::Day) | (Tier::Hour, Resolution::Hour) => {
                if let Some(v) = raw.get("total")? {
                    let slot = decode_slot(v, &|| "total".into())?;
                    if !slot.is_empty() && self.in_range(start) {
                        slots.push((start, slot));
                    }
                }
            }
            (Tier::Hour, Resolution::Minute) => {
                if let Some(values) = document_field(raw, "values")? {
                    for entry in values {
                        let (key, v) = entry?;
                        let m = slot_index(key, MINUTES, &|| "values".into())?;
                        let bucket = start + m * MINUTE_S;
                        let slot = decode_slot(v, &|| format!("values.{key}"))?;
                        if !slot.is_empty() && self.in_range(bucket) {
                            slots.push((bucket, slot));
                        }
                    }
                }
            }
            (Tier::Day, res) => {
                if let Some(hours) = document_field(raw, "values")? {
                    for entry in hours {
                        let (hkey, v) = entry?;
                        let h = slot_index(hkey, HOURS, &values)?;
                        let hour_start = start + h * HOUR_S;
                        let RawBsonRef::Document(hour) = v else {
                            return Err(type_error(format!("values.{hkey}"), v, "a document"));
                        };
                        if res == Resolution::Hour {
                            if let Some(v) = hour.get("total")? {
                                let slot = decode_slot(v, &|| format!("values.{hkey}.total"))?;
                                if !slot.is_empty() && self.in_range(hour_start) {
                                    slots.push((hour_start, slot));
                                }
                            }
                            continue;
                        }
                        // Hours wholly outside the range are not decoded.
                        if hour_start + HOUR_S <= q.from || hour_start >= q.to {
                            continue;
                        }
                        for entry in hour {
                            let (mkey, v) = entry?;
                            if mkey == "total" {
                                continue;
                            }
                            let m = slot_index(mkey, MINUTES, &|| format!("values.{hkey}"))?;
                            let bucket = hour_start + m * MINUTE_S;
                            let slot = decode_slot(v, &|| format!("values.{hkey}.{mkey}"))?;
                            if !slot.is_empty() && self.in_range(bucket) {
                                slots.push((bucket, slot));
                            }
                        }
                    }
                }
            }
        }
        // A document made by the fallback upsert has its slots in the order
        // they were first written, not in time order.
        slots.sort_by_key(|&(t, _)| t);
        Ok(DocRead {
            period_start: start,
            kind,
            watermark,
            slots,
        })
    }
}

fn kind_from_str(s: &str) -> Option<SampleKind> {
    [
        SampleKind::Gauge,
        SampleKind::DeltaCounter,
        SampleKind::CumulativeCounter,
    ]
    .into_iter()
    .find(|k| k.as_str() == s)
}

/// A catalog document, as [`CatalogEntry`]. Source and metric come from the
/// `_id`, since that is what listings are ordered and filtered by.
fn decode_catalog(raw: &RawDocument) -> Result<CatalogEntry, DecodeError> {
    let id = match raw.get("_id")? {
        Some(RawBsonRef::String(id)) => id,
        Some(v) => return Err(type_error("_id", v, "a string")),
        None => return Err(DecodeError::Missing("_id".into())),
    };
    let Some((source, metric)) = id.split_once('|') else {
        return Err(DecodeError::Value {
            field: "_id".into(),
            reason: "no `|` between source and metric".into(),
        });
    };
    let kind = match raw.get("kind")? {
        Some(RawBsonRef::String(k)) => kind_from_str(k).ok_or_else(|| DecodeError::Value {
            field: "kind".into(),
            reason: format!("unknown kind {k:?}"),
        })?,
        Some(v) => return Err(type_error("kind", v, "a string")),
        None => return Err(DecodeError::Missing("kind".into())),
    };
    let seconds = |field: &str| match raw.get(field)? {
        Some(RawBsonRef::DateTime(t)) => Ok(t.timestamp_millis().div_euclid(1000)),
        Some(v) => Err(type_error(field, v, "a date")),
        None => Err(DecodeError::Missing(field.into())),
    };
    Ok(CatalogEntry {
        series: SeriesId::new(source, metric),
        kind,
        first_seen: seconds("first_seen")?,
        last_seen: seconds(LAST_SEEN_FIELD)?,
    })
}

/// Seconds as a BSON date. Callers pass checked times; out-of-range ones
/// saturate rather than wrap.
fn bson_date(seconds: i64) -> bson::DateTime {
    bson::DateTime::from_millis(seconds.saturating_mul(1000))
}

// ---------------------------------------------------------------------------
// First-sighting memory

/// Documents known to exist, per (tier, period start), as 64-bit hashes of
/// their ids: a collision only means a missed pre-allocation, and the
/// upsert covers that.
struct KnownDocs {
    periods: hashbrown::HashMap<(Tier, i64), hashbrown::HashSet<u64>>,
    len: usize,
    cap: usize,
}

impl KnownDocs {
    fn new(cap: usize) -> KnownDocs {
        KnownDocs {
            periods: hashbrown::HashMap::new(),
            len: 0,
            cap,
        }
    }

    /// How far behind the newest period of a tier documents are still
    /// remembered: late samples (the default lateness window is an hour)
    /// and the day being written.
    fn horizon(tier: Tier) -> i64 {
        match tier {
            Tier::Hour => 3 * HOUR_S,
            Tier::Day => 2 * DAY_S,
        }
    }

    fn contains(&self, tier: Tier, start: i64, hash: u64) -> bool {
        self.periods
            .get(&(tier, start))
            .is_some_and(|s| s.contains(&hash))
    }

    fn insert(&mut self, tier: Tier, start: i64, hash: u64) {
        if !self.periods.contains_key(&(tier, start)) {
            let newest = self
                .periods
                .keys()
                .filter(|(t, _)| *t == tier)
                .map(|&(_, s)| s)
                .max()
                .map_or(start, |n| n.max(start));
            if start < newest - Self::horizon(tier) {
                // Too old to be written often; not worth remembering.
                return;
            }
            let stale: Vec<_> = self
                .periods
                .keys()
                .filter(|&&(t, s)| t == tier && s < newest - Self::horizon(tier))
                .copied()
                .collect();
            for key in stale {
                self.forget(key);
            }
        }
        while self.len >= self.cap {
            // Full: forget the oldest period (of any tier) but the one being
            // added to; if that is all there is, stop remembering.
            let oldest = self
                .periods
                .keys()
                .filter(|&&k| k != (tier, start))
                .min_by_key(|&&(_, s)| s)
                .copied();
            match oldest {
                Some(key) => self.forget(key),
                None => return,
            }
        }
        if self.periods.entry((tier, start)).or_default().insert(hash) {
            self.len += 1;
        }
    }

    fn forget(&mut self, key: (Tier, i64)) {
        if let Some(set) = self.periods.remove(&key) {
            self.len -= set.len();
        }
    }
}

// ---------------------------------------------------------------------------
// Counters

/// Cumulative work done by a [`MongoStore`], for benchmarks and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MongoStats {
    /// Statements sent: update statements (documents and catalog) plus
    /// inserted documents.
    pub statements: u64,
    /// Commands sent (each is one round trip), of every kind.
    pub round_trips: u64,
    pub update_statements: u64,
    pub update_round_trips: u64,
    /// Documents sent in `insert` commands (pre-allocation and first
    /// sighting).
    pub insert_statements: u64,
    pub insert_round_trips: u64,
    /// Existence look-ups before inserts.
    pub lookup_round_trips: u64,
    /// Range reads (one `find` each; `getMore`s are not counted).
    pub read_round_trips: u64,
    /// Series catalog upsert statements (one per series and call).
    pub catalog_statements: u64,
    /// Series catalog commands: `update` commands of upserts, plus one
    /// `find` per listing (`getMore`s are not counted).
    pub catalog_round_trips: u64,
    /// BSON bytes of the commands the store built (an approximation of the
    /// bytes on the wire).
    pub bytes_sent: u64,
    /// Documents created by [`Store::preallocate`].
    pub preallocated_documents: u64,
    /// Documents created by `apply` before their first update.
    pub first_sighting_documents: u64,
    /// Documents created by the fallback upsert, with only the written
    /// slots (pre-allocation and first sighting both missed them).
    pub fallback_upserts: u64,
}

#[derive(Default)]
struct Counters {
    update_statements: AtomicU64,
    update_round_trips: AtomicU64,
    insert_statements: AtomicU64,
    insert_round_trips: AtomicU64,
    lookup_round_trips: AtomicU64,
    read_round_trips: AtomicU64,
    catalog_statements: AtomicU64,
    catalog_round_trips: AtomicU64,
    other_round_trips: AtomicU64,
    bytes_sent: AtomicU64,
    preallocated_documents: AtomicU64,
    first_sighting_documents: AtomicU64,
    fallback_upserts: AtomicU64,
}

/// What a command was for: the `op` label of the store's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Update,
    Insert,
    Lookup,
    Read,
    ReserveIds,
    Indexes,
    Ping,
    LastFlushId,
    CatalogUpsert,
    CatalogList,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Update => "update",
            Op::Insert => "insert",
            Op::Lookup => "lookup",
            Op::Read => "read",
            Op::ReserveIds => "reserve_ids",
            Op::Indexes => "indexes",
            Op::Ping => "ping",
            Op::LastFlushId => "last_flush_id",
            Op::CatalogUpsert => "catalog_upsert",
            Op::CatalogList => "catalog_list",
        }
    }
}

// ---------------------------------------------------------------------------
// The store

/// A [`Store`] on MongoDB; see the module documentation.
pub struct MongoStore {
    client: Client,
    db: Database,
    hour: Collection<RawDocumentBuf>,
    day: Collection<RawDocumentBuf>,
    series: Collection<RawDocumentBuf>,
    writers: Collection<Document>,
    writer: String,
    /// `w.<writer>`.
    watermark_path: String,
    retention: (u64, u64),
    statements_per_batch: usize,
    max_concurrent: usize,
    timeout: Duration,
    /// The client's write concern: `run_command` does not add it by itself.
    write_concern: Option<RawDocumentBuf>,
    templates: Templates,
    indexes_ready: AtomicBool,
    /// Serialises index attempts; holds when the next one may run after a
    /// failure retrying could not fix.
    index_attempt: tokio::sync::Mutex<Option<Instant>>,
    /// Flush ids up to here are covered by the reservation in
    /// [`WRITERS_COLLECTION`].
    reserved_id: AtomicU64,
    known: Mutex<KnownDocs>,
    hasher: ahash::RandomState,
    counters: Counters,
}

impl fmt::Debug for MongoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URI is left out: it may hold a password.
        f.debug_struct("MongoStore")
            .field("database", &self.db.name())
            .field("hour_collection", &self.hour.name())
            .field("day_collection", &self.day.name())
            .field("series_collection", &self.series.name())
            .field("writer", &self.writer)
            .finish_non_exhaustive()
    }
}

/// Statements and round trips of one call, for [`ApplyStats`].
#[derive(Debug, Default)]
struct Work {
    statements: usize,
    round_trips: usize,
}

/// One document a flush touches.
struct PlannedDoc<'a> {
    tier: Tier,
    start: i64,
    id: String,
    hash: u64,
    series: &'a SeriesId,
}

impl MongoStore {
    /// Prepares a store on `cfg.uri`. Does not need the server: the driver
    /// connects in the background, indexes are made before the first
    /// operation that reaches it, and every operation fails retryably until
    /// it is up. `retention` is (hour documents, day documents) in seconds.
    pub async fn connect(
        cfg: &MongoDbConfig,
        retention: (u64, u64),
        writer_id: &str,
    ) -> Result<MongoStore, StoreError> {
        check_writer_id(writer_id)?;
        for (what, secs) in [("hour", retention.0), ("day", retention.1)] {
            if secs > i32::MAX as u64 {
                return Err(StoreError::Invalid(format!(
                    "{what} retention of {secs} s is longer than a TTL index allows ({} s)",
                    i32::MAX
                )));
            }
        }
        for (what, name) in [
            ("database", &cfg.database),
            ("hour_collection", &cfg.hour_collection),
            ("day_collection", &cfg.day_collection),
            ("series_collection", &cfg.series_collection),
        ] {
            if name.is_empty() || name.contains('\0') || name.contains('$') {
                return Err(StoreError::Invalid(format!(
                    "mongodb.{what} {name:?} is not a usable name"
                )));
            }
        }
        if cfg.hour_collection == cfg.day_collection {
            return Err(StoreError::Invalid(
                "mongodb.hour_collection and mongodb.day_collection must differ".into(),
            ));
        }
        if [&cfg.hour_collection, &cfg.day_collection].contains(&&cfg.series_collection)
            || cfg.series_collection == WRITERS_COLLECTION
        {
            return Err(StoreError::Invalid(format!(
                "mongodb.series_collection must differ from mongodb.hour_collection, \
                 mongodb.day_collection and {WRITERS_COLLECTION}"
            )));
        }
        let mut options = ClientOptions::parse(&cfg.uri)
            .await
            .map_err(|e| match &*e.kind {
                ErrorKind::DnsResolve { .. } => {
                    StoreError::Unavailable(format!("mongodb.uri: {e}"))
                }
                _ => StoreError::Invalid(format!("mongodb.uri: {e}")),
            })?;
        // Explicit URI options win; `timeout` fills in what the URI leaves.
        options.server_selection_timeout.get_or_insert(cfg.timeout);
        options.connect_timeout.get_or_insert(cfg.timeout);
        options.app_name.get_or_insert_with(|| "tallyd".to_string());
        let write_concern = match &options.write_concern {
            Some(wc) if matches!(wc.w, Some(Acknowledgment::Nodes(0))) => {
                return Err(StoreError::Invalid(
                    "mongodb.uri asks for w=0: unacknowledged writes cannot be exactly-once".into(),
                ))
            }
            Some(wc) => {
                let d = bson::to_document(wc)
                    .map_err(|e| StoreError::Invalid(format!("write concern: {e}")))?;
                if d.is_empty() {
                    None
                } else {
                    Some(
                        RawDocumentBuf::from_document(&d)
                            .map_err(|e| StoreError::Invalid(format!("write concern: {e}")))?,
                    )
                }
            }
            None => None,
        };
        let client = Client::with_options(options)
            .map_err(|e| StoreError::Invalid(format!("mongodb client: {e}")))?;
        let db = client.database(&cfg.database);
        info!(
            database = %cfg.database,
            hour_collection = %cfg.hour_collection,
            day_collection = %cfg.day_collection,
            series_collection = %cfg.series_collection,
            writer = writer_id,
            "MongoDB store configured"
        );
        Ok(MongoStore {
            hour: db.collection(&cfg.hour_collection),
            day: db.collection(&cfg.day_collection),
            series: db.collection(&cfg.series_collection),
            writers: db.collection(WRITERS_COLLECTION),
            db,
            client,
            writer: writer_id.to_string(),
            watermark_path: format!("w.{writer_id}"),
            retention,
            statements_per_batch: cfg.statements_per_batch.clamp(1, MAX_WRITE_BATCH),
            max_concurrent: cfg.max_concurrent_batches.max(1),
            timeout: cfg.timeout.max(Duration::from_millis(1)),
            write_concern,
            templates: Templates::new(),
            indexes_ready: AtomicBool::new(false),
            index_attempt: tokio::sync::Mutex::new(None),
            reserved_id: AtomicU64::new(0),
            known: Mutex::new(KnownDocs::new(KNOWN_DOCS_CAP)),
            hasher: ahash::RandomState::new(),
            counters: Counters::default(),
        })
    }

    /// Counters of the work done so far.
    pub fn stats(&self) -> MongoStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let update_statements = get(&c.update_statements);
        let insert_statements = get(&c.insert_statements);
        let update_round_trips = get(&c.update_round_trips);
        let insert_round_trips = get(&c.insert_round_trips);
        let lookup_round_trips = get(&c.lookup_round_trips);
        let read_round_trips = get(&c.read_round_trips);
        let catalog_statements = get(&c.catalog_statements);
        let catalog_round_trips = get(&c.catalog_round_trips);
        MongoStats {
            statements: update_statements + insert_statements + catalog_statements,
            round_trips: update_round_trips
                + insert_round_trips
                + lookup_round_trips
                + read_round_trips
                + catalog_round_trips
                + get(&c.other_round_trips),
            update_statements,
            update_round_trips,
            insert_statements,
            insert_round_trips,
            lookup_round_trips,
            read_round_trips,
            catalog_statements,
            catalog_round_trips,
            bytes_sent: get(&c.bytes_sent),
            preallocated_documents: get(&c.preallocated_documents),
            first_sighting_documents: get(&c.first_sighting_documents),
            fallback_upserts: get(&c.fallback_upserts),
        }
    }

    /// The driver client, e.g. for tests and tools in the same process.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn collection(&self, tier: Tier) -> &Collection<RawDocumentBuf> {
        match tier {
            Tier::Hour => &self.hour,
            Tier::Day => &self.day,
        }
    }

    fn doc_name(&self, tier: Tier, id: &str) -> String {
        format!("{}.{}/{id}", self.db.name(), self.collection(tier).name())
    }

    /// Counts and times one command. `statements` and `bytes` are what it
    /// carried.
    fn record(&self, op: Op, statements: usize, bytes: usize, started: Instant) {
        let c = &self.counters;
        let statements = statements as u64;
        match op {
            Op::Update => {
                c.update_statements.fetch_add(statements, Ordering::Relaxed);
                c.update_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Insert => {
                c.insert_statements.fetch_add(statements, Ordering::Relaxed);
                c.insert_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Lookup => {
                c.lookup_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::Read => {
                c.read_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::CatalogUpsert => {
                c.catalog_statements
                    .fetch_add(statements, Ordering::Relaxed);
                c.catalog_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            Op::CatalogList => {
                c.catalog_round_trips.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                c.other_round_trips.fetch_add(1, Ordering::Relaxed);
            }
        }
        c.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        let op = op.as_str();
        metrics::counter!("tally_mongodb_round_trips_total", "op" => op).increment(1);
        metrics::counter!("tally_mongodb_bytes_sent_total").increment(bytes as u64);
        metrics::histogram!("tally_mongodb_round_trip_duration_seconds", "op" => op)
            .record(started.elapsed().as_secs_f64());
        if statements > 0 {
            metrics::counter!("tally_mongodb_statements_total", "op" => op).increment(statements);
            metrics::histogram!("tally_mongodb_batch_statements", "op" => op)
                .record(statements as f64);
        }
    }

    /// Errors of operations no caller counts (`apply` and `preallocate`
    /// are counted by the flush pipeline and maintenance).
    fn count_error(&self, op: Op, e: &StoreError) {
        metrics::counter!("tally_store_errors_total", "store" => "mongodb", "op" => op.as_str(), "kind" => e.kind())
            .increment(1);
    }

    /// Runs a command with the store's deadline, counting and timing it.
    async fn send(
        &self,
        op: Op,
        cmd: RawDocumentBuf,
        statements: usize,
    ) -> Result<Document, Failure> {
        let bytes = cmd.as_bytes().len();
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, self.db.run_raw_command(cmd)).await;
        self.record(op, statements, bytes, started);
        match result {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(Failure::Driver(e)),
            Err(_) => Err(Failure::Timeout(self.timeout)),
        }
    }

    /// [`Self::send`] with the failure mapped; `write` says whether the
    /// command may change data (so a lost reply is ambiguous).
    async fn command(
        &self,
        op: Op,
        cmd: RawDocumentBuf,
        statements: usize,
        write: bool,
    ) -> Result<Document, StoreError> {
        self.send(op, cmd, statements)
            .await
            .map_err(|f| f.into_store(write))
    }

    // -- indexes ------------------------------------------------------------

    /// Makes sure the TTL indexes exist, before the first operation that
    /// reaches the server. A retryable failure fails the operation (it
    /// would fail anyway); any other is logged and retried later, without
    /// holding up writes.
    async fn ready(&self) -> Result<(), StoreError> {
        if self.indexes_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut next_attempt = self.index_attempt.lock().await;
        if self.indexes_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if next_attempt.is_some_and(|t| Instant::now() < t) {
            return Ok(());
        }
        match self.ensure_indexes().await {
            Ok(()) => {
                self.indexes_ready.store(true, Ordering::Release);
                *next_attempt = None;
                Ok(())
            }
            Err(e) if e.is_retryable() => Err(e),
            Err(e) => {
                self.count_error(Op::Indexes, &e);
                error!(error = %e, retry_in = ?INDEX_RETRY_AFTER_FAILURE,
                    "cannot create the TTL indexes; documents will not expire until this is fixed");
                *next_attempt = Some(Instant::now() + INDEX_RETRY_AFTER_FAILURE);
                Ok(())
            }
        }
    }

    async fn ensure_indexes(&self) -> Result<(), StoreError> {
        for (coll, field, ttl) in [
            (self.hour.name(), PERIOD_FIELD, self.retention.0),
            (self.day.name(), PERIOD_FIELD, self.retention.1),
            (self.series.name(), LAST_SEEN_FIELD, self.retention.1),
        ] {
            // A second round only when a concurrent creation (another daemon
            // starting at the same time) made ours conflict.
            match self.ensure_ttl_index(coll, field, ttl).await {
                Err(f)
                    if matches!(
                        f.code(),
                        Some(INDEX_OPTIONS_CONFLICT | INDEX_KEY_SPECS_CONFLICT)
                    ) =>
                {
                    self.ensure_ttl_index(coll, field, ttl)
                        .await
                        .map_err(|f| f.into_store(true))?;
                }
                other => other.map_err(|f| f.into_store(true))?,
            }
        }
        Ok(())
    }

    /// Makes `{<field>: 1}` on `coll` a TTL index of `ttl` seconds. The
    /// index is found by its key, so one created by hand under another name
    /// is adopted rather than duplicated; a new one gets the server's
    /// default name, `<field>_1`.
    async fn ensure_ttl_index(&self, coll: &str, field: &str, ttl: u64) -> Result<(), Failure> {
        let list = raw_command(&doc! { "listIndexes": coll, "cursor": { "batchSize": 1000 } });
        let specs = match self.send(Op::Indexes, list, 0).await {
            Ok(reply) => reply
                .get_document("cursor")
                .and_then(|c| c.get_array("firstBatch"))
                .cloned()
                .unwrap_or_default(),
            // The collection does not exist yet.
            Err(f) if f.code() == Some(NAMESPACE_NOT_FOUND) => Vec::new(),
            Err(f) => return Err(f),
        };
        let existing = specs.iter().filter_map(Bson::as_document).find(|s| {
            s.get_document("key")
                .is_ok_and(|k| k.len() == 1 && k.get(field).and_then(as_i64) == Some(1))
        });
        let ttl_i32 = i32::try_from(ttl).unwrap_or(i32::MAX);
        match existing {
            None => {
                let cmd = raw_command(&doc! {
                    "createIndexes": coll,
                    "indexes": [{
                        "key": { field: 1 },
                        "name": format!("{field}_1"),
                        "expireAfterSeconds": ttl_i32,
                    }],
                });
                self.send(Op::Indexes, cmd, 0).await?;
                info!(
                    collection = coll,
                    expire_after_s = ttl,
                    "created the TTL index"
                );
            }
            Some(spec)
                if spec.get("expireAfterSeconds").and_then(as_i64) == Some(i64::from(ttl_i32)) =>
            {
                debug!(
                    collection = coll,
                    expire_after_s = ttl,
                    "TTL index in place"
                );
            }
            Some(spec) => {
                let old = spec.get("expireAfterSeconds").cloned();
                let cmd = raw_command(&doc! {
                    "collMod": coll,
                    "index": { "keyPattern": { field: 1 }, "expireAfterSeconds": ttl_i32 },
                });
                self.send(Op::Indexes, cmd, 0).await?;
                info!(collection = coll, old = ?old, new = ttl,
                    "changed the TTL index's expireAfterSeconds (the retention changed)");
            }
        }
        Ok(())
    }

    // -- writes -------------------------------------------------------------

    /// Sends write statements to one collection in commands of bounded size,
    /// several at once. Returns the total `n` and the indexes (into
    /// `stmts`) refused with a duplicate key. Every command runs to its end
    /// even when another fails, so that the error reported is the most
    /// telling one.
    async fn write_all(
        &self,
        op: Op,
        groups: Vec<(Tier, Vec<&RawDocument>)>,
        work: &mut Work,
    ) -> Result<Vec<(Tier, WriteReply)>, StoreError> {
        let (verb, field) = match op {
            Op::Insert => ("insert", "documents"),
            _ => ("update", "updates"),
        };
        let mut jobs = Vec::new();
        for (tier, stmts) in &groups {
            let sizes = stmts.iter().map(|s| s.as_bytes().len());
            for (from, to) in chunk_by_size(sizes, self.statements_per_batch) {
                jobs.push((*tier, from, &stmts[from..to]));
                work.statements += to - from;
                work.round_trips += 1;
            }
        }
        // The futures are built before the stream: a stream over a mapping
        // closure with borrowed arguments trips the `Send` check of the
        // trait's boxed futures ("FnOnce is not general enough").
        let futures: Vec<_> = jobs
            .into_iter()
            .map(|(tier, offset, chunk)| async move {
                let mut cmd = WriteCommand::new(verb, self.collection(tier).name(), field);
                for s in chunk {
                    cmd.push(s);
                }
                let cmd = cmd.finish(self.write_concern.as_deref())?;
                let reply = self.command(op, cmd, chunk.len(), true).await?;
                let mut reply = parse_write_reply(&reply, chunk.len())?;
                for i in &mut reply.duplicates {
                    *i += offset;
                }
                Ok::<_, StoreError>((tier, reply))
            })
            .collect();
        let results: Vec<_> = stream::iter(futures)
            .buffer_unordered(self.max_concurrent)
            .collect()
            .await;
        all_or_worst(results)
    }

    /// Makes sure every document of `docs` exists, inserting the missing
    /// ones pre-allocated. Returns (created, already present).
    async fn ensure_exist(
        &self,
        docs: &[&PlannedDoc<'_>],
        work: &mut Work,
    ) -> Result<(usize, usize), StoreError> {
        if docs.is_empty() {
            return Ok((0, 0));
        }
        // Which of them exist: an index-covered look-up of ids, far cheaper
        // than sending 86 KB day documents to have them refused.
        let mut lookups = Vec::new();
        for tier in [Tier::Hour, Tier::Day] {
            let ids: Vec<&str> = docs
                .iter()
                .filter(|d| d.tier == tier)
                .map(|d| d.id.as_str())
                .collect();
            for chunk in ids.chunks(IDS_PER_LOOKUP) {
                lookups.push((tier, chunk.to_vec()));
                work.round_trips += 1;
            }
        }
        let futures: Vec<_> = lookups
            .into_iter()
            .map(|(tier, ids)| self.existing_ids(tier, ids))
            .collect();
        let found: Vec<Result<Vec<(Tier, String)>, StoreError>> = stream::iter(futures)
            .buffer_unordered(self.max_concurrent)
            .collect()
            .await;
        let existing: hashbrown::HashSet<(Tier, String)> =
            all_or_worst(found)?.into_iter().flatten().collect();
        let (present, missing): (Vec<&PlannedDoc<'_>>, Vec<&PlannedDoc<'_>>) = docs
            .iter()
            .partition(|d| existing.contains(&(d.tier, d.id.clone())));
        {
            let mut known = self.known.lock();
            for d in &present {
                known.insert(d.tier, d.start, d.hash);
            }
        }
        if missing.is_empty() {
            return Ok((0, present.len()));
        }
        let built: Vec<(Tier, RawDocumentBuf)> = missing
            .iter()
            .map(|d| {
                (
                    d.tier,
                    self.templates.document(&d.id, d.series, d.tier, d.start),
                )
            })
            .collect();
        let groups: Vec<(Tier, Vec<&RawDocument>)> = [Tier::Hour, Tier::Day]
            .into_iter()
            .map(|tier| {
                (
                    tier,
                    built
                        .iter()
                        .filter(|(t, _)| *t == tier)
                        .map(|(_, d)| d.as_ref())
                        .collect(),
                )
            })
            .filter(|(_, v): &(Tier, Vec<&RawDocument>)| !v.is_empty())
            .collect();
        let replies = self.write_all(Op::Insert, groups, work).await?;
        // A duplicate here means someone else inserted it meanwhile.
        let duplicates: usize = replies.iter().map(|(_, r)| r.duplicates.len()).sum();
        let created: u64 = replies.iter().map(|(_, r)| r.n).sum();
        {
            let mut known = self.known.lock();
            for d in &missing {
                known.insert(d.tier, d.start, d.hash);
            }
        }
        Ok((created as usize, present.len() + duplicates))
    }

    async fn existing_ids(
        &self,
        tier: Tier,
        ids: Vec<&str>,
    ) -> Result<Vec<(Tier, String)>, StoreError> {
        let n = ids.len();
        // Approximately: each id is a string element of the `$in` array.
        let bytes = 64 + ids.iter().map(|id| id.len() + 12).sum::<usize>();
        let filter = doc! { "_id": { "$in": ids } };
        let started = Instant::now();
        let coll = self.collection(tier);
        let result = tokio::time::timeout(self.timeout, async {
            let mut cursor = coll
                .find(filter)
                .projection(doc! { "_id": 1 })
                .batch_size(u32::try_from(n).unwrap_or(u32::MAX))
                .await?;
            let mut out = Vec::with_capacity(n);
            while let Some(d) = cursor.try_next().await? {
                if let Ok(id) = d.get_str("_id") {
                    out.push((tier, id.to_string()));
                }
            }
            Ok::<_, DriverError>(out)
        })
        .await;
        self.record(Op::Lookup, 0, bytes, started);
        match result {
            Ok(Ok(ids)) => Ok(ids),
            Ok(Err(e)) => Err(classify(&e, false)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "existence look-up: no answer within {:?}",
                self.timeout
            ))),
        }
    }

    /// Records, ahead of the writes, that this writer may use flush ids up
    /// to `flush_id` + [`ID_RESERVATION`]; see the module documentation.
    async fn reserve_ids(&self, flush_id: u64) -> Result<bool, StoreError> {
        if flush_id <= self.reserved_id.load(Ordering::Acquire) {
            return Ok(false);
        }
        let next = flush_id.saturating_add(ID_RESERVATION).min(i64::MAX as u64);
        let mut cmd = WriteCommand::new("update", WRITERS_COLLECTION, "updates");
        let stmt = to_raw(&doc! {
            "q": { "_id": self.writer.as_str() },
            "u": { "$max": { "next": next as i64 }, "$currentDate": { "updated": true } },
            "upsert": true,
        })?;
        cmd.push(&stmt);
        let cmd = cmd.finish(self.write_concern.as_deref())?;
        let reply = self.command(Op::ReserveIds, cmd, 0, true).await?;
        let reply = parse_write_reply(&reply, 1)?;
        if !reply.duplicates.is_empty() {
            // Two first reservations raced; the next attempt updates.
            return Err(StoreError::Unavailable(
                "flush id reservation raced with another; retrying".into(),
            ));
        }
        self.reserved_id.fetch_max(next, Ordering::AcqRel);
        debug!(writer = %self.writer, next, "reserved flush ids");
        Ok(true)
    }

    async fn apply_inner(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let flush_id = batch.id.0;
        if flush_id == 0 {
            return Err(StoreError::Invalid(
                "flush id 0 is reserved (it is the watermark of a document no flush has touched)"
                    .into(),
            ));
        }
        let flush_id_i64 = i64::try_from(flush_id).map_err(|_| {
            StoreError::Invalid(format!("flush id {flush_id} does not fit an Int64"))
        })?;
        let ctx = StatementCtx {
            watermark_path: &self.watermark_path,
            flush_id: flush_id_i64,
        };

        // Everything is built and checked before anything is sent, so a bad
        // batch changes nothing.
        let mut docs: Vec<PlannedDoc<'_>> = Vec::with_capacity(batch.document_count());
        let mut stmts: Vec<RawDocumentBuf> = Vec::with_capacity(batch.document_count());
        for su in &batch.series {
            let series = &*su.series;
            check_series(series)?;
            for h in &su.hours {
                let id = doc_id(series, Tier::Hour, h.hour_start)?;
                let ops = hour_ops(series, h)?;
                stmts.push(ctx.statement(&id, series, su.kind, h.hour_start, ops));
                docs.push(PlannedDoc {
                    tier: Tier::Hour,
                    start: h.hour_start,
                    hash: self.hasher.hash_one(&id),
                    id,
                    series,
                });
            }
            for d in &su.days {
                let id = doc_id(series, Tier::Day, d.day_start)?;
                let ops = day_ops(series, d)?;
                stmts.push(ctx.statement(&id, series, su.kind, d.day_start, ops));
                docs.push(PlannedDoc {
                    tier: Tier::Day,
                    start: d.day_start,
                    hash: self.hasher.hash_one(&id),
                    id,
                    series,
                });
            }
        }
        let mut stats = ApplyStats::default();
        if docs.is_empty() {
            return Ok(stats);
        }
        let mut work = Work::default();
        self.ready().await?;
        if self.reserve_ids(flush_id).await? {
            work.round_trips += 1;
        }

        let unknown: Vec<&PlannedDoc<'_>> = {
            let known = self.known.lock();
            docs.iter()
                .filter(|d| !known.contains(d.tier, d.start, d.hash))
                .collect()
        };
        let (created, _) = self.ensure_exist(&unknown, &mut work).await?;
        self.counters
            .first_sighting_documents
            .fetch_add(created as u64, Ordering::Relaxed);

        // First round: every statement. Second round: the duplicates of the
        // first, in case they were races; see the module documentation.
        let mut pending: Vec<usize> = (0..stmts.len()).collect();
        let mut upserted = 0usize;
        for round in 0..2 {
            let groups: Vec<(Tier, Vec<usize>)> = [Tier::Hour, Tier::Day]
                .into_iter()
                .map(|tier| {
                    (
                        tier,
                        pending
                            .iter()
                            .copied()
                            .filter(|&i| docs[i].tier == tier)
                            .collect::<Vec<_>>(),
                    )
                })
                .filter(|(_, v)| !v.is_empty())
                .collect();
            let send = groups
                .iter()
                .map(|(tier, idx)| (*tier, idx.iter().map(|&i| stmts[i].as_ref()).collect()))
                .collect();
            let replies = self.write_all(Op::Update, send, &mut work).await?;
            let mut duplicates = Vec::new();
            for (tier, reply) in replies {
                upserted += reply.upserted;
                if let Some((_, idx)) = groups.iter().find(|(t, _)| *t == tier) {
                    duplicates.extend(reply.duplicates.iter().filter_map(|&i| idx.get(i)));
                }
            }
            if round == 0 && !duplicates.is_empty() {
                debug!(
                    flush_id,
                    documents = duplicates.len(),
                    "duplicate keys: re-sending once to tell races from documents already applied"
                );
            }
            pending = duplicates;
            if pending.is_empty() {
                break;
            }
        }
        if upserted > 0 {
            // Harmless (reads treat a missing slot as empty) but worth
            // knowing: pre-allocation is not keeping up, or documents were
            // removed behind the store's back.
            self.counters
                .fallback_upserts
                .fetch_add(upserted as u64, Ordering::Relaxed);
            metrics::counter!("tally_mongodb_fallback_upserts_total").increment(upserted as u64);
            debug!(
                flush_id,
                documents = upserted,
                "documents created by the fallback upsert"
            );
        }
        stats.documents_skipped = pending.len();
        stats.documents_written = stmts.len() - pending.len();
        // Documents whose update was refused as "already applied" exist.
        {
            let mut known = self.known.lock();
            for d in &docs {
                known.insert(d.tier, d.start, d.hash);
            }
        }
        stats.statements = work.statements;
        stats.round_trips = work.round_trips;
        debug!(
            flush_id,
            documents = stmts.len(),
            written = stats.documents_written,
            skipped = stats.documents_skipped,
            first_sighting = created,
            round_trips = stats.round_trips,
            "MongoDB flush applied"
        );
        Ok(stats)
    }

    async fn preallocate_inner(&self, keys: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let mut docs: Vec<PlannedDoc<'_>> = Vec::with_capacity(keys.len());
        let mut seen = hashbrown::HashSet::new();
        let mut stats = PreallocStats::default();
        for k in keys {
            check_series(&k.series)?;
            let id = doc_id(&k.series, k.tier, k.period_start)?;
            if !seen.insert((k.tier, id.clone())) {
                stats.already_present += 1;
                continue;
            }
            docs.push(PlannedDoc {
                tier: k.tier,
                start: k.period_start,
                hash: self.hasher.hash_one(&id),
                id,
                series: &k.series,
            });
        }
        let unknown: Vec<&PlannedDoc<'_>> = {
            let known = self.known.lock();
            docs.iter()
                .filter(|d| !known.contains(d.tier, d.start, d.hash))
                .collect()
        };
        stats.already_present += docs.len() - unknown.len();
        if unknown.is_empty() {
            return Ok(stats);
        }
        self.ready().await?;
        let (created, present) = self.ensure_exist(&unknown, &mut Work::default()).await?;
        self.counters
            .preallocated_documents
            .fetch_add(created as u64, Ordering::Relaxed);
        stats.created = created;
        stats.already_present += present;
        Ok(stats)
    }

    async fn read_inner(&self, q: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        if q.tier == Tier::Hour && q.resolution == Resolution::Day {
            return Err(StoreError::Invalid(
                "hour documents hold no day slot; read daily points from the day tier".into(),
            ));
        }
        check_series(&q.series)?;
        if q.from >= q.to {
            return Ok(Vec::new());
        }
        let period = q.tier.period_s();
        // Nothing is stored outside the keyed years; clamping first keeps the
        // arithmetic below from overflowing.
        let from = q.from.clamp(MIN_KEYED_S - DAY_S, MAX_KEYED_S + DAY_S);
        let to = q.to.clamp(MIN_KEYED_S - DAY_S, MAX_KEYED_S + DAY_S);
        // The document holding `from` may start before it; documents
        // starting at or after `to` hold nothing in range.
        let lo = from.div_euclid(period) * period;
        let hi = (to - 1).div_euclid(period) * period + period;
        let prefix = series_prefix(&q.series);
        let lower = match period_key(q.tier, lo) {
            Some(k) => format!("{prefix}{k}"),
            None if lo < MIN_KEYED_S => prefix.clone(),
            None => return Ok(Vec::new()),
        };
        let upper = match period_key(q.tier, hi) {
            Some(k) => format!("{prefix}{k}"),
            // ':' sorts after every digit.
            None if hi > MAX_KEYED_S => format!("{prefix}:"),
            None => return Ok(Vec::new()),
        };
        let mut projection = doc! { "t": 1, "k": 1 };
        projection.insert(self.watermark_path.as_str(), 1);
        match (q.tier, q.resolution) {
            (_, Resolution::Minute) => {
                projection.insert("values", 1);
            }
            (Tier::Day, Resolution::Hour) => {
                for h in 0..HOURS {
                    projection.insert(format!("values.{h}.total"), 1);
                }
            }
            _ => {
                projection.insert("total", 1);
            }
        }
        self.ready().await?;
        let filter = doc! { "_id": { "$gte": lower, "$lt": upper } };
        let bytes = bson_len(&filter) + bson_len(&projection);
        // Ask for every document in the first batch (the server still caps
        // it at 16 MiB), so a range read is one round trip.
        let expected = ((hi - lo) / period).clamp(1, 10_000) as u32;
        let plan = ReadPlan {
            query: q,
            prefix,
            writer: &self.writer,
        };
        let coll = self.collection(q.tier);
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, async {
            let mut cursor = coll
                .find(filter)
                .projection(projection)
                .sort(doc! { "_id": 1 })
                .batch_size(expected)
                .await
                .map_err(|e| classify(&e, false))?;
            let mut out = Vec::new();
            while let Some(raw) = cursor.try_next().await.map_err(|e| classify(&e, false))? {
                let doc = plan.decode(&raw).map_err(|e| StoreError::Corrupt {
                    doc: match raw.get_str("_id") {
                        Ok(id) => self.doc_name(q.tier, id),
                        Err(_) => self.doc_name(q.tier, "<no string _id>"),
                    },
                    reason: e.to_string(),
                })?;
                out.push(doc);
            }
            Ok::<_, StoreError>(out)
        })
        .await;
        self.record(Op::Read, 0, bytes, started);
        match result {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "read: no answer within {:?}",
                self.timeout
            ))),
        }
    }

    // -- series catalog -----------------------------------------------------

    async fn catalog_upsert_inner(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        check_catalog_entries(entries)?;
        let stmts = merge_catalog_entries(entries)
            .into_iter()
            .map(|(key, e)| {
                to_raw(&doc! {
                    "q": { "_id": key },
                    "u": {
                        "$min": { "first_seen": bson_date(e.first_seen) },
                        "$max": { LAST_SEEN_FIELD: bson_date(e.last_seen) },
                        "$set": { "kind": e.kind.as_str() },
                        "$setOnInsert": { "source": &*e.series.source, "metric": &*e.series.metric },
                    },
                    "upsert": true,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if stmts.is_empty() {
            return Ok(());
        }
        self.ready().await?;
        // Duplicate keys: concurrent first upserts of the same series; see
        // the module documentation.
        let mut pending: Vec<usize> = (0..stmts.len()).collect();
        for _round in 0..2 {
            let send: Vec<&RawDocument> = pending.iter().map(|&i| stmts[i].as_ref()).collect();
            let duplicates = self
                .write_to(Op::CatalogUpsert, self.series.name(), &send)
                .await?;
            pending = duplicates
                .into_iter()
                .filter_map(|i| pending.get(i).copied())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(format!(
            "{} catalog upserts collided with concurrent inserts twice",
            pending.len()
        )))
    }

    /// Sends update statements to one collection in commands of bounded
    /// size, several at once; returns the indexes (into `stmts`) refused
    /// with a duplicate key. As in [`Self::write_all`], every command runs
    /// to its end and the most telling error is reported.
    async fn write_to(
        &self,
        op: Op,
        collection: &str,
        stmts: &[&RawDocument],
    ) -> Result<Vec<usize>, StoreError> {
        let sizes = stmts.iter().map(|s| s.as_bytes().len());
        let futures: Vec<_> = chunk_by_size(sizes, self.statements_per_batch)
            .into_iter()
            .map(|(from, to)| async move {
                let chunk = &stmts[from..to];
                let mut cmd = WriteCommand::new("update", collection, "updates");
                for s in chunk {
                    cmd.push(s);
                }
                let cmd = cmd.finish(self.write_concern.as_deref())?;
                let reply = self.command(op, cmd, chunk.len(), true).await?;
                let reply = parse_write_reply(&reply, chunk.len())?;
                Ok::<_, StoreError>(reply.duplicates.into_iter().map(move |i| i + from))
            })
            .collect();
        let results: Vec<_> = stream::iter(futures)
            .buffer_unordered(self.max_concurrent)
            .collect()
            .await;
        Ok(all_or_worst(results)?.into_iter().flatten().collect())
    }

    async fn catalog_list_inner(&self, q: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let prefix = q.key_prefix();
        let (start, inclusive) = q.scan_start(&prefix);
        let mut id_range = doc! { if inclusive { "$gte" } else { "$gt" }: start };
        if let Some(end) = prefix_successor(&prefix) {
            id_range.insert("$lt", end);
        }
        let mut filter = doc! { "_id": id_range };
        if let Some(metric) = q.metric.iter().find_map(NameMatcher::exact_name) {
            filter.insert("metric", metric);
        }
        if let Some(kind) = q.kind {
            filter.insert("kind", kind.as_str());
        }
        if let Some(since) = q.seen_since {
            filter.insert(LAST_SEEN_FIELD, doc! { "$gte": bson_date(since) });
        }
        let projection = doc! { "kind": 1, "first_seen": 1, LAST_SEEN_FIELD: 1 };
        self.ready().await?;
        let bytes = bson_len(&filter) + bson_len(&projection);
        let batch = q.limit.clamp(CATALOG_MIN_BATCH, CATALOG_MAX_BATCH) as u32;
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, async {
            let mut cursor = self
                .series
                .find(filter)
                .projection(projection)
                .sort(doc! { "_id": 1 })
                .batch_size(batch)
                .await
                .map_err(|e| classify(&e, false))?;
            let mut out = Vec::new();
            while let Some(raw) = cursor.try_next().await.map_err(|e| classify(&e, false))? {
                let entry = decode_catalog(&raw).map_err(|e| StoreError::Corrupt {
                    doc: format!(
                        "{}.{}/{}",
                        self.db.name(),
                        self.series.name(),
                        raw.get_str("_id").unwrap_or("<no string _id>")
                    ),
                    reason: e.to_string(),
                })?;
                if q.accepts(&entry) {
                    out.push(entry);
                    if out.len() >= q.limit {
                        break;
                    }
                }
            }
            Ok::<_, StoreError>(out)
        })
        .await;
        self.record(Op::CatalogList, 0, bytes, started);
        match result {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(format!(
                "catalog listing: no answer within {:?}",
                self.timeout
            ))),
        }
    }

    async fn last_flush_id_inner(&self) -> Result<u64, StoreError> {
        let started = Instant::now();
        let result = tokio::time::timeout(
            self.timeout,
            self.writers.find_one(doc! { "_id": self.writer.as_str() }),
        )
        .await;
        self.record(Op::LastFlushId, 0, 0, started);
        let found = match result {
            Ok(Ok(found)) => found,
            Ok(Err(e)) => return Err(classify(&e, false)),
            Err(_) => {
                return Err(StoreError::Unavailable(format!(
                    "no answer within {:?}",
                    self.timeout
                )))
            }
        };
        let Some(doc) = found else { return Ok(0) };
        match doc.get("next").and_then(as_i64) {
            Some(n) if n >= 0 => Ok(n as u64),
            _ => Err(StoreError::Corrupt {
                doc: format!("{}.{WRITERS_COLLECTION}/{}", self.db.name(), self.writer),
                reason: format!("`next` is {:?}; expected a flush id", doc.get("next")),
            }),
        }
    }
}

/// A command that did not come back with a reply.
enum Failure {
    Driver(DriverError),
    Timeout(Duration),
}

impl Failure {
    /// The server's error code, when the server refused the command.
    fn code(&self) -> Option<i32> {
        match self {
            Failure::Driver(e) => match &*e.kind {
                ErrorKind::Command(c) => Some(c.code),
                _ => None,
            },
            Failure::Timeout(_) => None,
        }
    }

    fn into_store(self, write: bool) -> StoreError {
        match self {
            Failure::Driver(e) => classify(&e, write),
            Failure::Timeout(limit) => {
                let msg = format!("no answer within {limit:?}");
                if write {
                    StoreError::Ambiguous(msg)
                } else {
                    StoreError::Unavailable(msg)
                }
            }
        }
    }
}

const NAMESPACE_NOT_FOUND: i32 = 26;
const INDEX_OPTIONS_CONFLICT: i32 = 85;
const INDEX_KEY_SPECS_CONFLICT: i32 = 86;

fn to_raw(d: &Document) -> Result<RawDocumentBuf, StoreError> {
    RawDocumentBuf::from_document(d).map_err(|e| StoreError::Invalid(format!("BSON: {e}")))
}

/// A command made of constants and names: it always converts, and if it did
/// not, the server would refuse the empty command.
fn raw_command(d: &Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(d).unwrap_or_default()
}

fn bson_len(d: &Document) -> usize {
    RawDocumentBuf::from_document(d).map_or(0, |r| r.as_bytes().len())
}

#[async_trait::async_trait]
impl Store for MongoStore {
    fn name(&self) -> &'static str {
        "mongodb"
    }

    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        self.apply_inner(batch).await
    }

    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        self.preallocate_inner(docs).await
    }

    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        let r = self.read_inner(query).await;
        if let Err(e) = &r {
            self.count_error(Op::Read, e);
        }
        r
    }

    /// The writer's reservation (see the module documentation): at or above
    /// every watermark it wrote, not a promise that those flushes are
    /// complete. MongoDB applies a flush document by document, so whether
    /// a flush landed is in the watermarks, not here.
    ///
    /// When the server cannot be reached this answers 0 with a warning, so
    /// that the daemon starts and ingests while MongoDB is down; flush ids
    /// then rest on the wall clock alone.
    async fn last_flush_id(&self) -> Result<u64, StoreError> {
        match self.last_flush_id_inner().await {
            Ok(id) => {
                self.reserved_id.fetch_max(id, Ordering::AcqRel);
                Ok(id)
            }
            Err(e) if e.is_retryable() => {
                self.count_error(Op::LastFlushId, &e);
                warn!(error = %e, "cannot read this writer's last flush id; continuing from the wall clock");
                Ok(0)
            }
            Err(e) => {
                self.count_error(Op::LastFlushId, &e);
                Err(e)
            }
        }
    }

    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        let started = Instant::now();
        let r = self.catalog_upsert_inner(entries).await;
        observe(self.name(), "catalog_upsert", started, &r);
        r
    }

    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let started = Instant::now();
        let r = self.catalog_list_inner(query).await;
        observe(self.name(), "catalog_list", started, &r);
        r
    }

    async fn health(&self) -> Result<(), StoreError> {
        let limit = self.timeout.min(HEALTH_TIMEOUT);
        let started = Instant::now();
        let result = tokio::time::timeout(
            limit,
            self.client
                .database("admin")
                .run_command(doc! { "ping": 1 }),
        )
        .await;
        self.record(Op::Ping, 0, 0, started);
        let r = match result {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(classify(&e, false)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "ping: no answer within {limit:?}"
            ))),
        };
        if let Err(e) = &r {
            self.count_error(Op::Ping, e);
        }
        r
    }

    /// Every write was acknowledged when `apply` returned, so there is
    /// nothing to make durable; the client stays usable.
    async fn close(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_keys_are_fixed_width_and_sort_as_time() {
        let t = 1_772_323_200; // 2026-03-01T00:00Z
        assert_eq!(
            period_key(Tier::Hour, t + 13 * HOUR_S).unwrap(),
            "2026030113"
        );
        assert_eq!(period_key(Tier::Day, t).unwrap(), "20260301");
        assert_eq!(period_key(Tier::Hour, -HOUR_S).unwrap(), "1969123123");
        assert_eq!(period_key(Tier::Day, MIN_KEYED_S).unwrap(), "00000101");
        assert_eq!(
            period_key(Tier::Hour, MAX_KEYED_S - 3599).unwrap(),
            "9999123123"
        );
        assert_eq!(period_key(Tier::Hour, MIN_KEYED_S - 1), None);
        assert_eq!(period_key(Tier::Hour, MAX_KEYED_S + 1), None);
        let mut last = String::new();
        for start in (t - 400 * DAY_S..t + 400 * DAY_S).step_by(7 * HOUR_S as usize) {
            let start = start.div_euclid(HOUR_S) * HOUR_S;
            let k = period_key(Tier::Hour, start).unwrap();
            assert!(k > last, "{k} after {last}");
            last = k;
        }
    }

    #[test]
    fn ids_refuse_what_would_be_ambiguous() {
        let s = SeriesId::new("db-1", "op");
        assert_eq!(doc_id(&s, Tier::Day, 0).unwrap(), "db-1|op|19700101");
        assert!(matches!(
            doc_id(&s, Tier::Day, 3600),
            Err(StoreError::Invalid(_))
        ));
        assert!(check_series(&SeriesId::new("a|b", "m")).is_err());
        assert!(check_writer_id("tally-01_a").is_ok());
        assert!(check_writer_id("").is_err());
        assert!(check_writer_id("a.b").is_err());
        assert!(check_writer_id(&"a".repeat(65)).is_err());
    }

    fn paths(d: &RawDocument, prefix: &str, out: &mut Vec<String>) {
        for entry in d {
            let (k, v) = entry.unwrap();
            let p = if prefix.is_empty() {
                k.to_string()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                RawBsonRef::Document(sub) if !sub.is_empty() && sub.get("n").unwrap().is_none() => {
                    paths(sub, &p, out)
                }
                _ => out.push(p),
            }
        }
    }

    #[test]
    fn preallocated_documents_have_every_slot() {
        let t = Templates::new();
        let s = SeriesId::new("db-00001", "op_counter");
        let hour = t.document("x", &s, Tier::Hour, 0);
        let mut p = Vec::new();
        paths(&hour, "", &mut p);
        assert_eq!(p.len(), 6 + 60, "{p:?}"); // _id s m t w total + 60 minutes
        let day = t.document("x", &s, Tier::Day, 0);
        let mut p = Vec::new();
        paths(&day, "", &mut p);
        assert_eq!(p.len(), 6 + 24 * 61, "{p:?}");
        let slot = day
            .get_document("values")
            .unwrap()
            .get_document("23")
            .unwrap()
            .get_document("59")
            .unwrap();
        assert_eq!(slot.get_i64("n").unwrap(), 0);
        assert_eq!(slot.get_f64("min").unwrap(), f64::INFINITY);
        assert_eq!(slot.get_f64("max").unwrap(), f64::NEG_INFINITY);
        assert!(hour_doc_bson_size() > 3_000 && hour_doc_bson_size() < 5_000);
        assert!(day_doc_bson_size() > 80_000 && day_doc_bson_size() < 95_000);
    }

    fn day_update() -> DayDocUpdate {
        use crate::model::DayHourUpdate;
        DayDocUpdate {
            day_start: 0,
            hours: vec![
                DayHourUpdate {
                    hour: 3,
                    minutes: vec![(5, Slot::of(1.0)), (5, Slot::of(2.0)), (59, Slot::of(4.0))],
                    total: Slot::of(7.0),
                },
                DayHourUpdate {
                    hour: 23,
                    minutes: vec![(0, Slot::of(1.0))],
                    total: Slot::of(1.0),
                },
            ],
            total: Slot::of(8.0),
        }
    }

    #[test]
    fn statements_never_name_a_path_twice_or_a_prefix_of_another() {
        let s = SeriesId::new("db", "m");
        let ops = day_ops(&s, &day_update()).unwrap();
        let ctx = StatementCtx {
            watermark_path: "w.me",
            flush_id: 9,
        };
        let stmt = ctx.statement("db|m|19700101", &s, SampleKind::Gauge, 0, ops);
        let u = stmt.get_document("u").unwrap();
        let mut all = Vec::new();
        for op in u {
            let (_, fields) = op.unwrap();
            for f in fields.as_document().unwrap() {
                all.push(f.unwrap().0.to_string());
            }
        }
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
                assert!(!b.starts_with(&format!("{a}.")) && !a.starts_with(&format!("{b}.")));
            }
        }
        // Minute 5 of hour 3 was listed twice: merged into one path.
        let inc = u.get_document("$inc").unwrap();
        assert_eq!(inc.get_i64("values.3.5.n").unwrap(), 2);
        assert_eq!(inc.get_f64("values.3.5.sum").unwrap(), 3.0);
        assert_eq!(inc.get_i64("values.23.total.n").unwrap(), 1);
        assert_eq!(inc.get_i64("total.n").unwrap(), 1);
        let mut bad = day_update();
        bad.hours[0].hour = 24;
        assert!(matches!(day_ops(&s, &bad), Err(StoreError::Invalid(_))));
    }

    #[test]
    fn write_command_bytes_are_valid_bson() {
        let mut c = WriteCommand::new("update", "coll", "updates");
        for i in 0..12_i32 {
            let mut d = RawDocumentBuf::new();
            d.append("i", i);
            c.push(&d);
        }
        let wc = to_raw(&doc! { "w": "majority" }).unwrap();
        let cmd = c.finish(Some(&wc)).unwrap().to_document().unwrap();
        assert_eq!(cmd.get_str("update").unwrap(), "coll");
        let arr = cmd.get_array("updates").unwrap();
        assert_eq!(arr.len(), 12);
        assert_eq!(arr[11].as_document().unwrap().get_i32("i").unwrap(), 11);
        assert!(!cmd.get_bool("ordered").unwrap());
        assert_eq!(
            cmd.get_document("writeConcern")
                .unwrap()
                .get_str("w")
                .unwrap(),
            "majority"
        );
    }

    #[test]
    fn chunks_respect_count_and_bytes() {
        let c = chunk_by_size([10usize; 25].into_iter(), 10);
        assert_eq!(c, vec![(0, 10), (10, 20), (20, 25)]);
        let big = MAX_COMMAND_BYTES / 3;
        let c = chunk_by_size([big; 7].into_iter(), 1000);
        assert_eq!(c, vec![(0, 2), (2, 4), (4, 6), (6, 7)]);
        assert!(chunk_by_size(std::iter::empty(), 10).is_empty());
    }

    #[test]
    fn write_replies_sort_duplicates_from_refusals() {
        let reply = doc! {
            "n": 3, "nModified": 1, "ok": 1.0,
            "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "E11000" },
                            { "index": 4, "code": 11000, "errmsg": "E11000" }],
        };
        let r = parse_write_reply(&reply, 5).unwrap();
        assert_eq!((r.n, r.duplicates), (3, vec![1, 4]));
        let reply = doc! { "n": 0, "ok": 1.0,
        "writeErrors": [{ "index": 0, "code": 40, "errmsg": "conflict" }] };
        assert!(matches!(
            parse_write_reply(&reply, 1),
            Err(StoreError::Invalid(m)) if m.contains("code 40")
        ));
        let reply = doc! { "n": 0, "ok": 1.0,
        "writeErrors": [{ "index": 0, "code": 10107, "errmsg": "not primary" }] };
        assert!(matches!(
            parse_write_reply(&reply, 1),
            Err(StoreError::Unavailable(_))
        ));
        let reply = doc! { "n": 1, "ok": 1.0, "writeConcernError": { "code": 64 } };
        assert!(matches!(
            parse_write_reply(&reply, 1),
            Err(StoreError::Ambiguous(_))
        ));
        let reply = doc! { "n": 1, "ok": 1.0,
        "writeErrors": [{ "index": 7, "code": 11000, "errmsg": "E11000" }] };
        assert!(matches!(
            parse_write_reply(&reply, 1),
            Err(StoreError::Ambiguous(_))
        ));
    }

    #[test]
    fn known_docs_forget_old_periods_and_respect_the_cap() {
        let mut k = KnownDocs::new(5);
        k.insert(Tier::Hour, 0, 1);
        k.insert(Tier::Hour, 0, 2);
        assert!(k.contains(Tier::Hour, 0, 1));
        // Far newer hour: the old one is dropped.
        k.insert(Tier::Hour, 10 * HOUR_S, 3);
        assert!(!k.contains(Tier::Hour, 0, 1));
        assert_eq!(k.len, 1);
        // Too old to be remembered at all.
        k.insert(Tier::Hour, 0, 4);
        assert!(!k.contains(Tier::Hour, 0, 4));
        // The cap: the oldest period goes first.
        k.insert(Tier::Day, 0, 1);
        k.insert(Tier::Day, 0, 2);
        k.insert(Tier::Hour, 11 * HOUR_S, 1);
        k.insert(Tier::Hour, 11 * HOUR_S, 2);
        assert_eq!(k.len, 5);
        k.insert(Tier::Hour, 11 * HOUR_S, 3);
        assert!(k.len <= 5);
        assert!(k.contains(Tier::Hour, 11 * HOUR_S, 3));
        assert!(!k.contains(Tier::Day, 0, 1));
    }

    fn plan(q: &ReadQuery) -> ReadPlan<'_> {
        ReadPlan {
            query: q,
            prefix: series_prefix(&q.series),
            writer: "me",
        }
    }

    #[test]
    fn decode_is_defensive() {
        let q = ReadQuery {
            series: SeriesId::new("db", "m"),
            tier: Tier::Hour,
            resolution: Resolution::Minute,
            from: 0,
            to: HOUR_S,
        };
        let t = Templates::new();
        let mut good = t.document("db|m|1970010100", &q.series, Tier::Hour, 0);
        let read = plan(&q).decode(&good).unwrap();
        assert_eq!((read.period_start, read.kind, read.watermark), (0, None, 0));
        assert!(read.slots.is_empty());
        good.append("k", "gauge");
        assert_eq!(
            plan(&q).decode(&good).unwrap().kind,
            Some(SampleKind::Gauge)
        );

        let cases: Vec<(Document, &str)> = vec![
            (doc! { "_id": "db|m|1970010100" }, "`t` is missing"),
            (doc! { "_id": "db|m|1970010100", "t": 5 }, "`t` is Int32"),
            (
                doc! { "_id": "db|m|1970010101", "t": bson::DateTime::from_millis(0) },
                "_id",
            ),
            (
                doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0), "k": "x" },
                "unknown kind",
            ),
            (
                doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
                "values": { "60": { "n": 1_i64, "sum": 1.0, "min": 1.0, "max": 1.0 } } },
                "values.60",
            ),
            (
                doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
                "values": { "1": { "n": "one", "sum": 1.0, "min": 1.0, "max": 1.0 } } },
                "values.1.n",
            ),
            (
                doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
                "values": { "1": { "n": 1_i64, "sum": 1.0, "max": 1.0 } } },
                "values.1.min",
            ),
            (
                doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
                "w": { "me": "x" } },
                "w.me",
            ),
        ];
        for (d, want) in cases {
            let raw = to_raw(&d).unwrap();
            let err = plan(&q).decode(&raw).unwrap_err().to_string();
            assert!(err.contains(want), "{d}: {err}");
        }
        // Other numeric types, and slots out of time order.
        let d = doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
        "w": { "me": 7_i32, "other": 99_i64 },
        "values": { "30": { "n": 2.0, "sum": 3_i32, "min": 1_i64, "max": 2.0 },
                    "5": { "n": 1_i32, "sum": 1.0, "min": 1.0, "max": 1.0 } } };
        let read = plan(&q).decode(&to_raw(&d).unwrap()).unwrap();
        assert_eq!(read.watermark, 7);
        assert_eq!(
            read.slots,
            vec![
                (300, Slot::of(1.0)),
                (
                    1800,
                    Slot {
                        n: 2,
                        sum: 3.0,
                        min: 1.0,
                        max: 2.0
                    }
                )
            ]
        );
    }

    #[test]
    fn driver_errors_map_to_store_kinds() {
        let io: DriverError =
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into();
        assert!(matches!(classify(&io, true), StoreError::Ambiguous(_)));
        assert!(matches!(classify(&io, false), StoreError::Unavailable(_)));
    }
}
