//! A real collectd (Debian's `collectd-core`, which the test setup
//! installs) with its `cpu`, `memory`, `load` and `interface` plugins,
//! every second, and `write_graphite` to two nodes: the daemon's Graphite
//! listener and a witness listener of the test's own. Its series appear
//! under collectd's default naming (`<host>.<plugin>-<instance>.<type>-<type
//! instance>`, the host's dots escaped to `_`), and every minute slot equals
//! what the witness received.
//!
//! Skips, saying why, when collectd is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tally_testkit::client::{get_ok, now_ms};
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::Daemon;
use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;

use super::reference::{check_metric, Kind, Reference};
use crate::tallyd;

/// collectd's `Hostname`; write_graphite escapes its dots.
const HOSTNAME: &str = "collectd.tally.test";
const SOURCE: &str = "collectd_tally_test";

fn collectd_bin() -> Option<PathBuf> {
    ["/usr/sbin/collectd", "/usr/bin/collectd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn config(dir: &Path, tally: u16, witness: u16) -> String {
    format!(
        "Hostname \"{HOSTNAME}\"\nFQDNLookup false\nBaseDir \"{dir}\"\nPIDFile \"{dir}/collectd.pid\"\n\
         PluginDir \"/usr/lib/collectd\"\nTypesDB \"/usr/share/collectd/types.db\"\nInterval 1\n\
         LoadPlugin logfile\n<Plugin logfile>\n  LogLevel info\n  File STDOUT\n</Plugin>\n\
         LoadPlugin cpu\nLoadPlugin memory\nLoadPlugin load\nLoadPlugin interface\n\
         LoadPlugin write_graphite\n<Plugin write_graphite>\n\
         <Node \"tally\">\n    Host \"127.0.0.1\"\n    Port \"{tally}\"\n    Protocol \"tcp\"\n  </Node>\n\
         <Node \"witness\">\n    Host \"127.0.0.1\"\n    Port \"{witness}\"\n    Protocol \"tcp\"\n  </Node>\n\
         </Plugin>\n",
        dir = dir.display()
    )
}

/// Accepts connections on `listener` and keeps every byte they send.
fn witness(listener: TcpListener) -> Arc<Mutex<Vec<u8>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    got
}

/// SIGTERM (collectd flushes its writers), then a bounded wait.
fn stop(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What Tally must hold of the lines the witness received, and how many
/// of them it must take (collectd may write `nan` for a value it cannot
/// compute yet: Tally takes it, as data that enters no slot's count or sum).
fn reference(text: &str, collectd_log: &str) -> (Reference, u64) {
    let mut r = Reference::default();
    let mut good = 0u64;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 3, "{line:?}\n{collectd_log}");
        let (source, metric) = f[0].split_once('.').unwrap();
        assert_eq!(source, SOURCE, "{line:?}");
        let v: f64 = f[1].parse().unwrap();
        good += 1;
        if v.is_nan() {
            continue;
        }
        let ts: i64 = f[2].parse().unwrap();
        r.sample(
            (metric.to_owned(), BTreeMap::new()),
            Kind::Gauge,
            ts * 1000,
            v,
        );
    }
    (r.finish(), good)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectd_writes_graphite_exactly() {
    let Some(bin) = collectd_bin() else {
        eprintln!(
            "skipped: collectd is not installed (scripts/setup-test-deps installs collectd-core)"
        );
        return;
    };
    let d = Daemon::start_async(
        tallyd()
            .flush_interval("200ms")
            .env("TALLYD_GRAPHITE_LISTEN", "127.0.0.1:0"),
    )
    .await;
    let tally = d.graphite_addr().unwrap().port();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let witness_port = listener.local_addr().unwrap().port();
    let got = witness(listener);
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("collectd.conf");
    std::fs::write(&conf, config(dir.path(), tally, witness_port)).unwrap();
    let log = dir.path().join("collectd.log");
    let out = std::fs::File::create(&log).unwrap();
    let from = now_ms() / 60_000 * 60 - 60;
    let mut child = Command::new(&bin)
        .arg("-f")
        .arg("-C")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    tokio::time::sleep(Duration::from_secs(12)).await;
    tokio::task::block_in_place(|| stop(&mut child));
    let collectd_log = std::fs::read_to_string(&log).unwrap_or_default();

    // What the witness received once collectd has closed its connections.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
    let (r, good) = reference(&text, &collectd_log);
    assert!(good > 0, "the witness received nothing\n{collectd_log}");

    // The daemon has taken as many lines as the witness holds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = metrics_text(&d).await;
        let accepted = metric(
            &text,
            "tally_samples_accepted_total",
            &[("protocol", "graphite")],
        )
        .unwrap_or(0.0);
        if accepted as u64 == good {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon accepted {accepted} lines; the witness holds {good}\n{collectd_log}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let metrics: BTreeSet<&str> = r.series.keys().map(|(m, _)| m.as_str()).collect();
    for want in [
        "cpu-0.cpu-idle",
        "memory.memory-used",
        "load.load.shortterm",
    ] {
        assert!(metrics.contains(want), "{want} in {metrics:?}");
    }
    assert!(
        metrics
            .iter()
            .any(|m| m.starts_with("interface-lo.if_octets.")),
        "{metrics:?}"
    );
    let from = from.to_string();
    for m in metrics {
        let body = get_ok(
            &d,
            "/api/v1/range",
            &[
                ("source", SOURCE),
                ("metric", m),
                ("from", &from),
                ("step", "1m"),
            ],
        )
        .await;
        check_metric(&r, m, &body);
    }
}
