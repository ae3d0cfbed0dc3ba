//! Ranges at fixed, custom and automatic steps across minute, hour, day
//! and month boundaries, several series per call, and the latest points.

use serde_json::json;
use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, now_ms, push_ok, series, within};
use tally_testkit::settle::eventually;
use tally_testkit::Daemon;

use super::{expect, range, summary, temp, SETTLE};

pub(super) async fn check_ranges(d: &Daemon, m: i64) {
    let (from, to) = ((m - 86_400).to_string(), (m + 86_400).to_string());
    check_fixed_steps_across_the_month_boundary(d, m, &from, &to).await;
    check_auto_step_and_selected_aggregates(d, m, &from, &to).await;
    check_several_series_per_call(d, &from, &to).await;
}

/// One series at fixed and custom steps over `[from, to)`, two days around
/// the month start `m`: its kind, buckets and averages.
async fn check_fixed_steps_across_the_month_boundary(d: &Daemon, m: i64, from: &str, to: &str) {
    let samples = temp(0, m);
    for (step, width) in [
        ("1m", 60),
        ("5m", 300),
        ("1h", 3_600),
        ("1d", 86_400),
        ("2h", 7_200),
    ] {
        let body = range(
            d,
            &[
                ("source", "web-1"),
                ("metric", "temp"),
                ("from", from),
                ("to", to),
                ("step", step),
            ],
        )
        .await;
        assert_eq!(body["step_s"], width, "step {step}: {body}");
        let s = &body["series"][0];
        assert_eq!(s["kind"], "gauge", "step {step}: {body}");
        assert_eq!(
            summary(&s["points"]),
            expect(&samples, width),
            "step {step} across the month boundary: {body}"
        );
        let avg = s["points"][0]["avg"].as_f64().unwrap_or(f64::NAN);
        let (_, n, sum, ..) = expect(&samples, width)[0];
        assert_eq!(avg, sum / n as f64, "step {step}: avg");
    }
}

async fn check_auto_step_and_selected_aggregates(d: &Daemon, m: i64, from: &str, to: &str) {
    let samples = temp(0, m);
    // step=auto: two days in at most 10 points is 6h steps.
    let body = range(
        d,
        &[
            ("source", "web-1"),
            ("metric", "temp"),
            ("from", from),
            ("to", to),
            ("step", "auto"),
            ("max_points", "10"),
        ],
    )
    .await;
    assert_eq!(
        (body["step"].clone(), body["step_s"].clone()),
        (json!("6h"), json!(21_600)),
        "{body}"
    );
    assert_eq!(
        summary(&body["series"][0]["points"]),
        expect(&samples, 21_600)
    );

    // Only the aggregates asked for.
    let body = range(
        d,
        &[
            ("source", "web-1"),
            ("metric", "reqs"),
            ("from", from),
            ("to", to),
            ("step", "1m"),
            ("agg", "max,rate"),
        ],
    )
    .await;
    let p = &body["series"][0]["points"][0];
    assert_eq!(
        p,
        &json!({ "t": m - 60, "max": 100.0, "rate": 100.0 / 60.0 }),
        "{body}"
    );
}

/// Several series: an explicit list, then a glob through the catalog.
async fn check_several_series_per_call(d: &Daemon, from: &str, to: &str) {
    let body = range(
        d,
        &[
            ("source", "web-1,web-2,nobody"),
            ("metric", "temp"),
            ("from", from),
            ("to", to),
            ("step", "1h"),
        ],
    )
    .await;
    let got: Vec<(&str, usize)> = body["series"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["source"].as_str().unwrap_or(""),
                        s["points"].as_array().map_or(0, Vec::len),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(got, [("nobody", 0), ("web-1", 2), ("web-2", 2)], "{body}");
    eventually("a glob range lists both web sources", SETTLE, || async {
        let body = range(
            d,
            &[
                ("source", "web-*"),
                ("metric", "temp,reqs"),
                ("from", from),
                ("to", to),
                ("step", "1d"),
            ],
        )
        .await;
        let names: Vec<String> = body["series"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        format!(
                            "{}/{}",
                            s["source"].as_str().unwrap_or(""),
                            s["metric"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if names == ["web-1/reqs", "web-1/temp", "web-2/reqs", "web-2/temp"] {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;
}

pub(super) async fn check_latest(d: &Daemon, m: i64) {
    let body = get_ok(
        d,
        "/api/v1/latest",
        &[("source", "web-1,web-2"), ("metric", "temp")],
    )
    .await;
    assert_eq!(
        body["series"][1]["last"],
        json!({ "t_ms": (m + 90) * 1000, "value": 41.0 }),
        "{body}"
    );
    // A fresh sample: the current minute's slot, before any flush.
    let mut ingest = d.ingest_client().await;
    let t = now_ms();
    push_ok(
        &mut ingest,
        vec![pb::SourceBatch {
            source: "db-1".into(),
            series: vec![series("live", pb::SampleKind::Gauge, &[(t, 7.5)])],
            groups: Vec::new(),
        }],
    )
    .await;
    let body = get_ok(
        d,
        "/api/v1/latest",
        &[("source", "db-1"), ("metric", "live")],
    )
    .await;
    let s = &body["series"][0];
    assert_eq!(s["last"], json!({ "t_ms": t, "value": 7.5 }), "{body}");
    let minute = (t / 1000).div_euclid(60) * 60;
    // The sample may have landed in the previous minute by the time of the read.
    if s["minute"]["t"] == minute {
        assert_eq!(s["minute"]["n"], 1, "{body}");
        assert_eq!(s["minute"]["max"], 7.5, "{body}");
    }
    let mut query = d.query_client().await;
    let resp = within(
        "Latest",
        query.latest(pb::LatestRequest {
            labels: Vec::new(),
            source: "db-1".into(),
            metric: "live".into(),
        }),
    )
    .await
    .expect("Latest")
    .into_inner();
    assert_eq!(resp.series[0].last_value, Some(7.5), "{resp:?}");
    assert_eq!(resp.series[0].last_t_ms, Some(t), "{resp:?}");
}
