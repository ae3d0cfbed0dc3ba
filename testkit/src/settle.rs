//! Bounded waits for a daemon to reach a state: flushes applied and nothing
//! held, or any condition a test can check. A test never sleeps for a
//! fixed time hoping a flush has happened; it polls, with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::daemon::Daemon;
use crate::metrics::{metric_sum, metrics_text, metrics_text_at};

/// Waits until the daemon at `base` has applied a flush and holds nothing
/// unflushed, three scrapes in a row (catalog entries and rollups are
/// written by flushes).
pub async fn wait_settled(base: &str) {
    settle(
        base,
        1.0,
        3,
        Duration::from_millis(300),
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|m| panic!("no flush:\n{m}"));
}

/// Waits until at least `min_flushes` flushes were applied and nothing is
/// pending or in flight (as far as the daemon's own gauges say), twice in a
/// row; panics with the last scrape and the daemon's log after `timeout`.
pub async fn wait_flushed(d: &Daemon, min_flushes: f64, timeout: Duration) {
    settle(
        &d.http_url(),
        min_flushes,
        2,
        Duration::from_millis(150),
        timeout,
    )
    .await
    .unwrap_or_else(|m| panic!("no settled flush within {timeout:?}:\n{m}\n{}", d.logs()));
}

/// Polls `/metrics` at `base` every `poll` until `rounds` scrapes in a row
/// show at least `min_flushes` flushes and nothing pending or in flight;
/// the last scrape, with those values, when `timeout` passes first.
async fn settle(
    base: &str,
    min_flushes: f64,
    rounds: u32,
    poll: Duration,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut settled = 0;
    loop {
        let m = metrics_text_at(base).await;
        let flushes = metric_sum(&m, "tally_flushes_total");
        let pending = metric_sum(&m, "tally_pending_slots");
        let inflight = metric_sum(&m, "tally_flush_inflight_batches");
        if flushes >= min_flushes && pending == 0.0 && inflight == 0.0 {
            settled += 1;
            if settled == rounds {
                return Ok(());
            }
        } else {
            settled = 0;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "flushes={flushes} pending={pending} inflight={inflight}\n{m}"
            ));
        }
        tokio::time::sleep(poll).await;
    }
}

/// The flushes the daemon has applied so far.
pub async fn flushes_so_far(d: &Daemon) -> f64 {
    metric_sum(&metrics_text(d).await, "tally_flushes_total")
}

/// Retries `check` every 100 ms until it returns `Ok`, for reads that
/// become true within a flush or two (catalog, rollups). Panics with the
/// last `Err` after `timeout`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if Instant::now() >= deadline => {
                panic!("{what}: still not true after {timeout:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
