//! A series' catalog mark: what the store was last asked to record of it,
//! kept by the aggregator beside the series itself. A flush drains every
//! series it holds; checking the mark there costs nothing more, where
//! finding each series again in the catalog writer's own record took a
//! probe per series per flush (about 250 ns at 100,000 series, 6% of the
//! daemon's CPU in real time, most of it waiting on memory).
//!
//! The aggregator's mark is taken as recorded as soon as the flush makes
//! the entry due, before the store has it: the next flush, cut while this
//! one's catalog write is still in flight, then does not make the same
//! series due again (at a fleet's first flush, a million entries every
//! second). A write the store refuses keeps its entries in the writer's
//! failed set, which goes with the next write whatever it carries.
//!
//! The catalog writer keeps marks too, for the series no aggregator
//! tracks (rollup series), and takes them only once the store has the
//! write: those are few, and nothing else would retry them.

use super::shown_minutes;
use crate::model::{CatalogDue, EpochMinute, SampleKind, Slot, MINUTE_S};

/// What was last made due (the aggregator's) or written (the catalog
/// writer's) of a series: 8 bytes, in minutes since the epoch (a `u32`
/// holds them past the year 10,000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    /// The recorded `first_seen`: a minute before it is written again.
    first: u32,
    /// The first minute whose data makes the entry due again: the
    /// recorded `last_seen` plus `catalog.refresh`. 0 when never recorded.
    refresh_at: u32,
}

/// `catalog.refresh` in whole minutes, rounded up: data in minute `m` is
/// due again when `m·60 ≥ last_seen + refresh`, which for minute starts is
/// `m ≥ last minute + ⌈refresh / 60⌉`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshMinutes(u32);

impl RefreshMinutes {
    pub fn of(refresh: std::time::Duration) -> RefreshMinutes {
        let minutes = refresh.as_secs().max(1).div_ceil(MINUTE_S as u64);
        RefreshMinutes(u32::try_from(minutes).unwrap_or(u32::MAX))
    }
}

impl Mark {
    /// Whether `minutes` (ascending) of a series of `kind` make its entry
    /// due; if so, the mark takes them as recorded. What no read shows (a
    /// cumulative counter's baseline alone) makes nothing due.
    pub fn check(
        &mut self,
        kind: SampleKind,
        minutes: &[(EpochMinute, Slot)],
        refresh: RefreshMinutes,
    ) -> CatalogDue {
        let Some((first, last)) = shown_minutes(kind, minutes) else {
            return CatalogDue::Covered;
        };
        let Some((first, last)) = held(first, last) else {
            // Outside what a mark holds: left to the writer, which finds
            // such an entry always due.
            return CatalogDue::Unknown;
        };
        if self.covers(first, last) {
            return CatalogDue::Covered;
        }
        self.take(first, last, refresh);
        CatalogDue::Due
    }

    /// Whether an entry shown from minute `first` to `last` adds nothing
    /// to what was recorded: not earlier, and not past the refresh.
    pub(super) fn covers(&self, first: u32, last: u32) -> bool {
        self.refresh_at != 0 && first >= self.first && last < self.refresh_at
    }

    /// Takes minutes `first` to `last` as recorded.
    pub(super) fn take(&mut self, first: u32, last: u32, refresh: RefreshMinutes) {
        let refresh_at = last.saturating_add(refresh.0).max(1);
        *self = if self.refresh_at != 0 {
            Mark {
                first: self.first.min(first),
                refresh_at: self.refresh_at.max(refresh_at),
            }
        } else {
            Mark { first, refresh_at }
        };
    }

    /// Whether nothing was recorded at or after minute `before`. A mark
    /// whose refresh saturated (a refresh of thousands of years) no longer
    /// tells its last minute, and is never idle.
    pub(super) fn idle_before(&self, before: u32, refresh: RefreshMinutes) -> bool {
        self.refresh_at != u32::MAX && self.refresh_at.saturating_sub(refresh.0) < before
    }
}

