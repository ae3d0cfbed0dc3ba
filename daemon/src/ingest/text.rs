//! Comparing the short names the protocol readers meet on every line or
//! series: a measurement, a tag key, a field key, a source.
//!
//! Why: `==` on strings calls the C library's `memcmp` once the lengths
//! agree. For names of a few bytes the call costs more than the compare;
//! reading a W1 line-protocol body made five such calls a line, an eighth
//! of its reading.

/// `a == b`. Up to sixteen bytes are compared in two loads a side (which
/// overlap when shorter than the pair); longer strings as `==` does.
#[inline(always)]
pub(crate) fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        9..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => a == b,
    }
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
    }
}
