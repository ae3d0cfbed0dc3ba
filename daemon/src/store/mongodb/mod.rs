//! The MongoDB store: Tally's hour and day documents on a MongoDB server or
//! sharded cluster, written through the official `mongodb` driver.
//!
//! # Documents
//!
//! Two collections, [`MongoDbConfig::hour_collection`] and
//! [`MongoDbConfig::day_collection`], in [`MongoDbConfig::database`]. A
//! slot is `{n: Int64, sum: Double, min: Double, max: Double, last: {t:
//! Int64, v: Double}}`; the empty slot is `{n: 0, sum: 0.0, min: +Infinity,
//! max: -Infinity, last: {t: Int64(-2^63), v: 0.0}}`, because `$min` and
//! `$max` on a real server replace an infinity with any finite value, while a
//! null would win every `$min` (null sorts below all numbers).
//!
//! `last` is the minute's newest sample, its Unix-ms time `t` and value `v`
//! (a cumulative counter's raw count; NaN is kept here only). A flush sets it
//! with `$max`: MongoDB compares embedded documents field by field, so the
//! later `t` wins, at the same `t` the greater `v` (NaN below every number),
//! and a late sample never replaces a newer one; `$max` of what is already
//! there changes nothing, so a retried flush needs no more than the
//! watermark. The hour document's running slot has no `last` (it is its
//! newest minute's; reads take it from there), which keeps every flush
//! statement at one `$max` more. A document written before slots had `last`
//! reads as slots without a last sample, and gains the field with its next
//! update of the minute.
//!
//! ```text
//! hour: { _id: "db-01|op_counter|2026031410",           // <source>|<metric>|<YYYYMMDDHH> UTC
//!         s: "db-01", m: "op_counter", t: Date(2026-03-14T10:00Z),
//!         k: "gauge",                                    // absent until the first write
//!         w: { <writer id>: Int64(flush id) },           // per-writer watermark
//!         total: <slot>,                                 // the hour's running slot (no `last`)
//!         values: { "0": <slot>, ..., "59": <slot> } }   // values.<MINUTE>
//! day:  { _id: "db-01|op_counter|20260314", s, m, t, k,
//!         w: {},                                         // sealed, not written by flushes
//!         total: <slot>,                                 // the day's running slot
//!         values: { "0": { total: <slot>, "0": <slot>, ..., "59": <slot> },
//!                   ...,
//!                   "23": { ... } } }                    // values.<HOUR>.<MINUTE>
//! ```
//!
//! A server that refuses infinite doubles (FerretDB 1.x) gets
//! `min: f64::MAX, max: -f64::MAX` in empty slots instead; see `features.rs`.
//! Either way an empty slot is told by `n: 0`.
//!
//! A pre-allocated document has every slot present and empty, `w: {}` and no
//! `k`; it is [`hour_doc_bson_size`] (about 5.7 KB) or [`day_doc_bson_size`]
//! (about 135 KB) bytes of BSON, and it never grows afterwards, since every
//! update only changes values that are already there.
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
//! (below) is made the same way. Where the server has no TTL indexes, `{t: 1}`
//! is a plain index and the daemon's maintenance sweep deletes documents
//! past their retention itself, every minute.
//!
//! **Recommended shard key: `{_id: 1}` (ranged)** for both collections. The
//! id starts with the source, so one source's documents are contiguous in the
//! key space and live together on one shard (a source's range reads stay on
//! one shard), while
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
//! One upsert per touched hour document per flush:
//!
//! ```text
//! q: { _id: X, "w.<writer>": { $not: { $gte: Int64(flush id) } } }
//! u: { $inc: { "values.M.n", "values.M.sum", ..., "total.n", "total.sum" },
//!      $min: { "values.M.min", ..., "total.min" },  $max: { ... },
//!      $set: { "w.<writer>": Int64(flush id), k: "<kind>" },
//!      $setOnInsert: { s, m, t } },  upsert: true
//! ```
//!
//! No path appears twice across the operators, which a real server would
//! reject.
//!
//! Flushes write hour documents only: one statement per active series per
//! flush. A day document's block of an hour is written once, when the hour
//! has closed (a minute after its end, spread over
//! [`MongoDbConfig::seal_spread`]), and on shutdown: *sealed* from the hour
//! document by `$set` of the slots that differ, with the day's running
//! slot recomputed from its hours:
//!
//! ```text
//! q: { _id: D, "total.n": <as read>, "total.sum": <as read> }
//! u: { $set: { "values.H.M": <hour doc's slot>, ..., "values.H.total",
//!              total: <sum of the hours>, k },
//!      $setOnInsert: { s, m, l, t } },  upsert: true
//! ```
//!
//! A seal is idempotent, so it needs no watermark: it is repeated for late
//! minutes, after a crash, and by every daemon that wrote a rollup series'
//! hour; the filter on the running slot makes concurrent seals of one day
//! document go one after the other. Each writer records in `tally_writers`
//! the oldest hour it may not have sealed (`sealed`); a restarted daemon
//! seals every hour from there again from the hour documents that carry
//! its watermark, and the query engine reads the hours since the oldest
//! such record of all writers from the hour documents, so reads through any
//! daemon see what every daemon flushed (`seal/queue.rs`).
//!
//! Statements go out as the `update` command with many statements,
//! `ordered: false`, in commands of at most
//! [`MongoDbConfig::statements_per_batch`] statements and about 12 MiB, with
//! at most [`MongoDbConfig::max_concurrent_batches`] commands in flight. The
//! `update` command is used rather than `bulkWrite` because `bulkWrite` needs
//! MongoDB 8.0, while a multi-statement `update` works on every server the
//! driver supports. **Supported servers: MongoDB 4.4 and later** (the `mongodb`
//! 3.x driver's floor, wire version 9), standalone, replica set or sharded,
//! and FerretDB 1.24, whose gaps (no TTL indexes, no `collMod`, no
//! infinities) the store detects at the first contact and works around
//! (`features.rs`).
//!
//! First sighting: the store remembers (bounded, in memory) which documents
//! it knows to exist. Before the first update of a document it does not know,
//! it looks the id up (an `_id`-only, index-covered `find`) and inserts the
//! full pre-allocated document if it is missing; so updates fill slots that
//! are already there, and the upsert stays only as the fallback (e.g. after
//! the memory is full, or if a document vanished). The look-up comes first
//! because a blind insert would resend 135 KB per day document after every
//! restart, or when another daemon already pre-allocated.
//!
//! # The series catalog
//!
//! [`MongoDbConfig::series_collection`] holds one small document per series,
//! for discovery ([`Store::catalog_list`]):
//!
//! ```text
//! { _id: "db-01|op_counter",                 // SeriesId::key: <source>|<metric>[{<labels>}]
//!   source: "db-01", metric: "op_counter",
//!   labels: { cpu: "0" },                    // only on labelled series
//!   kind: "gauge",                           // SampleKind::as_str
//!   first_seen: Date(...), last_seen: Date(...) }   // minute starts
//! ```
//!
//! [`Store::catalog_upsert`] sends one statement per series,
//! `{q: {_id}, u: {$min: {first_seen}, $max: {last_seen}, $set: {kind},
//! $setOnInsert: {source, metric, labels}}, upsert: true}`, in multi-statement
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
//! the store filters with
//! [`NameMatcher::matches`](crate::selector::NameMatcher::matches) itself,
//! so every store speaks the same regex dialect (Rust's `regex`, as PromQL's RE2) whatever
//! the server's own engine would accept. The cursor is read in batches and
//! dropped (the driver kills it) as soon as `limit` entries passed, so a
//! call's work is bounded by what it returns plus what the matchers refuse
//! on the way; there is no cap on the documents one call may scan, so it
//! never returns fewer entries than exist.
//!
//! Its TTL index is `{last_seen: 1}` with `expireAfterSeconds` = the day
//! retention: an entry goes when the series' last day document would have
//! gone too (give or take the daemon's refresh step).
//! A second index, `{metric: 1, _id: 1}`, serves listings of one metric
//! named exactly across many sources (`indexes.rs`).
//!
//! A cumulative counter's first sample is only a baseline (its minute has
//! `n: 0`), and a new series' `first_seen` is its first minute with an
//! increase. Catalogs written before that hold the baseline minute: the
//! daemon starts, in the background, a one-time pass
//! ([`MongoStore::start_first_seen_pass`]) that moves such entries to the
//! first later minute with a sample, page by page, with a conditional
//! update, and marks itself done in `tally_writers` (`baselines.rs`).
//!
//! # Exactly once
//!
//! Every hour document keeps, per writer, the highest flush id applied to
//! it (`w.<writer>`); day documents need none, since seals are idempotent. The filter above matches only while that watermark is
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
//! small collection `tally_writers` with `$max`, and
//! [`Store::last_flush_id`] returns that reservation. It is an upper bound of
//! every watermark this writer has written, so a restarted daemon continues
//! above all of them even if the clock went back, at the cost of one small
//! write per minute.
//!
//! # Where things are
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`MongoStore`], `connect`, the [`Store`] impl; `Conn`, the collaborators below put together |
//! | `config.rs` | [`MongoDbConfig`], its checks, driver options, [`redact_uri`] |
//! | `ids.rs` | `_id` format, name and writer-id checks |
//! | `documents.rs` | pre-allocated documents and their sizes |
//! | `statements.rs` | the update statement of one document |
//! | `wire.rs` | the wire: client, collections, command limits, deadlines, the outage on record |
//! | `command.rs` | building write commands and sending them in bounded batches |
//! | `errors.rs` | replies and driver errors as [`StoreError`] kinds |
//! | `writes.rs` | `apply`: a flush's statements, update rounds |
//! | `seal/` | the sealer: which hours are due, the seals themselves, the writers' records and the read lag, taking over a stopped writer's seals (its own table) |
//! | `prealloc.rs` | pre-allocation and first-sighting inserts, their templates and memory |
//! | `known_docs.rs` | the first-sighting memory |
//! | `flush_ids.rs` | this writer: its id, watermark path and flush-id reservations |
//! | `reads.rs`, `decode.rs` | range reads, decoding stored documents |
//! | `catalog.rs` | the series catalog |
//! | `baselines.rs`, `baseline_scan.rs` | the one-time move of counters' `first_seen` off their baseline minute |
//! | `indexes.rs` | the first contact and its state: feature probes, TTL indexes |
//! | `features.rs` | what the server lacks, and the fallbacks |
//! | `probes.rs` | trying each feature once, at the first contact |
//! | `expire.rs` | retention deletes where the server has no TTL |
//! | `stats.rs` | [`MongoStats`], metrics |

