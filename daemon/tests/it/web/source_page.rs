//! The source's page in Chromium: Explore with a source and no metric
//! draws every metric of the source as a small chart. Against one daemon
//! fed by a real Prometheus scraping a real node exporter (live) and by the
//! load generator (a source of many labelled metrics over the last 20
//! minutes, then silent, so its charts can be compared point for point):
//! the page lists the metrics Prometheus' API lists for the instance; every
//! small chart drawn equals `/api/v1/range`; a screenful is one read, and
//! scrolling reads only what comes into view; the charts in view stay live
//! on one stream; a small chart opens full size; the URL restores the page;
//! and `/api/v1/charts` keeps within its bounds.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tally_testkit::client::{get_json, get_ok};
use tally_testkit::metrics::{metric_sum, metrics_text};
use tally_testkit::Daemon;

use super::browser::Browser;
use super::feeds::{backfill_per_cpu, PrometheusFeed};
use super::{clean_page, drawn_chart};
use crate::tallyd;

const SOURCE: &str = "page-000001";
/// Metrics of the load generator's source: many screenfuls of small charts.
const METRICS: usize = 80;
const CPUS: usize = 2;
const BACKFILL_S: i64 = 1200;

/// The small charts in view, once every one of them is drawn: their
/// metrics, in page order.
const IN_VIEW_DRAWN: &str = r#"
    const p = document.querySelector('.source-page');
    if (!p || p.dataset.state !== 'listed') return null;
    const cards = [...p.querySelectorAll('.mini')].filter((e) => {
        const b = e.getBoundingClientRect();
        return b.bottom > 0 && b.top < innerHeight;
    });
    if (!cards.length || cards.some((e) => e.dataset.state !== 'drawn')) return null;
    return cards.map((e) => e.dataset.metric);
"#;

/// The metrics of every charts read the page made, per request.
const CHARTS_READS: &str = r#"
    return performance.getEntriesByType('resource')
        .filter((e) => e.name.includes('/api/v1/charts?'))
        .map((e) => new URL(e.name).searchParams.get('metric').split(','));
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_opens_onto_its_graphs() {
    let d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_INGEST_LATENESS_WINDOW", "1h"),
    )
    .await;
    let Some(b) = Browser::start(&d.http_url()).await else {
        return;
    };
    let prom = PrometheusFeed::start(&d).await;
    backfill_per_cpu(&d, "page-", 1, METRICS, CPUS, BACKFILL_S).await;

    small_charts_equal_range(&b, &d).await;
    scrolling_reads_what_comes_into_view(&b).await;
    url_restores_the_page(&b).await;
    a_small_chart_opens_full_size(&b).await;
    charts_api_bounds(&d).await;
    match &prom {
        Some(p) => {
            p.arrived(&d, 100).await;
            lists_what_prometheus_lists(&b, &d, &p.source).await;
            live_on_one_stream(&b, &d, &p.source).await;
        }
        None => eprintln!("the Prometheus checks skipped: no Prometheus feed"),
    }
    b.close().await;
}

async fn open_page(b: &Browser, query: &str) -> Vec<String> {
    b.open(&format!("/?view=explore&{query}")).await;
    let v = b
        .wait_js("the small charts in view, drawn", IN_VIEW_DRAWN)
        .await;
    serde_json::from_value(v).unwrap()
}

/// Every small chart in view against `/api/v1/range` over its window: the
/// same points (a gauge's mean and band, a counter's rate).
async fn small_charts_equal_range(b: &Browser, d: &Daemon) {
    let in_view = open_page(b, &format!("source={SOURCE}&range=1h")).await;
    assert!(in_view.len() >= 4, "{in_view:?}");
    let total = b
        .js("return document.querySelector('.source-page').dataset.metrics")
        .await;
    assert_eq!(total, json!(METRICS.to_string()));
    for metric in &in_view {
        let drawn = b
            .js(&format!(
                "return document.querySelector('.mini[data-metric=\"{metric}\"]').tallyDrawn"
            ))
            .await;
        let (from, to) = (drawn["from"].to_string(), drawn["to"].to_string());
        assert_eq!(drawn["step"], json!(60));
        let body = get_ok(
            d,
            "/api/v1/range",
            &[
                ("source", SOURCE),
                ("metric", metric),
                ("from", &from),
                ("to", &to),
                ("step", "1m"),
            ],
        )
        .await;
        let want: Vec<Value> = body["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let counter = s["kind"] != "gauge";
                let points: Vec<Value> = s["points"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| match counter {
                        true => json!([p["t"], p["rate"]]),
                        false => json!([p["t"], p["avg"], p["min"], p["max"]]),
                    })
                    .collect();
                json!({ "labels": s["labels"], "points": points })
            })
            .collect();
        let got: Vec<Value> = drawn["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| json!({ "labels": s["labels"], "points": s["points"] }))
            .collect();
        assert_eq!(got.len(), CPUS, "{metric}: {drawn}");
        assert!(
            want[0]["points"].as_array().unwrap().len() as i64 >= BACKFILL_S / 60 - 1,
            "{metric}: {body}"
        );
        assert_eq!(numbers(&json!(got)), numbers(&json!(want)), "{metric}");
    }
    let reads = b.js(CHARTS_READS).await;
    assert_eq!(
        reads.as_array().unwrap().len(),
        1,
        "a screenful is one read: {reads}"
    );
    let mark = b
        .js("return performance.getEntriesByName('tally:source-drawn')[0].startTime")
        .await;
    eprintln!("first screenful of small charts drawn {mark} ms after navigation");
    clean_page(b, "the source's page").await;
}

