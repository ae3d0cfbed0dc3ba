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
use crate::store::{ApplyStats, Refusal, StoreError};

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
            watermark_path: &self.writer.watermark_path,
            flush_id: watermark_value(flush_id)?,
        };
        // Everything is built and checked before anything is sent, so a bad
        // batch changes nothing.
        let Plan {
            docs,
            stmts,
            days,
            mut refused,
        } = self.plan_flush(batch, &ctx);
        if docs.is_empty() {
            return Ok((!refused.is_empty()).then(|| {
                let stats = ApplyStats {
                    refused,
                    ..ApplyStats::default()
                };
                (stats, Vec::new())
            }));
        }
        self.ready().await?;
        sealer.start(batch).await?;
        let mut work = Work::default();
        if self.reserve_ids(flush_id).await? {
            work.round_trips += 1;
        }
        let mut stats = self.send_planned(flush_id, &docs, &stmts, work).await?;
        refused.append(&mut stats.refused);
        stats.refused = refused;
        let unknown_days = self
            .prealloc
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
        let (skipped, refused) = self.send_updates(flush_id, docs, stmts, &mut work).await?;
        // Every document updated, upserted or refused as "already applied"
        // exists now; one refused for good may not.
        if refused.is_empty() {
            self.prealloc.remember(docs);
        }
        let refused: Vec<Refusal> = refused
            .into_iter()
            .filter_map(|(i, error)| {
                let doc = docs.get(i)?;
                Some(Refusal {
                    series: doc.origin,
                    hour_start: Some(doc.start),
                    error,
                })
            })
            .collect();
        let stats = ApplyStats {
            documents_written: stmts.len() - skipped - refused.len(),
            documents_skipped: skipped,
            statements: work.statements,
            round_trips: work.round_trips,
            refused,
        };
        debug!(
            flush_id,
            documents = stmts.len(),
            written = stats.documents_written,
            skipped = stats.documents_skipped,
            refused = stats.refused.len(),
            round_trips = stats.round_trips,
            "MongoDB flush applied"
        );
        Ok(stats)
    }

    /// The hour documents of a flush with their statements, in the same
    /// order, and the day documents it reaches. A series or an hour whose
    /// statement cannot be built (a name the store cannot hold) is refused
    /// alone, before anything is sent.
    fn plan_flush<'b>(&self, batch: &'b FlushBatch, ctx: &StatementCtx<'_>) -> Plan<'b> {
        let mut plan = Plan {
            docs: Vec::with_capacity(batch.series.len()),
            stmts: Vec::with_capacity(batch.series.len()),
            days: Vec::new(),
            refused: Vec::new(),
        };
        for (origin, sm) in batch.series.iter().enumerate() {
            let series = &*sm.series;
            if let Err(e) = check_series(series) {
                plan.refuse(origin, None, &e);
                continue;
            }
            // Grouped by document here, one series at a time, and dropped
            // once its statements are built.
            let su = sm.update();
            for h in &su.hours {
                let built = doc_id(series, Tier::Hour, h.hour_start)
                    .and_then(|id| Ok((hour_ops(series, h)?, id)));
                match built {
                    Ok((ops, id)) => {
                        plan.stmts
                            .push(ctx.statement(&id, series, su.kind, h.hour_start, ops));
                        let mut doc = self.prealloc.planned(Tier::Hour, h.hour_start, id, series);
                        doc.origin = origin;
                        plan.docs.push(doc);
                    }
                    Err(e) => plan.refuse(origin, Some(h.hour_start), &e),
                }
            }
            for d in &su.days {
                if let Ok(id) = doc_id(series, Tier::Day, d.day_start) {
                    plan.days
                        .push(self.prealloc.planned(Tier::Day, d.day_start, id, series));
                }
            }
        }
        plan
    }

    /// First round: every statement. Second round: the duplicates of the
    /// first, in case they were races. Returns how many statements were
    /// refused in both as duplicates (documents that already held this
    /// flush), and the statements refused for good, with the error.
    async fn send_updates(
        &self,
        flush_id: u64,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        work: &mut Work,
    ) -> Result<(usize, Vec<(usize, String)>), StoreError> {
        let mut pending: Vec<usize> = (0..stmts.len()).collect();
        let mut upserted = 0usize;
        let mut refused = Vec::new();
        for round in 0..2 {
            let round_out = self.update_round(docs, stmts, &pending, work).await?;
            let (duplicates, created) = (round_out.duplicates, round_out.upserted);
            refused.extend(round_out.refused);
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
            self.wire
                .counters
                .fallback_upserts
                .fetch_add(upserted as u64, Ordering::Relaxed);
            metrics::counter!("tally_mongodb_fallback_upserts_total").increment(upserted as u64);
            debug!(
                flush_id,
                documents = upserted,
                "documents created by the fallback upsert"
            );
        }
        Ok((pending.len(), refused))
    }

    /// Sends the statements `pending` (indexes into `stmts`): which were
    /// refused, and how many documents the upsert created.
    async fn update_round(
        &self,
        docs: &[PlannedDoc<'_>],
        stmts: &[RawDocumentBuf],
        pending: &[usize],
        work: &mut Work,
    ) -> Result<Round, StoreError> {
        let groups = by_tier(pending, |i| docs[i].tier);
        let send: Vec<(&str, Vec<&RawDocument>)> = groups
            .iter()
            .map(|(tier, idx)| {
                let stmts = idx.iter().map(|&i| stmts[i].as_ref()).collect();
                (self.wire.collection(*tier).name(), stmts)
            })
            .collect();
        let replies = self.wire.write_isolating(Op::Update, &send, work).await?;
        let mut round = Round::default();
        for (group, reply) in replies {
            round.upserted += reply.upserted;
            if let Some((_, idx)) = groups.get(group) {
                round
                    .duplicates
                    .extend(reply.duplicates.iter().filter_map(|&i| idx.get(i)));
                round.refused.extend(
                    reply
                        .refused
                        .into_iter()
                        .filter_map(|(i, why)| Some((*idx.get(i)?, why))),
                );
            }
        }
        Ok(round)
    }
}

/// A flush made ready to send: its hour documents and their statements in
/// the same order, the day documents it reaches, and what could not be
/// planned.
struct Plan<'b> {
    docs: Vec<PlannedDoc<'b>>,
    stmts: Vec<RawDocumentBuf>,
    days: Vec<PlannedDoc<'b>>,
    refused: Vec<Refusal>,
}

impl Plan<'_> {
    fn refuse(&mut self, series: usize, hour_start: Option<i64>, e: &StoreError) {
        self.refused.push(Refusal {
            series,
            hour_start,
            error: e.to_string(),
        });
    }
}

/// What one round of update commands did, statements by their index into
/// the flush's statements.
#[derive(Default)]
struct Round {
    duplicates: Vec<usize>,
    refused: Vec<(usize, String)>,
    upserted: usize,
}

/// A flush id as the watermark value documents keep.
fn watermark_value(flush_id: u64) -> Result<i64, StoreError> {
    if flush_id == 0 {
        return Err(StoreError::Invalid(
            "flush id 0 is reserved (it is the watermark of a document no flush has touched)"
                .into(),
        ));
    }
    i64::try_from(flush_id).map_err(|_| {
        StoreError::Invalid(format!("flush id {flush_id} does not fit an Int64").into())
    })
}
