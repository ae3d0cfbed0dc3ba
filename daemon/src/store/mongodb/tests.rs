//! Unit tests of the store's pure parts: ids, documents, statements,
//! commands, replies, decoding, the first-sighting memory and the settings.
//! What needs a server is in `daemon/tests/it/mongo_store/`.

use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use bson::{doc, Document};
use mongodb::error::Error as DriverError;

use super::command::{chunk_by_bytes, chunk_by_size, to_raw, WriteCommand, MAX_COMMAND_BYTES};
use super::decode::ReadPlan;
use super::documents::{encode_last, EmptyBounds, Templates};
use super::errors::{classify, parse_write_reply};
use super::ids::{
    check_series, check_writer_id, doc_id, period_key, series_prefix, MAX_KEYED_S, MIN_KEYED_S,
};
use super::known_docs::KnownDocs;
use super::statements::{hour_ops, StatementCtx};
use super::{day_doc_bson_size, hour_doc_bson_size, redact_uri, MongoDbConfig};
use crate::model::{HourDocUpdate, Resolution, SampleKind, SeriesId, Slot, Tier, DAY_S, HOUR_S};
use crate::store::{ReadQuery, StoreError};

#[test]
fn period_keys_are_fixed_width_and_sort_as_time() {
    let t = 1_772_323_200; // 2026-03-01T00:00Z
    assert_eq!(
        period_key(Tier::Hour, t + 13 * HOUR_S).unwrap(),
        "2026030113"
    );
    assert_eq!(period_key(Tier::Day, t).unwrap(), "20260301");
    assert_eq!(period_key(Tier::Hour, -HOUR_S).unwrap(), "1969123123");
    assert_eq!(period_key(Tier::Day, MIN_KEYED_S).unwrap(), "00000101");
    assert_eq!(
        period_key(Tier::Hour, MAX_KEYED_S - 3599).unwrap(),
        "9999123123"
    );
    assert_eq!(period_key(Tier::Hour, MIN_KEYED_S - 1), None);
    assert_eq!(period_key(Tier::Hour, MAX_KEYED_S + 1), None);
    let mut last = String::new();
    for start in (t - 400 * DAY_S..t + 400 * DAY_S).step_by(7 * HOUR_S as usize) {
        let start = start.div_euclid(HOUR_S) * HOUR_S;
        let k = period_key(Tier::Hour, start).unwrap();
        assert!(k > last, "{k} after {last}");
        last = k;
    }
}

#[test]
fn ids_refuse_what_would_be_ambiguous() {
    let s = SeriesId::new("db-1", "op");
    assert_eq!(doc_id(&s, Tier::Day, 0).unwrap(), "db-1|op|19700101");
    assert!(matches!(
        doc_id(&s, Tier::Day, 3600),
        Err(StoreError::Invalid(_))
    ));
    assert!(check_series(&SeriesId::new("a|b", "m")).is_err());
    assert!(check_writer_id("tally-01_a").is_ok());
    assert!(check_writer_id("").is_err());
    assert!(check_writer_id("a.b").is_err());
    assert!(check_writer_id(&"a".repeat(65)).is_err());
}

fn paths(d: &RawDocument, prefix: &str, out: &mut Vec<String>) {
    for entry in d {
        let (k, v) = entry.unwrap();
        let p = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            RawBsonRef::Document(sub) if !sub.is_empty() && sub.get("n").unwrap().is_none() => {
                paths(sub, &p, out)
            }
            _ => out.push(p),
        }
    }
}

