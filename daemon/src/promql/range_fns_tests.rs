use super::*;
use crate::promql::value::{sample_slot, Labels, Lead};
use proptest::prelude::*;

const M: i64 = 60_000;

/// Minute slots of `kind` from (minute, samples at seconds into it).
fn minutes(kind: PointKind, data: &[(i64, &[(i64, f64)])]) -> RangeSeries {
    let mut rs = RangeSeries {
        labels: Labels::empty(),
        kind,
        width_ms: M,
        t: Vec::new(),
        slots: Vec::new(),
        lead: None,
        tail: None,
    };
    for (minute, samples) in data {
        let mut slot = Slot::EMPTY;
        for &(s, v) in *samples {
            slot.add(minute * M + s * 1000, v);
        }
        rs.t.push(minute * M);
        rs.slots.push(slot);
    }
    rs
}

fn at(f: RangeFn, rs: &RangeSeries, t: i64, range: i64) -> Option<f64> {
    let w = window(rs, t, range);
    apply(f, rs, &[w], &[t], range, &Params::default()).unwrap()[0]
}

#[test]
fn windows_hold_the_slots_that_end_inside_them() {
    let rs = minutes(
        PointKind::Gauge,
        &[(10, &[(0, 1.0)]), (11, &[(0, 2.0)]), (12, &[(0, 4.0)])],
    );
    // At 13:00 a 2-minute window holds minutes 11 and 12; at 13:30 minute
    // 13 too, which has no sample.
    assert_eq!(at(RangeFn::Sum, &rs, 13 * M, 2 * M), Some(6.0));
    assert_eq!(at(RangeFn::Sum, &rs, 13 * M + 30_000, 2 * M), Some(6.0));
    // At 12:59.999 the window holds minutes 10 and 11 and minute 12 up to
    // its newest sample, at 12:00, less the share of minute 10 before the
    // range, (10:59.999, 12:59.999]: all of it but a millisecond, so the
    // sum is nearly Prometheus' 2 + 4.
    let partial = window(&rs, 13 * M - 1, 2 * M);
    assert_eq!((partial.lo, partial.hi, partial.covered_ms), (0, 3, 2 * M));
    assert_eq!(partial.lead_ms, M - 1);
    let sum = at(RangeFn::Sum, &rs, 13 * M - 1, 2 * M).unwrap();
    assert!((sum - 6.0).abs() < 1e-3, "{sum}");
    // Half way into minute 12, half of minute 10 is before the range: 2.5
    // samples summing to 6.5 from 10:30 to 12:00, minute 10's sample
    // shared out evenly. No sample comes after 12:00 up to 12:30, so the
    // window is measured whole: counted, not scaled.
    let sum = at(RangeFn::Sum, &rs, 12 * M + 30_000, 2 * M).unwrap();
    assert!((sum - 6.5).abs() < 1e-9, "{sum}");
    let n = at(RangeFn::Count, &rs, 12 * M + 30_000, 2 * M).unwrap();
    assert!((n - 2.5).abs() < 1e-9, "{n}");
    assert_eq!(at(RangeFn::Last, &rs, 13 * M - 1, 2 * M), Some(4.0));
    assert_eq!(at(RangeFn::Count, &rs, 10 * M, M), None);
}

#[test]
fn only_the_newest_evaluation_time_reads_its_own_minute() {
    let rs = minutes(
        PointKind::Gauge,
        &[(10, &[(0, 1.0)]), (11, &[(0, 2.0)]), (12, &[(0, 4.0)])],
    );
    // A graph at 15 s steps: its points inside minute 12 but the last read
    // minutes 10 and 11 (whole); the last reads minute 12 as well.
    let reads = [12 * M + 15_000, 12 * M + 30_000, 12 * M + 45_000];
    let wins = windows(&rs, &reads, 2 * M);
    assert_eq!((wins[0].lo, wins[0].hi, wins[0].partial), (0, 2, false));
    assert_eq!((wins[1].lo, wins[1].hi, wins[1].partial), (0, 2, false));
    assert_eq!((wins[2].lo, wins[2].hi, wins[2].partial), (0, 3, true));
    assert_eq!(wins[2], window(&rs, reads[2], 2 * M));
}

