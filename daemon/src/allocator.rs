//! The allocator's settings that cannot be given at build time, and its
//! own account of memory as gauges. The daemon runs on jemalloc (see
//! `main.rs`); its build-time settings, and why, are in
//! `.cargo/config.toml`.

use std::ffi::CStr;

/// A setting jemalloc refused.
#[derive(Debug, thiserror::Error)]
#[error("jemalloc refused `{name}` (error {code})")]
pub struct AllocatorError {
    name: &'static str,
    code: i32,
}

/// Free runs of memory smaller than this go back to the system by decay
/// alone (see [`raise_purge_threshold`]).
pub const PURGE_THRESHOLD_BYTES: usize = 32 << 20;

/// Lets free runs under [`PURGE_THRESHOLD_BYTES`] go back to the system by
/// decay alone.
///
/// jemalloc returns a free run of 8 MiB or more at once, whatever the
/// decay: freeing a large block next to free neighbours purges the whole
/// run. The storage engine's page cache frees its pages one by one as
/// they are replaced, so runs of about 9 MiB formed several times a second
/// at 100,000 series, and each purge was faulted in again by the next
/// flush: RSS swung by 15 to 20 MiB around its median. Larger runs still
/// go at once: with no limit at all, a million series peaked about 95 MiB
/// higher. The first arena takes the 8 MiB from a constant (it is made
/// before the `oversize_threshold` option is read, which only sets later
/// arenas), so it is set here.
#[allow(unsafe_code)] // The one setting call; see SAFETY below.
pub fn raise_purge_threshold() -> Result<(), AllocatorError> {
    const NAME: &CStr = c"arena.0.oversize_threshold";
    let mut threshold = PURGE_THRESHOLD_BYTES;
    // SAFETY: the name is a NUL-terminated mallctl name whose value is a
    // `size_t`; `newp` points at one, with its size, and nothing is read
    // back (`oldp` and `oldlenp` are null).
    let code = unsafe {
        tikv_jemalloc_sys::mallctl(
            NAME.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut threshold).cast(),
            std::mem::size_of::<usize>(),
        )
    };
    if code == 0 {
        Ok(())
    } else {
        Err(AllocatorError {
            name: "arena.0.oversize_threshold",
            code,
        })
    }
}

/// Sets the allocator's gauges from its own account, on each scrape, in a
/// build with the `allocator-stats` feature (a no-op otherwise):
/// bytes the daemon has allocated, the pages those live in (`active`),
/// what the allocator keeps resident (its metadata and freed pages not yet
/// returned by decay included) and what it holds mapped but returned.
/// Beside `process_resident_memory_bytes` they tell the daemon's data from
/// fragmentation and from pages freed but still held. jemalloc sums them
/// when asked (a refresh of its counters, microseconds), so they are as
/// fresh as the scrape.
#[cfg(feature = "allocator-stats")]
pub fn publish_gauges() {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return;
    }
    let read = [
        ("tally_allocator_allocated_bytes", stats::allocated::read()),
        ("tally_allocator_active_bytes", stats::active::read()),
        ("tally_allocator_resident_bytes", stats::resident::read()),
        ("tally_allocator_retained_bytes", stats::retained::read()),
    ];
    for (name, value) in read {
        if let Ok(v) = value {
            metrics::gauge!(name).set(v as f64);
        }
    }
}

/// Without the `allocator-stats` feature jemalloc keeps no statistics.
#[cfg(not(feature = "allocator-stats"))]
pub fn publish_gauges() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The setting is one jemalloc knows and takes, and it sticks.
    #[test]
    #[allow(unsafe_code)]
    fn the_first_arena_takes_the_threshold() {
        raise_purge_threshold().unwrap();
        let mut value: usize = 0;
        let mut len = std::mem::size_of::<usize>();
        // SAFETY: reads a `size_t` setting into a `usize` of that size.
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"arena.0.oversize_threshold".as_ptr(),
                (&raw mut value).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(code, 0);
        assert_eq!(value, PURGE_THRESHOLD_BYTES);
    }
}
