//! The alerting oracle (issue #48): one rules file of ordinary node
//! exporter alerts, evaluated by vmalert against a real Prometheus and
//! against `tallyd`, fed the same data, and each alert must fire and
//! resolve on Tally within one evaluation interval of Prometheus.
//!
//! Prometheus scrapes two exporters the test serves (`exporter`) every
//! second and remote-writes everything to `tallyd`. From a whole minute
//! `B` on, the test turns the knobs: the CPUs busy at `B` and idle at
//! `B + 60 s`; the file system low and the backup series gone at
//! `B + 15 s`, back at `B + 75 s`; the second exporter down at `B + 25 s`
//! (Prometheus' `up` is 0, its series end with staleness markers) and up
//! again at `B + 85 s`. Two vmalert processes, one per data source, with
//! the same rules file (so the same evaluation phase), are polled for
//! their firing alerts throughout.
//!
//! The CPU changes fall on whole minutes and the CPU alert's threshold is
//! a tenth of the busy rate: a `rate` window on Tally starts at the minute
//! boundary before `t − r` (docs/promql.md, ranges), so it lets go of a
//! busy stretch only when the minute that stretch ended in leaves it.
//! Prometheus lets go once the busy share of `(t − r, t]` drops below the
//! threshold, `60 s · threshold / busy rate` earlier: 6 s here.
//!
//! Skips, saying why, when Prometheus is missing, or Go (vmalert is built
//! from the Go module proxy), as the FerretDB and Collector tests do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tally_testkit::client::{http_client, now_ms};
use tally_testkit::prometheus::{programs, start_prometheus, Server};
use tally_testkit::Daemon;

use super::exporter::Exporter;
use super::live::remote_write_errors;
use super::vmalert;
use crate::tallyd;

/// vmalert's evaluation interval: the tolerance.
const INTERVAL: Duration = Duration::from_secs(5);
/// How often both vmalerts are asked for their alerts.
const POLL: Duration = Duration::from_millis(250);
/// Added to the tolerance: a transition is seen at the first poll after
/// it, up to a poll period and two requests' time late on either side.
/// Both vmalerts evaluate at the same phase (the same group in the same
/// file), so their transitions are whole intervals apart plus this.
const SEEN: Duration = Duration::from_secs(1);
/// How long after the start both sides may take to answer
/// [`READY_QUERIES`].
const QUIET_WITHIN: Duration = Duration::from_secs(90);
/// What both sides must answer before the test starts changing things.
const READY_QUERIES: [&str; 3] = [
    "node_textfile_mtime_seconds{job=\"node\",file=\"backup.prom\"}",
    "node_filesystem_avail_bytes{mountpoint=\"/data\"}",
    "up{job=\"flaky\"}",
];
/// Seconds after `B` by which every alert must have fired and resolved.
const DEADLINE_S: f64 = 150.0;

