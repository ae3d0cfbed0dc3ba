use proptest::prelude::*;

use super::*;

fn times(r: &Ring) -> Vec<i64> {
    r.snapshot(SampleKind::Gauge)
        .samples()
        .iter()
        .map(|s| s.ts)
        .collect()
}

/// A gauge's sample: what it adds is its value.
fn gauge(r: &mut Ring, ts: i64) {
    r.push(ts, ts as f64, Some(ts as f64));
}

/// Milliseconds of the whole seconds `from..=to`.
fn secs(from: i64, to: i64) -> Vec<i64> {
    (from..=to).map(|k| k * 1_000).collect()
}

#[test]
fn the_newest_samples_are_kept_in_time_order() {
    let mut r = Ring::EMPTY;
    assert!(times(&r).is_empty());
    let n = RING as i64 + 2;
    for t in secs(1, n) {
        gauge(&mut r, t);
    }
    assert_eq!(times(&r), secs(3, n));
    // A late sample inside the span is placed; one older than all is not
    // kept (what is kept still holds every sample from its oldest on).
    gauge(&mut r, 4_500);
    let mut want = secs(4, n);
    want.insert(1, 4_500);
    assert_eq!(times(&r), want);
    gauge(&mut r, 1_000);
    assert_eq!(times(&r), want);
    // Further than the offsets reach from the oldest: the old ones go.
    let far = n * 1_000 + i64::from(u32::MAX) + 1;
    gauge(&mut r, far);
    assert_eq!(times(&r), vec![far]);
}

#[test]
fn what_is_forgotten_is_not_kept_again() {
    let mut r = Ring::EMPTY;
    for k in 1..=3 {
        gauge(&mut r, 1_000 * k);
    }
    r.forget_through(2_000);
    assert_eq!(times(&r), vec![3_000]);
    r.forget_through(i64::MIN);
    assert_eq!(times(&r), vec![3_000]);
    // Emptied, it keeps nothing at or before the time forgotten through.
    r.forget_through(3_000);
    gauge(&mut r, 2_500);
    gauge(&mut r, 3_000);
    assert!(times(&r).is_empty());
    gauge(&mut r, 3_001);
    assert_eq!(times(&r), vec![3_001]);
}

#[test]
fn a_counters_increases_come_from_the_sample_before() {
    let mut r = Ring::EMPTY;
    r.push(1_000, 10.0, None); // the baseline
    r.push(2_000, 12.0, Some(2.0));
    r.push(3_000, f64::NAN, None);
    r.push(4_000, 15.0, Some(3.0));
    r.push(5_000, 4.0, Some(4.0)); // a reset
    for k in 0..RING - 4 {
        r.push(6_000 + 1_000 * k as i64, 5.0 + k as f64, Some(1.0));
    }
    let added: Vec<Option<f64>> = r
        .snapshot(SampleKind::CumulativeCounter)
        .samples()
        .iter()
        .map(|s| s.added)
        .collect();
    // The oldest kept (12) lost its previous value: not known.
    assert!(added[0].is_some_and(f64::is_nan));
    assert_eq!(added[1], None);
    assert_eq!(&added[2..4], &[Some(3.0), Some(4.0)]);
    let gauge = r.snapshot(SampleKind::Gauge);
    assert_eq!(gauge.samples()[3].added, Some(4.0));
}

/// Folds `requests` (each a request's samples, `true` where accepted) the
/// way the aggregator does (see `fold_series`).
fn fold(requests: &[Vec<(i64, bool)>]) -> Ring {
    let mut r = Ring::EMPTY;
    for req in requests {
        let keep_from = Ring::keep_from(req.len());
        for (j, &(t, ok)) in req.iter().enumerate() {
            if ok && j >= keep_from {
                gauge(&mut r, t);
            }
        }
        if keep_from > 0 {
            let ts: Vec<i64> = req[..keep_from].iter().map(|s| s.0).collect();
            r.forget_through(Ring::skipped(&ts, i64::MAX));
        }
    }
    r
}

fn request(ts: &[i64]) -> Vec<(i64, bool)> {
    ts.iter().map(|&t| (t, true)).collect()
}

