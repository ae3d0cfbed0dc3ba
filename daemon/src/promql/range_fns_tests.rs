use super::*;
use crate::promql::value::{sample_slot, Labels};
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
    // At 13:00 and 13:30 a 2-minute window holds minutes 11 and 12.
    assert_eq!(at(RangeFn::Sum, &rs, 13 * M, 2 * M), Some(6.0));
    assert_eq!(at(RangeFn::Sum, &rs, 13 * M + 30_000, 2 * M), Some(6.0));
    // At 12:59 minute 12 is still in progress.
    assert_eq!(at(RangeFn::Sum, &rs, 13 * M - 1, 2 * M), Some(3.0));
    assert_eq!(at(RangeFn::Count, &rs, 10 * M, M), None);
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
