//! `mongodb.max_statements_per_s`: with a budget far below what the flush
//! interval would send, flushes are spaced out to stay under it, reads stay
//! fresh meanwhile (they merge memory), and everything lands.

use std::time::{Duration, Instant};

use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, push_of, range_sum, series, within};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::mongo::{mongo_target_of, TargetKind};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use crate::tallyd;

const SERIES: usize = 30;

async fn flushes(d: &Daemon) -> f64 {
    metric(&metrics_text(d).await, "tally_flushes_total", &[]).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_are_spaced_to_stay_under_the_statement_budget() {
    let Some(target) = mongo_target_of(TargetKind::Standin).await else {
        return;
    };
    // Each flush updates an hour document per series (30 statements;
    // rollups off; day documents are sealed when the hour closes), so 20
    // statements/s allow one flush every 1.5 s, against ten a second
    // unpaced.
    let opts = tallyd()
        .mongodb(&target.uri, &target.database)
        .flush_interval("100ms")
        .env("TALLYD_ROLLUP_ALL", "false")
        .env("TALLYD_MONGODB_MAX_STATEMENTS_PER_S", "20");
    let d = Daemon::start_async(opts).await;
    let mut ingest = d.ingest_client().await;
    let t = now_ms() - 60_000;
    let push = |i: usize| {
        let metrics = (0..SERIES)
            .map(|s| {
                series(
                    &format!("m{s:02}"),
                    pb::SampleKind::Gauge,
                    &[(t + i as i64, 1.0)],
                )
            })
            .collect();
        push_of("paced-1", metrics)
    };
    let before = flushes(&d).await;
    let started = Instant::now();
    let mut pushed = 0;
    while started.elapsed() < Duration::from_secs(6) {
        within("Push", ingest.push(push(pushed))).await.unwrap();
        pushed += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let during = flushes(&d).await - before;
    // 6 s at one flush per 1.5 s: 4 or 5, and never the ~60 of the interval.
    assert!(
        during <= (elapsed / 1.5).ceil() + 1.0,
        "{during} flushes in {elapsed:.1} s"
    );
    assert!(during >= 2.0, "{during} flushes in {elapsed:.1} s");
    let paced = metric(&metrics_text(&d).await, "tally_flush_paced_total", &[]).unwrap_or(0.0);
    assert!(paced > 20.0, "{paced} ticks paced");

    // Fresh in between, whole in the end.
    assert_eq!(
        range_sum(&d, "paced-1", "m07", 3 * 3600).await,
        pushed as f64
    );
    wait_flushed(&d, before + during + 1.0, Duration::from_secs(30)).await;
    for s in [0, 17, SERIES - 1] {
        let m = format!("m{s:02}");
        assert_eq!(
            range_sum(&d, "paced-1", &m, 3 * 3600).await,
            pushed as f64,
            "{m}"
        );
    }
    drop(target);
}
