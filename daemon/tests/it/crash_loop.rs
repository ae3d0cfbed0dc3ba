//! Acknowledged means kept, under crashes: the load generator pushes while
//! `tallyd` is SIGKILLed at random instants (during ingest, during flushes,
//! and during its start, write-ahead log replay included), restarted on
//! the same ports and pushed to again; at the end the load generator's
//! `--verify` checks every acknowledged sample's minute slot exactly
//! (requests that failed ambiguously are left out, as they may or may not
//! have been taken). On MongoDB, after a clean stop, every series' day
//! documents must also hold exactly what its hour documents hold (day
//! documents are sealed from the hour documents; a crash leaves the hours
//! from the writer's record on to the next start).
//! `scripts/crash-loop` runs hundreds of cycles.

use std::path::Path;
use std::time::Duration;

use rand::Rng;
use tally_testkit::bins::Bin;
use tally_testkit::process::{self, Run};
use tally_testkit::{Daemon, DaemonOpts};

use crate::tallyd;

/// The fleet: every kind, counters resetting often.
const FLEET: &[&str] = &[
    "--kinds",
    "gauge=2,delta=1,cumulative=2",
    "--reset-every",
    "30",
];

/// The load generator's flags for each agent protocol, with the kinds
/// that protocol carries.
const PROTOCOLS: &[&[&str]] = &[
    &[
        "--protocol",
        "remote-write",
        "--kinds",
        "gauge=2,cumulative=2",
        "--reset-every",
        "30",
    ],
    &["--protocol", "otlp-grpc"],
    &["--protocol", "otlp-http"],
    &["--protocol", "influx", "--kinds", "gauge=1"],
    // A connection's lines are confirmed only by its close: short
    // connections leave little ambiguous at each kill.
    &[
        "--protocol",
        "graphite",
        "--kinds",
        "gauge=1",
        "--graphite-batches",
        "5",
    ],
];

fn loadgen(
    d: &Daemon,
    sources: &str,
    seconds: &str,
    fleet: &[&str],
) -> std::thread::JoinHandle<Run> {
    let bin = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
    let start = format!("now-{}s", seconds.parse::<u64>().unwrap() + 60);
    let mut args: Vec<String> = [
        "--target",
        &d.grpc_url(),
        "--http",
        &d.http_url(),
        "--max",
        "--start",
        &start,
        "--seconds",
        seconds,
        "--sources",
        sources,
        "--metrics",
        "5",
        "--batch",
        "40",
        "--span",
        "40",
        "--concurrency",
        "2",
        "--retries",
        "100000",
        "--max-backoff",
        "100ms",
        "--timeout",
        "5s",
        "--settle",
        "500ms",
        "--verify",
        "--json",
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(fleet.iter().map(|s| s.to_string()));
    if let Some(graphite) = d.graphite_addr() {
        args.extend(["--graphite".to_owned(), graphite.to_string()]);
    }
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        process::run(Path::new(bin), &args, Duration::from_secs(600))
    })
}

/// Crashes `d` `cycles` times while `run` pushes, then checks the run.
/// Each request carries 40 samples of one series (`--span 40`), so a
/// request that fails ambiguously leaves only its own series out of the
/// check. Returns the daemon, still running.
fn crash_loop(
    opts: DaemonOpts,
    cycles: usize,
    sources: &str,
    seconds: &str,
    fleet: &[&str],
) -> Daemon {
    let mut d = Daemon::start(opts);
    let run = loadgen(&d, sources, seconds, fleet);
    let mut rng = rand::rng();
    for cycle in 0..cycles {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1200)));
        if run.is_finished() {
            break;
        }
        if cycle % 3 == 2 {
            // Once in a while the restart itself is cut short, replay
            // included.
            d.crash_during_start(Duration::from_millis(rng.random_range(20..400)));
        }
        d.crash_and_restart();
    }
    let run = run.join().unwrap();
    let logs = d.logs();
    // 3: some requests failed ambiguously (left out); verification passed.
    assert!(
        matches!(run.code(), Some(0 | 3)),
        "{}\n----- daemon -----\n{logs}",
        run.describe()
    );
    let r = run.json();
    assert_eq!(r["verify"]["passed"], true, "{}", run.describe());
    let checked = r["verify"]["series_checked"].as_u64().unwrap_or(0);
    assert!(checked > 0, "nothing left to verify: {}", run.describe());
    assert!(
        logs.contains("write-ahead log replayed"),
        "no crash left anything to replay:\n{logs}"
    );
    d
}

