//! End-to-end: the real `tally-loadgen` against a real `tallyd`, started
//! by `tally_testkit` (which also builds `tallyd`, another package's
//! binary, when it is missing or stale: see `tally_testkit::bins`).
//!
//! Small fleets keep these quick; what they prove is that the books close:
//! everything sent is accepted, and `--verify` finds every minute slot
//! exactly as acknowledged — and that it does not when the store holds
//! something else.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tally_proto::v1 as pb;
use tally_testkit::bins::Bin;
use tally_testkit::client::http_client;
use tally_testkit::process::{self, Run};
use tally_testkit::{Daemon, DaemonOpts};

const RUN_TIMEOUT: Duration = Duration::from_secs(180);
const LOADGEN: &str = env!("CARGO_BIN_EXE_tally-loadgen");

/// Starts `tallyd` with extra `TALLYD_*` settings on a new data directory.
fn start_tallyd(env: &[(&str, &str)]) -> Daemon {
    let opts = DaemonOpts::new(Bin::Tallyd.beside(LOADGEN));
    Daemon::start(env.iter().fold(opts, |opts, (k, v)| opts.env(*k, *v)))
}

/// Runs `tally-loadgen` with `args`, killing it after `timeout`.
fn loadgen(args: &[&str], timeout: Duration) -> Run {
    process::run(Path::new(LOADGEN), args, timeout)
}

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing in {v:#}"))
}

/// Runs a `--max --verify --json` load and checks the books close exactly.
fn assert_exact_run(d: &Daemon, extra: &[&str], planned: u64) -> Value {
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let mut args = vec!["--target", &grpc, "--http", &http, "--verify", "--json"];
    args.extend_from_slice(extra);
    let run = loadgen(&args, RUN_TIMEOUT);
    assert_eq!(run.code(), Some(0), "{}", run.describe());
    let r = run.json();
    assert_eq!(r["outcome"], "ok", "{}", run.describe());
    assert_eq!(u(&r, "/samples/planned"), planned);
    assert_eq!(u(&r, "/samples/sent"), planned);
    assert_eq!(u(&r, "/samples/accepted"), planned, "{}", run.describe());
    assert_eq!(u(&r, "/samples/rejected"), 0);
    assert_eq!(u(&r, "/samples/ambiguous"), 0);
    assert_eq!(r["verify"]["passed"], true, "{}", run.describe());
    assert_eq!(u(&r, "/verify/series_checked"), u(&r, "/fleet/series"));
    assert_eq!(u(&r, "/verify/series_skipped"), 0);
    assert!(u(&r, "/verify/slots_checked") >= u(&r, "/fleet/series"));
    assert!(u(&r, "/latency/count") > 0);
    assert!(r["samples_per_s"].as_f64().is_some_and(|x| x > 0.0));
    assert!(r["latency"]["p99_ms"].as_f64().is_some_and(|x| x > 0.0));
    r
}

/// `--verify-only` of the run of `fleet` (flags that include its `--start`).
fn verify_only(d: &Daemon, fleet: &[&str]) -> Run {
    let http = d.http_url();
    let mut args = vec!["--verify-only", "--http", &http];
    args.extend_from_slice(fleet);
    loadgen(&args, RUN_TIMEOUT)
}

/// An exact `--verify` run of `fleet` with `send` flags, then a restart
/// after which `--verify-only` must pass from what the store kept; returns
/// the run's report.
fn exact_run_then_restart(d: &mut Daemon, send: &[&str], fleet: &[&str], planned: u64) -> Value {
    let mut args = send.to_vec();
    args.extend_from_slice(fleet);
    let r = assert_exact_run(d, &args, planned);
    d.restart();
    let clean = verify_only(d, fleet);
    assert_eq!(clean.code(), Some(0), "{}", clean.describe());
    assert!(
        clean.stdout.contains("verify PASSED"),
        "{}",
        clean.describe()
    );
    r
}

