//! The synthetic feed: two and a half hours of what an OpenTelemetry
//! Collector's host metrics and an instrumented HTTP service look like
//! through Prometheus' naming, generated deterministically (no wall clock,
//! no random seed) so every run sends the same values.
//!
//! * gauges sampled every 1 s to 15 s (load, memory by state, file system
//!   usage filling up, a queue depth, process counts, a job that stops
//!   reporting half-way, a process start time);
//! * counters (CPU time by state, network and disk I/O, page faults, HTTP
//!   requests), one host's service restarting half-way (its counters
//!   reset);
//! * a classic histogram (`_bucket{le}`, `_sum`, `_count`) of request
//!   durations, reset with the service;
//! * an info series (`target_info`) per host;
//! * a summary whose quantiles are NaN while it has no observations, as
//!   client libraries export them;
//! * late data: one host (`host-late`) whose samples arrive twenty minutes
//!   behind the others', and gauge samples that reach Tally only after
//!   newer samples of their series, and after their minutes were flushed
//!   (see `remote_write`).
//!
//! No sample falls on a whole second: real scrapes are not aligned to the
//! minute either, and a sample exactly on a minute boundary belongs to the
//! next minute slot in Tally and to the window ending there in Prometheus.

use std::collections::BTreeMap;

/// How long the feed covers.
pub(super) const SPAN_MINUTES: i64 = 150;
pub(super) const JOB: &str = "otel-host";
pub(super) const HOSTS: [&str; 3] = ["host-a", "host-b", "host-c"];
pub(super) const LATE_HOST: &str = "host-late";
/// The minute (from the start) at which host-b's service restarts.
pub(super) const RESTART_MINUTE: i64 = 95;
/// The minute at which `backup_job_running` stops reporting.
pub(super) const BACKUP_ENDS_MINUTE: i64 = 100;

/// One series and all its samples, in time order.
pub(super) struct Series {
    /// `__name__` included.
    pub(super) labels: BTreeMap<String, String>,
    pub(super) samples: Vec<(i64, f64)>,
    /// Samples Tally receives only after the rest of the feed (and a
    /// flush), out of their series' order: every third sample of some
    /// gauges. Prometheus, which refuses out-of-order samples, receives
    /// every series in order.
    pub(super) tally_late: bool,
    /// Delivered this many minutes of data time behind the rest (to both).
    pub(super) lag_minutes: i64,
}

impl Series {
    /// Whether Tally receives sample `k` in the late pass.
    pub(super) fn late_for_tally(&self, k: usize) -> bool {
        self.tally_late && k % 3 == 2
    }
}

