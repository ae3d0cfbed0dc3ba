//! A store that refuses statements loses no acknowledged sample, on the
//! stand-in (which refuses on command; against a real server these tests
//! print a note and return), in the three ways a server refuses:
//!
//! - **one statement shape** (every `$inc` update of one metric's
//!   documents): the rest of each flush lands, the refused documents
//!   become dead letters, the daemon stays ready; once the cause is gone,
//!   `tallyd dead-letters replay` applies them, and the load generator's
//!   `--verify-only` then finds every sample exactly once;
//! - **every update**: the daemon holds the flush, turns unready with the
//!   store's error and answers ingest `UNAVAILABLE`; the load generator
//!   retries, and once the server takes updates again everything lands,
//!   verified exactly, with no dead letter;
//! - **some updates, at random**: retried parts land, what stays refused
//!   is a dead letter, and after the replay every sample is there once;
//! - **a server shutting down**: commands refused with a non-transient
//!   code, then the server gone for a while: nothing is set aside, and
//!   every sample lands exactly once.

use std::time::Duration;

use serde_json::Value;
use tally_testkit::client::http_get;
use tally_testkit::metrics::{metric, metrics_text};
use tally_testkit::mongo::{mongo_target, Standin};
use tally_testkit::settle::wait_flushed;
use tally_testkit::Daemon;

use super::exactly_once::{loadgen, verify_only, FLEET};
use super::store::Store;

