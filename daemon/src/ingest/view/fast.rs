//! The layout every `tally.v1` encoder writes, read in one tight pass: a
//! `SeriesSamples` whose fields come in field-number order (metric, kind,
//! packed timestamps, packed values, labels, packed start times), each
//! once, and labels of a name then a value. Anything else, and anything
//! doubtful (a varint prost would refuse, a length past the message, an
//! unpacked number, a string that is not UTF-8), is left untouched for the
//! exact reader in the parent module, which decodes as prost does and
//! names what is wrong.
//!
//! Why: the exact reader goes through prost's generic primitives, a
//! closure and a `Result` per field; a W1 series (a metric and one
//! sample) spent about 60 ns there, a quarter of what the daemon spends on
//! a sample of W1 in all. Remote-write's reader does the same for its own
//! layout (`ingest/remote_write/fast.rs`); both share the varint here.

use prost::encoding::WireType;

use tally_proto::keys::{
    LABEL_NAME, LABEL_VALUE, SERIES_KIND, SERIES_LABELS, SERIES_METRIC, SERIES_START_TIMES,
    SERIES_TIMESTAMPS, SERIES_VALUES,
};

use super::{PushView, SeriesCols};
use crate::ingest::text::TextMemo;

impl<'a> PushView<'a> {
    /// The length-delimited `SeriesSamples` at the front of `buf`, appended
    /// to the columns with `buf` moved past it, when it has the usual
    /// layout; otherwise the columns and `buf` are left as they were.
    pub(super) fn fast_series(
        &mut self,
        buf: &mut &'a [u8],
        memo: &mut TextMemo<'a>,
    ) -> Option<SeriesCols<'a>> {
        let (m, rest) = delimited(buf)?;
        let lens = (
            self.labels.len(),
            self.timestamps_ms.len(),
            self.values.len(),
            self.start_times_ms.len(),
        );
        match self.series_fields(m, memo) {
            Some(cols) => {
                *buf = rest;
                Some(cols)
            }
            None => {
                self.labels.truncate(lens.0);
                self.timestamps_ms.truncate(lens.1);
                self.values.truncate(lens.2);
                self.start_times_ms.truncate(lens.3);
                None
            }
        }
    }

    fn series_fields(
        &mut self,
        mut m: &'a [u8],
        memo: &mut TextMemo<'a>,
    ) -> Option<SeriesCols<'a>> {
        let mut cols = self.open_series();
        if let Some(field) = after_key(&mut m, SERIES_METRIC) {
            cols.metric = memo.text(field)?;
        }
        if let Some((&SERIES_KIND, rest)) = m.split_first() {
            let (v, n) = varint(rest)?;
            // As prost's `int32`: the varint's low 32 bits.
            cols.kind = v as i32;
            m = &rest[n..];
        }
        if let Some(packed) = after_key(&mut m, SERIES_TIMESTAMPS) {
            int64s(packed, &mut self.timestamps_ms)?;
        }
        if let Some(packed) = after_key(&mut m, SERIES_VALUES) {
            let mut chunks = packed.chunks_exact(8);
            for c in chunks.by_ref() {
                self.values.push(f64::from_le_bytes(c.try_into().ok()?));
            }
            if !chunks.remainder().is_empty() {
                return None;
            }
        }
        while let Some(label) = after_key(&mut m, SERIES_LABELS) {
            self.labels.push(self::label(label, memo)?);
        }
        if let Some(packed) = after_key(&mut m, SERIES_START_TIMES) {
            int64s(packed, &mut self.start_times_ms)?;
        }
        if !m.is_empty() {
            return None;
        }
        Some(self.end_series(cols))
    }
}

/// A length-delimited field keyed `key` at the front of `m`: its bytes,
/// with `m` moved past it. None, `m` untouched, if another field is
/// there; a cut-short field leaves `m` pointing at its key, which then
/// fails the caller's check that every byte was read.
#[inline(always)]
pub(crate) fn after_key<'a>(m: &mut &'a [u8], key: u8) -> Option<&'a [u8]> {
    match m.split_first() {
        Some((&k, rest)) if k == key => {
            let (field, rest) = delimited(rest)?;
            *m = rest;
            Some(field)
        }
        _ => None,
    }
}

/// Packed varints, appended to `column` as prost's `int64` reads them.
fn int64s(mut packed: &[u8], column: &mut Vec<i64>) -> Option<()> {
    while !packed.is_empty() {
        let (v, n) = varint(packed)?;
        column.push(v as i64);
        packed = &packed[n..];
    }
    Some(())
}

/// A `Label`: a name, then a value unless it is empty (an encoder leaves
/// an empty string out).
fn label<'a>(mut m: &'a [u8], memo: &mut TextMemo<'a>) -> Option<(&'a str, &'a str)> {
    let name = memo.text(after_key(&mut m, LABEL_NAME)?)?;
    let value = match after_key(&mut m, LABEL_VALUE) {
        Some(v) => memo.text(v)?,
        None => "",
    };
    m.is_empty().then_some((name, value))
}

