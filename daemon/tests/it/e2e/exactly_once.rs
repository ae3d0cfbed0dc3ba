//! Exactly once under the load generator, on every MongoDB target:
//! `tally-loadgen` drives `tallyd --store mongodb` and verifies every
//! minute slot of every series against what the daemon acknowledged,
//! through a restart of `tallyd` and an outage of the server in the middle
//! of a real-time run. On FerretDB the outage is real: its process is
//! stopped (SIGTERM by PID) and started again on the same port and data
//! (on PostgreSQL, the database server stays up).
//! On the stand-in it is the stand-in's `down`; on `MONGODB_URI` there is
//! none (the harness does not own that server).
//!
//! The load generator assumes the daemon does not restart during one of its
//! runs (a cumulative counter's baseline lives in the daemon's memory), so
//! `tallyd` restarts between runs, and each run is verified again afterwards
//! with `--verify-only`, from the store alone.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tally_testkit::bins::Bin;
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::mongo::{MongoTarget, TargetKind};
use tally_testkit::process::{self, Run};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use super::check::restart;
use super::store::Store;

/// The longest one load generator run may take, verification included.
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

/// Small fleets: FerretDB on SQLite takes a few hundred milliseconds per
/// update of a day document, and every series has one.
pub(super) const FLEET: [&str; 4] = ["--sources", "4", "--metrics", "3"];
const MAX_RUN: [&str; 4] = ["--seconds", "120", "--source-prefix", "max-"];
const REAL_TIME_RUN: [&str; 6] = ["--rate", "1", "--duration", "12s", "--source-prefix", "rt-"];
/// When, in the real-time run, the server goes away, and for how long.
const OUTAGE_AFTER: Duration = Duration::from_secs(4);
const OUTAGE: Duration = Duration::from_secs(3);

per_mongo_target!(loadgen_verifies_exactly_across_restarts_and_an_outage);

async fn loadgen_verifies_exactly_across_restarts_and_an_outage(target: MongoTarget) {
    let kind = target.kind;
    let store = Store::mongodb(target);
    let mut d = store.start("500ms").await;
    check_feature_gauges(&d, kind).await;

    // A --max run of the two minutes before now, verified, then again from
    // the store alone after a restart.
    let max = exact_run(&d, &[&MAX_RUN[..], &["--max"]].concat()).await;
    restart(&mut d).await;
    verify_only(&d, &MAX_RUN, &max).await;

    // A real-time run with the server away in its middle: the daemon keeps
    // taking samples, retries its flushes, and loses none.
    let outage = async {
        tokio::time::sleep(OUTAGE_AFTER).await;
        server_down(&store, true).await;
        tokio::time::sleep(OUTAGE).await;
        server_down(&store, false).await;
    };
    let (real_time, ()) = tokio::join!(exact_run(&d, &REAL_TIME_RUN), outage);
    wait_flushed(&d, 1.0, store.flush_timeout()).await;

    // Both runs, read back from the store alone.
    restart(&mut d).await;
    verify_only(&d, &MAX_RUN, &max).await;
    verify_only(&d, &REAL_TIME_RUN, &real_time).await;
    store.cleanup().await;
}

/// `--verify-only` while the server is away for a while: the daemon
/// answers its reads from memory, flagged `partial`; the load generator
/// reads them again until the store answers, and passes, instead of
/// counting the points as missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_only_reads_partial_answers_again() {
    let target = tally_testkit::mongo::mongo_target().await;
    if target.standin().is_none() {
        println!("note: the outage needs the stand-in; skipped against MONGODB_URI");
        return;
    }
    let store = Store::mongodb(target);
    let d = store.start("500ms").await;
    let max = exact_run(&d, &[&MAX_RUN[..], &["--max"]].concat()).await;
    wait_flushed(&d, 1.0, store.flush_timeout()).await;

    server_down(&store, true).await;
    let back = async {
        tokio::time::sleep(Duration::from_secs(8)).await;
        server_down(&store, false).await;
    };
    let (report, ()) = tokio::join!(verify_only(&d, &MAX_RUN, &max), back);
    let rereads = report["verify"]["partial_rereads"].as_u64().unwrap_or(0);
    assert!(rereads > 0, "no read was answered partial: {report}");
    assert_eq!(report["verify"]["missing_points"], 0, "{report}");
    println!("{rereads} partial answers read again");
    store.cleanup().await;
}