#[test]
fn unary_max_run_verifies_exactly() {
    let d = start_tallyd(&[]);
    let r = assert_exact_run(
        &d,
        &[
            "--max",
            "--sources",
            "20",
            "--metrics",
            "5",
            "--seconds",
            "120",
            "--kinds",
            "gauge=2,delta=1,cumulative=2",
            // Frequent resets, so the run crosses many of them.
            "--reset-every",
            "20",
            "--batch",
            "40",
        ],
        20 * 5 * 120,
    );
    assert_eq!(r["mode"], "unary");
    assert_eq!(u(&r, "/requests/failed"), 0);
    assert!(r["errors_by_status"]
        .as_object()
        .is_some_and(|m| m.is_empty()));
}

#[test]
fn stream_max_run_verifies_exactly() {
    let d = start_tallyd(&[]);
    let r = assert_exact_run(
        &d,
        &[
            "--max",
            "--mode",
            "stream",
            "--sources",
            "20",
            "--metrics",
            "5",
            "--seconds",
            "120",
            "--batch",
            "37",
            "--span",
            "3",
            "--stream-messages",
            "5",
            "--concurrency",
            "3",
        ],
        20 * 5 * 120,
    );
    assert_eq!(r["mode"], "stream");
    assert_eq!(u(&r, "/concurrency"), 3);
}

#[test]
fn real_time_run_verifies_exactly() {
    let d = start_tallyd(&[]);
    let r = assert_exact_run(
        &d,
        &[
            "--sources",
            "10",
            "--metrics",
            "3",
            "--rate",
            "5",
            "--duration",
            "2s",
        ],
        10 * 3 * 10,
    );
    assert_eq!(r["range"]["pace"], "real_time");
    assert!(r["real_time"]["max_lag_ms"].as_f64().is_some());
    // Two seconds of real time, give or take the start alignment.
    let elapsed = r["elapsed_s"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&elapsed), "{elapsed}");
}

/// A daemon that can hold very few unflushed slots pushes back all the
/// time; the loadgen must retry those batches and still lose nothing.
#[test]
fn pushback_is_retried_and_nothing_is_lost() {
    let d = start_tallyd(&[
        ("TALLYD_INGEST_MAX_PENDING_SLOTS", "40"),
        ("TALLYD_FLUSH_INTERVAL", "50ms"),
    ]);
    for (mode, prefix) in [("unary", "u-"), ("stream", "s-")] {
        let r = assert_exact_run(
            &d,
            &[
                "--max",
                "--mode",
                mode,
                "--source-prefix",
                prefix,
                "--sources",
                "6",
                "--metrics",
                "5",
                "--seconds",
                "120",
                "--concurrency",
                "2",
                "--stream-messages",
                "10",
                "--retries",
                "200",
                "--max-backoff",
                "50ms",
            ],
            6 * 5 * 120,
        );
        assert!(
            u(&r, "/errors_by_status/RESOURCE_EXHAUSTED") > 0,
            "{mode}: no pushback seen: {r:#}"
        );
        assert!(u(&r, "/requests/retries") > 0, "{mode}: {r:#}");
    }
}