#[test]
fn preallocated_documents_have_every_slot() {
    let t = Templates::new(EmptyBounds::Infinite);
    let s = SeriesId::new("db-00001", "op_counter");
    let hour = t.document("x", &s, Tier::Hour, 0);
    let mut p = Vec::new();
    paths(&hour, "", &mut p);
    assert_eq!(p.len(), 6 + 60, "{p:?}"); // _id s m t w total + 60 minutes
    let day = t.document("x", &s, Tier::Day, 0);
    let mut p = Vec::new();
    paths(&day, "", &mut p);
    assert_eq!(p.len(), 6 + 24 * 61, "{p:?}");
    let slot = day
        .get_document("values")
        .unwrap()
        .get_document("23")
        .unwrap()
        .get_document("59")
        .unwrap();
    assert_eq!(slot.get_i64("n").unwrap(), 0);
    assert_eq!(slot.get_f64("min").unwrap(), f64::INFINITY);
    assert_eq!(slot.get_f64("max").unwrap(), f64::NEG_INFINITY);
    let last = slot.get_document("last").unwrap();
    assert_eq!(last.get_i64("t").unwrap(), i64::MIN);
    // An hour document's running slot keeps no last sample.
    assert!(hour
        .get_document("total")
        .unwrap()
        .get("last")
        .unwrap()
        .is_none());
    assert!(day
        .get_document("total")
        .unwrap()
        .get("last")
        .unwrap()
        .is_some());
    // 5,683 and 134,930 bytes: every minute slot's `last` adds 33.
    assert!(hour_doc_bson_size() > 5_000 && hour_doc_bson_size() < 6_500);
    assert!(day_doc_bson_size() > 125_000 && day_doc_bson_size() < 145_000);
}

/// For servers without infinities: the same document, of the same size,
/// with the largest finite doubles as the empty bounds.
#[test]
fn finite_templates_differ_only_in_the_empty_bounds() {
    let s = SeriesId::new("db-00001", "op_counter");
    for tier in [Tier::Hour, Tier::Day] {
        let inf = Templates::new(EmptyBounds::Infinite).document("x", &s, tier, 0);
        let fin = Templates::new(EmptyBounds::Finite).document("x", &s, tier, 0);
        assert_eq!(inf.as_bytes().len(), fin.as_bytes().len());
        let total = fin.get_document("total").unwrap();
        assert_eq!(total.get_i64("n").unwrap(), 0);
        assert_eq!(total.get_f64("min").unwrap(), f64::MAX);
        assert_eq!(total.get_f64("max").unwrap(), -f64::MAX);
        let text = format!("{:?}", fin.to_document().unwrap());
        assert!(!text.contains("inf"), "{text}");
    }
    // Read back, it is as empty as the infinite one.
    let q = ReadQuery {
        series: SeriesId::new("db", "m"),
        tier: Tier::Day,
        resolution: Resolution::Minute,
        from: 0,
        to: DAY_S,
    };
    let t = Templates::new(EmptyBounds::Finite);
    let d = t.document("db|m|19700101", &q.series, Tier::Day, 0);
    assert!(plan(&q).decode(&d).unwrap().slots.is_empty());
}

fn hour_update() -> HourDocUpdate {
    HourDocUpdate {
        hour_start: 3 * HOUR_S,
        minutes: vec![(5, Slot::of(1.0)), (5, Slot::of(2.0)), (59, Slot::of(4.0))],
        total: Slot::of(7.0),
    }
}

#[test]
fn statements_never_name_a_path_twice_or_a_prefix_of_another() {
    let s = SeriesId::new("db", "m");
    let ops = hour_ops(&s, &hour_update()).unwrap();
    let ctx = StatementCtx {
        watermark_path: "w.me",
        flush_id: 9,
    };
    let stmt = ctx.statement("db|m|1970010103", &s, SampleKind::Gauge, 0, ops);
    let u = stmt.get_document("u").unwrap();
    let mut all = Vec::new();
    for op in u {
        let (_, fields) = op.unwrap();
        for f in fields.as_document().unwrap() {
            all.push(f.unwrap().0.to_string());
        }
    }
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
            assert!(!b.starts_with(&format!("{a}.")) && !a.starts_with(&format!("{b}.")));
        }
    }
    // Minute 5 was listed twice: merged into one path.
    let inc = u.get_document("$inc").unwrap();
    assert_eq!(inc.get_i64("values.5.n").unwrap(), 2);
    assert_eq!(inc.get_f64("values.5.sum").unwrap(), 3.0);
    assert_eq!(inc.get_i64("values.59.n").unwrap(), 1);
    assert_eq!(inc.get_i64("total.n").unwrap(), 1);
    let mut bad = hour_update();
    bad.minutes[0].0 = 60;
    assert!(matches!(hour_ops(&s, &bad), Err(StoreError::Invalid(_))));
}

