//! Where a Graphite line's fields are (`path[;tags] value [timestamp]`,
//! split at runs of spaces, tabs and carriage returns), and whether its
//! path has an empty component.
//!
//! A line of up to 64 bytes, as nearly every line is, is read once into
//! three bitmasks of its bytes (blanks, `;`, `.`), sixteen bytes at a time
//! on x86-64 (eight elsewhere, and in lines under sixteen bytes);
//! each field's bounds and the path's check are then a few bit searches
//! without a branch per byte. Searched part by part (the path's end, its
//! `;`, its dots, then each field after it, a call and a scan each), the
//! parser's own steps were a sixth of the daemon's time in a profile of W1
//! over Graphite, and mispredicted three times the branches. Longer lines
//! are searched part by part, as the reference the masks are held to.

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

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = ONES << 7;
const LOW: u64 = !HIGH;

/// A word whose bytes have their high bit set exactly where `x`'s bytes
/// are not zero (the low bits are noise: callers keep the high ones).
/// Exact for every byte, unlike the usual zero-byte test, whose borrow
/// can flag a byte above a zero: a byte's low seven bits plus 0x7f sum to
/// at most 0xfe, so they carry into its own high bit, unless they are all
/// zero, and never into the next byte.
#[inline(always)]
fn nonzero(x: u64) -> u64 {
    ((x & LOW) + LOW) | x
}

/// A word whose bytes have their high bit set exactly where `w`'s bytes
/// are not `c` (low bits as in [`nonzero`]).
#[inline(always)]
fn differs(w: u64, c: u8) -> u64 {
    nonzero(w ^ (ONES * u64::from(c)))
}

/// The high bit of each byte of `w` that is `c`, and no other bit.
#[inline(always)]
fn equal(w: u64, c: u8) -> u64 {
    !differs(w, c) & HIGH
}

/// The high bit of each byte of `w` that is a blank (space, tab,
/// carriage return), and no other bit.
#[inline(always)]
fn blanks(w: u64) -> u64 {
    !(differs(w, b' ') & differs(w, b'\t') & differs(w, b'\r')) & HIGH
}

/// The high bits of a word's bytes gathered into its lowest eight bits,
/// byte `i`'s as bit `i`: the multiply moves each to its own bit of the
/// top byte, and no two partial products share a bit, so nothing carries
/// into it.
#[inline(always)]
fn gather(high: u64) -> u64 {
    ((high >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

/// The bits `from..to` of a 64-bit mask (`from <= to <= 64`).
#[inline(always)]
fn bits(from: usize, to: usize) -> u64 {
    let below = |k: usize| u64::MAX.checked_shr(64 - k as u32).unwrap_or(0);
    below(to) & !below(from)
}

/// Where a line's blanks, `;`s and `.`s are: bit `i` of each mask is
/// byte `i`'s (a line of at most 64 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Masks {
    blank: u64,
    semi: u64,
    dot: u64,
}

/// [`Masks`] sixteen bytes a step with SSE2, which every x86-64 has (by
/// `safe_arch`, as the standard library's intrinsics need `unsafe` here):
/// a compare per class and one gather of the high bits, about a fifth of
/// the instructions of eight bytes a step in general-purpose registers
/// ([`masks_by_words`], which lines under sixteen bytes still take).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn masks(b: &[u8]) -> Masks {
    use safe_arch::{cmp_eq_mask_i8_m128i, m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let class = |c: &[u8; 16]| {
        let v = m128i::from(*c);
        let is = |c: u8| cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(c as i8));
        // Sixteen bits each, as the gather of the high bits leaves them.
        let bits = |m: m128i| u64::from(move_mask_i8_m128i(m) as u16);
        Masks {
            blank: bits(is(b' ') | is(b'\t') | is(b'\r')),
            semi: bits(is(b';')),
            dot: bits(is(b'.')),
        }
    };
    let Some(last) = b.last_chunk::<16>() else {
        return masks_by_words(b);
    };
    let mut m = Masks {
        blank: 0,
        semi: 0,
        dot: 0,
    };
    let mut put = |at: usize, c: Masks, drop: usize| {
        m.blank |= (c.blank >> drop) << at;
        m.semi |= (c.semi >> drop) << at;
        m.dot |= (c.dot >> drop) << at;
    };
    let mut chunks = b.chunks_exact(16);
    for (i, chunk) in chunks.by_ref().enumerate() {
        if let Some(chunk) = chunk.first_chunk::<16>() {
            put(16 * i, class(chunk), 0);
        }
    }
    let rest = chunks.remainder().len();
    if rest > 0 {
        // The line's last sixteen bytes, less those already read.
        put(b.len() - rest, class(last), 16 - rest);
    }
    m
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn masks(b: &[u8]) -> Masks {
    masks_by_words(b)
}

/// [`Masks`] eight bytes a step in general-purpose registers.
fn masks_by_words(b: &[u8]) -> Masks {
    let (mut blank, mut semi, mut dot) = (0u64, 0u64, 0u64);
    let mut add = |i: usize, w: u64| {
        let at = 8 * i;
        blank |= gather(blanks(w)) << at;
        semi |= gather(equal(w, b';')) << at;
        dot |= gather(equal(w, b'.')) << at;
    };
    let mut words = b.chunks_exact(8);
    for (i, word) in words.by_ref().enumerate() {
        if let Some(word) = word.first_chunk::<8>() {
            add(i, u64::from_le_bytes(*word));
        }
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        // The last bytes as the low end of a word padded with zeros: the
        // line's last eight bytes shifted past those already read (a copy
        // into a padded buffer called `memcpy` for each line), or, in a
        // line shorter than a word, its bytes one by one.
        let last = match b.last_chunk::<8>() {
            Some(last) => u64::from_le_bytes(*last) >> (8 * (8 - rest.len())),
            None => rest.iter().rev().fold(0, |w, &c| (w << 8) | u64::from(c)),
        };
        add(b.len() / 8, last);
    }
    Masks { blank, semi, dot }
}

/// [`split`] for a line of at most 64 bytes; None for a longer one.
fn by_masks(b: &[u8]) -> Option<Fields> {
    let n = b.len();
    if n > 64 {
        return None;
    }
    let Masks { blank, semi, dot } = masks(b);
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
        /// The vector masks are the word masks, at every length to 64 and
        /// for every byte (a class's byte with its high bit set is not it).
        #[test]
        fn vector_masks_are_the_word_masks(
            bytes in proptest::collection::vec(
                prop_oneof![
                    Just(b' '), Just(b'\t'), Just(b'\r'), Just(b';'), Just(b'.'),
                    Just(0xa0u8), Just(0xaeu8), Just(0xbbu8), any::<u8>(),
                ],
                0..=64,
            ),
        ) {
            prop_assert_eq!(masks(&bytes), masks_by_words(&bytes), "{:?}", bytes);
        }
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
