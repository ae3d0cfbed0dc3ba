//! Flush-id reservations: the one small document per writer that lets a
//! restarted daemon continue above every watermark it wrote, even if the
//! clock went back (see "Flush ids" in the module documentation).

use std::sync::atomic::{AtomicU64, Ordering};

use bson::doc;
use tracing::{debug, warn};

use super::command::{to_raw, WriteCommand};
use super::errors::{as_i64, classify, parse_write_reply};
use super::stats::Op;
use super::Conn;
use crate::store::StoreError;

pub(super) use super::config::WRITERS_COLLECTION;

/// How far ahead of a flush id the store reserves ids: 60 s of the
/// wall-clock microseconds flush ids are made of, so about one reservation a
/// minute.
const ID_RESERVATION: u64 = 60_000_000;

/// Who this store writes as: its id, the watermark path it filters on,
/// and how far its flush ids are reserved.
pub(super) struct Writer {
    pub(super) id: String,
    /// `w.<writer>`.
    pub(super) watermark_path: String,
    /// Flush ids up to here are covered by the reservation in
    /// `tally_writers`.
    pub(super) reserved: AtomicU64,
}

impl Writer {
    pub(super) fn new(id: &str) -> Writer {
        Writer {
            id: id.to_string(),
            watermark_path: format!("w.{id}"),
            reserved: AtomicU64::new(0),
        }
    }
}

impl Conn {
    /// Records, ahead of the writes, that this writer may use flush ids up
    /// to `flush_id` + [`ID_RESERVATION`]; see the module documentation.
    pub(super) async fn reserve_ids(&self, flush_id: u64) -> Result<bool, StoreError> {
        if flush_id <= self.writer.reserved.load(Ordering::Acquire) {
            return Ok(false);
        }
        let next = flush_id.saturating_add(ID_RESERVATION).min(i64::MAX as u64);
        let update = doc! { "$max": { "next": next as i64 }, "$currentDate": { "updated": true } };
        self.update_writer(Op::ReserveIds, update).await?;
        self.writer.reserved.fetch_max(next, Ordering::AcqRel);
        debug!(writer = %self.writer.id, next, "reserved flush ids");
        Ok(true)
    }

    /// Records that flush `flush_id`, and every one before it, is complete
    /// in the store: the point the write-ahead log replays from after a
    /// crash. Kept apart from the reservation, which runs ahead of writes.
    pub(super) async fn record_complete(&self, flush_id: u64) -> Result<(), StoreError> {
        let update = doc! {
            "$max": { "complete": flush_id.min(i64::MAX as u64) as i64 },
            // The writer is alive: see `seal/takeover.rs`.
            "$currentDate": { "updated": true },
        };
        self.update_writer(Op::Complete, update).await
    }

    /// Upserts this writer's document with `update`, with the configured
    /// write concern.
    pub(super) async fn update_writer(
        &self,
        op: Op,
        update: bson::Document,
    ) -> Result<(), StoreError> {
        let mut cmd = WriteCommand::new("update", WRITERS_COLLECTION, "updates");
        let stmt = to_raw(&doc! {
            "q": { "_id": self.writer.id.as_str() },
            "u": update,
            "upsert": true,
        })?;
        cmd.push(&stmt);
        let cmd = cmd.finish(self.wire.write_concern.as_deref())?;
        let reply = self.wire.command(op, cmd, 0, true).await?;
        let reply = parse_write_reply(&reply, 1)?;
        if !reply.duplicates.is_empty() {
            // Two first upserts of the document raced; the next attempt
            // updates it.
            return Err(StoreError::Unavailable(
                format!(
                    "{} raced with another update of this writer's document; retrying",
                    op.as_str()
                )
                .into(),
            ));
        }
        Ok(())
    }

    /// The newest flush recorded complete, 0 when none is.
    /// [`crate::store::Store::last_flush_id`]: 0, with a warning, while
    /// the server cannot be reached.
    pub(super) async fn last_flush_id_at_start(&self) -> Result<u64, StoreError> {
        match self.last_flush_id_inner().await {
            Ok(id) => {
                self.writer.reserved.fetch_max(id, Ordering::AcqRel);
                Ok(id)
            }
            Err(e) if e.is_retryable() => {
                self.wire.count_error(Op::LastFlushId, &e);
                warn!(error = %e, "cannot read this writer's last flush id; continuing from the wall clock");
                Ok(0)
            }
            Err(e) => {
                self.wire.count_error(Op::LastFlushId, &e);
                Err(e)
            }
        }
    }

    pub(super) async fn complete_flush_id_inner(&self) -> Result<u64, StoreError> {
        Ok(self
            .writer_doc()
            .await?
            .and_then(|d| d.get("complete").and_then(as_i64))
            .map_or(0, |n| n.max(0) as u64))
    }

    /// The reservation on record, 0 when this writer has none.
    /// It is the daemon's first call at startup, so the first contact
    /// (feature probes and their warnings, indexes) happens here.
    pub(super) async fn last_flush_id_inner(&self) -> Result<u64, StoreError> {
        let Some(doc) = self.writer_doc().await? else {
            return Ok(0);
        };
        let next = doc.get("next");
        match next.and_then(as_i64) {
            Some(n) if n >= 0 => Ok(n as u64),
            // A first start records where its seals begin before it
            // reserves ids: killed in between, it left a document with no
            // reservation, and nothing written under one. A document that
            // records a complete flush had a reservation: without it, it
            // is corrupt.
            _ if next.is_none() && doc.get("complete").is_none() => Ok(0),
            _ => Err(StoreError::Corrupt {
                doc: format!(
                    "{}.{WRITERS_COLLECTION}/{}",
                    self.wire.db.name(),
                    self.writer.id
                ),
                reason: format!("`next` is {:?}; expected a flush id", doc.get("next")),
            }),
        }
    }

    /// This writer's document, if it has one.
    pub(super) async fn writer_doc(&self) -> Result<Option<bson::Document>, StoreError> {
        self.ready().await?;
        let find = async {
            let filter = doc! { "_id": self.writer.id.as_str() };
            self.wire
                .writers
                .find_one(filter)
                .await
                .map_err(|e| classify(&e, false))
        };
        self.wire
            .timed(Op::LastFlushId, 0, self.wire.timeout, "", find)
            .await
    }
}
