//! Batches: which samples go in one message ([`Plan`]), how a plan becomes a
//! `PushRequest`, and how a response's rejections map back to series.
//!
//! A plan is a contiguous range of one worker's series over a contiguous
//! range of ticks. Series are laid out source-major, so a plan turns into
//! one `SourceBatch` per source with one `SeriesSamples` (packed timestamps
//! and values, and the series' labels) per series, as the protocol intends. Plans are small and
//! `Copy`: the message itself is rebuilt from the fleet whenever needed
//! (accounting of the ack, `--verify-only`); `wire` encodes it.

use tally_proto::v1 as pb;

use crate::fleet::Fleet;

/// The samples of one message: the worker's series `first..first + len`
/// at ticks `tick0..tick0 + ticks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub tick0: u64,
    pub ticks: u32,
    pub first: usize,
    pub len: usize,
}

impl Plan {
    pub fn samples(&self) -> u64 {
        self.len as u64 * self.ticks as u64
    }

    pub fn tick_range(&self) -> std::ops::Range<u64> {
        self.tick0..self.tick0 + self.ticks as u64
    }
}

/// When samples are stamped: tick `k` of source `i` (of `n`) is at
/// `start + (k + i/n) / rate` seconds, so sources are spread evenly over
/// each tick like independent agents, and a series' samples are strictly
/// increasing in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeline {
    pub start_ms: i64,
    /// Samples per series per second.
    pub rate: f64,
    /// Samples per series in the run.
    pub ticks: u64,
    /// Sources in the fleet, for the spread.
    pub sources: usize,
}

impl Timeline {
    pub fn ts_ms(&self, source: usize, tick: u64) -> i64 {
        let at = (tick as f64 + source as f64 / self.sources as f64) * 1000.0 / self.rate;
        self.start_ms + at.floor() as i64
    }

    /// Offset of a sample from the start, in seconds, for scheduling.
    pub fn offset_s(&self, source: usize, tick: u64) -> f64 {
        (tick as f64 + source as f64 / self.sources as f64) / self.rate
    }

    /// Just past the last sample: the end of the run's time range.
    pub fn end_ms(&self) -> i64 {
        self.start_ms + (self.ticks as f64 * 1000.0 / self.rate).ceil() as i64
    }
}

/// The series one worker sends: the sources `i` with `i % workers == w`,
/// each with all its series (metrics × label sets). Each series belongs to
/// exactly one worker, which sends its samples in time order, one request
/// at a time: that is what keeps cumulative counters in order across
/// batches.
#[derive(Debug, Clone)]
pub struct WorkerSeries {
    pub sources: Vec<usize>,
    /// Series per source ([`Fleet::per_source`]).
    pub per_source: usize,
}

impl WorkerSeries {
    pub fn partition(sources: usize, per_source: usize, workers: usize) -> Vec<WorkerSeries> {
        (0..workers)
            .map(|w| WorkerSeries {
                sources: (w..sources).step_by(workers).collect(),
                per_source,
            })
            .collect()
    }

    /// Every source, as one partition (for `--verify-only`).
    pub fn all(sources: usize, per_source: usize) -> WorkerSeries {
        WorkerSeries {
            sources: (0..sources).collect(),
            per_source,
        }
    }

    pub fn len(&self) -> usize {
        self.sources.len() * self.per_source
    }

    /// `(fleet source, series of that source)` of the worker's series `lin`.
    pub fn at(&self, lin: usize) -> (usize, usize) {
        (self.sources[lin / self.per_source], lin % self.per_source)
    }

