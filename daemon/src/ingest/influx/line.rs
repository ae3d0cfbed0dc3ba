//! One line of line protocol, read without allocating.
//!
//! InfluxData's parser (`influxdb-line-protocol`) is the reference, and it
//! reads every line; but it allocates about twice per line as it goes
//! (its alternatives build error traces while they try each value type),
//! and it was most of the line-protocol path's cost. So the shape nearly
//! every agent sends — no escapes, no quoted strings, plain numbers and
//! booleans — is read here by [`fast`], straight into slices of the line;
//! anything else, and anything [`fast`] is not sure of, goes to the
//! reference parser, whose answer (and error message) stands. [`fast`]
//! never decides a line the reference would read differently: a property
//! test holds every line it accepts to the reference's reading of it.

use influxdb_line_protocol::{FieldValue, ParsedLine};

use crate::ingest::number::{full_decimal, short_decimal};
use crate::ingest::text::find;

/// A field's value, as Tally reads it: a number, or a string it skips.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value {
    Number(f64),
    String,
}

/// A line's parts; strings borrowed from the line (or, from the reference
/// parser, from wherever its unescaping put them). One is filled line
/// after line, so its lists keep their room and a line is never moved.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Line<'a> {
    pub measurement: &'a str,
    pub tags: Vec<(&'a str, &'a str)>,
    pub fields: Vec<(&'a str, Value)>,
    pub timestamp: Option<i64>,
}

/// True when `body` holds no escape, quote or control character other
/// than a newline: then no line of it needs [`fast`]'s own look for them.
/// One pass without early exit, which the compiler makes wide.
pub(super) fn plain_body(body: &[u8]) -> bool {
    body.chunks(256).all(|chunk| {
        !chunk.iter().fold(false, |odd, &c| {
            odd | (c == b'\\') | (c == b'"') | ((c < 0x20) & (c != b'\n'))
        })
    })
}

/// Reads `line` into `out` when it has the plain shape; false sends it to
/// the reference parser (and leaves `out` partly filled). `plain` says the
/// body was found free of escapes, quotes and control characters.
pub(super) fn fast<'a>(line: &'a str, plain: bool, out: &mut Line<'a>) -> bool {
    out.tags.clear();
    out.fields.clear();
    let b = line.as_bytes();
    // Escapes, quotes, control characters (tabs, NUL) and comments: the
    // reference's.
    if b.first() == Some(&b'#') || !plain && b.iter().any(|&c| c == b'\\' || c == b'"' || c < 0x20)
    {
        return false;
    }
    read_plain(line, out).is_some()
}

/// [`fast`]'s reading of a line known to hold no escape or quote.
fn read_plain<'a>(line: &'a str, out: &mut Line<'a>) -> Option<()> {
    let (measurement, mut rest) = until(line, find(line, [b',', b' ', b' ']))?;
    out.measurement = measurement;
    let tags = &mut out.tags;
    while let Some(after) = rest.strip_prefix(',') {
        // A tag key may hold a comma in the reference's grammar: not here.
        let (key, after) = until(after, key_end(after))?;
        let after = after.strip_prefix('=')?;
        let (value, after) = until(after, find(after, [b',', b' ', b' ']))?;
        tags.push((key, value));
        rest = after;
    }
    let mut rest = spaces(rest)?;
    let fields = &mut out.fields;
    loop {
        let (key, after) = until(rest, key_end(rest))?;
        let after = after.strip_prefix('=')?;
        let (text, after) = until(after, find(after, [b',', b' ', b' ']))?;
        fields.push((key, Value::Number(number(text)?)));
        match after.strip_prefix(',') {
            Some(next) => rest = next,
            None => {
                rest = after;
                break;
            }
        }
    }
    out.timestamp = if rest.is_empty() {
        None
    } else {
        let rest = spaces(rest)?;
        let (text, after) = until(rest, find(rest, [b' '; 3]))?;
        if !after.bytes().all(|c| c == b' ') {
            return None;
        }
        Some(int64(text)?)
    };
    Some(())
}

