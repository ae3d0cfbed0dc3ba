//! Unsupported PromQL and bad requests are refused in Prometheus' error
//! format, naming the construct or the limit.

use super::fixture::Fixture;

pub(super) async fn check_refusals(fx: &Fixture) {
    check_unsupported_promql_is_refused(fx).await;
    check_bad_range_parameters_are_refused(fx).await;
    check_too_many_slots_is_an_execution_error(fx).await;
}

/// Unsupported or invalid PromQL: Prometheus' error format, the construct
/// named, never an answer; by GET and by POST.
async fn check_unsupported_promql_is_refused(fx: &Fixture) {
    let (start, end) = fx.span();
    for (q, names) in [
        (
            "cpu_load",
            vec!["bare selector", "avg_over_time(cpu_load[1m])"],
        ),
        ("cpu_load[5m]", vec!["range selector"]),
        ("rate(requests[5m] offset 1m)", vec!["offset"]),
        ("rate(requests[5m] @ 1700000000)", vec!["@ modifier"]),
        ("max_over_time(temp[10m:1m])", vec!["subqueries"]),
        ("irate(requests[5m])", vec!["irate()", "rate(x[5m])"]),
        (
            "histogram_quantile(0.9, rate(requests[5m]))",
            vec!["histogram_quantile"],
        ),
        ("stddev(avg_over_time(temp[1m]))", vec!["stddev()"]),
        (
            "rate(requests[5m]) / rate(bytes_out[5m])",
            vec!["two sets of series"],
        ),
        ("rate(requests[5m]) > 1", vec!["`>`"]),
        (
            "avg_over_time(temp[90s])",
            vec!["whole number of minutes", "[2m]"],
        ),
        ("rate(temp[5m])", vec!["rate()", "gauge", "avg_over_time"]),
        ("sum(", vec!["parse error"]),
    ] {
        for post in [false, true] {
            let params = [
                ("query", q.to_string()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", "60".to_string()),
            ];
            let (status, body, _) = fx.call("query_range", &params, post).await;
            assert_eq!(status, 400, "{q}: {body}");
            assert_eq!(body["status"], "error", "{q}: {body}");
            assert_eq!(body["errorType"], "bad_data", "{q}: {body}");
            let msg = body["error"].as_str().expect("a message");
            for n in &names {
                assert!(msg.contains(n), "{q}: {msg:?} does not name {n:?}");
            }
        }
    }
}

/// A `query_range` with `params` is refused as `bad_data` with an error
/// containing `needle`.
async fn assert_bad_data(fx: &Fixture, params: Vec<(&'static str, String)>, needle: &str) {
    let (status, body, _) = fx.call("query_range", &params, false).await;
    assert_eq!(status, 400, "{params:?}: {body}");
    assert_eq!(body["errorType"], "bad_data");
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains(needle)),
        "{body}"
    );
}

/// A missing query, an end before the start, a zero step, too many points
/// and an unparsable time.
async fn check_bad_range_parameters_are_refused(fx: &Fixture) {
    let bad = |params, needle| assert_bad_data(fx, params, needle);
    let q = || ("query", "avg_over_time(temp[1m])".to_string());
    bad(
        vec![
            ("start", "1".into()),
            ("end", "2".into()),
            ("step", "1".into()),
        ],
        "query",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "10".into()),
            ("end", "5".into()),
            ("step", "1".into()),
        ],
        "before start",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "1".into()),
            ("end", "5".into()),
            ("step", "0".into()),
        ],
        "zero or negative",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "0".into()),
            ("end", "100000000".into()),
            ("step", "1".into()),
        ],
        "maximum resolution",
    )
    .await;
    bad(
        vec![
            q(),
            ("start", "yesterday".into()),
            ("end", "5".into()),
            ("step", "1".into()),
        ],
        "start",
    )
    .await;
}

/// Valid, but its windows need more minute slots than the engine reads at
/// once: a limit, so 422 `execution`.
async fn check_too_many_slots_is_an_execution_error(fx: &Fixture) {
    let params = [
        ("query", "avg_over_time(temp[61m])".to_string()),
        ("start", (fx.t0 - 200 * 86_400).to_string()),
        ("end", fx.t0.to_string()),
        ("step", "1d".to_string()),
    ];
    let (status, body, _) = fx.call("query_range", &params, true).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errorType"], "execution", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("query.max_points")),
        "{body}"
    );
}
