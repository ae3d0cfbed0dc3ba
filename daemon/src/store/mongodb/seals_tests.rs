use std::sync::Arc;

use super::*;
use crate::model::{FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, Slot, HOUR_S};

const H0: i64 = 1_793_660_400; // 2026-11-02T23:00Z

fn batch(id_s: i64, series: &[&str], at: &[i64]) -> FlushBatch {
    FlushBatch {
        id: FlushId(id_s as u64 * 1_000_000),
        series: series
            .iter()
            .map(|s| SeriesMinutes {
                series: Arc::new(SeriesId::new(s, "m")),
                kind: SampleKind::Gauge,
                minutes: at
                    .iter()
                    .map(|&t| (t.div_euclid(60), Slot::of(1.0)))
                    .collect(),
            })
            .collect(),
    }
}

fn us(s: i64) -> u64 {
    s as u64 * 1_000_000
}

fn take_all(seals: &mut Seals, now_s: i64) -> Vec<(i64, usize, Option<u64>)> {
    let mut out = Vec::new();
    while let Some(share) = seals.next_share(us(now_s), 300_000_000, false) {
        out.push((share.hour, share.items.len(), share.late_since));
        seals.done(&share);
    }
    out
}

#[test]
fn an_hour_is_queued_a_grace_after_it_ends_and_the_record_follows() {
    let mut seals = Seals::default();
    let first = batch(H0 + 10, &["a", "b"], &[H0 + 5]);
    assert_eq!(seals.start_fresh(&first), Some(H0));
    seals.recorded(H0);
    seals.wrote(&first, first.id.0);
    let next = batch(H0 + HOUR_S + 5, &["a"], &[H0 + HOUR_S]);
    seals.wrote(&next, next.id.0);
    seals.close_hours(H0 + HOUR_S + SEAL_GRACE_S - 1, false);
    assert!(take_all(&mut seals, H0 + HOUR_S + 30).is_empty());
    assert_eq!(seals.record_due(), None);
    seals.close_hours(H0 + HOUR_S + SEAL_GRACE_S, false);
    assert_eq!(
        take_all(&mut seals, H0 + HOUR_S + SEAL_GRACE_S),
        [(H0, 2, None)]
    );
    // The open hour holds the record back.
    assert_eq!(seals.record_due(), Some(H0 + HOUR_S));
    assert_eq!(seals.complete(next.id.0), next.id.0);
}

#[test]
fn late_minutes_are_sealed_first_and_hold_the_log_until_then() {
    let mut seals = Seals::default();
    let first = batch(H0 + 10, &["a"], &[H0 + 5]);
    seals.start_fresh(&first);
    seals.wrote(&first, first.id.0);
    seals.close_hours(H0 + 2 * HOUR_S, false);
    let late = batch(H0 + 2 * HOUR_S + 1, &["a", "b"], &[H0 + 100]);
    seals.wrote(&late, late.id.0);
    assert_eq!(seals.complete(late.id.0 + 5), late.id.0 - 1);
    let share = seals.next_share(us(H0 + 2 * HOUR_S + 2), 1, false).unwrap();
    assert_eq!((share.hour, share.late_since), (H0, Some(late.id.0)));
    // Taken but not done: still held; failed: waits again.
    assert_eq!(seals.complete(late.id.0 + 5), late.id.0 - 1);
    seals.failed(share);
    let share = seals.next_share(us(H0 + 2 * HOUR_S + 3), 1, false).unwrap();
    assert_eq!(share.late_since, Some(late.id.0));
    seals.done(&share);
    let rest = take_all(&mut seals, H0 + 2 * HOUR_S + 4);
    assert_eq!(rest, [(H0, 1, None)]);
    assert_eq!(seals.complete(late.id.0 + 5), late.id.0 + 5);
}

#[test]
fn a_pass_is_spread_in_shares_and_a_shutdown_takes_everything() {
    let mut seals = Seals::default();
    let names: Vec<String> = (0..1000).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let first = batch(H0 + 10, &refs, &[H0 + 5]);
    seals.start_fresh(&first);
    seals.wrote(&first, first.id.0);
    let open = batch(H0 + HOUR_S + 10, &refs[..10], &[H0 + HOUR_S + 5]);
    seals.wrote(&open, open.id.0);
    let t = H0 + HOUR_S + SEAL_GRACE_S;
    seals.close_hours(t, false);
    // The first share of a 1000-series pass spread over 300 s: the least.
    let s1 = seals.next_share(us(t), 300_000_000, false).unwrap();
    assert_eq!(s1.items.len(), MIN_SHARE);
    seals.done(&s1);
    // 150 s later, half of what was left.
    let s2 = seals.next_share(us(t + 150), 300_000_000, false).unwrap();
    assert_eq!(s2.items.len(), (1000 - MIN_SHARE).div_ceil(2));
    seals.done(&s2);
    assert_eq!(seals.record_due(), Some(H0));
    seals.close_hours(t + 151, true);
    let mut rest = Vec::new();
    while let Some(share) = seals.next_share(us(t + 151), 300_000_000, true) {
        rest.push((share.hour, share.items.len()));
        seals.done(&share);
    }
    assert_eq!(
        rest,
        [(H0, 1000 - MIN_SHARE - s2.items.len()), (H0 + HOUR_S, 10)]
    );
    // The open hour was sealed but stays ahead of the record.
    assert_eq!(seals.record_due(), Some(H0 + HOUR_S));
}

#[test]
fn a_restart_loads_every_hour_from_the_record_on() {
    let mut seals = Seals::default();
    let written = [H0 - 3 * HOUR_S, H0 - 2 * HOUR_S, H0 - HOUR_S, H0];
    seals.start_from_record(H0 - 2 * HOUR_S, &written);
    assert_eq!(seals.record_due(), None);
    seals.close_hours(H0 + 2 * HOUR_S, false);
    let mut hours = Vec::new();
    while let Some(share) = seals.next_share(us(H0 + 2 * HOUR_S), 1, false) {
        assert!(matches!(share.items, Items::Load));
        hours.push(share.hour);
        let ids = if share.hour == H0 {
            vec!["x".to_string()]
        } else {
            Vec::new()
        };
        seals.loaded(&share, ids);
        if share.hour == H0 {
            let s = seals.next_share(us(H0 + 2 * HOUR_S), 1, false).unwrap();
            assert!(matches!(&s.items, Items::Ids(v) if v.len() == 1));
            seals.done(&s);
        }
    }
    assert_eq!(hours, [H0 - 2 * HOUR_S, H0 - HOUR_S, H0]);
    assert_eq!(seals.record_due(), Some(H0 + HOUR_S));
}
