//! Comparing, searching and checking the short names and fields the
//! protocol readers and the aggregator meet on every line or series: a
//! measurement, a tag key, a field key, a source, a Graphite line's
//! fields, a series' names against the one the table found; and a wire
//! protocol's names checked as UTF-8 once a request ([`TextMemo`]) and
//! values kept by name for one request ([`NameTable`]).
//!
//! Why: `==` on strings calls the C library's `memcmp` once the lengths
//! agree. For names of a few bytes the call costs more than the compare;
//! reading a W1 line-protocol body made five such calls a line, an eighth
//! of its reading, and three a series took 9% of ingest's CPU on W1.

use std::hash::BuildHasher as _;

use hashbrown::{DefaultHashBuilder, HashTable};

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

/// Values kept by name for one request, the names compared inline
/// ([`same`]; a table keyed by `&str` calls `memcmp` for each lookup),
/// at most `cap` of them: past that a value is made again at each use the
/// memo below does not answer.
///
/// A direct-mapped memo of the names last asked for sits in front of the
/// table, as in [`TextMemo`]: a request asks for a few names thousands of
/// times, and a slot found by one word of the name costs less than the
/// table's hash of all of it (which took 3.5% of the daemon's CPU on W1
/// over remote-write, asked once a series).
pub(crate) struct NameTable<'a, V> {
    recent: [Option<(&'a str, V)>; 1 << MEMO_BITS],
    table: HashTable<(&'a str, V)>,
    hasher: DefaultHashBuilder,
    cap: usize,
}

impl<'a, V: Copy> NameTable<'a, V> {
    pub(crate) fn with_cap(cap: usize) -> Self {
        NameTable {
            recent: [None; 1 << MEMO_BITS],
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            cap,
        }
    }

    /// `name`'s value, made by `make` the first time.
    #[inline]
    pub(crate) fn get_or_make(&mut self, name: &'a str, make: impl FnOnce() -> V) -> V {
        let slot = memo_slot(name.as_bytes());
        if let Some((known, v)) = self.recent[slot] {
            if same(known, name) {
                return v;
            }
        }
        let v = self.in_table(name, make);
        self.recent[slot] = Some((name, v));
        v
    }

    fn in_table(&mut self, name: &'a str, make: impl FnOnce() -> V) -> V {
        let hasher = &self.hasher;
        let hash = hasher.hash_one(name);
        if let Some(&(_, v)) = self.table.find(hash, |&(n, _)| same(n, name)) {
            return v;
        }
        let v = make();
        if self.table.len() < self.cap {
            self.table
                .insert_unique(hash, (name, v), |&(n, _)| hasher.hash_one(n));
        }
        v
    }
}

/// Bits of a [`TextMemo`]'s slot number.
const MEMO_BITS: u32 = 7;

/// Names checked as UTF-8 once a request: a slice equal, byte for byte, to
/// one checked before is answered with that one's text, which is as good
/// (a view holds text, not places in the body).
///
/// Why: `std::str::from_utf8` reads a short name about a byte a step,
/// some ten instructions a byte; a metric name of nine bytes cost more
/// than a hundred, once a point on W1's OTLP and once a series on
/// `tally.v1`. A request repeats its names (twenty metrics over hundreds
/// of sources), so most are found here for a hash of one word and a
/// compare. The memo is direct-mapped: a name whose slot another took is
/// checked again, never wrongly answered.
pub(crate) struct TextMemo<'a> {
    slots: [&'a str; 1 << MEMO_BITS],
}

impl Default for TextMemo<'_> {
    fn default() -> Self {
        TextMemo {
            slots: [""; 1 << MEMO_BITS],
        }
    }
}

impl<'a> TextMemo<'a> {
    /// `bytes` as text, None where they are not UTF-8.
    #[inline(always)]
    pub(crate) fn text(&mut self, bytes: &'a [u8]) -> Option<&'a str> {
        let slot = &mut self.slots[memo_slot(bytes)];
        if same_bytes(slot.as_bytes(), bytes) {
            return Some(*slot);
        }
        let text = std::str::from_utf8(bytes).ok()?;
        *slot = text;
        Some(text)
    }
}

/// A slot for `b`: its length and up to eight of its bytes (the last
/// eight, where names differ most), mixed by a multiply.
#[inline(always)]
fn memo_slot(b: &[u8]) -> usize {
    let n = b.len();
    let bytes = match n {
        0 => 0,
        1..=3 => u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
        4..=7 => {
            let (first, last) = (word::<4>(b, 0), word::<4>(b, n - 4));
            u64::from(first.map_or(0, u32::from_le_bytes)) << 32
                | u64::from(last.map_or(0, u32::from_le_bytes))
        }
        _ => word::<8>(b, n - 8).map_or(0, u64::from_le_bytes),
    };
    let mixed = (bytes ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> (64 - MEMO_BITS)) as usize
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

        /// Each name's value is the one made for it first, made once,
        /// whether the memo or the table answers (names that collide in
        /// the memo's slots, and names past the memo's size).
        #[test]
        fn a_name_table_makes_each_value_once(
            names in proptest::collection::vec("[ab]{0,9}", 0..400),
        ) {
            let mut table = NameTable::with_cap(usize::MAX);
            let mut first = std::collections::HashMap::new();
            let mut made = 0usize;
            for name in &names {
                let v = table.get_or_make(name, || {
                    made += 1;
                    made
                });
                prop_assert_eq!(*first.entry(name.as_str()).or_insert(v), v, "{}", name);
            }
            prop_assert_eq!(made, first.len());
        }

        /// The memo answers what `from_utf8` answers, for names that
        /// repeat, collide and differ in one byte, valid or not.
        #[test]
        fn the_memo_answers_as_from_utf8(
            names in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0xc3u8), Just(0xa9u8)], 0..20),
                0..200,
            ),
        ) {
            let mut memo = TextMemo::default();
            for name in &names {
                prop_assert_eq!(memo.text(name), std::str::from_utf8(name).ok());
            }
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