/// A field's key as prost's `decode_key` reads it, a one-byte key (field
/// numbers up to 15) inline.
#[inline(always)]
pub(crate) fn key(buf: &mut &[u8]) -> Result<(u32, WireType), prost::DecodeError> {
    if let Some(&byte) = buf.first() {
        let wire_type = match byte & 7 {
            0 => Some(WireType::Varint),
            1 => Some(WireType::SixtyFourBit),
            2 => Some(WireType::LengthDelimited),
            3 => Some(WireType::StartGroup),
            4 => Some(WireType::EndGroup),
            5 => Some(WireType::ThirtyTwoBit),
            _ => None,
        };
        if let (0x08..=0x7f, Some(wire_type)) = (byte, wire_type) {
            *buf = &buf[1..];
            return Ok((u32::from(byte >> 3), wire_type));
        }
    }
    prost::encoding::decode_key(buf)
}

/// A varint as prost's `decode_varint` reads it, a one-byte one inline.
#[inline(always)]
pub(crate) fn read_varint(buf: &mut &[u8]) -> Result<u64, prost::DecodeError> {
    match buf.first() {
        Some(&byte) if byte < 0x80 => {
            *buf = &buf[1..];
            Ok(u64::from(byte))
        }
        _ => prost::encoding::decode_varint(buf),
    }
}

/// The length-delimited bytes at the front of `buf`, and what follows.
#[inline(always)]
pub(crate) fn delimited(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, n) = varint(buf)?;
    let len = usize::try_from(len).ok()?;
    let rest = &buf[n..];
    (len <= rest.len()).then(|| rest.split_at(len))
}

/// A varint and its length in bytes; None where prost would refuse it
/// (or find it cut short).
#[inline(always)]
pub(crate) fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    match buf.first() {
        Some(&byte) if byte < 0x80 => Some((u64::from(byte), 1)),
        _ => long_varint(buf),
    }
}

/// A varint of two bytes or more. One that ends within eight bytes is
/// read as one word: a W1 timestamp (six bytes) a byte a step cost about
/// 60 instructions.
#[inline]
fn long_varint(buf: &[u8]) -> Option<(u64, usize)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let w = word(buf);
    let ends = !w & HIGH;
    if ends != 0 {
        // A byte past the buffer reads as zero, an end: the varint is cut
        // short.
        let len = ends.trailing_zeros() as usize / 8 + 1;
        if len > buf.len() {
            return None;
        }
        // The varint's bytes without their continuation bits, then their
        // seven-bit groups packed: in pairs, in fours, all eight.
        let x = (w & (u64::MAX >> (64 - 8 * len))) & !HIGH;
        let x = (x & 0x007f_007f_007f_007f) | (x & 0x7f00_7f00_7f00_7f00) >> 1;
        let x = (x & 0x0000_3fff_0000_3fff) | (x & 0x3fff_0000_3fff_0000) >> 2;
        let x = (x & 0x0000_0000_0fff_ffff) | (x & 0x0fff_ffff_0000_0000) >> 4;
        return Some((x, len));
    }
    let mut v = 0u64;
    let mut shift = 0;
    for (i, &byte) in buf.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return (i < 9 || byte <= 1).then_some((v, i + 1));
        }
        shift += 7;
    }
    None
}

