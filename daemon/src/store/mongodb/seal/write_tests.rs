use bson::raw::RawDocumentBuf;
use bson::{doc, Document};

use super::*;
use crate::model::Slot;

fn slot(n: i64, sum: f64, min: f64, max: f64) -> Document {
    doc! { "n": n, "sum": sum, "min": min, "max": max }
}

fn empty() -> Document {
    slot(0, 0.0, f64::INFINITY, f64::NEG_INFINITY)
}

fn raw(d: Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(&d).unwrap()
}

fn hour_doc(minutes: &[(usize, Document)], total: Document) -> RawDocumentBuf {
    let mut values = Document::new();
    for m in 0..60 {
        let s = minutes
            .iter()
            .find(|(i, _)| *i == m)
            .map_or_else(empty, |(_, s)| s.clone());
        values.insert(m.to_string(), s);
    }
    raw(
        doc! { "_id": "a|m|2026110203", "s": "a", "m": "m", "k": "gauge", "total": total, "values": values },
    )
}

fn day_doc(hours: &[(usize, Document)], total: Document) -> RawDocumentBuf {
    let mut values = Document::new();
    for h in 0..24 {
        let t = hours
            .iter()
            .find(|(i, _)| *i == h)
            .map_or_else(empty, |(_, s)| s.clone());
        let mut block = doc! { "total": t };
        for m in 0..60 {
            block.insert(m.to_string(), empty());
        }
        values.insert(h.to_string(), block);
    }
    raw(doc! { "_id": "a|m|20261102", "total": total, "values": values })
}

#[test]
fn a_seal_sets_the_differing_slots_and_the_days_total() {
    let hour = hour_doc(&[(5, slot(2, 3.0, 1.0, 2.0))], slot(2, 3.0, 1.0, 2.0));
    // Hour 1 of the day already sealed with 4 samples.
    let day = day_doc(&[(1, slot(4, 10.0, 0.5, 9.0))], slot(4, 10.0, 0.5, 9.0));
    let stmt = seal_statement(
        "a|m|20261102",
        &hour,
        Some(&day),
        3,
        0,
        EmptyBounds::Infinite,
    )
    .unwrap()
    .unwrap()
    .to_document()
    .unwrap();
    let q = stmt.get_document("q").unwrap();
    assert_eq!(q.get_i64("total.n").unwrap(), 4);
    assert_eq!(q.get_f64("total.sum").unwrap(), 10.0);
    let set = stmt
        .get_document("u")
        .unwrap()
        .get_document("$set")
        .unwrap();
    let keys: Vec<&str> = set.keys().map(String::as_str).collect();
    assert_eq!(keys, ["values.3.5", "values.3.total", "total", "k"]);
    assert_eq!(
        set.get_document("values.3.5")
            .unwrap()
            .get_i64("n")
            .unwrap(),
        2
    );
    let total = set.get_document("total").unwrap();
    assert_eq!(total.get_i64("n").unwrap(), 6);
    assert_eq!(total.get_f64("sum").unwrap(), 13.0);
    assert_eq!(total.get_f64("min").unwrap(), 0.5);
    assert_eq!(total.get_f64("max").unwrap(), 9.0);
    let on_insert = stmt
        .get_document("u")
        .unwrap()
        .get_document("$setOnInsert")
        .unwrap();
    assert_eq!(on_insert.get_str("s").unwrap(), "a");
}

#[test]
fn a_second_seal_changes_nothing() {
    let hour = hour_doc(&[(5, slot(2, 3.0, 1.0, 2.0))], slot(2, 3.0, 1.0, 2.0));
    let mut day = day_doc(&[(3, slot(2, 3.0, 1.0, 2.0))], slot(2, 3.0, 1.0, 2.0))
        .to_document()
        .unwrap();
    day.get_document_mut("values")
        .unwrap()
        .get_document_mut("3")
        .unwrap()
        .insert("5", slot(2, 3.0, 1.0, 2.0));
    let day = raw(day);
    let stmt = seal_statement(
        "a|m|20261102",
        &hour,
        Some(&day),
        3,
        0,
        EmptyBounds::Infinite,
    );
    assert!(stmt.unwrap().is_none());
}

#[test]
fn empty_slots_match_whatever_bounds_they_keep() {
    let finite = slot(0, 0.0, f64::MAX, -f64::MAX);
    let hour = hour_doc(&[], finite.clone());
    let day = day_doc(&[], finite);
    let stmt = seal_statement("a|m|20261102", &hour, Some(&day), 0, 0, EmptyBounds::Finite);
    assert!(stmt.unwrap().is_none());
    assert!(same(
        &Slot::EMPTY,
        &Slot::summary(0, 0.0, f64::MAX, -f64::MAX)
    ));
}

#[test]
fn a_missing_day_document_is_sealed_from_empty() {
    let hour = hour_doc(&[(0, slot(1, 1.0, 1.0, 1.0))], slot(1, 1.0, 1.0, 1.0));
    let stmt = seal_statement("a|m|20261102", &hour, None, 0, 0, EmptyBounds::Infinite)
        .unwrap()
        .unwrap()
        .to_document()
        .unwrap();
    let q = stmt.get_document("q").unwrap();
    assert_eq!(q.get_i64("total.n").unwrap(), 0);
    assert_eq!(day_id_of("a|m|2026110203").as_deref(), Some("a|m|20261102"));
}

#[test]
fn a_block_never_goes_back_to_fewer_samples() {
    let hour = hour_doc(&[(5, slot(1, 1.0, 1.0, 1.0))], slot(1, 1.0, 1.0, 1.0));
    let day = day_doc(&[(3, slot(2, 3.0, 1.0, 2.0))], slot(2, 3.0, 1.0, 2.0));
    let r = seal_statement(
        "a|m|20261102",
        &hour,
        Some(&day),
        3,
        0,
        EmptyBounds::Infinite,
    );
    assert!(matches!(r, Err(DecodeError::Value { .. })), "{r:?}");
}

#[test]
fn a_full_hours_seal_is_a_few_kilobytes() {
    let minutes: Vec<(usize, Document)> = (0..60)
        .map(|m| (m, slot(60, 1234.5 + m as f64, -1.25, 987.75)))
        .collect();
    let hour = hour_doc(&minutes, slot(3600, 1e6, -1.25, 987.75));
    let day = day_doc(&[(1, slot(4, 10.0, 0.5, 9.0))], slot(4, 10.0, 0.5, 9.0));
    let stmt = seal_statement(
        "a|m|20261102",
        &hour,
        Some(&day),
        13,
        0,
        EmptyBounds::Infinite,
    )
    .unwrap()
    .unwrap();
    let bytes = stmt.as_bytes().len();
    println!("a seal of a full hour: {bytes} bytes");
    // 60 minute slots, the hour's and the day's running slots, the filter.
    assert!((4_000..6_000).contains(&bytes), "{bytes} bytes");
}
