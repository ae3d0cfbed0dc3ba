//! A series' documents from the store merged with what the store does not
//! have yet, so a read is fresh to the second whatever the flush interval.
//!
//! Separate from the engine because this is where a sample could be
//! counted twice or not at all, and it is a pure function of its inputs:
//! the rules live, and are tested, in one place.
//!
//! A bucket a read does not show (empty, or only a cumulative counter's
//! baseline: [`Slot::shows`]) is left out here, once the store and memory
//! are merged, so every read built on the engine leaves it out alike.
//!
//! Each sample is counted once. An in-flight batch is added to a document
//! only if the document's watermark is below the batch's flush id (the
//! store has not applied it there yet). The aggregator's pending slots are
//! added only if the document's watermark is at most the snapshot's
//! `cut_through`: a higher watermark means a flush cut after the snapshot
//! (which drained those very slots) landed before the store read.

use std::collections::BTreeMap;

use super::{Buckets, Window};
use crate::flush::Unflushed;
use crate::model::{EpochMinute, SampleKind, Slot, Tier, MINUTE_S};
use crate::store::DocRead;

/// Hour documents read for the recent part of a day-tier window: from
/// `cut` (an hour start) on, they stand in for the day documents, which may
/// still lack those minutes (see `Store::day_tier_lag`).
pub(super) struct Recent {
    pub(super) cut: i64,
    pub(super) docs: Vec<DocRead>,
}

