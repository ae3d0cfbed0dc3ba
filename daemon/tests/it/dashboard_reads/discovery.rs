//! Series discovery with pagination, and the group rollups it lists.

use serde_json::json;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, within};
use tally_testkit::settle::eventually;
use tally_testkit::Daemon;

use super::SETTLE;

pub(super) async fn check_discovery(d: &Daemon, m: i64) {
    eventually("the catalog lists the pushed series", SETTLE, || async {
        let body = get_ok(d, "/api/v1/series", &[("metric", "temp,reqs")]).await;
        let n = body["series"].as_array().map_or(0, Vec::len);
        if n == 6 {
            Ok(())
        } else {
            Err(body.to_string())
        }
    })
    .await;
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("source", "web-*"), ("metric", "temp")],
    )
    .await;
    assert_eq!(
        body["series"],
        json!([
            { "source": "web-1", "metric": "temp", "kind": "gauge", "first_seen": m - 120, "last_seen": m + 60 },
            { "source": "web-2", "metric": "temp", "kind": "gauge", "first_seen": m - 120, "last_seen": m + 60 },
        ]),
        "{body}"
    );
    check_series_pagination_and_kind(d).await;
    check_source_and_metric_listings(d).await;
    check_grpc_listings(d, m).await;
}

/// Pagination: one per page, every entry exactly once, in key order; and
/// a kind filter.
async fn check_series_pagination_and_kind(d: &Daemon) {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let mut params = vec![("metric", "temp"), ("limit", "1")];
        if let Some(a) = after.as_deref() {
            params.push(("after", a));
        }
        let page = get_ok(d, "/api/v1/series", &params).await;
        for s in page["series"].as_array().into_iter().flatten() {
            seen.push(s["source"].as_str().unwrap_or("").to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ["db-1", "web-1", "web-2"]);
    let body = get_ok(
        d,
        "/api/v1/series",
        &[("kind", "delta_counter"), ("source", "db-1")],
    )
    .await;
    assert_eq!(body["series"][0]["metric"], "reqs", "{body}");
    assert_eq!(body["series"].as_array().map(Vec::len), Some(1), "{body}");
}

async fn check_source_and_metric_listings(d: &Daemon) {
    let body = get_ok(d, "/api/v1/sources", &[("metric", "temp")]).await;
    assert_eq!(body["sources"], json!(["db-1", "web-1", "web-2"]), "{body}");
    let body = get_ok(d, "/api/v1/sources", &[("metric", "temp"), ("limit", "2")]).await;
    assert_eq!(
        (body["sources"].clone(), body["next"].clone()),
        (json!(["db-1", "web-1"]), json!("web-1")),
        "{body}"
    );
    let body = get_ok(
        d,
        "/api/v1/sources",
        &[("metric", "temp"), ("after", "web-1")],
    )
    .await;
    assert_eq!(body["sources"], json!(["web-2"]), "{body}");
    let body = get_ok(d, "/api/v1/metrics", &[("source", "web-2")]).await;
    assert_eq!(body["metrics"], json!(["reqs", "temp"]), "{body}");
}

/// Series, sources and metrics over gRPC, with paging.
async fn check_grpc_listings(d: &Daemon, m: i64) {
    let mut query = d.query_client().await;
    let resp = within(
        "ListSeries",
        query.list_series(pb::ListSeriesRequest {
            source: "web-*".into(),
            metric: "reqs".into(),
            page_size: 1,
            ..Default::default()
        }),
    )
    .await
    .expect("ListSeries")
    .into_inner();
    assert_eq!(resp.series.len(), 1, "{resp:?}");
    assert_eq!(resp.series[0].first_seen_ms, (m - 60) * 1000);
    assert_eq!(resp.series[0].kind, pb::SampleKind::DeltaCounter as i32);
    assert_eq!(resp.next_page_token, "web-1|reqs");
    let names = within(
        "ListSources",
        query.list_sources(pb::ListNamesRequest {
            metric: "reqs".into(),
            page_size: 2,
            ..Default::default()
        }),
    )
    .await
    .expect("ListSources")
    .into_inner();
    assert_eq!(
        (names.names, names.next_page_token),
        (
            vec!["db-1".to_string(), "web-1".to_string()],
            "web-1".to_string()
        )
    );
    let names = within(
        "ListMetrics",
        query.list_metrics(pb::ListNamesRequest {
            source: "web-2".into(),
            ..Default::default()
        }),
    )
    .await
    .expect("ListMetrics")
    .into_inner();
    assert_eq!(names.names, ["reqs", "temp"]);
}
