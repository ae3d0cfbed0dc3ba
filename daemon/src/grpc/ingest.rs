//! The ingest service (`tally.v1.Ingest`): unary `Push` and client-streaming
//! `PushStream`. It checks request-level limits, hands the samples to the
//! aggregator and reports per-sample rejections; a bad sample never spoils
//! the rest of its batch. The groups a source declares go to the rollups
//! before its samples go to the aggregator, so the flush that drains the
//! samples already knows the source's groups.
//!
//! Backpressure: when the aggregator has reached its memory bound (the store
//! is behind), requests are refused whole with `RESOURCE_EXHAUSTED` before
//! anything is taken, so a client can retry the same batch safely.
//!
//! Only the gRPC side lives here; the limits and the shutdown gate are in
//! [`crate::ingest`], which other receivers share.

use std::sync::Arc;

use tally_proto::v1 as pb;
use tonic::{Request, Response, Status, Streaming};

use super::convert::{kind_from_proto, reason_to_proto};
use crate::aggregator::{Aggregator, IngestOutcome, RejectReason, SeriesBatch};
use crate::auth::Grant;
use crate::ingest::IngestGate;
use crate::labels::LabelArena;
use crate::rollup::Rollups;

pub struct IngestService {
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    gate: Arc<IngestGate>,
}

impl IngestService {
    /// A service enforcing `agg`'s `[ingest]` limits.
    pub fn new(
        agg: Arc<Aggregator>,
        rollups: Arc<Rollups>,
        gate: Arc<IngestGate>,
    ) -> IngestService {
        IngestService { agg, rollups, gate }
    }

    /// Ingests one message; the caller numbers its rejections.
    fn ingest_one(
        &self,
        req: &pb::PushRequest,
        grant: &Grant,
        rpc: &'static str,
    ) -> Result<IngestOutcome, Status> {
        let samples: usize = req
            .sources
            .iter()
            .flat_map(|s| s.series.iter())
            .map(|s| s.values.len().max(s.timestamps_ms.len()))
            .sum();
        if samples > self.agg.limits().max_batch_samples {
            metrics::counter!("tally_ingest_requests_total", "rpc" => rpc, "outcome" => "too_large").increment(1);
            return Err(Status::invalid_argument(format!(
                "batch holds {samples} samples; the limit is {} (ingest.max_batch_samples): split it",
                self.agg.limits().max_batch_samples
            )));
        }
        if self.agg.over_memory_bound() {
            metrics::counter!("tally_ingest_requests_total", "rpc" => rpc, "outcome" => "pushback")
                .increment(1);
            return Err(Status::resource_exhausted(format!(
                "the daemon holds {} unflushed slots (ingest.max_pending_slots = {}): the store is behind; retry this batch with backoff",
                self.agg.pending_slots(),
                self.agg.limits().max_pending_slots
            )));
        }
        let cap = self.agg.limits().max_rejections_reported;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut refused = IngestOutcome::default();
        let labels = encode_labels(req, self.agg.limits().max_labels);
        let mut batches = Vec::with_capacity(req.sources.iter().map(|s| s.series.len()).sum());
        let mut allowed_sources = 0usize;
        let mut series_at = 0;
        for (si, src) in req.sources.iter().enumerate() {
            let refusal = refusal(grant, src);
            allowed_sources += usize::from(!matches!(
                refusal,
                Some((RejectReason::SourceNotAllowed, _))
            ));
            for (mi, series) in src.series.iter().enumerate() {
                let encoded = labels.get(series_at);
                series_at += 1;
                let b = SeriesBatch {
                    source: &src.source,
                    metric: &series.metric,
                    labels: encoded.unwrap_or(""),
                    kind: kind_from_proto(series.kind),
                    timestamps_ms: &series.timestamps_ms,
                    values: &series.values,
                    source_index: si as u32,
                    series_index: mi as u32,
                };
                match (&refusal, encoded) {
                    (Some((reason, why)), _) => {
                        refused.reject_series(cap, &b, *reason, || why.clone())
                    }
                    (None, Err(e)) => {
                        refused.reject_series(cap, &b, RejectReason::InvalidLabel, || e.to_string())
                    }
                    (None, Ok(_)) => batches.push(b),
                }
            }
            if refusal.is_none() {
                self.rollups
                    .declare(&src.source, &src.groups, now_ms.div_euclid(1000));
            }
        }
        if allowed_sources == 0 && grant.limits_sources() && refused.rejected > 0 {
            return Err(nothing_allowed(&refused, rpc));
        }
        let Some(open) = self.gate.enter() else {
            return Err(Status::unavailable(
                "tallyd is shutting down; send to another instance or retry later",
            ));
        };
        let out = self.agg.ingest(&batches, now_ms);
        drop(open);
        refused.merge(out, cap);
        record(&refused, rpc);
        Ok(refused)
    }
}

