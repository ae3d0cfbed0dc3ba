//! Prometheus remote-write 1.0: `POST /api/v1/write`, a snappy-compressed
//! `prometheus.WriteRequest`. 204 when every sample was taken; 400 when
//! some were refused (the rest are kept) or the body cannot be read, since
//! Prometheus drops a batch answered 4xx instead of retrying what would
//! fail again; 413 for a body too large; 415 for another type or
//! encoding; 503 with `Retry-After` for backpressure and shutdown, which
//! Prometheus retries with backoff (it retries 429 only when told to).
//!
//! A remote-write 2.0 request (`Content-Type:
//! application/x-protobuf;proto=io.prometheus.write.v2.Request`) is
//! answered as the 2.0 specification asks of a receiver that does not
//! speak it: 415, with `X-Prometheus-Remote-Write-{Samples,Histograms,
//! Exemplars}-Written: 0`, so that the sender falls back to 1.0 (or its
//! operator sees why nothing was written) instead of taking a 2xx for a
//! write.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::{grant, media, refusal, text, unread, Inflated, PushState};
use crate::auth::Grant;
use crate::ingest::remote_write::{self, ParseError};
use crate::ingest::{first_problems, Protocol};
use axum::http::HeaderValue;

pub(super) async fn write(
    State(s): State<PushState>,
    g: Option<Extension<Grant>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw = match inflate(&headers, &body, s.ingest.limits().max_message_bytes) {
        Ok(raw) => raw,
        Err((status, msg)) => {
            unread(&s.ingest, Protocol::RemoteWrite);
            return unwritten(text(status, None, msg));
        }
    };
    let ingest = &s.ingest;
    let known = |source: &str, metric: &str, labels: &[(&str, &str)]| {
        ingest.known_kind(source, metric, labels)
    };
    let parse = remote_write::Parse {
        cfg: &s.remote_write,
        book: ingest.metadata(),
        cap: ingest.limits().max_rejections_reported,
        budget: ingest.budget(),
        known: &known,
    };
    let (view, refused) = match parse.view(raw.bytes()) {
        Ok(parsed) => parsed,
        Err(ParseError::Full) => {
            let e = ingest.too_large(Protocol::RemoteWrite, parse.budget);
            return text(StatusCode::PAYLOAD_TOO_LARGE, None, e.to_string());
        }
        Err(ParseError::Wire(e)) => {
            unread(ingest, Protocol::RemoteWrite);
            let msg = format!("the body is not a prometheus.WriteRequest: {e}");
            return unwritten(text(StatusCode::BAD_REQUEST, None, msg));
        }
    };
    let outcome = ingest
        .ingest_read(&view, &grant(g), Protocol::RemoteWrite, refused)
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

/// A body refused before the handler reads it (too large, too slow):
/// plain text, as the other answers.
pub(super) fn refuse_body(_: &HeaderMap, status: StatusCode, message: String) -> Response {
    unwritten(text(status, None, message))
}

/// The protobuf message remote-write 1.0 sends, by its full name.
const V1_MESSAGE: &str = "prometheus.WriteRequest";
/// The message remote-write 2.0 sends, which this receiver does not read.
const V2_MESSAGE: &str = "io.prometheus.write.v2.Request";

/// The response headers in which a remote-write 2.0 receiver reports what
/// it wrote.
const WRITTEN_HEADERS: [&str; 3] = [
    "x-prometheus-remote-write-samples-written",
    "x-prometheus-remote-write-histograms-written",
    "x-prometheus-remote-write-exemplars-written",
];

/// Says on a refusal that nothing was written, in the headers a 2.0 sender
/// reads (a 1.0 sender ignores them).
fn unwritten(mut r: Response) -> Response {
    for name in WRITTEN_HEADERS {
        r.headers_mut().insert(name, HeaderValue::from_static("0"));
    }
    r
}

/// The `proto` parameter of a `Content-Type` (`application/x-protobuf;
/// proto=...`), unquoted; empty when absent.
fn proto_param(headers: &HeaderMap) -> String {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return String::new();
    };
    value
        .split(';')
        .skip(1)
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("proto"))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .unwrap_or_default()
}

/// The body inflated, once its type and encoding say it is remote-write 1.0.
fn inflate(
    headers: &HeaderMap,
    body: &Bytes,
    max: usize,
) -> Result<Inflated, (StatusCode, String)> {
    let ct = media(headers, header::CONTENT_TYPE);
    if !matches!(ct.as_str(), "application/x-protobuf" | "") {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type {ct:?} is not supported: remote-write 1.0 sends application/x-protobuf"),
        ));
    }
    match proto_param(headers).as_str() {
        "" | V1_MESSAGE => {}
        V2_MESSAGE => {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("remote-write 2.0 ({V2_MESSAGE}) is not supported: send remote-write 1.0 ({V1_MESSAGE}; in Prometheus, protobuf_message: {V1_MESSAGE})"),
            ))
        }
        other => {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("proto={other:?} is not supported: send remote-write 1.0 ({V1_MESSAGE})"),
            ))
        }
    }
    let enc = media(headers, header::CONTENT_ENCODING);
    if enc != "snappy" {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {enc:?} is not supported: remote-write 1.0 bodies are snappy-compressed"),
        ));
    }
    Inflated::unsnappy(body, max).map_err(|e| (e.status(), e.message()))
}