mod baseline_scan;
mod baselines;
mod catalog;
mod command;
mod config;
mod decode;
mod documents;
mod errors;
mod expire;
mod features;
mod flush_ids;
mod ids;
mod indexes;
mod known_docs;
mod prealloc;
mod probes;
mod reads;
mod seal;
mod statements;
mod stats;
#[cfg(test)]
mod tests;
mod wire;
mod writes;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::doc;
use mongodb::Client;
use parking_lot::Mutex;
use tracing::{info, warn};

pub use self::baselines::FirstSeenPass;
pub use self::config::{redact_uri, MongoDbConfig};
pub use self::documents::{day_doc_bson_size, hour_doc_bson_size};
pub use self::features::Feature;
pub use self::stats::MongoStats;

use self::config::check_retention;
use self::errors::classify;
use self::flush_ids::Writer;
use self::ids::check_writer_id;
use self::indexes::FirstContact;
use self::prealloc::{Prealloc, Sightings};
use self::seal::Sealer;
use self::stats::Op;
use self::wire::Wire;
use super::{
    observe, ApplyStats, CatalogEntry, CatalogQuery, Cause, DocRead, PreallocStats, ReadQuery,
    Store, StoreError,
};
use crate::model::{DocKey, FlushBatch};

/// The longest `close` seals for: the hours it leaves are on record.
const CLOSE_SEAL_LIMIT: Duration = Duration::from_secs(30);

