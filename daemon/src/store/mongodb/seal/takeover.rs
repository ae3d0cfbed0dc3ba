//! Sealing for a writer that stopped and did not come back.
//!
//! A daemon that was SIGKILLed, and whose data directory (and so writer id)
//! is gone, leaves the hours since its `sealed` record unsealed, and its
//! record holds every daemon's day-tier reads on the hour documents. Any
//! other daemon takes such a writer over, a page at a time with its own
//! flushes and idle ticks: it seals the hours from the record up to the
//! hour of the writer's last reservation, from the hour documents that
//! carry that writer's watermark, then moves the record past them. Seals
//! are idempotent, so a takeover that two daemons run at once, or that is
//! cut short and run again, counts nothing twice.
//!
//! The record moves only while the writer's document is still as the
//! takeover saw it (`next` and `updated`, which every write of the writer's
//! own record renews): a writer that came back in the meantime keeps its
//! record, and seals its own hours from it. A writer that comes back later
//! finds its minutes of the taken-over hours late, and seals them again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use bson::doc;
use bson::raw::RawDocumentBuf;
use futures::TryStreamExt;
use tracing::{info, warn};

use super::queue::{hour_of, hours_to_seal};
use super::write::next_ids;
use super::Sealer;
use crate::model::HOUR_S;
use crate::store::mongodb::errors::{as_i64, classify};
use crate::store::mongodb::stats::Op;
use crate::store::StoreError;

/// A writer whose reservation is this old (µs) stopped: a flushing daemon
/// renews it every minute.
const STALE_US: u64 = 2 * 3600 * 1_000_000;

/// How often the writers' records are searched for a stale one (µs).
const SEARCH_EVERY_US: u64 = 60_000_000;

/// Hour documents sealed per step: a step runs after a flush or on an idle
/// tick.
const STEP_IDS: usize = 2_000;

/// A writer being taken over.
pub(super) struct Takeover {
    writer: String,
    /// Its reservation and last write as found: the record moves only
    /// while they still are.
    next: i64,
    updated: Option<bson::DateTime>,
    /// Hours still to seal, oldest first.
    hours: VecDeque<i64>,
    cursor: Option<mongodb::Cursor<RawDocumentBuf>>,
}

impl Sealer {
    /// One step of a takeover, searching for a writer to take over now and
    /// then. Returns whether anything was sealed or recorded.
    pub(super) async fn take_over_step(&self, now_us: u64) -> Result<bool, StoreError> {
        let mut slot = self.takeover.lock().await;
        if slot.is_none() {
            let last = self.takeover_searched_at.load(Ordering::Acquire);
            if last != 0 && now_us.saturating_sub(last) < SEARCH_EVERY_US {
                return Ok(false);
            }
            self.takeover_searched_at.store(now_us, Ordering::Release);
            *slot = self.find_stale_writer(now_us).await?;
        }
        let Some(t) = slot.as_mut() else {
            return Ok(false);
        };
        let Some(&hour) = t.hours.front() else {
            let (writer, next, updated) = (t.writer.clone(), t.next, t.updated);
            self.finish_takeover(&writer, next, updated).await?;
            *slot = None;
            return Ok(true);
        };
        // Out of the takeover until its page is sealed: a step that fails,
        // or is given up (the upkeep is cancelled at shutdown), leaves the
        // cursor past ids nobody sealed, so the hour is read again instead.
        let mut cursor = t.cursor.take();
        let (ids, exhausted) = self.takeover_page(&mut cursor, &t.writer, hour).await?;
        self.seal_hour_ids(hour, &ids).await?;
        if exhausted {
            t.hours.pop_front();
        } else {
            t.cursor = cursor;
        }
        Ok(true)
    }

