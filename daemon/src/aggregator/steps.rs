//! A series' counts and sums in steps of ten seconds over its newest
//! [`MINUTES`] minutes, beside its recent samples, for the series a read
//! has asked for: a window starting inside one of those minutes takes out
//! the part before its start by them (see `model::Steps`).
//!
//! Kept from the series' first read on, like the recent samples: a minute
//! that began before is not whole in them and is never shown. Written on
//! the ingest path for every sample a minute counts, a few stores into
//! fixed arrays; 280 bytes a series that a read asked for (388 with its
//! recent samples and their place in the map, `cargo bench --bench
//! memory`), none for the others.

use crate::model::{minute_of_ms, StepMinute, Steps, STEPS, STEP_MS};

/// Minutes held: the minute in progress and the three before, so windows
/// of up to three minutes, at an instant inside the minute in progress,
/// start inside one of them.
pub(super) const MINUTES: usize = 4;

const MINUTE_MS: i64 = 60_000;
/// No minute.
const NONE: i64 = i64::MIN;

/// The steps of the newest minutes, one cell a minute by the minute's
/// number modulo [`MINUTES`]: a sample of a newer minute than its cell
/// holds starts the cell anew, one of an older minute is not counted.
#[derive(Debug, Clone)]
pub(super) struct MinuteSteps {
    /// The start of the minute each cell holds, or [`NONE`].
    start: [i64; MINUTES],
    n: [[u16; STEPS]; MINUTES],
    sum: [[f64; STEPS]; MINUTES],
    /// Minutes before this one were not counted whole.
    from_ms: i64,
}

impl MinuteSteps {
    /// Steps for a series whose newest sample so far is at `newest_ms`
    /// (`i64::MIN` for none): its minute may already have samples they
    /// did not see, so they count from the minute after it.
    pub(super) fn after(newest_ms: i64) -> MinuteSteps {
        let from_ms = match newest_ms {
            i64::MIN => i64::MIN,
            t => minute_of(t).saturating_add(MINUTE_MS),
        };
        MinuteSteps {
            start: [NONE; MINUTES],
            n: [[0; STEPS]; MINUTES],
            sum: [[0.0; STEPS]; MINUTES],
            from_ms,
        }
    }

    /// Counts a sample at `ts` that added `value` to its minute's count
    /// and sum.
    #[inline]
    pub(super) fn add(&mut self, ts: i64, value: f64) {
        let start = minute_of(ts);
        if start < self.from_ms {
            return;
        }
        let cell = (start / MINUTE_MS).rem_euclid(MINUTES as i64) as usize;
        if self.start[cell] != start {
            if self.start[cell] > start {
                return;
            }
            self.start[cell] = start;
            self.n[cell] = [0; STEPS];
            self.sum[cell] = [0.0; STEPS];
        }
        let k = ((ts - start) / STEP_MS) as usize;
        if let (Some(n), Some(sum)) = (self.n[cell].get_mut(k), self.sum[cell].get_mut(k)) {
            *n = n.saturating_add(1);
            *sum += value;
        }
    }

    /// The minutes held, for a read.
    pub(super) fn snapshot(&self) -> Steps {
        let minutes = (0..MINUTES)
            .filter(|&c| self.start[c] != NONE)
            .map(|c| StepMinute {
                start_ms: self.start[c],
                n: self.n[c],
                sum: self.sum[c],
            })
            .collect();
        Steps::new(minutes)
    }
}

/// The start (ms) of the minute `ts` is in.
fn minute_of(ts: i64) -> i64 {
    minute_of_ms(ts) * MINUTE_MS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Slot;

    fn slot_of(n: u64) -> Slot {
        Slot { n, ..Slot::EMPTY }
    }

    #[test]
    fn a_minute_is_held_from_the_one_after_the_newest_sample_on() {
        let mut s = MinuteSteps::after(61_000);
        s.add(62_000, 1.0);
        s.add(125_000, 2.0);
        s.add(131_000, 3.0);
        let steps = s.snapshot();
        assert_eq!(steps.minutes().len(), 1);
        assert_eq!(
            steps.up_to(&slot_of(2), 120_000, 129_999, None),
            Some((1.0, 2.0))
        );
        assert_eq!(steps.up_to(&slot_of(1), 60_000, 70_000, None), None);
    }

    #[test]
    fn the_newest_minutes_are_held_and_older_samples_not_counted() {
        let mut s = MinuteSteps::after(i64::MIN);
        for m in 0..6 {
            s.add(m * MINUTE_MS + 5_000, m as f64);
        }
        // A late sample of a minute no longer held.
        s.add(MINUTE_MS + 1, 10.0);
        let starts: Vec<i64> = {
            let mut v: Vec<i64> = s.snapshot().minutes().iter().map(|m| m.start_ms).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(starts, [2, 3, 4, 5].map(|m| m * MINUTE_MS));
        // A late sample of a minute held counts.
        s.add(5 * MINUTE_MS + 59_999, 7.0);
        let (n, sum) = s
            .snapshot()
            .up_to(&slot_of(2), 5 * MINUTE_MS, 5 * MINUTE_MS + 59_999, None)
            .unwrap();
        assert_eq!((n, sum), (2.0, 12.0));
    }
}
