//! `tally-loadgen`: simulates a fleet of monitoring agents pushing to
//! tallyd over any of its protocols (`tally.v1`, OTLP over gRPC or HTTP,
//! remote-write, line protocol, Graphite), reports throughput, latency and
//! errors, and with
//! `--verify` reads every series back and checks it exactly.
//!
//! This file only wires the modules together: flags (`cli`), the fleet and
//! its values (`fleet`), its label sets (`labels`), batches (`batch`), pacing (`pace`), connections
//! and failure classes (`transport`), the senders (`worker`), the books on
//! what was acknowledged (`expect`), read-back (`verify`), the live bar
//! (`progress`), the final report (`report`) and the encoding of batches
//! (`wire`); `unary` is the one-write unary call.

// Input and I/O must not reach a panic: production code answers with an
// error instead. Tests may unwrap.
// A function over 80 lines of code (clippy.toml) is split: tests may be longer.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)
)]

mod batch;
mod cli;
mod expect;
mod fleet;
mod foreign_wire;
mod labels;
mod pace;
mod progress;
mod protocol;
mod report;
mod text_wire;
mod transport;
mod unary;
mod verify;
mod wire;
mod worker;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::batch::{Timeline, WorkerSeries};
use crate::cli::{Cli, Pace};
use crate::expect::Expectation;
use crate::fleet::{Fleet, FleetSpec, Kind};
use crate::progress::{Live, Progress};
use crate::protocol::Protocol;
use crate::report::{merge_tally, FleetReport, Latency, RangeReport, Report, Requests, Samples};
use crate::verify::{Check, SeriesKey, VerifyOpts, VerifyReport};
use crate::worker::{new_histogram, Mode, SendOpts, Tally, Worker, WorkerOutcome};

/// Exit statuses (also in `--help`).
const EXIT_FAILED: u8 = 1;
const EXIT_VERIFY_FAILED: u8 = 2;
const EXIT_AMBIGUOUS: u8 = 3;
const EXIT_INTERRUPTED: u8 = 130;

/// Above this many expected (series, minute) slots, `--verify` would need
/// gigabytes of memory: refuse rather than thrash.
const MAX_VERIFY_SLOTS: u64 = 100_000_000;

/// Minutes read on each side of the run's range, to catch extra points.
const VERIFY_MARGIN_S: i64 = 3600;

// Batches are built from many small strings and arrays, and the text
// protocols' encoders are a large share of the generator's CPU; the
// system allocator's free-list consolidation showed in its profile.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tally-loadgen: error: starting the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tally-loadgen: error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let pace = cli.pace(now_ms).map_err(|e| anyhow!(e))?;
    let target = transport::normalize_url("--target", &cli.target).map_err(|e| anyhow!(e))?;
    let http = transport::normalize_url("--http", &cli.http).map_err(|e| anyhow!(e))?;
    let fleet = Arc::new(
        Fleet::new(FleetSpec {
            sources: cli.sources,
            metrics: cli.metrics,
            seed: cli.seed,
            kinds: cli.kinds,
            source_prefix: cli.source_prefix.clone(),
            reset_every: cli.reset_every,
            labels: cli.labels.clone().unwrap_or_default(),
        })
        .map(|f| match cli.protocol {
            Protocol::RemoteWrite => f.with_total_suffix(),
            _ => f,
        })?,
    );
    let ticks_for = |seconds: f64| (seconds * cli.rate).ceil() as u64;
    let timeline = |start_ms: i64, ticks: u64| -> anyhow::Result<Timeline> {
        if ticks == 0 || ticks > u32::MAX as u64 {
            bail!("{ticks} samples per series: the range times --rate must give between 1 and {} samples", u32::MAX);
        }
        Ok(Timeline {
            start_ms,
            rate: cli.rate,
            ticks,
            sources: fleet.sources(),
        })
    };
    match pace {
        Pace::VerifyOnly { start_ms, seconds } => {
            let tl = timeline(start_ms, ticks_for(seconds))?;
            check_verify_size(&fleet, &tl)?;
            verify_only(&cli, &fleet, tl, &target, &http).await
        }
        Pace::Max { start_ms, seconds } => {
            let tl = timeline(start_ms, ticks_for(seconds as f64))?;
            send(&cli, fleet.clone(), tl, false, &target, &http).await
        }
        Pace::RealTime { duration } => {
            // The start is set once connected (see `send`).
            let tl = timeline(0, ticks_for(duration.as_secs_f64()))?;
            send(&cli, fleet.clone(), tl, true, &target, &http).await
        }
    }
}

