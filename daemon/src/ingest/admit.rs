//! The admission every protocol shares: request limits, backpressure, the
//! token's sources, the sources' group declarations and their labels are
//! checked here, and what passes is folded into the aggregator. Each front
//! door (tally.v1, OTLP, remote-write) first turns its request into a
//! `tally.v1.PushRequest`, then turns the [`IngestOutcome`] or
//! [`IngestError`] back into its own protocol's answer.
//!
//! Backpressure: when the aggregator has reached its memory bound (the store
//! is behind), a request is refused whole before anything is taken, so a
//! client can retry the same batch safely.

use std::sync::Arc;
use std::time::Duration;

use tally_proto::v1 as pb;

use super::builder::Budget;
use super::IngestGate;
use crate::aggregator::{Aggregator, IngestOutcome, RejectReason, SeriesBatch};
use crate::auth::Grant;
use crate::labels::LabelArena;
use crate::model::SampleKind;
use crate::rollup::Rollups;

/// Which front door a request came through, for the ingest metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `tally.v1.Ingest/Push`.
    TallyPush,
    /// `tally.v1.Ingest/PushStream`.
    TallyPushStream,
    /// OTLP `MetricsService/Export` over gRPC.
    OtlpGrpc,
    /// OTLP `POST /v1/metrics`.
    OtlpHttp,
    /// Prometheus remote-write 1.0, `POST /api/v1/write`.
    RemoteWrite,
}

impl Protocol {
    /// The `protocol` label of the ingest metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::TallyPush | Protocol::TallyPushStream => "tally",
            Protocol::OtlpGrpc => "otlp_grpc",
            Protocol::OtlpHttp => "otlp_http",
            Protocol::RemoteWrite => "remote_write",
        }
    }

    /// The `rpc` label: the call within the protocol.
    pub fn rpc(self) -> &'static str {
        match self {
            Protocol::TallyPush => "push",
            Protocol::TallyPushStream => "push_stream",
            Protocol::OtlpGrpc | Protocol::OtlpHttp => "export",
            Protocol::RemoteWrite => "write",
        }
    }
}

/// How long a client refused for backpressure should wait before retrying:
/// about one flush, after which the store has usually caught up a step.
pub const PUSHBACK_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A request refused whole: nothing of it was taken.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(
        "batch holds {samples} samples; the limit is {limit} (ingest.max_batch_samples): split it"
    )]
    TooLarge { samples: usize, limit: usize },
    #[error("the daemon holds {pending} unflushed slots (ingest.max_pending_slots = {limit}): the store is behind; retry this batch with backoff")]
    Pushback { pending: usize, limit: usize },
    #[error("the request holds more than {samples} samples (ingest.max_batch_samples) or more than {bytes} bytes of metric names and labels once its points are expanded into series (four times ingest.max_message_bytes): split it")]
    ConvertedTooLarge { samples: usize, bytes: usize },
    #[error("tallyd is shutting down; send to another instance or retry later")]
    ShuttingDown,
    #[error("no source of this request may be pushed with this token: {0}")]
    Denied(String),
}

impl IngestError {
    /// The `outcome` label of `tally_ingest_requests_total`.
    fn outcome(&self) -> &'static str {
        match self {
            IngestError::TooLarge { .. } | IngestError::ConvertedTooLarge { .. } => "too_large",
            IngestError::Pushback { .. } => "pushback",
            IngestError::ShuttingDown => "shutting_down",
            IngestError::Denied(_) => "denied",
        }
    }

    /// True when the same request may succeed later, so the client should
    /// keep it and retry with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            IngestError::Pushback { .. } | IngestError::ShuttingDown
        )
    }
}

/// Admits requests of every protocol into the aggregator.
pub struct Ingestor {
    agg: Arc<Aggregator>,
    rollups: Arc<Rollups>,
    gate: Arc<IngestGate>,
}

impl Ingestor {
    pub fn new(agg: Arc<Aggregator>, rollups: Arc<Rollups>, gate: Arc<IngestGate>) -> Ingestor {
        Ingestor { agg, rollups, gate }
    }

    /// The `[ingest]` limits requests are held to.
    pub fn limits(&self) -> &super::IngestConfig {
        self.agg.limits()
    }

