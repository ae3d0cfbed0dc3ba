//! The status codes of requests refused before a handler runs, as gRPC
//! convention has them. tonic answers a message over
//! `ingest.max_message_bytes` with `OUT_OF_RANGE` and a message that does
//! not decode (a string field holding invalid UTF-8) with `INTERNAL`; the
//! first is `RESOURCE_EXHAUSTED` by convention, and the second is the
//! client's error, not the server's: `INVALID_ARGUMENT`, keeping tonic's
//! message, which names the field (`SourceBatch.source: invalid string
//! value: data is not UTF-8 encoded`).
//!
//! Such a refusal is always a trailers-only response, its status in the
//! headers, so rewriting those headers is enough.

use tonic::codegen::http::{HeaderMap, HeaderValue, Response};
use tonic::Code;

/// What tonic's own refusals start with.
const TOO_LARGE: &str = "Error, decoded message length too large";
const UNDECODABLE: &str = "failed to decode Protobuf message";

const STATUS: &str = "grpc-status";
const MESSAGE: &str = "grpc-message";

/// Rewrites `response`'s status if it is one of tonic's refusals.
pub(super) fn conventional<B>(mut response: Response<B>, max_message_bytes: usize) -> Response<B> {
    rewrite(response.headers_mut(), max_message_bytes);
    response
}

fn rewrite(headers: &mut HeaderMap, max_message_bytes: usize) {
    let Some(code) = headers.get(STATUS).and_then(|v| v.to_str().ok()) else {
        return;
    };
    let Ok(code) = code.parse::<i32>().map(Code::from_i32) else {
        return;
    };
    let message = headers
        .get(MESSAGE)
        .map(|m| percent_decoded(m.as_bytes()))
        .unwrap_or_default();
    let starts = |prefix: &str| message.starts_with(prefix.as_bytes());
    if code == Code::OutOfRange && starts(TOO_LARGE) {
        set_code(headers, Code::ResourceExhausted);
        // Printable ASCII without `%` needs no percent-encoding.
        let ours = format!(
            "the message is larger than ingest.max_message_bytes = {max_message_bytes} bytes: split the batch"
        );
        if let Ok(v) = HeaderValue::from_str(&ours) {
            headers.insert(MESSAGE, v);
        }
    } else if code == Code::Internal && starts(UNDECODABLE) {
        set_code(headers, Code::InvalidArgument);
    }
}

/// `grpc-message` is percent-encoded (spaces included).
fn percent_decoded(raw: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn set_code(headers: &mut HeaderMap, code: Code) {
    headers.insert(STATUS, HeaderValue::from(code as i32));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(code: Code, message: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(STATUS, HeaderValue::from(code as i32));
        h.insert(MESSAGE, HeaderValue::from_str(message).unwrap());
        h
    }

    fn code(h: &HeaderMap) -> &str {
        h.get(STATUS).unwrap().to_str().unwrap()
    }

    #[test]
    fn only_tonics_refusals_change() {
        let mut h = headers(
            Code::OutOfRange,
            "Error,%20decoded%20message%20length%20too%20large:%20found%2017800000%20bytes",
        );
        rewrite(&mut h, 16_777_216);
        assert_eq!(code(&h), "8");
        let m = h.get(MESSAGE).unwrap().to_str().unwrap();
        assert!(m.contains("ingest.max_message_bytes = 16777216"), "{m}");

        let undecodable = "failed%20to%20decode%20Protobuf%20message:%20SourceBatch.source:%20invalid%20string%20value";
        let mut h = headers(Code::Internal, undecodable);
        rewrite(&mut h, 1);
        assert_eq!(code(&h), "3");
        assert_eq!(h.get(MESSAGE).unwrap().to_str().unwrap(), undecodable);

        // The handlers' own statuses stay as they are.
        for (c, m) in [
            (Code::OutOfRange, "something else"),
            (Code::Internal, "store failed"),
            (Code::InvalidArgument, "failed to decode Protobuf message"),
        ] {
            let mut h = headers(c, m);
            rewrite(&mut h, 1);
            assert_eq!(code(&h), (c as i32).to_string());
        }
        assert_eq!(percent_decoded(b"a%20b%2x%"), b"a b%2x%");
        let mut none = HeaderMap::new();
        rewrite(&mut none, 1);
        assert!(none.is_empty());
    }
}
