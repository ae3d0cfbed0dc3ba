//! Where a Graphite line's fields are (`path[;tags] value [timestamp]`,
//! split at runs of spaces, tabs and carriage returns), and whether its
//! path has an empty component.
//!
//! A line of up to 64 bytes, as nearly every line is, is read once into
//! three bitmasks of its bytes (blanks, `;`, `.`; [`bytemask`]);
//! each field's bounds and the path's check are then a few bit searches
//! without a branch per byte. Searched part by part (the path's end, its
//! `;`, its dots, then each field after it, a call and a scan each), the
//! parser's own steps were a sixth of the daemon's time in a profile of W1
//! over Graphite, and mispredicted three times the branches. Longer lines
//! are searched part by part, as the reference the masks are held to.

use crate::ingest::bytemask;
use crate::ingest::text::find;

/// Byte offsets of a line's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fields {
    /// The first field (the path and its tags) is `start..end`; empty
    /// when the line is blank.
    pub start: usize,
    pub end: usize,
    /// The first field's first `;`.
    pub semi: Option<usize>,
    pub value: Option<(usize, usize)>,
    pub ts: Option<(usize, usize)>,
    /// A fourth field follows the timestamp.
    pub extra: bool,
    /// The path (the first field up to its first `;`) is empty or has an
    /// empty component.
    pub empty_component: bool,
    /// The path's first `.`.
    pub first_dot: Option<usize>,
}

/// The parts of `text`, a line without its newline.
pub(super) fn split(text: &str) -> Fields {
    by_masks(text.as_bytes()).unwrap_or_else(|| by_search(text))
}

/// How many fields a line has (told when it has the wrong number).
pub(super) fn count(text: &str) -> usize {
    fields(text).count()
}

/// The bits `from..to` of a 64-bit mask (`from <= to <= 64`).
#[inline(always)]
fn bits(from: usize, to: usize) -> u64 {
    let below = |k: usize| u64::MAX.checked_shr(64 - k as u32).unwrap_or(0);
    below(to) & !below(from)
}

/// [`split`] for a line of at most 64 bytes; None for a longer one.
fn by_masks(b: &[u8]) -> Option<Fields> {
    let n = b.len();
    if n > 64 {
        return None;
    }
    let [blank, semi, dot] = bytemask::masks(b, [b" \t\r", b";", b"."]);
    // A field starts where text follows a blank (or the line's start),
    // and ends where a blank follows text. Past the line no bit is text,
    // so a field running to its end has its end at bit `n`, except in a
    // line of 64 bytes, which has no such bit: `next` answers `n` then.
    let text = !blank & bits(0, n);
    let mut starts = text & !(text << 1);
    let mut ends = !text & (text << 1);
    let next = |m: &mut u64| {
        let at = if *m == 0 {
            n
        } else {
            m.trailing_zeros() as usize
        };
        *m &= m.wrapping_sub(1);
        at
    };
    let start = next(&mut starts);
    let end = next(&mut ends);
    let mut field = || (starts != 0).then(|| (next(&mut starts), next(&mut ends)));
    let value = field();
    let ts = value.and_then(|_| field());
    let extra = ts.is_some() && starts != 0;
    let semi = semi & bits(start, end);
    let semi = (semi != 0).then(|| semi.trailing_zeros() as usize);
    let path_end = semi.unwrap_or(end);
    let dots = dot & bits(start, path_end);
    // The first test guards the shifts and the subtraction after it.
    let empty_component = path_end == start
        || dots & (1 << start) != 0
        || dots & (1 << (path_end - 1)) != 0
        || dots & (dots >> 1) != 0;
    Some(Fields {
        start,
        end,
        semi,
        value,
        ts,
        extra,
        empty_component,
        first_dot: (dots != 0).then(|| dots.trailing_zeros() as usize),
    })
}

/// [`split`], each part searched for in turn.
fn by_search(text: &str) -> Fields {
    let b = text.as_bytes();
    let start = skip_blanks(b, 0);
    let rest = text.get(start..).unwrap_or_default();
    let end = start + find(rest, [b' ', b'\t', b'\r']).unwrap_or(rest.len());
    let first = text.get(start..end).unwrap_or_default();
    let semi = find(first, [b';'; 3]).map(|i| start + i);
    let value = next_field(text, end);
    let ts = value.and_then(|(_, e)| next_field(text, e));
    let extra = ts.and_then(|(_, e)| next_field(text, e)).is_some();
    let path = text.get(start..semi.unwrap_or(end)).unwrap_or_default();
    Fields {
        start,
        end,
        semi,
        value,
        ts,
        extra,
        empty_component: has_empty_component(path),
        first_dot: find(path, [b'.'; 3]).map(|i| start + i),
    }
}

