//! InfluxDB line protocol: `POST /write` (the v1 API: `db`, `rp`,
//! `precision`, `u`/`p`) and `POST /api/v2/write` (the v2 API: `bucket`,
//! `org`, `precision`), plain or gzip. What the lines mean is decided in
//! [`crate::ingest::influx`]; `db`, `rp`, `bucket` and `org` are accepted
//! and not used (Tally has one namespace; series are told apart by their
//! source).
//!
//! Answers follow InfluxDB's own: 204 when every line was taken; 400 when
//! some were refused (the rest are kept), with a JSON error naming the
//! first refused lines and, on v2, the first one's number in `line`; 400
//! for a bad `precision`; 413 for a body too large; 415 for another
//! `Content-Encoding`; 429 (backpressure) and 503 (shutting down, store
//! failed) with `Retry-After`. Errors are `{"error": …}` on v1 and
//! `{"code": …, "message": …}` on v2, as InfluxDB writes them.
//!
//! Credentials: InfluxDB clients send a token as `Authorization: Token …`
//! (v2, and v1 clients of InfluxDB 2), as the password of HTTP Basic
//! authentication or the `p` query parameter (v1). [`credentials`] hands
//! any of them to the token check as the bearer token it reads.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::Engine as _;
use bumpalo::Bump;
use serde::Deserialize;

use super::{grant, gunzip, media, refusal, unread, BodyError, PushState};
use crate::auth::Grant;
use crate::ingest::influx::{self, LineProblem, Precision};
use crate::ingest::Protocol;

/// The write endpoints' paths.
pub(super) const V1_PATH: &str = "/write";
pub(super) const V2_PATH: &str = "/api/v2/write";

/// Refused lines named in an answer.
const SHOWN: usize = 3;

/// The query parameters of both APIs that Tally reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Params {
    #[serde(default)]
    precision: Option<String>,
}

/// Which of InfluxDB's write APIs a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    V1,
    V2,
}

impl Api {
    fn protocol(self) -> Protocol {
        match self {
            Api::V1 => Protocol::InfluxV1,
            Api::V2 => Protocol::InfluxV2,
        }
    }
}

pub(super) async fn write_v1(
    State(s): State<PushState>,
    g: Option<Extension<Grant>>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write(Api::V1, s, grant(g), params, headers, body).await
}

pub(super) async fn write_v2(
    State(s): State<PushState>,
    g: Option<Extension<Grant>>,
    Query(params): Query<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    write(Api::V2, s, grant(g), params, headers, body).await
}

async fn write(
    api: Api,
    s: PushState,
    grant: Grant,
    params: Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let protocol = api.protocol();
    let precision = params.precision.as_deref().unwrap_or("ns");
    let precision = match (api, Precision::parse(precision)) {
        (Api::V1, Some(p)) => p,
        (Api::V2, Some(p)) if ["ns", "us", "ms", "s"].contains(&precision) => p,
        _ => {
            unread(&s.ingest, protocol);
            let allowed = match api {
                Api::V1 => "n, ns, u, us, ms, s, m or h",
                Api::V2 => "ns, us, ms or s",
            };
            let msg = format!("precision {precision:?} is not one of {allowed}");
            return error(api, StatusCode::BAD_REQUEST, None, msg, None);
        }
    };
    let max = s.ingest.limits().max_message_bytes;
    let raw: Cow<'_, [u8]> = match media(&headers, header::CONTENT_ENCODING).as_str() {
        "" | "identity" => Cow::Borrowed(&body),
        "gzip" => match gunzip(&body, max) {
            Ok(raw) => Cow::Owned(raw),
            Err(e) => return body_error(api, &s, e),
        },
        other => return body_error(api, &s, BodyError::Encoding(other.to_owned())),
    };
    let now_ms = chrono::Utc::now().timestamp_millis();
    let cap = s.ingest.limits().max_rejections_reported;
    let budget = s.ingest.budget();
    let arena = Bump::new();
    let read = influx::convert(&raw, &arena, precision, now_ms, &s.influx, cap, budget);
    let Ok(converted) = read else {
        let e = s.ingest.too_large(protocol, budget);
        return error(
            api,
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            e.to_string(),
            None,
        );
    };
    if converted.string_fields > 0 {
        metrics::counter!("tally_influx_string_fields_total").increment(converted.string_fields);
    }
    let refused = converted.refused.clone();
    let outcome = s
        .ingest
        .ingest_read(&converted.view, &grant, protocol, refused)
        .await;
    match outcome {
        Ok(out) if out.rejected == 0 => StatusCode::NO_CONTENT.into_response(),
        Ok(out) => {
            let (problems, count) = converted.refused_lines(&out, SHOWN);
            let first = problems.first().map(|p| p.line);
            let msg = partial(&problems, count, converted.lines, out.rejections_truncated);
            error(api, StatusCode::BAD_REQUEST, None, msg, first)
        }
        Err(e) => {
            let (status, retry) = refusal(&e, StatusCode::TOO_MANY_REQUESTS);
            error(api, status, retry, e.to_string(), None)
        }
    }
}