#[test]
fn write_command_bytes_are_valid_bson() {
    let mut c = WriteCommand::new("update", "coll", "updates");
    for i in 0..12_i32 {
        let mut d = RawDocumentBuf::new();
        d.append("i", i);
        c.push(&d);
    }
    let wc = to_raw(&doc! { "w": "majority" }).unwrap();
    let cmd = c.finish(Some(&wc)).unwrap().to_document().unwrap();
    assert_eq!(cmd.get_str("update").unwrap(), "coll");
    let arr = cmd.get_array("updates").unwrap();
    assert_eq!(arr.len(), 12);
    assert_eq!(arr[11].as_document().unwrap().get_i32("i").unwrap(), 11);
    assert!(!cmd.get_bool("ordered").unwrap());
    assert_eq!(
        cmd.get_document("writeConcern")
            .unwrap()
            .get_str("w")
            .unwrap(),
        "majority"
    );
}

#[test]
fn chunks_respect_count_and_bytes() {
    let c = chunk_by_size([10usize; 25].into_iter(), 10);
    assert_eq!(c, vec![(0, 10), (10, 20), (20, 25)]);
    let big = MAX_COMMAND_BYTES / 3;
    let c = chunk_by_size([big; 7].into_iter(), 1000);
    assert_eq!(c, vec![(0, 2), (2, 4), (4, 6), (6, 7)]);
    assert!(chunk_by_size(std::iter::empty(), 10).is_empty());
    // A caller's own byte bound: day documents of ~135 KB, 4 MiB a part.
    let c = chunk_by_bytes([135_000usize; 100].into_iter(), usize::MAX, 4 << 20);
    assert_eq!(c.len(), 4);
    assert!(c.iter().all(|(a, b)| (b - a) * 135_016 <= 4 << 20));
    assert_eq!(c.last().map(|&(_, b)| b), Some(100));
}

#[test]
fn write_replies_sort_duplicates_from_refusals() {
    let reply = doc! {
        "n": 3, "nModified": 1, "ok": 1.0,
        "writeErrors": [{ "index": 1, "code": 11000, "errmsg": "E11000" },
                        { "index": 4, "code": 11000, "errmsg": "E11000" }],
    };
    let r = parse_write_reply(&reply, 5).unwrap();
    assert_eq!((r.n, r.duplicates), (3, vec![1, 4]));
    let reply = doc! { "n": 0, "ok": 1.0,
    "writeErrors": [{ "index": 0, "code": 40, "errmsg": "conflict" }] };
    assert!(matches!(
        parse_write_reply(&reply, 1),
        Err(StoreError::Invalid(m)) if m.contains("code 40")
    ));
    let reply = doc! { "n": 0, "ok": 1.0,
    "writeErrors": [{ "index": 0, "code": 10107, "errmsg": "not primary" }] };
    assert!(matches!(
        parse_write_reply(&reply, 1),
        Err(StoreError::Unavailable(_))
    ));
    let reply = doc! { "n": 1, "ok": 1.0, "writeConcernError": { "code": 64 } };
    assert!(matches!(
        parse_write_reply(&reply, 1),
        Err(StoreError::Ambiguous(_))
    ));
    let reply = doc! { "n": 1, "ok": 1.0,
    "writeErrors": [{ "index": 7, "code": 11000, "errmsg": "E11000" }] };
    assert!(matches!(
        parse_write_reply(&reply, 1),
        Err(StoreError::Ambiguous(_))
    ));
}