/// Upper bound of `health()`: it backs a readiness probe polled every 2 s.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`Store`] on MongoDB; see the module documentation. A thin facade:
/// flushes go through [`Conn`] with nothing but their own statements,
/// while the upkeep ([`Store::upkeep`]: seals, takeovers, the documents
/// first seen by flushes) runs beside them, in the [`Sealer`] and the
/// first-sighting queue, each with its own state.
pub struct MongoStore {
    conn: Arc<Conn>,
    sealer: Sealer,
    /// Day documents flushes reached before they were known to exist.
    sightings: Mutex<Sightings>,
    /// The background correction of counters' `first_seen`, once started
    /// (`baselines.rs`): `close` stops it.
    first_seen_pass: Mutex<Option<tokio::task::AbortHandle>>,
}

/// What every part of the store shares, as collaborators that each own
/// their state: the wire to the server (`wire.rs`), the first contact
/// (`indexes.rs`), this writer's identity and reservation
/// (`flush_ids.rs`), and pre-allocation (`prealloc.rs`). The operations
/// that need more than one of them are `Conn`'s.
pub(super) struct Conn {
    wire: Wire,
    contact: FirstContact,
    writer: Writer,
    prealloc: Prealloc,
}

impl fmt::Debug for MongoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URI is left out: it may hold a password.
        let w = &self.conn.wire;
        f.debug_struct("MongoStore")
            .field("database", &w.db.name())
            .field("hour_collection", &w.hour.name())
            .field("day_collection", &w.day.name())
            .field("series_collection", &w.series.name())
            .field("writer", &self.conn.writer.id)
            .finish_non_exhaustive()
    }
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
        check_retention(retention)?;
        if cfg.day_write_delay.is_some() {
            warn!("mongodb.day_write_delay is no longer used and can be removed: day documents are sealed from the hour documents once an hour closes (mongodb.seal_spread)");
        }
        cfg.check_names()?;
        let (options, write_concern) = cfg.client_options().await?;
        let client = Client::with_options(options)
            .map_err(|e| StoreError::Invalid(Cause::of(format!("mongodb client: {e}"), e)))?;
        info!(
            database = %cfg.database,
            hour_collection = %cfg.hour_collection,
            day_collection = %cfg.day_collection,
            series_collection = %cfg.series_collection,
            writer = writer_id,
            "MongoDB store configured"
        );
        let conn = Arc::new(Conn {
            wire: Wire::new(cfg, client, write_concern),
            contact: FirstContact::new(retention),
            writer: Writer::new(writer_id),
            prealloc: Prealloc::new(),
        });
        let spread = cfg.seal_spread.min(config::MAX_SEAL_SPREAD);
        Ok(MongoStore {
            sealer: Sealer::new(conn.clone(), spread),
            conn,
            sightings: Mutex::new(Sightings::default()),
            first_seen_pass: Mutex::new(None),
        })
    }

    /// The driver client, e.g. for tests and tools in the same process.
    pub fn client(&self) -> &Client {
        &self.conn.wire.client
    }

    /// What the store has sent so far.
    pub fn stats(&self) -> MongoStats {
        self.conn.wire.stats()
    }

    /// The features this store found the server lacking, so far.
    pub fn missing_features(&self) -> Vec<Feature> {
        self.conn.wire.features.missing()
    }
}