#[test]
fn sigkill_loses_no_acknowledged_sample_on_the_embedded_store() {
    let opts = tallyd()
        .flush_interval("100ms")
        .env("TALLYD_INGEST_LATENESS_WINDOW", "2h");
    let logs = crash_loop(opts, 6, "20", "3000", FLEET).logs();
    // Checkpoints are taken at flushes whose markers carry the counters'
    // baselines, so no replay folds the log before its checkpoint again.
    for line in logs
        .lines()
        .filter(|l| l.contains("write-ahead log replayed"))
    {
        assert!(line.contains(" refolded=0 "), "{line}\n{logs}");
    }
}

/// The same over every agent protocol, each in its own crash loop: what a
/// front door acknowledged (for Graphite, what it read before closing the
/// connection) survives a SIGKILL and the replay of the log after it.
#[test]
fn sigkill_loses_no_acknowledged_sample_over_any_protocol() {
    for fleet in PROTOCOLS {
        // Graphite's port must outlive each restart, as gRPC's and HTTP's
        // do.
        let graphite = format!("127.0.0.1:{}", tally_testkit::prometheus::free_port());
        let opts = tallyd()
            .flush_interval("100ms")
            .env("TALLYD_INGEST_LATENESS_WINDOW", "2h")
            .env("TALLYD_GRAPHITE_LISTEN", graphite);
        drop(crash_loop(opts, 4, "20", "3000", fleet));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_acknowledged_sample_on_the_mongodb_standin() {
    let Some(target) =
        tally_testkit::mongo::mongo_target_of(tally_testkit::mongo::TargetKind::Standin).await
    else {
        return;
    };
    let opts = tallyd()
        .mongodb(&target.uri, &target.database)
        .flush_interval("200ms")
        .env("TALLYD_INGEST_LATENESS_WINDOW", "2h");
    let mut d = tokio::task::spawn_blocking(move || crash_loop(opts, 3, "4", "6000", FLEET))
        .await
        .unwrap();
    // A clean stop seals every hour from the record on; then every series
    // day documents hold exactly what its hour documents hold, whatever the
    // crashes cut short.
    d.sigterm();
    assert!(d.wait_async(Duration::from_secs(60)).await.success());
    let (hours, days) = (
        totals(&target, "metrics_by_hour").await,
        totals(&target, "metrics_by_day").await,
    );
    assert!(!hours.is_empty());
    let counts = |t: &std::collections::BTreeMap<String, (i64, f64)>| -> Vec<(String, i64)> {
        t.iter().map(|(k, v)| (k.clone(), v.0)).collect()
    };
    assert_eq!(
        counts(&hours),
        counts(&days),
        "counts per series: hour documents, then day documents; the daemon's warnings:\n{}",
        warnings(&d.logs())
    );
    for (series, (_, sum)) in &hours {
        let day = days.get(series).map_or(f64::NAN, |d| d.1);
        // Added in another order: equal up to rounding.
        assert!(
            (sum - day).abs() <= 1e-9 * sum.abs().max(1.0),
            "{series}: {sum} in hours, {day} in days"
        );
    }
    drop(target);
}

/// Per series (`s`, `m` and labels), the count and sum of the running slots
/// of every document of a collection.
async fn totals(
    target: &tally_testkit::mongo::MongoTarget,
    coll: &str,
) -> std::collections::BTreeMap<String, (i64, f64)> {
    use futures::TryStreamExt;
    use mongodb::bson::{doc, Bson, Document};
    let mut out = std::collections::BTreeMap::new();
    let mut cursor = target
        .db()
        .await
        .collection::<Document>(coll)
        .find(doc! {})
        .await
        .unwrap();
    while let Some(d) = cursor.try_next().await.unwrap() {
        let key = format!(
            "{}|{}|{}",
            d.get_str("s").unwrap_or(""),
            d.get_str("m").unwrap_or(""),
            d.get("l").map(Bson::to_string).unwrap_or_default()
        );
        let total = d.get_document("total").unwrap();
        let entry = out.entry(key).or_insert((0, 0.0));
        entry.0 += total.get_i64("n").unwrap();
        entry.1 += total.get_f64("sum").unwrap();
    }
    out
}

/// The daemon's warnings and errors, for a failure's message: what sealing
/// said about itself.
fn warnings(logs: &str) -> String {
    logs.lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect::<Vec<_>>()
        .join("\n")
}