const RULES: &str = "\
groups:
  - name: node
    rules:
      - alert: HostHighCpuLoad
        expr: avg by (instance) (rate(node_cpu_seconds_total{mode!=\"idle\"}[1m])) > 0.1
      - alert: HostOutOfDiskSpace
        expr: node_filesystem_avail_bytes{mountpoint=\"/data\"} / node_filesystem_size_bytes{mountpoint=\"/data\"} * 100 < 10
      - alert: TargetDown
        expr: up{job=\"flaky\"} == 0
      - alert: BackupSeriesEnded
        expr: absent(node_textfile_mtime_seconds{job=\"node\",file=\"backup.prom\"})
";
const ALERTS: [&str; 4] = [
    "HostHighCpuLoad",
    "HostOutOfDiskSpace",
    "TargetDown",
    "BackupSeriesEnded",
];

fn prometheus_config(node: &str, flaky: &str, tally: &str) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
         scrape_configs:\n\
         \x20 - job_name: node\n    static_configs:\n      - targets: ['{node}']\n\
         \x20 - job_name: flaky\n    static_configs:\n      - targets: ['{flaky}']\n\
         remote_write:\n  - url: http://{tally}/api/v1/write\n    queue_config:\n      \
         batch_send_deadline: 500ms\n      min_backoff: 100ms\n      max_backoff: 1s\n"
    )
}

/// One side's alert transitions: (seconds after `B`, alert, firing).
type Changes = Vec<(f64, String, bool)>;

/// Whether the instant query `q` at now has a series in its answer.
async fn answers(api: &str, q: &str) -> bool {
    let Ok(r) = http_client().get(api).query(&[("query", q)]).send().await else {
        return false;
    };
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    body["data"]["result"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
}

/// Records what changed between two polls.
fn note(changes: &mut Changes, was: &BTreeSet<String>, now: &BTreeSet<String>, at: f64) {
    for a in now.difference(was) {
        changes.push((at, a.clone(), true));
    }
    for a in was.difference(now) {
        changes.push((at, a.clone(), false));
    }
}

/// Both sides' vmalerts and what the test drives.
struct Rig {
    tally: Daemon,
    prometheus: Server,
    node: Exporter,
    flaky: Option<Exporter>,
    flaky_address: String,
    on_prometheus: Server,
    on_tally: Server,
}

impl Rig {
    async fn start(prometheus: &Path, vmalert: &Path, dir: &Path) -> Rig {
        let tally = Daemon::start_async(tallyd()).await;
        let node = Exporter::start("127.0.0.1:0").await;
        let flaky = Exporter::start("127.0.0.1:0").await;
        let flaky_address = flaky.address().to_string();
        let tally_addr = tally.http_url().trim_start_matches("http://").to_string();
        let prom = start_prometheus(
            "prometheus-alerting",
            prometheus,
            dir,
            |_| prometheus_config(node.address(), &flaky_address, &tally_addr),
            &[],
        )
        .await;
        let rules = dir.join("alerts.yml");
        std::fs::write(&rules, RULES).unwrap();
        let on_prometheus = vmalert::start(
            "vmalert-prometheus",
            vmalert,
            dir,
            &rules,
            prom.url(),
            INTERVAL,
        )
        .await;
        let tally_api = format!("{}/prometheus", tally.http_url());
        let on_tally =
            vmalert::start("vmalert-tally", vmalert, dir, &rules, &tally_api, INTERVAL).await;
        Rig {
            tally,
            prometheus: prom,
            node,
            flaky: Some(flaky),
            flaky_address,
            on_prometheus,
            on_tally,
        }
    }

    /// Turns the knobs due by `at` (seconds after `B`), once each.
    async fn drive(&mut self, at: f64, done: &mut usize) {
        const STEPS: [f64; 6] = [0.0, 15.0, 25.0, 60.0, 75.0, 85.0];
        while *done < STEPS.len() && at >= STEPS[*done] {
            match *done {
                0 => self.node.set_busy(true),
                1 => {
                    self.node.set_disk_low(true);
                    self.node.set_backup(false);
                }
                2 => self.flaky = None,
                3 => self.node.set_busy(false),
                4 => {
                    self.node.set_disk_low(false);
                    self.node.set_backup(true);
                }
                _ => self.flaky = Some(Exporter::start(&self.flaky_address).await),
            }
            *done += 1;
        }
    }

    /// Waits until both data sources answer the series the rules read,
    /// at now: Prometheus once it has scraped, Tally once remote-write has
    /// delivered and its name cache (15 s, docs/promql.md) knows the new
    /// metrics. Until then `absent()` fires, as it should.
    async fn wait_data(&self) {
        let deadline = now_ms() + QUIET_WITHIN.as_millis() as i64;
        let apis = [
            format!("{}/api/v1/query", self.prometheus.url()),
            format!("{}/prometheus/api/v1/query", self.tally.http_url()),
        ];
        for api in &apis {
            for q in READY_QUERIES {
                while !answers(api, q).await {
                    assert!(
                        now_ms() < deadline,
                        "{api} did not answer {q} within {QUIET_WITHIN:?} of the start"
                    );
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    /// Polls both vmalerts from now until every alert has fired and
    /// resolved on both sides and nothing changed for two intervals more
    /// (or the deadline), the knobs turned from `base` (Unix ms, a whole
    /// minute) on.
    async fn run(&mut self, base: i64) -> (Changes, Changes) {
        let (mut on_p, mut on_t) = (Changes::new(), Changes::new());
        let (mut was_p, mut was_t) = (BTreeSet::new(), BTreeSet::new());
        let mut done = 0;
        loop {
            let at = (now_ms() - base) as f64 / 1000.0;
            self.drive(at, &mut done).await;
            let p = vmalert::firing(&self.on_prometheus).await;
            let t = vmalert::firing(&self.on_tally).await;
            let at = (now_ms() - base) as f64 / 1000.0;
            if let Some(p) = p {
                note(&mut on_p, &was_p, &p, at);
                was_p = p;
            }
            if let Some(t) = t {
                note(&mut on_t, &was_t, &t, at);
                was_t = t;
            }
            let settled = |c: &Changes, now: &BTreeSet<String>| {
                now.is_empty()
                    && ALERTS
                        .iter()
                        .all(|a| c.iter().any(|x| x.0 >= 0.0 && x.1 == *a && !x.2))
            };
            let last = on_p.iter().chain(&on_t).map(|c| c.0).fold(0.0, f64::max);
            let quiet = at > last + 2.0 * INTERVAL.as_secs_f64();
            let over = settled(&on_p, &was_p) && settled(&on_t, &was_t) && quiet;
            if at > DEADLINE_S || over {
                return (on_p, on_t);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// An alert's firing and resolving time on one side, when from `B` on it
/// fired once and then resolved once; otherwise what it did. (Before data
/// arrives `absent()` fires on both sides; it must have resolved by `B`.)
fn fired_resolved(changes: &Changes, alert: &str) -> Result<(f64, f64), String> {
    let mine: Vec<(f64, bool)> = changes
        .iter()
        .filter(|c| c.1 == alert && c.0 >= 0.0)
        .map(|c| (c.0, c.2))
        .collect();
    match mine.as_slice() {
        [(f, true), (r, false)] => Ok((*f, *r)),
        other => Err(format!("{other:?}")),
    }
}

fn report(on_p: &Changes, on_t: &Changes) -> (String, Vec<String>) {
    let tolerance = (INTERVAL + SEEN).as_secs_f64();
    let mut r = String::from("===== alerts: fired / resolved, seconds after B =====\n");
    let mut failed = Vec::new();
    for alert in ALERTS {
        match (fired_resolved(on_p, alert), fired_resolved(on_t, alert)) {
            (Ok((pf, pr)), Ok((tf, tr))) => {
                r.push_str(&format!(
                    "{alert:20} prometheus {pf:6.1} / {pr:6.1}   tally {tf:6.1} / {tr:6.1}   \
                     deltas {:+5.1} / {:+5.1}\n",
                    tf - pf,
                    tr - pr
                ));
                if (tf - pf).abs() > tolerance || (tr - pr).abs() > tolerance {
                    failed.push(format!(
                        "{alert}: Tally fired {:+.1} s and resolved {:+.1} s from Prometheus \
                         (more than {tolerance} s)",
                        tf - pf,
                        tr - pr
                    ));
                }
            }
            (p, t) => {
                r.push_str(&format!("{alert:20} prometheus {p:?}   tally {t:?}\n"));
                failed.push(format!(
                    "{alert} did not fire once and resolve once after B on both sides \
                     (prometheus {p:?}, tally {t:?})"
                ));
            }
        }
    }
    (r, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_and_resolve_as_on_prometheus() {
    let prometheus = match programs() {
        Ok((p, _)) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let vmalert = match vmalert::binary() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let mut rig = Rig::start(&prometheus, &vmalert, dir.path()).await;
    rig.wait_data().await;
    // Then at least 15 s more: every alert resolved on both sides, and
    // several evaluations in which nothing may fire.
    let base = ((now_ms() + 15_000) / 60_000 + 1) * 60_000;
    let (on_p, on_t) = rig.run(base).await;
    let (text, failed) = report(&on_p, &on_t);
    eprintln!("{text}");
    eprintln!("changes on prometheus: {on_p:?}\nchanges on tally: {on_t:?}");
    let errors: BTreeMap<&str, usize> = [
        ("vmalert-prometheus", &rig.on_prometheus),
        ("vmalert-tally", &rig.on_tally),
    ]
    .into_iter()
    .map(|(n, s)| (n, s.log().matches("error").count()))
    .collect();
    eprintln!("error lines in vmalert logs: {errors:?}");
    let rw_errors = remote_write_errors(&rig.prometheus.log());
    assert!(
        rw_errors.is_empty(),
        "Prometheus could not remote-write to tallyd: {rw_errors:?}"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
