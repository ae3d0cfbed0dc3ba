//! The dashboard's performance figures, measured in Chromium with the
//! page's Performance API: what the page loads, how soon the first chart of
//! a day of minutes is drawn, the fleet view at 10,000 sources (first rows
//! and scrolling), what one open live chart costs the daemon, and a source's
//! page of small charts for a host of about 500 series (`source_page`).
//! Ignored by default (they take minutes and mean something only in a
//! release build); `scripts/bench-dashboard` runs them and prints the
//! figures that BENCHMARKS.md records. Nothing here asserts a time.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tally_testkit::bins::Bin;
use tally_testkit::Daemon;

use super::browser::Browser;
use super::drawn_chart;
use super::feeds::backfill;
use crate::tallyd;

const FLEET_SOURCES: usize = 10_000;
const RUNS: usize = 5;
const COST_WINDOW: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench-dashboard runs it"]
async fn dashboard_figures() {
    let d = Daemon::start_async(tallyd().env("TALLYD_INGEST_LATENESS_WINDOW", "25h")).await;
    let Some(b) = Browser::start(&d.http_url()).await else {
        return;
    };
    backfill(&d, "day-", 1, 1, 86_400).await;
    let mut out = vec![];
    out.push(first_chart(&b).await);
    out.push(page_weight(&b).await);
    backfill(&d, "fleet-", FLEET_SOURCES, 1, 120).await;
    out.extend(fleet(&b).await);
    out.extend(live_cost(&b, &d).await);
    println!("\n| measure | value |\n|---|---|");
    for (what, value) in out {
        println!("| {what} | {value} |");
    }
    b.close().await;
}

pub(super) fn median_max(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "median {:.0} ms, max {:.0} ms ({} loads)",
        v[v.len() / 2],
        v[v.len() - 1],
        v.len()
    )
}

/// Fresh loads of a day of one series' minutes: navigation to drawn.
async fn first_chart(b: &Browser) -> (String, String) {
    let mut times = vec![];
    for _ in 0..RUNS {
        b.open("/?view=fleet").await;
        b.open("/?view=explore&source=day-000001&metric=m_0001&range=24h&tier=minute")
            .await;
        let c = drawn_chart(b).await;
        assert!(c["drawn"]["series"][0]["points"].as_array().unwrap().len() >= 1439);
        let t = b
            .js("return performance.getEntriesByName('tally:chart-drawn')[0].startTime")
            .await;
        times.push(t.as_f64().unwrap());
    }
    (
        "first chart, 24 h of minutes (1440 points), navigation to drawn".into(),
        median_max(times),
    )
}

/// Bytes the page itself loads (document, modules, style sheet, icon),
/// uncompressed, and the data of the view on top.
async fn page_weight(b: &Browser) -> (String, String) {
    // Sizes from resource timing are 0 for files the browser cached on an
    // earlier load, so every file is fetched again, uncached, and counted.
    let w = b
        .js(r#"return (async () => {
            const res = performance.getEntriesByType('resource');
            const files = [location.href, ...res.filter((e) => e.name.includes('/ui/')).map((e) => e.name)];
            const data = res.filter((e) => !e.name.includes('/ui/'));
            const bytes = async (u) => (await (await fetch(u, { cache: 'no-store' })).arrayBuffer()).byteLength;
            const sizes = await Promise.all([...new Set(files)].map(bytes));
            const dataBytes = (await Promise.all(data.map((e) => bytes(e.name)))).reduce((a, n) => a + n, 0);
            return [sizes.reduce((a, n) => a + n, 0), sizes.length, dataBytes];
        })();"#)
        .await;
    (
        "page weight (every file the page loads, uncompressed)".into(),
        format!(
            "{:.1} KB in {} files, plus {:.1} KB of data for the 24 h chart",
            w[0].as_f64().unwrap() / 1000.0,
            w[1],
            w[2].as_f64().unwrap() / 1000.0
        ),
    )
}

