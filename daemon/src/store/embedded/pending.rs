//! Flushed minutes not yet folded into their documents.
//!
//! Writing a 1-second flush straight into every document it touches costs
//! far more than the slots it changes: redb copies values whole, so the
//! store would rewrite about 7 KB per series per flush. Instead it keeps
//! the minutes here, checkpoints them to its log now and then, and folds
//! each series into its documents once its hour has closed (or earlier,
//! oldest first, to keep within a memory bound): `checkpoint.rs`. Each
//! series also records the earliest minute changed since the last
//! checkpoint, which is what the next one writes.
//!
//! # Why reads count every minute once
//!
//! A series' pending minutes hold every flush that touched it since its last
//! fold, up to `watermark`; a fold writes each document it touches with the
//! watermark of what it folded. So a stored document whose watermark is below
//! the pending watermark lacks exactly the pending minutes of its period, and
//! one at or above it already holds them. A read takes a snapshot of the
//! series' pending minutes *before* it reads the documents, and the pending
//! minutes leave this map only *after* the fold that wrote them landed:
//! whichever side of that write the read lands on, it counts each minute
//! once. A fold split at the hour writes day documents with a lower
//! watermark, which a read recognises (`split.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::model::{
    EpochMinute, SampleKind, SeriesId, SeriesMinutes, SeriesRef, SeriesUpdate, Slot,
};
use crate::store::StoreError;
use crate::table::SeriesMap;

use super::split::{self, hour_of, requeue, Split};

mod order;
pub(crate) use super::view::PendingView;

type Minutes = Vec<(EpochMinute, Slot)>;

/// One series' minutes since its last fold.
#[derive(Debug)]
struct SeriesPending {
    kind: SampleKind,
    /// The highest flush whose minutes are here.
    watermark: u64,
    /// The flush that started this run: its place in the fold queue.
    since: u64,
    /// The first flush that brought a minute of the hour the run's last
    /// minute is in; 0 when not known (a run loaded from the log). Where a
    /// fold may split the run (`split.rs`).
    entered: u64,
    /// Taken by the fold in progress; dropped when that commits.
    folding: bool,
    /// The earliest minute changed since the last checkpoint logged this
    /// series ([`CLEAN`] if none): what the next checkpoint writes.
    dirty_from: EpochMinute,
    /// The second of a minute from which a full list takes room for its
    /// next minute (see [`SeriesPending::grow_ahead`]), in `0..60`.
    phase: u8,
    /// Ascending, no duplicates.
    minutes: Minutes,
}

