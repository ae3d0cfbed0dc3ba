//! Hour documents and minute blocks as the file stores them: packed, so
//! that two share a page of the file where one did.
//!
//! Why: redb keeps a value inside a 4 KiB leaf page, and a 2,944-byte hour
//! document or 2,880-byte minute block leaves no room for a second, so each
//! took a page of its own and the documents took 1.38 times their bytes
//! (BENCHMARKS.md, "Disk in real time"). Packed, an hour of a real series
//! takes under two thirds of that, two fit a page, and the documents take
//! less than their bytes. Both are written when their hour closes, so
//! the price is paid about once per document; a late sample, or a fold
//! forced early by `embedded.pending_max_bytes`, writes one again and packs
//! it again. A read unpacks what it reads. Day summaries are not packed: they are
//! rewritten in place at every fold, three already fill a page, and a
//! value that grew as the day filled would split pages where it stands.
//!
//! How: the slots are laid out field by field (every slot's `n`, then every
//! `sum`, ...), each field as its difference from the slot before (the
//! count and the last sample's time subtracted, the floating-point fields
//! XORed: a neighbour's exponent and leading digits cancel), the eight
//! bytes of those differences grouped by significance, and the result
//! compressed with zstd. An hour's block of a gauge sampled every second
//! packs its 2,880 bytes to about 1,670 (1,771 at most in the tests), in
//! about 15 µs, and unpacks in 2 µs; an empty hour packs to almost nothing.
//!
//! A stored value is read as it is when its length is the raw value's (or
//! a layout-2 value's, which [`super::codec::checked`] widens), and as
//! packed when it starts with [`TAG`]; [`pack`] never makes a packed value
//! of one of those lengths, so the two cannot be confused. An older tallyd
//! would take a packed value for a damaged one, which is why packing came
//! with layout 6 (`layout.rs`).

use std::cell::RefCell;

use super::layout::{LEGACY_SLOT_LEN, SLOT_LEN};
use crate::store::StoreError;

/// First byte of a packed value.
pub(super) const TAG: u8 = 0xA7;

/// zstd's level: the fastest. Higher ones gain next to nothing on these
/// values: a full hour of a gauge packs to 1,673 bytes on average at
/// level 1, 1,674 at 3, 1,655 at 9 (the first test below prints the
/// sizes at the level set here).
const LEVEL: i32 = 1;

/// The fields of a slot, as codec.rs lays them out: `n`, `sum`, `min`,
/// `max`, `last`, `last_ms`. The integer ones (0 and 5) are subtracted
/// from the slot before, the floating-point ones XORed with it.
const FIELDS: usize = SLOT_LEN / 8;
const INTEGER_FIELDS: [bool; FIELDS] = [true, false, false, false, false, true];

/// The per-thread state packing reuses: zstd's contexts (a context is
/// larger than the values it packs, so making one per value would cost
/// more than the packing) and the shuffled bytes.
struct Scratch {
    compressor: Option<zstd::bulk::Compressor<'static>>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    plain: Vec<u8>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { compressor: None, decompressor: None, plain: Vec::new() })
    };
}

/// `value` (a header of `base` bytes, then whole slots) as it is to be
/// stored: packed when that is shorter and its length cannot be taken for
/// a raw value's, `value` itself otherwise (also if zstd fails, which a
/// reader handles as well).
pub(super) fn pack(value: &[u8], base: usize) -> Vec<u8> {
    let mut out = vec![0u8; 1 + zstd::zstd_safe::compress_bound(value.len())];
    out[0] = TAG;
    let packed = SCRATCH.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        shuffle(value, base, &mut scratch.plain);
        let compressor = match &mut scratch.compressor {
            Some(c) => c,
            slot => slot.insert(zstd::bulk::Compressor::new(LEVEL)?),
        };
        compressor.compress_to_buffer(&scratch.plain[..], &mut out[1..])
    });
    match packed {
        Ok(len) if 1 + len < value.len() && !raw_length(1 + len, value.len(), base) => {
            out.truncate(1 + len);
            out
        }
        _ => value.to_vec(),
    }
}

/// Whether a stored value of `len` bytes reads as a raw value of `n` bytes
/// (today's or layout 2's, with a header of `base` bytes).
fn raw_length(len: usize, n: usize, base: usize) -> bool {
    len == n || len == base + (n - base) / SLOT_LEN * LEGACY_SLOT_LEN
}

/// The raw value of `N` bytes (a header of `N % SLOT_LEN` bytes, then
/// slots) that packed value `stored` holds, or `None` if `stored` is not
/// packed (its length is a raw value's, or it lacks the tag). A packed
/// value that does not unpack to exactly `N` bytes is damaged.
pub(super) fn unpack<const N: usize>(
    stored: &[u8],
    doc: impl FnOnce() -> String,
) -> Option<Result<[u8; N], StoreError>> {
    let base = N % SLOT_LEN;
    if raw_length(stored.len(), N, base) || stored.first() != Some(&TAG) {
        return None;
    }
    let mut plain = [0u8; N];
    let unpacked = SCRATCH.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        let decompressor = match &mut scratch.decompressor {
            Some(d) => d,
            slot => slot.insert(zstd::bulk::Decompressor::new()?),
        };
        decompressor.decompress_to_buffer(&stored[1..], &mut plain[..])
    });
    let reason = match unpacked {
        Ok(len) if len == N => return Some(Ok(unshuffled(&plain, base))),
        Ok(len) => format!("packed value holds {len} bytes; expected {N}"),
        Err(e) => format!("packed value does not unpack: {e}"),
    };
    Some(Err(StoreError::Corrupt { doc: doc(), reason }))
}

/// Field-wise differences of `value`'s slots, grouped by byte, into `out`
/// (`value`'s length).
fn shuffle(value: &[u8], base: usize, out: &mut Vec<u8>) {
    let slots = (value.len() - base) / SLOT_LEN;
    out.clear();
    out.resize(value.len(), 0);
    out[..base].copy_from_slice(&value[..base]);
    for (f, integer) in INTEGER_FIELDS.into_iter().enumerate() {
        let column = base + f * 8 * slots;
        let mut prev = 0u64;
        for i in 0..slots {
            let word = word_at(value, base + i * SLOT_LEN + f * 8);
            let diff = if integer {
                word.wrapping_sub(prev)
            } else {
                word ^ prev
            };
            prev = word;
            for (b, byte) in diff.to_le_bytes().into_iter().enumerate() {
                out[column + b * slots + i] = byte;
            }
        }
    }
}

/// The inverse of [`shuffle`].
fn unshuffled<const N: usize>(plain: &[u8; N], base: usize) -> [u8; N] {
    let slots = (N - base) / SLOT_LEN;
    let mut value = [0u8; N];
    value[..base].copy_from_slice(&plain[..base]);
    for (f, integer) in INTEGER_FIELDS.into_iter().enumerate() {
        let column = base + f * 8 * slots;
        let mut prev = 0u64;
        for i in 0..slots {
            let mut bytes = [0u8; 8];
            for (b, byte) in bytes.iter_mut().enumerate() {
                *byte = plain[column + b * slots + i];
            }
            let diff = u64::from_le_bytes(bytes);
            let word = if integer {
                prev.wrapping_add(diff)
            } else {
                prev ^ diff
            };
            prev = word;
            let at = base + i * SLOT_LEN + f * 8;
            value[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
    }
    value
}

fn word_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
#[path = "packed_tests.rs"]
mod tests;
