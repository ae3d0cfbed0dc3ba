//! The audit's data findings: a late sample lowers a series' `first_seen`
//! (on both stores, and it stays lowered across a restart); finite input
//! never sums to infinity; and `/readyz` answers 503 while the final flush
//! drains instead of refusing connections.

use std::time::{Duration, Instant};

use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, http_client, now_ms, series};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::mongo::{mongo_target, MongoTarget};
use tally_testkit::settle::{flushes_so_far, wait_flushed};
use tally_testkit::{Daemon, DaemonOpts};

use super::{batch, prom, push};
use crate::tallyd;

const MINUTE_MS: i64 = 60_000;
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// `tallyd` on the MongoDB store of `target`.
fn on_mongodb(target: &MongoTarget) -> DaemonOpts {
    tallyd()
        .flush_interval("200ms")
        .mongodb(&target.uri_selecting_within(2_000), &target.database)
        .env("TALLYD_FLUSH_RETRY_MAX_BACKOFF", "500ms")
}

/// The one catalog entry of `late|cpu`: (first_seen, last_seen).
async fn seen(d: &Daemon, since: Option<&str>) -> Option<(i64, i64)> {
    let mut params = vec![("source", "late"), ("metric", "cpu")];
    if let Some(s) = since {
        params.push(("seen_since", s));
    }
    let body = get_ok(d, "/api/v1/series", &params).await;
    let entry = body["series"].as_array()?.first()?.clone();
    Some((
        entry["first_seen"].as_i64().unwrap(),
        entry["last_seen"].as_i64().unwrap(),
    ))
}

async fn late_sample_lowers_first_seen(mut d: Daemon) {
    let now = now_ms();
    let t = now - now.rem_euclid(MINUTE_MS);
    let gauge = |at: i64| batch("late", series("cpu", pb::SampleKind::Gauge, &[(at, 1.0)]));
    assert_eq!(push(&d, vec![gauge(now)]).await.accepted, 1);
    wait_flushed(&d, 1.0, FLUSH_TIMEOUT).await;
    assert_eq!(seen(&d, None).await, Some((t / 1000, t / 1000)));
    let flushed = flushes_so_far(&d).await;
    assert_eq!(
        push(&d, vec![gauge(now - 40 * MINUTE_MS)]).await.accepted,
        1
    );
    wait_flushed(&d, flushed + 1.0, FLUSH_TIMEOUT).await;
    let want = Some(((t - 40 * MINUTE_MS) / 1000, t / 1000));
    assert_eq!(seen(&d, None).await, want);
    // seen_since is about last_seen: still seen 30 minutes ago, not later.
    let half_hour_ago = ((t - 30 * MINUTE_MS) / 1000).to_string();
    assert_eq!(seen(&d, Some(&half_hour_ago)).await, want);
    assert_eq!(seen(&d, Some(&(t / 1000 + 60).to_string())).await, None);
    d.restart();
    assert_eq!(seen(&d, None).await, want, "after a restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_first_seen_on_the_embedded_store() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    late_sample_lowers_first_seen(d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_first_seen_on_mongodb() {
    let target = mongo_target().await;
    let d = Daemon::start_async(on_mongodb(&target)).await;
    late_sample_lowers_first_seen(d).await;
    target.cleanup().await;
}

/// −1.7e308 → 1.7e308 on a cumulative counter, and gauges near the top of
/// the range: refused `OVERFLOW` where a sum would leave ±1e300, and every
/// stored and computed sum stays a number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finite_input_never_stores_infinity() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let now = now_ms();
    let t = now - now.rem_euclid(MINUTE_MS);
    let at = |i: i64| t + i;
    let big =
        |metric: &str, kind, samples: &[(i64, f64)]| batch("big", series(metric, kind, samples));
    let (counter, gauge) = (pb::SampleKind::CumulativeCounter, pb::SampleKind::Gauge);
    let sources = vec![
        big(
            "counter",
            counter,
            &[(at(0), -1.7e308), (at(1), 1.7e308), (at(2), 1.7e308)],
        ),
        big("g", gauge, &[(at(0), 1e308), (at(1), 1e308)]),
        big("h", gauge, &[(at(0), 6e299), (at(1), 6e299)]),
    ];
    let resp = push(&d, sources).await;
    let overflow = pb::RejectReason::Overflow as i32;
    let refused: Vec<(u32, Option<u32>)> = resp
        .rejections
        .iter()
        .map(|r| {
            assert_eq!(r.reason, overflow, "{r:?}");
            (r.source_index, r.sample_index)
        })
        .collect();
    let want = [(0, Some(1)), (1, Some(0)), (1, Some(1)), (2, Some(1))];
    assert_eq!(refused, want, "{resp:?}");
    assert_eq!(resp.accepted, 3);
    wait_flushed(&d, 1.0, FLUSH_TIMEOUT).await;
    let m = metrics_text(&d).await;
    assert_eq!(
        metric(
            &m,
            "tally_samples_rejected_total",
            &[("reason", "overflow")]
        ),
        Some(4.0)
    );
    sums_are_numbers(&d, t).await;
}

/// Every stored sum of `big` reads back as a number, and PromQL's
/// `sum_over_time` of `h` is its one accepted sample.
async fn sums_are_numbers(d: &Daemon, t: i64) {
    let from = (t / 1000 - 3600).to_string();
    let params = [
        ("source", "big"),
        ("metric", "*"),
        ("from", &from),
        ("step", "1h"),
    ];
    let body = get_ok(d, "/api/v1/range", &params).await;
    for s in body["series"].as_array().unwrap() {
        for p in s["points"].as_array().unwrap() {
            assert!(p["sum"].is_f64(), "a sum that is not a number: {s}");
        }
    }
    let time = (t / 1000 + 60).to_string();
    let params = [("query", "sum_over_time(h[1h])"), ("time", &time)];
    let (status, body) = prom(d, "query", &params).await;
    assert_eq!(status, 200, "{body}");
    let value: f64 = body["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(value, 6e299);
}

/// MongoDB down, so the final flush retries until the shutdown deadline:
/// meanwhile `/readyz` answers 503 "shutting down", not connection refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_503_while_the_final_flush_drains() {
    let target = mongo_target().await;
    let Some(standin) = target.standin() else {
        println!("note: needs the MongoDB stand-in's fault injection; skipped");
        return;
    };
    let mut d =
        Daemon::start_async(on_mongodb(&target).env("TALLYD_FLUSH_SHUTDOWN_DEADLINE", "6s")).await;
    standin.set_down(true);
    let gauge = batch(
        "drain",
        series("cpu", pb::SampleKind::Gauge, &[(now_ms(), 1.0)]),
    );
    assert_eq!(push(&d, vec![gauge]).await.accepted, 1);
    let url = format!("{}/readyz", d.http_url());
    d.sigterm();
    let deadline = Instant::now() + Duration::from_secs(5);
    let draining = loop {
        match http_client().get(&url).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                if body.contains("shutting down") {
                    break status;
                }
            }
            Err(e) => panic!("/readyz refused during the drain: {e}\n{}", d.logs()),
        }
        assert!(
            Instant::now() < deadline,
            "no 'shutting down'\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(draining, 503);
    // Still answering a second later, the drain going on.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, _) = get_json_text(&url).await;
    assert_eq!(status, 503);
    let status = d.wait_async(Duration::from_secs(30)).await;
    assert!(
        !status.success(),
        "the sample could not be written: {status}"
    );
}

async fn get_json_text(url: &str) -> (u16, String) {
    let r = http_client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}
