//! The live feed: a real Prometheus scrapes a real node exporter, itself
//! and `tallyd` every second and remote-writes all of it to that `tallyd`,
//! for three whole minutes. Queries are then evaluated at whole minutes
//! inside that stretch, on Prometheus and on Tally.

use std::path::Path;
use std::time::{Duration, Instant};

use tally_testkit::client::{http_client, now_ms};
use tally_testkit::prometheus::{start_node_exporter, start_prometheus, Server};
use tally_testkit::settle::flushes_so_far;
use tally_testkit::Daemon;

use super::corpus::Feed;
use super::eval::{aligned, highest_sent, Setting, Side};
use crate::tallyd;

/// Whole minutes of data the queries look at.
const MINUTES: i64 = 3;
/// How long Prometheus may take to send what it scraped before the end.
const CATCH_UP: Duration = Duration::from_secs(60);

pub(super) struct Live {
    pub(super) tally: Daemon,
    pub(super) prometheus: Server,
    node: Server,
    /// The first whole minute with data (Unix seconds).
    first_minute: i64,
}

fn config(node: &str, prometheus: &str, tally: &str) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
         scrape_configs:\n\
         \x20 - job_name: node\n    static_configs:\n      - targets: ['{node}']\n\
         \x20 - job_name: prometheus\n    static_configs:\n      - targets: ['{prometheus}']\n\
         \x20 - job_name: tally\n    static_configs:\n      - targets: ['{tally}']\n\
         remote_write:\n  - url: http://{tally}/api/v1/write\n    queue_config:\n      \
         batch_send_deadline: 500ms\n      min_backoff: 100ms\n      max_backoff: 1s\n"
    )
}

impl Live {
    /// Starts the daemon, the exporter and Prometheus; the clock runs from
    /// here.
    pub(super) async fn start(prometheus: &Path, node_exporter: &Path, dir: &Path) -> Live {
        let tally = Daemon::start_async(tallyd()).await;
        let node = start_node_exporter(node_exporter, dir).await;
        let tally_addr = tally.http_url().trim_start_matches("http://").to_string();
        let prom = start_prometheus(
            "prometheus-live",
            prometheus,
            dir,
            |own| config(node.address(), own, &tally_addr),
            &[],
        )
        .await;
        // A few seconds of scrapes before the first whole minute.
        let first_minute = (now_ms() / 1000 + 5).div_euclid(60) * 60 + 60;
        Live {
            tally,
            prometheus: prom,
            node,
            first_minute,
        }
    }

    /// The last evaluation time: the end of the stretch.
    pub(super) fn end(&self) -> i64 {
        self.first_minute + MINUTES * 60
    }

    /// Waits until the stretch is over, Prometheus has sent everything up
    /// to its end, and the daemon has flushed since.
    pub(super) async fn wait_complete(&self) {
        let end = self.end();
        while now_ms() / 1000 < end + 2 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let sent = self.highest_sent().await;
            if sent.is_some_and(|t| t > end as f64) {
                break;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "note: Prometheus reports sending up to {sent:?}, not past {end}, \
                     after {CATCH_UP:?}; comparing anyway"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let flushes = flushes_so_far(&self.tally).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while flushes_so_far(&self.tally).await < flushes + 2.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The newest sample time Prometheus has sent to Tally.
    async fn highest_sent(&self) -> Option<f64> {
        let api = format!("{}/api/v1", self.prometheus.url());
        highest_sent(&http_client(), &api).await
    }

    /// Instant queries only, at `back_ms` before the wall clock's now as
    /// each is sent: inside the minute in progress (or just after one).
    pub(super) fn before_now(&self, back_ms: i64) -> Setting {
        Setting {
            instants: Vec::new(),
            before_now: vec![back_ms],
            ranges: Vec::new(),
            ..self.setting()
        }
    }

    pub(super) fn setting(&self) -> Setting {
        let end = self.end();
        let tally_addr = self
            .tally
            .http_url()
            .trim_start_matches("http://")
            .to_string();
        Setting {
            feed: Feed::Live,
            prometheus: Side {
                name: "prometheus",
                api: format!("{}/api/v1", self.prometheus.url()),
            },
            tally: Side {
                name: "tally",
                api: format!("{}/prometheus/api/v1", self.tally.http_url()),
            },
            instants: vec![end],
            // Every range up to two minutes is whole from here on.
            before_now: Vec::new(),
            ranges: vec![aligned(self.first_minute + 120, end, 60)],
            vars: vec![
                ("$node", self.node.address().to_string()),
                ("$prom", self.prometheus.address().to_string()),
                ("$tally", tally_addr),
                ("$at", (end - 60).to_string()),
            ],
        }
    }
}

/// Lines of a Prometheus log that report a failed remote write: the
/// queue manager's errors (`non-recoverable error`, dropped samples).
pub(super) fn remote_write_errors(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("component=remote") && l.contains("level=error"))
        .map(str::to_string)
        .collect()
}

#[test]
fn remote_write_errors_are_found_in_a_prometheus_log() {
    let log = "ts=2024-01-01T00:00:00Z caller=dedupe.go:112 component=remote level=error \
               remote_name=abc url=http://127.0.0.1:1/api/v1/write msg=\"non-recoverable error\" \
               count=10 exemplarCount=0 err=\"server returned HTTP status 400 Bad Request\"\n\
               ts=2024-01-01T00:00:01Z caller=main.go:1 level=info msg=\"Server is ready\"\n";
    assert_eq!(remote_write_errors(log).len(), 1);
}
