//! Applying a flush: one upsert per touched hour document, filtered on
//! this writer's watermark, sent after the flush's ids are reserved. That
//! is all a flush waits for: a document it finds unknown is upserted
//! (the fallback), and its day documents are handed to the upkeep to make
//! exist before their seal (`prealloc.rs`); day documents are sealed from
//! the hour documents later (`seal/`). Duplicate keys get one more round to
//! tell races from documents that already hold the flush (see "Exactly
//! once" in the module documentation).

use std::sync::atomic::Ordering;

use bson::raw::{RawDocument, RawDocumentBuf};
use tracing::debug;

use super::command::{by_tier, Work};
use super::ids::{check_series, doc_id};
use super::prealloc::PlannedDoc;
use super::seal::Sealer;
use super::statements::{hour_ops, StatementCtx};
use super::stats::Op;
use super::Conn;
use crate::model::{DocKey, FlushBatch, Tier};
use crate::store::{ApplyStats, StoreError};

impl Conn {
    /// Sends a flush's statements. None when it has none; else what it
    /// did, and the day documents it reached that are not known to exist.
    pub(super) async fn apply_inner(
        &self,
        batch: &FlushBatch,
        sealer: &Sealer,
    ) -> Result<Option<(ApplyStats, Vec<DocKey>)>, StoreError> {
        let flush_id = batch.id.0;
        let ctx = StatementCtx {
            watermark_path: &self.watermark_path,
            flush_id: watermark_value(flush_id)?,
        };
        // Everything is built and checked before anything is sent, so a bad
        // batch changes nothing.
        let (docs, stmts, days) = self.plan_flush(batch, &ctx)?;
        if docs.is_empty() {
            return Ok(None);
        }
        self.ready().await?;
        sealer.start(batch).await?;
        let mut work = Work::default();
        if self.reserve_ids(flush_id).await? {
            work.round_trips += 1;
        }
        let stats = self.send_planned(flush_id, &docs, &stmts, work).await?;
        let unknown_days = self
            .unknown(&days)
            .into_iter()
            .map(|d| DocKey {
                series: d.series.clone(),
                tier: d.tier,
                period_start: d.start,
            })
            .collect();
        Ok(Some((stats, unknown_days)))
    }

    /// Sends the statements; the documents exist afterwards.
    async fn send_planned(
        &self,
        flush_id: u64,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        mut work: Work,
    ) -> Result<ApplyStats, StoreError> {
        let skipped = self.send_updates(flush_id, docs, stmts, &mut work).await?;
        // Every document updated, upserted or refused as "already applied"
        // exists now.
        self.remember(docs);
        let stats = ApplyStats {
            documents_written: stmts.len() - skipped,
            documents_skipped: skipped,
            statements: work.statements,
            round_trips: work.round_trips,
        };
        debug!(
            flush_id,
            documents = stmts.len(),
            written = stats.documents_written,
            skipped = stats.documents_skipped,
            round_trips = stats.round_trips,
            "MongoDB flush applied"
        );
        Ok(stats)
    }

    /// The hour documents of a flush with their statements, in the same
    /// order, and the day documents it reaches.
    #[allow(clippy::type_complexity)]
    fn plan_flush<'b>(
        &self,
        batch: &'b FlushBatch,
        ctx: &StatementCtx<'_>,
    ) -> Result<
        (
            Vec<PlannedDoc<'b>>,
            Vec<RawDocumentBuf>,
            Vec<PlannedDoc<'b>>,
        ),
        StoreError,
    > {
        let mut docs = Vec::with_capacity(batch.series.len());
        let mut stmts = Vec::with_capacity(batch.series.len());
        let mut days = Vec::new();
        for sm in &batch.series {
            let series = &*sm.series;
            check_series(series)?;
            // Grouped by document here, one series at a time, and dropped
            // once its statements are built.
            let su = sm.update();
            for h in &su.hours {
                let id = doc_id(series, Tier::Hour, h.hour_start)?;
                let ops = hour_ops(series, h)?;
                stmts.push(ctx.statement(&id, series, su.kind, h.hour_start, ops));
                docs.push(self.planned(Tier::Hour, h.hour_start, id, series));
            }
            for d in &su.days {
                let id = doc_id(series, Tier::Day, d.day_start)?;
                days.push(self.planned(Tier::Day, d.day_start, id, series));
            }
        }
        Ok((docs, stmts, days))
    }

    /// First round: every statement. Second round: the duplicates of the
    /// first, in case they were races. Returns how many statements were
    /// refused in both: documents that already held this flush.
    async fn send_updates(
        &self,
        flush_id: u64,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        work: &mut Work,
    ) -> Result<usize, StoreError> {
        let mut pending: Vec<usize> = (0..stmts.len()).collect();
        let mut upserted = 0usize;
        for round in 0..2 {
            let (duplicates, created) = self.update_round(docs, stmts, &pending, work).await?;
            upserted += created;
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
        Ok(pending.len())
    }

    /// Sends the statements `pending` (indexes into `stmts`). Returns the
    /// ones refused with a duplicate key, and how many documents the upsert
    /// created.
    async fn update_round(
        &self,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        pending: &[usize],
        work: &mut Work,
    ) -> Result<(Vec<usize>, usize), StoreError> {
        let groups = by_tier(pending, |i| docs[i].tier);
        let send: Vec<(&str, Vec<&RawDocument>)> = groups
            .iter()
            .map(|(tier, idx)| {
                let stmts = idx.iter().map(|&i| stmts[i].as_ref()).collect();
                (self.collection(*tier).name(), stmts)
            })
            .collect();
        let replies = self.write_all(Op::Update, &send, work).await?;
        let mut duplicates = Vec::new();
        let mut upserted = 0;
        for (group, reply) in replies {
            upserted += reply.upserted;
            if let Some((_, idx)) = groups.get(group) {
                duplicates.extend(reply.duplicates.iter().filter_map(|&i| idx.get(i)));
            }
        }
        Ok((duplicates, upserted))
    }
}

/// A flush id as the watermark value documents keep.
fn watermark_value(flush_id: u64) -> Result<i64, StoreError> {
    if flush_id == 0 {
        return Err(StoreError::Invalid(
            "flush id 0 is reserved (it is the watermark of a document no flush has touched)"
                .into(),
        ));
    }
    i64::try_from(flush_id)
        .map_err(|_| StoreError::Invalid(format!("flush id {flush_id} does not fit an Int64")))
}
