//! The HTTP ingest endpoints: OTLP/HTTP `POST /v1/metrics` (`otlp`),
//! Prometheus remote-write `POST /api/v1/write` (`remote_write`) and
//! InfluxDB line protocol `POST /write` and `POST /api/v2/write`
//! (`influx`). All take bodies up to `ingest.max_message_bytes`, compressed
//! or not (a body that inflates past that limit is refused as it inflates,
//! so a small compressed body cannot make the daemon allocate more), and
//! need an `ingest` (or `admin`) token when tokens are on.

mod inflate;
mod influx;
mod otlp;
mod remote_write;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::server::{limit_body, BodyLimits};
use crate::auth::Grant;
use crate::ingest::influx::InfluxConfig;
use crate::ingest::otlp::OtlpConfig;
use crate::ingest::remote_write::RemoteWriteConfig;
use crate::ingest::{IngestError, Ingestor, Protocol, PUSHBACK_RETRY_AFTER};

/// What the ingest endpoints need. Cloned for every request (axum hands
/// each handler and middleware its own copy), so it is one shared
/// reference: owned, the protocols' lists of names were a dozen
/// allocations and frees per request, about 1% of the daemon's CPU on a
/// fleet's small remote-write requests.
pub type PushState = Arc<PushShared>;

/// The ingest endpoints' settings and ingestor, behind [`PushState`].
pub struct PushShared {
    pub ingest: Arc<Ingestor>,
    pub otlp: OtlpConfig,
    pub remote_write: RemoteWriteConfig,
    pub influx: InfluxConfig,
}

/// The ingest routes, each reading bodies up to `ingest.max_message_bytes`
/// within `body_timeout` (`http.body_read_timeout`) and refusing them in
/// its protocol's error format.
pub(super) fn router(state: PushState, body_timeout: Duration) -> Router {
    let limits = |refusal| BodyLimits {
        max: state.ingest.limits().max_message_bytes,
        setting: "ingest.max_message_bytes",
        timeout: body_timeout,
        refusal,
    };
    let otlp = Router::new()
        .route("/v1/metrics", post(otlp::export))
        .with_state(state.clone());
    let rw = Router::new()
        .route("/api/v1/write", post(remote_write::write))
        .with_state(state.clone());
    let influx_v1 = Router::new()
        .route(influx::V1_PATH, post(influx::write_v1))
        .with_state(state.clone());
    let influx_v2 = Router::new()
        .route(influx::V2_PATH, post(influx::write_v2))
        .with_state(state.clone());
    limit_body(otlp, limits(otlp::refuse_body))
        .merge(limit_body(rw, limits(remote_write::refuse_body)))
        .merge(limit_body(influx_v1, limits(influx::refuse_body_v1)))
        .merge(limit_body(influx_v2, limits(influx::refuse_body_v2)))
}

use inflate::{gunzip, BodyError, Inflated};
pub(super) use influx::credentials as influx_credentials;

/// The header's value as text, lower-cased, parameters dropped.
fn media(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// The grant the auth middleware attached; none means tokens are off.
fn grant(grant: Option<axum::Extension<Grant>>) -> Grant {
    grant.map_or_else(Grant::open, |axum::Extension(g)| g)
}

/// The HTTP status and `Retry-After` of a request refused whole;
/// `pushback` is the status a protocol uses for backpressure.
fn refusal(e: &IngestError, pushback: StatusCode) -> (StatusCode, Option<HeaderValue>) {
    let retry = || Some(HeaderValue::from(PUSHBACK_RETRY_AFTER.as_secs()));
    match e {
        IngestError::TooLarge { .. } | IngestError::ConvertedTooLarge { .. } => {
            (StatusCode::PAYLOAD_TOO_LARGE, None)
        }
        IngestError::Pushback { .. } => (pushback, retry()),
        IngestError::ShuttingDown
        | IngestError::Log(_)
        | IngestError::StoreFailed(_)
        | IngestError::StoreRefusing(_) => (StatusCode::SERVICE_UNAVAILABLE, retry()),
        IngestError::Denied(_) => (StatusCode::FORBIDDEN, None),
    }
}

/// A plain-text answer, with `Retry-After` when given.
fn text(status: StatusCode, retry_after: Option<HeaderValue>, msg: String) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    if let Some(v) = retry_after {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Counts a request refused before it could be read.
fn unread(ingest: &Ingestor, protocol: Protocol) {
    ingest.count_unread(protocol);
}

#[cfg(test)]
mod tests;
