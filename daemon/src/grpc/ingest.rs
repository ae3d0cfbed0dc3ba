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
//! Only the gRPC side lives here; the checks are [`crate::ingest`]'s, which
//! every receiver shares.

use std::sync::Arc;

use bytes::Bytes;
use tally_proto::v1 as pb;
use tonic::{Request, Response, Status, Streaming};

use super::convert::reason_to_proto;
use crate::aggregator::IngestOutcome;
use crate::auth::Grant;
use crate::ingest::view::PushView;
use crate::ingest::{IngestError, Ingestor, Protocol};
use crate::listen::on_shared_if_large;

/// A push request's bytes, as they came: what the service's routes
/// (`ingest_wire`) hand it, so the write-ahead log can record them as they
/// are.
pub struct WirePush {
    pub bytes: Bytes,
}

impl From<Bytes> for WirePush {
    fn from(bytes: Bytes) -> WirePush {
        WirePush { bytes }
    }
}

impl WirePush {
    /// The request, borrowed from its bytes, of at most `max_series` series
    /// and sources; a message that does not decode is the client's error,
    /// and prost's message names the field.
    pub fn view(&self, max_series: usize) -> Result<PushView<'_>, Status> {
        PushView::decode(&self.bytes, max_series)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

pub struct IngestService {
    ingest: Arc<Ingestor>,
}

impl IngestService {
    pub fn new(ingest: Arc<Ingestor>) -> IngestService {
        IngestService { ingest }
    }

    /// Ingests one message; the caller numbers its rejections.
    async fn ingest_one(
        &self,
        push: &WirePush,
        grant: &Grant,
        protocol: Protocol,
    ) -> Result<IngestOutcome, Status> {
        // A series carries at least one sample to be worth its memory:
        // more series than the sample limit cannot all be accepted.
        let max_series = self.ingest.limits().max_batch_samples;
        let view = push
            .view(max_series)
            .inspect_err(|_| self.ingest.count_unread(protocol))?;
        let listed = IngestOutcome::listing(self.ingest.limits().max_rejections_reported);
        self.ingest
            .ingest_read(&view, grant, protocol, listed)
            .await
            .map_err(status)
    }
}

/// The gRPC status of a request refused whole, shared with OTLP/gRPC.
pub(super) fn status(e: IngestError) -> Status {
    let msg = e.to_string();
    match e {
        IngestError::TooLarge { .. } | IngestError::ConvertedTooLarge { .. } => {
            Status::invalid_argument(msg)
        }
        IngestError::Pushback { .. } => Status::resource_exhausted(msg),
        IngestError::ShuttingDown
        | IngestError::Log(_)
        | IngestError::StoreFailed(_)
        | IngestError::StoreRefusing(_) => Status::unavailable(msg),
        IngestError::Denied(_) => Status::permission_denied(msg),
    }
}

/// The grant the auth interceptor attached; none means authentication is
/// off, as the interceptor wraps this service whenever it is on.
pub(super) fn granted<T>(request: &Request<T>) -> Grant {
    request
        .extensions()
        .get::<Grant>()
        .cloned()
        .unwrap_or_else(Grant::open)
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

impl IngestService {
    /// `tally.v1.Ingest/Push`: one batch, answered when its samples are in
    /// the aggregator (and the log).
    pub async fn push(
        &self,
        request: Request<WirePush>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        let grant = granted(&request);
        let out = self
            .ingest_one(request.get_ref(), &grant, Protocol::TallyPush)
            .await?;
        let mut b = ResponseBuilder::new(self.ingest.limits().max_rejections_reported);
        b.add(out, 0);
        Ok(Response::new(b.resp))
    }

    /// `tally.v1.Ingest/PushStream`: many batches, one summary when the
    /// client closes the stream. Each large message is ingested on the
    /// shared runtime, as a large `Push` is (see `ingest_wire`).
    pub async fn push_stream(
        this: Arc<IngestService>,
        request: Request<Streaming<WirePush>>,
    ) -> Result<Response<pb::PushResponse>, Status> {
        let grant = granted(&request);
        let mut stream = request.into_inner();
        let mut b = ResponseBuilder::new(this.ingest.limits().max_rejections_reported);
        let mut index = 0u32;
        while let Some(msg) = stream.message().await? {
            let (me, grant) = (this.clone(), grant.clone());
            let one = on_shared_if_large(msg.bytes.len(), async move {
                me.ingest_one(&msg, &grant, Protocol::TallyPushStream).await
            });
            match one.await {
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
