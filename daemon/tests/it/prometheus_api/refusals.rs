//! What used to be refused is answered; what is refused now is invalid
//! PromQL, a bad request or a query over a limit, in Prometheus' error
//! format naming the problem or the limit.

use super::fixture::Fixture;

pub(super) async fn check_refusals(fx: &Fixture) {
    check_every_construct_is_answered(fx).await;
    check_invalid_promql_is_bad_data(fx).await;
    check_bad_range_parameters_are_refused(fx).await;
    check_label_values_of_a_bad_name(fx).await;
    check_over_the_limit_is_an_execution_error(fx).await;
}

/// Constructs the first dialect refused, each answered over a range, by
/// GET and by POST.
async fn check_every_construct_is_answered(fx: &Fixture) {
    let (start, end) = fx.span();
    for (q, nonempty) in [
        ("cpu_load", true),
        ("rate(requests[5m] offset 1m)", true),
        (&format!("rate(requests[5m] @ {end})") as &str, true),
        ("max_over_time(temp[10m:1m])", true),
        ("irate(requests[5m])", true),
        ("deriv(temp[5m])", true),
        ("quantile_over_time(0.9, temp[5m])", true),
        ("last_over_time(temp[5m])", true),
        ("histogram_quantile(0.9, rate(requests[5m]))", false),
        ("stddev(avg_over_time(temp[1m]))", true),
        ("rate(requests[5m]) / rate(bytes_out[5m])", false),
        ("temp / on(instance) requests", true),
        ("increase(requests[5m]) > 1", true),
        ("avg_over_time(temp[90s])", true),
        ("rate(temp[5m])", true),
        (
            "label_replace(temp, \"host\", \"$1\", \"instance\", \"(.*)-.*\")",
            true,
        ),
        ("clamp_min(temp, 25)", true),
        ("absent(nothing_here)", true),
        ("vector(1) + time() * 0", true),
        ("topk(1, temp)", true),
    ] {
        for post in [false, true] {
            let params = [
                ("query", q.to_string()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", "60".to_string()),
            ];
            let (status, body, _) = fx.call("query_range", &params, post).await;
            assert_eq!(status, 200, "{q}: {body}");
            assert_eq!(body["data"]["resultType"], "matrix", "{q}: {body}");
            let series = body["data"]["result"].as_array().map_or(0, Vec::len);
            assert_eq!(series > 0, nonempty, "{q}: {body}");
        }
    }
    // A range vector answers an instant query.
    let data = fx
        .ok(
            "query",
            &[("query", "temp[3m]".into()), ("time", end.to_string())],
        )
        .await;
    assert_eq!(data["resultType"], "matrix", "{data}");
    assert_eq!(data["result"].as_array().map(Vec::len), Some(3), "{data}");
}

/// Invalid PromQL: Prometheus' error format, never an answer.
async fn check_invalid_promql_is_bad_data(fx: &Fixture) {
    let (start, end) = fx.span();
    for q in ["sum(", "rate(temp)", "temp[5m] + 1", "1 and 2"] {
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
        }
    }
    // A range vector cannot be graphed.
    let params = [
        ("query", "temp[5m]".to_string()),
        ("start", start.to_string()),
        ("end", end.to_string()),
        ("step", "60".to_string()),
    ];
    let (status, body, _) = fx.call("query_range", &params, false).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .is_some_and(|e| e.contains("range vector")));
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

/// A missing query, an end before the start, a zero step, too many points,
/// an unparsable time and lookback.
async fn check_bad_range_parameters_are_refused(fx: &Fixture) {
    let bad = |params, needle| assert_bad_data(fx, params, needle);
    let q = || ("query", "avg_over_time(temp[1m])".to_string());
    let range = |s: &str, e: &str, st: &str| {
        vec![
            q(),
            ("start", s.to_string()),
            ("end", e.to_string()),
            ("step", st.to_string()),
        ]
    };
    bad(
        vec![
            ("start", "1".into()),
            ("end", "2".into()),
            ("step", "1".into()),
        ],
        "query",
    )
    .await;
    bad(range("10", "5", "1"), "before start").await;
    bad(range("1", "5", "0"), "zero or negative").await;
    bad(range("0", "100000000", "1"), "maximum resolution").await;
    bad(range("yesterday", "5", "1"), "start").await;
    let mut p = range("1", "5", "1");
    p.push(("lookback_delta", "soon".into()));
    bad(p, "lookback_delta").await;
}

/// A label name that is not one (here not even UTF-8) is Prometheus'
/// JSON error, not plain text.
async fn check_label_values_of_a_bad_name(fx: &Fixture) {
    for name in ["%FF%FE", "1abc"] {
        let url = fx.url(&format!("label/{name}/values"));
        let resp = fx.http.get(&url).send().await.expect("a response");
        assert_eq!(resp.status().as_u16(), 400, "{url}");
        let body: serde_json::Value = resp.json().await.expect("a JSON error");
        assert_eq!(body["errorType"], "bad_data", "{body}");
    }
}

/// Valid, but its windows read more slots than one query may: a limit,
/// so 422 `execution` naming it, before anything is read.
async fn check_over_the_limit_is_an_execution_error(fx: &Fixture) {
    // 61-minute windows every hour for 2,400 days: every minute of the
    // span, for each of three series.
    let params = [
        ("query", "sum_over_time(temp[61m])".to_string()),
        ("start", (fx.t0 - 2_400 * 86_400).to_string()),
        ("end", fx.t0.to_string()),
        ("step", "1h".to_string()),
    ];
    let (status, body, _) = fx.call("query_range", &params, true).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["errorType"], "execution", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("query.max_total_points")),
        "{body}"
    );
}
