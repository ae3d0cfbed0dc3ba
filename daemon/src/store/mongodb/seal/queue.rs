//! Which hours' day blocks are due to be sealed, and what a crash would
//! leave unsealed.
//!
//! Flushes write hour documents only. A day document's block of an hour
//! (`values.H.*`, `values.H.total`) and the day's running slot (`total`)
//! are *sealed* from the hour document once the hour has closed: made
//! equal to it, so a seal can run twice, or from two daemons, without
//! counting anything twice (`write.rs`). Here is the bookkeeping:
//!
//! - **dirty**: per hour, the series this process wrote in it since that
//!   hour was last sealed;
//! - **horizon**: every hour before it is sealed or queued. A flush whose
//!   minutes lie before it is *late* (a late sample, or a replay): those
//!   series are sealed again first, and the flush is not complete until
//!   they are;
//! - **queue**: the passes, one per closed hour, worked off a share at a
//!   time so that sealing a million series is spread over
//!   `mongodb.seal_spread`;
//! - **recorded**: the oldest hour that may hold unsealed writes (the
//!   horizon, or an older hour still dirty or queued), as the writer's
//!   document in `tally_writers` holds it (`sealed`). After a crash every
//!   hour from there on is sealed again from the hour documents the server
//!   has for this writer, read page by page, so the write-ahead log need
//!   not keep anything for the day documents.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use crate::model::{FlushBatch, SeriesId, Tier, HOUR_S};

/// How long after an hour ends its pass starts: minutes of the hour still
/// in flight (agents a little behind, the flush after the boundary) land
/// first, so they need no second seal.
pub(super) const SEAL_GRACE_S: i64 = 60;

/// The fewest series a share of a pass takes, so small fleets seal an hour
/// in one go.
const MIN_SHARE: usize = 256;

/// The most a late pass seals per call: late minutes are rare, but a replay
/// after a crash can bring many.
const LATE_SHARE: usize = 4096;

/// The most a share of a pass takes, however late the pass is (after an
/// outage, say): the rest follows with the next calls.
const MAX_SHARE: usize = 20_000;

/// What a pass seals.
#[derive(Debug)]
pub(super) enum Items {
    /// Series this process wrote in the hour.
    Series(Vec<Arc<SeriesId>>),
    /// Hour-document ids loaded from the server, for hours an earlier
    /// process may have written.
    Ids(Vec<String>),
    /// A share that loads the next page of its pass' ids from the server.
    Load,
}

impl Items {
    fn len(&self) -> usize {
        match self {
            Items::Series(v) => v.len(),
            Items::Ids(v) => v.len(),
            Items::Load => 0,
        }
    }
}

/// One hour's seals.
#[derive(Debug)]
pub(super) struct Pass {
    pub(super) hour: i64,
    pub(super) items: Items,
    /// Late passes: the oldest flush whose minutes they wait to seal. The
    /// store is complete only before it.
    pub(super) late_since: Option<u64>,
    /// When the pass should be done (clock µs); 0 until its first share.
    deadline_us: u64,
    /// Its ids are still being loaded from the server, page by page; its
    /// shares wait until they all are.
    loading: bool,
}

/// A share of a pass, taken out of the queue; [`Seals::done`] or
/// [`Seals::failed`] must follow.
#[derive(Debug)]
pub(super) struct Share {
    pub(super) hour: i64,
    pub(super) items: Items,
    pub(super) late_since: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct Seals {
    dirty: BTreeMap<i64, HashSet<Arc<SeriesId>>>,
    /// Hours whose writes an earlier process may have made: their passes
    /// load ids from the server.
    recover: BTreeSet<i64>,
    horizon: Option<i64>,
    recorded: Option<i64>,
    queue: VecDeque<Pass>,
    /// Shares taken and not yet done or failed: they hold the record back.
    taken: Vec<(i64, Option<u64>)>,
    /// The clock (µs) of the last share.
    last_share_us: u64,
    /// The writer's record was read and there is none: an idle tick need
    /// not read it again (a first flush starts sealing).
    no_record: bool,
}

/// The start of the hour `t` (Unix seconds) falls in.
pub(super) fn hour_of(t: i64) -> i64 {
    t.div_euclid(HOUR_S) * HOUR_S
}

/// The hours from the one `sealed` falls in, but none before `oldest_s`,
/// through the one `last_s` falls in: what a writer's record leaves to seal.
pub(super) fn hours_to_seal(sealed: i64, oldest_s: i64, last_s: i64) -> impl Iterator<Item = i64> {
    let from = hour_of(sealed).max(hour_of(oldest_s));
    (0..)
        .map(move |i| from + i * HOUR_S)
        .take_while(move |&h| h <= hour_of(last_s))
}

impl Seals {
    /// Whether the horizon is known: from the record, or from a first
    /// flush.
    pub(super) fn started(&self) -> bool {
        self.horizon.is_some()
    }

