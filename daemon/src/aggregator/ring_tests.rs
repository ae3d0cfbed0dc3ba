use proptest::prelude::*;

use super::*;

fn times(r: &Ring) -> Vec<i64> {
    r.snapshot(SampleKind::Gauge)
        .samples()
        .iter()
        .map(|s| s.ts)
        .collect()
}

#[test]
fn the_newest_samples_are_kept_in_time_order() {
    let mut r = Ring::EMPTY;
    assert!(times(&r).is_empty());
    for k in 1..=6 {
        r.push(1_000 * k, k as f64, true, false);
    }
    assert_eq!(times(&r), vec![3_000, 4_000, 5_000, 6_000]);
    // A late sample inside the span is placed; one older than all is not
    // kept (what is kept still holds every sample from its oldest on).
    r.push(4_500, 0.0, true, false);
    assert_eq!(times(&r), vec![4_000, 4_500, 5_000, 6_000]);
    r.push(1_000, 0.0, true, false);
    assert_eq!(times(&r), vec![4_000, 4_500, 5_000, 6_000]);
    // Further than the offsets reach from the oldest: the old ones go.
    let far = 6_000 + i64::from(u32::MAX) + 1;
    r.push(far, 1.0, true, false);
    assert_eq!(times(&r), vec![far]);
    r.clear();
    assert!(times(&r).is_empty());
}

#[test]
fn a_counters_increases_come_from_the_sample_before() {
    let mut r = Ring::EMPTY;
    r.push(1_000, 10.0, false, false); // the baseline
    r.push(2_000, 12.0, true, false);
    r.push(3_000, f64::NAN, false, false);
    r.push(4_000, 15.0, true, false);
    r.push(5_000, 4.0, true, true);
    let added: Vec<Option<f64>> = r
        .snapshot(SampleKind::CumulativeCounter)
        .samples()
        .iter()
        .map(|s| s.added)
        .collect();
    // The oldest kept (12) lost its previous value: not known.
    assert!(added[0].is_some_and(f64::is_nan));
    assert_eq!(added[1], None);
    assert_eq!(&added[2..], &[Some(3.0), Some(4.0)]);
    let gauge = r.snapshot(SampleKind::Gauge);
    assert_eq!(gauge.samples()[3].added, Some(4.0));
}

proptest! {
    /// Whatever order samples come in (distinct times), the ring holds
    /// at most its size, in time order, and every sample pushed at or
    /// after its oldest.
    #[test]
    fn every_sample_from_the_oldest_on_is_kept(
        ts in prop::collection::hash_set(0i64..100_000, 1..40),
        shuffle in prop::collection::vec(any::<u8>(), 40),
    ) {
        let mut ts: Vec<i64> = ts.into_iter().collect();
        ts.sort_unstable();
        // Mostly in order, some late.
        for (i, s) in shuffle.iter().enumerate().take(ts.len().saturating_sub(1)) {
            if s % 5 == 0 {
                ts.swap(i, i + 1);
            }
        }
        let mut r = Ring::EMPTY;
        for &t in &ts {
            r.push(t, t as f64, true, false);
        }
        let kept = times(&r);
        prop_assert!(!kept.is_empty() && kept.len() <= RING);
        prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
        let mut want: Vec<i64> = ts.iter().copied().filter(|&t| t >= kept[0]).collect();
        want.sort_unstable();
        prop_assert_eq!(kept, want);
    }
}
