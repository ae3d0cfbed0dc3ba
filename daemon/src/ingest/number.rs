//! Numbers as agents write them in text (`97.5`, `-3`, `0.25`), read in
//! one pass. Line protocol and Graphite both carry every value as text;
//! the standard parse reads a number in two (its shape, then its digits)
//! and was a visible share of both paths.
//! Longer numbers (a float printed in full) go through `fast_float2`,
//! read as the standard parse reads them.

/// Powers of ten a double holds exactly.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// `-?D(.D)?` of at most fifteen digits in all, as the nearest double:
/// the digits make an integer a double holds exactly, and so does the
/// power of ten below them, so the one division is correctly rounded, as
/// the standard parse is (which reads each number twice: once for its
/// shape, once for its value). None for any other text.
pub(crate) fn short_decimal(s: &str) -> Option<f64> {
    let (negative, text) = match s.strip_prefix('-') {
        Some(text) => (true, text),
        None => (false, s),
    };
    let b = text.as_bytes();
    // Fifteen digits and a point at most: a longer number (a float printed
    // in full is seventeen digits) goes to the standard parse unread.
    if b.len() > 16 {
        return None;
    }
    let mut m = 0u64;
    let mut point = None;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'0'..=b'9' => m = m.wrapping_mul(10).wrapping_add(u64::from(c - b'0')),
            b'.' if point.is_none() && i > 0 && i + 1 < b.len() => point = Some(i),
            _ => return None,
        }
    }
    let decimals = point.map_or(0, |at| b.len() - at - 1);
    let digits = b.len() - usize::from(point.is_some());
    if digits == 0 || digits > 15 {
        return None;
    }
    let v = m as f64 / POW10[decimals];
    Some(if negative { -v } else { v })
}

/// Any number the standard parse reads (`97.5`, `-1.5e-3`, `inf`,
/// `NaN`), as it reads it, bit for bit: a short plain decimal in one pass
/// ([`short_decimal`]), anything else through `fast_float2`, the algorithm
/// the standard library adopted, read straight from the bytes. A float
/// printed in full (seventeen digits: any measured fraction an agent
/// prints, W1's gauges) took about 260 instructions through the standard
/// parse and takes about 170 this way.
pub(crate) fn decimal(s: &str) -> Option<f64> {
    short_decimal(s).or_else(|| full_decimal(s))
}

/// [`decimal`] without its short reader, for a caller that tried that
/// already.
pub(crate) fn full_decimal(s: &str) -> Option<f64> {
    fast_float2::parse(s).ok()
}