const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_statement_shape_becomes_dead_letters_and_replays_exactly() {
    let Some(store) = standin_store().await else {
        return;
    };
    let run_flags = ["--seconds", "120", "--source-prefix", "shape-"];
    let mut d = store.start("500ms").await;
    standin(&store).refuse_updates("match |m_0002|");
    let run = accepted_run(&d, &[&run_flags[..], &["--max"]].concat()).await;
    wait_flushed(&d, 1.0, store.flush_timeout()).await;
    let m = metrics_text(&d).await;
    let letters = metric(&m, "tally_dead_letters_total", &[]).unwrap_or(0.0);
    assert!(letters > 0.0, "no dead letter counted:\n{m}");
    assert_eq!(
        ready(&d).await.0,
        200,
        "a partial refusal keeps the daemon ready"
    );

    standin(&store).refuse_updates("off");
    let listed = replay_and_restart(&mut d, Some(true)).await;
    assert!(listed.contains("|m_0002"), "{listed}");
    assert!(!listed.contains("|m_0001"), "{listed}");
    let report = verify_only(&d, &run_flags, &run).await;
    println!(
        "{} points verified after the replay",
        report["verify"]["points_checked"]
    );
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_refusing_every_update_stops_acknowledgements_until_it_takes_them() {
    let Some(store) = standin_store().await else {
        return;
    };
    let run_flags = [
        "--rate",
        "1",
        "--duration",
        "10s",
        "--source-prefix",
        "all-",
    ];
    let mut d = store.start("500ms").await;
    standin(&store).refuse_updates("all");
    let watch = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let why = loop {
            let (status, body) = ready(&d).await;
            if status == 503 && body.contains("refuses every document") {
                break body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never unready for the refusals: {status} {body}\n{}",
                d.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        println!("unready while refused: {why}");
        // Long enough for the load generator to meet the refusals.
        tokio::time::sleep(Duration::from_secs(2)).await;
        standin(&store).refuse_updates("off");
    };
    let verified = [&run_flags[..], &["--verify"]].concat();
    let (run, ()) = tokio::join!(accepted_run(&d, &verified), watch);
    assert_eq!(run["verify"]["passed"], true, "{run}");
    let m = metrics_text(&d).await;
    let refused_requests = metric(
        &m,
        "tally_ingest_requests_total",
        &[("outcome", "store_refusing")],
    );
    assert!(
        refused_requests.unwrap_or(0.0) > 0.0,
        "ingest never refused:\n{m}"
    );
    assert_eq!(
        metric(&m, "tally_dead_letters_total", &[]).unwrap_or(0.0),
        0.0
    );
    assert_eq!(ready(&d).await.0, 200);
    let listed = replay_and_restart(&mut d, Some(false)).await;
    assert!(listed.contains("no dead letters"), "{listed}");
    verify_only(&d, &run_flags, &run).await;
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_refused_at_random_land_or_replay_exactly() {
    let Some(store) = standin_store().await else {
        return;
    };
    let run_flags = ["--seconds", "120", "--source-prefix", "rnd-"];
    let mut d = store.start("500ms").await;
    standin(&store).refuse_updates("random 40");
    let run = accepted_run(&d, &[&run_flags[..], &["--max"]].concat()).await;
    wait_flushed(&d, 1.0, store.flush_timeout()).await;
    standin(&store).refuse_updates("off");
    let listed = replay_and_restart(&mut d, None).await;
    println!("{listed}");
    verify_only(&d, &run_flags, &run).await;
    store.cleanup().await;
}

/// What a server shutting down can do (the suite once lost acknowledged
/// samples to it on FerretDB): refuse commands with a code that is not a
/// transient one, then go away, then come back. Refusals from a store that
/// then fails its health check are not trusted, so everything lands, none
/// of it as a dead letter, verified exactly, with the load generator
/// pushing in real time throughout. Repeated, so that refusals meet
/// flushes at different points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_from_a_server_shutting_down_lose_nothing() {
    let Some(store) = standin_store().await else {
        return;
    };
    let run_flags = [
        "--rate",
        "1",
        "--duration",
        "12s",
        "--source-prefix",
        "down-",
    ];
    let mut d = store.start("500ms").await;
    let shutdowns = async {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            // InternalError, as a server cancelling its commands answers.
            // Two: fewer than the attempts a refused document gets before
            // it is set aside, however they fall.
            standin(&store).fail_next(2, 1);
            tokio::time::sleep(Duration::from_millis(300)).await;
            standin(&store).set_down(true);
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            standin(&store).set_down(false);
        }
    };
    let verified = [&run_flags[..], &["--verify"]].concat();
    let (run, ()) = tokio::join!(accepted_run(&d, &verified), shutdowns);
    assert_eq!(run["verify"]["passed"], true, "{run}");
    wait_flushed(&d, 1.0, store.flush_timeout()).await;
    let m = metrics_text(&d).await;
    assert_eq!(
        metric(&m, "tally_dead_letters_total", &[]).unwrap_or(0.0),
        0.0,
        "{m}"
    );
    let listed = replay_and_restart(&mut d, Some(false)).await;
    assert!(listed.contains("no dead letters"), "{listed}");
    verify_only(&d, &run_flags, &run).await;
    store.cleanup().await;
}

/// The stand-in's store, or None (with a note) on another target.
async fn standin_store() -> Option<Store> {
    let store = Store::mongodb(mongo_target().await);
    store.standin_or_skip()?;
    Some(store)
}

fn standin(store: &Store) -> &Standin {
    store.standin_or_skip().expect("checked by standin_store")
}

async fn ready(d: &Daemon) -> (u16, String) {
    http_get(d, "/readyz").await
}

/// Stops the daemon, lists its dead letters, replays them (twice: the
/// second finds none) and starts it again. Returns what `list` printed.
/// `expect_letters`: whether there must be dead letters (None: either).
async fn replay_and_restart(d: &mut Daemon, expect_letters: Option<bool>) -> String {
    d.stop().await;
    let list = d
        .run_command(&["dead-letters", "list"], COMMAND_TIMEOUT)
        .await;
    assert_eq!(list.code(), Some(0), "{}", list.describe());
    if let Some(expect) = expect_letters {
        let has = !list.stdout.contains("no dead letters");
        assert_eq!(has, expect, "{}", list.describe());
    }
    let replay = d
        .run_command(&["dead-letters", "replay"], COMMAND_TIMEOUT)
        .await;
    assert_eq!(replay.code(), Some(0), "{}", replay.describe());
    if list.stdout.contains("no dead letters") {
        assert!(
            replay.stdout.contains("no dead letters to replay"),
            "{}",
            replay.describe()
        );
    } else {
        assert!(
            replay.stdout.contains(" 0 still refused"),
            "{}",
            replay.describe()
        );
    }
    let again = d
        .run_command(&["dead-letters", "replay"], COMMAND_TIMEOUT)
        .await;
    assert!(
        again.stdout.contains("no dead letters to replay"),
        "{}",
        again.describe()
    );
    println!("{}", replay.stdout);
    d.restart();
    list.stdout
}

/// A load generator run whose every sample was acknowledged.
async fn accepted_run(d: &Daemon, extra: &[&str]) -> Value {
    let (grpc, http) = (d.grpc_url(), d.http_url());
    let mut args = vec!["--target", &grpc, "--http", &http, "--json"];
    args.extend_from_slice(&FLEET);
    args.extend_from_slice(extra);
    let run = loadgen(&args).await;
    assert_eq!(run.code(), Some(0), "{}", run.describe());
    let r = run.json();
    assert_eq!(
        r["samples"]["accepted"],
        r["samples"]["planned"],
        "{}",
        run.describe()
    );
    r
}
