//! Folding a run in two at the hour.
//!
//! A series' run of pending minutes is folded once its hour has closed,
//! a minute or more after the close (`checkpoint.rs`). By then the run
//! also holds the first minutes of the new hour. Folding it whole wrote
//! those into a new hour document and a new minute block, which the next
//! close wrote again in full: about 6 KB per series per hour for nothing,
//! a third of what the folds wrote. A split fold writes only the minutes
//! before the new hour; the rest stay pending as a run of their own.
//!
//! # Watermarks
//!
//! A document's watermark says which flushes it holds, and reads, replays
//! and the loading of the log all go by it (`pending.rs`, `checkpoint.rs`,
//! `flush_log.rs`). An hour document holds one hour, so the fold writes the
//! closed hour's document with the run's watermark `W` as a whole fold
//! does. A day document holds both hours when the new one is on the same
//! day, and the minutes of the new hour are not in it: with `W` it would
//! claim them. So it takes `S = F1 - 1` instead, where `F1` (`entered`) is
//! the first flush that brought a minute of the new hour (at midnight the
//! new hour has a day document of its own, and the closed day's takes `W`):
//! - every flush that touched the minutes staying pending is above `S`, so
//!   a read, a replayed flush and a loaded log entry all count those
//!   minutes as not in the day document;
//! - the minutes before the split are in the closed hour's document with
//!   `W`, which a replay and the log's loading consult too (they take the
//!   higher of the two);
//! - a read that took its snapshot of the run before the fold and reads the
//!   documents after it recognises the day document by `S` exactly and
//!   counts the minutes before the split as held (`PendingView::holds`).
//!   No other write gives a day document that watermark: earlier folds of
//!   the series wrote watermarks below the run's `since`, and the split
//!   needs `F1 > since`. Runs loaded from the log do not know `F1` and are
//!   not split until they enter another hour, with a flush above every
//!   watermark the file held when it opened (`floor`).
//!
//! What stays pending is a run since `F1`: the logs keep every checkpoint
//! from there, which holds its minutes (none is older than `F1`), and the
//! fold queue takes it in at its place.
//!
//! # What the log may still hold
//!
//! Checkpoints logged before the split hold minutes of the closed hour
//! too, and are kept while the run since `F1` is pending: until the next
//! close's folds, or longer if the daemon is down meanwhile. Loading them
//! after a crash, and replaying flushes of the closed hour, leave those
//! minutes out by the closed hour's document, whose watermark is `W`; the
//! day document's `S` is below them. So the retention sweep keeps every
//! hour document from an hour before the first minute of any pending run
//! (`retention.rs`), whatever `retention.hour` says; once the run is folded
//! its day document's watermark is at least `W`, and tells alone. Splits are
//! made only of runs whose minutes lie in the closed hour and the new one (a
//! late minute of an older hour folds the run whole).
//!
//! A fold whose commit reported an error may have landed: the reopen that
//! follows looks, and ends it if so (`reopen.rs`). Should a landed split be
//! written again all the same, unchanged, it finds its own `S` in the day
//! document and its writes are skipped as already made (`fold.rs`).

use std::collections::VecDeque;

use crate::model::{EpochMinute, Tier};

/// Minutes in an hour.
const HOUR_MINUTES: EpochMinute = 60;

/// Where a fold splits a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Split {
    /// The first minute that stays pending: the start of the run's last
    /// hour.
    pub(crate) at: EpochMinute,
    /// The flush that began what stays pending (`F1` above).
    pub(crate) since: u64,
}

impl Split {
    /// The watermark the day document of the minutes before the split
    /// takes, for a run at `watermark`: one below the flush that began what
    /// stays pending, unless that lies on the next day, which this day's
    /// document then never holds.
    pub(crate) fn day_watermark(self, watermark: u64) -> u64 {
        if Tier::Day.period_start(self.at - 1) == Tier::Day.period_start(self.at) {
            self.since - 1
        } else {
            watermark
        }
    }
}

/// The first minute of `m`'s hour.
pub(super) fn hour_of(m: EpochMinute) -> EpochMinute {
    m - m.rem_euclid(HOUR_MINUTES)
}

