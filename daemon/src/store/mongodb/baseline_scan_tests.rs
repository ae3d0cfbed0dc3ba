//! Minute counts read from projected hour and day documents, and the
//! search for a counter's first minute with a sample.

use bson::raw::RawDocumentBuf;
use bson::{doc, Document};

use super::*;
use crate::model::DAY_S;

/// 2026-03-14T00:00Z.
const DAY: i64 = 1_773_446_400;

fn raw(d: Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(&d).unwrap()
}

fn date(s: i64) -> bson::DateTime {
    bson::DateTime::from_millis(s * 1000)
}

#[test]
fn paths_and_projections_name_the_minute_in_its_document() {
    let t = DAY + 10 * HOUR_S + 7 * MINUTE_S;
    assert_eq!(minute_path(Tier::Hour, t), "values.7");
    assert_eq!(minute_path(Tier::Day, t), "values.10.7");
    let p = count_projection(Tier::Hour, [t, t, t + MINUTE_S]);
    assert_eq!(p, doc! { "t": 1, "values.7.n": 1, "values.8.n": 1 });
    assert_eq!(all_counts_projection(Tier::Hour).len(), 1 + 60);
    assert_eq!(all_counts_projection(Tier::Day).len(), 1 + 24 * 60);
}

#[test]
fn absent_slots_and_counts_read_as_zero_and_wrong_types_as_unreadable() {
    let h = DAY + 10 * HOUR_S;
    let d = raw(doc! {
        "t": date(h),
        "values": { "0": { "n": 0_i64 }, "1": {}, "2": { "n": 3_i64 }, "3": { "n": "x" }, "4": 5 },
    });
    let at = |m: i64| count_at(&d, Tier::Hour, h + m * MINUTE_S);
    assert_eq!(at(0), Some(0));
    assert_eq!(
        at(1),
        Some(0),
        "a slot of only `last` (the fallback upsert)"
    );
    assert_eq!(at(2), Some(3));
    assert_eq!(at(3), None);
    assert_eq!(at(4), None);
    assert_eq!(at(5), Some(0), "no slot");
    let day = raw(doc! { "t": date(DAY), "values": { "10": { "2": { "n": 1_i64 } } } });
    assert_eq!(count_at(&day, Tier::Day, h + 2 * MINUTE_S), Some(1));
    assert_eq!(count_at(&day, Tier::Day, h + 3 * MINUTE_S), Some(0));
}

#[test]
fn the_first_counted_minute_is_after_the_baseline_and_up_to_last_seen() {
    let h = DAY + 10 * HOUR_S;
    let hours = vec![
        raw(doc! { "t": date(h), "values": { "0": { "n": 0_i64 }, "1": { "n": 0_i64 } } }),
        raw(doc! { "t": date(h + 2 * HOUR_S), "values": { "5": { "n": 2_i64 } } }),
    ];
    let found = h + 2 * HOUR_S + 5 * MINUTE_S;
    assert_eq!(first_counted(&hours, Tier::Hour, h, h + DAY_S), Some(found));
    assert_eq!(first_counted(&hours, Tier::Hour, h, found), Some(found));
    assert_eq!(first_counted(&hours, Tier::Hour, h, found - MINUTE_S), None);
    assert_eq!(first_counted(&hours, Tier::Hour, found, h + DAY_S), None);
    // The baseline minute itself does not count, whatever it holds.
    let counted = vec![raw(
        doc! { "t": date(h), "values": { "0": { "n": 1_i64 } } },
    )];
    assert_eq!(first_counted(&counted, Tier::Hour, h, h + HOUR_S), None);
    // Something unreadable on the way: nothing is guessed.
    let bad = vec![raw(
        doc! { "t": date(h), "values": { "1": { "n": "x" }, "2": { "n": 1_i64 } } },
    )];
    assert_eq!(first_counted(&bad, Tier::Hour, h, h + HOUR_S), None);
    let no_t = vec![raw(doc! { "values": { "2": { "n": 1_i64 } } })];
    assert_eq!(first_counted(&no_t, Tier::Hour, h, h + HOUR_S), None);
    let days = vec![raw(
        doc! { "t": date(DAY), "values": { "23": { "59": { "n": 1_i64 } } } },
    )];
    let last_minute = DAY + DAY_S - MINUTE_S;
    assert_eq!(
        first_counted(&days, Tier::Day, h, DAY + DAY_S),
        Some(last_minute)
    );
}
