//! OTLP/HTTP: `POST /v1/metrics`, binary protobuf (`application/x-protobuf`)
//! or JSON (`application/json`), optionally gzip-compressed. Answers as the
//! OTLP specification prescribes: 200 with an `ExportMetricsServiceResponse`
//! (and `partial_success` when points were refused), 400 for a request that
//! cannot be read, 413 for one too large, 415 for an unsupported type or
//! encoding, 429 (backpressure) or 503 (shutting down) with `Retry-After`.
//! Error bodies are a `google.rpc.Status` in the request's own encoding.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;

use super::{grant, gunzip, media, refusal, unread, BodyError, PushState};
use crate::auth::Grant;
use crate::ingest::otlp;
use crate::ingest::Protocol;

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
    let req = match decode(&headers, &body, json, s.ingest.limits().max_message_bytes) {
        Ok(req) => req,
        Err((status, msg)) => {
            unread(&s.ingest, Protocol::OtlpHttp);
            return error(json, status, None, msg);
        }
    };
    let cap = s.ingest.limits().max_rejections_reported;
    let budget = s.ingest.budget();
    let Ok(converted) = otlp::convert(&req, &s.otlp, cap, budget) else {
        let e = s.ingest.too_large(Protocol::OtlpHttp, budget);
        return error(json, StatusCode::PAYLOAD_TOO_LARGE, None, e.to_string());
    };
    let refused = converted.converted.refused.clone();
    let outcome = s
        .ingest
        .ingest(
            &converted.converted.request,
            &grant(g),
            Protocol::OtlpHttp,
            refused,
        )
        .await;
    match outcome {
        Ok(out) => {
            let resp = ExportMetricsServiceResponse {
                partial_success: otlp::partial_success(&converted, &out),
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

/// The request, or the status and message to refuse it with.
fn decode(
    headers: &HeaderMap,
    body: &Bytes,
    json: bool,
    max: usize,
) -> Result<ExportMetricsServiceRequest, (StatusCode, String)> {
    let fail = |e: BodyError| (e.status(), e.message());
    let raw: Cow<'_, [u8]> = match media(headers, header::CONTENT_ENCODING).as_str() {
        "" | "identity" => Cow::Borrowed(body),
        "gzip" => Cow::Owned(gunzip(body, max).map_err(fail)?),
        other => return Err(fail(BodyError::Encoding(other.to_owned()))),
    };
    let bad = |e: String| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not an OTLP ExportMetricsServiceRequest: {e}"),
        )
    };
    if json {
        serde_json::from_slice(&raw).map_err(|e| bad(e.to_string()))
    } else {
        ExportMetricsServiceRequest::decode(&raw[..]).map_err(|e| bad(e.to_string()))
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