#[test]
fn a_request_keeps_its_newest_samples() {
    let n = RING as i64 + 6;
    let many = request(&secs(1, n));
    assert_eq!(Ring::keep_from(many.len()), 6);
    assert_eq!(Ring::keep_from(3), 0);
    // Forgotten through: the newest not pushed, short of the future limit.
    assert_eq!(Ring::skipped(&[1, 50, 3], 10), 3);
    assert_eq!(Ring::skipped(&[50], 10), i64::MIN);
    let r = fold(std::slice::from_ref(&many));
    assert_eq!(times(&r), secs(7, n));
    // The same request again (a retry): the newest by time, each twice.
    let r = fold(&[many.clone(), many]);
    let twice: Vec<i64> = secs(n - RING as i64 / 2 + 1, n)
        .into_iter()
        .flat_map(|t| [t, t])
        .collect();
    assert_eq!(times(&r), twice);
    // Its last sample refused: the ones before it, and of the ring's
    // samples only those after the newest one not pushed.
    let last = 5 + RING as i64;
    let mut tail = request(&secs(5, last));
    tail[RING].1 = false;
    let mut want = secs(6, last - 1);
    want.insert(0, 5_500);
    let r = fold(&[request(&[1_000, 5_500]), tail.clone()]);
    assert_eq!(times(&r), want);
    tail[0].0 = 2_000;
    let r = fold(&[request(&[1_000, 5_500]), tail]);
    assert_eq!(times(&r), want);
    // Out of time order: nothing at or before the newest not pushed.
    let mut back = secs(5, last);
    back.reverse();
    back.push(100_000);
    let r = fold(&[request(&back)]);
    assert_eq!(times(&r), vec![100_000]);
}

proptest! {
    /// Samples pushed one by one, in any order: the ring holds at most its
    /// size, in time order, and every sample pushed at or after its oldest.
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
            gauge(&mut r, t);
        }
        let kept = times(&r);
        prop_assert!(!kept.is_empty() && kept.len() <= RING);
        prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
        let mut want: Vec<i64> = ts.iter().copied().filter(|&t| t >= kept[0]).collect();
        want.sort_unstable();
        prop_assert_eq!(kept, want);
    }

    /// Requests in any order, some out of order inside, some samples
    /// refused: the ring holds at most its size, in time order, and every
    /// accepted sample after its oldest; with nothing refused and every
    /// request in order, what pushing every sample keeps.
    #[test]
    fn requests_keep_every_sample_from_the_oldest_on(
        ts in prop::collection::vec(0i64..100_000, 1..60),
        cuts in prop::collection::vec(1usize..12, 1..20),
        refused in prop::collection::vec(any::<u8>(), 60),
        late in any::<u8>(),
        reversed in any::<bool>(),
    ) {
        let mut ts = ts;
        ts.sort_unstable();
        let mut requests = Vec::new();
        let mut at = 0;
        for c in cuts.iter().cycle() {
            if at >= ts.len() {
                break;
            }
            let end = (at + c).min(ts.len());
            requests.push((at..end).map(|i| (ts[i], refused[i] % 7 != 0)).collect::<Vec<_>>());
            at = end;
        }
        // One request late, and maybe one in reverse.
        let i = usize::from(late) % requests.len();
        let r = requests.remove(i);
        requests.push(r);
        if reversed {
            requests[0].reverse();
        }
        let kept = times(&fold(&requests));
        let accepted: Vec<i64> = requests.iter().flatten().filter(|s| s.1).map(|s| s.0).collect();
        prop_assert!(kept.len() <= RING);
        prop_assert!(kept.windows(2).all(|w| w[0] <= w[1]));
        if let Some(&oldest) = kept.first() {
            // Two at one millisecond may be kept one without the other.
            let mut want: Vec<i64> = accepted.iter().copied().filter(|&t| t > oldest).collect();
            want.sort_unstable();
            let after: Vec<i64> = kept.iter().copied().filter(|&t| t > oldest).collect();
            prop_assert_eq!(after, want);
        }
        let in_order = requests.iter().all(|q| q.windows(2).all(|w| w[0].0 <= w[1].0));
        if accepted.len() == ts.len() && in_order {
            let mut one_by_one = Ring::EMPTY;
            for &t in requests.iter().flatten().map(|s| &s.0) {
                gauge(&mut one_by_one, t);
            }
            prop_assert_eq!(kept, times(&one_by_one));
        }
    }
}