/// `--verify` must fail when the store holds something other than what was
/// acknowledged. The run is checked again with `--verify-only` (which
/// re-generates it from the seed and range) after a restart, so the data
/// comes from the store; then one extra sample is pushed to one series and
/// verification must name that series and minute.
#[test]
fn corrupted_store_fails_verification() {
    let mut d = start_tallyd(&[]);
    let start_s = chrono::Utc::now().timestamp() - 150;
    let start = start_s.to_string();
    let fleet = [
        "--sources",
        "20",
        "--metrics",
        "5",
        "--seconds",
        "120",
        "--start",
        start.as_str(),
    ];
    exact_run_then_restart(&mut d, &["--max"], &fleet, 20 * 5 * 120);
    let http = d.http_url();

    // One more gauge sample, 30.5 s into the run, in the store's series.
    let at_ms = start_s * 1000 + 30_500;
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let metric = rt.block_on(async {
        let client = http_client();
        for j in 1..=5 {
            let metric = format!("m_{j:04}");
            let body: Value = client
                .get(format!("{http}/api/v1/range"))
                .query(&[
                    ("source", "src-000002"),
                    ("metric", metric.as_str()),
                    ("from", &start_s.to_string()),
                ])
                .send()
                .await
                .expect("reading a series")
                .json()
                .await
                .expect("a JSON range");
            if body["series"][0]["kind"] == "gauge" {
                let mut ingest = d.ingest_client().await;
                let resp = ingest
                    .push(pb::PushRequest {
                        sources: vec![pb::SourceBatch {
                            source: "src-000002".into(),
                            series: vec![pb::SeriesSamples {
                                labels: Vec::new(),
                                metric: metric.clone(),
                                kind: pb::SampleKind::Gauge as i32,
                                timestamps_ms: vec![at_ms],
                                values: vec![12345.5],
                                start_times_ms: Vec::new(),
                            }],
                            groups: Vec::new(),
                        }],
                    })
                    .await
                    .expect("pushing the extra sample")
                    .into_inner();
                assert_eq!(resp.accepted, 1, "{resp:?}");
                return metric;
            }
        }
        panic!("src-000002 has no gauge among m_0001..m_0005");
    });

    let bad = verify_only(&d, &fleet);
    assert_eq!(bad.code(), Some(2), "{}", bad.describe());
    let minute = chrono::DateTime::from_timestamp(at_ms.div_euclid(60_000) * 60, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let named = format!("src-000002/{metric} minute {minute}: n: expected");
    assert!(bad.stdout.contains("verify FAILED"), "{}", bad.describe());
    assert!(
        bad.stdout.contains(&named),
        "want {named:?}\n{}",
        bad.describe()
    );
    // Only that slot differs: its n, its sum, its max (12345.5 tops a gauge
    // that stays below 1,500).
    assert!(bad.stdout.contains("3 mismatches"), "{}", bad.describe());
}

#[test]
fn refused_connection_fails_fast_and_clearly() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let target = format!("http://127.0.0.1:{port}");
    let run = loadgen(
        &["--target", &target, "--max", "--seconds", "10"],
        Duration::from_secs(30),
    );
    assert_eq!(run.code(), Some(1), "{}", run.describe());
    assert!(run.elapsed < Duration::from_secs(10), "{}", run.describe());
    assert!(
        run.stderr.contains("cannot connect to tallyd") && run.stderr.contains("refused"),
        "{}",
        run.describe()
    );
}

#[test]
fn bad_flags_are_refused_before_any_load() {
    for (args, needle) in [
        (&["--verify-only", "--seconds", "5"][..], "--start"),
        (&["--max", "--duration", "5s"][..], "--duration"),
        (&["--kinds", "gauge=1,histogram=2"][..], "histogram"),
        (&["--target", "https://127.0.0.1:1"][..], "TLS"),
        (&["--protocol", "remote-write"][..], "delta counters"),
        (&["--protocol", "graphite"][..], "--kinds gauge=1"),
        (
            &["--protocol", "otlp-http", "--mode", "stream"][..],
            "PushStream",
        ),
    ] {
        let run = loadgen(args, Duration::from_secs(30));
        assert_ne!(run.code(), Some(0), "{args:?}: {}", run.describe());
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.describe());
    }
}

/// `--labels`: every metric of every source is sent with each label set,
/// and the daemon takes every sample and tracks each set as its own series.
#[test]
fn labelled_fleet_is_stored_as_one_series_per_label_set() {
    let d = start_tallyd(&[]);
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let run = loadgen(
        &[
            "--target",
            &grpc,
            "--http",
            &http,
            "--json",
            "--max",
            "--mode",
            "stream",
            "--sources",
            "6",
            "--metrics",
            "4",
            "--labels",
            "mode=3,cpu=2",
            "--seconds",
            "60",
            "--batch",
            "50",
        ],
        RUN_TIMEOUT,
    );
    assert_eq!(run.code(), Some(0), "{}", run.describe());
    let r = run.json();
    let series = 6 * 4 * 6;
    assert_eq!(u(&r, "/fleet/series"), series);
    assert_eq!(u(&r, "/fleet/label_sets"), 6);
    assert_eq!(r["fleet"]["labels"], "mode=3,cpu=2");
    assert_eq!(
        u(&r, "/samples/accepted"),
        series * 60,
        "{}",
        run.describe()
    );
    assert_eq!(u(&r, "/samples/rejected"), 0, "{}", run.describe());
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let text = rt.block_on(tally_testkit::metrics::metrics_text(&d));
    let tracked = tally_testkit::metrics::metric(&text, "tally_series", &[]);
    assert_eq!(tracked, Some(series as f64), "{text}");
}

