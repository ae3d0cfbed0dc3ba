//! Globs and regular expressions take time in proportion to the name and
//! the compiled pattern, both bounded: the audit's glob of 10,000 stars
//! over 2,000 series (23.7 s) answers at once, and patterns over the
//! limits are refused naming their setting.

use std::time::Instant;

use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, now_ms, series, within};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use super::{assert_bad_data, batch, prom, push, PROMPT};
use crate::tallyd;

const SERIES: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_stars_answer_promptly() {
    let d = Daemon::start_async(tallyd().flush_interval("200ms")).await;
    let t = now_ms();
    let sources: Vec<pb::SourceBatch> = (0..SERIES)
        .map(|i| {
            batch(
                &format!("host-{i:05}"),
                series("cpu", pb::SampleKind::Gauge, &[(t, 1.0)]),
            )
        })
        .collect();
    assert_eq!(push(&d, sources).await.accepted as usize, SERIES);
    wait_flushed(&d, 1.0, std::time::Duration::from_secs(30)).await;

    let stars = "*".repeat(10_000);
    let started = Instant::now();
    let limit = SERIES.to_string();
    let (status, body) = get_json(
        &d,
        "/api/v1/series",
        &[("source", &stars), ("metric", "cpu"), ("limit", &limit)],
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["series"].as_array().map(Vec::len), Some(SERIES));
    assert!(
        took < PROMPT,
        "10,000 stars over {SERIES} series took {took:?}"
    );

    // The same through gRPC, and a glob with stars between letters.
    let started = Instant::now();
    let mut query = d.query_client().await;
    let page = within(
        "ListSeries",
        query.list_series(pb::ListSeriesRequest {
            source: format!("h{}-0*{}1", &stars[..4000], &stars[..4000]),
            metric: "cpu".into(),
            page_size: SERIES as u32,
            ..Default::default()
        }),
    )
    .await
    .unwrap()
    .into_inner();
    assert_eq!(page.series.len(), SERIES / 10);
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());

    // Over the limits: named, and refused before any matching.
    let (status, body) = get_json(
        &d,
        "/api/v1/series",
        &[("source", &"*a".repeat(10_000)), ("metric", "cpu")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("query.max_pattern_bytes"));
    let started = Instant::now();
    let (status, body) = prom(
        &d,
        "series",
        &[("match[]", r#"{source=~"a(.*){9999}"}"#), ("start", "0")],
    )
    .await;
    assert_bad_data(status, &body, "query.max_pattern_compiled_bytes");
    assert!(started.elapsed() < PROMPT, "took {:?}", started.elapsed());
}