    /// The stale writer with the oldest record that may have hours to seal.
    async fn find_stale_writer(&self, now_us: u64) -> Result<Option<Takeover>, StoreError> {
        let before = i64::try_from(now_us.saturating_sub(STALE_US)).unwrap_or(0);
        let filter = doc! {
            "_id": { "$ne": self.conn.writer.id.as_str() },
            "sealed": { "$exists": true },
            "next": { "$lt": before },
            "$or": [
                { "updated": { "$exists": false } },
                { "updated": { "$lt": bson::DateTime::from_millis(before / 1000) } },
            ],
        };
        let read = async {
            let mut cursor = self.conn.wire.writers.find(filter).await?;
            let mut found: Option<(i64, String, i64, Option<bson::DateTime>)> = None;
            while let Some(d) = cursor.try_next().await? {
                let (Ok(writer), Some(sealed), Some(next)) = (
                    d.get_str("_id"),
                    d.get("sealed").and_then(as_i64),
                    d.get("next").and_then(as_i64),
                ) else {
                    continue;
                };
                let updated = d.get_datetime("updated").ok().copied();
                if sealed <= hour_of(next / 1_000_000)
                    && found.as_ref().is_none_or(|f| sealed < f.0)
                {
                    found = Some((sealed, writer.to_string(), next, updated));
                }
            }
            Ok::<_, mongodb::error::Error>(found)
        };
        let read = async { read.await.map_err(|e| classify(&e, false)) };
        let found = self
            .conn
            .wire
            .timed(
                Op::Read,
                128,
                self.conn.wire.timeout,
                "stale writers: ",
                read,
            )
            .await?;
        let Some((sealed, writer, next, updated)) = found else {
            return Ok(None);
        };
        let oldest = self.oldest_hour_kept(now_us);
        let hours: VecDeque<i64> = hours_to_seal(sealed, oldest, next / 1_000_000).collect();
        info!(
            writer = %writer,
            sealed,
            hours = hours.len(),
            "taking over the seals of a writer that stopped"
        );
        metrics::counter!("tally_mongodb_writer_takeovers_total").increment(1);
        Ok(Some(Takeover {
            writer,
            next,
            updated,
            hours,
            cursor: None,
        }))
    }

    /// The next page of ids of `hour` the taken-over writer wrote; whether
    /// the hour has no more.
    async fn takeover_page(
        &self,
        cursor: &mut Option<mongodb::Cursor<RawDocumentBuf>>,
        writer: &str,
        hour: i64,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let path = format!("w.{writer}");
        let page = async {
            let cursor = match cursor.as_mut() {
                Some(cursor) => cursor,
                None => cursor.insert(self.written_in(hour, &path, STEP_IDS).await?),
            };
            next_ids(cursor, STEP_IDS).await
        };
        let page = async { page.await.map_err(|e| classify(&e, false)) };
        self.conn
            .wire
            .timed(
                Op::Read,
                128,
                self.conn.wire.timeout,
                "a stopped writer's hours: ",
                page,
            )
            .await
    }

    /// Every hour is sealed: the writer's record moves past them, unless
    /// the writer came back meanwhile.
    async fn finish_takeover(
        &self,
        writer: &str,
        next: i64,
        updated: Option<bson::DateTime>,
    ) -> Result<(), StoreError> {
        let last_hour = hour_of(next / 1_000_000);
        let mut filter = doc! { "_id": writer, "next": next };
        match updated {
            Some(at) => filter.insert("updated", at),
            None => filter.insert("updated", doc! { "$exists": false }),
        };
        let update = doc! { "$max": { "sealed": last_hour + HOUR_S } };
        let write = async {
            self.conn
                .wire
                .writers
                .update_one(filter, update)
                .await
                .map_err(|e| classify(&e, true))
        };
        let r = self
            .conn
            .wire
            .timed(
                Op::Complete,
                128,
                self.conn.wire.timeout,
                "a stopped writer's record: ",
                write,
            )
            .await?;
        if r.matched_count == 0 {
            warn!(
                writer,
                "the writer came back during the takeover; it keeps its record"
            );
        } else {
            info!(
                writer,
                sealed = last_hour + HOUR_S,
                "took over a stopped writer's seals"
            );
        }
        Ok(())
    }
}
