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

use std::sync::Arc;

use tally_proto::v1 as pb;
use tonic::{Request, Response, Status, Streaming};

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::aggregator::{Aggregator, IngestOutcome, RejectReason, SeriesBatch};
use crate::model::SampleKind;
use crate::rollup::Rollups;
use crate::validate::{format_duration, secs, Problems, DAY, HOUR, MINUTE};

/// Protobuf cannot encode a message of 2 GiB or more.
const PROTOBUF_MAX_MESSAGE: usize = i32::MAX as usize;

/// `[ingest]`: what the daemon accepts, whatever the protocol. The request
/// limits are checked by the protocol front doors, the sample limits by the
/// aggregator, the idle timeout by maintenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest gRPC request, in bytes.
    pub max_message_bytes: usize,
    /// Most samples in one request.
    pub max_batch_samples: usize,
    /// Most per-sample rejection reasons returned in one response.
    pub max_rejections_reported: usize,
    /// How far in the past a sample may be and still be accepted.
    #[serde(with = "humantime_serde")]
    pub lateness_window: Duration,
    /// How far ahead of the daemon's clock a sample may be.
    #[serde(with = "humantime_serde")]
    pub max_future_skew: Duration,
    /// Most distinct series held in memory.
    pub max_series: usize,
    /// Most in-memory minute accumulators; beyond it ingest answers
    /// `RESOURCE_EXHAUSTED` so memory stays bounded.
    pub max_pending_slots: usize,
    /// A series with no samples for this long has its in-memory state
    /// dropped.
    #[serde(with = "humantime_serde")]
    pub series_idle_timeout: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            max_message_bytes: 16 * 1024 * 1024,
            max_batch_samples: 100_000,
            max_rejections_reported: 100,
            lateness_window: secs(HOUR),
            max_future_skew: secs(5 * MINUTE),
            max_series: 1_000_000,
            max_pending_slots: 4_000_000,
            series_idle_timeout: secs(2 * HOUR),
        }
    }
}

impl IngestConfig {
    /// `hour_retention` is `retention.hour`: a late sample must not land in
    /// an hour document that has already expired.
    pub(crate) fn check(&self, hour_retention: Duration, p: &mut Problems) {
        p.require(
            (1024..=PROTOBUF_MAX_MESSAGE).contains(&self.max_message_bytes),
            "ingest.max_message_bytes",
            format!("must be between 1024 and {PROTOBUF_MAX_MESSAGE} (protobuf's limit)"),
        );
        p.at_least(self.max_batch_samples, 1, "ingest.max_batch_samples");
        p.positive(self.lateness_window, "ingest.lateness_window");
        p.require(
            self.lateness_window < hour_retention,
            "ingest.lateness_window",
            format!(
                "{} must be shorter than retention.hour ({}), or late samples would land \
                 in hour documents that have already expired",
                format_duration(self.lateness_window),
                format_duration(hour_retention)
            ),
        );
        p.at_most(self.max_future_skew, secs(DAY), "ingest.max_future_skew");
        p.at_least(self.max_series, 1, "ingest.max_series");
        p.at_least(self.max_pending_slots, 1, "ingest.max_pending_slots");
        p.positive(self.series_idle_timeout, "ingest.series_idle_timeout");
    }
}

#[derive(Debug, Clone)]
pub struct IngestLimits {
    /// Samples per request (a stream message counts as a request).
    pub max_batch_samples: usize,
}

/// Closes ingest for good at shutdown. Every ingest holds the read side
/// while it folds samples, and `close` takes the write side, so once `close`
/// returns no request is mid-ingest and none will start: every acknowledged
/// sample is in the aggregator before the final flush drains it, even if a
/// client keeps its connection open past the listener's grace period.
#[derive(Default)]
pub struct IngestGate {
    closed: parking_lot::RwLock<bool>,
}

impl IngestGate {
    pub fn close(&self) {
        *self.closed.write() = true;
    }
}

pub struct IngestService {
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    limits: IngestLimits,
    gate: Arc<IngestGate>,
}

impl IngestService {
    pub fn new(
        agg: Arc<Aggregator>,
        rollups: Arc<Rollups>,
        limits: IngestLimits,
        gate: Arc<IngestGate>,
    ) -> IngestService {
        IngestService {
            agg,
            rollups,
            limits,
            gate,
        }
    }

