//! The gRPC listener: the ingest service (`ingest`, served by the routes in
//! `ingest_wire`, which keep each request's bytes), OTLP's metrics service
//! (`otlp`, served by the routes in `otlp_wire`, which keep each
//! request's bytes too), the query service (`query`), `grpc.health.v1` (tracking the store's health) and server
//! reflection (`grpc.reflection.v1`, and `v1alpha` for older tools), on
//! one port, within the `[grpc]` limits (`config`), each connection served
//! by `server`. Conversions between the wire messages and the daemon's
//! types are in `convert`, shared by both services; `status` gives tonic's
//! own refusals their conventional codes.

mod config;
mod convert;
mod health;
mod ingest;
mod ingest_wire;
mod otlp;
mod otlp_wire;
mod query;
mod raw_codec;
mod server;
mod shared;
mod status;

use tally_proto::v1 as pb;
use tonic::service::interceptor::InterceptedService;

use crate::auth::{AuthInterceptor, Authenticator, Need};
use crate::listen::Listener;

pub use config::GrpcConfig;
pub use health::track_health;
pub use ingest::{IngestService, WirePush};
pub use otlp::OtlpService;
pub use query::QueryService;

/// What [`serve`] runs: the listener, the services behind it, the limits
/// they keep, and when to stop.
pub struct GrpcServer<H> {
    pub listener: Listener,
    /// Ingest and query calls need tokens when it is on; health and
    /// reflection never do.
    pub auth: Authenticator,
    pub ingest: IngestService,
    pub otlp: OtlpService,
    pub query: QueryService,
    /// Marks the ingest and query services serving once they are routed.
    pub health: tonic_health::server::HealthReporter,
    pub health_service: tonic_health::pb::health_server::HealthServer<H>,
    pub limits: Limits,
    /// Cancelled at shutdown: in-progress calls finish first.
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// Serves gRPC on `server.listener` until `server.shutdown` is cancelled;
/// in-progress calls finish first.
pub async fn serve<H: tonic_health::pb::health_server::Health>(
    server: GrpcServer<H>,
) -> Result<(), GrpcError> {
    let GrpcServer {
        listener,
        auth,
        ingest,
        otlp,
        query,
        health,
        health_service,
        limits,
        shutdown,
    } = server;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tally_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let Limits {
        grpc: cfg,
        max_message_bytes,
    } = limits;
    let ingest = ingest_wire::IngestServer::new(ingest, max_message_bytes);
    let otlp = otlp_wire::OtlpServer::new(otlp, max_message_bytes);
    let query = pb::query_server::QueryServer::new(query);
    health.set_serving::<ingest_wire::IngestServer>().await;
    health
        .set_serving::<pb::query_server::QueryServer<QueryService>>()
        .await;
    let routes = tonic::service::Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(InterceptedService::new(
            ingest,
            AuthInterceptor::new(auth.clone(), Need::Ingest),
        ))
        .add_service(InterceptedService::new(
            otlp,
            AuthInterceptor::new(auth.clone(), Need::Ingest),
        ))
        .add_service(shared::OnShared(InterceptedService::new(
            query,
            AuthInterceptor::new(auth, Need::Read),
        )))
        .prepare();
    let services = tower::ServiceBuilder::new()
        .layer(tower::util::MapResponseLayer::new(move |r| {
            status::conventional(r, max_message_bytes)
        }))
        .service(routes);
    let serve = server::GrpcServe::new(tower::util::BoxCloneSyncService::new(services), cfg);
    listener.run(serve, shutdown).await;
    Ok(())
}

/// The server inside each gRPC connection, serving `routes`, for harnesses
/// that run a listener in process.
#[cfg(test)]
pub(crate) fn connection_server(
    routes: tonic::service::Routes,
    cfg: GrpcConfig,
) -> impl crate::listen::Serve {
    server::GrpcServe::new(tower::util::BoxCloneSyncService::new(routes), cfg)
}

/// The bounds the listener applies to gRPC connections: the cap, and no
/// write deadline of its own (a peer that stops reading stops answering
/// pings, and keepalive closes it).
pub fn listen_limits(cfg: &GrpcConfig) -> crate::listen::Limits {
    crate::listen::Limits {
        names: crate::listen::Names::GRPC,
        max_connections: cfg.max_connections,
        reserved: 0,
        write_timeout: None,
    }
}

/// The settings [`serve`] applies.
#[derive(Debug, Clone)]
pub struct Limits {
    pub grpc: GrpcConfig,
    /// `ingest.max_message_bytes`.
    pub max_message_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("building the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}
