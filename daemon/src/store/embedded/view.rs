//! What a read adds to the stored documents: a snapshot of one series'
//! pending minutes, merged into the documents that lack them. Why each
//! minute is then counted once is in `pending.rs` and, for a fold split at
//! the hour, `split.rs`.

use crate::model::{EpochMinute, Resolution, SampleKind, Slot, Tier, MINUTE_S};
use crate::store::{DocRead, ReadQuery};

/// A snapshot of one series' pending minutes, taken for a read.
#[derive(Debug)]
pub(crate) struct PendingView {
    pub(super) kind: SampleKind,
    pub(super) watermark: u64,
    /// Where a fold would split the run, and the day documents' watermark
    /// it would write (`split.rs`).
    pub(super) split: Option<(EpochMinute, u64)>,
    pub(super) minutes: Vec<(EpochMinute, Slot)>,
}

impl PendingView {
    /// Whether a document of `tier` whose stored watermark is `stored`
    /// already holds pending minute `m`: it holds every pending minute at
    /// or past the pending watermark, and a day document written by this
    /// run's split fold holds the minutes before the split.
    fn holds(&self, tier: Tier, stored: u64, m: EpochMinute) -> bool {
        stored >= self.watermark
            || (tier == Tier::Day
                && self
                    .split
                    .is_some_and(|(at, day_watermark)| m < at && stored == day_watermark))
    }

    /// Adds the pending minutes to `docs`, the stored documents of `q`
    /// starting in `[lo, q.to)`, ascending: into each document whose stored
    /// watermark is below the pending one, at `q`'s resolution, the slots in
    /// `[q.from, q.to)`. A document not stored yet is created, as a read of
    /// a stored one returns it even when none of its slots is in range. Afterwards every document counts as holding the
    /// pending watermark: the series' flushes up to it are all in the
    /// documents or in the pending minutes (see the module documentation).
    pub(crate) fn merge_into(&self, q: &ReadQuery, lo: i64, docs: &mut Vec<DocRead>) {
        for &(m, slot) in &self.minutes {
            let start = q.tier.period_start(m);
            if start < lo || start >= q.to {
                continue;
            }
            let i = match docs.binary_search_by_key(&start, |d| d.period_start) {
                Ok(i) => i,
                Err(i) => {
                    docs.insert(
                        i,
                        DocRead {
                            period_start: start,
                            kind: Some(self.kind),
                            watermark: 0,
                            slots: Vec::new(),
                        },
                    );
                    i
                }
            };
            let doc = &mut docs[i];
            let t = bucket_start(q.resolution, m);
            if self.holds(q.tier, doc.watermark, m) || t < q.from || t >= q.to {
                continue;
            }
            match doc.slots.binary_search_by_key(&t, |&(k, _)| k) {
                Ok(j) => doc.slots[j].1.merge(&slot),
                Err(j) => doc.slots.insert(j, (t, slot)),
            }
        }
        for doc in docs {
            if doc.watermark < self.watermark {
                doc.watermark = self.watermark;
                doc.kind.get_or_insert(self.kind);
            }
        }
    }
}

/// Where minute `m`'s slot lands at `resolution`, Unix seconds.
fn bucket_start(resolution: Resolution, m: EpochMinute) -> i64 {
    match resolution {
        Resolution::Minute => m * MINUTE_S,
        Resolution::Hour => Tier::Hour.period_start(m),
        Resolution::Day => Tier::Day.period_start(m),
    }
}
