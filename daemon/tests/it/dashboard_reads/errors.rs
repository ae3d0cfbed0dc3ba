//! The errors of bad queries: status, message, and what they name.

use serde_json::json;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, within};
use tally_testkit::Daemon;
use tonic::Code;

use super::range;

pub(super) async fn check_errors(d: &Daemon) {
    check_http_range_errors(d).await;
    // An unknown series is an empty result.
    let body = range(d, &[("source", "nobody"), ("metric", "nothing")]).await;
    assert_eq!(
        body["series"],
        json!([{ "source": "nobody", "metric": "nothing", "kind": null, "points": [] }])
    );
    check_grpc_range_errors(d).await;
}

/// Bad `/api/v1/range` queries: 400, and an error saying what is wrong.
async fn check_http_range_errors(d: &Daemon) {
    let cases: [(&[(&str, &str)], &str); 11] = [
        (
            &[("source", "a"), ("metric", "m"), ("step", "30s")],
            "whole number of minutes",
        ),
        (
            &[("source", "a"), ("metric", "m"), ("step", "weekly")],
            "not `auto` or a duration",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "now"),
                ("to", "now-1h"),
            ],
            "empty range",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "now-400d"),
                ("step", "1m"),
            ],
            "query.max_points",
        ),
        (
            &[("source", "a"), ("metric", "m"), ("agg", "p99")],
            "not one of",
        ),
        (&[("source", ""), ("metric", "m")], "source"),
        (&[("metric", "m")], "required"),
        (
            &[("source", "a"), ("metric", "m"), ("metrics", "x")],
            "unknown field",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("from", "-99999999999999"),
            ],
            "is not Unix seconds",
        ),
        (
            &[
                ("source", "a"),
                ("metric", "m"),
                ("step", "9223372036854775800"),
            ],
            "longer than ten years",
        ),
        (
            &[
                ("source", "a,b,c"),
                ("metric", "m,n,o"),
                ("step", "1d"),
                ("from", "now-4000d"),
            ],
            "query.max_total_points",
        ),
    ];
    for (params, reason) in cases {
        let (status, body) = get_json(d, "/api/v1/range", params).await;
        assert_eq!(status, 400, "{params:?}: {body}");
        let msg = body["error"].as_str().unwrap_or("");
        assert!(
            msg.contains(reason),
            "{params:?}: {msg:?} should say {reason:?}"
        );
    }
}

/// gRPC: INVALID_ARGUMENT with the reason; STEP_AUTO picks a step that
/// fits `max_points`.
async fn check_grpc_range_errors(d: &Daemon) {
    let mut query = d.query_client().await;
    let err = within(
        "Range with a 30 s step",
        query.range(pb::RangeRequest {
            source: "a".into(),
            metric: "m".into(),
            from_ms: 0,
            to_ms: 3_600_000,
            step_ms: 30_000,
            ..Default::default()
        }),
    )
    .await
    .expect_err("a 30 s step must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("minutes"), "{err:?}");
    let err = within(
        "Range from the beginning of i64",
        query.range(pb::RangeRequest {
            source: "a".into(),
            metric: "m".into(),
            from_ms: i64::MIN,
            to_ms: 3_600_000,
            step: pb::Step::Auto as i32,
            ..Default::default()
        }),
    )
    .await
    .expect_err("a time beyond any data must be refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("out of range"), "{err:?}");
    let resp = within(
        "Range with STEP_AUTO",
        query.range(pb::RangeRequest {
            source: "web-1".into(),
            metric: "temp".into(),
            from_ms: 0,
            to_ms: 30 * 86_400_000,
            step: pb::Step::Auto as i32,
            max_points: 40,
            ..Default::default()
        }),
    )
    .await
    .expect("STEP_AUTO")
    .into_inner();
    assert_eq!(resp.step_ms, 86_400_000, "30 days in 40 points: daily");
}