/// Every series' label encoding, in request order (an empty request-wide
/// arena when no series has labels).
fn encode_labels(req: &pb::PushRequest, max_labels: usize) -> LabelArena {
    let mut arena = LabelArena::default();
    for src in &req.sources {
        for series in &src.series {
            let pairs = series
                .labels
                .iter()
                .map(|l| (l.name.as_str(), l.value.as_str()));
            arena.push(&src.source, &series.metric, pairs, max_labels);
        }
    }
    arena
}

/// Why all of `src`'s series are refused before the aggregator, if they
/// are. A source the token may not push must not touch the rollups'
/// memberships either, so that is checked first.
fn refusal(grant: &Grant, src: &pb::SourceBatch) -> Option<(RejectReason, String)> {
    match grant.source_refusal(&src.source) {
        Some(why) => Some((RejectReason::SourceNotAllowed, why)),
        None => Rollups::check_declaration(&src.groups)
            .err()
            .map(|why| (RejectReason::InvalidGroup, why)),
    }
}

/// The answer to a request none of whose sources its token may push: the
/// whole call is refused rather than answered with only rejections.
fn nothing_allowed(refused: &IngestOutcome, rpc: &'static str) -> Status {
    metrics::counter!("tally_ingest_requests_total", "rpc" => rpc, "outcome" => "denied")
        .increment(1);
    Status::permission_denied(format!(
        "no source of this request may be pushed with this token: {}",
        refused.rejections.first().map_or("", |r| r.detail.as_str())
    ))
}

/// The grant the auth interceptor attached; none means authentication is
/// off, as the interceptor wraps this service whenever it is on.
fn granted<T>(request: &Request<T>) -> Grant {
    request
        .extensions()
        .get::<Grant>()
        .cloned()
        .unwrap_or_else(Grant::open)
}

fn record(out: &IngestOutcome, rpc: &'static str) {
    metrics::counter!("tally_ingest_requests_total", "rpc" => rpc, "outcome" => "ok").increment(1);
    metrics::counter!("tally_samples_accepted_total").increment(out.accepted);
    for reason in RejectReason::ALL {
        let n = out.rejected_by_reason[reason as usize];
        if n > 0 {
            metrics::counter!("tally_samples_rejected_total", "reason" => reason.as_str())
                .increment(n);
        }
    }
    if out.counter_resets > 0 {
        metrics::counter!("tally_counter_resets_total").increment(out.counter_resets);
    }
}

/// Folds outcomes into one response, keeping the rejection list capped.
struct ResponseBuilder {
    resp: pb::PushResponse,
    cap: usize,
}

impl ResponseBuilder {
    fn new(cap: usize) -> Self {
        ResponseBuilder {
            resp: pb::PushResponse::default(),
            cap,
        }
    }

    fn add(&mut self, out: IngestOutcome, message_index: u32) {
        self.resp.accepted += out.accepted;
        self.resp.rejected += out.rejected;
        self.resp.rejections_truncated |= out.rejections_truncated;
        for r in out.rejections {
            if self.resp.rejections.len() >= self.cap {
                self.resp.rejections_truncated = true;
                break;
            }
            self.resp.rejections.push(pb::Rejection {
                source_index: r.source_index,
                series_index: r.series_index,
                sample_index: r.sample_index,
                reason: reason_to_proto(r.reason) as i32,
                detail: r.detail,
                message_index,
            });
        }
    }
}

#[tonic::async_trait]
impl pb::ingest_server::Ingest for IngestService {
    async fn push(
        &self,
        request: Request<pb::PushRequest>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        let grant = granted(&request);
        let out = self.ingest_one(request.get_ref(), &grant, "push")?;
        let mut b = ResponseBuilder::new(self.agg.limits().max_rejections_reported);
        b.add(out, 0);
        Ok(Response::new(b.resp))
    }

    async fn push_stream(
        &self,
        request: Request<Streaming<pb::PushRequest>>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        let grant = granted(&request);
        let mut stream = request.into_inner();
        let mut b = ResponseBuilder::new(self.agg.limits().max_rejections_reported);
        let mut index = 0u32;
        while let Some(msg) = stream.message().await? {
            match self.ingest_one(&msg, &grant, "push_stream") {
                Ok(out) => b.add(out, index),
                Err(status) => {
                    // Messages before this one were taken; say how far we got
                    // so the client resends from here.
                    return Err(Status::new(
                        status.code(),
                        format!(
                            "message {index}: {} ({} samples of messages 0..{index} were accepted)",
                            status.message(),
                            b.resp.accepted
                        ),
                    ));
                }
            }
            index += 1;
        }
        Ok(Response::new(b.resp))
    }
}
