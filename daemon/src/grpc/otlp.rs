//! OTLP/gRPC: `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`
//! on the ingest port, beside `tally.v1`, so OpenTelemetry SDKs and
//! Collectors need only this port. The mapping to Tally's model is
//! [`crate::ingest::otlp`]'s; this file answers in OTLP's terms: refused
//! points as `partial_success`, backpressure as `RESOURCE_EXHAUSTED` with
//! `RetryInfo` (without it, OTLP clients must not retry that code), a
//! request too large to take as `INVALID_ARGUMENT`, one that does not
//! decode as `INVALID_ARGUMENT` with prost's message.
//!
//! The request comes as its bytes (`otlp_wire`'s routes take them as
//! `ingest_wire`'s do for `tally.v1`) and is read straight into a view of
//! them ([`otlp::parse`]), with no owned message on the way.

use std::sync::Arc;

use bumpalo::Bump;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::ingest::granted;
use crate::ingest::otlp::{self, OtlpConfig, ParseError};
use crate::ingest::{IngestError, Ingestor, Protocol, PUSHBACK_RETRY_AFTER};

/// An `ExportMetricsServiceRequest`'s bytes, as they came.
pub struct WireExport {
    pub bytes: Bytes,
}

impl From<Bytes> for WireExport {
    fn from(bytes: Bytes) -> WireExport {
        WireExport { bytes }
    }
}

pub struct OtlpService {
    ingest: Arc<Ingestor>,
    config: OtlpConfig,
}

impl OtlpService {
    pub fn new(ingest: Arc<Ingestor>, config: OtlpConfig) -> OtlpService {
        OtlpService { ingest, config }
    }

    /// `Export`: reads the request, admits it, answers with the points
    /// refused.
    pub(super) async fn export(
        &self,
        request: Request<WireExport>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let grant = granted(&request);
        let cap = self.ingest.limits().max_rejections_reported;
        let budget = self.ingest.budget();
        // Text the body does not hold as it is (numbers as label values,
        // `le` bounds, suffixed names) is made here, for the request.
        let arena = Bump::new();
        let bytes = &request.get_ref().bytes;
        let req = match otlp::parse(bytes, &arena, &self.config, cap, budget) {
            Ok(req) => req,
            Err(ParseError::Full) => {
                return Err(status(self.ingest.too_large(Protocol::OtlpGrpc, budget)))
            }
            Err(ParseError::Wire(e)) => {
                self.ingest.count_unread(Protocol::OtlpGrpc);
                return Err(Status::invalid_argument(e.to_string()));
            }
        };
        let refused = req.refused.clone();
        let out = self
            .ingest
            .ingest_read(&req.view, &grant, Protocol::OtlpGrpc, refused)
            .await
            .map_err(status)?;
        Ok(Response::new(ExportMetricsServiceResponse {
            partial_success: otlp::partial_success(req.rejected_points(&out), &out),
        }))
    }
}

/// The gRPC status of an OTLP request refused whole.
fn status(e: IngestError) -> Status {
    let msg = e.to_string();
    match e {
        IngestError::Pushback { .. } => Status::with_error_details(
            tonic::Code::ResourceExhausted,
            msg,
            ErrorDetails::with_retry_info(Some(PUSHBACK_RETRY_AFTER)),
        ),
        other => super::ingest::status(other),
    }
}
