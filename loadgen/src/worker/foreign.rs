//! Sending a worker's batches as OTLP (gRPC or HTTP), remote-write or
//! InfluxDB line protocol, one request at a time like unary `Push`. Each batch is built as the
//! `tally.v1` request it would be, then converted ([`crate::protocol`]), so
//! the samples, and what `--verify` expects of them, are the same whatever
//! the protocol.
//!
//! Those protocols answer with counts, not a rejection per sample: a
//! request with any sample refused is left out of verification (its
//! samples are neither known accepted nor known refused), like an
//! ambiguous failure, but counted as answered. Line protocol's partial
//! answer counts lines, not samples, so such a batch counts as refused
//! whole.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::Message as _;
use tally_proto::v1 as pb;
use tonic::{Code, Status};

use super::{Request, Worker};
use crate::batch::Plan;
use crate::foreign_wire::{self, Scratch};
use crate::protocol::Protocol;
use crate::text_wire;
use crate::transport::{classify, Verdict};
use crate::unary::UnaryClient;

/// OTLP's gRPC method.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Where a worker sends: OTLP's gRPC connection, or HTTP. Export goes
/// over the same unary client as `tally.v1`'s Push, headers and message in
/// one write as the OpenTelemetry Collector's grpc-go exporter writes them,
/// so that the two protocols' costs to the daemon compare alike.
pub(super) enum Sink {
    Grpc(UnaryClient),
    Http {
        client: reqwest::Client,
        url: String,
    },
}

impl Sink {
    pub(super) fn new(
        protocol: Protocol,
        grpc: Option<UnaryClient>,
        (http, http_path): (&str, Option<&str>),
        timeout: Duration,
    ) -> Result<Sink, String> {
        let path = match (protocol, grpc) {
            (Protocol::OtlpGrpc, Some(client)) => return Ok(Sink::Grpc(client)),
            (Protocol::OtlpHttp, _) => "/v1/metrics",
            (Protocol::RemoteWrite, _) => "/api/v1/write",
            (Protocol::Influx, _) => {
                "/api/v2/write?precision=ms&bucket=tally-loadgen&org=tally-loadgen"
            }
            (Protocol::Tally | Protocol::Graphite | Protocol::OtlpGrpc, _) => {
                return Err(format!("{} is not sent by this path", protocol.name()))
            }
        };
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(Sink::Http {
            client,
            url: format!("{http}{}", http_path.unwrap_or(path)),
        })
    }
}

/// What an answer says was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// This many samples (OTLP counts points: one per sample here).
    Count(u64),
    /// All but this many accepted (remote-write's partial answer).
    AllBut(u64),
}

/// One attempt's result: what the daemon refused, or why the attempt
/// failed and what that means.
type Attempt = Result<Refused, (Status, Verdict)>;

impl Worker {
    pub(super) async fn run_foreign(&mut self, grpc: Option<UnaryClient>) -> Result<(), String> {
        let protocol = self.opts.protocol;
        let opts = self.opts.clone();
        let http = (opts.http.as_str(), opts.http_path.as_deref());
        let mut sink = Sink::new(protocol, grpc, http, opts.timeout)?;
        let mut scratch = Buffers::default();
        if opts.prerender.is_some() {
            let mut bodies = Vec::new();
            while let Some(plan) = self.next_plan().await {
                bodies.push((plan, self.body(protocol, &plan, &mut scratch)));
            }
            self.pass_start_gate().await;
            for (plan, body) in bodies {
                self.send_foreign(&mut sink, protocol, plan, body).await?;
            }
            return Ok(());
        }
        while let Some(plan) = self.next_plan().await {
            let body = self.body(protocol, &plan, &mut scratch);
            self.send_foreign(&mut sink, protocol, plan, body).await?;
        }
        Ok(())
    }

    /// A batch's request body, encoded once: a resend sends the same bytes.
    fn body(&self, protocol: Protocol, plan: &Plan, scratch: &mut Buffers) -> Bytes {
        let req = self.ws.build(&self.fleet, &self.tl, plan);
        Bytes::from(encode(protocol, &req, scratch))
    }

    async fn send_foreign(
        &mut self,
        sink: &mut Sink,
        protocol: Protocol,
        plan: Plan,
        body: Bytes,
    ) -> Result<(), String> {
        let mut request = ForeignRequest {
            sink,
            protocol,
            body,
            timeout: self.opts.timeout,
            plan,
        };
        self.until_answered(plan, &mut request).await
    }
}

/// One batch's request in a foreign protocol, its count-only answer read
/// as a `PushResponse`.
struct ForeignRequest<'a> {
    sink: &'a mut Sink,
    protocol: Protocol,
    body: Bytes,
    timeout: Duration,
    plan: Plan,
}

impl Request for ForeignRequest<'_> {
    async fn send(&mut self) -> Result<pb::PushResponse, (Status, Verdict)> {
        let refused = attempt(self.sink, self.protocol, &self.body, self.timeout).await?;
        Ok(response(&self.plan, refused))
    }
}

/// What encoding reuses from one request to the next.
#[derive(Default)]
struct Buffers {
    wire: Scratch,
    influx: text_wire::InfluxScratch,
    /// The longest line-protocol body so far.
    influx_len: usize,
}

