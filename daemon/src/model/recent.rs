//! A series' newest raw samples, as the aggregator held them when a read
//! began, and what they make exact: the slot of a minute as it stood at an
//! instant `t` inside it. A minute's slot keeps one last sample and its
//! aggregates, so at a `t` before the minute's end it holds samples after
//! `t`; with the samples after `t` known, they are taken back out
//! ("rewound"), and an instant selector at `t` answers the newest sample
//! at or before `t`, a window ending at `t` holds none after it.
//!
//! The samples are kept in memory only (see the aggregator's ring): after
//! a restart there are none until the series is sent again, and reads
//! answer as they did without them.

use super::{newer_sample, Slot, Spacing, Steps};

/// How far two samples' distance may be from their series' interval and
/// still count as regular: Prometheus puts its scrapes' times on the
/// interval to 2 ms (`--scrape.timestamp-tolerance`).
const SPACING_SLACK_MS: i64 = 2;

/// One recent sample: its time, its value as sent, and what it added to
/// its minute's aggregates: `None` for nothing (a NaN, a staleness marker,
/// a cumulative counter's baseline), NaN for an amount not known (a
/// cumulative counter's oldest increase, whose previous value is gone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentSample {
    pub ts: i64,
    pub v: f64,
    pub added: Option<f64>,
}

/// A series' newest samples, ascending by time. Every sample the series
/// was sent since they began to be kept (its first after a restart or
/// after it was forgotten) whose time is at or after the oldest is among
/// them: they answer exactly for an instant at or after the oldest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecentSamples {
    samples: Vec<RecentSample>,
    /// The counts and sums of its newest minutes, in steps, kept beside
    /// the samples.
    steps: Steps,
}

impl RecentSamples {
    /// `samples` ascending by time.
    pub fn new(samples: Vec<RecentSample>) -> RecentSamples {
        debug_assert!(samples.windows(2).all(|w| w[0].ts <= w[1].ts));
        RecentSamples {
            samples,
            steps: Steps::default(),
        }
    }

    /// The same, with the series' steps.
    pub fn with_steps(self, steps: Steps) -> RecentSamples {
        RecentSamples { steps, ..self }
    }

    pub fn samples(&self) -> &[RecentSample] {
        &self.samples
    }

    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// Whether the newest sample at or before `t` is among them.
    pub fn cover(&self, t: i64) -> bool {
        self.samples.first().is_some_and(|s| s.ts <= t)
    }

    /// The two newest samples at or before `t`, in time order, where both
    /// are here (and so are two that came one after the other): what
    /// `irate` and `idelta` read at `t`.
    pub fn last_two(&self, t: i64) -> Option<[&RecentSample; 2]> {
        let i = self.samples.partition_point(|s| s.ts <= t);
        let older = self.samples.get(i.checked_sub(2)?)?;
        Some([older, self.samples.get(i - 1)?])
    }

    /// The interval the samples come at, where every two here are that far
    /// apart (to [`SPACING_SLACK_MS`]) and there are at least three: a
    /// scrape interval, which places the series' samples further back too.
    pub fn spacing(&self) -> Option<Spacing> {
        let (first, newest) = (self.samples.first()?, self.samples.last()?);
        let gaps = self.samples.len().checked_sub(1).filter(|&g| g >= 2)? as i64;
        let every_ms = (newest.ts - first.ts + gaps / 2) / gaps;
        let regular = self
            .samples
            .windows(2)
            .all(|w| (w[1].ts - w[0].ts - every_ms).abs() <= SPACING_SLACK_MS);
        (regular && every_ms > 0).then_some(Spacing {
            at_ms: newest.ts,
            every_ms,
        })
    }

    /// The slot of the minute `[start, end)` (a merged read of it, store
    /// and memory) as it stood at `t`, `start <= t < end`: its samples
    /// after `t` taken out. `None` where that cannot be done exactly: `t`
    /// before the oldest recent sample, or the slot and the samples
    /// disagree (the read saw samples these do not hold, or the other way
    /// round: a flush or a push between the two, or another daemon feeding
    /// the series), or an increase taken out is not known. The result may
    /// be empty (nothing in the minute up to `t`).
    ///
    /// Count, sum, the last sample and a counter's increases are taken
    /// back exactly. The minimum and maximum cannot be: unless the samples
    /// hold the whole minute (the oldest is before it), they stay those
    /// of the minute so far, samples after `t` included.
    pub fn rewind(&self, slot: &Slot, start: i64, end: i64, t: i64) -> Option<Slot> {
        if !self.cover(t) {
            return None;
        }
        let minute: Vec<&RecentSample> = self
            .samples
            .iter()
            .filter(|s| (start..end).contains(&s.ts))
            .collect();
        let (last_ms, _) = slot.last_sample()?;
        let agrees = match minute.last() {
            Some(newest) => newest.ts == last_ms,
            None => last_ms < self.samples[0].ts,
        };
        if !agrees {
            return None;
        }
        if minute.iter().all(|s| s.ts <= t) {
            return Some(*slot);
        }
        let before = minute.iter().filter(|s| s.ts <= t);
        if self.samples[0].ts < start {
            // Every sample of the minute is here: built anew, exactly.
            let mut out = Slot::EMPTY;
            let counted = minute.iter().filter(|s| s.added.is_some()).count();
            if counted as u64 != slot.n {
                return None;
            }
            for s in before {
                if let Some(a) = s.added {
                    out.add_value(a);
                }
                out.see(s.ts, s.v);
            }
            return known(out);
        }
        let mut out = *slot;
        for a in minute.iter().filter(|s| s.ts > t).filter_map(|s| s.added) {
            if a.is_nan() {
                return None;
            }
            out.n = out.n.checked_sub(1)?;
            out.sum -= a;
        }
        // The oldest sample is in the minute and at or before `t`, so the
        // minute's newest sample up to `t` is here.
        let (ts, v) = before.fold((super::NO_LAST_MS, 0.0), |(wt, wv), s| {
            match newer_sample(s.ts, s.v, wt, wv) {
                true => (s.ts, s.v),
                false => (wt, wv),
            }
        });
        out.last_ms = ts;
        out.last = v;
        if out.n == 0 {
            out = Slot {
                last: out.last,
                last_ms: out.last_ms,
                ..Slot::EMPTY
            };
        }
        known(out)
    }
}

/// `s`, unless an amount that went into it was not known.
fn known(s: Slot) -> Option<Slot> {
    (!s.sum.is_nan()).then_some(s)
}

#[cfg(test)]
#[path = "recent_tests.rs"]
mod tests;
