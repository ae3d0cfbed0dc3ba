//! Reads while MongoDB is unreachable, through the binary on the stand-in:
//! ranges (named series and patterns), the Prometheus API and gRPC answer
//! at once from what the daemon holds in memory, and say they are partial;
//! once MongoDB is back, the same reads are whole again and unflagged.

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{get_json, http_get, now_ms, push_of, series, within};
use tally_testkit::mongo::{mongo_target_of, TargetKind};
use tally_testkit::settle::{eventually, wait_flushed};
use tally_testkit::Daemon;

use crate::tallyd;

fn gauge(source: &str, t_ms: i64, v: f64) -> pb::PushRequest {
    push_of(
        source,
        vec![series("temp", pb::SampleKind::Gauge, &[(t_ms, v)])],
    )
}

/// `(sum per source, partial)` of a range read of `temp` over the last
/// hours.
async fn range(d: &Daemon, source: &str) -> (Vec<(String, f64)>, Option<String>) {
    let from = (now_ms() / 1000 - 3 * 3600).to_string();
    let (status, body) = get_json(
        d,
        "/api/v1/range",
        &[
            ("source", source),
            ("metric", "temp"),
            ("from", &from),
            ("step", "1h"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let mut sums: Vec<(String, f64)> = body["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let sum = s["points"]
                .as_array()
                .map_or(0.0, |p| p.iter().filter_map(|p| p["sum"].as_f64()).sum());
            (s["source"].as_str().unwrap().to_owned(), sum)
        })
        .collect();
    sums.sort_by(|a, b| a.0.cmp(&b.0));
    (sums, body["partial"].as_str().map(str::to_owned))
}

async fn wait_ready(d: &Daemon, want: u16) {
    eventually(
        &format!("/readyz {want}"),
        Duration::from_secs(30),
        || async {
            match http_get(d, "/readyz").await.0 {
                s if s == want => Ok(()),
                s => Err(format!("/readyz {s}")),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_from_memory_flagged_partial_while_mongodb_is_down() {
    let Some(target) = mongo_target_of(TargetKind::Standin).await else {
        return;
    };
    let standin = target.standin().expect("the stand-in");
    let opts = tallyd()
        .flush_interval("500ms")
        .mongodb(&target.uri_selecting_within(2_000), &target.database);
    let d = Daemon::start_async(opts).await;
    let mut ingest = d.ingest_client().await;
    let t = now_ms() - 60_000;
    within("Push", ingest.push(gauge("mo-1", t, 1.0)))
        .await
        .unwrap();
    wait_flushed(&d, 1.0, Duration::from_secs(30)).await;
    assert_eq!(range(&d, "mo-1").await, (vec![("mo-1".into(), 1.0)], None));

    standin.set_down(true);
    within("Push", ingest.push(gauge("mo-1", t + 1, 2.0)))
        .await
        .unwrap();
    within("Push", ingest.push(gauge("mo-2", t, 5.0)))
        .await
        .unwrap();
    // The readiness probe finds MongoDB gone; from then on reads do not
    // wait for it.
    wait_ready(&d, 503).await;
    let (sums, partial) = range(&d, "mo-1").await;
    assert_eq!(
        sums,
        vec![("mo-1".into(), 2.0)],
        "memory only: the stored 1.0 is not reachable"
    );
    let partial = partial.expect("flagged partial");
    assert!(partial.contains("unreachable"), "{partial}");
    // A pattern needs the catalog: the series in memory stand in for it.
    let (sums, partial) = range(&d, "mo-*").await;
    assert_eq!(sums, vec![("mo-1".into(), 2.0), ("mo-2".into(), 5.0)]);
    assert!(partial.is_some());
    // The Prometheus API warns; gRPC says so in its metadata.
    let end = (now_ms() / 1000).to_string();
    let start = (now_ms() / 1000 - 600).to_string();
    let (status, body) = get_json(
        &d,
        "/prometheus/api/v1/query_range",
        &[
            ("query", "sum(sum_over_time(temp[5m]))"),
            ("start", &start),
            ("end", &end),
            ("step", "60"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("unreachable")),
        "{body}"
    );
    let mut query = d.query_client().await;
    let reply = within(
        "Range",
        query.range(pb::RangeRequest {
            source: "mo-1".into(),
            metric: "temp".into(),
            from_ms: t - 3_600_000,
            to_ms: now_ms() + 60_000,
            step: pb::Step::Hour as i32,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
    assert!(reply.metadata().get("tally-partial").is_some(), "{reply:?}");

    // Back: whole answers, no flag, and what was pushed meanwhile landed.
    standin.set_down(false);
    wait_ready(&d, 200).await;
    eventually("whole again", Duration::from_secs(30), || async {
        match range(&d, "mo-*").await {
            (sums, None) if sums == vec![("mo-1".into(), 3.0), ("mo-2".into(), 5.0)] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
