//! The built-in dashboard in a real browser: Debian's headless Chromium,
//! driven through `chromedriver` (WebDriver) with `fantoccini`, against
//! the real `tallyd` fed by the real load generator and by a real
//! Prometheus remote-writing what it scrapes from a real node exporter.
//!
//! * `browser`: chromedriver and Chromium, one session per test, and the
//!   browser's console log.
//! * `feeds`: the load generator and Prometheus.
//! * `views`: the fleet lists exactly the sources pushed; a chart's points
//!   equal `/api/v1/range` for its window and tier; a new minute appears
//!   without a reload; a URL opened in a fresh tab restores the view; a bad
//!   PromQL expression shows the server's message; the daemon view; no
//!   console errors, no request to another host, the CSP header.
//! * `tokens`: with tokens on, the page works with a read token and shows
//!   the refusal without one.
//! * `lost`: a live chart whose daemon goes away says so.
//! * `source_page`: a source's page of small charts, against Prometheus'
//!   node exporter and the load generator: the metrics listed, every small
//!   chart's points, reads of what comes into view only, one live stream,
//!   the URL; and the bounds of `/api/v1/charts`.
//! * `bench` and `bench_source_page` (ignored; `scripts/bench-dashboard`
//!   runs them): the figures of BENCHMARKS.md, measured in the page with the
//!   Performance API.
//!
//! Every test skips, saying why, when Chromium or chromedriver is missing;
//! `scripts/setup-test-deps` installs both.

mod bench;
mod bench_source_page;
mod browser;
mod feeds;
mod lost;
mod source_page;
mod tokens;
mod views;

use serde_json::Value;
use tally_testkit::client::http_client;

use browser::Browser;

/// The chart once drawn: what it plotted, its window and live state.
const DRAWN_CHART: &str = r#"
    const c = document.querySelector('.chart');
    if (!c || c.dataset.state !== 'drawn') return null;
    return {
        drawn: c.tallyDrawn,
        title: c.querySelector('.chart-title').textContent,
        live: c.dataset.live,
        lastT: Number(c.dataset.lastT),
    };
"#;

/// Every resource the page loaded that is not from its own origin.
const FOREIGN_REQUESTS: &str = r#"
    return performance.getEntriesByType('resource')
        .map((e) => e.name)
        .filter((n) => !n.startsWith(location.origin + '/'));
"#;

/// Waits for the page's chart to be drawn and returns it.
async fn drawn_chart(b: &Browser) -> Value {
    b.wait_js("a drawn chart", DRAWN_CHART).await
}

/// Asserts the page asked nothing of another host and logged no error.
async fn clean_page(b: &Browser, page: &str) {
    let foreign = b.js(FOREIGN_REQUESTS).await;
    assert_eq!(foreign, Value::Array(vec![]), "{page} asked other hosts");
    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "{page} logged errors: {errors:#?}");
}

/// Every file the page loaded carries the Content-Security-Policy.
async fn assert_policy(b: &Browser) {
    let names = b
        .js("return [location.href, ...performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/ui/'))]")
        .await;
    let names = names.as_array().unwrap();
    assert!(names.len() > 5, "the page loaded only {names:?}");
    for url in names {
        let url = url.as_str().unwrap();
        let r = http_client().get(url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let csp = r
            .headers()
            .get("content-security-policy")
            .unwrap_or_else(|| panic!("{url} has no Content-Security-Policy"));
        assert_eq!(csp, "default-src 'self'", "{url}");
    }
}