/// One gauge sample of 12345.5 at `at_ms` for each `(source, metric, cpu,
/// mode)`; the daemon must accept them all.
fn push_gauges(d: &Daemon, at_ms: i64, series: &[(&str, &str, &str, &str)]) {
    let batch = |&(source, metric, cpu, mode): &(&str, &str, &str, &str)| pb::SourceBatch {
        source: source.into(),
        series: vec![pb::SeriesSamples {
            labels: [("cpu", cpu), ("mode", mode)]
                .map(|(name, value)| pb::Label {
                    name: name.into(),
                    value: value.into(),
                })
                .to_vec(),
            metric: metric.into(),
            kind: pb::SampleKind::Gauge as i32,
            timestamps_ms: vec![at_ms],
            values: vec![12345.5],
            start_times_ms: Vec::new(),
        }],
        groups: Vec::new(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("a tokio runtime: {e}"));
    rt.block_on(async {
        let resp = d
            .ingest_client()
            .await
            .push(pb::PushRequest {
                sources: series.iter().map(batch).collect(),
            })
            .await
            .unwrap_or_else(|e| panic!("pushing the extra samples: {e}"))
            .into_inner();
        assert_eq!(resp.accepted, series.len() as u64, "{resp:?}");
    });
}

/// A labelled fleet read back exactly: each series is found among its
/// source and metric's label sets, after a restart too; then one labelled
/// series gets an extra sample and one label set the run never sent
/// appears, and `--verify-only` must name both. Needs the native HTTP API
/// to select and report labels (`/api/v1/range` with `labels`).
#[test]
fn labelled_run_verifies_exactly_and_names_labelled_mismatches() {
    let mut d = start_tallyd(&[]);
    let start_s = chrono::Utc::now().timestamp() - 150;
    let start = start_s.to_string();
    let fleet = [
        "--sources",
        "10",
        "--metrics",
        "3",
        "--labels",
        "cpu=2,mode=3",
        "--kinds",
        "gauge=1",
        "--seconds",
        "120",
        "--start",
        start.as_str(),
    ];
    let r = exact_run_then_restart(
        &mut d,
        &["--max", "--batch", "200"],
        &fleet,
        10 * 3 * 6 * 120,
    );
    assert_eq!(u(&r, "/verify/series_checked"), 180);
    // One read per source and metric, not per series.
    assert_eq!(u(&r, "/verify/reads"), 30);

    let at_ms = start_s * 1000 + 30_500;
    push_gauges(
        &d,
        at_ms,
        &[
            ("src-000002", "m_0002", "1", "2"),
            ("src-000003", "m_0001", "9", "0"),
        ],
    );
    let bad = verify_only(&d, &fleet);
    assert_eq!(bad.code(), Some(2), "{}", bad.describe());
    let minute = chrono::DateTime::from_timestamp(at_ms.div_euclid(60_000) * 60, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for needle in [
        format!(r#"src-000002/m_0002{{cpu="1",mode="2"}} minute {minute}: n: expected"#),
        r#"src-000003/m_0001{cpu="9",mode="0"}: extra series: 1 points"#.to_string(),
        "4 mismatches (0 missing, 1 extra points, 1 extra series)".to_string(),
    ] {
        assert!(
            bad.stdout.contains(&needle),
            "want {needle:?}\n{}",
            bad.describe()
        );
    }
}

/// More label sets per metric than one read may return: every series is
/// read on its own, selected by its full label set.
#[test]
fn label_sets_beyond_one_read_are_verified_series_by_series() {
    let d = start_tallyd(&[]);
    let r = assert_exact_run(
        &d,
        &[
            "--max",
            "--sources",
            "1",
            "--metrics",
            "1",
            "--labels",
            "id=1001",
            "--seconds",
            "3",
        ],
        1001 * 3,
    );
    assert_eq!(u(&r, "/verify/reads"), 1001);
}

/// The kinds each protocol can carry: remote-write has no delta counters,
/// line protocol and Graphite only gauges.
fn kinds_of(protocol: &str) -> &'static str {
    match protocol {
        "remote-write" => "gauge=2,cumulative=2",
        "influx" | "graphite" => "gauge=1",
        _ => "gauge=2,delta=1,cumulative=2",
    }
}

/// The daemon's Graphite listener, as `--graphite` takes it.
fn graphite_addr(d: &Daemon) -> String {
    d.graphite_addr()
        .unwrap_or_else(|| panic!("tallyd started without TALLYD_GRAPHITE_LISTEN"))
        .to_string()
}

/// The same labelled fleet over OTLP/gRPC, OTLP/HTTP, remote-write, line
/// protocol and Graphite: every sample accepted and every minute slot
/// verified exactly.
#[test]
fn every_protocol_verifies_exactly() {
    let d = start_tallyd(&[("TALLYD_GRAPHITE_LISTEN", "127.0.0.1:0")]);
    let graphite = graphite_addr(&d);
    for protocol in [
        "otlp-grpc",
        "otlp-http",
        "remote-write",
        "influx",
        "graphite",
    ] {
        let prefix = format!("{protocol}-");
        let r = assert_exact_run(
            &d,
            &[
                "--graphite",
                &graphite,
                "--max",
                "--protocol",
                protocol,
                "--source-prefix",
                &prefix,
                "--sources",
                "10",
                "--metrics",
                "4",
                "--labels",
                "cpu=2",
                "--seconds",
                "120",
                "--kinds",
                kinds_of(protocol),
                "--reset-every",
                "20",
                "--batch",
                "80",
            ],
            10 * 4 * 2 * 120,
        );
        assert_eq!(r["protocol"], protocol, "{r:#}");
        assert_eq!(u(&r, "/requests/failed"), 0, "{protocol}: {r:#}");
    }
}

/// Backpressure over each protocol (RESOURCE_EXHAUSTED with retry info,
/// HTTP 429 or 503 with Retry-After) is retried, and nothing is lost.
#[test]
fn pushback_over_every_protocol_is_retried() {
    let d = start_tallyd(&[
        ("TALLYD_INGEST_MAX_PENDING_SLOTS", "40"),
        ("TALLYD_FLUSH_INTERVAL", "50ms"),
        ("TALLYD_GRAPHITE_LISTEN", "127.0.0.1:0"),
    ]);
    let graphite = graphite_addr(&d);
    for (protocol, code) in [
        ("otlp-grpc", Some("RESOURCE_EXHAUSTED")),
        ("otlp-http", Some("RESOURCE_EXHAUSTED")),
        ("remote-write", Some("UNAVAILABLE")),
        ("influx", Some("RESOURCE_EXHAUSTED")),
        // Graphite has no answer: the daemon stops reading the connection
        // while it pushes back, and the sender waits in TCP.
        ("graphite", None),
    ] {
        let prefix = format!("{protocol}-");
        let r = assert_exact_run(
            &d,
            &[
                "--graphite",
                &graphite,
                "--max",
                "--protocol",
                protocol,
                "--source-prefix",
                &prefix,
                "--sources",
                "6",
                "--metrics",
                "5",
                "--seconds",
                "120",
                "--kinds",
                kinds_of(protocol),
                "--concurrency",
                "2",
                "--retries",
                "200",
                "--max-backoff",
                "50ms",
            ],
            6 * 5 * 120,
        );
        let Some(code) = code else { continue };
        assert!(
            u(&r, &format!("/errors_by_status/{code}")) > 0,
            "{protocol}: no pushback seen: {r:#}"
        );
        assert!(u(&r, "/requests/retries") > 0, "{protocol}: {r:#}");
    }
}
