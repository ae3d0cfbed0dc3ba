//! `tally.v1.Ingest` on the wire: the service's routes, wired by hand
//! around a codec that takes each request's bytes as they came.
//!
//! Why not the generated server: its codec hands over only the decoded
//! message, owning every string (see [`crate::ingest::view`]), so the
//! write-ahead log had to encode every request again (about 8% of the
//! daemon's CPU at one sample per series per message), and prost decoded it
//! through tonic's segmented buffer, a call per byte advanced. Here the
//! codec only takes a request's bytes as one contiguous buffer (a copy of at
//! most `ingest.max_message_bytes`), a [`WirePush`]; the handler reads them
//! as a borrowed view and the log records them as they came: the log's
//! request record is the request's protobuf encoding either way, and the
//! bytes decode to exactly what was folded. Compression and message limits
//! are tonic's, as before.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use tally_proto::v1 as pb;
use tonic::body::Body;
use tonic::codegen::{http, Body as HttpBody, BoxFuture, Service, StdError};
use tonic::server::{ClientStreamingService, Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status, Streaming};

use super::ingest::{IngestService, WirePush};
use super::raw_codec::RawCodec;
use crate::listen::on_shared_if_large;

/// The routes' codec: requests as their bytes, [`WirePush`].
type PushCodec = RawCodec<pb::PushResponse, WirePush>;

/// The `tally.v1.Ingest` service: `Push` and `PushStream`.
#[derive(Clone)]
pub struct IngestServer {
    inner: Arc<IngestService>,
    max_decoding_message_size: usize,
}

impl IngestServer {
    /// Serves `inner`, refusing messages over `max_decoding_message_size`.
    pub fn new(inner: IngestService, max_decoding_message_size: usize) -> IngestServer {
        IngestServer {
            inner: Arc::new(inner),
            max_decoding_message_size,
        }
    }

    fn grpc(&self) -> Grpc<PushCodec> {
        Grpc::new(PushCodec::default())
            .apply_max_message_size_config(Some(self.max_decoding_message_size), None)
    }
}

impl NamedService for IngestServer {
    const NAME: &'static str = pb::ingest_server::SERVICE_NAME;
}

struct Push(Arc<IngestService>);

impl UnaryService<WirePush> for Push {
    type Response = pb::PushResponse;
    type Future = BoxFuture<Response<pb::PushResponse>, Status>;

    fn call(&mut self, request: Request<WirePush>) -> Self::Future {
        let inner = self.0.clone();
        let len = request.get_ref().bytes.len();
        Box::pin(on_shared_if_large(
            len,
            async move { inner.push(request).await },
        ))
    }
}

struct PushStream(Arc<IngestService>);

impl ClientStreamingService<WirePush> for PushStream {
    type Response = pb::PushResponse;
    type Future = BoxFuture<Response<pb::PushResponse>, Status>;

    fn call(&mut self, request: Request<Streaming<WirePush>>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { IngestService::push_stream(inner, request).await })
    }
}

impl<B> Service<http::Request<B>> for IngestServer
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
            "/tally.v1.Ingest/Push" => {
                Box::pin(async move { Ok(grpc.unary(Push(inner), req).await) })
            }
            "/tally.v1.Ingest/PushStream" => {
                Box::pin(async move { Ok(grpc.client_streaming(PushStream(inner), req).await) })
            }
            _ => Box::pin(async move { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}