/// A counter increasing by 1 a second and a gauge sampled every second,
/// evaluated at every second across three minutes, as the minute in
/// progress fills: no dip at any minute's start, and a sliding answer
/// within a few percent of Prometheus' over the same samples.
#[test]
fn a_partial_minute_never_reads_as_a_dip() {
    let per_second = |kind: PointKind| {
        let data: Vec<(i64, Vec<(i64, f64)>)> = (0..12)
            .map(|m| {
                (
                    m,
                    (0..60)
                        .map(|s| (s, if kind == PointKind::Gauge { 5.0 } else { 1.0 }))
                        .collect(),
                )
            })
            .collect();
        let refs: Vec<(i64, &[(i64, f64)])> = data.iter().map(|(m, s)| (*m, &s[..])).collect();
        minutes(kind, &refs)
    };
    let counter = per_second(PointKind::Delta);
    let gauge = per_second(PointKind::Gauge);
    for now_s in 6 * 60..8 * 60 {
        let now = now_s * 1000;
        // What memory holds at `now`: the minute in progress up to `now`.
        let cut = |rs: &RangeSeries| {
            let mut rs = rs.clone();
            let own = rs.t.partition_point(|&t| t <= now) - 1;
            rs.t.truncate(own + 1);
            rs.slots.truncate(own + 1);
            let mut slot = Slot::EMPTY;
            for s in 0..=(now - rs.t[own]) / 1000 {
                slot.add(
                    rs.t[own] + s * 1000,
                    if rs.kind == PointKind::Gauge {
                        5.0
                    } else {
                        1.0
                    },
                );
            }
            rs.slots[own] = slot;
            rs
        };
        let (c, g) = (cut(&counter), cut(&gauge));
        for range in [M, 5 * M] {
            let rate = at(RangeFn::Rate, &c, now, range).unwrap();
            assert!(
                (rate - 1.0).abs() < 0.02,
                "rate {rate} at {now_s}s over {range}"
            );
            let inc = at(RangeFn::Increase, &c, now, range).unwrap();
            let want = (range / 1000) as f64;
            assert!(
                (inc / want - 1.0).abs() < 0.02,
                "increase {inc} at {now_s}s"
            );
            let count = at(RangeFn::Count, &g, now, range).unwrap();
            assert!(
                (count / want - 1.0).abs() < 0.02,
                "count {count} at {now_s}s"
            );
            assert_eq!(at(RangeFn::Avg, &g, now, range), Some(5.0));
        }
    }
}

#[test]
fn gauges_reads_merged_slots_and_counters_from_their_increases() {
    let g = minutes(
        PointKind::Gauge,
        &[(0, &[(10, 1.0), (50, 5.0)]), (1, &[(10, 3.0)])],
    );
    assert_eq!(at(RangeFn::Avg, &g, 2 * M, 2 * M), Some(3.0));
    assert_eq!(at(RangeFn::Min, &g, 2 * M, 2 * M), Some(1.0));
    assert_eq!(at(RangeFn::Max, &g, 2 * M, 2 * M), Some(5.0));
    assert_eq!(at(RangeFn::Count, &g, 2 * M, 2 * M), Some(3.0));
    assert_eq!(at(RangeFn::Last, &g, 2 * M, 2 * M), Some(3.0));
    // A cumulative counter's slots hold increases: rate is their sum over
    // the window, and *_over_time reads the raw last values.
    let mut c = minutes(
        PointKind::Cumulative,
        &[(0, &[(30, 6.0)]), (1, &[(30, 6.0)])],
    );
    c.slots[0].last = 106.0;
    c.slots[1].last = 112.0;
    assert_eq!(at(RangeFn::Increase, &c, 2 * M, 2 * M), Some(12.0));
    assert_eq!(at(RangeFn::Rate, &c, 2 * M, 2 * M), Some(0.1));
    assert_eq!(at(RangeFn::Max, &c, 2 * M, 2 * M), Some(112.0));
    assert_eq!(at(RangeFn::Avg, &c, 2 * M, 2 * M), Some(109.0));
    assert_eq!(at(RangeFn::Last, &c, 2 * M, 2 * M), Some(112.0));
    // irate: the last minute's increase over the time between the last
    // samples of the last two minutes (here 60 s).
    assert_eq!(at(RangeFn::Irate, &c, 2 * M, 2 * M), Some(0.1));
    assert_eq!(at(RangeFn::Idelta, &c, 2 * M, 2 * M), Some(6.0));
}

