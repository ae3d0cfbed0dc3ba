//! What the dashboard's tests show: samples from the real load generator
//! (a fleet over a past range, as fast as it goes) and from a real
//! Prometheus remote-writing what it scrapes every second from a real node
//! exporter (live, labelled series).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tally_testkit::bins::Bin;
use tally_testkit::client::{get_json, http_client};
use tally_testkit::{process, Daemon};

use super::browser::{free_port, which};

const LOADGEN_TIMEOUT: Duration = Duration::from_secs(600);

/// Sends `sources` × `metrics` series over the `seconds` before now, one
/// sample per series per second, named `<prefix>000001`…; returns the load
/// generator's report once every sample is acknowledged.
pub async fn backfill(
    d: &Daemon,
    prefix: &str,
    sources: usize,
    metrics: usize,
    seconds: i64,
) -> Value {
    backfill_per_cpu(d, prefix, sources, metrics, 1, seconds).await
}

/// As [`backfill`], each metric as `cpus` series labelled `cpu="0"`… when
/// `cpus` is more than one.
pub async fn backfill_per_cpu(
    d: &Daemon,
    prefix: &str,
    sources: usize,
    metrics: usize,
    cpus: usize,
    seconds: i64,
) -> Value {
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let args: Vec<String> = [
        "--target",
        &grpc,
        "--http",
        &http,
        "--max",
        "--quiet",
        "--json",
        "--source-prefix",
        prefix,
        "--kinds",
        "gauge=1,cumulative=1",
        "--batch",
        "5000",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "--sources".into(),
        sources.to_string(),
        "--metrics".into(),
        metrics.to_string(),
        "--seconds".into(),
        seconds.to_string(),
    ])
    .chain(
        (cpus > 1)
            .then(|| ["--labels".to_string(), format!("cpu={cpus}")])
            .into_iter()
            .flatten(),
    )
    .collect();
    let run = tokio::task::spawn_blocking(move || {
        let loadgen = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        process::run(loadgen, &args, LOADGEN_TIMEOUT)
    })
    .await
    .unwrap();
    assert!(
        run.status.success(),
        "tally-loadgen failed: {}",
        run.describe()
    );
    let report = run.json();
    let planned = (sources * metrics * cpus.max(1)) as i64 * seconds;
    assert_eq!(
        report["samples"]["accepted"].as_i64(),
        Some(planned),
        "{report:#}"
    );
    report
}

/// A child process killed when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn start(
        name: &'static str,
        bin: &std::path::Path,
        args: &[String],
        dir: &std::path::Path,
    ) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Proc { name, child, log }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(4000)..];
            eprintln!("---- {} log (tail) ----\n{tail}", self.name);
        }
    }
}

async fn wait_ready(url: &str, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(r) = http_client().get(url).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{name} did not answer {url} within 30 s");
}

/// A real Prometheus scraping a real node exporter every second and
/// remote-writing to the daemon, until dropped.
pub struct PrometheusFeed {
    /// The source its samples arrive under: the node exporter's instance.
    pub source: String,
    /// Prometheus' own HTTP address, for its remote-write counters.
    prom_url: String,
    _prom: Proc,
    _node: Proc,
    _dir: tempfile::TempDir,
}

impl PrometheusFeed {
    /// None, saying why, when Prometheus or the node exporter is missing.
    pub async fn start(d: &Daemon) -> Option<PrometheusFeed> {
        let (Some(prometheus), Some(node_exporter)) =
            (which("prometheus"), which("prometheus-node-exporter"))
        else {
            eprintln!("skipped the Prometheus feed: prometheus or prometheus-node-exporter is not installed (scripts/setup-test-deps installs both)");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("tally-web-prom-")
            .tempdir()
            .unwrap();
        let node_port = free_port();
        let node = Proc::start(
            "node_exporter",
            &node_exporter,
            &[format!("--web.listen-address=127.0.0.1:{node_port}")],
            dir.path(),
        );
        wait_ready(
            &format!("http://127.0.0.1:{node_port}/metrics"),
            "node_exporter",
        )
        .await;
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
             scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{node_port}']\n\
             remote_write:\n  - url: {}/api/v1/write\n    queue_config:\n      batch_send_deadline: 500ms\n      min_backoff: 100ms\n      max_backoff: 1s\n",
            d.http_url()
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let prom_port = free_port();
        let prom = Proc::start(
            "prometheus",
            &prometheus,
            &[
                format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ),
                format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()),
                format!("--web.listen-address=127.0.0.1:{prom_port}"),
            ],
            dir.path(),
        );
        wait_ready(
            &format!("http://127.0.0.1:{prom_port}/-/ready"),
            "prometheus",
        )
        .await;
        Some(PrometheusFeed {
            source: format!("127.0.0.1:{node_port}"),
            prom_url: format!("http://127.0.0.1:{prom_port}"),
            _prom: prom,
            _node: node,
            _dir: dir,
        })
    }

    /// Waits until the daemon lists more than `metrics` metric names for
    /// the node exporter's source. A page opened before that shows the
    /// source as empty: Prometheus' first remote-write can come well after
    /// it answers ready on a loaded machine. Panics after two minutes with
    /// Prometheus' remote-write counters, which say whether it sent, failed
    /// or dropped.
    pub async fn arrived(&self, d: &Daemon, metrics: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, body) = get_json(
                d,
                "/api/v1/metrics",
                &[("source", self.source.as_str()), ("limit", "10000")],
            )
            .await;
            let listed = body["metrics"].as_array().map_or(0, Vec::len);
            if status == 200 && listed > metrics {
                return;
            }
            if Instant::now() > deadline {
                let text = match http_client()
                    .get(format!("{}/metrics", self.prom_url))
                    .send()
                    .await
                {
                    Ok(r) => r.text().await.unwrap_or_default(),
                    Err(e) => e.to_string(),
                };
                let counters: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("prometheus_remote_storage_"))
                    .collect();
                let ours = tally_testkit::metrics::metrics_text(d).await;
                let ours: Vec<&str> = ours
                    .lines()
                    .filter(|l| {
                        ["tally_ingest_requests_total", "_rejected_", "_refused_"]
                            .iter()
                            .any(|k| l.contains(k))
                    })
                    .collect();
                panic!(
                    "after 120 s the daemon lists {listed} metrics of {} ({status}); Prometheus' remote write:\n{}\nthe daemon's:\n{}",
                    self.source,
                    counters.join("\n"),
                    ours.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
