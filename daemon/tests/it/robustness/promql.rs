//! PromQL size limits: the audit's two stack-overflowing queries are
//! refused as `bad_data` naming their setting, and queries at the largest
//! configurable limits are parsed, planned and evaluated without harm.

use tally_testkit::Daemon;

use super::{assert_bad_data, prom, prom_post};
use crate::tallyd;

/// `1+1+…+1` with 3,000 terms (about 6 KB) and 1,400 nested `sum(`: each
/// used to abort the daemon with a stack overflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_queries_are_bad_data_and_the_daemon_answers_the_next() {
    let d = Daemon::start_async(tallyd()).await;
    let plus = vec!["1"; 3000].join("+");
    assert!(plus.len() >= 5_999);
    let nested = format!("{}x{}", "sum(".repeat(1400), ")".repeat(1400));
    let long = format!("{}1", "+".repeat(70_000));
    for (q, setting) in [
        (plus.as_str(), "query.max_promql_nodes"),
        (nested.as_str(), "query.max_promql_depth"),
        (long.as_str(), "query.max_promql_bytes"),
    ] {
        for path in ["query", "query_range"] {
            let params = [("query", q), ("start", "0"), ("end", "60"), ("step", "60")];
            let (status, body) = prom_post(&d, path, &params).await;
            assert_bad_data(status, &body, setting);
        }
    }
    let (status, body) = prom(&d, "query", &[("query", "1+1"), ("time", "60")]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["result"][1], "2", "{body}");
}

/// At the caps (depth 256, 8,000 nodes), on the debug build's worker
/// stacks: a 250-deep aggregation is evaluated, and a 4,000-term chain
/// (within the node cap, beyond the depth cap) is parsed and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_at_the_largest_limits_are_safe() {
    let d = Daemon::start_async(
        tallyd()
            .env("TALLYD_QUERY_MAX_PROMQL_DEPTH", "256")
            .env("TALLYD_QUERY_MAX_PROMQL_NODES", "8000"),
    )
    .await;
    let deep = format!(
        "{}avg_over_time(x[1m]){}",
        "sum(".repeat(250),
        ")".repeat(250)
    );
    let (status, body) = prom(&d, "query", &[("query", &deep), ("time", "600")]).await;
    assert_eq!(status, 200, "{body}");
    let parens = format!("{}1{}", "(".repeat(250), ")".repeat(250));
    let (status, body) = prom(&d, "query", &[("query", &parens), ("time", "600")]).await;
    assert_eq!(status, 200, "{body}");
    let chain = vec!["1"; 4000].join("+");
    let (status, body) = prom(&d, "query", &[("query", &chain), ("time", "600")]).await;
    assert_bad_data(status, &body, "query.max_promql_depth");
    let (status, _) = prom(&d, "query", &[("query", "2*3"), ("time", "600")]).await;
    assert_eq!(status, 200);
}
