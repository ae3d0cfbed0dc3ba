//! A series' newest raw samples, a fixed few beside its minute slots, so a
//! read at an instant inside a minute can take the minute's samples after
//! that instant back out (see `model::RecentSamples`). Written once per
//! accepted sample on the ingest hot path: an in-order sample is a few
//! stores into fixed arrays, no allocation and no search; a late one
//! takes a cold path.
//!
//! Memory only: after a restart (or once the series is forgotten) the
//! ring starts empty, and reads answer as they would without it until
//! the series' new samples cover the instant asked.

use crate::model::{RecentSample, RecentSamples, SampleKind};

/// Samples kept per series. Measured: the differential test's instants
/// 3 s before now, on 1 s scrapes delivered every half second, need the
/// newest sample at or before the instant and the two or three after it;
/// four do, in 64 bytes (one cache line more per series).
pub(super) const RING: usize = 4;
// One bit a sample in `counted` and `reset`.
const _: () = assert!(RING <= 8);

/// The newest [`RING`] samples in time order, the oldest overwritten:
/// times as offsets from `base`, so a sample takes 12 bytes. Every
/// accepted sample at or after the oldest kept is here (a late sample
/// older than that is not kept, and need not be), except a sample at the
/// oldest's very millisecond that was overwritten before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    base: i64,
    v: [f64; RING],
    dt: [u32; RING],
    /// Where the next sample goes.
    head: u8,
    len: u8,
    /// Bit `i`: sample `i` entered its minute's count and sum.
    counted: u8,
    /// Bit `i`: a cumulative counter's sample `i` was a reset (its
    /// increase is its value).
    reset: u8,
}

/// One sample as the ring keeps it: time, value, counted, reset.
type Entry = (i64, f64, bool, bool);

impl Default for Ring {
    fn default() -> Ring {
        Ring::EMPTY
    }
}

impl Ring {
    pub(super) const EMPTY: Ring = Ring {
        base: 0,
        v: [0.0; RING],
        dt: [0; RING],
        head: 0,
        len: 0,
        counted: 0,
        reset: 0,
    };

    /// Keeps an accepted sample: `counted` when it entered its minute's
    /// count and sum, `reset` when a cumulative counter's increase is its
    /// whole value.
    #[inline]
    pub(super) fn push(&mut self, ts: i64, v: f64, counted: bool, reset: bool) {
        let dt = ts.wrapping_sub(self.base);
        if self.len == 0 || ts < self.newest_ts() || !(0..=i64::from(u32::MAX)).contains(&dt) {
            return self.push_cold((ts, v, counted, reset));
        }
        self.write(dt as u32, v, counted, reset);
    }

    /// Writes a sample `dt` after `base` at `head`, over the oldest.
    #[inline]
    fn write(&mut self, dt: u32, v: f64, counted: bool, reset: bool) {
        let i = usize::from(self.head);
        self.v[i] = v;
        self.dt[i] = dt;
        let bit = 1u8 << i;
        self.counted = (self.counted & !bit) | (u8::from(counted) << i);
        self.reset = (self.reset & !bit) | (u8::from(reset) << i);
        self.head = ((i + 1) % RING) as u8;
        self.len = self.len.saturating_add(1).min(RING as u8);
    }

    /// A byte on the ring's cache line (the entry's fourth), for warming
    /// it before a fold.
    #[inline]
    pub(super) fn touch(&self) -> u8 {
        self.len
    }

    /// Forgets every sample: what follows is kept afresh.
    pub(super) fn clear(&mut self) {
        *self = Ring::EMPTY;
    }

    fn newest_ts(&self) -> i64 {
        let i = (usize::from(self.head) + RING - 1) % RING;
        self.base + i64::from(self.dt[i])
    }

    /// The samples, oldest first.
    fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        let first = (usize::from(self.head) + RING - usize::from(self.len)) % RING;
        (0..usize::from(self.len)).map(move |k| {
            let i = (first + k) % RING;
            (
                self.base + i64::from(self.dt[i]),
                self.v[i],
                self.counted & (1 << i) != 0,
                self.reset & (1 << i) != 0,
            )
        })
    }

    /// The first sample, a late one, or one too far from `base`: the
    /// samples sorted anew with it, the newest [`RING`] kept.
    #[cold]
    fn push_cold(&mut self, e: Entry) {
        let mut all: smallvec::SmallVec<[Entry; RING + 1]> = self.entries().collect();
        if all.first().is_some_and(|o| e.0 < o.0) {
            // Older than everything kept: what is kept still holds every
            // sample from its oldest on.
            return;
        }
        let at = all.partition_point(|o| o.0 <= e.0);
        all.insert(at, e);
        let newest = all.last().map_or(e.0, |o| o.0);
        let keep = all
            .iter()
            .rev()
            .take(RING)
            .take_while(|o| newest - o.0 <= i64::from(u32::MAX))
            .count();
        self.clear();
        self.base = all[all.len() - keep].0;
        for &(ts, v, counted, reset) in &all[all.len() - keep..] {
            self.write((ts - self.base) as u32, v, counted, reset);
        }
    }

    /// The samples for a read of a series of `kind`, with what each added
    /// to its minute: a cumulative counter's increase from the sample
    /// before it (the previous number: a NaN moves no baseline).
    pub(super) fn snapshot(&self, kind: SampleKind) -> RecentSamples {
        let mut prev: Option<f64> = None;
        let samples = self
            .entries()
            .map(|(ts, v, counted, reset)| {
                let added = counted.then(|| match kind {
                    SampleKind::CumulativeCounter if reset => v,
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