/// The kind and non-empty buckets of one series in `w`, from `docs` (read
/// from `tier`; before `recent.cut` when there is a recent part) and
/// `unflushed` (taken before the read).
pub(super) fn merge_unflushed(
    docs: Vec<DocRead>,
    unflushed: &Unflushed,
    tier: Tier,
    recent: Option<Recent>,
    w: &Window,
) -> (Option<SampleKind>, Buckets) {
    let step = w.step;
    let end = w.end();
    let mut buckets: BTreeMap<i64, Slot> = BTreeMap::new();
    let mut kind = None;
    let mut add_docs = |docs: Vec<DocRead>| {
        let mut watermarks: BTreeMap<i64, u64> = BTreeMap::new();
        for doc in docs {
            watermarks.insert(doc.period_start, doc.watermark);
            kind = kind.or(doc.kind);
            for (t, slot) in doc.slots {
                buckets.entry(step.floor(t)).or_default().merge(&slot);
            }
        }
        watermarks
    };
    let older = add_docs(docs);
    let (cut, newer) = match recent {
        Some(r) => (r.cut, add_docs(r.docs)),
        None => (i64::MAX, BTreeMap::new()),
    };
    // Each minute's watermark is that of the document it was read from.
    let watermark = |minute: EpochMinute| {
        let found = if minute.saturating_mul(MINUTE_S) >= cut {
            newer.get(&Tier::Hour.period_start(minute))
        } else {
            older.get(&tier.period_start(minute))
        };
        found.copied().unwrap_or(0)
    };
    let mut add = |minute: EpochMinute, slot: &Slot| {
        let t = step.floor(minute * MINUTE_S);
        if t >= w.from && t < end {
            buckets.entry(t).or_default().merge(slot);
        }
    };
    for (id, minutes) in &unflushed.inflight {
        for (minute, slot) in minutes {
            if id.0 > watermark(*minute) {
                add(*minute, slot);
            }
        }
    }
    for (minute, slot) in &unflushed.pending {
        if watermark(*minute) <= unflushed.cut_through {
            add(*minute, slot);
        }
    }
    // Merged first, then judged: a bucket that holds a cumulative counter's
    // baseline and its first increase shows.
    let kind = unflushed.kind.or(kind);
    let buckets = buckets.into_iter().filter(|(_, s)| s.shows(kind)).collect();
    (kind, buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FlushId;
    use crate::query::Step;

    const HOUR_DOC: i64 = 1_700_002_800; // a whole hour
    const MINUTE: EpochMinute = HOUR_DOC / MINUTE_S;

    fn doc(watermark: u64, slots: &[(EpochMinute, f64)]) -> DocRead {
        DocRead {
            period_start: HOUR_DOC,
            kind: Some(SampleKind::Gauge),
            watermark,
            slots: slots
                .iter()
                .map(|&(m, v)| (m * MINUTE_S, Slot::of(v)))
                .collect(),
        }
    }

    fn window() -> Window {
        Window {
            from: HOUR_DOC,
            to: HOUR_DOC + 3_600,
            step: Step::MINUTE,
        }
    }

    fn sums(buckets: &Buckets) -> Vec<(EpochMinute, f64)> {
        buckets.iter().map(|(t, s)| (t / MINUTE_S, s.sum)).collect()
    }

    #[test]
    fn in_flight_batches_count_until_their_watermark_lands() {
        let unflushed = Unflushed {
            kind: Some(SampleKind::Gauge),
            inflight: vec![
                (FlushId(5), vec![(MINUTE, Slot::of(1.0))]),
                (FlushId(7), vec![(MINUTE + 1, Slot::of(2.0))]),
            ],
            pending: vec![(MINUTE + 2, Slot::of(4.0))],
            cut_through: 7,
            recent: Default::default(),
        };
        // The store has applied batch 5, not 7.
        let docs = vec![doc(5, &[(MINUTE, 1.0)])];
        let (kind, buckets) = merge_unflushed(docs, &unflushed, Tier::Hour, None, &window());
        assert_eq!(kind, Some(SampleKind::Gauge));
        assert_eq!(
            sums(&buckets),
            vec![(MINUTE, 1.0), (MINUTE + 1, 2.0), (MINUTE + 2, 4.0)]
        );
    }

    #[test]
    fn pending_slots_count_once_when_a_flush_lands_mid_read() {
        let unflushed = Unflushed {
            kind: None,
            inflight: Vec::new(),
            pending: vec![(MINUTE, Slot::of(4.0))],
            cut_through: 7,
            recent: Default::default(),
        };
        // Batch 8, cut after the snapshot, drained the pending slot and
        // landed before the store read.
        let landed = vec![doc(8, &[(MINUTE, 4.0)])];
        let (_, buckets) = merge_unflushed(landed, &unflushed, Tier::Hour, None, &window());
        assert_eq!(sums(&buckets), vec![(MINUTE, 4.0)]);
        // Not landed yet: the pending slot is only in memory.
        let (kind, buckets) = merge_unflushed(Vec::new(), &unflushed, Tier::Hour, None, &window());
        assert_eq!(sums(&buckets), vec![(MINUTE, 4.0)]);
        assert_eq!(kind, None);
    }

    /// A cumulative counter's slot as written for its first sample: no
    /// increase, the raw value as the last sample.
    fn baseline(minute: EpochMinute, raw: f64) -> Slot {
        let mut s = Slot::EMPTY;
        s.see(minute * MINUTE_S * 1000 + 5_000, raw);
        s
    }

    fn increase(minute: EpochMinute, by: f64, raw: f64) -> Slot {
        let mut s = Slot::EMPTY;
        s.add_value(by);
        s.see(minute * MINUTE_S * 1000 + 5_000, raw);
        s
    }

    #[test]
    fn a_cumulative_counters_baseline_minute_is_left_out_stored_or_not() {
        let cumulative = Some(SampleKind::CumulativeCounter);
        // Stored before reads left baselines out: the baseline-only minute
        // is in the document, the first increase in the next minute.
        let stored = DocRead {
            period_start: HOUR_DOC,
            kind: cumulative,
            watermark: 3,
            slots: vec![
                (MINUTE * MINUTE_S, baseline(MINUTE, 100.0)),
                ((MINUTE + 1) * MINUTE_S, increase(MINUTE + 1, 5.0, 105.0)),
            ],
        };
        let none = Unflushed {
            kind: None,
            inflight: Vec::new(),
            pending: Vec::new(),
            cut_through: 3,
            recent: Default::default(),
        };
        let (kind, buckets) =
            merge_unflushed(vec![stored.clone()], &none, Tier::Hour, None, &window());
        assert_eq!(kind, cumulative);
        assert_eq!(sums(&buckets), vec![(MINUTE + 1, 5.0)]);
        // In memory only, kind known from memory.
        let pending = Unflushed {
            kind: cumulative,
            inflight: Vec::new(),
            pending: vec![(MINUTE + 5, baseline(MINUTE + 5, 7.0))],
            cut_through: 0,
            recent: Default::default(),
        };
        let (_, buckets) = merge_unflushed(Vec::new(), &pending, Tier::Hour, None, &window());
        assert!(buckets.is_empty());
        // A bucket of five minutes holding the baseline and an increase
        // shows, with the increase's last sample.
        let five = Window {
            step: Step::fixed(300).unwrap(),
            ..window()
        };
        let (_, buckets) = merge_unflushed(vec![stored], &none, Tier::Hour, None, &five);
        assert_eq!(buckets.len(), 1);
        assert_eq!((buckets[0].1.n, buckets[0].1.last), (1, 105.0));
    }

    #[test]
    fn unflushed_minutes_outside_the_window_are_left_out() {
        let unflushed = Unflushed {
            kind: None,
            inflight: vec![(FlushId(1), vec![(MINUTE - 1, Slot::of(1.0))])],
            pending: vec![(MINUTE + 60, Slot::of(2.0))],
            cut_through: 1,
            recent: Default::default(),
        };
        let (_, buckets) = merge_unflushed(Vec::new(), &unflushed, Tier::Hour, None, &window());
        assert!(buckets.is_empty());
    }

    #[test]
    fn recent_hours_count_by_their_own_watermarks() {
        // A day window split at the hour after HOUR_DOC: the day document
        // (watermark 5) before the cut, the hour document (watermark 7,
        // which holds batch 6) after it.
        let cut = HOUR_DOC + 3_600;
        let day_start = Tier::Day.period_start(MINUTE);
        let day_doc = DocRead {
            period_start: day_start,
            kind: Some(SampleKind::Gauge),
            watermark: 5,
            slots: vec![(HOUR_DOC, Slot::of(1.0))],
        };
        let hour_doc = DocRead {
            period_start: cut,
            kind: Some(SampleKind::Gauge),
            watermark: 7,
            slots: vec![(cut, Slot::of(2.0))],
        };
        let unflushed = Unflushed {
            kind: None,
            inflight: vec![(
                FlushId(6),
                vec![(MINUTE + 1, Slot::of(4.0)), (cut / MINUTE_S, Slot::of(2.0))],
            )],
            pending: Vec::new(),
            cut_through: 6,
            recent: Default::default(),
        };
        let w = Window {
            from: day_start,
            to: day_start + 86_400,
            step: Step::HOUR,
        };
        let recent = Recent {
            cut,
            docs: vec![hour_doc],
        };
        let (_, buckets) = merge_unflushed(vec![day_doc], &unflushed, Tier::Day, Some(recent), &w);
        // Before the cut batch 6 is added (the day document lacks it);
        // after it, the hour document already holds it.
        let sums: Vec<(i64, f64)> = buckets.iter().map(|(t, s)| (*t, s.sum)).collect();
        assert_eq!(sums, vec![(HOUR_DOC, 5.0), (cut, 2.0)]);
    }
}