/// A deterministic value in `[0, 1)` for `(key, k)`: SplitMix64 of both.
fn unit(key: u64, k: i64) -> f64 {
    let mut z = key
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(k as u64)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A stable key for a label set, for noise and phases.
fn key_of(labels: &BTreeMap<String, String>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in labels {
        for b in k.bytes().chain([0]).chain(v.bytes()).chain([1]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Builds the feed's series over `[t0_ms, t0_ms + SPAN_MINUTES)`.
struct Builder {
    t0: i64,
    out: Vec<Series>,
}

/// What a value function sees: the sample's index, its time in seconds
/// from the start, and noise in `[-1, 1)` of its own.
#[derive(Clone, Copy)]
struct At {
    k: i64,
    s: f64,
    noise: f64,
}

impl Builder {
    /// A series sampled every `interval_s` seconds while `live(minute)`,
    /// its values from `value`. The first sample is at a phase of its own
    /// in its interval, never a whole second.
    fn series(
        &mut self,
        host: &str,
        name: &str,
        extra: &[(&str, &str)],
        interval_s: i64,
        live: impl Fn(i64) -> bool,
        mut value: impl FnMut(At) -> f64,
    ) -> &mut Series {
        let mut labels: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.insert("__name__".into(), name.into());
        labels.insert("job".into(), JOB.into());
        labels.insert("instance".into(), host.into());
        let key = key_of(&labels);
        let interval_ms = interval_s * 1000;
        // 137 ms to interval − 63 ms, never a multiple of 1000.
        let mut phase = 137 + (key % (interval_ms as u64 - 200)) as i64;
        if phase % 1000 == 0 {
            phase += 1;
        }
        let mut samples = Vec::new();
        let end = self.t0 + SPAN_MINUTES * 60_000;
        let mut k = 0;
        loop {
            let t = self.t0 + phase + k * interval_ms;
            if t >= end {
                break;
            }
            if live((t - self.t0) / 60_000) {
                let at = At {
                    k,
                    s: (t - self.t0) as f64 / 1000.0,
                    noise: 2.0 * unit(key, k) - 1.0,
                };
                samples.push((t, value(at)));
            }
            k += 1;
        }
        self.out.push(Series {
            labels,
            samples,
            tally_late: false,
            lag_minutes: 0,
        });
        self.out.last_mut().expect("just pushed")
    }
}

/// A slow wave: one period an hour, phase by `shift`.
fn wave(s: f64, shift: f64) -> f64 {
    (std::f64::consts::TAU * s / 3600.0 + shift).sin()
}

fn always(_: i64) -> bool {
    true
}

/// The whole feed, starting at `t0_ms` (a whole minute).
pub(super) fn feed(t0_ms: i64) -> Vec<Series> {
    let mut b = Builder {
        t0: t0_ms,
        out: Vec::new(),
    };
    for (h, host) in HOSTS.iter().enumerate() {
        let hf = h as f64;
        host_gauges(&mut b, host, hf, [1, 5, 15][h]);
        host_state(&mut b, host, hf);
        host_counters(&mut b, host, hf);
        service(&mut b, host, hf, *host == "host-b");
    }
    let late_from = b.out.len();
    host_gauges(&mut b, LATE_HOST, 3.0, 10);
    service(&mut b, LATE_HOST, 3.0, false);
    for s in &mut b.out[late_from..] {
        s.lag_minutes = 20;
    }
    b.out
}

/// Load and memory.
fn host_gauges(b: &mut Builder, host: &str, hf: f64, load_interval: i64) {
    b.series(
        host,
        "system_cpu_load_average_1m",
        &[],
        load_interval,
        always,
        |a| (1.5 + hf * 0.4 + wave(a.s, hf) + 0.2 * a.noise).max(0.0),
    );
    // Memory by state, adding up to about the limit.
    let limit = 16.0 * 1024.0 * 1024.0 * 1024.0;
    let used = move |a: At| (6.0e9 + 1.0e9 * wave(a.s, hf) + 5.0e7 * a.noise).round();
    let cached = move |a: At| (3.0e9 + 2.0e8 * wave(a.s, hf + 1.0)).round();
    let buffered = move |a: At| (2.0e8 + 1.0e6 * (a.k % 17) as f64).round();
    for (state, f) in [
        ("used", &used as &dyn Fn(At) -> f64),
        ("cached", &cached),
        ("buffered", &buffered),
    ] {
        b.series(
            host,
            "system_memory_usage_bytes",
            &[("state", state)],
            10,
            always,
            f,
        )
        .tally_late = true;
    }
    // What the other states leave (without their noise, which is their
    // own).
    b.series(
        host,
        "system_memory_usage_bytes",
        &[("state", "free")],
        10,
        always,
        move |a| (limit - 9.2e9 - 1.0e9 * wave(a.s, hf) - 2.0e8 * wave(a.s, hf + 1.0)).round(),
    )
    .tally_late = true;
    b.series(
        host,
        "system_memory_limit_bytes",
        &[],
        10,
        always,
        move |_| limit,
    );
}

/// What a host reports beyond load and memory: its resource info, file
/// systems, exporter queue, processes and a backup job.
fn host_state(b: &mut Builder, host: &str, hf: f64) {
    // What the OpenTelemetry Collector's Prometheus exporter makes of the
    // resource: an info series, always 1.
    let host_name = format!("{host}.example.net");
    b.series(
        host,
        "target_info",
        &[("host_name", &host_name), ("os_type", "linux")],
        15,
        always,
        |_| 1.0,
    );
    // File systems fill up: used grows by a steady rate, free shrinks.
    for (device, mountpoint, size, fill) in [
        ("sda1", "/", 100.0e9, 2.0e5),
        ("sdb1", "/data", 2.0e12, 5.0e6 * (1.0 + hf)),
    ] {
        let used = move |a: At| (0.4 * size + fill * a.s + 1.0e6 * a.noise).round();
        let reserved = 0.05 * size;
        for state in ["used", "free", "reserved"] {
            b.series(
                host,
                "system_filesystem_usage_bytes",
                &[
                    ("device", device),
                    ("mountpoint", mountpoint),
                    ("type", "ext4"),
                    ("state", state),
                ],
                15,
                always,
                move |a| match state {
                    "used" => used(a),
                    "reserved" => reserved,
                    _ => size - reserved - (0.4 * size + fill * a.s).round(),
                },
            );
        }
    }
    // A queue depth: a bounded random walk of whole numbers.
    let mut depth = 20.0;
    b.series(
        host,
        "otelcol_exporter_queue_size",
        &[],
        10,
        always,
        move |a| {
            depth = (depth + (a.noise * 3.0).round()).clamp(0.0, 200.0);
            depth
        },
    )
    .tally_late = true;
    // A gauge whose name ends like a counter's (`_count`), as OpenTelemetry's
    // `system.processes.count` comes out of Prometheus' naming.
    for (status, base) in [("running", 3.0), ("blocked", 0.0)] {
        b.series(
            host,
            "system_processes_count",
            &[("status", status)],
            15,
            always,
            move |a| base + ((a.noise + 1.0) * 1.5).floor(),
        );
    }
    b.series(
        host,
        "backup_job_running",
        &[],
        15,
        |m| m < BACKUP_ENDS_MINUTE,
        |a| {
            if (a.s / 600.0) as i64 % 2 == 0 {
                1.0
            } else {
                0.0
            }
        },
    );
}

fn host_counters(b: &mut Builder, host: &str, hf: f64) {
    // CPU time: 15 s a sample per CPU, shared among the states.
    for cpu in ["cpu0", "cpu1"] {
        for (i, state) in ["idle", "user", "system", "wait"].iter().enumerate() {
            let share = move |a: At| {
                let busy = 0.25 + 0.15 * wave(a.s, hf) + 0.05 * a.noise;
                match i {
                    0 => 1.0 - busy,
                    1 => busy * 0.7,
                    2 => busy * 0.25,
                    _ => busy * 0.05,
                }
            };
            let mut total = 1.0e5 * (1.0 + hf);
            b.series(
                host,
                "system_cpu_time_seconds_total",
                &[("cpu", cpu), ("state", state)],
                15,
                always,
                move |a| {
                    total += 15.0 * share(a);
                    (total * 100.0).round() / 100.0
                },
            );
        }
    }
    for (direction, rate) in [("receive", 1.0e6), ("transmit", 2.5e5)] {
        let mut total = 1.0e12 * (1.0 + hf);
        b.series(
            host,
            "system_network_io_bytes_total",
            &[("device", "eth0"), ("direction", direction)],
            10,
            always,
            move |a| {
                total += (10.0 * rate * (1.0 + 0.5 * wave(a.s, hf) + 0.1 * a.noise)).round();
                total
            },
        );
    }
    for (direction, rate) in [("read", 12.0), ("write", 40.0)] {
        let mut total = 5.0e6;
        b.series(
            host,
            "system_disk_operations_total",
            &[("device", "sda"), ("direction", direction)],
            10,
            always,
            move |a| {
                total += (10.0 * rate * (1.0 + 0.15 * a.noise)).round();
                total
            },
        );
    }
    // Minor faults come by the thousand, steadily; major ones one at a
    // time.
    for (kind, rate, noise) in [("major", 0.2, 0.8), ("minor", 800.0, 0.1)] {
        let mut total = 1.0e4;
        b.series(
            host,
            "system_paging_faults_total",
            &[("type", kind)],
            5,
            always,
            move |a| {
                total += (5.0 * rate * (1.0 + noise * a.noise)).max(0.0).round();
                total
            },
        );
    }
}

/// Bucket bounds of the request duration histogram.
const BOUNDS: [f64; 6] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The fraction of requests at or under `le` seconds on `route` at `s`:
/// the service slows down and speeds up through the hour.
fn under(route_slow: f64, le: f64, s: f64, hf: f64) -> f64 {
    let median = route_slow * (0.12 + 0.05 * wave(s, hf + 2.0));
    (le / (le + median)).powf(2.0)
}

/// When a host's service restarts, if it does: its counters start again
/// from zero then.
#[derive(Clone, Copy)]
struct Restart(Option<f64>);

impl Restart {
    fn done_by(self, s: f64) -> bool {
        self.0.is_some_and(|at| s >= at)
    }
}

/// A counter of the service: it adds `inc` a sample and starts again from
/// zero at the restart.
fn counting(restart: Restart, mut inc: impl FnMut(At) -> f64) -> impl FnMut(At) -> f64 {
    let mut total = 0.0;
    let mut was_reset = false;
    move |a| {
        if restart.done_by(a.s) && !was_reset {
            was_reset = true;
            total = 0.0;
        }
        total += inc(a);
        total
    }
}

/// An instrumented HTTP service: requests by method and code, a duration
/// histogram per route, an RPC summary with NaN quantiles, and its start
/// time. `restarts`: its counters reset at [`RESTART_MINUTE`].
fn service(b: &mut Builder, host: &str, hf: f64, restarts: bool) {
    let restart_s = (RESTART_MINUTE * 60) as f64;
    let restart = Restart(restarts.then_some(restart_s));
    for (method, code, rate) in [
        ("GET", "200", 40.0),
        ("GET", "500", 0.5),
        ("POST", "200", 8.0),
        ("POST", "500", 0.2),
    ] {
        b.series(
            host,
            "http_server_requests_total",
            &[
                ("http_request_method", method),
                ("http_response_status_code", code),
            ],
            5,
            always,
            counting(restart, move |a| {
                (5.0 * rate * (1.0 + 0.4 * wave(a.s, hf) + 0.1 * a.noise))
                    .max(0.0)
                    .round()
            }),
        );
    }
    if host == LATE_HOST {
        return;
    }
    latency(b, host, hf, restart);
    rpc_summary(b, host, hf);
    // Unix seconds, as exporters report it: a day before the feed, or
    // just after the restart.
    let t0_s = (b.t0 / 1000) as f64;
    b.series(
        host,
        "process_start_time_seconds",
        &[],
        15,
        always,
        move |a| {
            if restart.done_by(a.s) {
                t0_s + restart_s + 3.25
            } else {
                t0_s - 86_400.0
            }
        },
    );
}

/// The request duration histogram, per route.
fn latency(b: &mut Builder, host: &str, hf: f64, restart: Restart) {
    for (route, slow, rate) in [("/api", 1.0, 30.0), ("/health", 0.2, 2.0)] {
        // Every series of the histogram sees the same observations: the
        // count per interval and their spread depend on time only.
        let observed = move |s: f64| (10.0 * rate * (1.0 + 0.4 * wave(s, hf))).round();
        let mut les: Vec<String> = BOUNDS.iter().map(|b| b.to_string()).collect();
        les.push("+Inf".into());
        for le in les {
            let bound: f64 = le.parse().unwrap_or(f64::INFINITY);
            b.series(
                host,
                "http_server_request_duration_seconds_bucket",
                &[("http_route", route), ("le", &le)],
                10,
                always,
                counting(restart, move |a| {
                    let frac = if bound.is_infinite() {
                        1.0
                    } else {
                        under(slow, bound, a.s, hf)
                    };
                    (observed(a.s) * frac).round()
                }),
            );
        }
        b.series(
            host,
            "http_server_request_duration_seconds_count",
            &[("http_route", route)],
            10,
            always,
            counting(restart, move |a| observed(a.s)),
        );
        // The mean duration is about the median; milliseconds.
        b.series(
            host,
            "http_server_request_duration_seconds_sum",
            &[("http_route", route)],
            10,
            always,
            counting(restart, move |a| {
                (observed(a.s) * slow * (0.15 + 0.05 * wave(a.s, hf + 2.0)) * 1000.0).round()
                    / 1000.0
            }),
        );
    }
}

/// A summary with no observations for its first 25 minutes and for
/// minutes 100–103, and one NaN quantile sample every seven minutes:
/// its quantiles are NaN then, as client libraries export them.
fn rpc_summary(b: &mut Builder, host: &str, hf: f64) {
    let idle = |s: f64| {
        let m = (s / 60.0) as i64;
        m < 25 || (100..104).contains(&m)
    };
    for (q, scale) in [("0.5", 0.08), ("0.99", 0.6)] {
        b.series(
            host,
            "rpc_server_duration_seconds",
            &[("quantile", q)],
            10,
            always,
            move |a| {
                if idle(a.s) || a.k % 42 == 13 {
                    f64::NAN
                } else {
                    ((scale * (1.0 + 0.3 * wave(a.s, hf) + 0.05 * a.noise)) * 1e4).round() / 1e4
                }
            },
        );
    }
    for (part, inc) in [("sum", 2.0), ("count", 20.0)] {
        let mut total = 0.0;
        b.series(
            host,
            &format!("rpc_server_duration_seconds_{part}"),
            &[],
            10,
            always,
            move |a| {
                if !idle(a.s) {
                    total += inc;
                }
                total
            },
        );
    }
}

#[test]
fn the_feed_is_what_the_comparison_assumes() {
    let t0 = 1_700_000_040_000;
    let feed = feed(t0);
    let end = t0 + SPAN_MINUTES * 60_000;
    let mut resets = 0;
    let mut nans = 0;
    for s in &feed {
        let name = &s.labels["__name__"];
        assert!(!s.samples.is_empty(), "{name}");
        for w in s.samples.windows(2) {
            assert!(w[0].0 < w[1].0, "{name}: out of order");
            // `system_processes_count` is a gauge named like a counter, as
            // OpenTelemetry's `system.processes.count` comes out.
            let counter = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|x| name.ends_with(x))
                && name != "system_processes_count";
            if counter && w[1].1 < w[0].1 {
                resets += 1;
                assert_eq!(s.labels["instance"], "host-b", "{name}");
            }
        }
        for (t, v) in &s.samples {
            assert!((t0..end).contains(t) && t % 1000 != 0, "{name} at {t}");
            nans += usize::from(v.is_nan());
        }
    }
    // Every counter of host-b's service goes down once, at its restart.
    let restarting = feed
        .iter()
        .filter(|s| s.labels["instance"] == "host-b")
        .filter(|s| {
            let n = &s.labels["__name__"];
            n.starts_with("http_server_request")
        })
        .count();
    assert_eq!(resets, restarting);
    assert!(nans > 100, "{nans} NaN samples");
    assert!(feed.iter().any(|s| s.tally_late) && feed.iter().any(|s| s.lag_minutes > 0));
}
