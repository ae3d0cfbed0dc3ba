//! Pacing: which plan a worker sends next, and when.
//!
//! - As fast as possible (`--max`): time-major over the simulated range.
//!   Each window of `--span` ticks goes out for all of the worker's series
//!   before the next window starts, so every series' samples leave in time
//!   order however the series are cut into batches.
//! - Real time: tick `k` of source `i` is due at `(k + i/n) / rate` seconds
//!   after the start, so the fleet's sources are spread over each second
//!   like real agents. The worker sleeps until the next source is due, then
//!   sends everything due by now (up to `--batch` samples), so a worker
//!   that fell behind catches up with bigger batches instead of drifting.

use std::time::Duration;

use tokio::time::Instant;

use crate::batch::{Plan, Timeline, WorkerSeries};

/// The time-major walk of `--max`.
#[derive(Debug)]
pub struct MaxSchedule {
    ticks: u64,
    span: u32,
    per_message: usize,
    series: usize,
    tick0: u64,
    first: usize,
}

impl MaxSchedule {
    /// `batch` samples per message at most; `span` ticks per series per
    /// message (at most `batch`).
    pub fn new(series: usize, ticks: u64, batch: usize, span: u32) -> MaxSchedule {
        let span = span.max(1);
        MaxSchedule {
            ticks,
            span,
            per_message: (batch / span as usize).max(1),
            series,
            tick0: 0,
            first: 0,
        }
    }
}

impl Iterator for MaxSchedule {
    type Item = Plan;

    fn next(&mut self) -> Option<Plan> {
        if self.tick0 >= self.ticks || self.series == 0 {
            return None;
        }
        let ticks = (self.ticks - self.tick0).min(self.span as u64) as u32;
        let len = self.per_message.min(self.series - self.first);
        let plan = Plan {
            tick0: self.tick0,
            ticks,
            first: self.first,
            len,
        };
        self.first += len;
        if self.first == self.series {
            self.first = 0;
            self.tick0 += ticks as u64;
        }
        Some(plan)
    }
}

/// The wall-clock schedule of a real-time run for one worker.
#[derive(Debug)]
pub struct RealTimeSchedule {
    t0: Instant,
    tl: Timeline,
    ws: WorkerSeries,
    batch: usize,
    tick: u64,
    lin: usize,
}

/// A plan that is due, and how late it is being sent.
#[derive(Debug, Clone, Copy)]
pub struct Due {
    pub plan: Plan,
    pub lag: Duration,
}

impl RealTimeSchedule {
    /// `t0` is the instant of `tl.start_ms`.
    pub fn new(t0: Instant, tl: Timeline, ws: WorkerSeries, batch: usize) -> RealTimeSchedule {
        RealTimeSchedule {
            t0,
            tl,
            ws,
            batch: batch.max(1),
            tick: 0,
            lin: 0,
        }
    }

    fn due_at(&self, local_source: usize, tick: u64) -> Instant {
        let src = self.ws.sources[local_source];
        self.t0 + Duration::from_secs_f64(self.tl.offset_s(src, tick))
    }

    /// When the next plan is due; None when the run is over.
    pub fn next_due(&self) -> Option<Instant> {
        (self.tick < self.tl.ticks && self.ws.len() > 0)
            .then(|| self.due_at(self.lin / self.ws.per_source, self.tick))
    }

    /// The plan of everything due by `now`; call once `next_due` has passed.
    pub fn take(&mut self, now: Instant) -> Option<Due> {
        let due = self.next_due()?;
        let m = self.ws.per_source;
        let n_local = self.ws.sources.len();
        let first = self.lin;
        let cap = first + self.batch;
        // Always at least the rest of the first due source (up to the batch).
        let mut end = ((first / m + 1) * m).min(cap);
        while end < cap && end / m < n_local && self.due_at(end / m, self.tick) <= now {
            end = ((end / m + 1) * m).min(cap);
        }
        end = end.min(self.ws.len());
        let plan = Plan {
            tick0: self.tick,
            ticks: 1,
            first,
            len: end - first,
        };
        self.lin = end;
        if self.lin == self.ws.len() {
            self.lin = 0;
            self.tick += 1;
        }
        Some(Due {
            plan,
            lag: now.saturating_duration_since(due),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_walks_time_major_in_batches() {
        let plans: Vec<Plan> = MaxSchedule::new(5, 3, 4, 1).collect();
        // Per tick: series 0..4, then 4..5.
        assert_eq!(plans.len(), 6);
        assert_eq!(
            plans[0],
            Plan {
                tick0: 0,
                ticks: 1,
                first: 0,
                len: 4
            }
        );
        assert_eq!(plans[1].first, 4);
        assert_eq!(plans[2].tick0, 1);
        assert_eq!(plans.iter().map(Plan::samples).sum::<u64>(), 15);
    }

    #[test]
    fn max_with_span_keeps_each_series_in_order() {
        let plans: Vec<Plan> = MaxSchedule::new(3, 5, 4, 2).collect();
        assert_eq!(plans.iter().map(Plan::samples).sum::<u64>(), 15);
        let mut next_tick = [0u64; 3];
        for p in &plans {
            assert!(p.samples() <= 4);
            for (s, next) in next_tick.iter_mut().enumerate().skip(p.first).take(p.len) {
                assert_eq!(p.tick0, *next, "series {s} out of order");
                *next = p.tick0 + p.ticks as u64;
            }
        }
        assert_eq!(next_tick, [5, 5, 5]);
    }

    #[test]
    fn real_time_sends_sources_when_due() {
        let tl = Timeline {
            start_ms: 0,
            rate: 1.0,
            ticks: 2,
            sources: 4,
        };
        let t0 = Instant::now();
        let ws = WorkerSeries::all(4, 2);
        let mut s = RealTimeSchedule::new(t0, tl, ws, 100);
        assert_eq!(s.next_due(), Some(t0));
        // At 0.6 s sources 0, 1 and 2 (due at 0, 0.25, 0.5 s) are due.
        let d = s.take(t0 + Duration::from_millis(600)).unwrap();
        assert_eq!((d.plan.first, d.plan.len), (0, 6));
        assert_eq!(d.lag, Duration::from_millis(600));
        assert_eq!(s.next_due(), Some(t0 + Duration::from_millis(750)));
        // Far behind: the rest of tick 0 only; tick 1 starts a new plan.
        let d = s.take(t0 + Duration::from_secs(5)).unwrap();
        assert_eq!((d.plan.tick0, d.plan.first, d.plan.len), (0, 6, 2));
        let d = s.take(t0 + Duration::from_secs(5)).unwrap();
        assert_eq!((d.plan.tick0, d.plan.first, d.plan.len), (1, 0, 8));
        assert!(s.next_due().is_none());
    }

    #[test]
    fn real_time_splits_a_source_bigger_than_the_batch() {
        let tl = Timeline {
            start_ms: 0,
            rate: 1.0,
            ticks: 1,
            sources: 1,
        };
        let t0 = Instant::now();
        let mut s = RealTimeSchedule::new(t0, tl, WorkerSeries::all(1, 5), 2);
        let lens: Vec<usize> = std::iter::from_fn(|| s.take(t0).map(|d| d.plan.len)).collect();
        assert_eq!(lens, [2, 2, 1]);
    }
}
