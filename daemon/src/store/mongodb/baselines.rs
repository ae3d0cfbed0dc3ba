//! The one-time move of cumulative counters' `first_seen` off their
//! baseline minute, in catalogs written before a counter's first sample
//! was taken as a baseline only.
//!
//! A counter's first sample has nothing to count an increase from: its
//! minute holds no sample (`n: 0`, only `last`), reads as empty, and the
//! catalog of a new series starts at its first minute with an increase.
//! Catalog entries written before that still start at the baseline minute.
//! This pass moves each such `first_seen` to the series' first later minute
//! with a sample, up to its `last_seen`; an entry whose minute is not stored
//! any more, whose later minutes hold nothing (within [`SCAN_HOUR_DOCS`]
//! hour or [`SCAN_DAY_DOCS`] day documents), or that something unreadable
//! is in the way of, stays as it is.
//!
//! It runs in the background once the store is configured
//! ([`MongoStore::start_first_seen_pass`]), page by page: [`PAGE`] catalog
//! entries in `_id` order, only counters looked at. Per page, one `$in`
//! read of the hour documents holding the entries' `first_seen` minutes
//! (projected to those minutes' `n`), one of the day documents for the
//! entries whose hour document is gone (retention), then, for each entry
//! whose minute is a baseline, one bounded forward read of its documents
//! (every minute's `n` only). The move is `{_id, first_seen: <as read>}` →
//! `$set: {first_seen}`: an entry a daemon changed meanwhile is left to
//! that daemon.
//!
//! The marker is a document in `tally_writers`, `_id:
//! "~first_seen_baselines/<series collection>"` (writer ids cannot hold
//! `~`, and it has no `sealed` or `next`, so no writer search finds it). It
//! keeps the last key of the last finished page (`after`), from which a
//! pass that was stopped goes on, and `done` once the last page is through;
//! with `done` the pass does nothing. The pass only ever moves `first_seen`
//! onto a minute with a sample, so running a page again changes nothing
//! twice. A failure is logged and the pass tried again later, from its
//! last finished page.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use bson::{doc, Document};
use futures::stream::TryStreamExt;
use tracing::{debug, info, warn};

use super::baseline_scan::{all_counts_projection, count_at, count_projection, first_counted};
use super::errors::classify;
use super::ids::{bson_date, period_key};
use super::indexes::LAST_SEEN_FIELD;
use super::stats::Op;
use super::{Conn, MongoStore};
use crate::model::{SampleKind, SeriesId, Tier, MINUTE_S};
use crate::store::StoreError;

/// Catalog entries per page.
pub(super) const PAGE: usize = 1_000;
/// Hour documents read forward from a baseline minute (two days of a
/// series that has a document every hour).
pub(super) const SCAN_HOUR_DOCS: i64 = 48;
/// Day documents read forward, where the hour documents are gone.
pub(super) const SCAN_DAY_DOCS: i64 = 7;
/// The wait before the first retry of a failed pass; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(30);
const RETRY_MAX: Duration = Duration::from_secs(15 * 60);
/// The marker's `_id` prefix; the series collection's name follows.
const MARKER_PREFIX: &str = "~first_seen_baselines/";

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstSeenPass {
    /// False when the marker said the pass was done already.
    pub ran: bool,
    /// Catalog entries read.
    pub entries: u64,
    /// Cumulative counters among them.
    pub counters: u64,
    /// Entries whose `first_seen` moved.
    pub moved: u64,
    /// Entries starting at a baseline minute that stay: no later minute
    /// with a sample was found (or their documents are gone or unreadable).
    pub kept: u64,
    /// Entries that changed between the read and the move, left as they are.
    pub raced: u64,
}

/// A counter's catalog entry, as the pass needs it.
struct Counter {
    id: String,
    /// `first_seen` as stored, for the conditional update.
    stored_first: bson::DateTime,
    /// The start of the `first_seen` minute, and `last_seen`, in seconds.
    first: i64,
    last: i64,
}

