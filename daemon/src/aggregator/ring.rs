//! A series' newest raw samples, a fixed few beside its minute slots, so a
//! read at an instant inside a minute can take the minute's samples after
//! that instant back out (see `model::RecentSamples`).
//!
//! Kept only for series a read has asked for (the series' first read
//! that wants them starts them, see `SeriesState::keep_recent`), in a map beside the
//! shard's table (`Shard::recent`): every other series pays no memory for
//! them and its ingest nothing but the test of a bit. Measured before
//! this rule, with a ring in every series' entry: `cargo bench --bench
//! aggregator` took 7 to 9 % more time per sample (one more line written
//! per series, and the push itself), and the aggregator 279 to 344 bytes
//! per series. Rule evaluators and dashboards ask for the same series
//! again and again, so their second read on has the samples.
//!
//! Written on the ingest hot path: an in-order sample is a few stores into
//! fixed arrays, no allocation and no search; a late one within the
//! samples kept is put in place by a few swaps; a request's samples before
//! its last [`RING`] are not written at all (see [`Ring::keep_from`]), as
//! in time order they could not stay.
//!
//! Memory only: after a restart (or once the series is forgotten) the
//! ring starts empty, and reads answer as they would without it until
//! the series' new samples cover the instant asked.

use crate::model::{RecentSample, RecentSamples, SampleKind};

/// Samples kept per series. Measured: the differential test's instants
/// 3 s before now, on 1 s scrapes delivered every half second, need the
/// two newest samples at or before the instant (`irate`, `idelta`) and
/// the two to four after it; eight do, in 120 bytes (four, in 64, gave
/// the newest one only, and `irate` the last minute's rate). The cost is
/// the read series' ingest: `ingest/20k_series_x1_samples_read` took 47 %
/// more than unread series with eight, 27 % with four, on a machine whose
/// 8 MiB cache the 20,000 series' state then outgrows.
pub(super) const RING: usize = 8;
// Indices wrap with a mask, and the length fits a byte.
const _: () = assert!(RING.is_power_of_two() && RING < 256);

/// A sample's flag: it entered its minute's count and sum.
const COUNTED: u8 = 1;
/// A sample's flag: what it added is its value (a cumulative counter's
/// reset, or an increase from zero).
const WHOLE: u8 = 2;

/// The newest [`RING`] samples in time order, the oldest overwritten:
/// times as offsets from `base` (at or before the oldest), so a sample
/// takes 13 bytes. Every accepted sample at or after the oldest kept is
/// here (a late sample older than that is not kept, and need not be),
/// except a sample at the oldest's very millisecond that was overwritten
/// before it. Empty, `base` is the earliest time a sample may be kept
/// from (every one before it forgotten, see [`Ring::forget_through`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    base: i64,
    v: [f64; RING],
    dt: [u32; RING],
    /// [`COUNTED`] and [`WHOLE`] per sample.
    flags: [u8; RING],
    /// Where the next sample goes.
    head: u8,
    len: u8,
}

/// One sample as the ring keeps it: time, value, flags.
type Entry = (i64, f64, u8);

/// The flags of a sample `v` that added `added` to its minute. A
/// cumulative counter's increase is its value after a reset (or from
/// zero); the others are taken from the sample before.
#[inline]
fn flags(v: f64, added: Option<f64>) -> u8 {
    match added {
        Some(a) if a.to_bits() == v.to_bits() => COUNTED | WHOLE,
        Some(_) => COUNTED,
        None => 0,
    }
}

impl Default for Ring {
    fn default() -> Ring {
        Ring::EMPTY
    }
}

impl Ring {
    pub(super) const EMPTY: Ring = Ring {
        base: i64::MIN,
        v: [0.0; RING],
        dt: [0; RING],
        flags: [0; RING],
        head: 0,
        len: 0,
    };

    /// The first of a request's `n` samples to push: in time order (nearly
    /// always) only its last [`RING`] can stay among the newest, so the
    /// ones before are not pushed, and the ring then forgets through the
    /// newest of them (see [`Ring::skipped`]).
    #[inline]
    pub(super) fn keep_from(n: usize) -> usize {
        n.saturating_sub(RING)
    }

    /// What to forget through once a request's samples at `timestamps`
    /// were not pushed (see [`Ring::keep_from`]): the newest of them that
    /// may have been accepted, so none after `newest_ms`, beyond which
    /// every one is refused (forgetting through one would keep the ring
    /// empty until then). Forgetting through another refused one loses
    /// only samples that could have stayed.
    #[inline]
    pub(super) fn skipped(timestamps: &[i64], newest_ms: i64) -> i64 {
        timestamps
            .iter()
            .fold(i64::MIN, |m, &t| if t <= newest_ms { m.max(t) } else { m })
    }

