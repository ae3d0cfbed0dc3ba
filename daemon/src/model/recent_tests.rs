use proptest::prelude::*;

use super::*;
use crate::model::{stale_marker, SampleKind};

const M: i64 = 600_000; // a minute's start

fn gauge(samples: &[(i64, f64)]) -> RecentSamples {
    RecentSamples::new(
        samples
            .iter()
            .map(|&(ts, v)| RecentSample {
                ts,
                v,
                added: (!v.is_nan()).then_some(v),
            })
            .collect(),
    )
}

fn slot_of(samples: &[(i64, f64)]) -> Slot {
    let mut s = Slot::EMPTY;
    for &(ts, v) in samples {
        if !v.is_nan() {
            s.add_value(v);
        }
        s.see(ts, v);
    }
    s
}

#[test]
fn the_samples_after_t_are_taken_out_of_the_minute() {
    let all: Vec<(i64, f64)> = (1..=6).map(|k| (M + k * 9_000, k as f64)).collect();
    let slot = slot_of(&all);
    // The last four only: the minute's first two are before them.
    let recent = gauge(&all[2..]);
    let at = recent.rewind(&slot, M, M + 60_000, M + 40_000).unwrap();
    assert_eq!((at.n, at.sum), (4, 10.0));
    assert_eq!(at.last_sample(), Some((M + 36_000, 4.0)));
    // Not the whole minute: the extremes stay the minute's so far.
    assert_eq!((at.min, at.max), (1.0, 6.0));
    // Before the oldest sample kept: not known.
    assert_eq!(recent.rewind(&slot, M, M + 60_000, M + 25_000), None);
    // Nothing after `t`: the slot as it is.
    assert_eq!(recent.rewind(&slot, M, M + 60_000, M + 59_000), Some(slot));
}

#[test]
fn a_minute_held_whole_is_rebuilt_with_its_extremes() {
    let all = [
        (M - 5_000, 9.0),
        (M + 1_000, 3.0),
        (M + 2_000, 7.0),
        (M + 3_000, 1.0),
    ];
    let slot = slot_of(&all[1..]);
    let at = gauge(&all).rewind(&slot, M, M + 60_000, M + 2_500).unwrap();
    assert_eq!(at, slot_of(&all[1..3]));
    // Before the minute's first sample: nothing of it yet.
    let none = gauge(&all).rewind(&slot, M, M + 60_000, M + 500).unwrap();
    assert!(none.is_empty());
}

#[test]
fn a_read_that_disagrees_with_the_samples_is_not_rewound() {
    let all = [(M + 1_000, 1.0), (M + 2_000, 2.0), (M + 3_000, 3.0)];
    // The read saw a newer sample than the snapshot holds.
    let newer = slot_of(&[all[0], all[1], all[2], (M + 4_000, 4.0)]);
    assert_eq!(gauge(&all).rewind(&newer, M, M + 60_000, M + 1_500), None);
    // The snapshot holds a sample the read did not see.
    let older = slot_of(&all[..2]);
    assert_eq!(gauge(&all).rewind(&older, M, M + 60_000, M + 1_500), None);
    // A whole minute whose count is not the samples' (another daemon's).
    let mut more = slot_of(&all);
    more.add_value(5.0);
    let with_before = gauge(&[(M - 1, 0.0), all[0], all[1], all[2]]);
    assert_eq!(with_before.rewind(&more, M, M + 60_000, M + 1_500), None);
}

#[test]
fn a_marker_after_t_is_taken_back_and_one_before_stays() {
    let all = [
        (M + 1_000, 1.0),
        (M + 2_000, stale_marker()),
        (M + 3_000, 3.0),
    ];
    let slot = slot_of(&all);
    let recent = gauge(&all);
    let at = recent.rewind(&slot, M, M + 60_000, M + 2_500).unwrap();
    assert!(at.ends());
    assert_eq!((at.n, at.sum), (1, 1.0));
    let at = recent.rewind(&slot, M, M + 60_000, M + 1_500).unwrap();
    assert_eq!(at.last_sample(), Some((M + 1_000, 1.0)));
}

