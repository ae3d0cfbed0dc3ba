//! Where a short slice's bytes of a few classes are, as bitmasks: bit `i`
//! of a class's mask is set when byte `i` is one of the class's bytes.
//! Graphite's reader splits a line, and a read into lines, by these masks
//! and then finds each part with a bit search, rather than by a scan per
//! part (a call and a loop each, and a mispredicted branch per stop).
//!
//! On x86-64 sixteen bytes are classed a step with SSE2, which every
//! x86-64 has (through `safe_arch`, since the standard library's
//! intrinsics need `unsafe` outside functions marked with the feature):
//! a compare per class byte and one gather of the results' high bits.
//! Elsewhere, and for slices under sixteen bytes, eight bytes a step in
//! general-purpose registers, the reference the vectors are held to.

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const HIGH: u64 = ONES << 7;
const LOW: u64 = !HIGH;

/// The masks of `b`'s first 64 bytes for each of `classes` (a byte set
/// each, of one to a few bytes).
#[inline(always)]
pub(crate) fn masks<const K: usize>(b: &[u8], classes: [&[u8]; K]) -> [u64; K] {
    let b = b.get(..64).unwrap_or(b);
    by_vectors(b, classes)
}

/// The positions of `byte` in a slice, first to last, found 64 bytes a
/// window by [`masks`].
pub(crate) struct Positions<'a> {
    bytes: &'a [u8],
    byte: u8,
    /// Where the next window starts.
    window: usize,
    /// Where the current window starts, and its positions not yet taken.
    base: usize,
    mask: u64,
}

impl<'a> Positions<'a> {
    pub(crate) fn new(bytes: &'a [u8], byte: u8) -> Positions<'a> {
        Positions {
            bytes,
            byte,
            window: 0,
            base: 0,
            mask: 0,
        }
    }
}

impl Iterator for Positions<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            let rest = self.bytes.get(self.window..).filter(|r| !r.is_empty())?;
            let [mask] = masks(rest, [&[self.byte]]);
            self.base = self.window;
            self.mask = mask;
            self.window += rest.len().min(64);
        }
        let at = self.base + self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(at)
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn by_vectors<const K: usize>(b: &[u8], classes: [&[u8]; K]) -> [u64; K] {
    use safe_arch::{cmp_eq_mask_i8_m128i, m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let Some(last) = b.last_chunk::<16>() else {
        return by_words(b, classes);
    };
    let class = |c: &[u8; 16]| {
        let v = m128i::from(*c);
        classes.map(|class| {
            let hits = class.iter().fold(m128i::default(), |hits, &c| {
                hits | cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(c as i8))
            });
            // Sixteen bits, one a byte, as the gather of the high bits
            // leaves them.
            u64::from(move_mask_i8_m128i(hits) as u16)
        })
    };
    let mut out = [0u64; K];
    let mut put = |at: usize, found: [u64; K], drop: usize| {
        for (out, found) in out.iter_mut().zip(found) {
            *out |= (found >> drop) << at;
        }
    };
    let mut chunks = b.chunks_exact(16);
    for (i, chunk) in chunks.by_ref().enumerate() {
        if let Some(chunk) = chunk.first_chunk::<16>() {
            put(16 * i, class(chunk), 0);
        }
    }
    let rest = chunks.remainder().len();
    if rest > 0 {
        // The slice's last sixteen bytes, less those already read.
        put(b.len() - rest, class(last), 16 - rest);
    }
    out
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn by_vectors<const K: usize>(b: &[u8], classes: [&[u8]; K]) -> [u64; K] {
    by_words(b, classes)
}

/// [`masks`] eight bytes a step in general-purpose registers.
#[inline(always)]
fn by_words<const K: usize>(b: &[u8], classes: [&[u8]; K]) -> [u64; K] {
    let mut out = [0u64; K];
    let mut add = |i: usize, w: u64| {
        for (out, class) in out.iter_mut().zip(classes) {
            let high = class.iter().fold(0, |hits, &c| hits | equal(w, c));
            *out |= gather(high) << (8 * i);
        }
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
        // slice's last eight bytes shifted past those already read (a copy
        // into a padded buffer called `memcpy` each time), or, in a slice
        // shorter than a word, its bytes one by one.
        let last = match b.last_chunk::<8>() {
            Some(last) => u64::from_le_bytes(*last) >> (8 * (8 - rest.len())),
            None => rest.iter().rev().fold(0, |w, &c| (w << 8) | u64::from(c)),
        };
        add(b.len() / 8, last);
    }
    out
}

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

/// The high bit of each byte of `w` that is `c`, and no other bit.
#[inline(always)]
fn equal(w: u64, c: u8) -> u64 {
    !nonzero(w ^ (ONES * u64::from(c))) & HIGH
}

/// The high bits of a word's bytes gathered into its lowest eight bits,
/// byte `i`'s as bit `i`: the multiply moves each to its own bit of the
/// top byte, and no two partial products share a bit, so nothing carries
/// into it.
#[inline(always)]
fn gather(high: u64) -> u64 {
    ((high >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const CLASSES: [&[u8]; 3] = [b" \t\r", b";", b"."];

    /// Each class's mask, a byte at a time.
    fn by_bytes<const K: usize>(b: &[u8], classes: [&[u8]; K]) -> [u64; K] {
        classes.map(|class| {
            b.iter()
                .take(64)
                .enumerate()
                .filter(|(_, c)| class.contains(c))
                .fold(0, |m, (i, _)| m | 1 << i)
        })
    }

    /// A class's byte with its high bit flipped, or a byte above or below
    /// it, is not it.
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(b' '),
                Just(b'\t'),
                Just(b'\r'),
                Just(b';'),
                Just(b'.'),
                Just(b'\n'),
                Just(0xa0u8),
                Just(0xaeu8),
                Just(0xbbu8),
                Just(0x8au8),
                Just(b'/'),
                Just(b'-'),
                any::<u8>(),
            ],
            0..=200,
        )
    }

    proptest! {
        #[test]
        fn vectors_and_words_find_each_byte_of_each_class(b in bytes()) {
            let want = by_bytes(&b, CLASSES);
            prop_assert_eq!(masks(&b, CLASSES), want, "{:?}", b);
            let head = &b[..b.len().min(64)];
            prop_assert_eq!(by_words(head, CLASSES), want, "{:?}", b);
        }

        #[test]
        fn positions_are_each_newline_in_order(b in bytes()) {
            let want: Vec<usize> = memchr::memchr_iter(b'\n', &b).collect();
            prop_assert_eq!(Positions::new(&b, b'\n').collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn every_length_to_past_a_window() {
        for n in 0..=140 {
            let b: Vec<u8> = (0..n)
                .map(|i| {
                    if i % 7 == 3 {
                        b'\n'
                    } else {
                        b'a' + (i % 5) as u8
                    }
                })
                .collect();
            let want: Vec<usize> = (0..n).filter(|i| i % 7 == 3).collect();
            assert_eq!(Positions::new(&b, b'\n').collect::<Vec<_>>(), want, "{n}");
            assert_eq!(masks(&b, [b"\n"]), by_bytes(&b, [b"\n"]), "{n}");
        }
    }
}