    /// The message for `plan`, built with the generated types: the
    /// reference that `wire::encode` must match byte for byte, and what the
    /// other protocols convert from.
    pub fn build(&self, fleet: &Fleet, tl: &Timeline, plan: &Plan) -> pb::PushRequest {
        let m = self.per_source;
        let end = plan.first + plan.len;
        let mut sources = Vec::with_capacity(plan.len / m + 2);
        let mut lin = plan.first;
        while lin < end {
            let src = self.sources[lin / m];
            let src_end = ((lin / m + 1) * m).min(end);
            let series = (lin..src_end)
                .map(|l| {
                    let j = l % m;
                    let (metric, set) = fleet.column(j);
                    pb::SeriesSamples {
                        labels: fleet
                            .labels()
                            .pairs(set)
                            .into_iter()
                            .map(|(name, value)| pb::Label {
                                name: name.to_owned(),
                                value,
                            })
                            .collect(),
                        metric: fleet.metric_name(metric).to_owned(),
                        kind: fleet.kind(metric).proto() as i32,
                        timestamps_ms: plan.tick_range().map(|k| tl.ts_ms(src, k)).collect(),
                        values: plan.tick_range().map(|k| fleet.value(src, j, k)).collect(),
                        start_times_ms: Vec::new(),
                    }
                })
                .collect();
            sources.push(pb::SourceBatch {
                source: fleet.source_name(src).to_owned(),
                series,
                groups: Vec::new(),
            });
            lin = src_end;
        }
        pb::PushRequest { sources }
    }

    /// The worker's series named by a rejection's `(source_index,
    /// series_index)` in the message built from `plan`, if it is one.
    pub fn locate(&self, plan: &Plan, source_index: u32, series_index: u32) -> Option<usize> {
        let m = self.per_source;
        let (si, mi) = (source_index as usize, series_index as usize);
        // The first source of a plan may start mid-way through its series.
        let lin = if si == 0 {
            plan.first + mi
        } else {
            (plan.first / m + si) * m + mi
        };
        let within_source = if si == 0 {
            plan.first % m + mi < m
        } else {
            mi < m
        };
        (within_source && lin < plan.first + plan.len).then_some(lin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::FleetSpec;

    fn fleet() -> Fleet {
        Fleet::new(FleetSpec {
            sources: 5,
            metrics: 3,
            seed: 1,
            kinds: "gauge=1,delta=1,cumulative=1".parse().unwrap(),
            source_prefix: "src-".into(),
            reset_every: 0,
            labels: Default::default(),
        })
        .unwrap()
    }

    #[test]
    fn partition_covers_every_series_once() {
        let parts = WorkerSeries::partition(5, 3, 2);
        assert_eq!(parts[0].sources, vec![0, 2, 4]);
        assert_eq!(parts[1].sources, vec![1, 3]);
        assert_eq!(parts.iter().map(WorkerSeries::len).sum::<usize>(), 15);
        assert_eq!(parts[1].at(4), (3, 1));
    }

    #[test]
    fn messages_group_by_source_with_packed_arrays() {
        let f = fleet();
        let tl = Timeline {
            start_ms: 1_000_000,
            rate: 1.0,
            ticks: 10,
            sources: 5,
        };
        let ws = WorkerSeries::partition(5, 3, 2).remove(0);
        // Series 2..7: the last metric of source 0, all of source 2, one of source 4.
        let plan = Plan {
            tick0: 3,
            ticks: 2,
            first: 2,
            len: 5,
        };
        let req = ws.build(&f, &tl, &plan);
        let names: Vec<_> = req.sources.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(names, ["src-000001", "src-000003", "src-000005"]);
        let counts: Vec<_> = req.sources.iter().map(|s| s.series.len()).collect();
        assert_eq!(counts, [1, 3, 1]);
        let s = &req.sources[1].series[2];
        assert_eq!(s.metric, "m_0003");
        // Source index 2 of 5: 0.4 s into each tick.
        assert_eq!(s.timestamps_ms, vec![1_003_400, 1_004_400]);
        assert_eq!(s.values, vec![f.value(2, 2, 3), f.value(2, 2, 4)]);
        assert_eq!(ws.locate(&plan, 0, 0), Some(2));
        assert_eq!(ws.locate(&plan, 1, 2), Some(5));
        assert_eq!(ws.locate(&plan, 2, 0), Some(6));
        assert_eq!(ws.locate(&plan, 2, 1), None);
        assert_eq!(ws.locate(&plan, 0, 1), None);
        assert_eq!(plan.samples(), 10);
    }

    #[test]
    fn timeline_spreads_sources_and_ends_after_the_last_tick() {
        let tl = Timeline {
            start_ms: 0,
            rate: 2.0,
            ticks: 4,
            sources: 4,
        };
        assert_eq!(tl.ts_ms(0, 0), 0);
        assert_eq!(tl.ts_ms(1, 0), 125);
        assert_eq!(tl.ts_ms(3, 3), 1875);
        assert_eq!(tl.end_ms(), 2000);
    }
}
