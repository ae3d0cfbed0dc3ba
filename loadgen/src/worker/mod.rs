//! A worker: one connection sending one partition of the fleet, one
//! request (or stream) at a time, and keeping the books on what the daemon
//! acknowledged.
//!
//! One request in flight per worker, and each series owned by one worker,
//! is what keeps every series' samples in time order at the daemon (which
//! cumulative counters need), including across retries: a refused batch is
//! resent before anything after it. Unary sends are here, streams in
//! `stream`, OTLP, remote-write and line protocol in `foreign`, Graphite in
//! `plaintext`.

mod foreign;
mod plaintext;
mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use tally_proto::v1 as pb;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tonic::{Code, Status};

use crate::batch::{Plan, Timeline, WorkerSeries};
use crate::expect::{Expectation, Rejected};
use crate::fleet::Fleet;
use crate::pace::{MaxSchedule, RealTimeSchedule};
use crate::progress::Live;
use crate::protocol::Protocol;
use crate::transport::{self, classify, code_name, describe, Backoff, Verdict};
use crate::unary::UnaryClient;
use crate::wire::{self, Scratch};

/// How batches travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One `Push` per batch, answered per batch.
    Unary,
    /// Batches as messages of `PushStream`, answered per stream.
    Stream,
}

/// Settings every worker shares.
#[derive(Debug, Clone)]
pub struct SendOpts {
    pub endpoint: Endpoint,
    pub connect_timeout: Duration,
    pub mode: Mode,
    pub batch: usize,
    pub span: u32,
    /// Per request: a unary call, one stream message's hand-off, or the wait
    /// for a stream's summary after it is closed.
    pub timeout: Duration,
    /// Resends of a batch the daemon certainly refused, before giving up.
    pub retries: u32,
    pub max_backoff: Duration,
    pub stream_messages: usize,
    /// The instant of the timeline's start in a real-time run; None for `--max`.
    pub realtime_t0: Option<Instant>,
    pub verify: bool,
    pub protocol: Protocol,
    /// The daemon's HTTP address, for the HTTP protocols.
    pub http: String,
    /// The Graphite listener's `host:port`.
    pub graphite: String,
    /// Batches per Graphite connection (`--graphite-batches`; 0: no limit).
    pub graphite_batches: usize,
    /// The HTTP protocols' path when not tallyd's (`--http-path`).
    pub http_path: Option<String>,
    /// `--prerender`: passed by every worker once its bodies are encoded,
    /// and by the run, which starts its clock then.
    pub prerender: Option<Arc<tokio::sync::Barrier>>,
}

/// Messages buffered between a worker and its stream.
const STREAM_BUFFER: usize = 2;
/// A real-time stream is closed (and acknowledged) at least this often.
const STREAM_MAX_AGE: Duration = Duration::from_secs(5);
/// Rejection details kept per worker for the report.
const KEEP_DETAILS: usize = 5;
/// First backoff after a refusal.
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);

/// One worker's exact books, merged into the report at the end.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Samples handed to the transport at least once.
    pub sent: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Samples in requests that failed ambiguously (maybe applied, maybe not).
    pub ambiguous: u64,
    /// Samples never acknowledged because the run stopped (fatal error, Ctrl-C).
    pub unacknowledged: u64,
    /// Requests (unary calls or streams) answered with a response.
    pub acks: u64,
    /// Requests that failed, retried or not.
    pub failed: u64,
    pub retries: u64,
    pub errors_by_code: BTreeMap<&'static str, u64>,
    /// First message seen per status code.
    pub error_examples: BTreeMap<&'static str, String>,
    /// Rejected samples by reason, from the responses' rejection lists.
    pub rejections_by_reason: BTreeMap<String, u64>,
    pub rejections_truncated: bool,
    pub rejection_examples: Vec<String>,
    /// Real time: the latest a batch left after its first sample was due.
    pub max_lag: Duration,
    /// Real time: batches that left more than one tick late.
    pub late_batches: u64,
}

pub struct WorkerOutcome {
    pub ws: WorkerSeries,
    pub tally: Tally,
    /// Per request: unary send → response; stream: close → summary. µs.
    pub latency: Histogram<u64>,
    pub expect: Option<Expectation>,
    pub fatal: Option<String>,
}