impl Counter {
    /// The `_id` of the `tier` document holding the `first_seen` minute.
    fn doc_id(&self, tier: Tier) -> Option<String> {
        let key = period_key(tier, tier.period_start(self.first.div_euclid(MINUTE_S)))?;
        Some(format!("{}|{key}", self.id))
    }
}

/// Where a counter's `first_seen` minute was found, and its count.
struct Located {
    tier: Tier,
    n: Option<u64>,
}

impl MongoStore {
    /// Starts the one-time correction of counters' `first_seen` (see
    /// `baselines.rs`) in the background, and returns at once: it waits
    /// for the server itself, and retries later when it fails. The task
    /// ends when the pass is done (or found done), or the store is gone;
    /// `close` stops it. Its output is what the pass did, None when the
    /// store went away first.
    pub fn start_first_seen_pass(&self) -> tokio::task::JoinHandle<Option<FirstSeenPass>> {
        let conn = Arc::downgrade(&self.conn);
        let task = tokio::spawn(run_until_done(conn, PAGE));
        if let Some(old) = self.first_seen_pass.lock().replace(task.abort_handle()) {
            old.abort();
        }
        task
    }
}

/// Runs the pass until it succeeds, waiting longer after each failure.
async fn run_until_done(conn: Weak<Conn>, page: usize) -> Option<FirstSeenPass> {
    let mut wait = RETRY_FIRST;
    loop {
        let r = {
            let conn = conn.upgrade()?;
            let r = conn.first_seen_pass(page).await;
            if let Err(e) = &r {
                conn.wire.count_error(Op::FirstSeen, e);
            }
            r
        };
        match r {
            Ok(pass) => return Some(pass),
            Err(e) => {
                warn!(error = %e, retry_in = ?wait, "moving counters' first_seen off their baseline minute failed; trying again later from the last finished page");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

impl Conn {
    fn marker_id(&self) -> String {
        format!("{MARKER_PREFIX}{}", self.wire.series.name())
    }

    /// The pass, from the marker's page on; see the module documentation.
    pub(super) async fn first_seen_pass(&self, page: usize) -> Result<FirstSeenPass, StoreError> {
        self.ready().await?;
        let marker = self.read_marker().await?;
        if marker.as_ref().is_some_and(|m| m.contains_key("done")) {
            debug!("counters' first_seen already moved off their baseline minute");
            return Ok(FirstSeenPass::default());
        }
        let mut after = marker.and_then(|m| m.get_str("after").ok().map(str::to_owned));
        info!(resume_after = ?after, "moving cumulative counters' first_seen off their baseline minute: starting");
        let mut pass = FirstSeenPass {
            ran: true,
            ..FirstSeenPass::default()
        };
        loop {
            let (counters, last) = self.counter_page(after.as_deref(), page, &mut pass).await?;
            self.correct_page(&counters, &mut pass).await?;
            match last {
                Some(key) => {
                    self.write_marker(doc! { "after": &key }).await?;
                    after = Some(key);
                }
                None => break,
            }
        }
        self.write_marker(doc! { "done": bson::DateTime::now(), "moved": pass.moved as i64 })
            .await?;
        info!(
            entries = pass.entries,
            counters = pass.counters,
            moved = pass.moved,
            kept = pass.kept,
            raced = pass.raced,
            "moving cumulative counters' first_seen off their baseline minute: done"
        );
        Ok(pass)
    }

    async fn read_marker(&self) -> Result<Option<Document>, StoreError> {
        let find = async {
            self.wire
                .writers
                .find_one(doc! { "_id": self.marker_id() })
                .await
                .map_err(|e| classify(&e, false))
        };
        self.wire
            .timed(
                Op::FirstSeen,
                64,
                self.wire.timeout,
                "first_seen pass marker: ",
                find,
            )
            .await
    }

    async fn write_marker(&self, set: Document) -> Result<(), StoreError> {
        let write = async {
            self.wire
                .writers
                .update_one(doc! { "_id": self.marker_id() }, doc! { "$set": set })
                .upsert(true)
                .await
                .map_err(|e| classify(&e, true))
        };
        self.wire
            .timed(
                Op::FirstSeen,
                128,
                self.wire.timeout,
                "first_seen pass marker: ",
                write,
            )
            .await
            .map(|_| ())
    }

    /// The counters among the next `limit` catalog entries after `after`,
    /// and the last key read when there may be more.
    async fn counter_page(
        &self,
        after: Option<&str>,
        limit: usize,
        pass: &mut FirstSeenPass,
    ) -> Result<(Vec<Counter>, Option<String>), StoreError> {
        let limit = limit.max(1);
        // Strings only (`$gte: ""` on the first page): `after` is a string,
        // and a key of another type would stop the walk.
        let filter = match after {
            Some(a) => doc! { "_id": { "$gt": a } },
            None => doc! { "_id": { "$gte": "" } },
        };
        let projection = doc! { "kind": 1, "first_seen": 1, LAST_SEEN_FIELD: 1 };
        let read = async {
            let mut cursor = self
                .wire
                .series
                .find(filter)
                .projection(projection)
                .sort(doc! { "_id": 1 })
                .limit(limit as i64)
                .batch_size(limit as u32)
                .await?;
            let mut out = Vec::new();
            let (mut read, mut last) = (0, None);
            while let Some(raw) = cursor.try_next().await? {
                read += 1;
                if let Ok(id) = raw.get_str("_id") {
                    last = Some(id.to_owned());
                }
                out.extend(counter_of(&raw));
            }
            Ok::<_, mongodb::error::Error>((out, read, last))
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        let (counters, read, last) = self
            .wire
            .timed(
                Op::FirstSeen,
                128,
                self.wire.timeout,
                "catalog page: ",
                read,
            )
            .await?;
        pass.entries += read as u64;
        pass.counters += counters.len() as u64;
        Ok((counters, (read >= limit).then_some(last).flatten()))
    }

    /// Moves the `first_seen` of each of `counters` that names a baseline.
    async fn correct_page(
        &self,
        counters: &[Counter],
        pass: &mut FirstSeenPass,
    ) -> Result<(), StoreError> {
        let located = self.locate(counters).await?;
        for (c, at) in counters.iter().zip(located) {
            let Some(Located { tier, n: Some(0) }) = at else {
                continue;
            };
            let Some(to) = self.first_counted_after(c, tier).await? else {
                pass.kept += 1;
                continue;
            };
            if self.move_first_seen(c, to).await? {
                pass.moved += 1;
            } else {
                pass.raced += 1;
            }
        }
        Ok(())
    }

    /// Each counter's `first_seen` minute, from its hour document, or from
    /// its day document where the hour document is gone; None where
    /// neither is stored.
    async fn locate(&self, counters: &[Counter]) -> Result<Vec<Option<Located>>, StoreError> {
        let mut out: Vec<Option<Located>> = counters.iter().map(|_| None).collect();
        for tier in [Tier::Hour, Tier::Day] {
            let wanted: Vec<(usize, String)> = counters
                .iter()
                .enumerate()
                .filter(|(i, _)| out[*i].is_none())
                .filter_map(|(i, c)| c.doc_id(tier).map(|id| (i, id)))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            let ids = wanted.iter().map(|(_, id)| id.as_str());
            let minutes = wanted.iter().map(|&(i, _)| counters[i].first);
            let docs = self
                .docs_by_id(tier, ids, count_projection(tier, minutes))
                .await?;
            for (i, id) in wanted {
                if let Some(doc) = docs.get(&id) {
                    let n = count_at(doc, tier, counters[i].first);
                    out[i] = Some(Located { tier, n });
                }
            }
        }
        Ok(out)
    }

    /// The `tier` documents of `ids` that exist, by `_id`, projected.
    async fn docs_by_id<'a>(
        &self,
        tier: Tier,
        ids: impl Iterator<Item = &'a str>,
        projection: Document,
    ) -> Result<HashMap<String, RawDocumentBuf>, StoreError> {
        let ids: Vec<&str> = ids.collect();
        let bytes = 64 + ids.iter().map(|id| id.len() + 12).sum::<usize>();
        let coll = self.wire.collection(tier);
        let read = async {
            let mut cursor = coll
                .find(doc! { "_id": { "$in": &ids } })
                .projection(projection)
                .batch_size(ids.len().max(1) as u32)
                .await?;
            let mut out = HashMap::with_capacity(ids.len());
            while let Some(raw) = cursor.try_next().await? {
                if let Ok(id) = raw.get_str("_id") {
                    out.insert(id.to_owned(), raw);
                }
            }
            Ok::<_, mongodb::error::Error>(out)
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        self.wire
            .timed(
                Op::FirstSeen,
                bytes,
                self.wire.timeout,
                "baseline minutes: ",
                read,
            )
            .await
    }

    /// The first minute after `c`'s `first_seen` with a sample, up to its
    /// `last_seen`, in a bounded number of its `tier` documents.
    async fn first_counted_after(
        &self,
        c: &Counter,
        tier: Tier,
    ) -> Result<Option<i64>, StoreError> {
        let (Some(from), Some(last_key)) = (
            c.doc_id(tier),
            period_key(tier, tier.period_start(c.last.div_euclid(MINUTE_S))),
        ) else {
            return Ok(None);
        };
        let through = format!("{}|{last_key}", c.id);
        let limit = match tier {
            Tier::Hour => SCAN_HOUR_DOCS,
            Tier::Day => SCAN_DAY_DOCS,
        };
        let coll = self.wire.collection(tier);
        let read = async {
            let cursor = coll
                .find(doc! { "_id": { "$gte": from, "$lte": through } })
                .projection(all_counts_projection(tier))
                .sort(doc! { "_id": 1 })
                .limit(limit)
                .batch_size(limit as u32)
                .await?;
            cursor.try_collect::<Vec<_>>().await
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        let docs = self
            .wire
            .timed(
                Op::FirstSeen,
                128,
                self.wire.timeout,
                "a counter's minutes: ",
                read,
            )
            .await?;
        Ok(first_counted(&docs, tier, c.first, c.last))
    }

    /// Sets `c`'s `first_seen` to `to` if it is still what was read.
    async fn move_first_seen(&self, c: &Counter, to: i64) -> Result<bool, StoreError> {
        let filter = doc! { "_id": &c.id, "first_seen": c.stored_first };
        let update = doc! { "$set": { "first_seen": bson_date(to) } };
        let write = async {
            self.wire
                .series
                .update_one(filter, update)
                .await
                .map_err(|e| classify(&e, true))
        };
        let r = self
            .wire
            .timed(
                Op::FirstSeen,
                128,
                self.wire.timeout,
                "moving a first_seen: ",
                write,
            )
            .await?;
        Ok(r.matched_count == 1)
    }
}

/// `raw` as a [`Counter`], when it is a readable cumulative counter's
/// entry; others, damaged ones included, are left to the listings.
fn counter_of(raw: &RawDocument) -> Option<Counter> {
    let id = raw.get_str("_id").ok()?;
    SeriesId::from_key(id)?;
    if raw.get_str("kind").ok()? != SampleKind::CumulativeCounter.as_str() {
        return None;
    }
    let date = |field: &str| match raw.get(field) {
        Ok(Some(RawBsonRef::DateTime(t))) => Some(t),
        _ => None,
    };
    let stored_first = date("first_seen")?;
    let last = date(LAST_SEEN_FIELD)?.timestamp_millis().div_euclid(1000);
    let first_s = stored_first.timestamp_millis().div_euclid(1000);
    Some(Counter {
        id: id.to_owned(),
        stored_first,
        first: first_s.div_euclid(MINUTE_S) * MINUTE_S,
        last,
    })
}
