//! Applying a flush: one upsert per touched hour document, and per day
//! document as `day_writes.rs` plans, filtered on this writer's watermark,
//! sent after the flush's ids are reserved and its new documents exist. Duplicate keys get one more round to tell races from
//! documents that already hold the flush (see "Exactly once" in the module
//! documentation).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bson::raw::{RawDocument, RawDocumentBuf};
use tracing::debug;

use super::command::{by_tier, Work};
use super::day_writes::DayPlan;
use super::ids::{check_series, doc_id};
use super::prealloc::PlannedDoc;
use super::statements::{day_ops, hour_ops, StatementCtx};
use super::stats::Op;
use super::MongoStore;
use crate::model::{DayDocUpdate, FlushBatch, SampleKind, SeriesId, Tier};
use crate::store::pending::Fold;
use crate::store::{ApplyStats, StoreError};

impl MongoStore {
    pub(super) async fn apply_inner(&self, batch: &FlushBatch) -> Result<ApplyStats, StoreError> {
        let _turn = self.days.turn.lock().await;
        if !self.days.replay_bound_known() {
            // Before this process writes: what the previous one reserved.
            let reserved = self.last_flush_id_inner().await?;
            self.days.learn_replay_bound(reserved);
        }
        let mut plan = self.days.plan(batch.id.0);
        let r = self.apply_planned(batch, &mut plan).await;
        match &r {
            Ok(_) => self.days.landed(batch, &plan),
            Err(_) => self.days.failed(&plan),
        }
        r
    }

    async fn apply_planned(
        &self,
        batch: &FlushBatch,
        plan: &mut DayPlan,
    ) -> Result<ApplyStats, StoreError> {
        let flush_id = batch.id.0;
        let ctx = StatementCtx {
            watermark_path: &self.watermark_path,
            flush_id: watermark_value(flush_id)?,
        };
        if let DayPlan::Deferred(folds) = plan {
            join_folds(folds, batch);
        }
        // Everything is built and checked before anything is sent, so a bad
        // batch changes nothing.
        let (mut docs, mut stmts) = self.plan_flush(batch, &ctx, plan)?;
        if let DayPlan::Deferred(folds) = plan {
            self.plan_folds(folds, &mut docs, &mut stmts)?;
        }
        if docs.is_empty() {
            return Ok(ApplyStats::default());
        }
        let mut work = Work::default();
        self.ready().await?;
        if self.reserve_ids(flush_id).await? {
            work.round_trips += 1;
        }
        self.send_planned(flush_id, &docs, &stmts, work).await
    }

    /// Writes the day documents of `folds` (a drain: idle tick, shutdown).
    pub(super) async fn write_folds(&self, folds: &[Fold]) -> Result<ApplyStats, StoreError> {
        let (mut docs, mut stmts) = (Vec::new(), Vec::new());
        self.plan_folds(folds, &mut docs, &mut stmts)?;
        if docs.is_empty() {
            return Ok(ApplyStats::default());
        }
        self.ready().await?;
        let newest = folds.iter().map(|f| f.watermark).max().unwrap_or(0);
        self.send_planned(newest, &docs, &stmts, Work::default())
            .await
    }

    /// Makes sure the documents exist, then sends their statements.
    async fn send_planned(
        &self,
        flush_id: u64,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        mut work: Work,
    ) -> Result<ApplyStats, StoreError> {
        let (created, _) = self.ensure_exist(&self.unknown(docs), &mut work).await?;
        self.counters
            .first_sighting_documents
            .fetch_add(created as u64, Ordering::Relaxed);
        let skipped = self.send_updates(flush_id, docs, stmts, &mut work).await?;
        // Documents whose update was refused as "already applied" exist.
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
            first_sighting = created,
            round_trips = stats.round_trips,
            "MongoDB flush applied"
        );
        Ok(stats)
    }

    /// The hour documents of a flush and, as `plan` says, its day documents,
    /// with their statements in the same order.
    fn plan_flush<'b>(
        &self,
        batch: &'b FlushBatch,
        ctx: &StatementCtx<'_>,
        plan: &DayPlan,
    ) -> Result<(Vec<PlannedDoc<'b>>, Vec<RawDocumentBuf>), StoreError> {
        let mut docs = Vec::with_capacity(batch.document_count());
        let mut stmts = Vec::with_capacity(batch.document_count());
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
            let days_now = match plan {
                DayPlan::Direct => true,
                DayPlan::Replay => !self.days.waiting_holds(series, batch.id.0),
                DayPlan::Deferred(_) => false,
            };
            if days_now {
                self.plan_days(series, su.kind, &su.days, ctx, &mut docs, &mut stmts)?;
            }
        }
        Ok((docs, stmts))
    }

    /// The day documents of `folds`, each under the newest flush it holds.
    fn plan_folds<'b>(
        &self,
        folds: &'b [Fold],
        docs: &mut Vec<PlannedDoc<'b>>,
        stmts: &mut Vec<RawDocumentBuf>,
    ) -> Result<(), StoreError> {
        for f in folds {
            check_series(&f.series)?;
            let ctx = StatementCtx {
                watermark_path: &self.watermark_path,
                flush_id: watermark_value(f.watermark)?,
            };
            let update = f.update();
            self.plan_days(&f.series, f.kind, &update.days, &ctx, docs, stmts)?;
        }
        Ok(())
    }

    fn plan_days<'b>(
        &self,
        series: &'b SeriesId,
        kind: SampleKind,
        days: &[DayDocUpdate],
        ctx: &StatementCtx<'_>,
        docs: &mut Vec<PlannedDoc<'b>>,
        stmts: &mut Vec<RawDocumentBuf>,
    ) -> Result<(), StoreError> {
        for d in days {
            let id = doc_id(series, Tier::Day, d.day_start)?;
            let ops = day_ops(series, d)?;
            stmts.push(ctx.statement(&id, series, kind, d.day_start, ops));
            docs.push(self.planned(Tier::Day, d.day_start, id, series));
        }
        Ok(())
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

/// Adds the batch's minutes of each folded series to its fold: they go to
/// the day document in the same statement instead of starting a new wait.
fn join_folds(folds: &mut [Fold], batch: &FlushBatch) {
    if folds.is_empty() {
        return;
    }
    let at: HashMap<&SeriesId, usize> = folds
        .iter()
        .enumerate()
        .map(|(i, f)| (&*f.series, i))
        .collect();
    let mut joined: Vec<(usize, usize)> = batch
        .series
        .iter()
        .enumerate()
        .filter(|(_, su)| !su.minutes.is_empty())
        .filter_map(|(j, su)| at.get(&*su.series).map(|&i| (i, j)))
        .collect();
    joined.sort_unstable();
    for (i, j) in joined {
        let su = &batch.series[j];
        folds[i].add(batch.id.0, su.kind, su.minutes.iter().copied());
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
