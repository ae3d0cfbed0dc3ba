//! A cumulative counter's first sample is only the baseline its first
//! increase is counted from, so no read shows its minute: the native range
//! API, PromQL's bare selectors and `count_over_time`, and the catalog's
//! `first_seen`, on both stores, read from the store and memory and, after
//! a restart, from the store alone.
//!
//! The daemon still writes that minute as a slot with no increase and the
//! raw value as its last sample (on MongoDB `{last: {t, v}}` and no `n`),
//! the form documents written before reads left baselines out have too. So the reads after the restart show that a
//! stored baseline-only minute reads as empty; on MongoDB the document is
//! read with the driver to show that the minute is indeed in it.

use std::time::Duration;

use futures::TryStreamExt;
use mongodb::bson::{doc, Document};
use serde_json::{json, Value};
use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, push_of, push_ok, series};
use tally_testkit::settle::{eventually, flushes_so_far, wait_flushed};
use tally_testkit::Daemon;

use super::check::{minute_start_ms, restart, MINUTE_MS, SECOND_MS};
use super::store::{Store, StoreKind};

const SOURCE: &str = "host-b";
/// How long the catalog may take to list what a flush brought.
const SETTLE: Duration = Duration::from_secs(15);
const METRIC: &str = "net.bytes";
/// How PromQL names the series (`.` becomes `_`, the source `instance`).
const SELECTOR: &str = r#"net_bytes{instance="host-b"}"#;

mod a_cumulative_counters_baseline_minute_reads_as_empty {
    use super::{Store, StoreKind};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn embedded() {
        super::a_cumulative_counters_baseline_minute_reads_as_empty(
            Store::new(StoreKind::Embedded).await,
        )
        .await;
    }

    mongo_target_tests!(
        a_cumulative_counters_baseline_minute_reads_as_empty,
        Store::mongodb
    );
}

/// The baseline in minute `m`, flushed on its own (so the catalog sees a
/// batch holding nothing else), then increases of 5 and 7 in the next two
/// minutes.
async fn a_cumulative_counters_baseline_minute_reads_as_empty(store: Store) {
    let mut d = store.start("1s").await;
    let m = minute_start_ms(10);
    let mut ingest = d.ingest_client().await;
    let counter = |samples: &[(i64, f64)]| {
        push_of(
            SOURCE,
            vec![series(METRIC, pb::SampleKind::CumulativeCounter, samples)],
        )
        .sources
    };
    let before = flushes_so_far(&d).await;
    push_ok(&mut ingest, counter(&[(m + 10 * SECOND_MS, 1000.0)])).await;
    settle(&d, &store, before).await;
    let body = range(&d, m, "1m").await;
    assert_eq!(points(&body), json!([]), "the baseline alone: {body}");
    let before = flushes_so_far(&d).await;
    push_ok(
        &mut ingest,
        counter(&[
            (m + MINUTE_MS + 10 * SECOND_MS, 1005.0),
            (m + 2 * MINUTE_MS + 10 * SECOND_MS, 1012.0),
        ]),
    )
    .await;
    settle(&d, &store, before).await;
    check_reads(&d, m).await;
    restart(&mut d).await;
    check_reads(&d, m).await;
    if let Some(target) = store.target() {
        let slot = stored_minute(&target.db().await, m).await;
        // Stored as `{last: {t, v}}`: no count (or 0 in a pre-allocated
        // slot), the raw value as the last sample.
        assert_eq!(
            slot.get_i64("n").unwrap_or(0),
            0,
            "the baseline's minute: {slot}"
        );
        assert!(slot.get_document("last").is_ok(), "{slot}");
    }
    store.cleanup().await;
}

/// Waits for the flush of what was pushed since `before` flushes (a flush
/// with nothing to carry is not counted).
async fn settle(d: &Daemon, store: &Store, before: f64) {
    wait_flushed(d, before + 1.0, store.flush_timeout()).await;
}

