//! The source's page's figures, for a host of about 500 series: a real
//! Prometheus remote-writing what it scrapes every second from a real node
//! exporter (or, without them, the load generator's 100 metrics × 5 CPUs).
//! Navigation to the first screenful of small charts drawn; the page read
//! screenful by screenful to its end while long tasks are recorded; and
//! what the live page costs the daemon over a minute. Ignored by default;
//! `scripts/bench-dashboard` runs it. Nothing here asserts a time.

use std::time::Duration;

use serde_json::Value;
use tally_testkit::Daemon;

use super::bench::{cpu_over, median_max};
use super::browser::Browser;
use super::feeds::{backfill_per_cpu, PrometheusFeed};
use crate::tallyd;

const RUNS: usize = 5;
const COST_WINDOW: Duration = Duration::from_secs(60);
/// How long the node exporter's history grows before the first load.
const HISTORY: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench-dashboard runs it"]
async fn source_page_figures() {
    let d = Daemon::start_async(tallyd().env("TALLYD_INGEST_LATENESS_WINDOW", "2h")).await;
    let Some(b) = Browser::start(&d.http_url()).await else {
        return;
    };
    let prom = PrometheusFeed::start(&d).await;
    let (source, feed) = match &prom {
        Some(p) => {
            tokio::time::sleep(HISTORY).await;
            (p.source.clone(), "Prometheus scraping node exporter")
        }
        None => {
            backfill_per_cpu(&d, "host-", 1, 100, 5, 3600).await;
            (
                "host-000001".to_string(),
                "tally-loadgen, 100 metrics × 5 CPUs",
            )
        }
    };
    let page = format!("/?view=explore&source={source}&range=1h");
    let mut out = vec![];
    let mut times = vec![];
    let mut shape = Value::Null;
    for _ in 0..RUNS {
        b.open("/?view=fleet").await;
        b.open(&page).await;
        let v = b
            .wait_js(
                "the first screenful",
                r#"const m = performance.getEntriesByName('tally:source-drawn')[0];
                   if (!m) return null;
                   const p = document.querySelector('.source-page');
                   return [m.startTime, m.detail.charts, Number(p.dataset.metrics),
                           document.querySelectorAll('.mini[data-state=drawn]').length];"#,
            )
            .await;
        times.push(v[0].as_f64().unwrap());
        shape = v;
    }
    let series =
        tally_testkit::client::get_ok(&d, "/api/v1/fleet", &[("source", source.as_str())]).await;
    out.push((
        format!(
            "source page, first screenful ({} small charts of {} metrics, {} series; {feed}), navigation to drawn",
            shape[1], shape[2], series["series"]
        ),
        median_max(times),
    ));
    out.push(read_through(&b).await);
    out.extend(live_cost(&b, &d, &page).await);
    println!("\n| measure | value |\n|---|---|");
    for (what, value) in out {
        println!("| {what} | {value} |");
    }
    b.close().await;
}

/// From the top, a screenful further each time the charts in view are
/// drawn, to the end: the longest task, the screenfuls, the reads.
async fn read_through(b: &Browser) -> (String, String) {
    let r: Value = b
        .client
        .execute_async(
            r#"
            const done = arguments[arguments.length - 1];
            const long = [];
            const obs = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
            obs.observe({ type: 'longtask', buffered: false });
            const reads = () => performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/v1/charts?')).length;
            const r0 = reads();
            const el = document.scrollingElement;
            const drawn = () => [...document.querySelectorAll('.mini')].every((e) => {
                const b = e.getBoundingClientRect();
                return b.bottom <= 0 || b.top >= innerHeight || e.dataset.state === 'drawn' || e.dataset.state === 'empty';
            });
            let screens = 0, t = performance.now();
            const waits = [];
            const step = () => {
                if (!drawn()) return requestAnimationFrame(step);
                waits.push(performance.now() - t);
                if (el.scrollTop + innerHeight >= el.scrollHeight - 2 || screens > 500) {
                    obs.disconnect();
                    waits.sort((a, b) => a - b);
                    return done([Math.max(0, ...long), long.filter((d) => d > 50).length, screens, reads() - r0, waits[waits.length >> 1]]);
                }
                screens++;
                el.scrollTop += innerHeight * 0.9;
                t = performance.now();
                requestAnimationFrame(step);
            };
            el.scrollTop = 0;
            setTimeout(step, 500);
            "#,
            vec![],
        )
        .await
        .unwrap();
    (
        "source page read to its end, a screenful at a time once drawn".into(),
        format!(
            "longest task {:.0} ms ({} tasks over 50 ms); {} screenfuls, {} charts reads, median {:.0} ms from scroll to drawn",
            r[0].as_f64().unwrap(),
            r[1],
            r[2],
            r[3],
            r[4].as_f64().unwrap()
        ),
    )
}

/// tallyd's CPU over a minute with no page, then with the live page at
/// its top, and the page's requests in that minute.
async fn live_cost(b: &Browser, d: &Daemon, page: &str) -> Vec<(String, String)> {
    b.client.goto("about:blank").await.unwrap();
    let idle = cpu_over(d, COST_WINDOW).await;
    b.open(page).await;
    b.wait_js(
        "the live page",
        "const p = document.querySelector('.source-page'); return p && p.dataset.live === 'live'",
    )
    .await;
    let live = b
        .js("return document.querySelectorAll('.mini[data-live=live]').length")
        .await;
    let t0 = b.js("return performance.now()").await;
    let open = cpu_over(d, COST_WINDOW).await;
    let requests = b
        .js(&format!(
            "return performance.getEntriesByType('resource').filter((e) => e.startTime > {t0}).length"
        ))
        .await;
    let secs = COST_WINDOW.as_secs_f64();
    vec![
        (
            "tallyd CPU with the host pushing every second".into(),
            format!(
                "{:.2} % of a core with no page open, {:.2} % with its source page open ({live} live charts in view)",
                idle * 100.0 / secs,
                open * 100.0 / secs
            ),
        ),
        (
            "live source page: requests to tallyd".into(),
            format!("{requests} new requests in {secs:.0} s (one watch stream stays open)"),
        ),
    ]
}
