//! A full disk, through the binary: the data directory sits on a small
//! tmpfs the test mounts. Filling it stops acknowledgements (UNAVAILABLE,
//! nothing of the request taken) and makes tallyd unready; growing the file
//! system lets it resume by itself, without a restart; and every
//! acknowledged sample is then stored exactly once, also after a crash.
//!
//! Mounting needs root (CAP_SYS_ADMIN); where the test runs without it, it
//! says so and checks nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::client::{get_ok, http_get, now_ms, within};
use tally_testkit::metrics::{metric_sum, metrics_text};
use tally_testkit::settle::eventually;
use tally_testkit::Daemon;

use crate::tallyd;

/// A tmpfs mounted for the test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::Builder::new()
            .prefix("tally-full-disk-")
            .tempdir()
            .ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn grow(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .unwrap();
        assert!(status.success(), "remounting the tmpfs");
    }
}

/// A 12 MiB tmpfs and a data directory on it, or `None` (saying why)
/// where one cannot be mounted.
fn small_data_dir() -> Option<(SmallDisk, PathBuf)> {
    let Some(disk) = SmallDisk::mount("12m") else {
        eprintln!("full_disk: skipped, a tmpfs cannot be mounted here (needs root)");
        return None;
    };
    let data = disk.path().join("data");
    std::fs::create_dir_all(&data).ok()?;
    Some((disk, data))
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
    }
}

/// Gauges of value 1: `sources` × `metrics` series, `per_series`
/// samples each per request, so a stored slot's sum counts its samples.
#[derive(Clone, Copy)]
struct Fleet {
    sources: usize,
    metrics: usize,
    per_series: usize,
}

fn source(i: usize) -> String {
    format!("fd-{i:03}")
}

impl Fleet {
    fn request(&self, t0_ms: i64) -> pb::PushRequest {
        let timestamps: Vec<i64> = (0..self.per_series as i64).map(|k| t0_ms + k).collect();
        let series = |m: usize| pb::SeriesSamples {
            metric: format!("m{m:02}"),
            kind: pb::SampleKind::Gauge as i32,
            timestamps_ms: timestamps.clone(),
            values: vec![1.0; self.per_series],
            start_times_ms: Vec::new(),
            labels: Vec::new(),
        };
        pb::PushRequest {
            sources: (0..self.sources)
                .map(|i| pb::SourceBatch {
                    source: source(i),
                    series: (0..self.metrics).map(series).collect(),
                    groups: Vec::new(),
                })
                .collect(),
        }
    }

    fn samples(&self) -> u64 {
        (self.sources * self.metrics * self.per_series) as u64
    }

    /// Pushes up to `max` requests, a tenth of a second of sample time
    /// apart (the log's compact records take thousands of requests to fill
    /// the disk, which must stay within the lateness window), until one is
    /// refused; returns the requests acknowledged and the refusal.
    async fn push_until_refused(
        &self,
        d: &Daemon,
        t0_ms: &mut i64,
        max: usize,
    ) -> (u64, Option<tonic::Status>) {
        let mut ingest = d.ingest_client().await;
        let mut acked = 0;
        for _ in 0..max {
            match within("Push", ingest.push(self.request(*t0_ms))).await {
                Ok(r) => {
                    let r = r.into_inner();
                    assert_eq!(r.accepted, self.samples(), "{r:?}");
                    acked += 1;
                }
                Err(status) => return (acked, Some(status)),
            }
            *t0_ms += 100;
        }
        (acked, None)
    }

    /// Samples stored per series over the last hours, through the range
    /// API.
    async fn stored(&self, d: &Daemon) -> BTreeMap<String, f64> {
        let from = (now_ms() / 1000 - 3 * 3600).to_string();
        let mut out = BTreeMap::new();
        for i in 0..self.sources {
            let body = get_ok(
                d,
                "/api/v1/range",
                &[
                    ("source", source(i).as_str()),
                    ("metric", "m*"),
                    ("from", &from),
                    ("step", "1h"),
                ],
            )
            .await;
            for s in body["series"].as_array().into_iter().flatten() {
                let n: f64 = s["points"]
                    .as_array()
                    .map_or(0.0, |p| p.iter().filter_map(|p| p["sum"].as_f64()).sum());
                out.insert(format!("{}/{}", s["source"], s["metric"]), n);
            }
        }
        out
    }

    fn expected(&self, requests: u64) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for i in 0..self.sources {
            for m in 0..self.metrics {
                let key = format!("\"{}\"/\"m{m:02}\"", source(i));
                out.insert(key, (requests * self.per_series as u64) as f64);
            }
        }
        out
    }
}