    /// Ingests one message; `message_index` is echoed in rejections.
    fn ingest_one(
        &self,
        req: &pb::PushRequest,
        rpc: &'static str,
    ) -> Result<IngestOutcome, Status> {
        let samples: usize = req
            .sources
            .iter()
            .flat_map(|s| s.series.iter())
            .map(|s| s.values.len().max(s.timestamps_ms.len()))
            .sum();
        if samples > self.limits.max_batch_samples {
            metrics::counter!("tally_ingest_requests_total", "rpc" => rpc, "outcome" => "too_large").increment(1);
            return Err(Status::invalid_argument(format!(
                "batch holds {samples} samples; the limit is {} (ingest.max_batch_samples): split it",
                self.limits.max_batch_samples
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
        let mut batches = Vec::with_capacity(req.sources.iter().map(|s| s.series.len()).sum());
        for (si, src) in req.sources.iter().enumerate() {
            let bad_groups = Rollups::check_declaration(&src.groups).err();
            for (mi, series) in src.series.iter().enumerate() {
                let b = SeriesBatch {
                    source: &src.source,
                    metric: &series.metric,
                    kind: kind_from_proto(series.kind),
                    timestamps_ms: &series.timestamps_ms,
                    values: &series.values,
                    source_index: si as u32,
                    series_index: mi as u32,
                };
                match &bad_groups {
                    Some(why) => {
                        refused.reject_series(cap, &b, RejectReason::InvalidGroup, || why.clone())
                    }
                    None => batches.push(b),
                }
            }
            if bad_groups.is_none() {
                self.rollups
                    .declare(&src.source, &src.groups, now_ms.div_euclid(1000));
            }
        }
        let closed = self.gate.closed.read();
        if *closed {
            return Err(Status::unavailable(
                "tallyd is shutting down; send to another instance or retry later",
            ));
        }
        let out = self.agg.ingest(&batches, now_ms);
        drop(closed);
        refused.merge(out, cap);
        record(&refused, rpc);
        Ok(refused)
    }
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

pub fn kind_from_proto(k: i32) -> Option<SampleKind> {
    match pb::SampleKind::try_from(k).ok()? {
        pb::SampleKind::Gauge => Some(SampleKind::Gauge),
        pb::SampleKind::DeltaCounter => Some(SampleKind::DeltaCounter),
        pb::SampleKind::CumulativeCounter => Some(SampleKind::CumulativeCounter),
        pb::SampleKind::Unspecified => None,
    }
}

pub fn kind_to_proto(k: Option<SampleKind>) -> pb::SampleKind {
    match k {
        Some(SampleKind::Gauge) => pb::SampleKind::Gauge,
        Some(SampleKind::DeltaCounter) => pb::SampleKind::DeltaCounter,
        Some(SampleKind::CumulativeCounter) => pb::SampleKind::CumulativeCounter,
        None => pb::SampleKind::Unspecified,
    }
}

fn reason_to_proto(r: RejectReason) -> pb::RejectReason {
    match r {
        RejectReason::InvalidSource => pb::RejectReason::InvalidSource,
        RejectReason::InvalidMetric => pb::RejectReason::InvalidMetric,
        RejectReason::InvalidKind => pb::RejectReason::InvalidKind,
        RejectReason::NonFiniteValue => pb::RejectReason::NonFiniteValue,
        RejectReason::TooOld => pb::RejectReason::TooOld,
        RejectReason::TooFarAhead => pb::RejectReason::TooFarAhead,
        RejectReason::LengthMismatch => pb::RejectReason::LengthMismatch,
        RejectReason::KindConflict => pb::RejectReason::KindConflict,
        RejectReason::OutOfOrder => pb::RejectReason::OutOfOrder,
        RejectReason::NegativeDelta => pb::RejectReason::NegativeDelta,
        RejectReason::SeriesLimit => pb::RejectReason::SeriesLimit,
        RejectReason::InvalidGroup => pb::RejectReason::InvalidGroup,
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
        let out = self.ingest_one(request.get_ref(), "push")?;
        let mut b = ResponseBuilder::new(self.agg.limits().max_rejections_reported);
        b.add(out, 0);
        Ok(Response::new(b.resp))
    }

    async fn push_stream(
        &self,
        request: Request<Streaming<pb::PushRequest>>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        let mut stream = request.into_inner();
        let mut b = ResponseBuilder::new(self.agg.limits().max_rejections_reported);
        let mut index = 0u32;
        while let Some(msg) = stream.message().await? {
            match self.ingest_one(&msg, "push_stream") {
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
