//! A live chart whose daemon goes away says so next to its title, in
//! words, and keeps retrying.

use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, push_of, push_ok, series};
use tally_testkit::Daemon;

use super::browser::Browser;
use super::drawn_chart;
use crate::tallyd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stream_is_said_so() {
    let mut d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let Some(b) = Browser::start(&d.http_url()).await else {
        return;
    };
    let now = now_ms();
    let samples: Vec<(i64, f64)> = (0..30)
        .map(|i| (now - 30_000 + i * 1000, i as f64))
        .collect();
    let mut ingest = d.ingest_client().await;
    push_ok(
        &mut ingest,
        push_of(
            "lost-1",
            vec![series("load", pb::SampleKind::Gauge, &samples)],
        )
        .sources,
    )
    .await;
    b.open("/?view=explore&source=lost-1&metric=load&range=15m")
        .await;
    drawn_chart(&b).await;
    b.wait_js(
        "the chart to be live",
        "return document.querySelector('.chart').dataset.live === 'live'",
    )
    .await;
    d.crash();
    let badge = b
        .wait_js(
            "the lost stream in words",
            r#"const c = document.querySelector('.chart');
               return c.dataset.live === 'lost' ? c.querySelector('.live').textContent : null;"#,
        )
        .await;
    let badge = badge.as_str().unwrap();
    assert!(
        badge.contains("live stream lost") && badge.contains("retrying in"),
        "{badge}"
    );
    // The chart keeps what it drew.
    let points = b
        .js("return Number(document.querySelector('.chart').dataset.points)")
        .await;
    assert!(points.as_i64().unwrap() > 0, "{points}");
    // What the browser logged: the daemon's absence, nothing else.
    for e in b.console_errors().await {
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("net::ERR_"), "{e}");
    }
    b.close().await;
}