/// Takes the server away (`down`) or brings it back.
async fn server_down(store: &Store, down: bool) {
    let Some(target) = store.target() else {
        return;
    };
    if let Some(ferretdb) = target.ferretdb() {
        let pid = ferretdb.pid();
        tokio::task::block_in_place(|| {
            if down {
                ferretdb.stop()
            } else {
                ferretdb.start_again()
            }
        });
        println!(
            "FerretDB {} (pid {pid:?} -> {:?})",
            if down { "stopped" } else { "started again" },
            ferretdb.pid()
        );
    } else if let Some(standin) = target.standin() {
        standin.set_down(down);
    }
}

/// The daemon says which features the server lacks: FerretDB 1.24 lacks
/// every one Tally probes, on SQLite and on PostgreSQL, the stand-in none.
async fn check_feature_gauges(d: &Daemon, kind: TargetKind) {
    let missing = match kind {
        // The gaps are FerretDB's own, above either backend.
        TargetKind::FerretDb | TargetKind::FerretDbPg => 1.0,
        TargetKind::Standin => 0.0,
        TargetKind::Uri => return,
    };
    let m = metrics_text(d).await;
    for feature in ["ttl_index", "coll_mod", "infinity", "unordered_updates"] {
        assert_eq!(
            metric(&m, "tally_mongodb_feature_missing", &[("feature", feature)]),
            Some(missing),
            "{feature} on {}:\n{m}",
            kind.name()
        );
    }
}

/// Runs the load generator with `--verify --json` and the fleet flags plus
/// `extra`; checks that every sample was accepted and verified exactly.
async fn exact_run(d: &Daemon, extra: &[&str]) -> Value {
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let mut args = vec!["--target", &grpc, "--http", &http, "--verify", "--json"];
    args.extend_from_slice(&FLEET);
    args.extend_from_slice(extra);
    let run = loadgen(&args).await;
    let r = exact(&run);
    assert_eq!(
        r["samples"]["accepted"],
        r["samples"]["planned"],
        "{}",
        run.describe()
    );
    println!(
        "{}: {} samples in {:.1} s",
        r["range"]["pace"], r["samples"]["accepted"], r["elapsed_s"]
    );
    r
}

/// `--verify-only` of an earlier run (`report`), made with `flags`.
pub(super) async fn verify_only(d: &Daemon, flags: &[&str], report: &Value) -> Value {
    let http = d.http_url();
    let start = report["range"]["start"]
        .as_str()
        .expect("the run's start")
        .to_string();
    let mut args = vec![
        "--verify-only",
        "--http",
        &http,
        "--json",
        "--start",
        &start,
    ];
    args.extend_from_slice(&FLEET);
    args.extend_from_slice(flags);
    exact(&loadgen(&args).await)
}

/// The report of a run that ended well and verified every series.
pub(super) fn exact(run: &Run) -> Value {
    assert_eq!(run.code(), Some(0), "{}", run.describe());
    let r = run.json();
    assert_eq!(r["outcome"], "ok", "{}", run.describe());
    assert_eq!(r["verify"]["passed"], true, "{}", run.describe());
    assert_eq!(
        r["verify"]["series_checked"],
        r["fleet"]["series"],
        "{}",
        run.describe()
    );
    r
}

pub(super) async fn loadgen(args: &[&str]) -> Run {
    let bin = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        process::run(Path::new(bin), &args, RUN_TIMEOUT)
    })
    .await
    .expect("the load generator's task panicked")
}