    /// The budget a converted request gets: the sample limit, and four
    /// times the message limit in names and labels (histograms repeat each
    /// point's labels per bucket).
    pub fn budget(&self) -> Budget {
        let limits = self.limits();
        Budget {
            samples: limits.max_batch_samples,
            bytes: limits.max_message_bytes.saturating_mul(4),
        }
    }

    /// Counts and returns the refusal of a request that does not fit its
    /// [`Budget`] once converted.
    pub fn too_large(&self, protocol: Protocol, budget: Budget) -> IngestError {
        let e = IngestError::ConvertedTooLarge {
            samples: budget.samples,
            bytes: budget.bytes,
        };
        count_request(protocol, e.outcome());
        e
    }

    /// Counts a request refused because it could not be read (a body that
    /// does not decode, an unsupported content type or encoding).
    pub fn count_unread(&self, protocol: Protocol) {
        count_request(protocol, "invalid");
    }

    /// Checks and folds one request. `refused` holds what the front door
    /// already rejected while converting its protocol's request (it is
    /// counted in the metrics and the outcome like the rest).
    pub fn ingest(
        &self,
        req: &pb::PushRequest,
        grant: &Grant,
        protocol: Protocol,
        refused: IngestOutcome,
    ) -> Result<IngestOutcome, IngestError> {
        let result = self.admit(req, grant, refused);
        match &result {
            Ok(out) => record(out, protocol),
            Err(e) => count_request(protocol, e.outcome()),
        }
        result
    }

    fn admit(
        &self,
        req: &pb::PushRequest,
        grant: &Grant,
        mut refused: IngestOutcome,
    ) -> Result<IngestOutcome, IngestError> {
        let limits = self.agg.limits();
        let samples = samples_in(req);
        if samples > limits.max_batch_samples {
            return Err(IngestError::TooLarge {
                samples,
                limit: limits.max_batch_samples,
            });
        }
        if self.agg.over_memory_bound() {
            return Err(IngestError::Pushback {
                pending: self.agg.pending_slots(),
                limit: limits.max_pending_slots,
            });
        }
        let cap = limits.max_rejections_reported;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let labels = encode_labels(req, limits.max_labels);
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
            let why = refused.rejections.first().map_or("", |r| r.detail.as_str());
            return Err(IngestError::Denied(why.to_owned()));
        }
        let Some(open) = self.gate.enter() else {
            return Err(IngestError::ShuttingDown);
        };
        let out = self.agg.ingest(&batches, now_ms);
        drop(open);
        refused.merge(out, cap);
        Ok(refused)
    }
}

/// Samples a request carries, counting each series' longer array (a series
/// whose arrays disagree is rejected whole, all of it counted).
pub fn samples_in(req: &pb::PushRequest) -> usize {
    req.sources
        .iter()
        .flat_map(|s| s.series.iter())
        .map(|s| s.values.len().max(s.timestamps_ms.len()))
        .sum()
}

pub(crate) fn kind_from_proto(k: i32) -> Option<SampleKind> {
    match pb::SampleKind::try_from(k).ok()? {
        pb::SampleKind::Gauge => Some(SampleKind::Gauge),
        pb::SampleKind::DeltaCounter => Some(SampleKind::DeltaCounter),
        pb::SampleKind::CumulativeCounter => Some(SampleKind::CumulativeCounter),
        pb::SampleKind::Unspecified => None,
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

fn count_request(protocol: Protocol, outcome: &'static str) {
    metrics::counter!(
        "tally_ingest_requests_total",
        "protocol" => protocol.as_str(),
        "rpc" => protocol.rpc(),
        "outcome" => outcome
    )
    .increment(1);
}

fn record(out: &IngestOutcome, protocol: Protocol) {
    count_request(protocol, "ok");
    let p = protocol.as_str();
    metrics::counter!("tally_samples_accepted_total", "protocol" => p).increment(out.accepted);
    for reason in RejectReason::ALL {
        let n = out.rejected_by_reason[reason as usize];
        if n > 0 {
            metrics::counter!("tally_samples_rejected_total", "protocol" => p, "reason" => reason.as_str())
                .increment(n);
        }
    }
    if out.counter_resets > 0 {
        metrics::counter!("tally_counter_resets_total").increment(out.counter_resets);
    }
}