async fn readyz(d: &Daemon) -> u16 {
    http_get(d, "/readyz").await.0
}

async fn wait_ready(d: &Daemon, want: u16, what: &str, timeout: Duration) {
    eventually(what, timeout, || async {
        match readyz(d).await {
            s if s == want => Ok(()),
            s => Err(format!("/readyz {s}")),
        }
    })
    .await;
}

async fn wait_stored(d: &Daemon, fleet: Fleet, requests: u64) {
    let want = fleet.expected(requests);
    eventually(
        "every acknowledged sample stored once",
        Duration::from_secs(30),
        || async {
            let got = fleet.stored(d).await;
            if got == want {
                Ok(())
            } else {
                Err(format!(
                    "{} series differ",
                    got.iter().filter(|(k, v)| want.get(*k) != Some(v)).count()
                        + want.len().saturating_sub(got.len())
                ))
            }
        },
    )
    .await;
}

/// Fills the disk, checks that nothing more is acknowledged and tallyd is
/// unready, gives the space back and checks that it resumes. Returns the
/// requests acknowledged.
async fn fill_and_free(d: &Daemon, disk: &SmallDisk, fleet: Fleet, max: usize) -> u64 {
    let mut t0 = now_ms() - 50 * 60 * 1000;
    let (mut acked, refused) = fleet.push_until_refused(d, &mut t0, max).await;
    let refused = refused.unwrap_or_else(|| panic!("the disk never filled\n{}", d.logs()));
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(acked > 0, "some requests were taken before");
    wait_ready(
        d,
        503,
        "unready while the disk is full",
        Duration::from_secs(10),
    )
    .await;
    let (more, still) = fleet.push_until_refused(d, &mut t0, 3).await;
    assert_eq!(more, 0, "no acknowledgement while the disk is full");
    assert_eq!(still.map(|s| s.code()), Some(tonic::Code::Unavailable));

    disk.grow("256m");
    wait_ready(d, 200, "ready once space returns", Duration::from_secs(30)).await;
    let (after, none) = fleet.push_until_refused(d, &mut t0, 10).await;
    assert!(none.is_none(), "taken again: {none:?}");
    acked += after;
    acked
}

/// The log fills first: its appends fail, are undone, and resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_log_a_full_disk_stops_acks_until_space_returns() {
    let Some((disk, data)) = small_data_dir() else {
        return;
    };
    let mut d = Daemon::start_async(tallyd().flush_interval("1s").data_dir(&data)).await;
    let fleet = Fleet {
        sources: 20,
        metrics: 1,
        per_series: 50,
    };
    // The log's compact records of these constant gauges take about 2 KB
    // a request: several thousand requests fill the disk.
    let acked = fill_and_free(&d, &disk, fleet, 30_000).await;
    assert!(metric_sum(&metrics_text(&d).await, "tally_wal_errors_total") > 0.0);
    wait_stored(&d, fleet, acked).await;
    // A crash now: the log replays, nothing counts twice.
    tokio::task::block_in_place(|| d.crash_and_restart());
    assert_eq!(
        fleet.stored(&d).await,
        fleet.expected(acked),
        "{}",
        d.logs()
    );
}

/// Without the log, the store meets the full disk: redb refuses the file
/// after the error, so the store reopens it once space returns, its
/// flushes since the last checkpoint still in memory; meanwhile ingest
/// refuses and tallyd is unready. The store folds every series at each
/// flush and checkpoints every second here, so that it is what writes; the
/// fleet is large enough that one flush's documents (packed, a few minutes
/// each, so a few hundred bytes an hour document, and a 1,216-byte day
/// summary) outgrow the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_meets_a_full_disk_and_reopens_when_space_returns() {
    let Some((disk, data)) = small_data_dir() else {
        return;
    };
    let opts = tallyd()
        .flush_interval("200ms")
        .env("TALLYD_WAL_ENABLED", "false")
        .env("TALLYD_EMBEDDED_PENDING_MAX_BYTES", "0")
        .env("TALLYD_EMBEDDED_CHECKPOINT_INTERVAL", "1s")
        .data_dir(&data);
    let mut d = Daemon::start_async(opts).await;
    let fleet = Fleet {
        sources: 500,
        metrics: 20,
        per_series: 1,
    };
    let acked = fill_and_free(&d, &disk, fleet, 2_000).await;
    let logs = d.logs();
    assert!(
        logs.contains("embedded store reopened after an I/O error"),
        "{logs}"
    );
    wait_stored(&d, fleet, acked).await;
    tokio::task::block_in_place(|| d.restart());
    assert_eq!(
        fleet.stored(&d).await,
        fleet.expected(acked),
        "{}",
        d.logs()
    );
}