impl SeriesPending {
    /// Merges flush `id`'s minutes; returns how many minutes were new.
    fn merge(
        &mut self,
        kind: SampleKind,
        id: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> usize {
        self.kind = kind;
        self.watermark = self.watermark.max(id);
        let before = self.minutes.capacity();
        let last_hour = self.last_hour();
        for (m, slot) in minutes {
            self.dirty_from = self.dirty_from.min(m);
            merge_minute(&mut self.minutes, m, &slot);
        }
        if self.last_hour() != last_hour {
            self.entered = id;
        }
        self.grow_ahead(id);
        self.minutes.capacity() - before
    }

    /// Takes room for one more minute ahead of it, at the series' own
    /// second of the minute.
    ///
    /// Why not when the minute comes: every series of a fleet gains its
    /// next minute in the same flush, so lists grown then all cross the
    /// allocator's size classes in that flush too. Each copy frees its old
    /// block, and the freed pages of the whole fleet's lists stay resident
    /// until the allocator's decay returns them: at 100,000 series RSS rose
    /// by 27 to 57 MiB for about five seconds at such minutes in the first
    /// ten, and by 175 MiB late in the soak's hour. Grown at its phase, a
    /// sixtieth of the lists moves in any one flush, and each holds at most
    /// one minute of room ahead ([`Pending::bytes`] counts it).
    fn grow_ahead(&mut self, id: u64) {
        if self.minutes.len() == self.minutes.capacity() && second_of(id) >= self.phase {
            self.minutes.reserve_exact(1);
        }
    }

    /// Sets minutes to what a checkpoint logged of them (see
    /// `flush_log.rs`): each replaces the minute's slot. Returns how many
    /// minutes of room were added.
    fn replace(
        &mut self,
        kind: SampleKind,
        watermark: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> usize {
        self.kind = kind;
        self.watermark = self.watermark.max(watermark);
        let before = self.minutes.capacity();
        let last_hour = self.last_hour();
        let list = &mut self.minutes;
        for (m, slot) in minutes {
            match list.binary_search_by_key(&m, |&(k, _)| k) {
                Ok(i) => list[i].1 = slot,
                Err(i) => {
                    list.reserve_exact(1);
                    list.insert(i, (m, slot));
                }
            }
        }
        // Which flush brought the hour is not in the log.
        if self.last_hour() != last_hour {
            self.entered = 0;
        }
        self.minutes.capacity() - before
    }

    /// Where a fold would split this run, and the day watermark it would
    /// write (see [`split::mark`]).
    fn split_mark(&self, floor: u64) -> Option<(EpochMinute, u64)> {
        split::mark(self.since, self.entered, floor, self.last_hour()?)
    }

    /// How a fold at `now` (the first minute of the hour now) splits this
    /// run, if it does (see [`split::at`]).
    fn split_at(&self, floor: u64, now: EpochMinute) -> Option<Split> {
        let (at, _) = self.split_mark(floor)?;
        let first = self.minutes.first()?.0;
        split::at(at, self.entered, first, now)
    }

    /// The first minute of the hour the run's last minute is in.
    fn last_hour(&self) -> Option<EpochMinute> {
        self.minutes.last().map(|&(m, _)| hour_of(m))
    }

    /// The minutes a checkpoint must log: from the first one changed since
    /// the last checkpoint on.
    fn dirty(&self) -> Option<&[(EpochMinute, Slot)]> {
        if self.dirty_from == CLEAN || self.folding {
            return None;
        }
        let at = self.minutes.partition_point(|&(m, _)| m < self.dirty_from);
        Some(&self.minutes[at..])
    }
}

/// `dirty_from` of a series whose minutes are all logged.
const CLEAN: EpochMinute = EpochMinute::MAX;

/// Bytes a pending series takes besides its minutes: its entry in the
/// table (its id's pointer, the fields above) and its place in the queue.
const SERIES_BYTES: usize = 104;

/// Bytes one pending minute's room takes.
const MINUTE_BYTES: usize = std::mem::size_of::<(EpochMinute, Slot)>();

/// One series' minutes as a checkpoint logs them.
pub(crate) struct Logged<'a> {
    pub(crate) series: &'a SeriesId,
    pub(crate) kind: SampleKind,
    pub(crate) watermark: u64,
    pub(crate) minutes: &'a [(EpochMinute, Slot)],
}

/// What a fold writes for one series: its minutes, into its documents, with
/// `watermark` (hour documents) and `day_watermark` (day documents).
#[derive(Debug, Clone)]
pub(crate) struct Fold {
    pub(crate) series: Arc<SeriesId>,
    pub(crate) kind: SampleKind,
    pub(crate) watermark: u64,
    /// `watermark`, or for a fold split at the hour the flush before the
    /// one that began what stays pending (`split.rs`).
    pub(crate) day_watermark: u64,
    /// For a fold split at the hour: where it leaves off, and the flush
    /// that began the run that stays pending with the minutes from there.
    pub(crate) split: Option<Split>,
    /// The run's minutes, all of them: a split fold writes those before
    /// its `split.at`.
    pub(crate) minutes: Minutes,
}

impl Fold {
    /// The minutes the fold writes.
    pub(crate) fn folded(&self) -> &[(EpochMinute, Slot)] {
        match self.split {
            Some(split) => &self.minutes[..self.minutes.partition_point(|&(m, _)| m < split.at)],
            None => &self.minutes,
        }
    }

    /// The document updates of the fold.
    pub(crate) fn update(&self) -> SeriesUpdate {
        SeriesUpdate::from_minutes(&SeriesMinutes {
            catalog: crate::model::CatalogDue::Unknown,
            series: self.series.clone(),
            kind: self.kind,
            minutes: self.folded().iter().copied().collect(),
        })
    }

