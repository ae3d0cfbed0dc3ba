//! OTLP/HTTP: `POST /v1/metrics`, binary protobuf (`application/x-protobuf`)
//! or JSON (`application/json`), optionally gzip-compressed. Answers as the
//! OTLP specification prescribes: 200 with an `ExportMetricsServiceResponse`
//! (and `partial_success` when points were refused), 400 for a request that
//! cannot be read, 413 for one too large, 415 for an unsupported type or
//! encoding, 429 (backpressure) or 503 (shutting down) with `Retry-After`.
//! Error bodies are a `google.rpc.Status` in the request's own encoding.
//!
//! A protobuf body (inflated into a pooled buffer when gzipped) is read
//! straight into a view of its bytes ([`otlp::parse`]); a JSON body is
//! decoded by serde into OTLP's owned messages and converted
//! ([`otlp::convert`]), as JSON is rarely sent in volume.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bumpalo::Bump;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;

use super::{grant, media, refusal, unread, BodyError, Inflated, PushState};
use crate::aggregator::IngestOutcome;
use crate::auth::Grant;
use crate::ingest::otlp::{self, ParseError};
use crate::ingest::{IngestError, Protocol};

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `google.rpc.Status`, the body OTLP/HTTP errors carry.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

pub(super) async fn export(
    State(s): State<PushState>,
    g: Option<Extension<Grant>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json = match media(&headers, header::CONTENT_TYPE).as_str() {
        PROTOBUF => false,
        JSON => true,
        other => {
            unread(&s.ingest, Protocol::OtlpHttp);
            let msg = format!("Content-Type {other:?} is not supported: send {PROTOBUF} or {JSON}");
            return error(false, StatusCode::UNSUPPORTED_MEDIA_TYPE, None, msg);
        }
    };
    let raw = match inflate(&headers, &body, s.ingest.limits().max_message_bytes) {
        Ok(raw) => raw,
        Err(e) => {
            unread(&s.ingest, Protocol::OtlpHttp);
            return error(json, e.status(), None, e.message());
        }
    };
    if json {
        export_json(&s, grant(g), raw.bytes()).await
    } else {
        export_protobuf(&s, grant(g), raw.bytes()).await
    }
}

/// A protobuf body, read as a view of its bytes.
async fn export_protobuf(s: &PushState, grant: Grant, raw: &[u8]) -> Response {
    let cap = s.ingest.limits().max_rejections_reported;
    let budget = s.ingest.budget();
    // Text the body does not hold as it is (numbers as label values, `le`
    // bounds, suffixed names) is made here, for as long as the request.
    let arena = Bump::new();
    let req = match otlp::parse(raw, &arena, &s.otlp, cap, budget) {
        Ok(req) => req,
        Err(ParseError::Full) => {
            let e = s.ingest.too_large(Protocol::OtlpHttp, budget);
            return error(false, StatusCode::PAYLOAD_TOO_LARGE, None, e.to_string());
        }
        Err(ParseError::Wire(e)) => {
            unread(&s.ingest, Protocol::OtlpHttp);
            return error(false, StatusCode::BAD_REQUEST, None, not_otlp(e));
        }
    };
    let refused = req.refused.clone();
    let outcome = s
        .ingest
        .ingest_read(&req.view, &grant, Protocol::OtlpHttp, refused)
        .await;
    answer(false, outcome.map(|out| (req.rejected_points(&out), out)))
}

