//! The slot every document level is made of, the bound on the sums it
//! keeps, and which slots a read shows.

use super::SampleKind;

/// The largest magnitude of any sum the daemon keeps in a slot. A sample
/// that would take its minute's sum (or a cumulative counter's increase)
/// beyond it is rejected, and a rollup leaves out a member that would take
/// its sum beyond it. Every stored sum is a sum of such bounded sums, one
/// per flush and minute (a day's total at a flush a second is at most 1440
/// × 86400 ≈ 1.2e8 of them), and `f64::MAX / MAX_SUM` ≈ 1.8e8, so finite
/// input never adds up to infinity in a minute, hour or day slot.
pub const MAX_SUM: f64 = 1e300;

/// Whether `sum` may be kept in a slot: within ±[`MAX_SUM`] (so not NaN).
#[inline]
pub fn sum_in_range(sum: f64) -> bool {
    sum.abs() <= MAX_SUM
}

/// `last_ms` of a slot that holds no last sample: older than any sample, so
/// merging needs no special case (and data written before slots kept their
/// last sample reads as having none).
pub const NO_LAST_MS: i64 = i64::MIN;

/// A slot: count, running sum, minimum and maximum of the samples in it,
/// and the newest of them (value and time).
///
/// The empty slot has `n = 0`, `min = +inf`, `max = -inf` and no last
/// sample, so that merging is plain `min`/`max`/newest with no special case,
/// exactly as `$min`/`$max` behave on a pre-allocated MongoDB document. An
/// empty slot is "no data", never a zero point.
///
/// `n`, `sum`, `min` and `max` are of finite values: a counter's per-sample
/// increases, a gauge's values. `last` is the newest sample as the agent
/// sent it: a cumulative counter's raw value (also its first, which adds no
/// increase), and NaN, which no sum can hold. So `n = 0` with a last sample
/// is a minute that has a value to show (a bare PromQL selector) and no
/// aggregates, except a cumulative counter's baseline: see
/// [`Slot::shows`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    /// The newest sample's value; meaningless while `last_ms` is [`NO_LAST_MS`].
    pub last: f64,
    /// The newest sample's time, Unix milliseconds; [`NO_LAST_MS`] for none.
    pub last_ms: i64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot::EMPTY
    }
}