    /// Keeps an accepted sample and what it added to its minute's count
    /// and sum (`None` for nothing: a NaN, a counter's baseline).
    #[inline]
    pub(super) fn push(&mut self, ts: i64, v: f64, added: Option<f64>) {
        // Nearly always: after the newest, within an offset of `base` (a
        // time before `base` wraps to beyond it).
        let dt = ts.wrapping_sub(self.base) as u64;
        let newest = u64::from(self.dt[(usize::from(self.head) + RING - 1) % RING]);
        if self.len != 0 && dt >= newest && dt <= u64::from(u32::MAX) {
            return self.write(dt as u32, v, flags(v, added));
        }
        // Older than every one kept (a request sent again).
        if self.len != 0 && dt < u64::from(self.dt[self.at(0)]) {
            return;
        }
        self.push_late((ts, v, flags(v, added)));
    }

    /// The rest of [`Ring::push`]: a late sample, the first, or one too far
    /// after `base` for an offset.
    #[inline(never)]
    fn push_late(&mut self, (ts, v, flags): Entry) {
        let dt = ts.wrapping_sub(self.base);
        if self.len == 0 || dt > i64::from(u32::MAX) {
            return self.push_cold((ts, v, flags));
        }
        // `base` is at or before the oldest: older than every one kept.
        let Ok(dt) = u32::try_from(dt) else { return };
        if dt >= self.dt[self.at(0)] {
            self.insert(dt, v, flags);
        }
    }

    /// Forgets every sample at or before `ts`, and any pushed later at or
    /// before it: the newest sample of a request that was not pushed (the
    /// ring must not hold a sample older than one it lacks), or one whose
    /// increase was refused (the counter's baseline moved past the samples
    /// kept). `i64::MIN` forgets none.
    #[inline]
    pub(super) fn forget_through(&mut self, ts: i64) {
        if ts == i64::MIN {
            return;
        }
        while self.len > 0 && self.base + i64::from(self.dt[self.at(0)]) <= ts {
            self.len -= 1;
        }
        if self.len == 0 {
            self.base = self.base.max(ts.saturating_add(1));
        }
    }

    /// The array index of the `k`th sample, oldest first.
    #[inline]
    fn at(&self, k: usize) -> usize {
        (usize::from(self.head) + RING - usize::from(self.len) + k) % RING
    }

    /// Writes a sample `dt` after `base` at `head`, over the oldest.
    #[inline]
    fn write(&mut self, dt: u32, v: f64, flags: u8) {
        let i = usize::from(self.head) % RING;
        self.v[i] = v;
        self.dt[i] = dt;
        self.flags[i] = flags;
        self.head = ((i + 1) % RING) as u8;
        self.len += u8::from(usize::from(self.len) < RING);
    }

    /// A late sample, at or after the oldest kept: written as the newest
    /// (over the oldest, when full) and moved down past every later one.
    /// Of two at one millisecond the one pushed later stays the newer.
    fn insert(&mut self, dt: u32, v: f64, flags: u8) {
        self.write(dt, v, flags);
        let mut k = usize::from(self.len) - 1;
        while k > 0 {
            let (a, b) = (self.at(k - 1), self.at(k));
            if self.dt[a] <= self.dt[b] {
                break;
            }
            self.dt.swap(a, b);
            self.v.swap(a, b);
            self.flags.swap(a, b);
            k -= 1;
        }
    }

    /// The samples, oldest first.
    fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..usize::from(self.len)).map(|k| {
            let i = self.at(k);
            (self.base + i64::from(self.dt[i]), self.v[i], self.flags[i])
        })
    }

    /// The first sample (unless older than what was forgotten), or one
    /// too far after `base` for an offset: the samples kept anew from
    /// index 0, with `base` at the oldest, those too far before the new
    /// one left out.
    #[cold]
    fn push_cold(&mut self, (ts, v, flags): Entry) {
        if self.len == 0 && ts < self.base {
            return;
        }
        let mut kept = [(0, 0.0, 0); RING];
        let mut n = 0;
        for e in self.entries().filter(|e| ts - e.0 <= i64::from(u32::MAX)) {
            // The newest RING - 1 of them, with the new one.
            if n == RING - 1 {
                kept.copy_within(1.., 0);
                n -= 1;
            }
            kept[n] = e;
            n += 1;
        }
        kept[n] = (ts, v, flags);
        *self = Ring::EMPTY;
        self.base = kept[0].0;
        for &(ts, v, flags) in &kept[..=n] {
            self.write((ts - self.base) as u32, v, flags);
        }
    }

    /// The samples for a read of a series of `kind`, with what each added
    /// to its minute: a cumulative counter's increase from the sample
    /// before it (the previous number: a NaN moves no baseline).
    pub(super) fn snapshot(&self, kind: SampleKind) -> RecentSamples {
        let mut prev: Option<f64> = None;
        let samples = self
            .entries()
            .map(|(ts, v, flags)| {
                let added = (flags & COUNTED != 0).then(|| match kind {
                    SampleKind::CumulativeCounter if flags & WHOLE != 0 => v,
                    SampleKind::CumulativeCounter => prev.map_or(f64::NAN, |p| v - p),
                    _ => v,
                });
                if !v.is_nan() {
                    prev = Some(v);
                }
                RecentSample { ts, v, added }
            })
            .collect();
        RecentSamples::new(samples)
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