/// The fleet view at 10,000 sources: first rows drawn, then scrolled
/// through while long tasks and frame gaps are recorded.
async fn fleet(b: &Browser) -> Vec<(String, String)> {
    let mut times = vec![];
    for _ in 0..RUNS {
        b.open("/?view=explore").await;
        b.open("/?view=fleet").await;
        b.wait_js(
            "the fleet of 10,000",
            &format!(
                "const f = document.querySelector('.fleet');
                 return f && f.dataset.state === 'drawn' && Number(f.dataset.total) >= {FLEET_SOURCES};"
            ),
        )
        .await;
        let t = b
            .js("return performance.getEntriesByName('tally:fleet-drawn')[0].startTime")
            .await;
        times.push(t.as_f64().unwrap());
    }
    let scroll: Value = b
        .client
        .execute_async(
            r#"
            const done = arguments[arguments.length - 1];
            const s = document.querySelector('.fleet .scroller');
            const long = [];
            const obs = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
            obs.observe({ type: 'longtask', buffered: false });
            let gap = 0, last = performance.now(), steps = 0;
            const frame = (now) => { gap = Math.max(gap, now - last); last = now; if (steps < 120) requestAnimationFrame(frame); };
            requestAnimationFrame(frame);
            const tick = () => {
                s.scrollTop = (steps * s.scrollHeight) / 120;
                if (++steps < 120) setTimeout(tick, 25);
                else setTimeout(() => { obs.disconnect(); done([Math.max(0, ...long), long.length, gap]); }, 500);
            };
            tick();
            "#,
            vec![],
        )
        .await
        .unwrap();
    vec![
        (
            "fleet of 10,000 sources, navigation to first rows drawn".into(),
            median_max(times),
        ),
        (
            "fleet scrolled top to bottom in 120 steps of 25 ms".into(),
            format!(
                "longest task {:.0} ms ({} tasks over 50 ms), longest gap between frames {:.0} ms",
                scroll[0].as_f64().unwrap(),
                scroll[1],
                scroll[2].as_f64().unwrap()
            ),
        ),
    ]
}

/// One source pushing every second; the daemon's CPU over a minute with no
/// page open, then with a live chart of that source, and the chart's
/// requests in that minute.
async fn live_cost(b: &Browser, d: &Daemon) -> Vec<(String, String)> {
    let loadgen = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
    let mut feed = Command::new(loadgen)
        .args([
            "--target",
            &d.grpc_url(),
            "--http",
            &d.http_url(),
            "--quiet",
        ])
        .args([
            "--sources",
            "1",
            "--metrics",
            "1",
            "--source-prefix",
            "live-",
            "--duration",
            "200s",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    b.client.goto("about:blank").await.unwrap();
    let idle = cpu_over(d, COST_WINDOW).await;
    b.open("/?view=explore&source=live-000001&metric=m_0001&range=1h&tier=minute")
        .await;
    drawn_chart(b).await;
    let t0 = b.js("return performance.now()").await;
    let open = cpu_over(d, COST_WINDOW).await;
    let requests = b
        .js(&format!(
            "return performance.getEntriesByType('resource').filter((e) => e.startTime > {t0}).length"
        ))
        .await;
    let _ = feed.kill();
    let _ = feed.wait();
    let secs = COST_WINDOW.as_secs_f64();
    vec![
        (
            "tallyd CPU with one source pushing every second".into(),
            format!(
                "{:.2} % of a core with no page open, {:.2} % with one live chart open",
                idle * 100.0 / secs,
                open * 100.0 / secs
            ),
        ),
        (
            "one live chart: requests to tallyd".into(),
            format!("{requests} new requests in {secs:.0} s (the watch stream stays open)"),
        ),
    ]
}

/// CPU seconds the daemon used over `window`, from the kernel's account
/// in clock ticks (`process_cpu_seconds_total` is whole seconds only).
pub(super) async fn cpu_over(d: &Daemon, window: Duration) -> f64 {
    let before = cpu_ticks(d.pid());
    tokio::time::sleep(window).await;
    (cpu_ticks(d.pid()) - before) as f64 / CLOCK_TICKS_PER_S
}

/// Linux's USER_HZ, what `/proc/<pid>/stat` counts in.
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// User plus system time of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // The command name may hold spaces: fields are counted after its ')'.
    let after = &stat[stat.rfind(')').expect("stat's command name") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // utime and stime are fields 14 and 15, the 12th and 13th after ')'.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