/// The first eight bytes of `buf`, little-endian, zeros past its end.
/// (A packed field's one timestamp is all its buffer holds.)
#[inline(always)]
fn word(buf: &[u8]) -> u64 {
    let n = buf.len();
    if let Some(w) = buf.first_chunk::<8>() {
        return u64::from_le_bytes(*w);
    }
    let (Some(lo), Some(hi)) = (buf.first_chunk::<4>(), buf.last_chunk::<4>()) else {
        return buf.iter().rev().fold(0, |w, &b| w << 8 | u64::from(b));
    };
    // Two loads that overlap where `n` < 8; the bytes they share agree.
    u64::from(u32::from_le_bytes(*lo)) | u64::from(u32::from_le_bytes(*hi)) << (8 * (n - 4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use tally_proto::v1 as pb;

    #[test]
    fn keys_and_varints_as_prost_reads_them() {
        for (tag, wire_type) in [(1, 2), (15, 0), (16, 2), (3, 5), (1, 3), (2, 4), (300, 1)] {
            let mut bytes = Vec::new();
            prost::encoding::encode_varint(tag << 3 | wire_type, &mut bytes);
            bytes.push(0x55);
            let (mut a, mut b) = (&bytes[..], &bytes[..]);
            let ours = key(&mut a).map_err(|e| e.to_string());
            let theirs = prost::encoding::decode_key(&mut b).map_err(|e| e.to_string());
            assert_eq!((ours, a), (theirs, b), "{tag} {wire_type}");
        }
        // Tag 0, wire types 6 and 7, and an empty buffer: prost's errors.
        for bytes in [&[0x02u8][..], &[0x0e], &[0x0f], &[]] {
            let (mut a, mut b) = (bytes, bytes);
            let ours = key(&mut a).map_err(|e| e.to_string());
            let theirs = prost::encoding::decode_key(&mut b).map_err(|e| e.to_string());
            assert!(ours.is_err());
            assert_eq!(ours, theirs, "{bytes:?}");
        }
        for v in [0u64, 127, 128, u64::MAX] {
            let mut bytes = Vec::new();
            prost::encoding::encode_varint(v, &mut bytes);
            let mut buf = &bytes[..];
            assert_eq!(read_varint(&mut buf).ok(), Some(v));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn varints_as_prost_reads_them() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut bytes = Vec::new();
            prost::encoding::encode_varint(v, &mut bytes);
            assert_eq!(varint(&bytes), Some((v, bytes.len())), "{v}");
            assert_eq!(varint(&bytes[..bytes.len() - 1]), None);
        }
        // Ten bytes whose last carries more than the 64th bit.
        assert_eq!(
            varint(&[0xff; 9].iter().chain(&[2]).copied().collect::<Vec<_>>()),
            None
        );
    }

    proptest::proptest! {
        /// Any varint, followed by anything (the word read takes bytes
        /// past it), reads as prost reads it, and as far.
        #[test]
        fn any_varint_reads_as_prost_reads_it(
            v in proptest::prelude::any::<u64>(),
            shift in 0u32..64,
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9),
        ) {
            let mut bytes = Vec::new();
            prost::encoding::encode_varint(v >> shift, &mut bytes);
            let len = bytes.len();
            // Cut short at every length: refused, as prost refuses it.
            for cut in 0..len {
                proptest::prop_assert_eq!(varint(&bytes[..cut]), None);
            }
            proptest::prop_assert_eq!(varint(&bytes), Some((v >> shift, len)));
            bytes.extend_from_slice(&tail);
            proptest::prop_assert_eq!(varint(&bytes), Some((v >> shift, len)));
        }
    }

    fn series(s: &pb::SeriesSamples) -> Vec<u8> {
        s.encode_length_delimited_to_vec()
    }

    fn full() -> pb::SeriesSamples {
        pb::SeriesSamples {
            metric: "m_01".into(),
            kind: pb::SampleKind::CumulativeCounter as i32,
            labels: vec![
                pb::Label {
                    name: "cpu".into(),
                    value: "0".into(),
                },
                pb::Label {
                    name: "mode".into(),
                    value: String::new(),
                },
            ],
            timestamps_ms: vec![1_795_305_600_000, 1_795_305_601_000],
            values: vec![1.5, -0.0],
            start_times_ms: vec![1_795_305_000_000, 1_795_305_000_000],
        }
    }

    /// Every field prost writes is read here, and the view holds what
    /// prost decodes.
    #[test]
    fn reads_what_prost_writes() {
        let s = full();
        let bytes = series(&s);
        let mut v = PushView::default();
        let mut buf = &bytes[..];
        let cols = v
            .fast_series(&mut buf, &mut TextMemo::default())
            .expect("the usual layout");
        assert!(buf.is_empty());
        v.series.push(cols);
        v.sources.push(super::super::SourceCols {
            source: "a",
            series: super::super::Run::new(0, 1),
            groups: super::super::Run::default(),
        });
        let back = v.to_request();
        assert_eq!(back.sources[0].series[0], s);
    }

    /// What the usual layout does not cover is left for the exact reader,
    /// the columns and the buffer as they were.
    #[test]
    fn leaves_anything_else_untouched() {
        let mut unusual = Vec::new();
        // The fields out of order: values before the metric.
        let mut s = Vec::new();
        s.extend_from_slice(&[SERIES_VALUES, 8]);
        s.extend_from_slice(&1.0f64.to_le_bytes());
        s.extend_from_slice(&[SERIES_METRIC, 1, b'm']);
        unusual.push(s);
        // A metric that is not UTF-8.
        unusual.push(vec![SERIES_METRIC, 1, 0xff]);
        // Packed values cut at seven bytes.
        unusual.push(vec![SERIES_VALUES, 7, 0, 0, 0, 0, 0, 0, 0]);
        // A timestamp sent unpacked (field 3 as a varint).
        unusual.push(vec![3 << 3, 5]);
        // An unknown field.
        unusual.push(vec![9 << 3, 1]);
        // A label with its name left out.
        unusual.push(vec![SERIES_LABELS, 3, LABEL_VALUE, 1, b'x']);
        for body in unusual {
            let mut bytes = Vec::new();
            prost::encoding::encode_varint(body.len() as u64, &mut bytes);
            bytes.extend_from_slice(&body);
            let mut v = PushView::default();
            v.values.push(9.0);
            v.labels.push(("a", "b"));
            let mut buf = &bytes[..];
            assert!(
                v.fast_series(&mut buf, &mut TextMemo::default()).is_none(),
                "{body:?}"
            );
            assert_eq!(buf.len(), bytes.len());
            assert_eq!((v.values.len(), v.labels.len()), (1, 1));
            assert!(v.timestamps_ms.is_empty());
        }
    }
}
