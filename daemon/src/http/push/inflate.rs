//! Request bodies inflated (gzip, snappy) within `ingest.max_message_bytes`,
//! refused as they pass it, so that a small compressed body cannot make
//! the daemon allocate more.
//!
//! Snappy bodies (remote-write) and the gzip bodies read as views (OTLP
//! protobuf) inflate into buffers kept for the next request
//! ([`Inflated`]): the request is read in place from that buffer,
//! and a fresh one per request would cost the allocator and the page
//! faults of a body's size every time. The pool is bounded in buffers and
//! in each buffer's size, so what it keeps is bounded too.

use std::io::Read as _;

use axum::http::StatusCode;
use parking_lot::Mutex;

/// Why a body could not be read.
#[derive(Debug)]
pub(super) enum BodyError {
    /// Unsupported `Content-Encoding` (415).
    Encoding(String),
    /// The body inflates past the limit (413).
    TooLarge(usize),
    /// The compressed body is malformed (400).
    Corrupt(String),
}

impl BodyError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::Encoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Corrupt(_) => StatusCode::BAD_REQUEST,
        }
    }

    pub(super) fn message(&self) -> String {
        match self {
            BodyError::Encoding(e) => format!("unsupported Content-Encoding {e:?}"),
            BodyError::TooLarge(max) => format!(
                "the request body inflates to more than {max} bytes (ingest.max_message_bytes): send smaller batches"
            ),
            BodyError::Corrupt(e) => format!("the request body could not be decompressed: {e}"),
        }
    }
}

/// Inflates a gzip body, refusing it once it passes `max` bytes.
pub(super) fn gunzip(body: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
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

/// Buffers kept for the next body; at most [`KEPT`] of at most
/// [`KEPT_BYTES`] each, 32 MiB in all.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const KEPT: usize = 8;
const KEPT_BYTES: usize = 4 << 20;

/// A body inflated into a pooled buffer, which goes back to the pool when
/// this is dropped.
pub(super) struct Inflated {
    buf: Vec<u8>,
    len: usize,
}

impl Inflated {
    /// Inflates a snappy (block format) body, refusing one that says it
    /// inflates past `max` before allocating for it.
    pub(super) fn unsnappy(body: &[u8], max: usize) -> Result<Inflated, BodyError> {
        let corrupt = |e: snap::Error| BodyError::Corrupt(e.to_string());
        let len = snap::raw::decompress_len(body).map_err(corrupt)?;
        if len > max {
            return Err(BodyError::TooLarge(max));
        }
        let mut out = Inflated {
            buf: POOL.lock().pop().unwrap_or_default(),
            len: 0,
        };
        // A kept buffer keeps its length: growing zeroes only the new part.
        if out.buf.len() < len {
            out.buf.resize(len, 0);
        }
        out.len = snap::raw::Decoder::new()
            .decompress(body, &mut out.buf[..len])
            .map_err(corrupt)?;
        Ok(out)
    }

    /// Inflates a gzip body, refusing it once it passes `max` bytes.
    pub(super) fn gunzip(body: &[u8], max: usize) -> Result<Inflated, BodyError> {
        let mut out = Inflated {
            buf: POOL.lock().pop().unwrap_or_default(),
            len: 0,
        };
        let mut gz = flate2::read::GzDecoder::new(body);
        loop {
            if out.len == out.buf.len() {
                if out.len > max {
                    return Err(BodyError::TooLarge(max));
                }
                // As for snappy, a kept buffer keeps its length, so only
                // the part it grows by is zeroed.
                let grown = (out.len * 2).max(64 << 10).min(max + 1);
                out.buf.resize(grown, 0);
            }
            match gz.read(&mut out.buf[out.len..]) {
                Ok(0) => break,
                Ok(n) => out.len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BodyError::Corrupt(e.to_string())),
            }
        }
        if out.len > max {
            return Err(BodyError::TooLarge(max));
        }
        Ok(out)
    }

    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Inflated {
    fn drop(&mut self) {
        if self.buf.capacity() <= KEPT_BYTES {
            let mut pool = POOL.lock();
            if pool.len() < KEPT {
                pool.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gzip body inflates whole and exactly, into a used buffer longer
    /// than it and into one it outgrows; one past the limit is refused.
    #[test]
    fn gzip_bodies_inflate_exactly_into_reused_buffers() {
        use std::io::Write as _;
        let gz = |raw: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        };
        let big: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let small = b"a short body".to_vec();
        for raw in [&small, &big, &small, &big] {
            let got = Inflated::gunzip(&gz(raw), 1 << 20).unwrap();
            assert_eq!(got.bytes(), &raw[..]);
        }
        assert!(matches!(
            Inflated::gunzip(&gz(&big), 1000),
            Err(BodyError::TooLarge(1000))
        ));
        assert!(matches!(
            Inflated::gunzip(&gz(&big), big.len()),
            Ok(b) if b.bytes() == &big[..]
        ));
        assert!(matches!(
            Inflated::gunzip(b"not gzip", 1000),
            Err(BodyError::Corrupt(_))
        ));
    }

    /// A body inflates whole and exactly, through a used buffer longer
    /// than it; one that says it is larger than the limit is refused
    /// before anything is allocated.
    #[test]
    fn snappy_bodies_inflate_exactly_into_reused_buffers() {
        let big: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let small = b"a short body".to_vec();
        for raw in [&big, &small, &big] {
            let body = snap::raw::Encoder::new().compress_vec(raw).unwrap();
            let got = Inflated::unsnappy(&body, 1 << 20).unwrap();
            assert_eq!(got.bytes(), &raw[..]);
        }
        let body = snap::raw::Encoder::new().compress_vec(&big).unwrap();
        assert!(matches!(
            Inflated::unsnappy(&body, 1000),
            Err(BodyError::TooLarge(1000))
        ));
        assert!(matches!(
            Inflated::unsnappy(b"\xff\xff\xff", 1000),
            Err(BodyError::Corrupt(_))
        ));
    }
}