#[test]
fn known_docs_forget_old_periods_and_respect_the_cap() {
    let mut k = KnownDocs::new(5);
    k.insert(Tier::Hour, 0, 1);
    k.insert(Tier::Hour, 0, 2);
    assert!(k.contains(Tier::Hour, 0, 1));
    // Far newer hour: the old one is dropped.
    k.insert(Tier::Hour, 10 * HOUR_S, 3);
    assert!(!k.contains(Tier::Hour, 0, 1));
    assert_eq!(k.len(), 1);
    // Too old to be remembered at all.
    k.insert(Tier::Hour, 0, 4);
    assert!(!k.contains(Tier::Hour, 0, 4));
    // The cap: the oldest period goes first.
    k.insert(Tier::Day, 0, 1);
    k.insert(Tier::Day, 0, 2);
    k.insert(Tier::Hour, 11 * HOUR_S, 1);
    k.insert(Tier::Hour, 11 * HOUR_S, 2);
    assert_eq!(k.len(), 5);
    k.insert(Tier::Hour, 11 * HOUR_S, 3);
    assert!(k.len() <= 5);
    assert!(k.contains(Tier::Hour, 11 * HOUR_S, 3));
    assert!(!k.contains(Tier::Day, 0, 1));
}

fn plan(q: &ReadQuery) -> ReadPlan<'_> {
    ReadPlan {
        query: q,
        prefix: series_prefix(&q.series),
        writer: "me",
    }
}

#[test]
fn decode_is_defensive() {
    let q = ReadQuery {
        series: SeriesId::new("db", "m"),
        tier: Tier::Hour,
        resolution: Resolution::Minute,
        from: 0,
        to: HOUR_S,
    };
    let t = Templates::new(EmptyBounds::Infinite);
    let mut good = t.document("db|m|1970010100", &q.series, Tier::Hour, 0);
    let read = plan(&q).decode(&good).unwrap();
    assert_eq!((read.period_start, read.kind, read.watermark), (0, None, 0));
    assert!(read.slots.is_empty());
    good.append("k", "gauge");
    assert_eq!(
        plan(&q).decode(&good).unwrap().kind,
        Some(SampleKind::Gauge)
    );

    let cases: Vec<(Document, &str)> = vec![
        (doc! { "_id": "db|m|1970010100" }, "`t` is missing"),
        (doc! { "_id": "db|m|1970010100", "t": 5 }, "`t` is Int32"),
        (
            doc! { "_id": "db|m|1970010101", "t": bson::DateTime::from_millis(0) },
            "_id",
        ),
        (
            doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0), "k": "x" },
            "unknown kind",
        ),
        (
            doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
            "values": { "60": { "n": 1_i64, "sum": 1.0, "min": 1.0, "max": 1.0 } } },
            "values.60",
        ),
        (
            doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
            "values": { "1": { "n": "one", "sum": 1.0, "min": 1.0, "max": 1.0 } } },
            "values.1.n",
        ),
        (
            doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
            "values": { "1": { "n": 1_i64, "sum": 1.0, "max": 1.0 } } },
            "values.1.min",
        ),
        (
            doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
            "w": { "me": "x" } },
            "w.me",
        ),
    ];
    for (d, want) in cases {
        let raw = to_raw(&d).unwrap();
        let err = plan(&q).decode(&raw).unwrap_err().to_string();
        assert!(err.contains(want), "{d}: {err}");
    }
    // Other numeric types, and slots out of time order.
    let d = doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
    "w": { "me": 7_i32, "other": 99_i64 },
    "values": { "30": { "n": 2.0, "sum": 3_i32, "min": 1_i64, "max": 2.0 },
                "5": { "n": 1_i32, "sum": 1.0, "min": 1.0, "max": 1.0 } } };
    let read = plan(&q).decode(&to_raw(&d).unwrap()).unwrap();
    assert_eq!(read.watermark, 7);
    assert_eq!(
        read.slots,
        vec![
            (300, Slot::of(1.0)),
            (1800, Slot::summary(2, 3.0, 1.0, 2.0))
        ]
    );
    // A minute of only a last sample in a document an upsert created: the
    // statement set `last` alone, and the slot reads as that sample.
    let d = doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
    "values": { "5": { "last": { "t": 301_000_i64, "v": 4.5 } } } };
    let read = plan(&q).decode(&to_raw(&d).unwrap()).unwrap();
    let mut last = Slot::EMPTY;
    last.last_ms = 301_000;
    last.last = 4.5;
    assert_eq!(read.slots, vec![(300, last)]);
    // The staleness marker as `encode_last` stores it reads back with its
    // bits; a plain null is a NaN.
    let marker = Slot::at(302_000, crate::model::stale_marker());
    let stored = encode_last(&marker);
    assert_eq!(
        stored.get("stale").unwrap(),
        Some(RawBsonRef::Boolean(true))
    );
    let stored: Document = bson::from_slice(stored.as_bytes()).unwrap();
    let d = doc! { "_id": "db|m|1970010100", "t": bson::DateTime::from_millis(0),
    "values": { "5": { "last": stored }, "6": { "last": { "t": 361_000_i64, "v": null } } } };
    let read = plan(&q).decode(&to_raw(&d).unwrap()).unwrap();
    assert!(read.slots[0].1.ends(), "{:?}", read.slots);
    assert!(read.slots[1].1.last.is_nan() && !read.slots[1].1.ends());
}