fn check_verify_size(fleet: &Fleet, tl: &Timeline) -> anyhow::Result<()> {
    let minutes = ((tl.end_ms() - tl.start_ms) / 60_000 + 2) as u64;
    let slots = fleet.series() as u64 * minutes;
    if slots > MAX_VERIFY_SLOTS {
        bail!(
            "verifying {} series × {minutes} minutes would track {slots} slots in memory (limit {MAX_VERIFY_SLOTS}); verify a smaller fleet or a shorter run",
            fleet.series()
        );
    }
    Ok(())
}

/// Sends the run; `real_time` runs start on the next whole second after
/// the preflight checks (`tl.start_ms` is set then).
async fn send(
    cli: &Cli,
    fleet: Arc<Fleet>,
    mut tl: Timeline,
    real_time: bool,
    target: &str,
    http: &str,
) -> anyhow::Result<ExitCode> {
    let endpoint = preflight(cli, &fleet, &tl, target, http).await?;
    let t0 = real_time.then(|| {
        // On a whole second, like agents on a 1 s timer.
        let now_ms = chrono::Utc::now().timestamp_millis();
        tl.start_ms = (now_ms.div_euclid(1000) + 1) * 1000;
        Instant::now() + Duration::from_millis((tl.start_ms - now_ms) as u64)
    });

    let workers = cli.concurrency.min(fleet.sources());
    let opts = Arc::new(send_opts(cli, endpoint, t0, http, workers));
    let planned = fleet.series() as u64 * tl.ticks;
    let live = Arc::new(Live::default());
    let cancel = CancellationToken::new();
    let interrupted = cancel_on_ctrl_c(&cancel);
    let progress = Progress::start(live.clone(), planned, cli.quiet);
    let handles: Vec<_> = WorkerSeries::partition(fleet.sources(), fleet.per_source(), workers)
        .into_iter()
        .map(|ws| {
            let w = Worker::new(
                fleet.clone(),
                tl,
                opts.clone(),
                live.clone(),
                cancel.clone(),
                ws,
            );
            tokio::spawn(w.run())
        })
        .collect();
    if let Some(gate) = &opts.prerender {
        // The clock starts once every body is encoded.
        gate.wait().await;
    }
    let started = Instant::now();
    let started_unix_s = match t0 {
        Some(_) => tl.start_ms as f64 / 1000.0,
        None => chrono::Utc::now().timestamp_millis() as f64 / 1000.0,
    };
    let sent = collect(&fleet, handles).await?;
    // Real time counts from the scheduled start, not the wait for it.
    let elapsed = Instant::now().saturating_duration_since(t0.unwrap_or(started));
    progress.finish();
    let interrupted = interrupted.load(Ordering::Relaxed);

    let verify = if cli.verify && sent.fatal.is_none() && !interrupted {
        Some(run_verify(cli, &tl, http, sent.checks, sent.skipped).await?)
    } else {
        None
    };
    let outcome = outcome_of(
        sent.fatal.is_some(),
        interrupted,
        verify.as_ref(),
        &sent.tally,
    );
    let run = Run {
        target,
        http,
        fleet: &fleet,
        tl: &tl,
        real_time: t0.is_some(),
        concurrency: workers,
        planned,
        elapsed,
        started_unix_s,
    };
    let report = run.report(cli, &sent.tally, &sent.latency, verify, outcome, sent.fatal);
    print_report(cli, &report)?;
    Ok(exit_code(outcome))
}

/// Fails fast, before any load, on a run too big to verify, a wrong
/// address or a dead daemon. Returns the gRPC endpoint.
async fn preflight(
    cli: &Cli,
    fleet: &Fleet,
    tl: &Timeline,
    target: &str,
    http: &str,
) -> anyhow::Result<tonic::transport::Endpoint> {
    if cli.verify {
        check_verify_size(fleet, tl)?;
    }
    let endpoint = transport::endpoint(target, cli.connect_timeout)?;
    if cli.protocol.uses_grpc() {
        let ch = transport::connect(&endpoint, 3, cli.connect_timeout).await?;
        transport::preflight(ch, target, cli.timeout).await?;
    }
    if cli.verify {
        verify::preflight(http, cli.timeout).await?;
    }
    Ok(endpoint)
}

/// Cancels `cancel` on Ctrl-C; the flag says whether that happened.
fn cancel_on_ctrl_c(cancel: &CancellationToken) -> Arc<AtomicBool> {
    let interrupted = Arc::new(AtomicBool::new(false));
    let (cancel, flag) = (cancel.clone(), interrupted.clone());
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::Relaxed);
            cancel.cancel();
        }
    });
    interrupted
}

/// The exit status of a run's outcome (see `--help`).
fn exit_code(outcome: &str) -> ExitCode {
    ExitCode::from(match outcome {
        "aborted" => EXIT_FAILED,
        "interrupted" => EXIT_INTERRUPTED,
        "verify_failed" => EXIT_VERIFY_FAILED,
        "ambiguous_failures" => EXIT_AMBIGUOUS,
        _ => 0,
    })
}

