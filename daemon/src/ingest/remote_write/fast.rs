//! The layout every remote-write sender writes, read in one tight pass:
//! a `TimeSeries` whose labels come first, each a name then a value, and
//! then its samples, each a value then a timestamp. Anything else, and
//! anything doubtful (a long varint, a field out of place, bytes that are
//! not UTF-8), is left untouched for the exact reader in the parent
//! module, which decodes as prost does and names what is wrong.
//!
//! Why: the exact reader goes through prost's generic primitives, a
//! closure and a `Result` per field and a UTF-8 check per string; W1's
//! series (three labels, one sample) spent about 330 ns there. Here the
//! labels' bytes take one UTF-8 check together. Each name and value is cut
//! from that text between ASCII bytes (a key before it, the last byte of
//! its length's varint, and a key or the end after it), and the cut is
//! checked to fall on character boundaries, so each is UTF-8 when the run
//! is. A length of 128 or more has a byte over 0x7f in its varint, which
//! makes the run fail the check; such a series (a long Kubernetes label,
//! say) then has each name and value checked on its own, still here.

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

/// Appends the length-delimited `TimeSeries` at the front of `buf` to `b`
/// and moves `buf` past it, when it has the usual layout; otherwise
/// appends nothing, leaves `buf` where it was and says false.
pub(super) fn series<'a>(b: &mut ViewBuilder<'a>, buf: &mut &'a [u8]) -> bool {
    let Some((ts, rest)) = delimited(buf) else {
        return false;
    };
    let mark = b.mark();
    if append(b, ts).is_none() {
        b.drop_series(mark);
        return false;
    }
    *buf = rest;
    true
}

fn append<'a>(b: &mut ViewBuilder<'a>, ts: &'a [u8]) -> Option<()> {
    let mut labels_end = 0;
    while ts.get(labels_end) == Some(&LABELS) {
        let (len, n) = varint(&ts[labels_end + 1..])?;
        labels_end = (labels_end + 1 + n).checked_add(usize::try_from(len).ok()?)?;
    }
    let run = ts.get(..labels_end)?;
    match std::str::from_utf8(run) {
        Ok(text) => labels(b, run, |start, end| text.get(start..end))?,
        Err(_) => labels(b, run, |start, end| {
            std::str::from_utf8(run.get(start..end)?).ok()
        })?,
    }
    let mut rest = &ts[labels_end..];
    while let Some((&SAMPLES, after)) = rest.split_first() {
        let (sample, after) = delimited(after)?;
        let (ts_ms, value) = self::sample(sample)?;
        b.sample(ts_ms, value);
        rest = after;
    }
    rest.is_empty().then_some(())
}

/// The labels in `run`, appended to `b`; `cut` gives the text of
/// `run[start..end]`, or None where it is not UTF-8.
#[inline(always)]
fn labels<'a>(
    b: &mut ViewBuilder<'a>,
    run: &'a [u8],
    cut: impl Fn(usize, usize) -> Option<&'a str>,
) -> Option<()> {
    let mut at = 0;
    while at < run.len() {
        let (len, n) = varint(&run[at + 1..])?;
        let start = at + 1 + n;
        at = start + usize::try_from(len).ok()?;
        let (name, value) = label(run, start, at, &cut)?;
        b.label(name, value);
    }
    Some(())
}

/// The `Label` in `run[start..end]`: a name, then a value unless it is
/// empty (an encoder leaves an empty string out).
#[inline(always)]
fn label<'a>(
    run: &[u8],
    start: usize,
    end: usize,
    cut: &impl Fn(usize, usize) -> Option<&'a str>,
) -> Option<(&'a str, &'a str)> {
    let (name, at) = string(run, start, LABEL_NAME, cut)?;
    if at == end {
        return Some((name, ""));
    }
    let (value, at) = string(run, at, LABEL_VALUE, cut)?;
    (at == end).then_some((name, value))
}

/// The string field keyed `key` at `run[at..]`, and where it ends.
#[inline(always)]
fn string<'a>(
    run: &[u8],
    at: usize,
    key: u8,
    cut: &impl Fn(usize, usize) -> Option<&'a str>,
) -> Option<(&'a str, usize)> {
    if run.get(at) != Some(&key) {
        return None;
    }
    let (len, n) = varint(&run[at + 1..])?;
    let start = at + 1 + n;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    Some((cut(start, end)?, end))
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
        let run = b"\n\x04host";
        let cut = |s: usize, e: usize| std::str::from_utf8(run.get(s..e)?).ok();
        assert_eq!(label(run, 0, run.len(), &cut), Some(("host", "")));
        // A value that runs past the label: not the usual layout.
        let run = b"\n\x04host\x12\x09a";
        let cut = |s: usize, e: usize| std::str::from_utf8(run.get(s..e)?).ok();
        assert_eq!(label(run, 0, run.len(), &cut), None);
    }

    /// A label over 127 bytes has a two-byte length, which fails the run's
    /// one check; its strings are then checked one by one, still on this
    /// path, and text that is not UTF-8 is still left for the exact reader.
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
        assert!(series(&mut b, &mut buf));
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
        assert!(!series(&mut b, &mut buf));
        assert_eq!(buf.len(), bytes.len());
    }
}
