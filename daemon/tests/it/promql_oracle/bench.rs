//! A benchmark, not a test (`#[ignore]`; `scripts/bench-promql` runs it
//! on a release build): the corpus' `query_range` latency on Tally and on
//! Prometheus side by side, on the same data, the synthetic feed.
//!
//! Each synthetic corpus query is asked as every range of the feed's
//! setting (the last 80 minutes at 60 s and 300 s steps), `ROUNDS` times,
//! alternating the sides, one query at a time. Latency is the client's:
//! request sent to body read, over loopback. Queries that either side
//! answers with an error are left out of both sides' figures and counted.

use std::time::Duration;

use tally_testkit::prometheus::programs;

use super::corpus::{self, Feed, Modes};
use super::eval::{ask, Eval};
use super::{query_client, Synthetic};

const ROUNDS: usize = 10;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench-promql"]
async fn bench_query_range_against_prometheus() {
    let (prometheus, _) = programs().unwrap_or_else(|why| panic!("{why}"));
    let dir = tempfile::tempdir().unwrap();
    let synthetic = Synthetic::start(&prometheus, dir.path()).await;
    if let Some(f) = synthetic.delivery.failures.first() {
        eprintln!(
            "note: {} remote-write requests refused (the first by {}: {}); timing what was taken",
            synthetic.delivery.failures.len(),
            f.side,
            f.what
        );
    }
    let setting = synthetic.setting();
    let queries: Vec<String> = corpus::load()
        .into_iter()
        .filter(|q| q.feed == Feed::Synthetic && q.modes != Modes::Instant)
        .map(|q| {
            setting
                .vars
                .iter()
                .fold(q.text, |t, (k, v)| t.replace(k, v))
        })
        .collect();
    let http = query_client();
    let (mut tally, mut prom) = (Vec::new(), Vec::new());
    let mut left_out = 0;
    for q in &queries {
        for eval in &setting.ranges {
            let (mut t_lat, mut p_lat) = (Vec::new(), Vec::new());
            let mut ok = true;
            for _ in 0..ROUNDS {
                let (a, d) = ask(&http, &setting.tally, q, *eval).await;
                ok &= a.is_ok();
                t_lat.push(d);
                let (a, d) = ask(&http, &setting.prometheus, q, *eval).await;
                ok &= a.is_ok();
                p_lat.push(d);
            }
            if ok {
                tally.extend(t_lat);
                prom.extend(p_lat);
            } else {
                left_out += 1;
                if let Eval::Range { step, .. } = eval {
                    eprintln!("left out (an error on one side): step {step} {q}");
                }
            }
        }
    }
    tally.sort();
    prom.sort();
    println!(
        "query_range latency, {} queries x {} ranges x {ROUNDS} rounds ({} evaluations left out: an error on either side)",
        queries.len(),
        setting.ranges.len(),
        left_out
    );
    println!("| side | requests | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    for (name, lat) in [("Tally", &tally), ("Prometheus 2.42", &prom)] {
        println!(
            "| {name} | {} | {} | {} |",
            lat.len(),
            ms(percentile(lat, 0.50)),
            ms(percentile(lat, 0.99))
        );
    }
}
