//! Day documents written about once per `mongodb.day_write_delay` instead
//! of with every flush.
//!
//! A flush touches, per active series, one hour document and one day
//! document. The hour document gets its statement at once; the day part
//! (the same minutes, at `values.H.M`, `values.H.total` and `total`) waits
//! in [`Pending`] and each flush writes the day documents of the series
//! that have waited longest: a share sized so every series comes round about
//! once per delay, plus any that waited longer. At a 1 s interval and the
//! default 60 s that is 1 + 1/60 statements per active series per flush
//! instead of 2, and each day statement carries a minute or two of slots.
//!
//! # Acknowledged means kept
//!
//! Minutes waiting here are in the hour documents but not yet in the day
//! documents, so the flushes that brought them are not complete: the store
//! reports as complete (and as durable, to the write-ahead log) only the
//! flushes before the oldest one still waiting. A crash replays the log
//! from there; the hour documents' watermarks skip what they hold.
//!
//! Replayed flushes write their day parts at once, each under its own id,
//! never merged with others: a day document may already hold some of them
//! (a merged write carries the newest id of what it merged), and only a
//! flush's own id tells whether it does. A flush is a replay when its id is
//! at or below what this writer had reserved before this process began (the
//! previous process' ids), or at or below one this process already applied.
//!
//! # Reads
//!
//! A day read merges this writer's waiting minutes (see `pending.rs` for
//! why that counts each minute once). Another daemon does not see them; the
//! query engine reads the recent hours from the hour documents instead (see
//! [`Store::day_tier_lag`](crate::store::Store::day_tier_lag)).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::model::{FlushBatch, SeriesId};
use crate::store::pending::{Fold, Pending, PendingView};

/// How a flush's day parts are written.
pub(super) enum DayPlan {
    /// Every day part under the flush's id, now (no delay configured).
    Direct,
    /// A replay: every day part under the flush's id, now, except those of
    /// series whose waiting minutes already hold this flush.
    Replay,
    /// These series' waiting minutes (with this flush's, where it has
    /// them) under their newest id; the rest of the flush waits.
    Deferred(Vec<Fold>),
}

/// The waiting day parts and what decides how a flush treats them.
pub(super) struct DayWrites {
    pending: Mutex<Pending>,
    /// Applies, idle drains and close take turns from planning through
    /// their bookkeeping, so a fold is never taken twice.
    pub(super) turn: tokio::sync::Mutex<()>,
    /// `mongodb.day_write_delay` in microseconds, the unit of flush ids.
    delay_us: u64,
    /// The newest flush this process applied.
    applied_through: AtomicU64,
    /// The reservation before this process' first write: every id the
    /// previous process may have used is at or below it.
    replay_through: AtomicU64,
    replay_known: AtomicBool,
}

impl DayWrites {
    pub(super) fn new(delay: Duration) -> DayWrites {
        DayWrites {
            pending: Mutex::new(Pending::default()),
            turn: tokio::sync::Mutex::new(()),
            delay_us: u64::try_from(delay.as_micros()).unwrap_or(u64::MAX),
            applied_through: AtomicU64::new(0),
            replay_through: AtomicU64::new(0),
            replay_known: AtomicBool::new(false),
        }
    }

    pub(super) fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us)
    }

    /// Whether the previous process' last reservation is known yet.
    pub(super) fn replay_bound_known(&self) -> bool {
        self.replay_known.load(Ordering::Acquire)
    }

    /// Records the reservation found before this process wrote anything.
    /// Only the first call counts: later ones would see this process' own
    /// reservations.
    pub(super) fn learn_replay_bound(&self, reserved: u64) {
        if !self.replay_known.swap(true, Ordering::AcqRel) {
            self.replay_through.store(reserved, Ordering::Release);
        }
    }

    /// How flush `id` writes its day parts. Takes the folds it writes out
    /// of the queue; [`DayWrites::landed`] or [`DayWrites::failed`] must
    /// follow.
    pub(super) fn plan(&self, id: u64) -> DayPlan {
        if self.delay_us == 0 {
            return DayPlan::Direct;
        }
        let applied = self.applied_through.load(Ordering::Acquire);
        if id <= applied || id <= self.replay_through.load(Ordering::Acquire) {
            return DayPlan::Replay;
        }
        let mut pending = self.pending.lock();
        // Flush ids count microseconds: this flush's share of the series
        // is the part of the delay that passed since the last one.
        let elapsed = if applied == 0 {
            self.delay_us
        } else {
            id - applied
        };
        let share = pending.share(elapsed, self.delay_us);
        let overdue = pending.queued_since_at_most(id.saturating_sub(self.delay_us));
        let n = share.max(overdue);
        DayPlan::Deferred(pending.start_fold(n))
    }

    /// Whether a replay of flush `id` must leave `series`' day part out:
    /// its waiting minutes hold it already.
    pub(super) fn waiting_holds(&self, series: &SeriesId, id: u64) -> bool {
        self.pending
            .lock()
            .since_of(series)
            .is_some_and(|since| since <= id)
    }

    /// Flush `batch` landed with `plan`: its folds leave, and (deferred)
    /// the day parts it did not write start or join their series' wait.
    pub(super) fn landed(&self, batch: &FlushBatch, plan: &DayPlan) {
        let id = batch.id.0;
        if let DayPlan::Deferred(folds) = plan {
            let mut pending = self.pending.lock();
            pending.end_fold(folds);
            let written: HashSet<&SeriesId> = folds.iter().map(|f| &*f.series).collect();
            for su in &batch.series {
                if !su.minutes.is_empty() && !written.contains(&*su.series) {
                    pending.add(&su.series, su.kind, id, su.minutes.iter().copied());
                }
            }
            metrics::gauge!("tally_store_pending_series", "store" => "mongodb")
                .set(pending.len() as f64);
            metrics::counter!("tally_store_folded_series_total", "store" => "mongodb")
                .increment(folds.len() as u64);
        }
        self.applied_through.fetch_max(id, Ordering::AcqRel);
    }

    /// The flush did not land: its folds wait again, at the front.
    pub(super) fn failed(&self, plan: &DayPlan) {
        if let DayPlan::Deferred(folds) = plan {
            self.pending.lock().abort_fold(folds);
        }
    }

    /// Every waiting series, for a drain (idle tick, shutdown).
    pub(super) fn take_all(&self) -> Vec<Fold> {
        let mut pending = self.pending.lock();
        let n = pending.len();
        pending.start_fold(n)
    }

    /// A drain landed.
    pub(super) fn drained(&self, folds: &[Fold]) {
        let mut pending = self.pending.lock();
        pending.end_fold(folds);
        metrics::gauge!("tally_store_pending_series", "store" => "mongodb")
            .set(pending.len() as f64);
        metrics::counter!("tally_store_folded_series_total", "store" => "mongodb")
            .increment(folds.len() as u64);
    }

    pub(super) fn drain_failed(&self, folds: &[Fold]) {
        self.pending.lock().abort_fold(folds);
    }

    /// The newest flush complete in both tiers, every one before it too,
    /// given that everything up to `applied` reached the hour documents.
    pub(super) fn complete(&self, applied: u64) -> u64 {
        match self.pending.lock().oldest() {
            Some(since) => applied.min(since - 1),
            None => applied,
        }
    }

    pub(super) fn applied_through(&self) -> u64 {
        self.applied_through.load(Ordering::Acquire)
    }

    /// What a day read of `series` must add to the stored documents.
    pub(super) fn view(&self, series: &SeriesId) -> Option<PendingView> {
        self.pending.lock().view(series)
    }
}
