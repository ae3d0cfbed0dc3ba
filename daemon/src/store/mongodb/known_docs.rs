//! The first-sighting memory: which documents the store knows to exist, so
//! that only a document it has not seen costs an existence look-up before
//! its first update. Bounded, and forgetful of periods no longer written.

use crate::model::{Tier, DAY_S, HOUR_S};

/// Documents the first-sighting memory holds at most (8 bytes each plus
/// hash-table overhead: about 40 MB when full).
pub(super) const KNOWN_DOCS_CAP: usize = 2_000_000;

/// Documents known to exist, per (tier, period start), as 64-bit hashes of
/// their ids: a collision only means a missed pre-allocation, and the
/// upsert covers that.
pub(super) struct KnownDocs {
    periods: hashbrown::HashMap<(Tier, i64), hashbrown::HashSet<u64>>,
    len: usize,
    cap: usize,
}

impl KnownDocs {
    pub(super) fn new(cap: usize) -> KnownDocs {
        KnownDocs {
            periods: hashbrown::HashMap::new(),
            len: 0,
            cap,
        }
    }

    /// Documents remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How far behind the newest period of a tier documents are still
    /// remembered: late samples (the default lateness window is an hour)
    /// and the day being written.
    fn horizon(tier: Tier) -> i64 {
        match tier {
            Tier::Hour => 3 * HOUR_S,
            Tier::Day => 2 * DAY_S,
        }
    }

    pub(super) fn contains(&self, tier: Tier, start: i64, hash: u64) -> bool {
        self.periods
            .get(&(tier, start))
            .is_some_and(|s| s.contains(&hash))
    }

    pub(super) fn insert(&mut self, tier: Tier, start: i64, hash: u64) {
        if !self.periods.contains_key(&(tier, start)) {
            let newest = self
                .periods
                .keys()
                .filter(|(t, _)| *t == tier)
                .map(|&(_, s)| s)
                .max()
                .map_or(start, |n| n.max(start));
            if start < newest - Self::horizon(tier) {
                // Too old to be written often; not worth remembering.
                return;
            }
            let stale: Vec<_> = self
                .periods
                .keys()
                .filter(|&&(t, s)| t == tier && s < newest - Self::horizon(tier))
                .copied()
                .collect();
            for key in stale {
                self.forget(key);
            }
        }
        while self.len >= self.cap {
            // Full: forget the oldest period (of any tier) but the one being
            // added to; if that is all there is, stop remembering.
            let oldest = self
                .periods
                .keys()
                .filter(|&&k| k != (tier, start))
                .min_by_key(|&&(_, s)| s)
                .copied();
            match oldest {
                Some(key) => self.forget(key),
                None => return,
            }
        }
        if self.periods.entry((tier, start)).or_default().insert(hash) {
            self.len += 1;
        }
    }

    fn forget(&mut self, key: (Tier, i64)) {
        if let Some(set) = self.periods.remove(&key) {
            self.len -= set.len();
        }
    }
}
