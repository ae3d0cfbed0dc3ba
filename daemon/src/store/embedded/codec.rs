//! Bytes to values and back: slots, headers and catalog entries as laid out
//! in [`super::layout`]. Separate so that the byte arithmetic lives in one
//! place and everything else works with [`Slot`]s and kind codes.
//!
//! Every function below works on a buffer whose length was checked when it
//! was made (a fixed-size array, see [`checked`]), so the slicing cannot go
//! out of bounds for any slot index the callers pass (they validate those
//! too).

use super::layout::{catalog_name, CATALOG_ENTRY_LEN, LEGACY_SLOT_LEN, SLOT_LEN};
use crate::model::{SampleKind, SeriesId, Slot};
use crate::store::{CatalogEntry, StoreError};

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

fn f64_at(buf: &[u8], at: usize) -> f64 {
    f64::from_bits(u64_at(buf, at))
}

fn i64_at(buf: &[u8], at: usize) -> i64 {
    u64_at(buf, at) as i64
}

/// Slot `i` of a value whose slots start at byte `base`.
pub(super) fn slot_at(buf: &[u8], base: usize, i: usize) -> Slot {
    let o = base + i * SLOT_LEN;
    Slot {
        n: u64_at(buf, o),
        sum: f64_at(buf, o + 8),
        min: f64_at(buf, o + 16),
        max: f64_at(buf, o + 24),
        last: f64_at(buf, o + 32),
        last_ms: i64_at(buf, o + 40),
    }
}

pub(super) fn put_slot(buf: &mut [u8], base: usize, i: usize, s: &Slot) {
    let o = base + i * SLOT_LEN;
    buf[o..o + 8].copy_from_slice(&s.n.to_le_bytes());
    buf[o + 8..o + 16].copy_from_slice(&s.sum.to_le_bytes());
    buf[o + 16..o + 24].copy_from_slice(&s.min.to_le_bytes());
    buf[o + 24..o + 32].copy_from_slice(&s.max.to_le_bytes());
    buf[o + 32..o + 40].copy_from_slice(&s.last.to_le_bytes());
    buf[o + 40..o + 48].copy_from_slice(&s.last_ms.to_le_bytes());
}

/// Slot `i` of a value written by layout 2 or older: no last sample.
pub(super) fn legacy_slot_at(buf: &[u8], base: usize, i: usize) -> Slot {
    let o = base + i * LEGACY_SLOT_LEN;
    Slot::summary(
        u64_at(buf, o),
        f64_at(buf, o + 8),
        f64_at(buf, o + 16),
        f64_at(buf, o + 24),
    )
}

pub(super) fn merge_slot(buf: &mut [u8], base: usize, i: usize, add: &Slot) {
    let mut s = slot_at(buf, base, i);
    s.merge(add);
    put_slot(buf, base, i, &s);
}

/// (kind code, watermark) of a value with a header.
pub(super) fn header(buf: &[u8]) -> (u8, u64) {
    (buf[0], u64_at(buf, 8))
}

pub(super) fn put_header(buf: &mut [u8], kind: u8, watermark: u64) {
    buf[0] = kind;
    buf[1..8].fill(0);
    buf[8..16].copy_from_slice(&watermark.to_le_bytes());
}

/// An all-empty value of `N` bytes: a zero header (if `base` is
/// [`HEADER_LEN`](super::layout::HEADER_LEN)) and every slot [`Slot::EMPTY`].
pub(super) fn empty_value<const N: usize>(base: usize) -> [u8; N] {
    let mut buf = [0u8; N];
    for i in 0..(N - base) / SLOT_LEN {
        put_slot(&mut buf, base, i, &Slot::EMPTY);
    }
    buf
}

/// Checks a stored value's length and copies it into a fixed-size buffer.
/// A value of layout 2 or older (32-byte slots, no last sample) is widened
/// to today's slots on the way: it reads as slots without a last sample,
/// and a write stores it in today's layout.
pub(super) fn checked<const N: usize>(
    raw: &[u8],
    doc: impl FnOnce() -> String,
) -> Result<[u8; N], StoreError> {
    if let Ok(value) = <[u8; N]>::try_from(raw) {
        return Ok(value);
    }
    widened(raw).ok_or_else(|| StoreError::Corrupt {
        doc: doc(),
        reason: format!("value is {} bytes long; expected {N}", raw.len()),
    })
}