/// The bit pattern of Prometheus' staleness marker: a NaN no arithmetic
/// produces, written when a series ends (its target went away, it left the
/// scrape). Kept as the last sample of its minute, it ends the series at
/// its time for instant selectors; no sum or range function sees it.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// The staleness marker as a value.
pub fn stale_marker() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Whether `v` is the staleness marker (by its bits: any other NaN is a
/// value that was sent).
#[inline]
pub fn is_stale_marker(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// Whether the sample `(t, v)` is newer than `(was_t, was_v)`: later, or at
/// the same time with the greater value, NaN below every number and the
/// staleness marker above any other NaN. This is the order MongoDB's `$max`
/// gives `{t, v}` documents (NaN is stored as null, the marker as null with
/// one more field, see the MongoDB store), so both stores keep the same
/// last sample whatever order flushes, retries and replays bring them in.
#[inline]
pub fn newer_sample(t: i64, v: f64, was_t: i64, was_v: f64) -> bool {
    t > was_t
        || (t == was_t
            && match (v.is_nan(), was_v.is_nan()) {
                (true, true) => is_stale_marker(v) && !is_stale_marker(was_v),
                (true, false) => false,
                (false, true) => true,
                (false, false) => v > was_v,
            })
}

impl Slot {
    pub const EMPTY: Slot = Slot {
        n: 0,
        sum: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        last: 0.0,
        last_ms: NO_LAST_MS,
    };

    /// A slot of one value with no time: a summary (tests, rollups of
    /// summaries) rather than a sample.
    pub fn of(value: f64) -> Slot {
        Slot {
            n: 1,
            sum: value,
            min: value,
            max: value,
            ..Slot::EMPTY
        }
    }

    /// A slot of one sample at `ts_ms`.
    pub fn at(ts_ms: i64, value: f64) -> Slot {
        let mut s = Slot::EMPTY;
        s.add(ts_ms, value);
        s
    }

    /// A slot of `n`, `sum`, `min` and `max` with no last sample.
    pub fn summary(n: u64, sum: f64, min: f64, max: f64) -> Slot {
        Slot {
            n,
            sum,
            min,
            max,
            ..Slot::EMPTY
        }
    }

    /// Neither values nor a last sample: nothing to store or show.
    pub fn is_empty(&self) -> bool {
        self.n == 0 && self.last_ms == NO_LAST_MS
    }

    /// Whether a read shows the slot for a series of `kind` (None: not
    /// known). A cumulative counter's slot with no increase whose last
    /// sample is a number holds only the baseline its next increase is
    /// counted from (the series' first sample, or the first after it was
    /// forgotten): no sample that counts, so no read shows it. Its minute
    /// is still stored as written (documents written before this rule
    /// hold such slots too), so every read applies the rule itself.
    pub fn shows(&self, kind: Option<SampleKind>) -> bool {
        let baseline = kind == Some(SampleKind::CumulativeCounter) && self.is_baseline();
        !self.is_empty() && !baseline
    }

    /// No increase, and a number as the last sample: a cumulative
    /// counter's baseline and nothing else (a NaN sample is one that was
    /// sent, and shows as Prometheus would show it).
    fn is_baseline(&self) -> bool {
        self.n == 0 && self.last_sample().is_some_and(|(_, v)| !v.is_nan())
    }

    /// The newest sample unless it is a staleness marker: the sample a
    /// value read shows (a series that ended shows nothing after its end).
    pub fn value_sample(&self) -> Option<(i64, f64)> {
        self.last_sample().filter(|&(_, v)| !is_stale_marker(v))
    }

    /// Whether the slot ends its series: its newest sample is a staleness
    /// marker.
    pub fn ends(&self) -> bool {
        self.last_sample().is_some_and(|(_, v)| is_stale_marker(v))
    }

    /// A staleness marker and nothing else: the minute holds no value, only
    /// the end of its series, which only instant selectors read.
    pub fn only_ends(&self) -> bool {
        self.n == 0 && self.ends()
    }

    /// Whether the aggregates (`n`, `sum`, `min`, `max`) have any value.
    pub fn has_values(&self) -> bool {
        self.n > 0
    }

    /// The newest sample, `(Unix ms, value)`, if the slot holds one.
    pub fn last_sample(&self) -> Option<(i64, f64)> {
        (self.last_ms != NO_LAST_MS).then_some((self.last_ms, self.last))
    }

    /// Adds a sample whose value `value` is also its contribution to the
    /// aggregates (a gauge's value, a delta counter's delta).
    #[inline]
    pub fn add(&mut self, ts_ms: i64, value: f64) {
        self.add_value(value);
        self.see(ts_ms, value);
    }

    /// Adds `value` to the aggregates only.
    #[inline]
    pub fn add_value(&mut self, value: f64) {
        self.n += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Keeps `(ts_ms, value)` as the last sample if it is newer.
    #[inline]
    pub fn see(&mut self, ts_ms: i64, value: f64) {
        if newer_sample(ts_ms, value, self.last_ms, self.last) {
            self.last = value;
            self.last_ms = ts_ms;
        }
    }

    #[inline]
    pub fn merge(&mut self, other: &Slot) {
        self.n += other.n;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.see(other.last_ms, other.last);
    }

    pub fn avg(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// Counters: the slot's sum spread over its width in seconds.
    pub fn rate(&self, width_s: i64) -> Option<f64> {
        (self.n > 0).then(|| self.sum / width_s as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slot_math() {
        let mut s = Slot::EMPTY;
        assert!(s.is_empty());
        assert_eq!(s.avg(), None);
        for (t, v) in [(3, 3.0), (1, -1.0), (2, 4.0)] {
            s.add(t, v);
        }
        assert_eq!(
            s,
            Slot {
                n: 3,
                sum: 6.0,
                min: -1.0,
                max: 4.0,
                last: 3.0,
                last_ms: 3,
            }
        );
        assert_eq!(s.avg(), Some(2.0));
        assert_eq!(s.rate(60), Some(0.1));
        let mut t = Slot::EMPTY;
        t.merge(&s);
        assert_eq!(t, s);
        t.merge(&Slot::EMPTY);
        assert_eq!(t, s, "merging the empty slot changes nothing");
    }

    #[test]
    fn a_last_sample_alone_is_not_empty_but_has_no_values() {
        let mut s = Slot::EMPTY;
        s.see(5, f64::NAN);
        assert!(!s.is_empty());
        assert!(!s.has_values());
        assert_eq!(s.avg(), None);
        assert!(s.last_sample().is_some_and(|(t, v)| t == 5 && v.is_nan()));
        // At the same time the staleness marker wins over NaN, a number
        // over both, as `$max` has them.
        s.see(5, stale_marker());
        assert!(s.ends() && s.only_ends() && s.value_sample().is_none());
        s.see(5, f64::NAN);
        assert!(s.ends(), "a NaN does not replace the marker at its time");
        s.see(5, -1.0);
        assert_eq!(s.last_sample(), Some((5, -1.0)));
        assert!(!s.ends());
        // An older sample never replaces a newer one.
        s.see(4, 100.0);
        assert_eq!(s.last_sample(), Some((5, -1.0)));
    }

    #[test]
    fn a_cumulative_counters_baseline_alone_is_not_shown() {
        let cumulative = Some(SampleKind::CumulativeCounter);
        let mut baseline = Slot::EMPTY;
        baseline.see(5, 100.0);
        assert!(!baseline.shows(cumulative));
        // The same slot of a gauge or delta counter, or of a series whose
        // kind is not known, is a value to show.
        assert!(baseline.shows(Some(SampleKind::Gauge)));
        assert!(baseline.shows(Some(SampleKind::DeltaCounter)));
        assert!(baseline.shows(None));
        // An increase, or a NaN that was sent after the baseline, shows.
        let mut increased = baseline;
        increased.add_value(3.0);
        increased.see(6, 103.0);
        assert!(increased.shows(cumulative));
        let mut nan = baseline;
        nan.see(6, f64::NAN);
        assert!(nan.shows(cumulative));
        assert!(!Slot::EMPTY.shows(cumulative));
        assert!(!Slot::EMPTY.shows(Some(SampleKind::Gauge)));
    }

    fn sample() -> impl Strategy<Value = (i64, f64)> {
        (
            0_i64..20,
            prop_oneof![
                Just(f64::NAN),
                Just(stale_marker()),
                (-3_i32..3).prop_map(f64::from)
            ],
        )
    }

    proptest! {
        /// The last sample does not depend on the order samples arrive in or
        /// on how they are grouped into merged slots: late samples, retries
        /// and replays all end in the same slot.
        #[test]
        fn last_sample_is_independent_of_order_and_grouping(
            samples in proptest::collection::vec(sample(), 1..12),
            split in 0_usize..12,
        ) {
            let mut forward = Slot::EMPTY;
            for &(t, v) in &samples {
                forward.see(t, v);
            }
            let mut backward = Slot::EMPTY;
            for &(t, v) in samples.iter().rev() {
                backward.see(t, v);
            }
            let cut = split.min(samples.len());
            let (mut a, mut b) = (Slot::EMPTY, Slot::EMPTY);
            for &(t, v) in &samples[..cut] {
                a.see(t, v);
            }
            for &(t, v) in &samples[cut..] {
                b.see(t, v);
            }
            b.merge(&a);
            let bits = |s: &Slot| (s.last_ms, s.last.to_bits());
            prop_assert_eq!(bits(&forward), bits(&backward));
            prop_assert_eq!(bits(&forward), bits(&b));
        }
    }
}
