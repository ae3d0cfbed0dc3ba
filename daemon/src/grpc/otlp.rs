//! OTLP/gRPC: `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`
//! on the ingest port, beside `tally.v1`, so OpenTelemetry SDKs and
//! Collectors need only this port. The mapping to Tally's model is
//! [`crate::ingest::otlp`]'s; this file answers in OTLP's terms: refused
//! points as `partial_success`, backpressure as `RESOURCE_EXHAUSTED` with
//! `RetryInfo` (without it, OTLP clients must not retry that code), a
//! request too large to take as `INVALID_ARGUMENT`.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use tonic::{Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::ingest::granted;
use crate::ingest::otlp::{self, OtlpConfig};
use crate::ingest::{IngestError, Ingestor, Protocol, PUSHBACK_RETRY_AFTER};

pub struct OtlpService {
    ingest: Arc<Ingestor>,
    config: OtlpConfig,
}

impl OtlpService {
    pub fn new(ingest: Arc<Ingestor>, config: OtlpConfig) -> OtlpService {
        OtlpService { ingest, config }
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

#[tonic::async_trait]
impl MetricsService for OtlpService {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let grant = granted(&request);
        let cap = self.ingest.limits().max_rejections_reported;
        let budget = self.ingest.budget();
        let Ok(req) = otlp::convert(request.get_ref(), &self.config, cap, budget) else {
            return Err(status(self.ingest.too_large(Protocol::OtlpGrpc, budget)));
        };
        let refused = req.converted.refused.clone();
        let out = self
            .ingest
            .ingest(&req.converted.request, &grant, Protocol::OtlpGrpc, refused)
            .await
            .map_err(status)?;
        Ok(Response::new(ExportMetricsServiceResponse {
            partial_success: otlp::partial_success(&req, &out),
        }))
    }
}