/// Numbers as floats (the browser writes 3 where the daemon wrote 3.0).
fn numbers(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(numbers).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), numbers(v))).collect()),
        v => v.clone(),
    }
}

/// Scrolled to the bottom: the new reads are of charts that came into view
/// (or within the page's 100 px margin of it), and the charts scrolled
/// past unseen were never read.
async fn scrolling_reads_what_comes_into_view(b: &Browser) {
    let first: BTreeSet<String> = open_page(b, &format!("source={SOURCE}&range=1h"))
        .await
        .into_iter()
        .collect();
    b.js("window.scrollTo(0, document.documentElement.scrollHeight); return true")
        .await;
    let bottom: BTreeSet<String> = serde_json::from_value(
        b.wait_js(
            "the last screenful drawn",
            &format!("if (scrollY < 100) return null; {IN_VIEW_DRAWN}"),
        )
        .await,
    )
    .unwrap();
    let near = b
        .js(
            r#"return [...document.querySelectorAll('.mini')].filter((e) => {
                   const r = e.getBoundingClientRect();
                   return r.bottom > -100 && r.top < innerHeight + 100;
               }).map((e) => e.dataset.metric);"#,
        )
        .await;
    let near: BTreeSet<String> = serde_json::from_value(near).unwrap();
    let reads: Vec<Vec<String>> = serde_json::from_value(b.js(CHARTS_READS).await).unwrap();
    let read: BTreeSet<String> = reads.iter().flatten().cloned().collect();
    assert!(reads.len() <= 3, "a screenful or two of reads: {reads:?}");
    assert!(bottom.is_subset(&read), "{bottom:?} not read: {reads:?}");
    let unexpected: Vec<&String> = read
        .iter()
        .filter(|m| !first.contains(*m) && !near.contains(*m))
        .collect();
    // The first screenful's reads include its 100 px margin too.
    assert!(
        unexpected.len() <= 8,
        "read though never near the view: {unexpected:?}"
    );
    let waiting = b
        .js("return document.querySelectorAll('.mini[data-state=waiting]').length")
        .await;
    assert!(
        waiting.as_u64().unwrap() as usize >= METRICS - read.len(),
        "charts never in view are not read: {waiting}"
    );
    assert!(read.len() < METRICS, "everything was read: {reads:?}");
}

