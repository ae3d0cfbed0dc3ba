//! Packing: what goes in comes out, bit for bit; a minute of a real series
//! packs small enough for two to share a page; nothing packed reads as a
//! raw value or the other way round; damage is reported.

use proptest::prelude::*;

use super::*;
use crate::model::Slot;
use crate::store::embedded::codec::{empty_value, put_header, put_slot};
use crate::store::embedded::layout::{DAY_MINUTES_LEN, HEADER_LEN, HOUR_DOC_LEN};
use crate::store::embedded::tests::gauge_minute;
use crate::store::StoreError;

/// The slot of one minute of `values`, taken at one-second steps from
/// `t0_ms`.
fn minute(values: &[f64], t0_ms: i64) -> Slot {
    let mut s = Slot::EMPTY;
    for (i, &v) in values.iter().enumerate() {
        s.merge(&Slot {
            n: 1,
            sum: v,
            min: v,
            max: v,
            last: v,
            last_ms: t0_ms + i as i64 * 1000,
        });
    }
    s
}

/// A full hour of a gauge sampled every second (see `gauge_minute`).
fn gauge_block(seed: u64) -> [u8; DAY_MINUTES_LEN] {
    let mut block: [u8; DAY_MINUTES_LEN] = empty_value(0);
    for m in 0..60 {
        let slot = gauge_minute(seed, 1_764_000_000, m);
        put_slot(&mut block, 0, m as usize, &slot);
    }
    block
}

fn round_trip<const N: usize>(value: &[u8; N]) -> [u8; N] {
    let stored = pack(value, N % crate::store::embedded::layout::SLOT_LEN);
    match unpack::<N>(&stored, || "doc".into()) {
        Some(unpacked) => unpacked.unwrap(),
        None => {
            assert_eq!(stored.len(), N, "not packed, so stored as it is");
            <[u8; N]>::try_from(&stored[..]).unwrap()
        }
    }
}

#[test]
fn a_gauges_hour_packs_to_under_half_a_page() {
    let mut total = 0;
    let mut largest = 0;
    for seed in 0..200 {
        let block = gauge_block(seed);
        let stored = pack(&block, 0);
        assert_eq!(stored[0], TAG);
        assert_eq!(round_trip(&block), block);
        total += stored.len();
        largest = largest.max(stored.len());
    }
    let mean = total / 200;
    println!("minute block: {DAY_MINUTES_LEN} bytes, packed {mean} on average, {largest} at most");
    // Two values and their keys in one 4 KiB leaf page.
    assert!(largest < 1_950, "{largest}");
}

#[test]
fn empty_and_sparse_values_pack_to_almost_nothing() {
    let empty: [u8; HOUR_DOC_LEN] = empty_value(HEADER_LEN);
    assert!(pack(&empty, HEADER_LEN).len() < 64);
    assert_eq!(round_trip(&empty), empty);

    let mut sparse = empty;
    put_header(&mut sparse, 1, 42);
    put_slot(&mut sparse, HEADER_LEN, 0, &minute(&[1.5, 2.5], 7_000));
    put_slot(&mut sparse, HEADER_LEN, 9, &minute(&[1.5, 2.5], 7_000));
    // Two minutes' slots, each against its empty neighbours.
    assert!(pack(&sparse, HEADER_LEN).len() < 256);
    assert_eq!(round_trip(&sparse), sparse);
}

#[test]
fn raw_values_read_as_raw_and_damage_is_reported() {
    let block = gauge_block(1);
    // Raw lengths, today's and layout 2's, are never unpacked.
    assert!(unpack::<DAY_MINUTES_LEN>(&block, String::new).is_none());
    let legacy = vec![TAG; 60 * 32];
    assert!(unpack::<DAY_MINUTES_LEN>(&legacy, String::new).is_none());
    // Nor is what lacks the tag.
    assert!(unpack::<DAY_MINUTES_LEN>(&[1, 2, 3], String::new).is_none());

    let mut stored = pack(&block, 0);
    let cut = stored.len() / 2;
    stored.truncate(cut);
    let err = unpack::<DAY_MINUTES_LEN>(&stored, || "the block".into())
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { doc, reason } if doc == "the block" && reason.contains("does not unpack")),
        "{err:?}"
    );

    // A packed value of another document's size is damaged too.
    let hour: [u8; HOUR_DOC_LEN] = empty_value(HEADER_LEN);
    let stored = pack(&hour, HEADER_LEN);
    assert!(unpack::<DAY_MINUTES_LEN>(&stored, String::new)
        .unwrap()
        .is_err());
}

proptest! {
    /// Any bytes at all (NaNs, infinities, negative zeros, counts near
    /// the top of u64) come back exactly, packed or not.
    #[test]
    fn any_value_comes_back_exactly(bytes in proptest::collection::vec(any::<u8>(), HOUR_DOC_LEN)) {
        let value = <[u8; HOUR_DOC_LEN]>::try_from(&bytes[..]).unwrap();
        prop_assert_eq!(round_trip(&value), value);
    }

    /// Slots that repeat (the common case) come back exactly and pack.
    #[test]
    fn repeated_slots_pack_and_come_back(
        n in any::<u64>(), sum in any::<f64>(), last_ms in any::<i64>(), filled in 0usize..60,
    ) {
        let mut block: [u8; DAY_MINUTES_LEN] = empty_value(0);
        for m in 0..filled {
            let slot = Slot { n, sum, min: sum, max: sum, last: sum, last_ms: last_ms.wrapping_add(m as i64) };
            put_slot(&mut block, 0, m, &slot);
        }
        prop_assert!(pack(&block, 0).len() < DAY_MINUTES_LEN / 2);
        prop_assert_eq!(round_trip(&block), block);
    }
}

/// The time to pack and to unpack a full minute block. Run with
/// `cargo test --release -p tallyd --lib packed::tests::pack_and_unpack_time -- --ignored --nocapture`.
#[test]
#[ignore]
fn pack_and_unpack_time() {
    let blocks: Vec<_> = (0..1_000).map(gauge_block).collect();
    let started = std::time::Instant::now();
    let stored: Vec<_> = blocks.iter().map(|b| pack(b, 0)).collect();
    let packing = started.elapsed();
    let started = std::time::Instant::now();
    for (s, b) in stored.iter().zip(&blocks) {
        let back = unpack::<DAY_MINUTES_LEN>(s, String::new).unwrap().unwrap();
        assert_eq!(&back, b);
    }
    let unpacking = started.elapsed();
    println!(
        "per minute block: pack {:.1} µs, unpack {:.1} µs",
        packing.as_secs_f64() * 1e3,
        unpacking.as_secs_f64() * 1e3
    );
}