    /// Whether an idle tick should read the writer's record: not started,
    /// and not known to have none.
    pub(super) fn should_read_record(&self) -> bool {
        self.horizon.is_none() && !self.no_record
    }

    pub(super) fn found_no_record(&mut self) {
        self.no_record = true;
    }

    /// Starts from the writer's record: every hour from `sealed` up to the
    /// hour of `now_s` may hold an earlier process' unsealed writes; their
    /// passes load the ids from the server. Hours before `oldest_s` are past
    /// the hour documents' retention.
    pub(super) fn start_from_record(&mut self, sealed: i64, now_s: i64, oldest_s: i64) {
        self.recover.extend(hours_to_seal(sealed, oldest_s, now_s));
        self.horizon = Some(hour_of(sealed));
        self.recorded = Some(sealed);
    }

    /// Where a start without a record begins: the oldest hour of the first
    /// batch. The caller records it, then calls [`Seals::start_at`], before
    /// the batch is written.
    pub(super) fn fresh_start(batch: &FlushBatch) -> Option<i64> {
        batch
            .series
            .iter()
            .filter_map(|s| s.minutes.first())
            .map(|&(m, _)| Tier::Hour.period_start(m))
            .min()
    }

    /// Starts at `from`, which the writer's record now holds.
    pub(super) fn start_at(&mut self, from: i64) {
        self.horizon = Some(from);
        self.recorded = Some(from);
    }

    /// Flush `batch` (id `id`) landed in the hour documents.
    pub(super) fn wrote(&mut self, batch: &FlushBatch, id: u64) {
        let horizon = self.horizon.unwrap_or(i64::MIN);
        let mut late: BTreeMap<i64, Vec<Arc<SeriesId>>> = BTreeMap::new();
        for sm in &batch.series {
            let mut last = None;
            for &(m, _) in &sm.minutes {
                let h = Tier::Hour.period_start(m);
                if last == Some(h) {
                    continue;
                }
                last = Some(h);
                if h < horizon {
                    late.entry(h).or_default().push(sm.series.clone());
                } else {
                    self.dirty.entry(h).or_default().insert(sm.series.clone());
                }
            }
        }
        // Late passes go first: they hold the write-ahead log. One per hour,
        // each series once, however many flushes bring late minutes.
        for (hour, series) in late.into_iter().rev() {
            let queued = self
                .queue
                .iter_mut()
                .find(|p| p.hour == hour && p.late_since.is_some());
            if let Some(Pass {
                items: Items::Series(v),
                ..
            }) = queued
            {
                let mut all: HashSet<Arc<SeriesId>> = v.drain(..).collect();
                all.extend(series);
                v.extend(all);
                continue;
            }
            self.queue.push_front(Pass {
                hour,
                items: Items::Series(series),
                late_since: Some(id),
                deadline_us: 0,
                loading: false,
            });
        }
    }

    /// Queues every hour that closed `SEAL_GRACE_S` before `now_s` (every
    /// hour at all when `all`, for a shutdown), and moves the horizon past
    /// them.
    pub(super) fn close_hours(&mut self, now_s: i64, all: bool) {
        let Some(horizon) = self.horizon else { return };
        let due = |h: i64| all || h + HOUR_S + SEAL_GRACE_S <= now_s;
        let mut hours: BTreeSet<i64> = self.dirty.keys().copied().filter(|&h| due(h)).collect();
        hours.extend(self.recover.iter().copied().filter(|&h| due(h)));
        for h in hours {
            let loading = self.recover.remove(&h);
            let items = match self.dirty.remove(&h) {
                _ if loading => Items::Ids(Vec::new()),
                Some(set) => Items::Series(set.into_iter().collect()),
                None => continue,
            };
            self.queue.push_back(Pass {
                hour: h,
                items,
                late_since: None,
                deadline_us: 0,
                loading,
            });
        }
        // A shutdown seals open hours too, but they stay ahead of the
        // horizon: writes may follow the next start.
        let closed = hour_of(now_s - SEAL_GRACE_S) - HOUR_S;
        if closed + HOUR_S > horizon {
            self.horizon = Some(closed + HOUR_S);
        }
    }

    /// The next share to seal at clock `now_us`, spread so that a pass ends
    /// about `spread_us` after it starts; everything at once when `all`.
    pub(super) fn next_share(&mut self, now_us: u64, spread_us: u64, all: bool) -> Option<Share> {
        let pass = self.queue.front_mut()?;
        if pass.loading {
            self.taken.push((pass.hour, None));
            return Some(Share {
                hour: pass.hour,
                items: Items::Load,
                late_since: None,
            });
        }
        let n = if all {
            usize::MAX
        } else if pass.late_since.is_some() {
            LATE_SHARE
        } else {
            if pass.deadline_us == 0 {
                pass.deadline_us = now_us.saturating_add(spread_us);
                self.last_share_us = now_us;
            }
            let elapsed = now_us.saturating_sub(self.last_share_us).max(1);
            let left = pass.deadline_us.saturating_sub(self.last_share_us).max(1);
            let remaining = pass.items.len() as u128;
            let n = (remaining * u128::from(elapsed)).div_ceil(u128::from(left));
            usize::try_from(n)
                .unwrap_or(usize::MAX)
                .clamp(MIN_SHARE, MAX_SHARE)
        };
        self.last_share_us = now_us;
        let items = match &mut pass.items {
            Items::Load => Items::Load,
            Items::Series(v) => Items::Series(v.split_off(v.len().saturating_sub(n))),
            Items::Ids(v) => Items::Ids(v.split_off(v.len().saturating_sub(n))),
        };
        let share = Share {
            hour: pass.hour,
            items,
            late_since: pass.late_since,
        };
        if pass.items.len() == 0 {
            self.queue.pop_front();
        }
        self.taken.push((share.hour, share.late_since));
        Some(share)
    }