/// True when a dotted path is empty, or one of its components is.
fn has_empty_component(path: &str) -> bool {
    let mut rest = path;
    while let Some(dot) = find(rest, [b'.'; 3]) {
        if dot == 0 {
            return true;
        }
        rest = rest.get(dot + 1..).unwrap_or_default();
    }
    rest.is_empty()
}

fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\r'
}

fn skip_blanks(b: &[u8], mut at: usize) -> usize {
    while b.get(at).is_some_and(|&c| is_blank(c)) {
        at += 1;
    }
    at
}

/// The bounds of the field after the blanks at `at`, if any.
fn next_field(text: &str, at: usize) -> Option<(usize, usize)> {
    let start = skip_blanks(text.as_bytes(), at);
    let rest = text.get(start..).filter(|r| !r.is_empty())?;
    let end = find(rest, [b' ', b'\t', b'\r']).map_or(text.len(), |n| start + n);
    Some((start, end))
}

/// A line's fields: the runs between spaces, tabs and carriage returns.
pub(super) fn fields(text: &str) -> impl Iterator<Item = &str> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let (start, end) = next_field(text, at)?;
        at = end;
        text.get(start..end)
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Every ASCII byte, and non-ASCII characters whose bytes differ
    /// from a stop's by their high bit alone (0xa0 is a space's, 0x89 a
    /// tab's, 0xae a dot's, 0xbb a semicolon's), in every place of the
    /// first words and beside each kind of stop: the masks find what the
    /// search finds.
    #[test]
    fn every_byte_in_every_place_splits_as_the_search_does() {
        let lookalikes = [
            'é', '€', '\u{a0}', '\u{89}', '\u{8d}', '\u{ae}', '\u{bb}', '\u{80}',
        ];
        for c in (0u8..0x80).map(char::from).chain(lookalikes) {
            for pad in 0..9 {
                let lead = "a".repeat(pad);
                for line in [
                    format!("{lead}{c}.b 1 2"),
                    format!("{lead}.{c};t=v\t1 {c}"),
                    format!("{lead}{c}{c} {c}1{c} 2{c}"),
                ] {
                    assert_eq!(
                        by_masks(line.as_bytes()),
                        Some(by_search(&line)),
                        "{line:?}"
                    );
                }
            }
        }
    }

    /// Lines at and around 64 bytes, the masks' width: a field ending
    /// with a line of 64 bytes has no end bit.
    #[test]
    fn lines_at_the_masks_width_split_as_the_search_does() {
        for n in 56..=66 {
            for line in [
                format!("{} 1 2", "a".repeat(n - 4)),
                format!("{}.b;t=v 1", "a".repeat(n - 9)),
                format!(" {} 1", "a.".repeat((n - 3) / 2)),
                "a".repeat(n),
                " ".repeat(n),
                "a".repeat(n - 1) + ".",
                "a".repeat(n - 2) + " .",
            ] {
                let want = (line.len() <= 64).then(|| by_search(&line));
                assert_eq!(by_masks(line.as_bytes()), want, "{line:?}");
            }
        }
    }

    #[test]
    fn a_line_past_64_bytes_is_searched() {
        let line = format!("{} 1 2", "a.".repeat(31) + "b");
        assert_eq!(line.len(), 67);
        assert_eq!(by_masks(line.as_bytes()), None);
        let f = split(&line);
        assert_eq!((f.start, f.end, f.extra), (0, 63, false));
        assert_eq!((f.value, f.ts), (Some((64, 65)), Some((66, 67))));
    }

    proptest! {
        /// Any line of up to 64 bytes is split by its masks as searching
        /// it part by part splits it.
        #[test]
        fn masks_split_as_the_search_does(
            text in "[ \t\r]{0,2}[a-c.;=é]{0,20}([ \t\r]{1,3}[0-9.a-]{0,12}){0,4}[ \t\r]{0,2}",
            wide in "[a-c. \t\r;=\u{80}-\u{7ff}]{0,64}",
        ) {
            for line in [&text, &wide] {
                let want = (line.len() <= 64).then(|| by_search(line));
                prop_assert_eq!(by_masks(line.as_bytes()), want, "{:?}", line);
            }
        }
    }
}
