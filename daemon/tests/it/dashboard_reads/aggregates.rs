//! Selectable aggregates, and group rollups against their members.

use serde_json::{json, Value};
use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, get_ok, within};
use tally_testkit::settle::eventually;
use tally_testkit::Daemon;

use super::{expect, summary, temp, SETTLE};

/// Pooled expectation: every member's samples in one bucket list.
pub(super) fn pooled(
    members: &[usize],
    m: i64,
    f: fn(usize, i64) -> Vec<(i64, f64)>,
    width: i64,
) -> Vec<(i64, u64, f64, f64, f64)> {
    let all: Vec<(i64, f64)> = members.iter().flat_map(|i| f(*i, m)).collect();
    expect(&all, width)
}

/// `GET /api/v1/aggregate` with `params`, from an hour before the month
/// start `m` to an hour after it.
async fn aggregate(d: &Daemon, m: i64, params: &[(&str, &str)]) -> (u16, Value) {
    let (from, to) = ((m - 3_600).to_string(), (m + 3_600).to_string());
    let mut p = params.to_vec();
    p.push(("from", &from));
    p.push(("to", &to));
    get_json(d, "/api/v1/aggregate", &p).await
}

pub(super) async fn check_aggregates(d: &Daemon, m: i64) {
    for (group, members) in [
        ("web", vec![0, 1]),
        ("frontends", vec![0, 1]),
        ("all", vec![0, 1, 2]),
        ("db", vec![2]),
        // Declared by the agents.
        ("eu", vec![0, 2]),
        ("us", vec![1]),
    ] {
        check_rollup_equals_fan_out(d, m, group, &members).await;
    }
    check_source_selectors_read_rollup_or_fan_out(d, m).await;
    check_fleet_counter_sums_and_rates(d, m).await;
    check_group_listing(d).await;
    check_aggregate_errors(d, m).await;
}

/// Rollups are fresh to the flush: waits until `group`'s rollup holds its
/// `members`' samples, then checks that fanning out over the members gives
/// the same.
async fn check_rollup_equals_fan_out(d: &Daemon, m: i64, group: &str, members: &[usize]) {
    let want = pooled(members, m, temp, 60);
    eventually(
        &format!("rollup {group} holds its members' samples"),
        SETTLE,
        || async {
            let (status, body) = aggregate(
                d,
                m,
                &[("metric", "temp"), ("group", group), ("step", "1m")],
            )
            .await;
            if status != 200 {
                return Err(body.to_string());
            }
            if body["rollup"] != group {
                return Err(format!("not served from the rollup: {body}"));
            }
            if summary(&body["points"]) == want {
                Ok(())
            } else {
                Err(format!("{body}"))
            }
        },
    )
    .await;
    let (status, body) = aggregate(
        d,
        m,
        &[
            ("metric", "temp"),
            ("group", group),
            ("step", "1m"),
            ("fan_out", "true"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rollup"], Value::Null, "{body}");
    assert_eq!(body["fanned_out"], members.len(), "{body}");
    assert_eq!(
        summary(&body["points"]),
        want,
        "group {group}: fan-out equals the rollup"
    );
}

/// A source selector equal to a group's definition reads its rollup; any
/// other selector fans out.
async fn check_source_selectors_read_rollup_or_fan_out(d: &Daemon, m: i64) {
    let (_, body) = aggregate(
        d,
        m,
        &[("metric", "temp"), ("source", "web-*"), ("step", "1h")],
    )
    .await;
    assert_eq!(body["rollup"], "frontends", "{body}");
    assert_eq!(summary(&body["points"]), pooled(&[0, 1], m, temp, 3_600));
    let (_, body) = aggregate(
        d,
        m,
        &[("metric", "temp"), ("source", "web-2,db-1"), ("step", "1h")],
    )
    .await;
    assert_eq!(
        (body["rollup"].clone(), body["fanned_out"].clone()),
        (Value::Null, json!(2)),
        "{body}"
    );
    assert_eq!(summary(&body["points"]), pooled(&[1, 2], m, temp, 3_600));
}

/// Counters: the fleet rate is the total per second; over gRPC, a group's
/// sums come from its rollup.
async fn check_fleet_counter_sums_and_rates(d: &Daemon, m: i64) {
    let (_, body) = aggregate(
        d,
        m,
        &[
            ("metric", "reqs"),
            ("group", "all"),
            ("step", "1m"),
            ("agg", "rate,sum"),
        ],
    )
    .await;
    assert_eq!(
        body["points"],
        json!([
            { "t": m - 60, "sum": 600.0, "rate": 10.0 },
            { "t": m, "sum": 60.0, "rate": 1.0 },
        ]),
        "{body}"
    );
    assert_eq!(body["kind"], "delta_counter");
    let mut query = d.query_client().await;
    let resp = within(
        "Aggregate",
        query.aggregate(pb::AggregateRequest {
            metric: "reqs".into(),
            sources: Some(pb::aggregate_request::Sources::Group("web".into())),
            from_ms: (m - 3_600) * 1000,
            to_ms: (m + 3_600) * 1000,
            step: pb::Step::Hour as i32,
            aggregates: vec![pb::Aggregate::Sum as i32, pb::Aggregate::Count as i32],
            ..Default::default()
        }),
    )
    .await
    .expect("Aggregate")
    .into_inner();
    assert_eq!(resp.rollup.as_deref(), Some("web"), "{resp:?}");
    type Row = (i64, Option<u64>, Option<f64>, Option<f64>);
    let got: Vec<Row> = resp
        .points
        .iter()
        .map(|p| (p.t_ms, p.n, p.sum, p.max))
        .collect();
    assert_eq!(
        got,
        [
            ((m - 3_600) * 1000, Some(2), Some(300.0), None),
            (m * 1000, Some(2), Some(30.0), None)
        ],
        "{resp:?}"
    );
}

/// Configured groups, agent-declared groups and their member counts.
async fn check_group_listing(d: &Daemon) {
    let groups = get_ok(d, "/api/v1/groups", &[]).await;
    assert_eq!(
        groups,
        json!({
            "groups": [
                { "name": "all", "rule": "all", "sources": ["*"], "declared_members": 0 },
                { "name": "frontends", "rule": "globs", "sources": ["web-*"], "declared_members": 0 },
                { "name": "db", "rule": "agent", "sources": [], "declared_members": 1 },
                { "name": "eu", "rule": "agent", "sources": [], "declared_members": 2 },
                { "name": "us", "rule": "agent", "sources": [], "declared_members": 1 },
            ],
            "prefix_delimiter": "-",
        })
    );
}

/// An unknown group, and a rate of a gauge.
async fn check_aggregate_errors(d: &Daemon, m: i64) {
    let (status, body) = aggregate(d, m, &[("metric", "temp"), ("group", "nope-x")]).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("no group"),
        "{body}"
    );
    let (status, body) = aggregate(
        d,
        m,
        &[("metric", "temp"), ("group", "all"), ("agg", "rate")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("counters"),
        "{body}"
    );
}