/// The eight digits `b` starts with, as a number, read as one word
/// rather than digit by digit (a Unix timestamp is ten digits); None when
/// its first eight bytes are not all digits.
pub(crate) fn eight_digits(b: &[u8]) -> Option<u64> {
    const NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let w = u64::from_le_bytes(*b.first_chunk::<8>()?);
    // A byte is a digit when its high nibble is 3 and adding 6 leaves it
    // so (0x3A-0x3F become 0x40-0x45); no byte carries into the next.
    let digits = w & NIBBLES == ZEROS && w.wrapping_add(0x0606_0606_0606_0606) & NIBBLES == ZEROS;
    if !digits {
        return None;
    }
    // The first digit is the lowest byte. Pairs of digits, then pairs of
    // pairs, each combined in one multiplication.
    let d = w - ZEROS;
    let pairs = d.wrapping_mul(10).wrapping_add(d >> 8);
    const LOW: u64 = 0x0000_00FF_0000_00FF;
    let outer = (pairs & LOW).wrapping_mul(100 + (1_000_000 << 32));
    let inner = ((pairs >> 16) & LOW).wrapping_mul(1 + (10_000 << 32));
    Some(outer.wrapping_add(inner) >> 32)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Wherever it answers, the answer is the standard parse's, bit
        /// for bit; and it answers for every short plain decimal.
        #[test]
        fn reads_as_the_standard_parse(text in "-?[0-9]{0,9}\\.?[0-9]{0,9}") {
            let ours = short_decimal(&text);
            let theirs = text.parse::<f64>().ok();
            if let Some(v) = ours {
                prop_assert_eq!(Some(v.to_bits()), theirs.map(f64::to_bits), "{}", text);
            }
            let plain = plain_shape(&text);
            prop_assert_eq!(ours.is_some(), plain, "{}", text);
        }
    }

    proptest! {
        /// Any text reads as the standard parse reads it, bit for bit
        /// (NaN as NaN, its sign kept): numbers of every shape and length,
        /// the words for infinity and NaN, and text that is neither.
        #[test]
        fn decimal_reads_as_the_standard_parse(
            text in prop_oneof![
                "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([eE][+-]?[0-9]{0,4})?",
                "[+-]?(?i:inf|infinity|nan|in|infinit|na)",
                "[0-9.eE+-]{0,8}",
                "\\PC{0,12}",
            ]
        ) {
            let ours = decimal(&text);
            let theirs = text.parse::<f64>().ok();
            match (ours, theirs) {
                (Some(a), Some(b)) if a.is_nan() && b.is_nan() => {
                    prop_assert_eq!(a.is_sign_negative(), b.is_sign_negative(), "{}", text);
                }
                _ => prop_assert_eq!(ours.map(f64::to_bits), theirs.map(f64::to_bits), "{}", text),
            }
        }
    }

    #[test]
    fn decimal_reads_what_agents_print_and_refuses_the_rest() {
        for text in [
            "53.28571428571429",
            "-0.00012345678901234567",
            "1e300",
            "1.7976931348623157e308",
            "4.9e-324",
            "2.2250738585072011e-308",
            "+5",
            ".5",
            "5.",
            "-inf",
            "Infinity",
            "-NaN",
            "123456789012345678901234567890",
        ] {
            let want = text.parse::<f64>().ok().map(f64::to_bits);
            assert_eq!(decimal(text).map(f64::to_bits), want, "{text}");
        }
        for text in [
            "", "-", "+", ".", "e5", "1e", "1e+", "1.2.3", "0x10", "1_000", " 1", "1 ", "--1",
            "+-1", "nan1", "in",
        ] {
            assert!(text.parse::<f64>().is_err(), "{text}");
            assert_eq!(decimal(text), None, "{text}");
        }
    }

    proptest! {
        /// Eight digits read as a word are the number they write; any
        /// other byte among the first eight, or fewer than eight, is None.
        #[test]
        fn eight_digits_read_as_a_word(text in "[0-9]{6,10}|[0-9:/.a-]{8,9}|[\\x00-\\xff]{8}") {
            let b = text.as_bytes();
            let want = b
                .get(..8)
                .filter(|d| d.iter().all(u8::is_ascii_digit))
                .map(|d| d.iter().fold(0u64, |v, c| v * 10 + u64::from(c - b'0')));
            prop_assert_eq!(eight_digits(b), want, "{:?}", text);
        }
    }

    #[test]
    fn eight_digits_of_every_byte_next_to_a_digit() {
        for c in 0..=255u8 {
            let mut b = *b"12345678";
            b[3] = c;
            let want = c
                .is_ascii_digit()
                .then(|| 12_305_678 + u64::from(c - b'0') * 10_000);
            assert_eq!(eight_digits(&b), want, "{c:#x}");
        }
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
        assert_eq!(eight_digits(b"00000000"), Some(0));
    }

    /// `-?D(.D)?` with at most fifteen digits.
    fn plain_shape(text: &str) -> bool {
        let t = text.strip_prefix('-').unwrap_or(text);
        let (int, frac) = match t.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (t, None),
        };
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit());
        digits(int) && frac.is_none_or(digits) && int.len() + frac.map_or(0, str::len) <= 15
    }

    #[test]
    fn agents_values() {
        for (text, v) in [("97.5", 97.5), ("-3", -3.0), ("0.1", 0.1), ("79.19", 79.19)] {
            assert_eq!(short_decimal(text), Some(v));
        }
        assert_eq!(
            short_decimal("-0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        for text in [
            "",
            "-",
            ".5",
            "5.",
            "1e5",
            "1.2.3",
            "+1",
            "NaN",
            "1234567890123456",
        ] {
            assert_eq!(short_decimal(text), None, "{text}");
        }
    }
}
