//! OTLP's `MetricsService` on the wire: its one route, `Export`, wired by
//! hand around a codec that takes each request's bytes as they came, as
//! `ingest_wire` does for `tally.v1` and for the same reason: the
//! generated server's codec hands over only the decoded message, owning
//! every string, where the handler reads a view of the bytes. The codec
//! copies a request's bytes into one contiguous buffer (at most
//! `ingest.max_message_bytes`); gzip (which OTLP exporters, the
//! Collector's by default, may use) and message limits are tonic's.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use tonic::body::Body;
use tonic::codec::CompressionEncoding;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use super::otlp::{OtlpService, WireExport};
use super::raw_codec::RawCodec;
use crate::listen::on_shared_if_large;

/// The service's full name, as OTLP clients call it.
const SERVICE: &str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
const EXPORT: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// The routes' codec: requests as their bytes, [`WireExport`].
type ExportCodec = RawCodec<ExportMetricsServiceResponse, WireExport>;

/// OTLP's `MetricsService`: `Export`.
#[derive(Clone)]
pub struct OtlpServer {
    inner: Arc<OtlpService>,
    max_decoding_message_size: usize,
}

impl OtlpServer {
    /// Serves `inner`, refusing messages over `max_decoding_message_size`.
    pub fn new(inner: OtlpService, max_decoding_message_size: usize) -> OtlpServer {
        OtlpServer {
            inner: Arc::new(inner),
            max_decoding_message_size,
        }
    }

    fn grpc(&self) -> Grpc<ExportCodec> {
        Grpc::new(ExportCodec::default())
            .accept_compressed(CompressionEncoding::Gzip)
            .apply_max_message_size_config(Some(self.max_decoding_message_size), None)
    }
}

impl NamedService for OtlpServer {
    const NAME: &'static str = SERVICE;
}

struct Export(Arc<OtlpService>);

impl UnaryService<WireExport> for Export {
    type Response = ExportMetricsServiceResponse;
    type Future = BoxFuture<Response<ExportMetricsServiceResponse>, Status>;

    fn call(&mut self, request: Request<WireExport>) -> Self::Future {
        let inner = self.0.clone();
        let len = request.get_ref().bytes.len();
        Box::pin(on_shared_if_large(len, async move {
            inner.export(request).await
        }))
    }
}

impl<B> Service<http::Request<B>> for OtlpServer
where
    B: HttpBody + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mut grpc = self.grpc();
        let inner = self.inner.clone();
        match req.uri().path() {
            EXPORT => Box::pin(async move { Ok(grpc.unary(Export(inner), req).await) }),
            _ => Box::pin(async move { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}
