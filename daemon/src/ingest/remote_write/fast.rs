//! The layout every remote-write sender writes, read in one tight pass:
//! a `TimeSeries` whose labels come first, each a name then a value, and
//! then its samples, each a value then a timestamp. Anything else, and
//! anything doubtful (a long varint, a field out of place, bytes that are
//! not UTF-8), is left untouched for the exact reader in the parent
//! module, which decodes as prost does and names what is wrong.
//!
//! Why: the exact reader goes through prost's generic primitives, a
//! closure and a `Result` per field and a UTF-8 check per string; W1's
//! series (three labels, one sample) spent about 330 ns there. Here each
//! name and value is first compared with the string in the same place of
//! the series before (a sender writes a target's series one after
//! another: the label names and the target's own labels repeat), then
//! looked up in the request's [`TextMemo`], and only checked as UTF-8 when
//! neither has it. (Checking the series' labels as one run and cutting it
//! on character boundaries cost about 230 instructions a W1 series; the
//! compares cost about a third of that.)

use crate::ingest::text::{same_bytes, TextMemo};
use crate::ingest::view::fast::{delimited, varint};
use crate::ingest::view::ViewBuilder;

/// `Label.name` and `Sample.value` as keys: field 1, length-delimited
/// and 64-bit.
const LABEL_NAME: u8 = 0x0a;
const SAMPLE_VALUE: u8 = 0x09;
/// `Label.value` and `Sample.timestamp`: field 2, length-delimited and
/// varint.
const LABEL_VALUE: u8 = 0x12;
const SAMPLE_TIMESTAMP: u8 = 0x10;
/// `TimeSeries.labels` and `TimeSeries.samples`.
const LABELS: u8 = 0x0a;
const SAMPLES: u8 = 0x12;

/// Places of a series' strings compared with the series before's: four
/// labels' names and values. A series' further labels go to the memo
/// alone.
const PLACES: usize = 8;

/// A request's strings as text, each checked as UTF-8 once (see the
/// module's documentation).
#[derive(Default)]
pub(super) struct Texts<'a> {
    /// The strings of the series before, by place: name, value, name, ...
    before: [&'a str; PLACES],
    memo: TextMemo<'a>,
}

impl<'a> Texts<'a> {
    /// `bytes`, the string at `place` in its series, as text; None where
    /// they are not UTF-8.
    #[inline(always)]
    fn text(&mut self, place: usize, bytes: &'a [u8]) -> Option<&'a str> {
        let Some(before) = self.before.get_mut(place) else {
            return self.memo.text(bytes);
        };
        if !same_bytes(before.as_bytes(), bytes) {
            *before = self.memo.text(bytes)?;
        }
        Some(*before)
    }
}

/// Appends the length-delimited `TimeSeries` at the front of `buf` to `b`
/// and moves `buf` past it, when it has the usual layout; otherwise
/// appends nothing, leaves `buf` where it was and says false.
pub(super) fn series<'a>(
    b: &mut ViewBuilder<'a>,
    buf: &mut &'a [u8],
    texts: &mut Texts<'a>,
) -> bool {
    let Some((ts, rest)) = delimited(buf) else {
        return false;
    };
    let mark = b.mark();
    if append(b, ts, texts).is_none() {
        b.drop_series(mark);
        return false;
    }
    *buf = rest;
    true
}

fn append<'a>(b: &mut ViewBuilder<'a>, ts: &'a [u8], texts: &mut Texts<'a>) -> Option<()> {
    let mut rest = ts;
    let mut place = 0;
    while let Some((&LABELS, after)) = rest.split_first() {
        let (label, after) = delimited(after)?;
        let (name, value) = self::label(label, place, texts)?;
        b.label(name, value);
        place += 2;
        rest = after;
    }
    while let Some((&SAMPLES, after)) = rest.split_first() {
        let (sample, after) = delimited(after)?;
        let (ts_ms, value) = self::sample(sample)?;
        b.sample(ts_ms, value);
        rest = after;
    }
    rest.is_empty().then_some(())
}

/// A `Label`: a name, then a value unless it is empty (an encoder leaves
/// an empty string out); its name at `place` of its series.
#[inline(always)]
fn label<'a>(mut m: &'a [u8], place: usize, texts: &mut Texts<'a>) -> Option<(&'a str, &'a str)> {
    let name = texts.text(place, string(&mut m, LABEL_NAME)?)?;
    if m.is_empty() {
        return Some((name, ""));
    }
    let value = texts.text(place + 1, string(&mut m, LABEL_VALUE)?)?;
    m.is_empty().then_some((name, value))
}

