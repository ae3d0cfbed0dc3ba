//! Random-input harnesses for the daemon's front doors: the ingest decoder
//! and validator, the HTTP query parameters of the native and
//! Prometheus-compatible APIs (PromQL included), the config loader, and
//! the connection path of the gRPC and HTTP listeners (`conn`: partial
//! heads, bodies, prefaces and TLS handshakes, stalls, on a paused clock).
//!
//! They run on stable Rust through `proptest`, as unit tests, so every
//! `cargo test` makes a short bounded pass (`FUZZ_DEFAULT_CASES` inputs per
//! harness). `scripts/fuzz` runs them in release with millions of inputs
//! by setting `TALLY_FUZZ_CASES`. A harness fails on a panic, on a stack
//! overflow (the test process aborts), on an answer outside the documented
//! set (e.g. a 500 for bad input), or on a broken invariant (accepted plus
//! rejected samples must equal the samples sent; a connection is closed
//! within its deadlines).

mod config;
mod conn;
pub(crate) mod http;
mod ingest;

use proptest::prelude::*;
use proptest::test_runner::Config as RunnerConfig;

/// Inputs per harness in an ordinary test run.
const FUZZ_DEFAULT_CASES: u32 = 300;

/// The runner configuration: `TALLY_FUZZ_CASES` inputs (or the default),
/// no shrinking time limit beyond proptest's own, no persisted failures
/// file (a failure prints its input; the seed is in the message).
fn runner() -> RunnerConfig {
    let cases = std::env::var("TALLY_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FUZZ_DEFAULT_CASES);
    RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    }
}

/// Text built from `pieces`, up to `max` of them, plus now and then a long
/// run of one piece (deep nesting and long chains are where parsers fail).
fn soup(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    let piece = proptest::sample::select(pieces);
    prop_oneof![
        4 => proptest::collection::vec(piece.clone(), 0..max).prop_map(|v| v.concat()),
        1 => (piece, 100usize..4_000).prop_map(|(p, n)| p.repeat(n)),
        1 => any::<String>(),
    ]
}