pub fn new_histogram() -> Histogram<u64> {
    // 1 µs to 1 h at 3 significant digits; the bounds are constants, so
    // this cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

enum Schedule {
    Max(MaxSchedule),
    RealTime(RealTimeSchedule),
}

pub struct Worker {
    fleet: Arc<Fleet>,
    tl: Timeline,
    opts: Arc<SendOpts>,
    live: Arc<Live>,
    cancel: CancellationToken,
    ws: WorkerSeries,
    schedule: Schedule,
    tally: Tally,
    latency: Histogram<u64>,
    expect: Option<Expectation>,
    /// Failures in a row that were not followed by any acknowledgement.
    failures_in_a_row: u32,
    scratch: Scratch,
    /// `--prerender`'s start, until this worker has passed it.
    start_gate: Option<Arc<tokio::sync::Barrier>>,
}

impl Worker {
    pub fn new(
        fleet: Arc<Fleet>,
        tl: Timeline,
        opts: Arc<SendOpts>,
        live: Arc<Live>,
        cancel: CancellationToken,
        ws: WorkerSeries,
    ) -> Worker {
        let schedule = match opts.realtime_t0 {
            None => Schedule::Max(MaxSchedule::new(ws.len(), tl.ticks, opts.batch, opts.span)),
            Some(t0) => Schedule::RealTime(RealTimeSchedule::new(t0, tl, ws.clone(), opts.batch)),
        };
        let expect = opts.verify.then(|| Expectation::new(ws.len()));
        let scratch = Scratch::new(&fleet);
        let start_gate = opts.prerender.clone();
        Worker {
            fleet,
            tl,
            opts,
            live,
            cancel,
            ws,
            schedule,
            tally: Tally::default(),
            latency: new_histogram(),
            expect,
            failures_in_a_row: 0,
            scratch,
            start_gate,
        }
    }

    pub async fn run(mut self) -> WorkerOutcome {
        let fatal = match self.go().await {
            Ok(()) => None,
            Err(msg) => {
                self.cancel.cancel();
                Some(msg)
            }
        };
        // A worker that failed before rendering still lets the run start.
        self.pass_start_gate().await;
        WorkerOutcome {
            ws: self.ws,
            tally: self.tally,
            latency: self.latency,
            expect: self.expect,
            fatal,
        }
    }

    /// Waits for every worker's `--prerender` (once; no-op without it).
    async fn pass_start_gate(&mut self) {
        if let Some(gate) = self.start_gate.take() {
            gate.wait().await;
        }
    }

    async fn go(&mut self) -> Result<(), String> {
        let opts = self.opts.clone();
        let unary_client = || async {
            UnaryClient::connect(&opts.endpoint.uri().to_string(), 3, opts.connect_timeout)
                .await
                .map_err(|e| e.to_string())
        };
        match (opts.protocol, opts.mode) {
            (Protocol::Graphite, _) => self.run_graphite().await,
            // Over HTTP alone: a peer fed the same bytes has no gRPC port.
            (p, _) if !p.uses_grpc() => self.run_foreign(None).await,
            (Protocol::Tally, Mode::Stream) => {
                let ch = transport::connect(&opts.endpoint, 3, opts.connect_timeout)
                    .await
                    .map_err(|e| e.to_string())?;
                self.run_stream(ch).await
            }
            (Protocol::Tally, Mode::Unary) => self.run_unary(unary_client().await?).await,
            (_, _) => self.run_foreign(Some(unary_client().await?)).await,
        }
    }

    /// The next plan to send, waiting for it in real time; None at the end
    /// or when cancelled. Cancel-safe: dropping it loses no plan.
    async fn next_plan(&mut self) -> Option<Plan> {
        if self.cancel.is_cancelled() {
            return None;
        }
        let plan = match &mut self.schedule {
            Schedule::Max(it) => it.next()?,
            Schedule::RealTime(rt) => {
                let due = rt.next_due()?;
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = self.cancel.cancelled() => return None,
                }
                let d = rt.take(Instant::now())?;
                self.tally.max_lag = self.tally.max_lag.max(d.lag);
                if d.lag.as_secs_f64() > 1.0 / self.tl.rate {
                    self.tally.late_batches += 1;
                }
                d.plan
            }
        };
        self.tally.sent += plan.samples();
        Live::add(&self.live.sent, plan.samples());
        Some(plan)
    }

    fn encode(&mut self, plan: &Plan) -> Bytes {
        wire::encode(&self.fleet, &self.tl, &self.ws, plan, &mut self.scratch)
    }

    fn record_latency(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, self.latency.high());
        // Within the bounds by construction.
        let _ = self.latency.record(us);
    }

    fn record_error(&mut self, status: &Status) {
        let code = code_name(status.code());
        *self.tally.errors_by_code.entry(code).or_default() += 1;
        self.tally
            .error_examples
            .entry(code)
            .or_insert_with(|| describe(status));
        self.tally.failed += 1;
        Live::add(&self.live.errors, 1);
    }

    fn record_ack(&mut self) {
        self.tally.acks += 1;
        self.failures_in_a_row = 0;
        Live::add(&self.live.acks, 1);
    }

    /// A refused request: sleeps before the next attempt, or gives up.
    async fn back_off(
        &mut self,
        backoff: &mut Backoff,
        attempts: u32,
        status: &Status,
    ) -> Result<(), String> {
        if attempts > self.opts.retries {
            return Err(format!(
                "gave up after {attempts} attempts of the same batch; last error: {}",
                hint(status)
            ));
        }
        self.tally.retries += 1;
        Live::add(&self.live.retries, 1);
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = self.cancel.cancelled() => {}
        }
        Ok(())
    }

    /// An ambiguous failure: the samples may or may not be in the daemon.
    fn ambiguous(&mut self, plans: &[Plan]) -> Result<(), String> {
        for p in plans {
            self.tally.ambiguous += p.samples();
            if let Some(e) = &mut self.expect {
                e.mark_ambiguous(p);
            }
        }
        self.failures_in_a_row += 1;
        // A daemon that times out every request would otherwise be driven
        // through the whole run at one timeout per batch.
        if self.failures_in_a_row > self.opts.retries {
            let last = self
                .tally
                .error_examples
                .values()
                .last()
                .cloned()
                .unwrap_or_default();
            return Err(format!(
                "{} requests in a row failed without an answer; giving up (last: {last})",
                self.failures_in_a_row
            ));
        }
        Ok(())
    }

    // ----- unary -----

    async fn run_unary(&mut self, mut client: UnaryClient) -> Result<(), String> {
        while let Some(plan) = self.next_plan().await {
            self.push_one(&mut client, plan).await?;
        }
        Ok(())
    }

    async fn push_one(&mut self, client: &mut UnaryClient, plan: Plan) -> Result<(), String> {
        // Encoded once; a resend sends the same bytes.
        let mut push = UnaryPush {
            client,
            msg: self.encode(&plan),
            timeout: self.opts.timeout,
        };
        self.until_answered(plan, &mut push).await
    }

    /// Sends `plan` by `request` until the daemon answers, refuses it for
    /// good, or the run is cancelled: a certain refusal is sent again after
    /// a backoff, as often as `--retries` allows. The one retry loop of
    /// every request-per-batch protocol; streams have their own
    /// (`stream`), since a stream's answer covers many batches.
    async fn until_answered(
        &mut self,
        plan: Plan,
        request: &mut impl Request,
    ) -> Result<(), String> {
        let mut backoff = Backoff::new(INITIAL_BACKOFF, self.opts.max_backoff);
        let mut attempts = 0;
        loop {
            if attempts > 0 && self.cancel.is_cancelled() {
                // Refused every time so far: nothing of it was taken.
                self.tally.unacknowledged += plan.samples();
                return Ok(());
            }
            attempts += 1;
            let started = Instant::now();
            let (status, verdict) = match request.send().await {
                Ok(resp) => {
                    self.record_latency(started.elapsed());
                    self.record_ack();
                    self.settle(&[plan], &resp);
                    return Ok(());
                }
                Err(failed) => failed,
            };
            self.record_error(&status);
            let outcome = match verdict {
                Verdict::Retry => self.back_off(&mut backoff, attempts, &status).await,
                Verdict::Ambiguous => return self.ambiguous(&[plan]),
                Verdict::Fatal => Err(hint(&status)),
            };
            if outcome.is_err() {
                // Refused for good: the daemon took nothing of it.
                self.tally.unacknowledged += plan.samples();
            }
            outcome?;
        }
    }

    /// Books an answered request: `plans` are its messages in order (one for
    /// `Push`), and rejections name them by `message_index`.
    fn settle(&mut self, plans: &[Plan], resp: &pb::PushResponse) {
        self.tally.accepted += resp.accepted;
        self.tally.rejected += resp.rejected;
        Live::add(&self.live.accepted, resp.accepted);
        Live::add(&self.live.rejected, resp.rejected);
        self.tally.rejections_truncated |= resp.rejections_truncated;
        let mut rejected = vec![Rejected::default(); plans.len()];
        for r in &resp.rejections {
            let reason = pb::RejectReason::try_from(r.reason)
                .map(|x| {
                    x.as_str_name()
                        .trim_start_matches("REJECT_REASON_")
                        .to_string()
                })
                .unwrap_or_else(|_| format!("REASON_{}", r.reason));
            let plan = plans.get(r.message_index as usize);
            let lin = plan.and_then(|p| self.ws.locate(p, r.source_index, r.series_index));
            let samples = match (r.sample_index, plan) {
                (None, Some(p)) => p.ticks as u64,
                _ => 1,
            };
            *self
                .tally
                .rejections_by_reason
                .entry(reason.clone())
                .or_default() += samples;
            if self.tally.rejection_examples.len() < KEEP_DETAILS {
                let name = lin.map(|l| {
                    let (src, j) = self.ws.at(l);
                    self.fleet.series_name(src, j)
                });
                self.tally.rejection_examples.push(format!(
                    "{}: {reason}: {}",
                    name.unwrap_or_else(|| "?".into()),
                    r.detail
                ));
            }
            if let (Some(l), Some(slot)) = (lin, rejected.get_mut(r.message_index as usize)) {
                slot.add(l, r.sample_index);
            }
        }
        let Some(expect) = &mut self.expect else {
            return;
        };
        let total: u64 = plans.iter().map(Plan::samples).sum();
        let mappable = resp.rejections.iter().all(|r| {
            plans
                .get(r.message_index as usize)
                .and_then(|p| self.ws.locate(p, r.source_index, r.series_index))
                .is_some()
        });
        // With a truncated list (or counts that do not add up) the rejected
        // samples are not all known: nothing of these series can be checked.
        if resp.accepted + resp.rejected != total
            || (resp.rejected > 0 && resp.rejections_truncated)
            || !mappable
        {
            for p in plans {
                expect.mark_ambiguous(p);
            }
            return;
        }
        for (p, rej) in plans.iter().zip(&rejected) {
            expect.commit(&self.fleet, &self.tl, &self.ws, p, rej);
        }
    }
}

