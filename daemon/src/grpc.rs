//! The gRPC listener: the ingest service, the query service,
//! `grpc.health.v1` (tracking the store's health) and server reflection, on
//! one port.

use std::future::Future;
use std::sync::Arc;

use tally_proto::v1 as pb;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use crate::ingest::{kind_to_proto, IngestService};
use crate::model::Resolution;
use crate::query::{QueryEngine, QueryError};

pub struct QueryService {
    engine: Arc<QueryEngine>,
}

impl QueryService {
    pub fn new(engine: Arc<QueryEngine>) -> Self {
        QueryService { engine }
    }
}

impl From<QueryError> for Status {
    fn from(e: QueryError) -> Status {
        match e {
            QueryError::Invalid(msg) => Status::invalid_argument(msg),
            QueryError::Store(e) if e.is_retryable() => Status::unavailable(e.to_string()),
            QueryError::Store(e) => Status::internal(e.to_string()),
        }
    }
}

#[tonic::async_trait]
impl pb::query_server::Query for QueryService {
    async fn range(
        &self,
        request: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        let r = request.into_inner();
        let step = match pb::Step::try_from(r.step) {
            Ok(pb::Step::Minute) => Resolution::Minute,
            Ok(pb::Step::Hour) => Resolution::Hour,
            Ok(pb::Step::Day) => Resolution::Day,
            _ => {
                return Err(Status::invalid_argument(
                    "step must be STEP_MINUTE, STEP_HOUR or STEP_DAY",
                ))
            }
        };
        let result = self
            .engine
            .range(
                &r.source,
                &r.metric,
                r.from_ms.div_euclid(1000),
                // `to` is exclusive: round up so a sub-second end keeps its bucket.
                (r.to_ms + 999).div_euclid(1000),
                step,
            )
            .await?;
        Ok(Response::new(pb::RangeResponse {
            kind: kind_to_proto(result.kind) as i32,
            points: result
                .points
                .into_iter()
                .map(|p| pb::Point {
                    t_ms: p.t * 1000,
                    n: p.n,
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                    avg: p.avg,
                    rate: p.rate,
                })
                .collect(),
        }))
    }
}

/// Serves gRPC on `listener` until `shutdown` resolves; in-progress calls
/// finish first.
pub async fn serve(
    listener: TcpListener,
    ingest: IngestService,
    query: QueryService,
    health: tonic_health::server::HealthReporter,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    max_message_bytes: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GrpcError> {
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tally_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| GrpcError::Reflection(e.to_string()))?;
    let ingest =
        pb::ingest_server::IngestServer::new(ingest).max_decoding_message_size(max_message_bytes);
    let query = pb::query_server::QueryServer::new(query);
    health
        .set_serving::<pb::ingest_server::IngestServer<IngestService>>()
        .await;
    health
        .set_serving::<pb::query_server::QueryServer<QueryService>>()
        .await;
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(ingest)
        .add_service(query)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown,
        )
        .await
        .map_err(|e| GrpcError::Transport(e.to_string()))
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("building the reflection service: {0}")]
    Reflection(String),
    #[error("gRPC server: {0}")]
    Transport(String),
}