#[test]
fn a_counters_increases_are_taken_back() {
    // Increases 2 and 3 after a baseline of 10 (the first sample kept).
    let recent = RecentSamples::new(vec![
        RecentSample {
            ts: M + 1_000,
            v: 10.0,
            added: Some(f64::NAN),
        },
        RecentSample {
            ts: M + 2_000,
            v: 12.0,
            added: Some(2.0),
        },
        RecentSample {
            ts: M + 3_000,
            v: 15.0,
            added: Some(3.0),
        },
    ]);
    let mut slot = Slot::summary(3, 9.0, 2.0, 4.0);
    slot.see(M + 3_000, 15.0);
    let at = recent.rewind(&slot, M, M + 60_000, M + 2_000).unwrap();
    assert_eq!((at.n, at.sum), (2, 6.0));
    assert_eq!(at.last_sample(), Some((M + 2_000, 12.0)));
    assert!(at.shows(Some(SampleKind::CumulativeCounter)));
    // Taking out the increase not known: no answer.
    let unknown = RecentSamples::new(vec![
        RecentSample {
            ts: M + 1_000,
            v: 10.0,
            added: None,
        },
        RecentSample {
            ts: M + 2_000,
            v: 12.0,
            added: Some(f64::NAN),
        },
    ]);
    let mut slot = Slot::summary(1, 2.0, 2.0, 2.0);
    slot.see(M + 2_000, 12.0);
    assert_eq!(unknown.rewind(&slot, M, M + 60_000, M + 1_500), None);
}

proptest! {
    /// Rewinding a minute by its kept samples after `t` is aggregating
    /// only its samples at or before `t`: count, sum (to rounding) and the
    /// last sample always, the extremes where the minute is kept whole.
    #[test]
    fn rewinding_is_aggregating_only_the_samples_up_to_t(
        gaps in prop::collection::vec(1i64..20_000, 1..30),
        values in prop::collection::vec(-1e6f64..1e6, 30),
        keep in 1usize..9,
        start_at in -30_000i64..20_000,
        t_off in 0i64..60_000,
    ) {
        let mut ts = M + start_at;
        let mut all = Vec::new();
        for (g, v) in gaps.iter().zip(&values) {
            ts += g;
            all.push((ts, *v));
        }
        let in_minute: Vec<(i64, f64)> =
            all.iter().copied().filter(|s| (M..M + 60_000).contains(&s.0)).collect();
        prop_assume!(!in_minute.is_empty());
        let slot = slot_of(&in_minute);
        let kept = &all[all.len().saturating_sub(keep)..];
        let t = M + t_off;
        let recent = gauge(kept);
        let got = recent.rewind(&slot, M, M + 60_000, t);
        if kept[0].0 > t {
            prop_assert_eq!(got, None);
            return Ok(());
        }
        let want = slot_of(&in_minute.iter().copied().filter(|s| s.0 <= t).collect::<Vec<_>>());
        let got = got.unwrap();
        prop_assert_eq!(got.n, want.n);
        prop_assert!((got.sum - want.sum).abs() <= 1e-6 * (1.0 + want.sum.abs()) * 30.0);
        prop_assert_eq!(got.last_sample(), want.last_sample());
        if kept[0].0 < M || want.n == 0 {
            prop_assert_eq!((got.min, got.max), (want.min, want.max));
        }
    }
}

#[test]
fn the_two_newest_at_or_before_t() {
    let recent = gauge(&[(M, 1.0), (M + 1_000, 2.0), (M + 2_000, 4.0)]);
    let ts = |t| recent.last_two(t).map(|[a, b]| (a.ts, b.ts));
    assert_eq!(ts(M + 1_500), Some((M, M + 1_000)));
    assert_eq!(ts(M + 9_000), Some((M + 1_000, M + 2_000)));
    assert_eq!(ts(M + 2_000), Some((M + 1_000, M + 2_000)));
    // One only at or before `t`: the one before it is not here.
    assert_eq!(ts(M + 999), None);
}

#[test]
fn samples_at_one_interval_have_a_spacing() {
    let at = |gaps: &[i64]| {
        let mut t = M + 250;
        let mut s = vec![(t, 1.0)];
        for g in gaps {
            t += g;
            s.push((t, 1.0));
        }
        gauge(&s).spacing()
    };
    let every = |at_ms, every_ms| Some(Spacing { at_ms, every_ms });
    assert_eq!(at(&[1_000, 1_000, 1_000]), every(M + 3_250, 1_000));
    // Within the slack of Prometheus' alignment.
    assert_eq!(at(&[15_001, 14_999]), every(M + 30_250, 15_000));
    // Irregular (a missed scrape, a late one), or too few to tell.
    assert_eq!(at(&[1_000, 2_000, 1_000]), None);
    assert_eq!(at(&[1_000, 1_010]), None);
    assert_eq!(at(&[1_000]), None);
    assert_eq!(at(&[0, 0]), None);
}