#[test]
fn driver_errors_map_to_store_kinds() {
    let io: DriverError = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into();
    assert!(matches!(classify(&io, true), StoreError::Ambiguous(_)));
    assert!(matches!(classify(&io, false), StoreError::Unavailable(_)));
}

#[test]
fn redaction_masks_only_a_password() {
    for (uri, shown) in [
        ("mongodb://h:1", "mongodb://h:1"),
        (
            "mongodb://h1:1,h2:2/db?replicaSet=rs",
            "mongodb://h1:1,h2:2/db?replicaSet=rs",
        ),
        // A user without a password has nothing to hide.
        ("mongodb://u@h", "mongodb://u@h"),
        ("mongodb://u:p@h", "mongodb://u:***@h"),
        ("mongodb://:p@h", "mongodb://:***@h"),
        ("mongodb://u:p:q@h/db", "mongodb://u:***@h/db"),
        ("mongodb+srv://u:p%40x@h/db", "mongodb+srv://u:***@h/db"),
        (
            "mongodb+srv://tally:s3cret@cluster0.example.net/?retryWrites=true",
            "mongodb+srv://tally:***@cluster0.example.net/?retryWrites=true",
        ),
        // An unescaped `@` in the password: the last one ends the credentials.
        (
            "mongodb://u:p@ss@w@h:27017,g/db",
            "mongodb://u:***@h:27017,g/db",
        ),
        ("not a uri", "not a uri"),
        ("", ""),
    ] {
        assert_eq!(redact_uri(uri), shown, "{uri}");
    }
}

#[test]
fn settings_problems_name_their_keys() {
    let problems = |c: &MongoDbConfig| {
        let mut p = crate::validate::Problems::default();
        c.check(&mut p);
        p.into_vec()
    };
    assert!(problems(&MongoDbConfig::default()).is_empty());
    let bad = MongoDbConfig {
        uri: "http://x".into(),
        database: "a.b".into(),
        hour_collection: "same".into(),
        day_collection: "same".into(),
        series_collection: "tally_writers".into(),
        statements_per_batch: 0,
        max_concurrent_batches: 0,
        timeout: std::time::Duration::ZERO,
        max_statements_per_s: 0,
        seal_spread: std::time::Duration::from_secs(7200),
        day_write_delay: None,
    };
    let problems = problems(&bad);
    let keys: Vec<&str> = problems.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        [
            "mongodb.uri",
            "mongodb.database",
            "mongodb.day_collection",
            "mongodb.series_collection",
            "mongodb.statements_per_batch",
            "mongodb.max_concurrent_batches",
            "mongodb.timeout",
            "mongodb.seal_spread",
        ]
    );
    assert_eq!(problems[1].1, "must not contain '.'");
    assert!(
        problems[4].1.contains("between 1 and 100000"),
        "{problems:?}"
    );
}

#[test]
fn an_older_configuration_with_day_write_delay_still_loads() {
    let cfg: MongoDbConfig =
        toml::from_str("day_write_delay = \"1m\"\nseal_spread = \"2m\"").unwrap();
    assert_eq!(
        cfg.day_write_delay,
        Some(std::time::Duration::from_secs(60))
    );
    assert_eq!(cfg.seal_spread, std::time::Duration::from_secs(120));
    let mut p = crate::validate::Problems::default();
    cfg.check(&mut p);
    assert!(p.into_vec().is_empty());
}