async fn check_reads(d: &Daemon, m: i64) {
    let s = m / 1000;
    // Per minute: the minutes of the increases only, with their last samples.
    let body = range(d, m, "1m").await;
    assert_eq!(
        points(&body),
        json!([
            { "t": s + 60, "n": 1, "sum": 5.0, "last": 1005.0 },
            { "t": s + 120, "n": 1, "sum": 7.0, "last": 1012.0 },
        ]),
        "{body}"
    );
    // Wider buckets, one of them holding the baseline with an increase:
    // the increases, nothing more.
    let body = range(d, m, "5m").await;
    let wide = points(&body);
    let total = |field: &str| -> f64 {
        wide.as_array()
            .into_iter()
            .flatten()
            .map(|p| p[field].as_f64().unwrap_or(0.0))
            .sum()
    };
    assert_eq!((total("n"), total("sum")), (2.0, 12.0), "{body}");

    // PromQL: the window of the baseline's minute alone has no count, a
    // bare selector nothing until the first increase's sample.
    assert_eq!(
        query(d, &format!("count_over_time({SELECTOR}[5m])"), s + 60).await,
        None
    );
    assert_eq!(
        query(d, &format!("count_over_time({SELECTOR}[1m])"), s + 60).await,
        None
    );
    assert_eq!(
        query(d, &format!("count_over_time({SELECTOR}[5m])"), s + 180).await,
        Some(2.0)
    );
    assert_eq!(
        query(d, SELECTOR, s + 50).await,
        None,
        "inside the baseline's minute"
    );
    assert_eq!(query(d, SELECTOR, s + 90).await, Some(1005.0));
    let body = get_ok(
        d,
        "/prometheus/api/v1/query_range",
        &[
            ("query", SELECTOR),
            ("start", &s.to_string()),
            ("end", &(s + 180).to_string()),
            ("step", "60"),
        ],
    )
    .await;
    let values: Vec<(f64, &str)> = body["data"]["result"][0]["values"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v[0].as_f64().unwrap_or(f64::NAN),
                v[1].as_str().unwrap_or(""),
            )
        })
        .collect();
    let (at1, at2) = ((s + 120) as f64, (s + 180) as f64);
    assert_eq!(values, [(at1, "1005"), (at2, "1012")], "{body}");

    // The catalog: first seen with the first increase.
    eventually("the catalog lists the counter", SETTLE, || async {
        let body = get_ok(
            d,
            "/api/v1/series",
            &[("source", SOURCE), ("metric", METRIC)],
        )
        .await;
        match body["series"][0]["first_seen"].as_i64() {
            Some(first) if first == s + 60 => Ok(()),
            _ => Err(body.to_string()),
        }
    })
    .await;
}

/// `/api/v1/range` of the counter from `m` (Unix ms) for five minutes at
/// `step`, with `n`, `sum` and `last`.
async fn range(d: &Daemon, m: i64, step: &str) -> Value {
    let from = m / 1000;
    let to = (from + 300).to_string();
    let params = [
        ("source", SOURCE),
        ("metric", METRIC),
        ("from", &from.to_string()),
        ("to", &to),
        ("step", step),
        ("agg", "count,sum,last"),
    ];
    get_ok(d, "/api/v1/range", &params).await
}

/// The points of the answer's series, without `last_ms`; none when it has
/// no series.
fn points(body: &Value) -> Value {
    let Some(points) = body["series"][0]["points"].as_array() else {
        return json!([]);
    };
    points
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(o) = p.as_object_mut() {
                o.remove("last_ms");
            }
            p
        })
        .collect()
}

/// An instant query's one value at `time_s`; None when it answers nothing.
async fn query(d: &Daemon, q: &str, time_s: i64) -> Option<f64> {
    let body = get_ok(
        d,
        "/prometheus/api/v1/query",
        &[("query", q), ("time", &time_s.to_string())],
    )
    .await;
    let result = body["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(result.len() <= 1, "{q} at {time_s}: {body}");
    result.first().map(|r| {
        r["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    })
}

/// The counter's minute slot at `m` in its hour document, read with the driver.
async fn stored_minute(db: &mongodb::Database, m: i64) -> Document {
    let key = ((m / MINUTE_MS) % 60).to_string();
    let docs: Vec<Document> = db
        .collection::<Document>("metrics_by_hour")
        .find(doc! { "s": SOURCE, "m": METRIC })
        .await
        .expect("find the counter's hour documents")
        .try_collect()
        .await
        .expect("read the counter's hour documents");
    let hour = (m / MINUTE_MS / 60) * 3_600_000;
    let doc = docs
        .iter()
        .find(|d| {
            d.get_datetime("t")
                .is_ok_and(|t| t.timestamp_millis() == hour)
        })
        .unwrap_or_else(|| panic!("no hour document at {hour}: {docs:?}"));
    doc.get_document("values")
        .and_then(|v| v.get_document(&key))
        .unwrap_or_else(|e| panic!("values.{key} ({e}): {doc}"))
        .clone()
}