/// One request of a batch, sent as many times as
/// [`Worker::until_answered`] asks, the same bytes each time.
trait Request {
    /// Sends it once: the answer as a `PushResponse`, or why there is none
    /// and what that means.
    async fn send(&mut self) -> Result<pb::PushResponse, (Status, Verdict)>;
}

/// A unary `Push` of one pre-encoded message.
struct UnaryPush<'a> {
    client: &'a mut UnaryClient,
    msg: Bytes,
    timeout: Duration,
}

impl Request for UnaryPush<'_> {
    async fn send(&mut self) -> Result<pb::PushResponse, (Status, Verdict)> {
        let path = wire::push_path();
        let call = self.client.call(path.as_str(), &self.msg);
        let status = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(answer)) => match <pb::PushResponse as prost::Message>::decode(answer) {
                Ok(resp) => return Ok(resp),
                Err(e) => Status::internal(format!("the answer does not decode: {e}")),
            },
            Ok(Err(status)) => status,
            Err(_) => {
                Status::deadline_exceeded(format!("no answer within --timeout {:?}", self.timeout))
            }
        };
        let verdict = classify(&status);
        Err((status, verdict))
    }
}

fn describe_error(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(e) = source {
        s.push_str(": ");
        s.push_str(&e.to_string());
        source = e.source();
    }
    s
}

/// The status, plus what to do about the common fatal ones.
fn hint(status: &Status) -> String {
    let text = describe(status);
    match status.code() {
        Code::InvalidArgument if status.message().contains("max_batch_samples") => {
            format!("{text} (lower --batch, or raise ingest.max_batch_samples on the daemon)")
        }
        Code::Unimplemented => {
            format!("{text} (is --target tallyd's gRPC port, not its HTTP port?)")
        }
        Code::ResourceExhausted => format!(
            "{text} (the daemon kept pushing back: its store is not keeping up; raise --retries/--max-backoff or lower the load)"
        ),
        _ => text,
    }
}
