//! What the audit saw from the outside: reflection `v1alpha` for the stock
//! Python client, the status codes of an oversized and of an undecodable
//! message, and the 400s `docs/reads.md` promises (`agg=rate` on a gauge,
//! `limit` above `query.max_page`).

use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, now_ms, series, within};
use tally_testkit::{grpc_client, Daemon};
use tonic::Code;

use super::{batch, push};
use crate::tallyd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_python_client_sees_v1alpha_and_conventional_codes() {
    let d = Daemon::start_async(tallyd()).await;
    let listed = grpc_client::run(&d, &["list-v1alpha"]).await.stdout;
    for service in ["tally.v1.Ingest", "tally.v1.Query", "grpc.health.v1.Health"] {
        assert!(
            listed.lines().any(|l| l == service),
            "{service} not listed through v1alpha:\n{listed}"
        );
    }
    // 17.8 MB, over the default 16 MiB of ingest.max_message_bytes.
    let out = grpc_client::run(&d, &["raw-size", "/tally.v1.Ingest/Push", "17800000"])
        .await
        .stdout;
    assert!(
        out.starts_with("RESOURCE_EXHAUSTED") && out.contains("ingest.max_message_bytes"),
        "{out}"
    );
    // PushRequest { sources: [SourceBatch { source: b"\xff" }] }.
    let out = grpc_client::run(&d, &["raw", "/tally.v1.Ingest/Push", "0a030a01ff"])
        .await
        .stdout;
    assert!(
        out.starts_with("INVALID_ARGUMENT") && out.contains("SourceBatch.source"),
        "{out}"
    );
    // The daemon is unharmed.
    let out = grpc_client::run(&d, &["raw", "/tally.v1.Ingest/Push", ""])
        .await
        .stdout;
    assert_eq!(out.trim(), "OK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_of_a_gauge_and_pages_over_max_page_are_400() {
    let d = Daemon::start_async(tallyd().env("TALLYD_QUERY_MAX_PAGE", "50")).await;
    let gauge = batch(
        "g1",
        series("temp", pb::SampleKind::Gauge, &[(now_ms(), 20.0)]),
    );
    assert_eq!(push(&d, vec![gauge]).await.accepted, 1);
    let (status, body) = get_json(
        &d,
        "/api/v1/range",
        &[("source", "g1"), ("metric", "temp"), ("agg", "rate")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("rate") && msg.contains("gauge"), "{msg}");
    // Other aggregates of the same gauge are fine.
    let (status, body) = get_json(
        &d,
        "/api/v1/range",
        &[("source", "g1"), ("metric", "temp"), ("agg", "avg")],
    )
    .await;
    assert_eq!(status, 200, "{body}");

    for path in ["/api/v1/series", "/api/v1/sources", "/api/v1/metrics"] {
        let (status, body) = get_json(&d, path, &[("limit", "51")]).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().contains("query.max_page"));
        let (status, body) = get_json(&d, path, &[("limit", "50")]).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let mut query = d.query_client().await;
    let err = within(
        "ListSeries",
        query.list_series(pb::ListSeriesRequest {
            page_size: 51,
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("query.max_page"), "{err:?}");
}