#[test]
fn a_gauges_rate_is_prometheus_rate_of_its_minute_samples() {
    // Last samples 10, 20, 30 at :00 of minutes 0..2: a 3-minute window
    // [0, 3m) extrapolates to its edges.
    let g = minutes(
        PointKind::Gauge,
        &[(0, &[(0, 10.0)]), (1, &[(0, 20.0)]), (2, &[(0, 30.0)])],
    );
    let pts = [(0, 10.0), (M, 20.0), (2 * M, 30.0)];
    let want = samples::extrapolated_rate(&pts, 0, 3 * M, 180.0, true, true);
    assert_eq!(at(RangeFn::Rate, &g, 3 * M, 3 * M), want);
    assert_eq!(at(RangeFn::Deriv, &g, 3 * M, 3 * M), Some(10.0 / 60.0));
    assert_eq!(at(RangeFn::Changes, &g, 3 * M, 3 * M), Some(2.0));
}

#[test]
fn subquery_samples_are_exact() {
    let mut rs = RangeSeries {
        labels: Labels::empty(),
        kind: PointKind::Samples,
        width_ms: 0,
        t: Vec::new(),
        slots: Vec::new(),
        lead: None,
        tail: None,
    };
    for i in 0..=5 {
        rs.push_sample(i * M, i as f64);
    }
    // Prometheus 2's closed window: both edges count.
    assert_eq!(at(RangeFn::Count, &rs, 5 * M, 5 * M), Some(6.0));
    assert_eq!(at(RangeFn::Sum, &rs, 5 * M, 2 * M), Some(12.0));
    assert_eq!(at(RangeFn::Rate, &rs, 5 * M, 5 * M), Some(5.0 / 300.0));
    let w = window(&rs, 5 * M, 5 * M);
    let q = apply(
        RangeFn::Quantile,
        &rs,
        &[w],
        &[5 * M],
        5 * M,
        &Params {
            first: Some(&[0.5]),
            second: None,
        },
    )
    .unwrap();
    assert_eq!(q, vec![Some(2.5)]);
    let bad = apply(
        RangeFn::Smoothing,
        &rs,
        &[w],
        &[5 * M],
        5 * M,
        &Params {
            first: Some(&[1.5]),
            second: Some(&[0.5]),
        },
    );
    assert!(bad.is_err());
    let _ = sample_slot(0, 0.0);
}

#[test]
fn merged_slots_serve_only_what_they_determine() {
    use PointKind::*;
    assert!(RangeFn::Rate.reads_merged_slots(Cumulative));
    assert!(RangeFn::Rate.reads_merged_slots(Delta));
    assert!(!RangeFn::Rate.reads_merged_slots(Gauge));
    assert!(RangeFn::Avg.reads_merged_slots(Gauge));
    assert!(!RangeFn::Avg.reads_merged_slots(Cumulative));
    assert!(RangeFn::Count.reads_merged_slots(Cumulative));
    assert!(!RangeFn::Count.reads_merged_slots(Samples));
    assert!(!RangeFn::Quantile.reads_merged_slots(Gauge));
    assert!(RangeFn::Last.keeps_name() && !RangeFn::Rate.keeps_name());
}

