//! Unit tests of the pending minutes.

use super::*;
use crate::model::{Resolution, Tier};
use crate::store::{DocRead, ReadQuery};

fn id(s: &str) -> Arc<SeriesId> {
    Arc::new(SeriesId::new(s, "m"))
}

#[test]
fn minutes_merge_in_order_whatever_order_they_come_in() {
    let mut minutes = Vec::new();
    for m in [5, 5, 7, 3, 6, 3] {
        merge_minute(&mut minutes, m, &Slot::of(m as f64));
    }
    let keys: Vec<_> = minutes.iter().map(|&(m, s)| (m, s.n)).collect();
    assert_eq!(keys, [(3, 2), (5, 2), (6, 1), (7, 1)]);
}

#[test]
fn a_full_list_takes_room_ahead_at_its_second_of_the_minute() {
    let s = id("a");
    let mut p = Pending::default();
    let phase = phase_of(&s);
    let at = |minute: u64, second: u64| (minute * 60 + second) * 1_000_000;
    let room = |p: &Pending| p.get(&s).map(|e| e.minutes.capacity() - e.minutes.len());
    // Every second of minute 10, then the first of minute 11.
    for second in 0..60 {
        p.add(
            &s,
            SampleKind::Gauge,
            at(10, second),
            [(10, Slot::of(1.0))].into_iter(),
        );
        let ahead = u64::from(phase) <= second;
        assert_eq!(room(&p), Some(usize::from(ahead)), "second {second}");
    }
    // Minute 11 takes the room; its own room comes at the phase again.
    p.add(
        &s,
        SampleKind::Gauge,
        at(11, 0),
        [(11, Slot::of(1.0))].into_iter(),
    );
    assert_eq!(room(&p), Some(usize::from(phase == 0)));
    assert_eq!(p.get(&s).map(|e| e.minutes.len()), Some(2));
}

#[test]
fn a_fleet_grows_over_the_seconds_of_a_minute() {
    let fleet: Vec<_> = (0..6_000).map(|i| id(&format!("s{i}"))).collect();
    let mut per_quarter = [0usize; 4];
    for s in &fleet {
        per_quarter[usize::from(phase_of(s)) / 15] += 1;
    }
    for n in per_quarter {
        assert!((1_200..1_800).contains(&n), "{per_quarter:?}");
    }
}

#[test]
fn bytes_count_the_room_the_lists_hold() {
    let mut p = Pending::default();
    let (a, b) = (id("a"), id("b"));
    for m in 0..6 {
        p.add(
            &a,
            SampleKind::Gauge,
            1 + m as u64,
            [(m, Slot::of(1.0))].into_iter(),
        );
    }
    p.add(&b, SampleKind::Gauge, 7, [(0, Slot::of(1.0))].into_iter());
    let room: usize = [&a, &b]
        .iter()
        .map(|s| p.get(s).map_or(0, |e| e.minutes.capacity()))
        .sum();
    assert!(room >= 7);
    assert_eq!(p.bytes(), 2 * SERIES_BYTES + room * MINUTE_BYTES);
    p.drop_series(&a);
    p.drop_series(&b);
    assert_eq!(p.bytes(), 0);
}

/// The queue stays ascending by `since` through folds and failed folds,
/// so `oldest` is the flush the log must keep.
#[test]
fn folds_take_the_oldest_and_a_failed_fold_puts_them_back_in_order() {
    let mut p = Pending::default();
    let (a, b, c) = (id("a"), id("b"), id("c"));
    p.add(&a, SampleKind::Gauge, 1, [(10, Slot::of(1.0))].into_iter());
    p.add(&b, SampleKind::Gauge, 2, [(10, Slot::of(1.0))].into_iter());
    p.add(&a, SampleKind::Gauge, 3, [(11, Slot::of(1.0))].into_iter());
    p.add(&c, SampleKind::Gauge, 3, [(11, Slot::of(1.0))].into_iter());
    assert_eq!((p.len(), p.oldest()), (3, Some(1)));

    let folds = p.start_fold(2, None);
    let names: Vec<_> = folds.iter().map(|f| f.series.source.to_string()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!((folds[0].watermark, folds[0].minutes.len()), (3, 2));
    assert_eq!(p.oldest(), Some(3), "only c is left outside the fold");
    // Still readable until the fold commits.
    assert!(p.view(&a).is_some());

    let mut reversed = folds.clone();
    reversed.reverse();
    p.abort_fold(&reversed);
    assert_eq!(p.oldest(), Some(1));
    let again = p.start_fold(3, None);
    let names: Vec<_> = again.iter().map(|f| f.series.source.to_string()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    p.end_fold(&again);
    assert_eq!((p.len(), p.oldest()), (0, None));
    assert!(p.view(&a).is_none());
}

/// Minutes loaded from the log at startup name their series by copies
/// of their own; once a flush brings the aggregator's shared id, only
/// that one is held, and the fold queue keeps the run's place.
#[test]
fn a_loaded_run_lets_go_of_its_copy_of_the_id_when_a_flush_brings_the_shared_one() {
    let mut p = Pending::default();
    let (loaded, other) = (id("a"), id("b"));
    p.replace(
        &loaded,
        SampleKind::Gauge,
        1,
        1,
        [(10, Slot::of(1.0))].into_iter(),
    );
    p.replace(
        &other,
        SampleKind::Gauge,
        1,
        1,
        [(10, Slot::of(1.0))].into_iter(),
    );
    p.drop_series(&other);
    let shared = id("a");
    p.add(
        &shared,
        SampleKind::Gauge,
        2,
        [(11, Slot::of(1.0))].into_iter(),
    );
    assert_eq!(
        Arc::strong_count(&loaded),
        1,
        "only the test holds the loaded copy"
    );
    // A series made after `b` went may take its position: `b`'s place
    // in the queue must not fold it ahead of its own run.
    let c = id("c");
    p.add(&c, SampleKind::Gauge, 3, [(11, Slot::of(1.0))].into_iter());
    assert_eq!(p.oldest(), Some(1));
    let folds = p.start_fold(3, None);
    let names: Vec<_> = folds.iter().map(|f| f.series.source.to_string()).collect();
    assert_eq!(names, ["a", "c"]);
    assert!(Arc::ptr_eq(&folds[0].series, &shared));
    assert_eq!((folds[0].watermark, folds[0].minutes.len()), (2, 2));
}

#[test]
fn a_read_gets_pending_minutes_only_where_the_document_lacks_them() {
    let mut p = Pending::default();
    let s = id("a");
    // Minutes 0 and 61 (two hours) from flush 7.
    p.add(
        &s,
        SampleKind::Gauge,
        7,
        [(0, Slot::of(1.0)), (61, Slot::of(2.0))].into_iter(),
    );
    let view = p.view(&s).unwrap();
    let q = ReadQuery {
        series: (*s).clone(),
        tier: Tier::Hour,
        resolution: Resolution::Minute,
        from: 0,
        to: 2 * 3600,
    };
    // Hour 0 already folded (watermark 7), hour 1 not stored yet.
    let mut docs = vec![DocRead {
        period_start: 0,
        kind: Some(SampleKind::Gauge),
        watermark: 7,
        slots: vec![(0, Slot::of(1.0))],
    }];
    view.merge_into(&q, 0, &mut docs);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].slots, vec![(0, Slot::of(1.0))], "not counted twice");
    assert_eq!(docs[1].period_start, 3600);
    assert_eq!(docs[1].slots, vec![(61 * 60, Slot::of(2.0))]);
    assert!(docs.iter().all(|d| d.watermark == 7));
}
