//! What a Graphite plaintext line means in Tally's model (the TCP listener
//! that reads the lines is [`crate::graphite`]).
//!
//! A line is `path value [timestamp]`, fields separated by spaces or tabs;
//! the path may carry Graphite 1.1 tags, `path;tag=value;tag2=value2`.
//!
//! - **Source**: the path's component number `graphite.source_component`
//!   (1-based, default 1: `web-01.cpu.idle` → `web-01`); the other
//!   components, in order and joined with `.`, are the **metric**
//!   (`cpu.idle`). A path with no component left for the metric is refused
//!   (`missing_source`).
//! - **Labels**: the tags, their names sanitised as OTLP attribute names
//!   are ([`crate::labels::label_name_from_key`]).
//! - **Kind**: gauge. NaN is data, as on every protocol; an infinite
//!   value is refused.
//! - **Time**: Unix seconds, whole or with a fraction (kept to the
//!   millisecond); a line without one, or with `-1`, is stamped with the
//!   time it was read.

mod batch;
mod fields;

pub use batch::{Batch, PushError};

use super::number::{decimal, eight_digits};
use crate::aggregator::RejectReason;
use crate::ingest::text::find;

/// One parsed line, borrowing from its text.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    pub path: &'a str,
    pub tags: Tags<'a>,
    pub value: f64,
    /// None: stamp it with the time of arrival.
    pub ts_ms: Option<i64>,
    /// Where the path's first component ends (its first `.`, or its
    /// length), found while the line was split: under the default
    /// `graphite.source_component` that component is the source, and the
    /// batch takes its end from here rather than searching again. Set by
    /// the parser alone, so that it always agrees with `path`.
    first_end: usize,
}

/// A line's tags: the text after its path's first `;`, checked to be
/// `name=value` pairs joined by `;`, and read as pairs when they are
/// used. Kept as text because a line is moved from the parser to the
/// batch: with room for eight pairs inline, each line's move copied that
/// room, a fortieth of reading a Graphite stream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tags<'a>(&'a str);

impl<'a> Tags<'a> {
    /// Checks `text` (what follows a `;`), refusing it for its first bad
    /// tag. An empty list is a bad tag.
    fn parse(text: &'a str) -> Result<Tags<'a>, LineError> {
        for tag in text.split(';') {
            match tag.split_once('=') {
                Some((name, value)) if !name.is_empty() && !value.is_empty() => {}
                _ => return Err(LineError::Tag(clip(tag))),
            }
        }
        Ok(Tags(text))
    }

    /// True when the line has no tags (most have none).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs, in the order the line gives them.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        // Most lines have no tags: they skip the search for a `;` (a
        // thirtieth of reading an untagged stream when it was made).
        let text = Some(self.0).filter(|t| !t.is_empty());
        text.into_iter()
            .flat_map(|t| t.split(';'))
            .filter_map(|tag| tag.split_once('='))
    }
}

/// Why a line is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("the line is not UTF-8 text")]
    NotUtf8,
    #[error("expected `path value [timestamp]`, found {0} fields")]
    Fields(usize),
    #[error("the path is empty or has an empty component")]
    Path,
    #[error("tag {0:?} is not `name=value` with a non-empty name and value")]
    Tag(String),
    #[error("value {0:?} is not a number, or is infinite")]
    Value(String),
    #[error("timestamp {0:?} is not Unix seconds")]
    Timestamp(String),
    #[error("the line alone is more than a request may hold (ingest.max_message_bytes)")]
    TooLarge,
    #[error("the path {path:?} has no component {component} left over for the metric (graphite.source_component)")]
    NoMetric { path: String, component: usize },
}

impl LineError {
    /// The reason its sample is counted under.
    pub fn reason(&self) -> RejectReason {
        match self {
            LineError::NoMetric { .. } => RejectReason::MissingSource,
            _ => RejectReason::InvalidPoint,
        }
    }
}

/// Parses one line (without its newline; a trailing `\r` is allowed).
pub fn parse_line(bytes: &[u8]) -> Result<Line<'_>, LineError> {
    parse_text(std::str::from_utf8(bytes).map_err(|_| LineError::NotUtf8)?)
}