/// A JSON body: serde decodes it into OTLP's owned messages, which are
/// converted to an owned `tally.v1` request.
async fn export_json(s: &PushState, grant: Grant, raw: &[u8]) -> Response {
    let req: ExportMetricsServiceRequest = match serde_json::from_slice(raw) {
        Ok(req) => req,
        Err(e) => {
            unread(&s.ingest, Protocol::OtlpHttp);
            return error(true, StatusCode::BAD_REQUEST, None, not_otlp(e));
        }
    };
    let cap = s.ingest.limits().max_rejections_reported;
    let budget = s.ingest.budget();
    let Ok(converted) = otlp::convert(&req, &s.otlp, cap, budget) else {
        let e = s.ingest.too_large(Protocol::OtlpHttp, budget);
        return error(true, StatusCode::PAYLOAD_TOO_LARGE, None, e.to_string());
    };
    let refused = converted.converted.refused.clone();
    let outcome = s
        .ingest
        .ingest(
            &converted.converted.request,
            &grant,
            Protocol::OtlpHttp,
            refused,
        )
        .await;
    answer(
        true,
        outcome.map(|out| (converted.rejected_points(&out), out)),
    )
}

fn not_otlp(e: impl std::fmt::Display) -> String {
    format!("the body is not an OTLP ExportMetricsServiceRequest: {e}")
}

/// The answer to a request admission read: its refused points (how many,
/// and the outcome), or why it was refused whole.
fn answer(json: bool, outcome: Result<(u64, IngestOutcome), IngestError>) -> Response {
    match outcome {
        Ok((rejected, out)) => {
            let resp = ExportMetricsServiceResponse {
                partial_success: otlp::partial_success(rejected, &out),
            };
            let body = if json {
                // protojson leaves an unset message out rather than null.
                match resp.partial_success {
                    None => b"{}".to_vec(),
                    Some(_) => serde_json::to_vec(&resp).unwrap_or_default(),
                }
            } else {
                resp.encode_to_vec()
            };
            reply(json, StatusCode::OK, None, body)
        }
        Err(e) => {
            let (status, retry) = refusal(&e, StatusCode::TOO_MANY_REQUESTS);
            error(json, status, retry, e.to_string())
        }
    }
}

/// The body as sent, or inflated into a pooled buffer.
enum Raw<'b> {
    Plain(&'b [u8]),
    Inflated(Inflated),
}

impl Raw<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Raw::Plain(b) => b,
            Raw::Inflated(i) => i.bytes(),
        }
    }
}

/// The body, inflated as its `Content-Encoding` says.
fn inflate<'b>(headers: &HeaderMap, body: &'b Bytes, max: usize) -> Result<Raw<'b>, BodyError> {
    match media(headers, header::CONTENT_ENCODING).as_str() {
        "" | "identity" => Ok(Raw::Plain(body)),
        "gzip" => Inflated::gunzip(body, max).map(Raw::Inflated),
        other => Err(BodyError::Encoding(other.to_owned())),
    }
}

/// A body refused before the handler reads it (too large, too slow), as
/// every other OTLP/HTTP error: a `google.rpc.Status` in the encoding the
/// request named.
pub(super) fn refuse_body(headers: &HeaderMap, status: StatusCode, message: String) -> Response {
    let json = media(headers, header::CONTENT_TYPE) == JSON;
    error(json, status, None, message)
}

/// An error answer: `google.rpc.Status` with the gRPC code matching
/// `status`, in the request's encoding.
fn error(json: bool, status: StatusCode, retry: Option<HeaderValue>, message: String) -> Response {
    let code = match status {
        StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
        StatusCode::FORBIDDEN => tonic::Code::PermissionDenied,
        StatusCode::REQUEST_TIMEOUT => tonic::Code::DeadlineExceeded,
        _ => tonic::Code::InvalidArgument,
    };
    let st = RpcStatus {
        code: code as i32,
        message,
    };
    let body = if json {
        serde_json::to_vec(&st).unwrap_or_default()
    } else {
        st.encode_to_vec()
    };
    reply(json, status, retry, body)
}

fn reply(json: bool, status: StatusCode, retry: Option<HeaderValue>, body: Vec<u8>) -> Response {
    let ct = HeaderValue::from_static(if json { JSON } else { PROTOBUF });
    let mut r = (status, [(header::CONTENT_TYPE, ct)], body).into_response();
    if let Some(v) = retry {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}