/// Minutes `first` and `last` as a mark holds them, if it can.
pub(super) fn held(first: EpochMinute, last: EpochMinute) -> Option<(u32, u32)> {
    Some((u32::try_from(first).ok()?, u32::try_from(last).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(minutes: &[i64]) -> Vec<(EpochMinute, Slot)> {
        minutes.iter().map(|&m| (m, Slot::of(1.0))).collect()
    }

    #[test]
    fn due_when_new_late_or_a_refresh_on_and_covered_otherwise() {
        let refresh = RefreshMinutes::of(Duration::from_secs(600));
        let g = SampleKind::Gauge;
        let mut m = Mark::default();
        assert_eq!(m.check(g, &at(&[100, 101]), refresh), CatalogDue::Due);
        assert_eq!(m.check(g, &at(&[102]), refresh), CatalogDue::Covered);
        assert_eq!(m.check(g, &at(&[110]), refresh), CatalogDue::Covered);
        assert_eq!(
            m.check(g, &at(&[111]), refresh),
            CatalogDue::Due,
            "10 minutes on"
        );
        assert_eq!(m.check(g, &at(&[111]), refresh), CatalogDue::Covered);
        assert_eq!(
            m.check(g, &at(&[60]), refresh),
            CatalogDue::Due,
            "a late minute"
        );
        assert_eq!(m.check(g, &at(&[60, 120]), refresh), CatalogDue::Covered);
        assert_eq!(
            m,
            Mark {
                first: 60,
                refresh_at: 121
            }
        );
    }

    #[test]
    fn a_refresh_that_is_not_whole_minutes_rounds_up() {
        // last_seen 6,000 s + 90 s: minute 101 (6,060 s) is not due yet,
        // minute 102 (6,120 s) is.
        let refresh = RefreshMinutes::of(Duration::from_secs(90));
        let mut m = Mark::default();
        let g = SampleKind::Gauge;
        assert_eq!(m.check(g, &at(&[100]), refresh), CatalogDue::Due);
        assert_eq!(m.check(g, &at(&[101]), refresh), CatalogDue::Covered);
        assert_eq!(m.check(g, &at(&[102]), refresh), CatalogDue::Due);
    }

    #[test]
    fn a_counters_baseline_alone_makes_nothing_due() {
        let refresh = RefreshMinutes::of(Duration::from_secs(600));
        let mut baseline = Slot::EMPTY;
        baseline.see(6_000_000, 100.0);
        let mut m = Mark::default();
        let c = SampleKind::CumulativeCounter;
        assert_eq!(m.check(c, &[(100, baseline)], refresh), CatalogDue::Covered);
        assert_eq!(m, Mark::default(), "still never recorded");
        let mut increase = Slot::EMPTY;
        increase.add_value(5.0);
        increase.see(6_060_000, 105.0);
        assert_eq!(m.check(c, &[(101, increase)], refresh), CatalogDue::Due);
    }

    #[test]
    fn a_mark_is_idle_before_the_minute_after_its_last_unless_its_refresh_saturated() {
        let refresh = RefreshMinutes::of(Duration::from_secs(600));
        let mut m = Mark::default();
        m.take(100, 101, refresh);
        assert!(!m.idle_before(101, refresh));
        assert!(m.idle_before(102, refresh));
        let forever = RefreshMinutes::of(Duration::from_secs(u64::MAX));
        let mut m = Mark::default();
        m.take(100, 101, forever);
        assert!(!m.idle_before(u32::MAX, forever));
    }

    #[test]
    fn minutes_a_mark_cannot_hold_are_left_to_the_writer() {
        let refresh = RefreshMinutes::of(Duration::from_secs(600));
        let mut m = Mark::default();
        let g = SampleKind::Gauge;
        assert_eq!(m.check(g, &at(&[-5]), refresh), CatalogDue::Unknown);
        assert_eq!(m, Mark::default());
    }
}
