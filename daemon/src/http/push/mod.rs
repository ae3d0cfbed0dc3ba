//! The HTTP ingest endpoints: OTLP/HTTP `POST /v1/metrics` (`otlp`),
//! Prometheus remote-write `POST /api/v1/write` (`remote_write`) and
//! InfluxDB line protocol `POST /write` and `POST /api/v2/write`
//! (`influx`). All take bodies up to `ingest.max_message_bytes`, compressed
//! or not (a body that inflates past that limit is refused as it inflates,
//! so a small compressed body cannot make the daemon allocate more), and
//! need an `ingest` (or `admin`) token when tokens are on.

mod influx;
mod otlp;
mod remote_write;

use std::io::Read as _;
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

/// What the ingest endpoints need.
#[derive(Clone)]
pub struct PushState {
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

pub(super) use influx::credentials as influx_credentials;

/// Why a body could not be read.
#[derive(Debug)]
enum BodyError {
    /// Unsupported `Content-Encoding` (415).
    Encoding(String),
    /// The body inflates past the limit (413).
    TooLarge(usize),
    /// The compressed body is malformed (400).
    Corrupt(String),
}

impl BodyError {
    fn status(&self) -> StatusCode {
        match self {
            BodyError::Encoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Corrupt(_) => StatusCode::BAD_REQUEST,
        }
    }

    fn message(&self) -> String {
        match self {
            BodyError::Encoding(e) => format!("unsupported Content-Encoding {e:?}"),
            BodyError::TooLarge(max) => format!(
                "the request body inflates to more than {max} bytes (ingest.max_message_bytes): send smaller batches"
            ),
            BodyError::Corrupt(e) => format!("the request body could not be decompressed: {e}"),
        }
    }
}

/// The header's value as text, lower-cased, parameters dropped.
fn media(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Inflates a gzip body, refusing it once it passes `max` bytes.
fn gunzip(body: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| BodyError::Corrupt(e.to_string()))?;
    if out.len() > max {
        return Err(BodyError::TooLarge(max));
    }
    Ok(out)
}

/// Inflates a snappy (block format) body, refusing one that says it
/// inflates past `max` before allocating for it.
fn unsnappy(body: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    let len = snap::raw::decompress_len(body).map_err(|e| BodyError::Corrupt(e.to_string()))?;
    if len > max {
        return Err(BodyError::TooLarge(max));
    }
    snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| BodyError::Corrupt(e.to_string()))
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
