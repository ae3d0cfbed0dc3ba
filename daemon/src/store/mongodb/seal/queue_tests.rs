use std::sync::Arc;

use super::*;
use crate::model::{FlushBatch, FlushId, SampleKind, SeriesId, SeriesMinutes, Slot, HOUR_S};

const H0: i64 = 1_793_660_400; // 2026-11-02T23:00Z

fn batch(id_s: i64, series: &[&str], at: &[i64]) -> FlushBatch {
    FlushBatch {
        hashes: Vec::new(),
        resumable: true,
        id: FlushId(id_s as u64 * 1_000_000),
        series: series
            .iter()
            .map(|s| SeriesMinutes {
                catalog: crate::model::CatalogDue::Unknown,
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
    assert_eq!(Seals::fresh_start(&first), Some(H0));
    seals.start_at(H0);
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
    seals.start_at(H0);
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
    seals.start_at(H0);
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
    assert_eq!(seals.record_due(), None, "H0 is not sealed through yet");
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
fn a_restart_loads_every_hour_from_the_record_on_page_by_page() {
    let mut seals = Seals::default();
    seals.start_from_record(H0 - 2 * HOUR_S, H0 + 30, H0 - 100 * HOUR_S);
    assert_eq!(seals.record_due(), None);
    seals.close_hours(H0 + 2 * HOUR_S, false);
    let now = us(H0 + 2 * HOUR_S);
    let mut sealed = Vec::new();
    let mut pages = 0;
    while let Some(share) = seals.next_share(now, 1, false) {
        match share.items {
            Items::Load => {
                pages += 1;
                let hour = share.hour;
                // Pages 1 and 2: the two hours before H0, empty. The read
                // of H0 fails after its first page, and reads again from
                // the start.
                match (hour == H0, pages) {
                    (true, 3) => seals.loaded(&share, vec!["x".into()], true, false),
                    (true, 4) => seals.failed(share),
                    (true, 5) => seals.loaded(&share, vec!["x".into()], true, false),
                    (true, _) => seals.loaded(&share, vec!["y".into()], false, true),
                    (false, _) => seals.loaded(&share, Vec::new(), true, true),
                }
            }
            Items::Ids(ref ids) => {
                sealed.push((share.hour, ids.clone()));
                seals.done(&share);
            }
            Items::Series(_) => panic!("a recovered pass loads its ids"),
        }
    }
    assert_eq!(sealed.len(), 1);
    let (hour, mut ids) = sealed.remove(0);
    ids.sort();
    assert_eq!((hour, ids), (H0, vec!["x".to_string(), "y".to_string()]));
    assert_eq!(seals.record_due(), Some(H0 + HOUR_S));
}

/// A flush with late minutes while a recovered hour's page is read puts its
/// pass ahead of the loading one: the page still counts.
#[test]
fn a_page_read_while_a_late_pass_arrives_is_kept() {
    let mut seals = Seals::default();
    seals.start_from_record(H0, H0 + 30, H0 - 100 * HOUR_S);
    seals.close_hours(H0 + HOUR_S + SEAL_GRACE_S, false);
    let now = us(H0 + HOUR_S + SEAL_GRACE_S);
    let first = seals.next_share(now, 1, false).unwrap();
    assert!(matches!(first.items, Items::Load));
    let late = batch(H0 + HOUR_S + 61, &["late"], &[H0 + 100]);
    seals.wrote(&late, late.id.0);
    seals.loaded(&first, vec!["x".into()], true, false);
    let mut sealed = Vec::new();
    while let Some(share) = seals.next_share(now, 1, false) {
        match share.items {
            Items::Load => seals.loaded(&share, vec!["y".into()], false, true),
            Items::Ids(ref ids) => {
                sealed.extend(ids.iter().cloned());
                seals.done(&share);
            }
            Items::Series(_) => seals.done(&share),
        }
    }
    sealed.sort();
    assert_eq!(sealed, ["x", "y"]);
}

#[test]
fn a_share_is_never_larger_than_the_cap() {
    let mut seals = Seals::default();
    let names: Vec<String> = (0..2 * MAX_SHARE).map(|i| format!("s{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let first = batch(H0 + 10, &refs, &[H0 + 5]);
    seals.start_at(H0);
    seals.wrote(&first, first.id.0);
    let t = H0 + 10 * HOUR_S;
    seals.close_hours(t, false);
    let s1 = seals.next_share(us(t), 300_000_000, false).unwrap();
    assert_eq!(s1.items.len(), MIN_SHARE);
    seals.done(&s1);
    // Long past the deadline: the rest, but at most the cap.
    let s2 = seals.next_share(us(t + 1000), 300_000_000, false).unwrap();
    assert_eq!(s2.items.len(), MAX_SHARE);
}

#[test]
fn late_minutes_of_one_hour_wait_in_one_pass_each_series_once() {
    let mut seals = Seals::default();
    seals.start_at(H0);
    let first = batch(H0 + 10, &["a"], &[H0 + 5]);
    seals.wrote(&first, first.id.0);
    seals.close_hours(H0 + 2 * HOUR_S, false);
    for i in 0..50 {
        let late = batch(H0 + 2 * HOUR_S + i, &["a", "b", "c"], &[H0 + 100 + i]);
        seals.wrote(&late, late.id.0);
    }
    let oldest = us(H0 + 2 * HOUR_S);
    assert_eq!(seals.complete(oldest + us(100)), oldest - 1);
    let share = seals.next_share(us(H0 + 3 * HOUR_S), 1, false).unwrap();
    assert_eq!(
        (share.hour, share.items.len(), share.late_since),
        (H0, 3, Some(oldest))
    );
    seals.done(&share);
    assert_eq!(take_all(&mut seals, H0 + 3 * HOUR_S), [(H0, 1, None)]);
    assert_eq!(seals.complete(oldest + us(100)), oldest + us(100));
}

#[test]
fn a_record_moved_on_by_a_takeover_is_put_back() {
    let mut seals = Seals::default();
    seals.start_at(H0);
    let first = batch(H0 + 10, &["a"], &[H0 + 5]);
    seals.wrote(&first, first.id.0);
    assert_eq!(seals.record_due(), None);
    // Another daemon moved this writer's record past H0, which still waits.
    seals.server_record(H0 + 3 * HOUR_S);
    assert_eq!(seals.record_due(), Some(H0));
    seals.recorded(H0);
    assert_eq!(seals.record_due(), None);
}