proptest! {
    /// The tree's merge of any window equals the plain merge, so long
    /// windows at fine steps give the same answers as short ones.
    #[test]
    fn tree_merges_equal_plain_merges(values in proptest::collection::vec(-1e6f64..1e6, 1..80), lo in 0usize..80, len in 0usize..80) {
        let slots: Vec<Slot> = values.iter().map(|v| Slot::of(*v)).collect();
        let lo = lo.min(slots.len());
        let hi = (lo + len).min(slots.len());
        let tree = SlotTree::new(&slots);
        let got = tree.merged(lo, hi);
        let mut want = Slot::EMPTY;
        for s in &slots[lo..hi] {
            want.merge(s);
        }
        prop_assert_eq!(got.n, want.n);
        prop_assert_eq!(got.min, want.min);
        prop_assert_eq!(got.max, want.max);
        prop_assert!((got.sum - want.sum).abs() <= 1e-6 * want.sum.abs().max(1.0));
    }

    /// For a counter, increase over a window equals the sum of its minutes'
    /// increases, and rate that over the window's seconds, exactly.
    #[test]
    fn counter_increases_are_exact(incs in proptest::collection::vec(0.0f64..1e4, 1..30), range_min in 1i64..30) {
        let data: Vec<(i64, Vec<(i64, f64)>)> = incs.iter().enumerate().map(|(i, v)| (i as i64, vec![(30, *v)])).collect();
        let refs: Vec<(i64, &[(i64, f64)])> = data.iter().map(|(m, s)| (*m, s.as_slice())).collect();
        let rs = minutes(PointKind::Delta, &refs);
        let end = incs.len() as i64 * M;
        let want: f64 = incs.iter().rev().take(range_min as usize).sum();
        let got = at(RangeFn::Increase, &rs, end, range_min * M).unwrap();
        prop_assert!((got - want).abs() <= 1e-9 * want.max(1.0));
        let rate = at(RangeFn::Rate, &rs, end, range_min * M).unwrap();
        prop_assert!((rate - want / (range_min * 60) as f64).abs() <= 1e-9 * want.max(1.0));
    }
}

/// A counter whose pace changed inside the window's first minute: the
/// series' steps say how much of that minute came before the range, where
/// the even spread would guess; a lead measured for another cut is not
/// used.
#[test]
fn the_first_minute_is_cut_by_its_steps_where_they_hold_it() {
    // Minute 10: 50 increases of 1 in its first 30 s, 10 in the rest;
    // minutes 11 and 12 (in progress to 12:30): 1 a second.
    let mut rs = minutes(
        PointKind::Delta,
        &[
            (10, &[(0, 50.0), (59, 10.0)]),
            (11, &[(59, 60.0)]),
            (12, &[(30, 30.0)]),
        ],
    );
    let t = 12 * M + 30_000;
    let even = at(RangeFn::Increase, &rs, t, 2 * M).unwrap();
    // (60 · 1/2 + 60 + 30) over 120 s, times 120 s.
    assert!((even - 120.0).abs() < 1e-9, "{even}");
    rs.lead = Some(Lead {
        cut_ms: 10 * M + 30_000,
        n: 1.0,
        sum: 50.0,
    });
    let stepped = at(RangeFn::Increase, &rs, t, 2 * M).unwrap();
    assert!((stepped - 100.0).abs() < 1e-9, "{stepped}");
    // Measured for another instant: the even spread again.
    rs.lead = Some(Lead {
        cut_ms: 10 * M + 20_000,
        ..rs.lead.unwrap()
    });
    assert_eq!(at(RangeFn::Increase, &rs, t, 2 * M), Some(even));
}