/// The non-empty text before `at` (where [`find`] found the byte that
/// ends it; to the end when none did), and the rest.
fn until(s: &str, at: Option<usize>) -> Option<(&str, &str)> {
    let at = at.unwrap_or(s.len());
    (at > 0).then(|| s.split_at(at))
}

/// Where a key ends: its `=`, or a space or comma that makes the line
/// not the plain shape.
fn key_end(s: &str) -> Option<usize> {
    find(s, [b'=', b' ', b','])
}

/// Skips one or more spaces.
fn spaces(s: &str) -> Option<&str> {
    let rest = s.trim_start_matches(' ');
    (rest.len() < s.len()).then_some(rest)
}

/// `-?[0-9]+`, as the reference's integral values.
fn integer(s: &str) -> Option<&str> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())).then_some(s)
}

/// `-?[0-9]+` as an `i64`: digits read as they are checked, up to the
/// eighteen that cannot overflow; longer ones through the standard parse.
fn int64(s: &str) -> Option<i64> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 {
        return integer(s)?.parse().ok();
    }
    let mut v = 0i64;
    for c in digits.bytes() {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(if negative { -v } else { v })
}

/// A field value of the plain shapes: `1i`, `1u`, a float the reference
/// reads (`1`, `-1.5`, `1.5e-3`, `2E6`) or a boolean.
fn number(s: &str) -> Option<f64> {
    if let Some(v) = short_decimal(s) {
        return Some(v);
    }
    if let Some(int) = s.strip_suffix('i') {
        return int64(int).map(|v| v as f64);
    }
    if let Some(uint) = s.strip_suffix('u') {
        let digits = uint.bytes().all(|c| c.is_ascii_digit()) && !uint.is_empty();
        return digits.then(|| uint.parse::<u64>().ok().map(|v| v as f64))?;
    }
    match s {
        "t" | "T" | "true" | "True" | "TRUE" => return Some(1.0),
        "f" | "F" | "false" | "False" | "FALSE" => return Some(0.0),
        _ => {}
    }
    float_shape(s).then(|| full_decimal(s))?
}

/// `-?D(.D)?([eE][+-]?D)?` with `D` one or more digits: the float shapes
/// the reference reads (`1`, `1.5`, `1e5`, `1.5e-5`), in one walk of the
/// bytes: searching for the exponent, then for the point, then checking
/// each part's digits walked a full-precision value (W1's gauges) three
/// times.
fn float_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let mut at = usize::from(b.first() == Some(&b'-'));
    let digits = |at: &mut usize| {
        let start = *at;
        while b.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        *at > start
    };
    if !digits(&mut at) {
        return false;
    }
    if b.get(at) == Some(&b'.') {
        at += 1;
        if !digits(&mut at) {
            return false;
        }
    }
    if matches!(b.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(b.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        if !digits(&mut at) {
            return false;
        }
    }
    at == b.len()
}

/// The reference parser's reading, into `out` in the same form; `keep`
/// makes its strings live as long as the request.
pub(super) fn of_reference<'a>(
    line: &ParsedLine<'a>,
    keep: impl Fn(&influxdb_line_protocol::EscapedStr<'a>) -> &'a str,
    out: &mut Line<'a>,
) {
    let tags = line.series.tag_set.as_deref().unwrap_or_default();
    out.measurement = keep(&line.series.measurement);
    out.tags.clear();
    out.tags
        .extend(tags.iter().map(|(k, v)| (keep(k), keep(v))));
    out.fields.clear();
    out.fields.extend(line.field_set.iter().map(|(k, v)| {
        let value = match v {
            FieldValue::F64(v) => Value::Number(*v),
            FieldValue::I64(v) => Value::Number(*v as f64),
            FieldValue::U64(v) => Value::Number(*v as f64),
            FieldValue::Boolean(v) => Value::Number(f64::from(u8::from(*v))),
            FieldValue::String(_) => Value::String,
        };
        (keep(k), value)
    }));
    out.timestamp = line.timestamp;
}

#[cfg(test)]
mod tests {
    use influxdb_line_protocol::{parse_lines, EscapedStr};
    use proptest::prelude::*;

    use super::*;

