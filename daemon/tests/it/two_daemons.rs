//! Several daemons on one MongoDB, as `docs/mongodb.md` deploys them: each
//! daemon has its own data directory and so its own writer id, each
//! agent's source sticks to one daemon, a rollup group (`@all`) spans both,
//! and a read through either daemon sees everything flushed by both. The
//! load generator's fleet is split between the two by source prefix, and
//! each half is verified through the *other* daemon once both have flushed.
//!
//! On the stand-in, FerretDB on PostgreSQL (two writers on one real
//! server) and `MONGODB_URI`. Not on FerretDB on SQLite: it passes there
//! too, but takes about a minute and a half of the suite's time, and both
//! FerretDB targets run the same command handlers; PostgreSQL is the
//! backend several daemons would share.

use std::path::Path;
use std::time::Duration;

use tally_proto::v1 as pb;
use tally_testkit::bins::Bin;
use tally_testkit::client::{now_ms, push_of, series, within};
use tally_testkit::mongo::MongoTarget;
use tally_testkit::process::{self, Run};
use tally_testkit::settle::{eventually, wait_flushed};
use tally_testkit::Daemon;

use crate::tallyd;

/// A daemon's gRPC and HTTP base URLs.
type Urls = (String, String);

fn urls(d: &Daemon) -> Urls {
    (d.grpc_url(), d.http_url())
}

/// `tally-loadgen` on the fleet of `prefix` from `start` (Unix seconds,
/// the same for the push and its check): its push to `daemon`, or with
/// `verify` its `--verify-only` read-back through `daemon`.
fn fleet(daemon: &Urls, prefix: &str, start: &str, verify: bool) -> Run {
    let bin = Bin::Loadgen.beside(env!("CARGO_BIN_EXE_tallyd"));
    let mode: &[&str] = if verify {
        &["--verify-only", "--settle", "500ms"]
    } else {
        &["--max"]
    };
    let args: Vec<&str> = [
        &["--target", &daemon.0, "--http", &daemon.1][..],
        mode,
        &[
            "--sources",
            "6",
            "--metrics",
            "4",
            "--kinds",
            "gauge=2,delta=1,cumulative=1",
            "--start",
            start,
            "--seconds",
            "120",
            "--source-prefix",
            prefix,
            "--seed",
            "7",
            "--json",
            "-q",
        ][..],
    ]
    .concat();
    process::run(Path::new(bin), &args, Duration::from_secs(300))
}

/// The sum of the points of `spanning` over the last three hours read from
/// `path` through `d` with `params` (a series or a group), and the
/// answer's status and body. Within `timeout`: on FerretDB such a read
/// scans the day collection (its `_id` ranges reach neither backend), which
/// can take longer than a test call's usual 15 s while the suite runs
/// beside it.
async fn spanning_sum(
    d: &Daemon,
    path: &str,
    params: &[(&str, &str)],
    timeout: Duration,
) -> (f64, u16, serde_json::Value) {
    let from = (now_ms() / 1000 - 3 * 3600).to_string();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap();
    let url = format!("{}{path}", d.http_url());
    let query = [("metric", "spanning"), ("from", &from), ("step", "1h")];
    let resp = client
        .get(&url)
        .query(&query)
        .query(params)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url} {params:?}: {e}"));
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().await.unwrap();
    let points = match path {
        "/api/v1/range" => &body["series"][0]["points"],
        _ => &body["points"],
    };
    let sum = points
        .as_array()
        .map_or(0.0, |p| p.iter().filter_map(|p| p["sum"].as_f64()).sum());
    (sum, status, body)
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

mod two_daemons_share_one_mongodb_and_read_each_others_data {
    use tally_testkit::mongo::{mongo_target_of, TargetKind};

    async fn on(kind: TargetKind) {
        if let Some(target) = mongo_target_of(kind).await {
            super::two_daemons_share_one_mongodb_and_read_each_others_data(target).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mongodb_standin() {
        on(TargetKind::Standin).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mongodb_ferretdb_pg() {
        on(TargetKind::FerretDbPg).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mongodb_uri() {
        on(TargetKind::Uri).await;
    }
}

async fn two_daemons_share_one_mongodb_and_read_each_others_data(target: MongoTarget) {
    let opts = || {
        let opts = tallyd()
            .mongodb(&target.uri, &target.database)
            .flush_interval("200ms")
            .env("TALLYD_INGEST_LATENESS_WINDOW", "2h");
        target
            .daemon_env()
            .iter()
            .fold(opts, |opts, &(name, value)| opts.env(name, value))
    };
    let settle = target.flush_timeout();
    let a = Daemon::start_async(opts()).await;
    let b = Daemon::start_async(opts()).await;
    let writer = |d: &Daemon| std::fs::read_to_string(d.data_dir().join("writer-id")).unwrap();
    assert_ne!(writer(&a), writer(&b), "each daemon has its own writer id");

    // A rollup group spanning both: one member on each daemon, same minute.
    let t = now_ms() - 120_000;
    let spanning = |source: &str, v: f64| {
        push_of(
            source,
            vec![series("spanning", pb::SampleKind::Gauge, &[(t, v)])],
        )
    };
    within("Push", a.ingest_client().await.push(spanning("ra-1", 1.0)))
        .await
        .unwrap();
    within("Push", b.ingest_client().await.push(spanning("rb-1", 2.0)))
        .await
        .unwrap();

    // Each half of the fleet pushes to its own daemon...
    let start = (now_ms() / 1000 - 200).to_string();
    let (ua, ub, s) = (urls(&a), urls(&b), start.clone());
    let pushes =
        blocking(move || (fleet(&ua, "fa-", &s, false), fleet(&ub, "fb-", &s, false))).await;
    for pushed in [pushes.0, pushes.1] {
        assert_eq!(pushed.code(), Some(0), "{}", pushed.describe());
    }
    // ... and, once both have flushed, is verified through the other one.
    wait_flushed(&a, 1.0, settle).await;
    wait_flushed(&b, 1.0, settle).await;
    let (ua, ub, s) = (urls(&a), urls(&b), start);
    let verified =
        blocking(move || (fleet(&ub, "fa-", &s, true), fleet(&ua, "fb-", &s, true))).await;
    for verified in [verified.0, verified.1] {
        assert_eq!(verified.code(), Some(0), "{}", verified.describe());
        let r = verified.json();
        assert_eq!(r["verify"]["passed"], true, "{}", verified.describe());
        assert_eq!(r["verify"]["series_checked"], 24, "{}", verified.describe());
    }

    // Each daemon's share of `@all` was flushed by that daemon; either one
    // reads the sum of both.
    for d in [&a, &b] {
        eventually("@all's spanning = 3", settle, || async {
            let group = [("group", "all")];
            let (sum, status, body) = spanning_sum(d, "/api/v1/aggregate", &group, settle).await;
            match (status, body["rollup"].as_str()) {
                (200, Some("all")) if sum == 3.0 => Ok(()),
                _ => Err(format!("{status} {body}")),
            }
        })
        .await;
        for (source, want) in [("ra-1", 1.0), ("rb-1", 2.0)] {
            let series = [("source", source)];
            let (sum, status, body) = spanning_sum(d, "/api/v1/range", &series, settle).await;
            assert_eq!((status, sum), (200, want), "{body}");
        }
    }
    target.cleanup().await;
}
