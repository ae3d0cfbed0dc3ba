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
    ///
    /// Where the series' samples come at a regular `spacing` that puts as
    /// many in the step `cut` falls in as it counted, that step's share is
    /// theirs instead: its samples at or before `cut` by count (exact),
    /// their sum as that share of the step's.
    pub fn up_to(
        &self,
        slot: &Slot,
        start: i64,
        cut: i64,
        spacing: Option<Spacing>,
    ) -> Option<(f64, f64)> {
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
            let from = start + k as i64 * STEP_MS;
            let by_time = (into % STEP_MS) as f64 / STEP_MS as f64;
            let share = spacing
                .and_then(|s| s.share(from, from + STEP_MS - 1, cut, sn))
                .unwrap_or(by_time);
            n += share * f64::from(sn);
            sum += share * ss;
        }
        (!sum.is_nan()).then_some((n, sum))
    }
}

/// Where a series' samples come: one at `at_ms`, and then every
/// `every_ms` before and after it (a scrape interval; Prometheus aligns
/// its scrapes' times to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spacing {
    pub at_ms: i64,
    pub every_ms: i64,
}

impl Spacing {
    /// How many of the spaced times lie in `[from, to]`.
    fn count(&self, from: i64, to: i64) -> i64 {
        let below = |x: i64| (x - self.at_ms).div_euclid(self.every_ms);
        below(to) - below(from - 1)
    }

    /// The share of the `n` samples of the step `[from, to]` at or before
    /// `cut`, where the spacing puts `n` there (else it says nothing).
    fn share(&self, from: i64, to: i64, cut: i64, n: u16) -> Option<f64> {
        if self.every_ms <= 0 || n == 0 || self.count(from, to) != i64::from(n) {
            return None;
        }
        Some(self.count(from, cut) as f64 / f64::from(n))
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
        let (n, sum) = s
            .up_to(&slot_of(40), 60_000, 60_000 + 24_999, None)
            .unwrap();
        assert_eq!(n, 25.0);
        assert_eq!(sum, 4.5);
        // On the last millisecond: all of it.
        assert_eq!(
            s.up_to(&slot_of(40), 60_000, 119_999, None),
            Some((40.0, 46.0))
        );
        // The pace changed: the even spread would have said 40 · 25/60.
        let (_, sum) = s
            .up_to(&slot_of(40), 60_000, 60_000 + 39_999, None)
            .unwrap();
        assert_eq!(sum, 6.0);
    }

    #[test]
    fn a_minute_not_seen_whole_is_not_used() {
        let s = minute(60_000, [10; STEPS], [1.0; STEPS]);
        assert_eq!(s.up_to(&slot_of(61), 60_000, 70_000, None), None);
        assert_eq!(s.up_to(&slot_of(60), 120_000, 130_000, None), None);
        let saturated = minute(60_000, [u16::MAX, 0, 0, 0, 0, 0], [1.0; STEPS]);
        assert_eq!(
            saturated.up_to(&slot_of(u64::from(u16::MAX)), 60_000, 70_000, None),
            None
        );
        let unknown = minute(60_000, [1; STEPS], [f64::NAN; STEPS]);
        assert_eq!(unknown.up_to(&slot_of(6), 60_000, 70_000, None), None);
    }

    #[test]
    fn regular_samples_share_the_step_by_count() {
        // Every second at .250: ten per step, 2.0 each.
        let s = minute(60_000, [10; STEPS], [20.0; STEPS]);
        let every = Spacing {
            at_ms: 60_250,
            every_ms: 1_000,
        };
        // 3.5 s into the third step: two steps whole, and of the third
        // the 4 samples at 20.25 s to 23.25 s.
        let cut = 60_000 + 23_499;
        let (n, sum) = s.up_to(&slot_of(60), 60_000, cut, Some(every)).unwrap();
        assert_eq!((n, sum), (24.0, 48.0));
        // By time the share would have been 0.35 of the step.
        assert_eq!(s.up_to(&slot_of(60), 60_000, cut, None).unwrap().0, 23.5);
        // On a sample's millisecond: it is at or before the cut.
        let (n, _) = s
            .up_to(&slot_of(60), 60_000, 60_000 + 23_250, Some(every))
            .unwrap();
        assert_eq!(n, 24.0);
        // A step the spacing does not explain (a scrape missed): by time.
        let gap = minute(60_000, [10, 10, 9, 10, 10, 10], [20.0; STEPS]);
        let (n, _) = gap.up_to(&slot_of(59), 60_000, cut, Some(every)).unwrap();
        assert_eq!(n, 20.0 + 0.35 * 9.0);
    }
}