fn send_opts(
    cli: &Cli,
    endpoint: tonic::transport::Endpoint,
    t0: Option<Instant>,
    http: &str,
    workers: usize,
) -> SendOpts {
    SendOpts {
        endpoint,
        connect_timeout: cli.connect_timeout,
        mode: cli.mode,
        batch: cli.batch,
        span: cli.span,
        timeout: cli.timeout,
        retries: cli.retries,
        max_backoff: cli.max_backoff,
        stream_messages: cli.stream_messages,
        realtime_t0: t0,
        verify: cli.verify,
        protocol: cli.protocol,
        http: http.to_owned(),
        graphite: cli.graphite.clone(),
        graphite_batches: cli.graphite_batches,
        http_path: cli.http_path.clone(),
        // The workers and the run itself.
        prerender: cli
            .prerender
            .then(|| Arc::new(tokio::sync::Barrier::new(workers + 1))),
    }
}

/// What the workers sent, merged.
struct Sent {
    tally: Tally,
    latency: hdrhistogram::Histogram<u64>,
    fatal: Option<String>,
    checks: Vec<Check>,
    skipped: Vec<SeriesKey>,
}

/// Waits for every worker and merges their books.
async fn collect(
    fleet: &Fleet,
    handles: Vec<tokio::task::JoinHandle<WorkerOutcome>>,
) -> anyhow::Result<Sent> {
    let mut sent = Sent {
        tally: Tally::default(),
        latency: new_histogram(),
        fatal: None,
        checks: Vec::new(),
        skipped: Vec::new(),
    };
    for h in handles {
        let out = h.await.context("a sender task failed")?;
        merge_tally(&mut sent.tally, &out.tally);
        // Same bounds on every histogram, so adding cannot fail.
        let _ = sent.latency.add(&out.latency);
        if sent.fatal.is_none() {
            sent.fatal = out.fatal;
        }
        if let Some(expect) = out.expect {
            collect_checks(fleet, &out.ws, expect, &mut sent.checks, &mut sent.skipped);
        }
    }
    Ok(sent)
}

/// The run's outcome word, worst first.
fn outcome_of(
    fatal: bool,
    interrupted: bool,
    verify: Option<&VerifyReport>,
    tally: &Tally,
) -> &'static str {
    if fatal {
        "aborted"
    } else if interrupted {
        "interrupted"
    } else if verify.is_some_and(|v| !v.passed) {
        "verify_failed"
    } else if tally.ambiguous > 0 {
        "ambiguous_failures"
    } else {
        "ok"
    }
}

/// The shape of a finished send, for its report.
struct Run<'a> {
    target: &'a str,
    http: &'a str,
    fleet: &'a Fleet,
    tl: &'a Timeline,
    real_time: bool,
    concurrency: usize,
    planned: u64,
    elapsed: Duration,
    started_unix_s: f64,
}

impl Run<'_> {
    fn report(
        &self,
        cli: &Cli,
        tally: &Tally,
        latency: &hdrhistogram::Histogram<u64>,
        verify: Option<VerifyReport>,
        outcome: &'static str,
        fatal: Option<String>,
    ) -> Report {
        let samples_per_s = tally.accepted as f64 / self.elapsed.as_secs_f64().max(1e-9);
        let mode = if self.real_time { "real_time" } else { "max" };
        Report {
            target: self.target.to_string(),
            http: self.http.to_string(),
            protocol: cli.protocol,
            mode: cli.mode,
            fleet: fleet_report(self.fleet),
            range: range_report(mode, self.tl),
            batch: cli.batch,
            span: cli.span,
            concurrency: self.concurrency,
            samples: Samples {
                planned: self.planned,
                sent: tally.sent,
                accepted: tally.accepted,
                rejected: tally.rejected,
                ambiguous: tally.ambiguous,
                unacknowledged: tally.unacknowledged,
            },
            requests: Requests {
                acknowledged: tally.acks,
                failed: tally.failed,
                retries: tally.retries,
            },
            elapsed_s: self.elapsed.as_secs_f64(),
            send_started_unix_s: self.started_unix_s,
            samples_per_s,
            latency: Latency::from_histogram(latency, cli.mode),
            errors_by_status: tally.errors_by_code.clone(),
            error_examples: tally.error_examples.clone(),
            rejections_by_reason: tally.rejections_by_reason.clone(),
            rejections_truncated: tally.rejections_truncated,
            rejection_examples: tally.rejection_examples.clone(),
            real_time: self.real_time.then_some(report::RealTime {
                max_lag_ms: tally.max_lag.as_secs_f64() * 1000.0,
                late_batches: tally.late_batches,
            }),
            verify,
            outcome,
            fatal,
        }
    }
}