/// The message of an answer some of whose lines were refused.
fn partial(problems: &[LineProblem], refused: u64, lines: u32, truncated: bool) -> String {
    let mut msg = format!("partial write: {refused} of {lines} lines refused, the rest kept: ");
    for (i, p) in problems.iter().enumerate() {
        if i > 0 {
            msg.push_str("; ");
        }
        msg.push_str(&p.to_string());
    }
    if refused > problems.len() as u64 || truncated {
        msg.push_str("; …");
    }
    msg
}

fn body_error(api: Api, s: &PushState, e: BodyError) -> Response {
    unread(&s.ingest, api.protocol());
    error(api, e.status(), None, e.message(), None)
}

/// A body refused before the handler (too large, too slow), in v1's shape.
pub(super) fn refuse_body_v1(_: &HeaderMap, status: StatusCode, message: String) -> Response {
    error(Api::V1, status, None, message, None)
}

/// A body refused before the handler, in v2's shape.
pub(super) fn refuse_body_v2(_: &HeaderMap, status: StatusCode, message: String) -> Response {
    error(Api::V2, status, None, message, None)
}

/// An error answer in the API's own shape.
fn error(
    api: Api,
    status: StatusCode,
    retry: Option<HeaderValue>,
    message: String,
    line: Option<u32>,
) -> Response {
    let body = match api {
        Api::V1 => serde_json::json!({ "error": message }),
        Api::V2 => {
            let code = match status {
                StatusCode::PAYLOAD_TOO_LARGE => "request too large",
                StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported media type",
                StatusCode::TOO_MANY_REQUESTS => "too many requests",
                StatusCode::SERVICE_UNAVAILABLE => "unavailable",
                StatusCode::FORBIDDEN => "forbidden",
                _ => "invalid",
            };
            let mut v = serde_json::json!({ "code": code, "message": message });
            if let Some(line) = line {
                v["line"] = line.into();
            }
            v
        }
    };
    let mut r = (status, axum::Json(body)).into_response();
    if let Some(v) = retry {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Middleware in front of the token check: on the write paths, a token
/// sent as InfluxDB clients send it (`Authorization: Token …`, HTTP Basic
/// with the token as password, or the `p` query parameter) is handed on as
/// `Authorization: Bearer …`. Other requests pass untouched.
pub(crate) async fn credentials(mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == V1_PATH || path == V2_PATH {
        if let Some(token) = token(request.headers(), request.uri().query()) {
            if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                request.headers_mut().insert(header::AUTHORIZATION, v);
            }
        }
    }
    next.run(request).await
}

/// The token of an InfluxDB client's request, if it sent one in a form
/// other than `Bearer`.
fn token(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let auth = auth.to_str().ok()?.trim();
        let (scheme, rest) = auth.split_once(' ')?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("token") {
            return Some(rest.to_owned());
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            let text = String::from_utf8(raw).ok()?;
            return text.split_once(':').map(|(_, p)| p.to_owned());
        }
        return None;
    }
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "p")
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(auth).unwrap());
        h
    }

    #[test]
    fn tokens_come_as_influx_clients_send_them() {
        assert_eq!(token(&headers("Token abc"), None).as_deref(), Some("abc"));
        assert_eq!(token(&headers("token  abc "), None).as_deref(), Some("abc"));
        // "user:secret"
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("user:secret")
        );
        assert_eq!(token(&headers(&basic), None).as_deref(), Some("secret"));
        assert_eq!(
            token(&HeaderMap::new(), Some("db=x&u=me&p=s%3D1")).as_deref(),
            Some("s=1")
        );
        // Bearer is left to the token check; no credentials stay none.
        assert_eq!(token(&headers("Bearer abc"), Some("p=x")), None);
        assert_eq!(token(&HeaderMap::new(), Some("db=x")), None);
        assert_eq!(token(&HeaderMap::new(), None), None);
    }

    #[test]
    fn a_partial_answer_names_lines_and_counts_the_rest() {
        let p = |line, why: &str| LineProblem {
            line,
            why: why.into(),
        };
        let msg = partial(&[p(2, "a"), p(5, "b")], 4, 10, false);
        assert_eq!(
            msg,
            "partial write: 4 of 10 lines refused, the rest kept: line 2: a; line 5: b; …"
        );
        let msg = partial(&[p(2, "a")], 1, 3, false);
        assert!(msg.ends_with("line 2: a"), "{msg}");
    }
}