/// The bytes of the string field keyed `key` at the front of `m`, with
/// `m` moved past it.
#[inline(always)]
fn string<'a>(m: &mut &'a [u8], key: u8) -> Option<&'a [u8]> {
    let (&found, rest) = m.split_first()?;
    if found != key {
        return None;
    }
    let (bytes, rest) = delimited(rest)?;
    *m = rest;
    Some(bytes)
}

/// A `Sample`: its value (left out when zero) and its timestamp (left
/// out when zero), in that order and nothing else.
fn sample(mut m: &[u8]) -> Option<(i64, f64)> {
    let mut value = 0.0;
    if let Some((&SAMPLE_VALUE, rest)) = m.split_first() {
        let (bits, rest) = rest.split_first_chunk::<8>()?;
        value = f64::from_le_bytes(*bits);
        m = rest;
    }
    let mut ts_ms = 0;
    if let Some((&SAMPLE_TIMESTAMP, rest)) = m.split_first() {
        let (v, n) = varint(rest)?;
        ts_ms = v as i64;
        m = &rest[n..];
    }
    m.is_empty().then_some((ts_ms, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::builder::Budget;

    #[test]
    fn a_label_without_its_value_has_an_empty_one() {
        let mut texts = Texts::default();
        assert_eq!(label(b"\n\x04host", 0, &mut texts), Some(("host", "")));
        // A value that runs past the label: not the usual layout.
        assert_eq!(label(b"\n\x04host\x12\x09a", 0, &mut texts), None);
        // Fields out of order, or one besides: not the usual layout either.
        assert_eq!(label(b"\x12\x01a\n\x04host", 0, &mut texts), None);
        assert_eq!(label(b"\n\x04host\x12\x01a\x18\x01", 0, &mut texts), None);
    }

    /// A string equal to the one in its place in the series before is
    /// answered with that one; one that differs, in any byte, is not, and
    /// bytes that are not UTF-8 never pass for it.
    #[test]
    fn a_string_is_compared_with_the_series_before() {
        let body = b"instance\xffnstance";
        let mut texts = Texts::default();
        let first = texts.text(0, &body[..8]).unwrap();
        assert_eq!(first, "instance");
        assert!(texts.text(0, &body[8..]).is_none());
        assert_eq!(texts.text(0, &body[..8]), Some(first));
        assert_eq!(texts.text(1, b"instancf"), Some("instancf"));
        // Past the compared places, the memo alone.
        assert_eq!(texts.text(PLACES + 3, b"host"), Some("host"));
    }

    /// A label over 127 bytes has a two-byte length, read on this path;
    /// text that is not UTF-8 is left for the exact reader.
    #[test]
    fn a_long_label_is_read_here_and_bad_text_is_not() {
        use prost::Message as _;
        use tally_proto::prometheus as rw;
        let encode = |value: String| {
            let ts = rw::TimeSeries {
                labels: vec![
                    rw::Label {
                        name: "__name__".into(),
                        value: "up".into(),
                    },
                    rw::Label {
                        name: "pod".into(),
                        value,
                    },
                ],
                samples: vec![rw::Sample {
                    value: 1.0,
                    timestamp: 5,
                }],
            };
            ts.encode_length_delimited_to_vec()
        };
        let budget = Budget {
            samples: usize::MAX,
            bytes: usize::MAX,
        };
        let long = "é".repeat(100);
        let bytes = encode(long.clone());
        let mut b = ViewBuilder::new(1, budget);
        let mark = b.mark();
        let mut buf = &bytes[..];
        assert!(series(&mut b, &mut buf, &mut Texts::default()));
        assert!(buf.is_empty());
        assert_eq!(
            b.labels_since(mark),
            [("__name__", "up"), ("pod", long.as_str())]
        );

        // A byte that is not UTF-8, inside the long value.
        let mut bytes = encode("a".repeat(200));
        let at = bytes.len() - 20;
        bytes[at] = 0xff;
        let mut b = ViewBuilder::new(1, budget);
        let mut buf = &bytes[..];
        assert!(!series(&mut b, &mut buf, &mut Texts::default()));
        assert_eq!(buf.len(), bytes.len());
    }
}