async fn verify_only(
    cli: &Cli,
    fleet: &Fleet,
    tl: Timeline,
    target: &str,
    http: &str,
) -> anyhow::Result<ExitCode> {
    verify::preflight(http, cli.timeout).await?;
    let ws = WorkerSeries::all(fleet.sources(), fleet.per_source());
    let expect = Expectation::regenerate(fleet, &tl, &ws);
    let (mut checks, mut skipped) = (Vec::new(), Vec::new());
    collect_checks(fleet, &ws, expect, &mut checks, &mut skipped);
    let v = run_verify(cli, &tl, http, checks, skipped).await?;
    let passed = v.passed;
    let report = Report {
        target: target.to_string(),
        http: http.to_string(),
        protocol: cli.protocol,
        mode: Mode::Unary,
        fleet: fleet_report(fleet),
        range: range_report("verify_only", &tl),
        batch: cli.batch,
        span: cli.span,
        concurrency: 0,
        samples: Samples {
            planned: fleet.series() as u64 * tl.ticks,
            ..Default::default()
        },
        requests: Requests::default(),
        elapsed_s: 0.0,
        send_started_unix_s: 0.0,
        samples_per_s: 0.0,
        latency: Latency::default(),
        errors_by_status: BTreeMap::new(),
        error_examples: BTreeMap::new(),
        rejections_by_reason: BTreeMap::new(),
        rejections_truncated: false,
        rejection_examples: Vec::new(),
        real_time: None,
        verify: Some(v),
        outcome: if passed { "ok" } else { "verify_failed" },
        fatal: None,
    };
    print_report(cli, &report)?;
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_VERIFY_FAILED)
    })
}

/// Turns a worker's expectation into read-back checks, setting aside the
/// series whose fate is unknown.
fn collect_checks(
    fleet: &Fleet,
    ws: &WorkerSeries,
    expect: Expectation,
    checks: &mut Vec<Check>,
    skipped: &mut Vec<SeriesKey>,
) {
    for (lin, se) in expect.series.into_iter().enumerate() {
        let (src, j) = ws.at(lin);
        let (metric, set) = fleet.column(j);
        let series = SeriesKey {
            source: fleet.source_name(src).to_string(),
            metric: fleet.metric_name(metric).to_string(),
            labels: fleet.labels().canonical(set),
        };
        if se.ambiguous {
            skipped.push(series);
        } else {
            checks.push(Check {
                series,
                kind: fleet.kind(metric),
                slots: se.slots,
            });
        }
    }
    skipped.sort();
}

async fn run_verify(
    cli: &Cli,
    tl: &Timeline,
    http: &str,
    checks: Vec<Check>,
    skipped: Vec<SeriesKey>,
) -> anyhow::Result<VerifyReport> {
    if !cli.quiet {
        eprintln!(
            "verifying {} series through {http}/api/v1/range …",
            report::thousands(checks.len() as u64)
        );
    }
    let opts = VerifyOpts {
        http: http.to_string(),
        concurrency: cli.verify_concurrency,
        timeout: cli.timeout,
        settle: cli.settle,
        partial_patience: cli.partial_patience,
        read_patience: cli.read_patience,
        gone: Default::default(),
        max_listed: cli.max_mismatches,
        from_s: tl.start_ms.div_euclid(60_000) * 60 - VERIFY_MARGIN_S,
        to_s: (tl.end_ms() + 999).div_euclid(1000) + VERIFY_MARGIN_S,
    };
    Ok(verify::verify(checks, skipped, &opts).await?)
}

fn fleet_report(fleet: &Fleet) -> FleetReport {
    let counts = fleet.kind_counts();
    let spec = fleet.spec();
    FleetReport {
        sources: fleet.sources(),
        metrics: fleet.metrics(),
        labels: fleet.labels().to_string(),
        label_sets: fleet.label_sets(),
        series: fleet.series(),
        kinds: Kind::ALL
            .iter()
            .map(|k| (k.flag_name(), counts[*k as usize]))
            .collect(),
        seed: spec.seed,
        source_prefix: spec.source_prefix.clone(),
        reset_every: spec.reset_every,
    }
}

fn range_report(pace: &'static str, tl: &Timeline) -> RangeReport {
    RangeReport {
        pace,
        start_ms: tl.start_ms,
        end_ms: tl.end_ms(),
        start: chrono::DateTime::from_timestamp_millis(tl.start_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_else(|| tl.start_ms.to_string()),
        rate: tl.rate,
        ticks: tl.ticks,
    }
}

fn print_report(cli: &Cli, report: &Report) -> anyhow::Result<()> {
    if cli.json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).context("encoding the JSON report")?
        );
        if !cli.quiet {
            eprint!("{}", report.human());
        }
    } else if !cli.quiet {
        print!("{}", report.human());
    }
    if cli.quiet {
        if let Some(f) = &report.fatal {
            eprintln!("tally-loadgen: error: {f}");
        }
    }
    Ok(())
}
