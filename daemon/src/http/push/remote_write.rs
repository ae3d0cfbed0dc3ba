//! Prometheus remote-write 1.0: `POST /api/v1/write`, a snappy-compressed
//! `prometheus.WriteRequest`. 204 when every sample was taken; 400 when
//! some were refused (the rest are kept) or the body cannot be read, since
//! Prometheus drops a batch answered 4xx instead of retrying what would
//! fail again; 413 for a body too large; 415 for another type or
//! encoding; 503 with `Retry-After` for backpressure and shutdown, which
//! Prometheus retries with backoff (it retries 429 only when told to).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use prost::Message as _;
use tally_proto::prometheus::WriteRequest;

use super::{grant, media, refusal, text, unread, unsnappy, PushState};
use crate::auth::Grant;
use crate::ingest::{first_problems, remote_write, Protocol};

pub(super) async fn write(
    State(s): State<PushState>,
    g: Option<Extension<Grant>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let req = match decode(&headers, &body, s.ingest.limits().max_message_bytes) {
        Ok(req) => req,
        Err((status, msg)) => {
            unread(&s.ingest, Protocol::RemoteWrite);
            return text(status, None, msg);
        }
    };
    let cap = s.ingest.limits().max_rejections_reported;
    let budget = s.ingest.budget();
    let Ok(converted) =
        remote_write::convert(&req, &s.remote_write, s.ingest.metadata(), cap, budget)
    else {
        let e = s.ingest.too_large(Protocol::RemoteWrite, budget);
        return text(StatusCode::PAYLOAD_TOO_LARGE, None, e.to_string());
    };
    let outcome = s
        .ingest
        .ingest(
            &converted.request,
            &grant(g),
            Protocol::RemoteWrite,
            converted.refused,
        )
        .await;
    match outcome {
        Ok(out) if out.rejected == 0 => StatusCode::NO_CONTENT.into_response(),
        Ok(out) => text(
            StatusCode::BAD_REQUEST,
            None,
            format!("{} accepted; {}", out.accepted, first_problems(&out)),
        ),
        Err(e) => {
            let (status, retry) = refusal(&e, StatusCode::SERVICE_UNAVAILABLE);
            text(status, retry, e.to_string())
        }
    }
}

fn decode(
    headers: &HeaderMap,
    body: &Bytes,
    max: usize,
) -> Result<WriteRequest, (StatusCode, String)> {
    let ct = media(headers, header::CONTENT_TYPE);
    if !matches!(ct.as_str(), "application/x-protobuf" | "") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type {ct:?} is not supported: remote-write 1.0 sends application/x-protobuf"),
        ));
    }
    let enc = media(headers, header::CONTENT_ENCODING);
    if enc != "snappy" {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {enc:?} is not supported: remote-write 1.0 bodies are snappy-compressed"),
        ));
    }
    let raw = unsnappy(body, max).map_err(|e| (e.status(), e.message()))?;
    WriteRequest::decode(&raw[..]).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not a prometheus.WriteRequest: {e}"),
        )
    })
}