    /// Writes the whole run after all (see `split.rs`).
    pub(crate) fn unsplit(&mut self) {
        self.split = None;
        self.day_watermark = self.watermark;
    }
}

/// Every series with minutes not yet folded, and the order they fold in.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// In the chunked table the aggregator uses too: at a million series a
    /// map holding these 56-byte entries inline had two buckets per entry.
    series: SeriesMap<SeriesPending>,
    /// `(since, position in series)` of every entry not being folded,
    /// oldest first: ascending by `since`, as flush ids only grow and the
    /// runs a split fold leaves are merged in at their place. By position rather than by id, so that an entry that takes
    /// the aggregator's copy of its id (see [`SeriesMap::entry`]) lets go
    /// of the copy it was loaded with. A place whose entry went, or whose
    /// position holds a later run by now, is skipped by its `since`; a run
    /// with the same `since` is that run's own place too, and folds once
    /// (`folding`).
    queue: VecDeque<(u64, u32)>,
    /// Minutes of room held, over every series: what their lists take.
    room: usize,
    /// The highest flush that may be in the documents already when the
    /// store was opened: a run that entered its hour at or below it is not
    /// split (`split.rs`).
    floor: u64,
    /// The flush before which the queue's runs were put in series order
    /// last (`order.rs`).
    ordered_before: u64,
}

impl Pending {
    /// Series with pending minutes.
    pub(crate) fn len(&self) -> usize {
        self.series.len()
    }

    /// Merges flush `id`'s minutes of `series`.
    pub(crate) fn add(
        &mut self,
        series: &Arc<SeriesId>,
        kind: SampleKind,
        id: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) {
        let hash = crate::model::series_hash(series.series_ref());
        self.add_hashed(series, hash, kind, id, minutes);
    }

    /// [`Pending::add`] where `hash` is `series`' hash by
    /// [`crate::model::series_hasher`], as a flush's batch carries it: the
    /// series' names are then not read again to find its entry.
    pub(crate) fn add_hashed(
        &mut self,
        series: &Arc<SeriesId>,
        hash: u64,
        kind: SampleKind,
        id: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) {
        let p = self.entry(series, hash, kind, id);
        let added = p.merge(kind, id, minutes);
        self.room += added;
    }

    /// Reads the entries under `hashes`, and each one's newest minute, into
    /// the cache ahead of [`Pending::add_hashed`] for them. A flush brings
    /// every active series, spread over the table, and each one's entry and
    /// minute list waited on memory in turn (4 and 3% of the daemon's CPU
    /// at 100,000 series in real time); read together, with nothing but
    /// independent loads between, the misses overlap.
    pub(crate) fn warm(&self, hashes: impl Iterator<Item = u64>) {
        for hash in hashes {
            if let Some(p) = self.series.first_under(hash) {
                std::hint::black_box((p.watermark, p.minutes.last().map(|&(m, _)| m)));
            }
        }
    }

    /// Sets `series`' minutes to what checkpoint `id` logged of them, with
    /// the series' watermark then (see [`SeriesPending::replace`]).
    pub(crate) fn replace(
        &mut self,
        series: &Arc<SeriesId>,
        kind: SampleKind,
        id: u64,
        watermark: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) {
        let hash = crate::model::series_hash(series.series_ref());
        let p = self.entry(series, hash, kind, id);
        let added = p.replace(kind, watermark, minutes);
        self.room += added;
    }

    /// `series`' entry, made (its run starting at `id`) if it has none.
    fn entry(
        &mut self,
        series: &Arc<SeriesId>,
        hash: u64,
        kind: SampleKind,
        id: u64,
    ) -> &mut SeriesPending {
        let Pending {
            series: table,
            queue,
            ..
        } = self;
        let mut made = false;
        let (pos, p) = table.entry_hashed(series, hash, || {
            made = true;
            SeriesPending {
                kind,
                watermark: id,
                since: id,
                entered: 0,
                folding: false,
                dirty_from: CLEAN,
                phase: phase_of(series),
                minutes: Vec::new(),
            }
        });
        if made {
            queue.push_back((id, pos));
        }
        p
    }

    /// The watermark of `series`' pending run, if it has one: every flush
    /// up to it that touched the series is in the run or in its documents.
    pub(crate) fn watermark_of(&self, series: &SeriesId) -> Option<u64> {
        self.get(series).map(|p| p.watermark)
    }

    /// About how many bytes of memory the pending minutes take.
    pub(crate) fn bytes(&self) -> usize {
        self.len() * SERIES_BYTES + self.room * MINUTE_BYTES
    }

    /// Series waiting in the fold queue whose run began before `id`.
    pub(crate) fn queued_before(&self, id: u64) -> usize {
        self.queue.partition_point(|&(since, _)| since < id)
    }