/// A filter typed on the page is in the URL, and the URL in a fresh tab
/// shows the same charts with the same filter.
async fn url_restores_the_page(b: &Browser) {
    open_page(b, &format!("source={SOURCE}&range=1h")).await;
    b.js(
        r#"const f = document.querySelector('.source-page input[type=search]');
            f.value = 'm_001*'; f.dispatchEvent(new Event('input')); return true;"#,
    )
    .await;
    let shown = b
        .wait_js(
            "the filtered page",
            r#"const p = document.querySelector('.source-page');
               return p.dataset.shown === '10' && location.search.includes('filter=')
                   ? [...p.querySelectorAll('.mini')].map((e) => e.dataset.metric) : null;"#,
        )
        .await;
    let url = b.client.current_url().await.unwrap().to_string();
    assert!(url.contains("filter=m_001"), "{url}");
    let original = b.client.window().await.unwrap();
    let tab = b.client.new_window(true).await.unwrap();
    b.client.switch_to_window(tab.handle).await.unwrap();
    b.client.goto(&url).await.unwrap();
    b.wait_js("the restored page", IN_VIEW_DRAWN).await;
    let again = b
        .js(r#"const p = document.querySelector('.source-page');
               return [[...p.querySelectorAll('.mini')].map((e) => e.dataset.metric),
                       p.querySelector('input[type=search]').value,
                       document.querySelector('form.query [name=source]').value];"#)
        .await;
    assert_eq!(again, json!([shown, "m_001*", SOURCE]));
    clean_page(b, "the restored source page").await;
    b.client.close_window().await.unwrap();
    b.client.switch_to_window(original).await.unwrap();
}

/// A small chart is a link to its metric's full-size chart; back returns
/// to the page.
async fn a_small_chart_opens_full_size(b: &Browser) {
    let in_view = open_page(b, &format!("source={SOURCE}&range=1h")).await;
    let metric = &in_view[0];
    b.js(&format!(
        "document.querySelector('.mini[data-metric=\"{metric}\"]').click(); return true"
    ))
    .await;
    let chart = drawn_chart(b).await;
    assert_eq!(chart["drawn"]["series"].as_array().unwrap().len(), CPUS);
    let url = b.client.current_url().await.unwrap().to_string();
    for part in [
        &format!("source={SOURCE}"),
        &format!("metric={metric}"),
        &"range=1h".to_string(),
    ] {
        assert!(url.contains(part.as_str()), "{url} lacks {part}");
    }
    b.client.back().await.unwrap();
    b.wait_js("the page again", IN_VIEW_DRAWN).await;
    clean_page(b, "a small chart opened and closed").await;
}

/// One read is bounded: too many metrics are refused in words, and a read
/// past the points bound answers what fits and names the rest.
async fn charts_api_bounds(d: &Daemon) {
    let names: Vec<String> = (1..=METRICS).map(|i| format!("m_{i:04}")).collect();
    let many = (1..=101)
        .map(|i| format!("m_{i:04}"))
        .collect::<Vec<_>>()
        .join(",");
    let (status, body) = get_json(
        d,
        "/api/v1/charts",
        &[("source", SOURCE), ("metric", &many)],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("at most 100"),
        "{body}"
    );
    // Seven days of minutes: 10,080 points per series, two per metric.
    let (status, body) = get_json(
        d,
        "/api/v1/charts",
        &[
            ("source", SOURCE),
            ("metric", &names.join(",")),
            ("from", "now-7d"),
            ("step", "1m"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let charts = body["charts"].as_array().unwrap();
    assert_eq!(body["truncated"], json!(true), "{}", body["unread"]);
    assert_eq!(
        charts.len(),
        12,
        "250,000 points fit 12 metrics of 2 × 10,080"
    );
    let unread: Vec<String> = serde_json::from_value(body["unread"].clone()).unwrap();
    assert_eq!(unread, names[12..].to_vec());
    // Fewer points asked for: the metrics past them are left unread, but
    // never the first, though its 20,160 points alone pass 20,000.
    for (points, read) in [("50000", 2), ("20000", 1)] {
        let (status, body) = get_json(
            d,
            "/api/v1/charts",
            &[
                ("source", SOURCE),
                ("metric", &names.join(",")),
                ("from", "now-7d"),
                ("step", "1m"),
                ("points", points),
            ],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let charts = body["charts"].as_array().unwrap();
        assert_eq!(charts.len(), read, "points={points}");
        assert_eq!(body["unread"].as_array().unwrap().len(), METRICS - read);
    }
}

/// The page's metrics are Prometheus' `__name__` values for the instance.
async fn lists_what_prometheus_lists(b: &Browser, d: &Daemon, source: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        open_page(b, &format!("source={source}&range=15m")).await;
        let page = b
            .js("return [...document.querySelectorAll('.mini')].map((e) => e.dataset.metric)")
            .await;
        let selector = format!("{{instance=\"{source}\"}}");
        let prom = get_ok(
            d,
            "/prometheus/api/v1/label/__name__/values",
            &[("match[]", selector.as_str())],
        )
        .await;
        let mut want: Vec<String> = serde_json::from_value(prom["data"].clone()).unwrap();
        want.sort();
        let mut got: Vec<String> = serde_json::from_value(page).unwrap();
        got.sort();
        if got == want {
            assert!(got.len() > 100, "node exporter's metrics: {got:?}");
            eprintln!("the page lists node exporter's {} metrics", got.len());
            break;
        }
        // New series may still arrive between the two listings.
        assert!(
            Instant::now() < deadline,
            "page {} metrics, Prometheus API {}: {:?}",
            got.len(),
            want.len(),
            want.iter().filter(|m| !got.contains(m)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    clean_page(b, "node exporter's page").await;
}

/// The newest minute node_load1's small chart drew.
const NEWEST_LOAD1: &str = r#"
    const c = document.querySelector('.mini[data-metric=node_load1]');
    return c.tallyDrawn.series[0].points.map((p) => p[0]).pop();
"#;

/// The charts in view follow the minute in progress, all on one stream.
async fn live_on_one_stream(b: &Browser, d: &Daemon, source: &str) {
    open_page(b, &format!("source={source}&range=15m&filter=node_load*")).await;
    b.wait_js(
        "the page to be live",
        "return document.querySelector('.source-page').dataset.live === 'live'",
    )
    .await;
    let live = b
        .js("return document.querySelectorAll('.mini[data-live=live]').length")
        .await;
    assert!(live.as_u64().unwrap() >= 3, "node_load1, 5 and 15: {live}");
    // A stream the previous page closed is counted until the daemon
    // notices, at a failed write: with nothing to update, the second
    // keep-alive after the close (15 s apart); then one stream serves every
    // chart in view.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let subscribers = metric_sum(&metrics_text(d).await, "tally_watch_subscribers");
        if subscribers == 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{subscribers} streams for one page's charts in view"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t0 = b.js(NEWEST_LOAD1).await.as_i64().unwrap();
    let n0 = b
        .js("return performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/charts')).length")
        .await;
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let t = b.js(NEWEST_LOAD1).await.as_i64().unwrap();
        if t > t0 {
            break;
        }
        assert!(Instant::now() < deadline, "no new minute after {t0}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let n1 = b
        .js("return performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/charts')).length")
        .await;
    assert_eq!(n0, n1, "the new minute came on the stream, not a read");
    clean_page(b, "the live page").await;
}
