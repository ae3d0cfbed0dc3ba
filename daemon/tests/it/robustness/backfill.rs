//! The audit's counter finding, through the real binary: an agent 150
//! minutes behind (`ingest.lateness_window = 3h`, above the default
//! two-hour `ingest.series_idle_timeout`) pushes a cumulative counter every
//! couple of seconds through SIGKILLs and clean restarts, each of which
//! also runs a maintenance sweep. The series is being pushed, so it is
//! never idle, its baseline survives every restart, and every acknowledged
//! increase is counted exactly.

use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{now_ms, push_ok, range_sum, series};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use super::batch;
use crate::tallyd;

/// How far behind the agent's samples are.
const BEHIND_MS: i64 = 150 * 60_000;
/// Pushes between restarts.
const PUSHES: i64 = 15;

/// Pushes `PUSHES` samples of the counter, one at a time, the next one
/// `*next` (its value and sample time advancing by 1 and 2 s).
async fn push_phase(d: &Daemon, next: &mut i64, first_ts: i64) {
    let mut ingest = d.ingest_client().await;
    for _ in 0..PUSHES {
        let i = *next;
        let ts = first_ts + i * 2_000;
        let s = series(
            "backfill_total",
            pb::SampleKind::CumulativeCounter,
            &[(ts, i as f64)],
        );
        push_ok(&mut ingest, vec![batch("late-agent", s)]).await;
        *next += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfilling_agent_keeps_every_increase_through_restarts() {
    let mut d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_INGEST_LATENESS_WINDOW", "3h"),
    )
    .await;
    let first_ts = now_ms() - BEHIND_MS;
    let mut next = 0;
    push_phase(&d, &mut next, first_ts).await;
    tokio::task::block_in_place(|| d.crash_and_restart());
    push_phase(&d, &mut next, first_ts).await;
    tokio::task::block_in_place(|| d.restart());
    push_phase(&d, &mut next, first_ts).await;
    tokio::task::block_in_place(|| d.crash_and_restart());
    push_phase(&d, &mut next, first_ts).await;
    wait_flushed(&d, 1.0, Duration::from_secs(30)).await;

    // Values 0, 1, …, n-1: the first is the baseline, each later one adds 1.
    let want = (next - 1) as f64;
    let got = range_sum(&d, "late-agent", "backfill_total", 4 * 3600).await;
    assert_eq!(
        got,
        want,
        "every increase of {next} acknowledged samples must count\n{}",
        d.logs()
    );
    // The sweep at each start ran: nothing of this series was evicted.
    let text = tally_testkit::metrics::metrics_text(&d).await;
    assert_eq!(
        tally_testkit::metrics::metric(&text, "tally_evicted_series_total", &[]),
        Some(0.0),
        "{text}"
    );
}