/// A stored document value (an hour document, a day summary or a minute
/// block) as its `N` raw bytes: unpacked if the file holds it packed
/// (`packed.rs`), otherwise as [`checked`] reads it.
pub(super) fn document<const N: usize>(
    stored: &[u8],
    doc: impl Fn() -> String,
) -> Result<[u8; N], StoreError> {
    match super::packed::unpack(stored, &doc) {
        Some(unpacked) => unpacked,
        None => checked(stored, doc),
    }
}

/// `raw` as a value of `N` bytes, if it is that value in the legacy layout.
/// Every value is an optional 16-byte header and whole slots, and
/// `HEADER_LEN < SLOT_LEN`, so the header is what `N` leaves over.
fn widened<const N: usize>(raw: &[u8]) -> Option<[u8; N]> {
    let base = N % SLOT_LEN;
    let slots = (N - base) / SLOT_LEN;
    if raw.len() != base + slots * LEGACY_SLOT_LEN {
        return None;
    }
    let mut out = [0u8; N];
    out[..base].copy_from_slice(&raw[..base]);
    for i in 0..slots {
        put_slot(&mut out, base, i, &legacy_slot_at(raw, base, i));
    }
    Some(out)
}

/// The kind of a document header: 0 is "not known yet" (pre-allocated).
pub(super) fn decode_kind(
    code: u8,
    doc: impl FnOnce() -> String,
) -> Result<Option<SampleKind>, StoreError> {
    match code {
        0 => Ok(None),
        c => SampleKind::from_code(c)
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt {
                doc: doc(),
                reason: format!("unknown kind code {c}"),
            }),
    }
}

/// `(kind code, first_seen, last_seen)` of a catalog value.
pub(super) fn decode_catalog(buf: &[u8; CATALOG_ENTRY_LEN]) -> (u8, i64, i64) {
    (buf[0], u64_at(buf, 1) as i64, u64_at(buf, 9) as i64)
}

pub(super) fn encode_catalog(
    kind: SampleKind,
    first_seen: i64,
    last_seen: i64,
) -> [u8; CATALOG_ENTRY_LEN] {
    let mut buf = [0u8; CATALOG_ENTRY_LEN];
    buf[0] = kind.code();
    buf[1..9].copy_from_slice(&first_seen.to_le_bytes());
    buf[9..17].copy_from_slice(&last_seen.to_le_bytes());
    buf
}

/// The catalog entry stored under `key` (`source|metric`) with value `raw`.
pub(super) fn decode_entry(
    key: &str,
    source: &str,
    metric: &str,
    raw: &[u8],
) -> Result<CatalogEntry, StoreError> {
    let value: [u8; CATALOG_ENTRY_LEN] = checked(raw, || catalog_name(key))?;
    let (code, first_seen, last_seen) = decode_catalog(&value);
    let kind = SampleKind::from_code(code).ok_or_else(|| StoreError::Corrupt {
        doc: catalog_name(key),
        reason: format!("unknown kind code {code}"),
    })?;
    let series = SeriesId::from_metric_key(source, metric).ok_or_else(|| StoreError::Corrupt {
        doc: catalog_name(key),
        reason: "the key's labels are not in canonical form".into(),
    })?;
    Ok(CatalogEntry {
        series: series.into(),
        kind,
        first_seen,
        last_seen,
    })
}

/// The watermark in the header of a stored document of `N` bytes (an hour
/// document or a day summary); 0 when there is no document, or a damaged
/// one (its minutes then stay pending, and the fold that meets the damage
/// drops them, as `fold.rs` describes, rather than the whole store refusing
/// to open).
pub(super) fn stored_watermark<const N: usize>(value: Option<&[u8]>) -> u64 {
    value
        .and_then(|v| document::<N>(v, String::new).ok())
        .map_or(0, |doc| header(&doc).1)
}