/// [`parse_line`] for a line known to be text: the listener checks a
/// read's whole lines at once, since checking each line on its own was a
/// fiftieth of the daemon's time. Its parts are found in one reading of
/// it ([`fields::split`]); the refusals come in the order of the parts:
/// the count of fields first.
pub fn parse_text(text: &str) -> Result<Line<'_>, LineError> {
    let f = fields::split(text);
    let part = |(start, end): (usize, usize)| text.get(start..end).unwrap_or_default();
    let (true, Some(value), false) = (f.end > f.start, f.value.map(part), f.extra) else {
        return Err(LineError::Fields(fields::count(text)));
    };
    if f.empty_component {
        return Err(LineError::Path);
    }
    let path = part((f.start, f.semi.unwrap_or(f.end)));
    let tags = match f.semi {
        Some(semi) => Tags::parse(part((semi + 1, f.end)))?,
        None => Tags::default(),
    };
    let value = decimal(value)
        .filter(|v| !v.is_infinite())
        .ok_or_else(|| LineError::Value(clip(value)))?;
    let ts_ms = match f.ts.map(part) {
        None | Some("-1") => None,
        Some(ts) => Some(seconds_to_ms(ts).ok_or_else(|| LineError::Timestamp(clip(ts)))?),
    };
    Ok(Line {
        path,
        tags,
        value,
        ts_ms,
        first_end: f.first_dot.map_or(path.len(), |dot| dot - f.start),
    })
}

/// The byte range of a dotted path's `n`th component (1-based; the first
/// for 0), None when it has fewer. Dots are found a word at a time: a
/// path's few bytes cost memchr's iterator more to set up than to search.
fn component(path: &str, n: usize) -> Option<(usize, usize)> {
    let dot = |from: usize| path.get(from..).and_then(|rest| find(rest, [b'.'; 3]));
    let mut start = 0;
    for _ in 1..n {
        start += dot(start)? + 1;
    }
    Some((start, dot(start).map_or(path.len(), |at| start + at)))
}

/// `1700000000` or `1700000000.25` (Unix seconds) in milliseconds,
/// digits past the millisecond dropped; the decimal is read exactly, not
/// through a float, and in one pass (splitting it first and parsing its
/// parts was a thirtieth of the daemon's time on a Graphite stream).
fn seconds_to_ms(text: &str) -> Option<i64> {
    if let Some(ms) = agents_seconds_to_ms(text.as_bytes()) {
        return Some(ms);
    }
    let (negative, b) = match text.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        b => (false, b),
    };
    let digit = |c: u8| c.is_ascii_digit().then(|| i64::from(c - b'0'));
    // A timestamp's first eight digits at once, then digit by digit.
    let (mut secs, mut whole) = match eight_digits(b) {
        Some(first) => (first as i64, 8),
        None => (0i64, 0),
    };
    while let Some(d) = b.get(whole).and_then(|&c| digit(c)) {
        if whole == 15 {
            return None;
        }
        secs = secs * 10 + d;
        whole += 1;
    }
    let frac = match b.get(whole..) {
        Some([]) | None => &[][..],
        Some([b'.', frac @ ..]) => frac,
        Some(_) => return None,
    };
    if whole == 0 && frac.is_empty() {
        return None;
    }
    let mut ms = 0i64;
    for (i, &c) in frac.iter().enumerate() {
        let d = digit(c)?;
        if i < 3 {
            ms += d * [100, 10, 1][i];
        }
    }
    let total = secs * 1000 + ms;
    Some(if negative { -total } else { total })
}