    /// A test's unescaped strings are kept to the end of the run.
    fn keep<'a>(s: &EscapedStr<'a>) -> &'a str {
        match s {
            EscapedStr::SingleSlice(s) => s,
            EscapedStr::CopiedValue(s) => s.clone().leak(),
        }
    }

    fn reference(line: &str) -> Option<Line<'_>> {
        let parsed = parse_lines(line).next()?.ok()?;
        let mut out = Line::default();
        of_reference(&parsed, keep, &mut out);
        Some(out)
    }

    /// [`fast`]'s reading on its own, and with the body already found
    /// plain when it is: the two must agree.
    fn fast_line(line: &str) -> Option<Line<'_>> {
        let mut out = Line::default();
        let read = fast(line, false, &mut out);
        if plain_body(line.as_bytes()) {
            let mut known = Line::default();
            assert_eq!(fast(line, true, &mut known), read, "{line:?}");
            assert!(!read || known == out, "{line:?}");
        }
        read.then_some(out)
    }

    fn same<'a>(a: &Line<'a>, b: &Line<'a>) -> bool {
        let fields = a.fields.len() == b.fields.len()
            && a.fields.iter().zip(&b.fields).all(|(x, y)| {
                x.0 == y.0
                    && match (x.1, y.1) {
                        (Value::Number(p), Value::Number(q)) => p.to_bits() == q.to_bits(),
                        (p, q) => p == q,
                    }
            });
        a.measurement == b.measurement && a.tags == b.tags && fields && a.timestamp == b.timestamp
    }

    /// Lines as agents write them, and near misses.
    fn line() -> impl Strategy<Value = String> {
        let word = "[a-z][a-z0-9_.-]{0,5}";
        let value = prop_oneof![
            "-?[0-9]{1,4}(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            "-?[0-9]{1,9}\\.?[0-9]{0,9}",
            "-?[0-9]{1,20}i",
            "[0-9]{1,21}u",
            "(t|T|true|True|TRUE|f|F|false|False|FALSE|tru|yes)",
            "[0-9.eE+-]{1,6}[iu]?",
        ];
        (
            word,
            prop::collection::vec((word, "[a-zA-Z0-9=.:-]{0,4}"), 0..3),
            prop::collection::vec((word, value), 1..3),
            prop::option::of("-?[0-9]{1,20}"),
            "( {0,2})",
        )
            .prop_map(|(m, tags, fields, ts, trail)| {
                let mut s = m;
                for (k, v) in tags {
                    s.push_str(&format!(",{k}={v}"));
                }
                s.push(' ');
                let fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&fields.join(","));
                if let Some(ts) = ts {
                    s.push_str(&format!(" {ts}"));
                }
                s.push_str(&trail);
                s
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// What the fast path reads, the reference reads the same way.
        #[test]
        fn the_fast_path_reads_only_what_the_reference_reads_alike(line in line()) {
            if let Some(fast) = fast_line(&line) {
                let Some(theirs) = reference(&line) else {
                    return Err(TestCaseError::fail(format!("{line:?}: read here, refused by the reference")));
                };
                prop_assert!(same(&fast, &theirs), "{:?}: {:?} vs {:?}", line, fast, theirs);
            }
        }

        /// Arbitrary text: the same rule.
        #[test]
        fn odd_text_is_read_alike_or_left_to_the_reference(line in "[a-c,= 0-9.eEiutf\"\\\\-]{0,30}") {
            if let Some(fast) = fast_line(&line) {
                let theirs = reference(&line);
                prop_assert!(theirs.as_ref().is_some_and(|t| same(&fast, t)), "{:?}: {:?} vs {:?}", line, fast, theirs);
            }
        }
    }

    /// The plain shape is what the fast path is for: it must take it.
    #[test]
    fn agents_lines_take_the_fast_path() {
        for line in [
            "cpu,host=web-1,cpu=cpu0 usage_idle=97.5,ticks=12i,free=3u,up=t 1700000000123456789",
            "mem,host=h used=1e3,avail=2.5E-3 1700000000",
            "disk,host=h,path=/var free=-4i",
            "m,host=h v=1",
        ] {
            let fast = fast_line(line).unwrap_or_else(|| panic!("{line}: not read"));
            assert!(same(&fast, &reference(line).unwrap()), "{line}");
        }
    }
}
