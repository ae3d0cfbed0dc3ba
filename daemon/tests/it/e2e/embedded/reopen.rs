//! A SIGKILL leaves a store file that opens at once: every durable commit
//! saves the storage engine's allocator state, so the start after a crash
//! loads it instead of verifying and rebuilding the whole file (a scan that
//! took half a minute at a gigabyte). What was acknowledged is read back.

use std::time::{Duration, Instant};

use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::Daemon;

use super::super::check::{check_reads, expects, minute_start_ms, push, range_around, request};
use super::super::check::{Kind, Sent};
use crate::tallyd;

/// The log line of a full repair (`daemon/src/store/embedded/engine.rs`).
const FULL_REPAIR: &str = "verifying and rebuilding it";

/// Waits until the store has made `n` checkpoints (each a durable commit).
async fn checkpoints(d: &Daemon, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = metrics_text(d).await;
        let made = metric(
            &text,
            "tally_store_checkpoints_total",
            &[("store", "embedded")],
        );
        if made.unwrap_or(0.0) >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint {n} within 60 s: {made:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_leaves_a_file_that_opens_without_a_full_repair() {
    let mut d = Daemon::start_async(
        tallyd()
            .flush_interval("100ms")
            .env("TALLYD_EMBEDDED_CHECKPOINT_INTERVAL", "1s"),
    )
    .await;
    let t0 = minute_start_ms(3);
    let sent: Vec<Sent> = (0..20)
        .map(|i| {
            let samples = (0..30)
                .map(|j| (t0 + j * 1_000, f64::from(i * 100 + j as i32)))
                .collect();
            Sent::new(&format!("host-{i}"), "cpu.user", Kind::Gauge, samples)
        })
        .collect();
    let mut ingest = d.ingest_client().await;
    // Before and after a checkpoint, so that the file also holds commits
    // made after the last durable one (new series' catalog entries).
    push(&mut ingest, request(&sent[..10])).await.expect("push");
    checkpoints(&d, 1.0).await;
    push(&mut ingest, request(&sent[10..])).await.expect("push");
    tokio::time::sleep(Duration::from_millis(300)).await;

    tokio::task::block_in_place(|| d.crash_and_restart());
    let logs = d.logs();
    let after = logs.rsplit("SIGKILLed").next().unwrap_or("");
    assert!(
        !after.contains(FULL_REPAIR),
        "a full repair after SIGKILL:\n{after}"
    );
    assert!(after.contains("embedded store open"), "{after}");
    let text = metrics_text(&d).await;
    assert_eq!(
        metric(&text, "tally_store_repairs_total", &[("store", "embedded")]).unwrap_or(0.0),
        0.0
    );
    let (from, to) = range_around(t0);
    check_reads(&d, &expects(&sent), from, to).await;
}