/// Where a fold would split a run since `since` that entered `last_hour`,
/// the hour of its last minute, with flush `entered`, and the watermark its
/// day documents would take; None if it would fold the run whole.
pub(super) fn mark(
    since: u64,
    entered: u64,
    floor: u64,
    last_hour: EpochMinute,
) -> Option<(EpochMinute, u64)> {
    (entered > since && entered - 1 > floor).then(|| (last_hour, entered - 1))
}

/// How a fold at `now` (the first minute of the hour now) splits a run
/// marked at `at` (see [`mark`]) whose first minute is `first`: only when
/// the run reaches the hour now, has minutes before `at`, and none before
/// the hour ahead of `at`.
pub(super) fn at(
    at: EpochMinute,
    entered: u64,
    first: EpochMinute,
    now: EpochMinute,
) -> Option<Split> {
    (at >= now && first < at && first >= at - HOUR_MINUTES).then_some(Split { at, since: entered })
}

/// Merges `back` (`(since, position)` of runs a split fold left) into the
/// fold queue, which stays ascending by `since`. Only the queue's tail
/// above the lowest of them moves: at a close that is the runs split
/// earlier in the same spread.
pub(super) fn requeue(queue: &mut VecDeque<(u64, u32)>, mut back: Vec<(u64, u32)>) {
    back.sort_unstable();
    let Some(&(lowest, _)) = back.first() else {
        return;
    };
    let cut = queue.partition_point(|&(since, _)| since <= lowest);
    let tail: Vec<_> = queue.drain(cut..).collect();
    let (mut a, mut b) = (tail.into_iter().peekable(), back.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 <= y.0 => a.next(),
            (Some(_), Some(_)) | (None, Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, None) => break,
        };
        queue.extend(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_splits_only_past_its_since_and_the_floor() {
        assert_eq!(mark(10, 15, 0, 600), Some((600, 14)));
        assert_eq!(mark(10, 10, 0, 600), None, "entered with its first flush");
        assert_eq!(mark(10, 15, 14, 600), None, "at the floor");
        assert_eq!(mark(10, 0, 0, 600), None, "not known");
    }

    #[test]
    fn a_fold_splits_a_run_of_the_closed_hour_and_the_new_one() {
        let split = Some(Split { at: 600, since: 15 });
        assert_eq!(at(600, 15, 545, 600), split);
        assert_eq!(at(600, 15, 540, 600), split);
        assert_eq!(at(600, 15, 539, 600), None, "a minute of an older hour");
        assert_eq!(at(600, 15, 600, 600), None, "nothing before the split");
        assert_eq!(at(540, 15, 545, 600), None, "the run ended last hour");
        assert_eq!(at(660, 15, 610, 600), Some(Split { at: 660, since: 15 }));
    }

    #[test]
    fn the_day_takes_the_watermark_below_the_new_hour_unless_that_is_a_new_day() {
        let eleven = 1_773_486_000 / 60; // 2026-03-14 11:00 UTC
        let midnight = 1_773_532_800 / 60; // 2026-03-15 00:00 UTC
        assert_eq!(
            Split {
                at: eleven,
                since: 15
            }
            .day_watermark(20),
            14
        );
        assert_eq!(
            Split {
                at: midnight,
                since: 15
            }
            .day_watermark(20),
            20
        );
    }

    #[test]
    fn requeued_runs_take_their_place_and_the_queue_stays_ascending() {
        let mut queue: VecDeque<(u64, u32)> = [(1, 0), (5, 1), (9, 2), (12, 3)].into();
        requeue(&mut queue, vec![(10, 7), (4, 8), (9, 9)]);
        let got: Vec<_> = queue.iter().copied().collect();
        assert_eq!(
            got,
            [(1, 0), (4, 8), (5, 1), (9, 2), (9, 9), (10, 7), (12, 3)]
        );
        requeue(&mut queue, Vec::new());
        assert_eq!(queue.len(), 7);
        let mut empty = VecDeque::new();
        requeue(&mut empty, vec![(3, 1), (2, 0)]);
        assert_eq!(empty, VecDeque::from([(2, 0), (3, 1)]));
    }
}
