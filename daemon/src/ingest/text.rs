//! Comparing and searching the short names and fields the protocol
//! readers and the aggregator meet on every line or series: a measurement,
//! a tag key, a field key, a source, a Graphite line's fields, a series'
//! names against the one the table found.
//!
//! Why: `==` on strings calls the C library's `memcmp` once the lengths
//! agree. For names of a few bytes the call costs more than the compare;
//! reading a W1 line-protocol body made five such calls a line, an eighth
//! of its reading, and three a series took 9% of ingest's CPU on W1.

/// `a == b`; see [`same_bytes`].
#[inline(always)]
pub(crate) fn same(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// `a == b`, inline. Up to three bytes are compared one by one; up to
/// sixteen in two loads a side (which overlap when shorter than the pair);
/// longer slices eight bytes at a time, the last word overlapping the one
/// before it.
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        9..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => {
            let mut at = 0;
            while at + 8 < n {
                if word::<8>(a, at) != word::<8>(b, at) {
                    return false;
                }
                at += 8;
            }
            word::<8>(a, n - 8) == word::<8>(b, n - 8)
        }
    }
}

/// The first of `stops` in `s`, eight bytes at a time. A line's parts are
/// a few bytes each: read byte by byte they were a third of reading a
/// line-protocol line, and memchr's calls, made for longer haystacks, cost
/// more still.
#[inline]
pub(crate) fn find(s: &str, stops: [u8; 3]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    // Flags the bytes of `v` that are zero; the lowest flag is exact
    // (a false one can only sit above a true one).
    let zeros = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let [a, b, c] = stops.map(|stop| ONES * u64::from(stop));
    let bytes = s.as_bytes();
    let mut at = 0;
    while let Some(word) = bytes.get(at..).and_then(|rest| rest.first_chunk::<8>()) {
        let w = u64::from_le_bytes(*word);
        let hits = zeros(w ^ a) | zeros(w ^ b) | zeros(w ^ c);
        if hits != 0 {
            return Some(at + hits.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = bytes.get(at..)?;
    tail.iter().position(|x| stops.contains(x)).map(|i| at + i)
}

/// The `N` bytes of `s` from `at`, if it has them.
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> Option<[u8; N]> {
    s.get(at..)
        .and_then(|rest| rest.first_chunk::<N>())
        .copied()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn same_is_equality(a in "[ab]{0,20}", b in "[ab]{0,20}") {
            prop_assert_eq!(same(&a, &b), a == b);
            prop_assert!(same(&a, &a.clone()));
        }

        /// At every length, for slices that differ in any one byte or
        /// not at all.
        #[test]
        fn same_bytes_is_equality(
            a in proptest::collection::vec(any::<u8>(), 0..80),
            flip in proptest::option::of((0usize..80, 1u8..=255)),
            shorter in any::<bool>(),
        ) {
            let mut b = a.clone();
            if let Some((at, x)) = flip {
                if let Some(byte) = b.get_mut(at) {
                    *byte ^= x;
                }
            }
            if shorter {
                b.pop();
            }
            prop_assert_eq!(same_bytes(&a, &b), a == b);
        }

        /// The word-wide search finds what a byte-by-byte one finds, in
        /// any text: bytes over 0x7f, and each stop's byte with its lowest
        /// bit flipped (`<`, `-`, `!`), the one a borrow could flag.
        #[test]
        fn find_is_the_first_stop(s in "[a-c =,<!\u{80}-\u{ff}€-]{0,40}") {
            for stops in [[b'=', b' ', b','], [b',', b' ', b' '], [b' '; 3]] {
                let want = s.bytes().position(|c| stops.contains(&c));
                prop_assert_eq!(find(&s, stops), want, "{:?} {:?}", s, stops);
            }
        }
    }
}
