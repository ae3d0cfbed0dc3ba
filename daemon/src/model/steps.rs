//! A series' counts and sums in steps of [`STEP_MS`] over its newest few
//! minutes, as the aggregator held them when a read began, and what they
//! make closer: the part of a minute before an instant inside it.
//!
//! A window `(t - r, t]` at an instant `t` inside a minute starts inside
//! the minute `r` before. Its slot says only how many samples that minute
//! had and what they summed to, not when inside it they came, so the
//! share before `t - r` would be taken as if they were spread evenly: a
//! counter that changed its pace inside that minute moves the rate by the
//! difference. With the minute's steps, only the one step `t - r` falls in
//! is shared out, the rest is known.
//!
//! Kept in memory only, beside the series' recent samples (see the
//! aggregator's `steps`), from a series' first read on: a minute counts
//! only if its steps saw all of it, and reads answer as they did without
//! them otherwise.

use super::Slot;

/// The width of a step. Six per minute: the share of the one step a
/// window's start falls in is at most a sixth of a minute's.
pub const STEP_MS: i64 = 10_000;
/// Steps per minute.
pub const STEPS: usize = (60_000 / STEP_MS) as usize;

/// One whole minute's steps: how many samples each counted, and their sum
/// (a counter's increases, as its slot sums them). A count of
/// `u16::MAX` is saturated: the minute is not used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMinute {
    pub start_ms: i64,
    pub n: [u16; STEPS],
    pub sum: [f64; STEPS],
}

/// The whole minutes a series' steps hold, any order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Steps {
    minutes: Vec<StepMinute>,
}

impl Steps {
    pub fn new(minutes: Vec<StepMinute>) -> Steps {
        Steps { minutes }
    }

    pub fn minutes(&self) -> &[StepMinute] {
        &self.minutes
    }

    /// The count and sum of the samples of the minute starting at `start`
    /// (its slot `slot`, store and memory merged) at or before `cut`,
    /// `start <= cut < start + 60 s`: the steps before `cut`'s whole, and
    /// of the one `cut` falls in the share before it, as if its samples
    /// were spread evenly over it. `None` where the steps do not hold the
    /// minute, or hold another count than the slot's (a sample the steps
    /// did not see: before they were kept, or from another daemon).
    pub fn up_to(&self, slot: &Slot, start: i64, cut: i64) -> Option<(f64, f64)> {
        let m = self.minutes.iter().find(|m| m.start_ms == start)?;
        let total: u64 = m.n.iter().map(|&n| u64::from(n)).sum();
        if total != slot.n || m.n.contains(&u16::MAX) || !(start..start + 60_000).contains(&cut) {
            return None;
        }
        // `cut` is in the range it starts, `(cut, t]`: a sample at `cut` is before it.
        let into = cut - start + 1;
        let k = (into / STEP_MS) as usize;
        let mut n: f64 = m.n[..k].iter().map(|&n| f64::from(n)).sum();
        let mut sum: f64 = m.sum[..k].iter().sum();
        if let (Some(&sn), Some(&ss)) = (m.n.get(k), m.sum.get(k)) {
            let share = (into % STEP_MS) as f64 / STEP_MS as f64;
            n += share * f64::from(sn);
            sum += share * ss;
        }
        (!sum.is_nan()).then_some((n, sum))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(start_ms: i64, n: [u16; STEPS], sum: [f64; STEPS]) -> Steps {
        Steps::new(vec![StepMinute { start_ms, n, sum }])
    }

    fn slot_of(n: u64) -> Slot {
        Slot { n, ..Slot::EMPTY }
    }

    #[test]
    fn the_steps_before_the_cut_count_whole_and_the_one_it_is_in_by_share() {
        let s = minute(
            60_000,
            [10, 10, 10, 0, 0, 10],
            [1.0, 2.0, 3.0, 0.0, 0.0, 40.0],
        );
        // 25 s in: two steps whole, half of the third.
        let (n, sum) = s.up_to(&slot_of(40), 60_000, 60_000 + 24_999).unwrap();
        assert_eq!(n, 25.0);
        assert_eq!(sum, 4.5);
        // On the last millisecond: all of it.
        assert_eq!(s.up_to(&slot_of(40), 60_000, 119_999), Some((40.0, 46.0)));
        // The pace changed: the even spread would have said 40 · 25/60.
        let (_, sum) = s.up_to(&slot_of(40), 60_000, 60_000 + 39_999).unwrap();
        assert_eq!(sum, 6.0);
    }

    #[test]
    fn a_minute_not_seen_whole_is_not_used() {
        let s = minute(60_000, [10; STEPS], [1.0; STEPS]);
        assert_eq!(s.up_to(&slot_of(61), 60_000, 70_000), None);
        assert_eq!(s.up_to(&slot_of(60), 120_000, 130_000), None);
        let saturated = minute(60_000, [u16::MAX, 0, 0, 0, 0, 0], [1.0; STEPS]);
        assert_eq!(
            saturated.up_to(&slot_of(u64::from(u16::MAX)), 60_000, 70_000),
            None
        );
        let unknown = minute(60_000, [1; STEPS], [f64::NAN; STEPS]);
        assert_eq!(unknown.up_to(&slot_of(6), 60_000, 70_000), None);
    }
}