    /// A page of a loading pass' ids (the first of a new read of them when
    /// `restarted`); `done` when it was the last.
    pub(super) fn loaded(
        &mut self,
        share: &Share,
        mut ids: Vec<String>,
        restarted: bool,
        done: bool,
    ) {
        self.untake(share);
        // Not necessarily the front: late passes go ahead of a pass while
        // its page is read, and the reader is past that page by now.
        let Some(at) = self
            .queue
            .iter()
            .position(|p| p.hour == share.hour && p.loading)
        else {
            return;
        };
        let pass = &mut self.queue[at];
        match &mut pass.items {
            Items::Ids(v) if !restarted => v.append(&mut ids),
            slot => *slot = Items::Ids(ids),
        }
        if done {
            pass.loading = false;
            if pass.items.len() == 0 {
                self.queue.remove(at);
            }
        }
    }

    fn untake(&mut self, share: &Share) {
        if let Some(i) = self
            .taken
            .iter()
            .position(|&t| t == (share.hour, share.late_since))
        {
            self.taken.swap_remove(i);
        }
    }

    /// A share was sealed.
    pub(super) fn done(&mut self, share: &Share) {
        self.untake(share);
    }

    /// A share could not be sealed: it waits again, at the front.
    pub(super) fn failed(&mut self, share: Share) {
        self.untake(&share);
        if matches!(share.items, Items::Load) {
            // The pass keeps loading: its next load reads the ids again.
            return;
        }
        let items = share.items;
        match self.queue.front_mut() {
            Some(pass) if pass.hour == share.hour && pass.late_since == share.late_since => {
                match (&mut pass.items, items) {
                    (Items::Series(v), Items::Series(mut more)) => v.append(&mut more),
                    (Items::Ids(v), Items::Ids(mut more)) => v.append(&mut more),
                    (slot, other) => {
                        let rest = std::mem::replace(slot, other);
                        self.queue.push_front(Pass {
                            hour: share.hour,
                            items: rest,
                            late_since: share.late_since,
                            deadline_us: 0,
                            loading: false,
                        });
                    }
                }
            }
            _ => self.queue.push_front(Pass {
                hour: share.hour,
                items,
                late_since: share.late_since,
                deadline_us: 0,
                loading: false,
            }),
        }
    }

    /// The oldest hour that may hold unsealed writes: what the writer's
    /// record may say. None before the horizon is known.
    pub(super) fn unsealed_from(&self) -> Option<i64> {
        let horizon = self.horizon?;
        let queued = self
            .queue
            .iter()
            .filter(|p| p.late_since.is_none())
            .map(|p| p.hour);
        let taken = self.taken.iter().filter(|t| t.1.is_none()).map(|t| t.0);
        let open = self
            .dirty
            .keys()
            .copied()
            .chain(self.recover.iter().copied());
        Some(queued.chain(taken).chain(open).fold(horizon, i64::min))
    }

    /// The record to write, if it differs from the one on the server.
    pub(super) fn record_due(&self) -> Option<i64> {
        let from = self.unsealed_from()?;
        (self.recorded != Some(from)).then_some(from)
    }

    /// The record as the server holds it, read back.
    pub(super) fn server_record(&mut self, sealed: i64) {
        if self.recorded.is_some() {
            self.recorded = Some(sealed);
        }
    }

    pub(super) fn recorded(&mut self, sealed: i64) {
        self.recorded = Some(sealed);
    }

    /// The newest flush complete in both tiers, given `applied`: before the
    /// oldest flush whose late minutes wait for their seal.
    pub(super) fn complete(&self, applied: u64) -> u64 {
        let queued = self.queue.iter().filter_map(|p| p.late_since);
        let taken = self.taken.iter().filter_map(|t| t.1);
        match queued.chain(taken).min() {
            Some(since) => applied.min(since - 1),
            None => applied,
        }
    }

    /// Series waiting in dirty hours and passes, for the gauge.
    pub(super) fn waiting(&self) -> usize {
        self.dirty.values().map(HashSet::len).sum::<usize>()
            + self.queue.iter().map(|p| p.items.len()).sum::<usize>()
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
