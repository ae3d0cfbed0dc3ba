//! The expectation: per series and minute, the slot `{n, sum, min, max}` the
//! daemon must hold given what it acknowledged.
//!
//! Only samples of acknowledged requests are folded, minus those the
//! response rejected. Cumulative counters are turned into deltas exactly as
//! the daemon does: the first accepted sample of a series is only a
//! baseline (accepted, but in no slot); after that each sample adds
//! `v − previous` if the value did not go down, and `v` if it did (a reset:
//! the restarted process counted `v` since). The daemon keeps that baseline
//! in memory per series, so this assumes the series were new to the daemon
//! when the run began and that it was not restarted during the run.
//!
//! A series whose fate the loadgen cannot know (a request that failed after
//! it may have been applied, a truncated rejection list) is marked
//! *ambiguous* and left out of verification rather than guessed.

use crate::batch::{Plan, Timeline, WorkerSeries};
use crate::fleet::{Fleet, Kind};

/// One expected minute slot. `abs_sum` (Σ|xᵢ|) bounds the rounding error of
/// `sum`; see `verify`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpSlot {
    pub n: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub abs_sum: f64,
}

impl ExpSlot {
    fn of(v: f64) -> ExpSlot {
        ExpSlot {
            n: 1,
            sum: v,
            min: v,
            max: v,
            abs_sum: v.abs(),
        }
    }

    fn add(&mut self, v: f64) {
        self.n += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.abs_sum += v.abs();
    }
}

/// What one series should look like in the daemon.
#[derive(Debug, Clone, Default)]
pub struct SeriesExpect {
    /// Last accepted cumulative value: the base of the next delta.
    last_cumulative: Option<f64>,
    /// `(minute start in Unix seconds, slot)`, ascending (samples arrive in
    /// time order, so this is nearly always an append).
    pub slots: Vec<(i64, ExpSlot)>,
    pub ambiguous: bool,
}

impl SeriesExpect {
    /// Folds one accepted sample.
    pub fn fold(&mut self, kind: Kind, ts_ms: i64, v: f64) {
        let value = match kind {
            Kind::Gauge | Kind::Delta => v,
            Kind::Cumulative => {
                let last = self.last_cumulative.replace(v);
                match last {
                    None => return,
                    Some(prev) if v >= prev => v - prev,
                    Some(_) => v,
                }
            }
        };
        let minute = ts_ms.div_euclid(60_000) * 60;
        match self.slots.iter_mut().rev().find(|(m, _)| *m == minute) {
            Some((_, slot)) => slot.add(value),
            None => {
                let at = self.slots.partition_point(|(m, _)| *m < minute);
                self.slots.insert(at, (minute, ExpSlot::of(value)));
            }
        }
    }
}

/// Which samples of a message the daemon rejected.
#[derive(Debug, Clone, Default)]
pub struct Rejected {
    /// `(series, sample index)`; `None` = the whole series group.
    entries: Vec<(usize, Option<u32>)>,
}

impl Rejected {
    pub fn add(&mut self, lin: usize, sample: Option<u32>) {
        self.entries.push((lin, sample));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn contains(&self, lin: usize, sample: u32) -> bool {
        // Rejections are rare (and capped per response): a scan is fine.
        self.entries
            .iter()
            .any(|&(l, s)| l == lin && s.is_none_or(|s| s == sample))
    }
}

/// The expectation for one worker's series, indexed like [`WorkerSeries`].
#[derive(Debug, Clone)]
pub struct Expectation {
    pub series: Vec<SeriesExpect>,
}

impl Expectation {
    pub fn new(series: usize) -> Expectation {
        Expectation {
            series: vec![SeriesExpect::default(); series],
        }
    }

    /// Folds an acknowledged message: every sample of `plan` except the
    /// rejected ones. Values are recomputed from the fleet: they are pure
    /// functions, bit for bit the ones that were sent.
    pub fn commit(
        &mut self,
        fleet: &Fleet,
        tl: &Timeline,
        ws: &WorkerSeries,
        plan: &Plan,
        rejected: &Rejected,
    ) {
        for lin in plan.first..plan.first + plan.len {
            let (src, j) = ws.at(lin);
            let kind = fleet.kind(fleet.column(j).0);
            let se = &mut self.series[lin];
            for (i, k) in plan.tick_range().enumerate() {
                if !rejected.is_empty() && rejected.contains(lin, i as u32) {
                    continue;
                }
                se.fold(kind, tl.ts_ms(src, k), fleet.value(src, j, k));
            }
        }
    }

    /// Marks every series of `plan` as unknowable.
    pub fn mark_ambiguous(&mut self, plan: &Plan) {
        for se in &mut self.series[plan.first..plan.first + plan.len] {
            se.ambiguous = true;
        }
    }

    /// The expectation of a whole run in which the daemon accepted every
    /// sample: what `--verify-only` checks against.
    pub fn regenerate(fleet: &Fleet, tl: &Timeline, ws: &WorkerSeries) -> Expectation {
        let mut e = Expectation::new(ws.len());
        let all = Plan {
            tick0: 0,
            ticks: tl.ticks as u32,
            first: 0,
            len: ws.len(),
        };
        e.commit(fleet, tl, ws, &all, &Rejected::default());
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_and_deltas_fold_per_minute() {
        let mut se = SeriesExpect::default();
        se.fold(Kind::Gauge, 60_000, 2.0);
        se.fold(Kind::Gauge, 119_999, -1.0);
        se.fold(Kind::Gauge, 120_000, 5.0);
        assert_eq!(se.slots.len(), 2);
        let (m, s) = se.slots[0];
        assert_eq!(m, 60);
        assert_eq!(
            (s.n, s.sum, s.min, s.max, s.abs_sum),
            (2, 1.0, -1.0, 2.0, 3.0)
        );
        // A late sample lands in its own, earlier minute.
        se.fold(Kind::Gauge, 0, 7.0);
        assert_eq!(se.slots[0].0, 0);
    }

    #[test]
    fn cumulative_counters_mirror_the_daemon() {
        let mut se = SeriesExpect::default();
        // Baseline, +5, +0, reset to 3 (counts 3), +4.
        for (t, v) in [(0, 100.0), (1, 105.0), (2, 105.0), (3, 3.0), (4, 7.0)] {
            se.fold(Kind::Cumulative, t * 1000, v);
        }
        let s = se.slots[0].1;
        assert_eq!((s.n, s.sum, s.min, s.max), (4, 12.0, 0.0, 5.0));
    }

    #[test]
    fn rejected_samples_are_left_out() {
        let fleet = Fleet::new(crate::fleet::FleetSpec {
            sources: 2,
            metrics: 1,
            seed: 3,
            kinds: "gauge=1".parse().unwrap(),
            source_prefix: "s".into(),
            reset_every: 0,
            labels: Default::default(),
        })
        .unwrap();
        let tl = Timeline {
            start_ms: 0,
            rate: 1.0,
            ticks: 3,
            sources: 2,
        };
        let ws = WorkerSeries::all(2, 1);
        let plan = Plan {
            tick0: 0,
            ticks: 3,
            first: 0,
            len: 2,
        };
        let mut rej = Rejected::default();
        rej.add(0, Some(1));
        rej.add(1, None);
        let mut e = Expectation::new(2);
        e.commit(&fleet, &tl, &ws, &plan, &rej);
        assert_eq!(e.series[0].slots[0].1.n, 2);
        assert!(e.series[1].slots.is_empty());
        let full = Expectation::regenerate(&fleet, &tl, &ws);
        assert_eq!(full.series[1].slots[0].1.n, 3);
    }
}