    /// Calls `log` with the series changed since the last checkpoint whose
    /// positions in the table are in `positions`, outside any fold; returns
    /// the first position after them, or None past the last.
    pub(crate) fn dirty_in(
        &self,
        positions: std::ops::Range<u32>,
        mut log: impl FnMut(Logged<'_>) -> Result<(), StoreError>,
    ) -> Result<Option<u32>, StoreError> {
        let end = self.series.positions();
        for pos in positions.start..positions.end.min(end) {
            let Some((series, p)) = self.series.at(pos) else {
                continue;
            };
            if let Some(minutes) = p.dirty() {
                log(Logged {
                    series,
                    kind: p.kind,
                    watermark: p.watermark,
                    minutes,
                })?;
            }
        }
        Ok((positions.end < end).then_some(positions.end))
    }

    /// The earliest first minute of the runs at positions `positions`, and
    /// the first position after them (None past the last): with the lock
    /// let go between parts, the earliest hour a run's log entries may
    /// hold (see [`Db::sweep_expired`](super::db::Db)).
    pub(crate) fn first_minute_in(
        &self,
        positions: std::ops::Range<u32>,
    ) -> (Option<EpochMinute>, Option<u32>) {
        let end = self.series.positions();
        let first = (positions.start..positions.end.min(end))
            .filter_map(|pos| self.series.at(pos))
            .filter_map(|(_, p)| p.minutes.first().map(|&(m, _)| m))
            .min();
        (first, (positions.end < end).then_some(positions.end))
    }

    /// A checkpoint committed: every series outside the fold is logged.
    pub(crate) fn logged(&mut self) {
        for p in self.series.values_mut() {
            if !p.folding {
                p.dirty_from = CLEAN;
            }
        }
    }

    /// [`Pending::add`] for a series named, not shared: false, and nothing
    /// merged, if it has no pending minutes yet.
    pub(crate) fn add_to_known(
        &mut self,
        series: SeriesRef<'_>,
        kind: SampleKind,
        id: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> bool {
        match self.series.get_mut_by(series) {
            Some(p) => {
                let added = p.merge(kind, id, minutes);
                self.room += added;
                true
            }
            None => false,
        }
    }

    /// [`Pending::replace`] for a series named, not shared: false, and
    /// nothing set, if it has no pending minutes yet.
    pub(crate) fn replace_known(
        &mut self,
        series: SeriesRef<'_>,
        kind: SampleKind,
        watermark: u64,
        minutes: impl Iterator<Item = (EpochMinute, Slot)>,
    ) -> bool {
        match self.series.get_mut_by(series) {
            Some(p) => {
                let added = p.replace(kind, watermark, minutes);
                self.room += added;
                true
            }
            None => false,
        }
    }

    /// Takes the `n` series pending longest for a fold. They stay readable
    /// here until [`Pending::end_fold`]. With `split_from` (the first minute
    /// of the hour now), a run that reaches it may be folded in two
    /// (`split.rs`).
    pub(crate) fn start_fold(&mut self, n: usize, split_from: Option<EpochMinute>) -> Vec<Fold> {
        let floor = self.floor;
        let mut folds = Vec::with_capacity(n.min(self.queue.len()));
        while folds.len() < n {
            let Some((since, pos)) = self.queue.pop_front() else {
                break;
            };
            let Some((series, p)) = self.series.at_mut(pos) else {
                continue;
            };
            if p.since != since || p.folding {
                continue;
            }
            p.folding = true;
            let split = split_from.and_then(|now| p.split_at(floor, now));
            folds.push(Fold {
                kind: p.kind,
                watermark: p.watermark,
                day_watermark: split.map_or(p.watermark, |s| s.day_watermark(p.watermark)),
                split,
                minutes: p.minutes.to_vec(),
                series: series.clone(),
            });
        }
        folds
    }

    /// Sets the floor of splits: the highest flush that may be in the
    /// documents already as the store opens.
    pub(crate) fn set_floor(&mut self, floor: u64) {
        self.floor = floor;
    }

    /// The oldest flush whose minutes are pending outside the fold in
    /// progress: the logs must keep it and everything after it.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.queue.front().map(|&(since, _)| since)
    }

    /// The fold committed: its series leave, but for what a split fold
    /// leaves pending, which goes back into the queue as a run of its own.
    pub(crate) fn end_fold(&mut self, folds: &[Fold]) {
        let mut back = Vec::new();
        for f in folds {
            let Some(split) = f.split else {
                self.remove(&f.series);
                continue;
            };
            let Some(pos) = self.series.position(&f.series) else {
                continue;
            };
            if let Some((_, p)) = self.series.at_mut(pos) {
                let at = p.minutes.partition_point(|&(m, _)| m < split.at);
                // Room for one more, as a list grown minute by minute.
                let mut rest = Vec::with_capacity(p.minutes.len() - at + 1);
                rest.extend_from_slice(&p.minutes[at..]);
                self.room -= p.minutes.capacity();
                self.room += rest.capacity();
                p.minutes = rest;
                p.since = split.since;
                p.folding = false;
                back.push((split.since, pos));
            }
        }
        requeue(&mut self.queue, back);
    }

    /// The fold failed: its series go back to the front of the queue, in
    /// the order they were taken, which keeps the queue ascending.
    pub(crate) fn abort_fold(&mut self, folds: &[Fold]) {
        let mut back: Vec<(u64, u32)> = Vec::with_capacity(folds.len());
        for f in folds {
            let Some(pos) = self.series.position(&f.series) else {
                continue;
            };
            if let Some((_, p)) = self.series.at_mut(pos) {
                p.folding = false;
                back.push((p.since, pos));
            }
        }
        back.sort_unstable_by_key(|&(since, _)| since);
        for entry in back.into_iter().rev() {
            self.queue.push_front(entry);
        }
    }

    fn get(&self, series: &SeriesId) -> Option<&SeriesPending> {
        self.series.get(series)
    }

    fn remove(&mut self, series: &SeriesId) {
        if let Some(p) = self.series.remove(series) {
            self.room -= p.minutes.capacity();
        }
    }

    /// `series`' pending run: where it began, and its minutes as a flush's
    /// series. Taken while no fold is in progress.
    pub(crate) fn run_of(&self, series: &Arc<SeriesId>) -> Option<(u64, SeriesMinutes)> {
        self.get(series).map(|p| {
            let sm = SeriesMinutes {
                catalog: crate::model::CatalogDue::Unknown,
                series: series.clone(),
                kind: p.kind,
                minutes: p.minutes.iter().copied().collect(),
            };
            (p.since, sm)
        })
    }

    /// The minutes of `series` pending with a sample counted (`n > 0`),
    /// ascending.
    pub(crate) fn counted_minutes(&self, series: &SeriesId) -> Vec<EpochMinute> {
        self.get(series).map_or_else(Vec::new, |p| {
            p.minutes
                .iter()
                .filter(|(_, s)| s.n > 0)
                .map(|&(m, _)| m)
                .collect()
        })
    }

    /// Forgets `series`' pending minutes (its documents are damaged).
    pub(crate) fn drop_series(&mut self, series: &SeriesId) {
        // Its queue entry, if any, is skipped by `start_fold` from now on.
        self.remove(series);
    }

    /// What a read of `series` must add to the stored documents.
    pub(crate) fn view(&self, series: &SeriesId) -> Option<PendingView> {
        self.get(series).map(|p| PendingView {
            kind: p.kind,
            watermark: p.watermark,
            split: p.split_mark(self.floor),
            minutes: p.minutes.to_vec(),
        })
    }
}

/// A series' growth phase, from the address of the id its run was made
/// with (taken once, when the run is made, and kept while the series is
/// pending), spread evenly over the seconds of a minute.
fn phase_of(series: &Arc<SeriesId>) -> u8 {
    let address = Arc::as_ptr(series) as usize as u64;
    let mixed = (address >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((mixed >> 32) % 60) as u8
}

/// The second of its minute flush `id` (wall-clock microseconds) was cut in.
fn second_of(id: u64) -> u8 {
    (id / 1_000_000 % 60) as u8
}

/// Adds `slot` to minute `m` of an ascending list.
fn merge_minute(minutes: &mut Minutes, m: EpochMinute, slot: &Slot) {
    // Flushes mostly bring the newest minute: look at the end first.
    let at = match minutes.last_mut() {
        Some((last, s)) if *last == m => return s.merge(slot),
        Some((last, _)) if *last < m => minutes.len(),
        None => 0,
        Some(_) => match minutes.binary_search_by_key(&m, |&(k, _)| k) {
            Ok(i) => return minutes[i].1.merge(slot),
            Err(i) => i,
        },
    };
    // Exactly one, unless grown ahead (see `grow_ahead`): a series waits to
    // be folded for about 60 flushes, so with a 5 s flush interval it holds
    // five minutes, and doubling would hold room for eight.
    minutes.reserve_exact(1);
    minutes.insert(at, (m, *slot));
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