impl Conn {
    /// The first contact, made before the first operation that reaches the
    /// server; see `indexes.rs`.
    async fn ready(&self) -> Result<(), StoreError> {
        self.contact.ready(&self.wire).await
    }
}

#[async_trait::async_trait]
impl Store for MongoStore {
    fn name(&self) -> &'static str {
        "mongodb"
    }

    /// Sends the flush's own statements and nothing else: documents it
    /// finds unknown are upserted, and the upkeep makes their day documents
    /// exist; seals follow in the upkeep too.
    async fn apply(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let Some((stats, days)) = self.conn.apply_inner(batch, &self.sealer).await? else {
            return Ok(ApplyStats::default());
        };
        self.sealer.wrote(batch);
        self.sightings.lock().add(days);
        // Only flushes whose every document is in: a crash replays the rest,
        // and the watermarks skip what is already there. A flush with
        // refused documents is not complete until the pipeline has set
        // them aside (or a retry applied them): a later flush records it.
        // Its documents are in whatever this record does: a failure must not
        // read as a refusal of them (they would be set aside and counted
        // twice). A later flush records completion past it.
        if stats.refused.is_empty() {
            if let Err(e) = self
                .sealer
                .note_complete(self.durable_through(batch.id.0))
                .await
            {
                warn!(flush_id = batch.id.0, error = %e, "recording the flush complete failed; a later flush records it");
            }
        }
        Ok(stats)
    }

    /// Flushes with late minutes are complete once those are sealed.
    fn durable_through(&self, applied: u64) -> u64 {
        self.sealer.durable_through(applied)
    }

    fn day_tier_lag(&self) -> Duration {
        self.sealer.lag()
    }

    /// A share of the seals that are due, a step of a takeover, and the
    /// day documents flushes saw first; see [`MongoStore`].
    async fn upkeep(&self) -> Result<Option<u64>, StoreError> {
        if self.conn.wire.outage.lock().is_some() {
            // Reads answer from memory while an outage is on record; an idle
            // daemon, with no flush to find the server back, learns here
            // that it is over.
            if self.health().await.is_err() {
                return Ok(None);
            }
        }
        let due = self.sightings.lock().take();
        if !due.is_empty() {
            if let Err((e, back)) = self.conn.insert_sighted(due).await {
                self.conn.wire.count_error(Op::Insert, &e);
                warn!(error = %e, documents = back.len(), "first-sighting inserts failed; retried later, and seals upsert what stays missing");
                self.sightings.lock().failed(back);
            }
        }
        self.sealer.seal_now(false).await
    }

    fn max_statements_per_s(&self) -> Option<f64> {
        let max = self.conn.wire.max_statements_per_s;
        (max > 0).then_some(max as f64)
    }

    async fn complete_flush_id(&self) -> Result<u64, StoreError> {
        self.conn.complete_flush_id_inner().await
    }

    async fn highest_flush_held(&self) -> Result<u64, StoreError> {
        // The reservation bounds every watermark this writer wrote. Unlike
        // `last_flush_id`, an unreachable server is an error here, not 0:
        // replay then merges nothing.
        self.conn.last_flush_id_inner().await
    }

    async fn preallocate(&self, docs: &[DocKey]) -> Result<PreallocStats, StoreError> {
        let stats = self.conn.preallocate_inner(docs).await?;
        self.conn
            .wire
            .counters
            .preallocated_documents
            .fetch_add(stats.created as u64, Ordering::Relaxed);
        Ok(stats)
    }

    async fn read(&self, query: &ReadQuery) -> Result<Vec<DocRead>, StoreError> {
        let r = self.conn.read_inner(query).await;
        if let Err(e) = &r {
            self.conn.wire.count_error(Op::Read, e);
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
        self.conn.last_flush_id_at_start().await
    }

    /// Deletes what the TTL indexes would, where the server has none; see
    /// `expire.rs`.
    async fn expire(
        &self,
        now_s: i64,
        hour_retention_s: i64,
        day_retention_s: i64,
    ) -> Result<usize, StoreError> {
        self.conn
            .expire_inner(now_s, hour_retention_s, day_retention_s)
            .await
    }

    async fn catalog_upsert(&self, entries: &[CatalogEntry]) -> Result<(), StoreError> {
        let started = Instant::now();
        let r = self.conn.catalog_upsert_inner(entries).await;
        observe(self.name(), "catalog_upsert", started, &r);
        r
    }

    async fn catalog_list(&self, query: &CatalogQuery) -> Result<Vec<CatalogEntry>, StoreError> {
        let started = Instant::now();
        let r = self.conn.catalog_list_inner(query).await;
        observe(self.name(), "catalog_list", started, &r);
        r
    }

    fn outage(&self) -> Option<String> {
        self.conn.wire.outage.lock().clone()
    }

    async fn health(&self) -> Result<(), StoreError> {
        let c = &self.conn.wire;
        let limit = c.timeout.min(HEALTH_TIMEOUT);
        let ping = async {
            let admin = c.client.database("admin");
            match admin.run_command(doc! { "ping": 1 }).await {
                Ok(_) => Ok(()),
                Err(e) => Err(classify(&e, false)),
            }
        };
        let r = c.timed(Op::Ping, 0, limit, "ping: ", ping).await;
        if let Err(e) = &r {
            c.count_error(Op::Ping, e);
        }
        r
    }

    /// Seals every hour this process wrote, the open ones too; everything
    /// else was acknowledged when `apply` returned. The client stays usable.
    async fn close(&self) -> Result<(), StoreError> {
        // The pass goes on from its last finished page at the next start.
        if let Some(pass) = self.first_seen_pass.lock().take() {
            pass.abort();
        }
        match tokio::time::timeout(CLOSE_SEAL_LIMIT, self.sealer.seal_now(true)).await {
            Ok(r) => r.map(|_| ()),
            Err(_) => {
                // What is left is on record: the next start seals it.
                warn!(limit = ?CLOSE_SEAL_LIMIT, "sealing at close ran out of time; the next start seals the rest");
                Ok(())
            }
        }
    }
}