/// The request body: an OTLP export (gRPC or HTTP), a snappy-compressed
/// remote-write request, or line protocol.
fn encode(protocol: Protocol, req: &pb::PushRequest, s: &mut Buffers) -> Vec<u8> {
    match protocol {
        Protocol::OtlpHttp | Protocol::OtlpGrpc => foreign_wire::otlp(req, &mut s.wire),
        Protocol::RemoteWrite => snap::raw::Encoder::new()
            .compress_vec(&foreign_wire::remote_write(req, &mut s.wire))
            .unwrap_or_default(),
        Protocol::Influx => {
            // Room for a typical batch up front: growing by doubling copied
            // the text several times over.
            let mut text = String::with_capacity(s.influx_len);
            text_wire::influx(req, &mut text, &mut s.influx);
            s.influx_len = s.influx_len.max(text.len());
            text.into_bytes()
        }
        Protocol::Tally | Protocol::Graphite => Vec::new(),
    }
}

/// A `PushResponse` standing for a count-only answer: all accepted, or
/// `rejected` refused somewhere in the batch (a truncated rejection list,
/// which leaves the batch out of verification).
pub(super) fn response(plan: &Plan, refused: Refused) -> pb::PushResponse {
    let rejected = match refused {
        Refused::Count(n) => n.min(plan.samples()),
        Refused::AllBut(accepted) => plan.samples().saturating_sub(accepted),
    };
    pb::PushResponse {
        accepted: plan.samples() - rejected,
        rejected,
        rejections: Vec::new(),
        rejections_truncated: rejected > 0,
    }
}

async fn attempt(sink: &mut Sink, protocol: Protocol, body: &Bytes, timeout: Duration) -> Attempt {
    match sink {
        Sink::Grpc(client) => {
            match tokio::time::timeout(timeout, client.call(EXPORT_PATH, body)).await {
                Ok(Ok(answer)) => match ExportMetricsServiceResponse::decode(answer) {
                    Ok(resp) => Ok(Refused::Count(rejected_points(&resp))),
                    Err(e) => Err((
                        Status::internal(format!(
                            "the answer is not an ExportMetricsServiceResponse: {e}"
                        )),
                        Verdict::Fatal,
                    )),
                },
                Ok(Err(status)) => {
                    let verdict = classify(&status);
                    Err((status, verdict))
                }
                Err(_) => Err((
                    Status::deadline_exceeded(format!("no answer within --timeout {timeout:?}")),
                    Verdict::Ambiguous,
                )),
            }
        }
        Sink::Http { client, url } => http(client, url, protocol, body).await,
    }
}

fn rejected_points(resp: &ExportMetricsServiceResponse) -> u64 {
    resp.partial_success
        .as_ref()
        .map_or(0, |p| p.rejected_data_points.max(0) as u64)
}

async fn http(client: &reqwest::Client, url: &str, protocol: Protocol, body: &Bytes) -> Attempt {
    let content_type = match protocol {
        Protocol::Influx => "text/plain; charset=utf-8",
        _ => "application/x-protobuf",
    };
    let mut req = client
        .post(url)
        .header("content-type", content_type)
        .body(body.clone());
    if protocol == Protocol::RemoteWrite {
        req = req
            .header("content-encoding", "snappy")
            .header("x-prometheus-remote-write-version", "0.1.0");
    }
    let resp = match req.send().await {
        Ok(r) => r,
        // Refused before anything was sent: safe to resend.
        Err(e) if e.is_connect() => {
            return Err((
                Status::unavailable(format!("cannot connect to {url}: {e}")),
                Verdict::Retry,
            ))
        }
        Err(e) => return Err((Status::unknown(format!("{url}: {e}")), Verdict::Ambiguous)),
    };
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap_or_default();
    let text = || String::from_utf8_lossy(&bytes).trim().to_owned();
    match status {
        200 | 204 if protocol == Protocol::OtlpHttp => {
            let resp = ExportMetricsServiceResponse::decode(&bytes[..]).unwrap_or_default();
            Ok(Refused::Count(rejected_points(&resp)))
        }
        200 | 204 => Ok(Refused::Count(0)),
        // Remote-write: some samples refused, the rest kept; the body
        // starts "N accepted;".
        // Line protocol: some lines refused, the rest kept; the answer
        // counts lines, so the whole batch counts as refused.
        400 if protocol == Protocol::Influx && text().contains("partial write") => {
            Ok(Refused::Count(u64::MAX))
        }
        400 if protocol == Protocol::RemoteWrite => match text()
            .split_once(" accepted;")
            .and_then(|(n, _)| n.parse::<u64>().ok())
        {
            Some(accepted) => Ok(Refused::AllBut(accepted)),
            None => Err((
                Status::invalid_argument(format!("HTTP 400: {}", text())),
                Verdict::Fatal,
            )),
        },
        429 => Err((Status::resource_exhausted(text()), Verdict::Retry)),
        503 => Err((Status::unavailable(text()), Verdict::Retry)),
        413 => Err((
            Status::invalid_argument(format!("413: {}", text())),
            Verdict::Fatal,
        )),
        s if (400..500).contains(&s) => {
            let code = if s == 401 || s == 403 {
                Code::PermissionDenied
            } else {
                Code::InvalidArgument
            };
            Err((
                Status::new(code, format!("HTTP {s}: {}", text())),
                Verdict::Fatal,
            ))
        }
        s => Err((
            Status::unknown(format!("HTTP {s}: {}", text())),
            Verdict::Ambiguous,
        )),
    }
}