/// [`seconds_to_ms`] for the forms agents write today, ten digits with
/// three decimals or none (`1700000000.123`, `1700000000`), read by
/// place; None for any other text, which the general reading takes. It
/// took a tenth of parsing a line of W1 digit by digit.
fn agents_seconds_to_ms(b: &[u8]) -> Option<i64> {
    let digit = |c: u8| {
        let d = c.wrapping_sub(b'0');
        (d < 10).then_some(i64::from(d))
    };
    let (secs, ms) = match b {
        [secs @ .., b'.', x, y, z] if secs.len() == 10 => {
            (secs, digit(*x)? * 100 + digit(*y)? * 10 + digit(*z)?)
        }
        secs if secs.len() == 10 => (secs, 0),
        _ => return None,
    };
    let [.., tens, ones] = secs else {
        return None;
    };
    let whole = eight_digits(secs)? as i64 * 100 + digit(*tens)? * 10 + digit(*ones)?;
    Some(whole * 1000 + ms)
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::fields::fields;
    use super::*;

    #[test]
    fn lines_parse() {
        let l = parse_line(b"web-01.cpu-0.cpu-idle 97.5 1700000000").unwrap();
        assert_eq!(l.path, "web-01.cpu-0.cpu-idle");
        assert_eq!((l.value, l.ts_ms), (97.5, Some(1_700_000_000_000)));
        let l = parse_line(b"a.b;dc=eu;rack=r1  -2e3\t1700000000.0259\r").unwrap();
        let tags: Vec<_> = l.tags.iter().collect();
        assert_eq!(tags, [("dc", "eu"), ("rack", "r1")]);
        assert_eq!((l.value, l.ts_ms), (-2000.0, Some(1_700_000_000_025)));
        assert_eq!(parse_line(b"a.b 1").unwrap().ts_ms, None);
        assert_eq!(parse_line(b"a.b 1 -1").unwrap().ts_ms, None);
        assert_eq!(parse_line(b"a.b 1 .5").unwrap().ts_ms, Some(500));
        assert!(parse_line(b"a.b nan 1").unwrap().value.is_nan());
    }

    /// The agents' forms read by place, and their near misses by the
    /// general reading, to the same values and refusals.
    #[test]
    fn agents_timestamps_read_by_place() {
        for (text, want) in [
            ("1700000000.123", Some(1_700_000_000_123)),
            ("1700000000", Some(1_700_000_000_000)),
            ("0000000000.000", Some(0)),
            ("9999999999.999", Some(9_999_999_999_999)),
            ("1700000000.1234", Some(1_700_000_000_123)),
            ("1700000000.12", Some(1_700_000_000_120)),
            ("170000000x.123", None),
            ("1700000000.12x", None),
            ("1700000000x123", None),
            ("17000000.0.123", None),
        ] {
            assert_eq!(seconds_to_ms(text), want, "{text}");
            assert_eq!(seconds_by_parts(text), want, "{text}");
        }
        assert_eq!(agents_seconds_to_ms(b"1700000000.1234"), None);
    }

    #[test]
    fn bad_lines_say_why() {
        for (line, want) in [
            (&b"a.b"[..], LineError::Fields(1)),
            (b"a.b 1 2 3", LineError::Fields(4)),
            (b"a..b 1 2", LineError::Path),
            (b".a 1 2", LineError::Path),
            (b"a;t 1 2", LineError::Tag("t".into())),
            (b"a;t= 1 2", LineError::Tag("t=".into())),
            (b"a -inf 2", LineError::Value("-inf".into())),
            (b"a inf 2", LineError::Value("inf".into())),
            (b"a 1x 2", LineError::Value("1x".into())),
            (b"a 1 12x", LineError::Timestamp("12x".into())),
            (b"a 1 1.2.3", LineError::Timestamp("1.2.3".into())),
            (b"a 1 -", LineError::Timestamp("-".into())),
            (b"a\xff 1 2", LineError::NotUtf8),
        ] {
            assert_eq!(
                parse_line(line),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    /// The reading [`seconds_to_ms`] replaced, kept as its reference.
    fn seconds_by_parts(text: &str) -> Option<i64> {
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        let negative = whole.starts_with('-');
        let digits = whole.strip_prefix('-').unwrap_or(whole);
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (digits.is_empty() && frac.is_empty())
            || !all_digits(digits)
            || !all_digits(frac)
            || digits.len() > 15
        {
            return None;
        }
        let secs: i64 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let mut ms = 0i64;
        for (i, b) in frac.bytes().take(3).enumerate() {
            ms += i64::from(b - b'0') * [100, 10, 1][i];
        }
        let total = secs * 1000 + ms;
        Some(if negative { -total } else { total })
    }

    #[test]
    fn paths_with_tags_split_at_the_first_semicolon() {
        let l = parse_line(b"a.b;x=1;y=2 1").unwrap();
        let tags: Vec<_> = l.tags.iter().collect();
        assert_eq!((l.path, &tags[..]), ("a.b", &[("x", "1"), ("y", "2")][..]));
        for bad in [";x=1", "a.;x=1", ".a", "a..b;x=1", "a.b."] {
            let line = format!("{bad} 1");
            assert_eq!(parse_line(line.as_bytes()), Err(LineError::Path), "{bad:?}");
        }
        // An empty tag list after a `;` is a bad tag, as before.
        assert_eq!(parse_line(b"a.b; 1 2"), Err(LineError::Tag(String::new())));
        // The count of fields is told before a bad path.
        assert_eq!(parse_line(b"a..b 1 2 3"), Err(LineError::Fields(4)));
    }

    /// What a line means, read by splitting it into its parts: the
    /// reference the one-pass reading is held to.
    fn parse_by_splitting(text: &str) -> Result<Line<'_>, LineError> {
        let fields: Vec<&str> = text
            .split([' ', '\t', '\r'])
            .filter(|f| !f.is_empty())
            .collect();
        let (field, value, ts) = match fields[..] {
            [p, v] => (p, v, None),
            [p, v, t] => (p, v, Some(t)),
            _ => return Err(LineError::Fields(fields.len())),
        };
        let (path, tag_text) = match field.split_once(';') {
            Some((path, tags)) => (path, Some(tags)),
            None => (field, None),
        };
        if path.split('.').any(str::is_empty) {
            return Err(LineError::Path);
        }
        for tag in tag_text.into_iter().flat_map(|t| t.split(';')) {
            match tag.split_once('=') {
                Some((k, v)) if !k.is_empty() && !v.is_empty() => {}
                _ => return Err(LineError::Tag(clip(tag))),
            }
        }
        let tags = Tags(tag_text.unwrap_or_default());
        let value = value
            .parse::<f64>()
            .ok()
            .filter(|v| !v.is_infinite())
            .ok_or_else(|| LineError::Value(clip(value)))?;
        let ts_ms = match ts {
            None | Some("-1") => None,
            Some(t) => Some(seconds_by_parts(t).ok_or_else(|| LineError::Timestamp(clip(t)))?),
        };
        Ok(Line {
            path,
            tags,
            value,
            ts_ms,
            first_end: path.find('.').unwrap_or(path.len()),
        })
    }

    proptest! {
        #[test]
        fn any_line_parses_or_is_refused(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_line(&line);
        }

        /// The byte-level readings say what splitting the text says.
        #[test]
        fn fields_and_components_read_as_splitting_does(
            text in "([a-c.;]{0,12}[ \t\r]{0,2}){0,4}",
            n in 1usize..5,
        ) {
            let split: Vec<&str> = text.split([' ', '\t', '\r']).filter(|f| !f.is_empty()).collect();
            prop_assert_eq!(fields(&text).collect::<Vec<_>>(), split);
            let field = text.replace([' ', '\t', '\r'], "");
            let path = field.split(';').next().unwrap_or_default();
            let parts: Vec<&str> = path.split('.').collect();
            let want = parts.get(n - 1).copied();
            prop_assert_eq!(component(path, n).map(|(s, e)| &path[s..e]), want);
        }

        /// A line reads in one pass as splitting it into its parts reads
        /// it: the same line, or the same refusal.
        #[test]
        fn lines_read_as_splitting_them_does(
            text in "[ \t]?[a-c.;=é]{0,9}[ \t\r]{0,2}(-?[0-9]{0,3}\\.?[0-9]{0,2}|nan|-inf|1e3|x)?[ \t\r]{0,2}(-?[0-9]{0,4}\\.?[0-9]{0,4}|-1|x)?[ \t\r]{0,2}[a1]{0,2}\r?",
        ) {
            let ours = parse_text(&text);
            let theirs = parse_by_splitting(&text);
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!((a.path, &a.tags, a.ts_ms, a.first_end), (b.path, &b.tags, b.ts_ms, b.first_end), "{:?}", text);
                    prop_assert_eq!(a.value.to_bits(), b.value.to_bits(), "{:?}", text);
                }
                _ => prop_assert_eq!(ours, theirs, "{:?}", text),
            }
        }

        /// Any text reads as splitting it at its point and parsing the
        /// parts reads it.
        #[test]
        fn seconds_read_in_one_pass_as_split_parts_are(text in "-?[0-9]{0,17}\\.?[0-9.x+-]{0,6}") {
            prop_assert_eq!(seconds_to_ms(&text), seconds_by_parts(&text), "{:?}", text);
        }

        #[test]
        fn agents_seconds_read_as_the_general_reading_does(text in "[0-9]{0,10}[0-9x.]{0,2}\\.?[0-9x.]{0,4}") {
            if let Some(ms) = agents_seconds_to_ms(text.as_bytes()) {
                prop_assert_eq!(Some(ms), seconds_by_parts(&text));
            }
            prop_assert_eq!(seconds_to_ms(&text), seconds_by_parts(&text));
        }

        #[test]
        fn fractional_seconds_are_exact(secs in 0i64..4_000_000_000, ms in 0i64..1000) {
            let text = format!("h.m 1 {secs}.{ms:03}");
            prop_assert_eq!(parse_line(text.as_bytes()).unwrap().ts_ms, Some(secs * 1000 + ms));
        }
    }
}
