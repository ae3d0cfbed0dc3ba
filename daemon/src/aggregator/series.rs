//! One series' in-memory state and the fold of a request's samples into it:
//! validation against the time window, cumulative-to-delta conversion with
//! reset detection, and the per-minute slots that wait for the next flush.
//! This is the ingest hot path; the layout notes below are measured.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::prealloc::PreallocMarks;
use super::ring::Ring;
use super::steps::MinuteSteps;
use super::{Aggregator, ArrivalMinute, IngestOutcome, RejectReason, SeriesBatch, Window};
use crate::catalog::Mark;
use crate::ingest::text::same_bytes;
use crate::labels::Labels;
use crate::model::{
    is_stale_marker, minute_of_ms, sum_in_range, EpochMinute, SampleKind, SeriesId, SeriesRef,
    Slot, MAX_SUM,
};
use crate::table::Table;

// `repr(C)` with cache-line alignment keeps `hash` and the inline key in
// one line: a lookup's comparison touches a single line. Measured ~15%
// faster ingest at 20k series, where the series table outgrows the caches.
// The fields after them fit two more lines (192 bytes; a test holds it):
// every byte counts once per series. The recent samples of the series a
// read asked for ([`RECENT`]) sit beside the table, in [`Shard::recent`].
#[repr(C, align(64))]
pub(super) struct SeriesState {
    pub(super) hash: u64,
    /// `source|metric` and the labels' encoding, inline when short (nearly
    /// always for unlabelled series), so the hot-path comparison reads the
    /// entry itself instead of chasing pointers. `|` is in neither name's
    /// charset, so the join is unambiguous; the labels are compared by
    /// length as the rest.
    key: SmallVec<[u8; 48]>,
    pub(super) id: Arc<SeriesId>,
    /// When the cumulative counter's count began, as its agent last said
    /// (0: never said); a different one is a reset.
    pub(super) start_ms: i64,
    /// The newest accepted sample by timestamp, as sent (a cumulative
    /// counter's raw value), for latest-value reads; a cumulative counter's
    /// is also the base of its next increase (see [`SeriesState::baseline`]).
    pub(super) last_sample: LastSample,
    /// Latest minute with data, to know whether the series is active in the
    /// current hour and day (pre-allocation) and when it went idle.
    pub(super) last_minute: EpochMinute,
    /// Unflushed minutes, inline: almost always one (the current minute).
    pub(super) pending: SmallVec<[(EpochMinute, Slot); 1]>,
    /// The next hour / day whose document was already pre-allocated.
    pub(super) prealloc: PreallocMarks,
    /// What the catalog was last asked to record of the series, checked as
    /// a flush drains it (see [`crate::catalog::Mark`]).
    pub(super) catalog: Mark,
    /// Length of `source|metric` in `key`; the labels follow (the whole
    /// key is at most 2,048 bytes).
    labels_at: u16,
    pub(super) kind: SampleKind,
    /// [`INCREASED`], [`RECENT`] and [`UNLOGGED`], in the entry's padding
    /// byte.
    pub(super) marks: u8,
    /// The minute the series was last pushed (or its baseline restored):
    /// idleness is judged by it, never by the samples' own times, so a
    /// series pushed with old samples is not idle.
    pub(super) arrived: ArrivalMinute,
}

/// A mark: a cumulative counter has counted an increase since it came into
/// memory. Until then its last sample is only the baseline of the next
/// increase, which no read shows (a restored baseline too, as it may be
/// one).
const INCREASED: u8 = 1;
/// A mark: a read has taken the series' recent samples, so they are kept
/// from then on (see [`SeriesState::keep_recent`]). A series no read asks
/// for pays nothing for them on ingest but the test of this bit.
const RECENT: u8 = 2;
/// A mark: a cumulative counter's baseline moved, and the cuts since have
/// logged no baselines; its position is in [`Shard::unlogged`] until a cut
/// that logs them takes it (see `Aggregator::drain_into`).
const UNLOGGED: u8 = 4;

/// A series' newest (timestamp, value), or none yet. An `Option` would
/// take 8 more bytes per series; no accepted sample has the timestamp
/// `i64::MIN` (timestamps are checked against the lateness window), so it
/// stands for none.
#[derive(Debug, Clone, Copy)]
pub(super) struct LastSample {
    ts: i64,
    v: f64,
}

impl LastSample {
    pub(super) const NONE: LastSample = LastSample {
        ts: i64::MIN,
        v: 0.0,
    };

    pub(super) fn get(&self) -> Option<(i64, f64)> {
        (self.ts != i64::MIN).then_some((self.ts, self.v))
    }

    pub(super) fn set(&mut self, ts: i64, v: f64) {
        *self = LastSample { ts, v };
    }
}

impl SeriesState {
    /// Keeps the series' newest sample. A cumulative counter's is its
    /// baseline, which NaN must not become; a refused increase still moves
    /// it, or the next increase would count this one again.
    #[inline]
    fn note_last(&mut self, ts: i64, v: f64) {
        if (self.kind != SampleKind::CumulativeCounter || !v.is_nan())
            && ts >= self.last_sample.get().map_or(i64::MIN, |(t, _)| t)
        {
            self.last_sample.set(ts, v);
        }
    }

    /// The pending slot of `minute`: the one at `at`, or a new one.
    #[inline]
    fn minute_slot(&mut self, minute: EpochMinute, at: Option<usize>) -> &mut Slot {
        let i = match at {
            Some(i) => i,
            None => {
                self.pending.push((minute, Slot::EMPTY));
                self.pending.len() - 1
            }
        };
        &mut self.pending[i].1
    }

    fn new(
        b: &SeriesBatch<'_>,
        hash: u64,
        kind: SampleKind,
        source: Arc<str>,
        metric: Arc<str>,
    ) -> SeriesState {
        SeriesState {
            key: [
                b.source.as_bytes(),
                b"|",
                b.metric.as_bytes(),
                b.labels.as_bytes(),
            ]
            .concat()
            .into_iter()
            .collect(),
            labels_at: (b.source.len() + 1 + b.metric.len()) as u16,
            id: Arc::new(SeriesId {
                source,
                metric,
                labels: Labels::from_validated(b.labels),
            }),
            hash,
            kind,
            start_ms: 0,
            last_sample: LastSample::NONE,
            last_minute: EpochMinute::MIN,
            pending: SmallVec::new(),
            prealloc: PreallocMarks::default(),
            catalog: Mark::default(),
            marks: 0,
            arrived: 0,
        }
    }

    /// A cumulative counter's last sample: the base of its next increase.
    /// A cumulative counter keeps only in-order finite samples as its last
    /// (older ones are refused, NaN is dropped), so the two are one.
    pub(super) fn baseline(&self) -> Option<(i64, f64)> {
        match self.kind {
            SampleKind::CumulativeCounter => self.last_sample.get(),
            _ => None,
        }
    }

    /// The newest sample a read may show: none for a cumulative counter
    /// that has only a baseline (see [`INCREASED`]), or for a
    /// series whose newest sample is a staleness marker (it ended).
    pub(super) fn shown_sample(&self) -> Option<(i64, f64)> {
        match self.kind {
            SampleKind::CumulativeCounter if self.marks & INCREASED == 0 => None,
            _ => self.last_sample.get().filter(|&(_, v)| !is_stale_marker(v)),
        }
    }

    /// Whether the series' recent samples are kept (see [`RECENT`]).
    #[inline]
    pub(super) fn keeps_recent(&self) -> bool {
        self.marks & RECENT != 0
    }

    /// Starts keeping the series' recent samples, in `recent` at the
    /// series' position `pos`, unless it already does: those after every
    /// sample it has, as a late sample older than those kept first would
    /// make them look complete when they are not. The read that asks has
    /// none yet, and answers without them. The read is dated by the
    /// minute the series was last pushed (the aggregator's clock is its
    /// requests'): the samples of a series that no read asked for while it
    /// was pushed for the idle timeout are let go (see
    /// `Aggregator::evict_idle`).
    pub(super) fn keep_recent<'r>(&mut self, pos: u32, recent: &'r mut RecentRings) -> &'r Recent {
        let now = self.arrived;
        let r = recent.entry(pos).or_insert_with(|| {
            let newest = self.pending.iter().filter_map(|(_, s)| s.last_sample());
            let newest = newest
                .map(|(ts, _)| ts)
                .chain(self.last_sample.get().map(|(ts, _)| ts));
            let newest = newest.max().unwrap_or(i64::MIN);
            let mut ring = Ring::EMPTY;
            ring.forget_through(newest);
            Box::new(Recent {
                ring,
                steps: MinuteSteps::after(newest),
                read: now,
            })
        });
        self.marks |= RECENT;
        r.read = r.read.max(now);
        r
    }

    /// Stops keeping the series' recent samples (their entry in the
    /// shard's map is dropped by the caller).
    pub(super) fn forget_recent(&mut self) {
        self.marks &= !RECENT;
    }

    /// Marks the counter's baseline as moved and not logged; true if it
    /// was not marked already (its position is then to be listed).
    #[inline]
    pub(super) fn mark_unlogged(&mut self) -> bool {
        let new = self.marks & UNLOGGED == 0;
        self.marks |= UNLOGGED;
        new
    }

    /// Whether the counter's baseline moved since a cut last logged it.
    #[inline]
    pub(super) fn is_unlogged(&self) -> bool {
        self.marks & UNLOGGED != 0
    }

    /// Its baseline is being logged.
    #[inline]
    pub(super) fn logged(&mut self) {
        self.marks &= !UNLOGGED;
    }

    #[inline]
    pub(super) fn is(&self, key: SeriesRef<'_>) -> bool {
        let k = self.key.as_slice();
        let (s, m, l) = (
            key.source.as_bytes(),
            key.metric.as_bytes(),
            key.labels.as_bytes(),
        );
        let at = self.labels_at as usize;
        at == s.len() + 1 + m.len()
            && k.len() == at + l.len()
            && same_bytes(&k[..s.len()], s)
            && same_bytes(&k[s.len() + 1..at], m)
            && same_bytes(&k[at..], l)
    }
}

/// The recent samples of the series that keep them, by their position in
/// the shard's table. Boxed: the map's table grows by doubling, and empty
/// places of a pointer cost far less than empty places of a `Recent`
/// (measured at a million series read: 757 bytes a series unboxed).
pub(super) type RecentRings = HashMap<u32, Box<Recent>, ahash::RandomState>;

/// One series' recent samples, the steps of its newest minutes, and the
/// minute a read last asked for them.
#[derive(Debug)]
pub(super) struct Recent {
    pub(super) ring: Ring,
    pub(super) steps: MinuteSteps,
    pub(super) read: ArrivalMinute,
}

impl Recent {
    /// What a read takes of them, for a series of `kind`.
    pub(super) fn snapshot(&self, kind: SampleKind) -> crate::model::RecentSamples {
        self.ring.snapshot(kind).with_steps(self.steps.snapshot())
    }

    /// Keeps an accepted sample: in the steps if it added to its minute,
    /// and in the ring if `in_ring`.
    #[inline]
    fn keep(&mut self, in_ring: bool, ts: i64, v: f64, added: Option<f64>) {
        if let Some(a) = added {
            self.steps.add(ts, a);
        }
        if in_ring {
            self.ring.push(ts, v, added);
        }
    }
}

#[derive(Default)]
pub(super) struct Shard {
    pub(super) series: Table<SeriesState>,
    /// The recent samples of the series a read asked for (see [`RECENT`]),
    /// beside the table rather than in its entries: the series no read
    /// asks for, nearly all of a large fleet, pay no memory for them and
    /// their ingest touches no more lines. Removed with their series, or
    /// when no read has asked for them in the idle timeout.
    pub(super) recent: RecentRings,
    /// Positions of the series with pending minutes, so a drain visits only
    /// active series. A series with pending minutes is never evicted, so
    /// its position stays its own until the drain.
    pub(super) dirty: Vec<u32>,
    /// Cumulative counters that took samples and hold no slot since the
    /// last drain (a sample whose increase was refused, after the baseline
    /// moved to it; or a retry of samples already counted), so a drain
    /// that logs baselines sees them.
    pub(super) rebased: Vec<u32>,
    /// Positions of the cumulative counters marked [`UNLOGGED`], each
    /// once: what the next cut that logs baselines adds to those it
    /// drains. Kept to live marked series as idle ones are evicted.
    pub(super) unlogged: Vec<u32>,
}

/// One shard and its pending-slot count, on its own cache lines so cores
/// working on different shards do not contend.
#[derive(Default)]
#[repr(align(128))]
pub(super) struct ShardCell {
    pub(super) shard: Mutex<Shard>,
    /// Pending (series, minute) slots in this shard; changed only under the lock.
    pub(super) pending: AtomicUsize,
}

/// The series' recent samples when they are kept, and the index of the
/// first of a request's `n` samples to push to their ring: only its last
/// few are (see `Ring::keep_from`), and none unless they are kept. Their
/// steps count every sample.
#[inline]
fn recent_of<'r>(
    state: &SeriesState,
    pos: u32,
    recent: &'r mut RecentRings,
    n: usize,
) -> (Option<&'r mut Recent>, usize) {
    match state.keeps_recent() {
        true => match recent.get_mut(&pos) {
            Some(r) => (Some(r), Ring::keep_from(n)),
            None => (None, usize::MAX),
        },
        false => (None, usize::MAX),
    }
}

/// A series found in its shard, with the shard's lists its fold may add
/// it to.
struct Found<'s> {
    pos: u32,
    state: &'s mut SeriesState,
    recent: &'s mut RecentRings,
    dirty: &'s mut Vec<u32>,
    rebased: &'s mut Vec<u32>,
}

impl Shard {
    /// The series `find` takes from the table, with the lists its fold
    /// writes to.
    #[inline]
    fn found<'s>(
        &'s mut self,
        find: impl FnOnce(&'s mut Table<SeriesState>) -> Option<(u32, &'s mut SeriesState)>,
    ) -> Option<Found<'s>> {
        let Shard {
            series,
            recent,
            dirty,
            rebased,
            ..
        } = self;
        let (pos, state) = find(series)?;
        Some(Found {
            pos,
            state,
            recent,
            dirty,
            rebased,
        })
    }
}

impl Aggregator {
    /// Folds one series group into its shard, creating its series if new;
    /// returns the new slots created.
    pub(super) fn fold_series(
        &self,
        shard: &mut Shard,
        b: &SeriesBatch<'_>,
        hash: u64,
        window: Window,
        out: &mut IngestOutcome,
    ) -> usize {
        let Some(kind) = b.kind else { return 0 };
        // The hot path: one probe for a known series.
        if let Some(created) = self.fold_known(shard, b, kind, hash, window, out) {
            return created;
        }
        // New (the probe above, under this lock, found none): made, then
        // folded where it was put, without probing for it again.
        let made = shard.found(|series| self.insert_series(series, b, hash, kind, out));
        match made {
            Some(found) => self.fold_found(found, b, kind, window, out),
            None => 0,
        }
    }

    /// Folds `b`, of `kind`, into its series if the shard holds it (the
    /// new slots created); None, having done nothing, if it does not.
    #[inline]
    pub(super) fn fold_known(
        &self,
        shard: &mut Shard,
        b: &SeriesBatch<'_>,
        kind: SampleKind,
        hash: u64,
        window: Window,
        out: &mut IngestOutcome,
    ) -> Option<usize> {
        let key = b.key();
        let found = shard.found(|series| series.find_mut(hash, |s| s.hash == hash && s.is(key)))?;
        Some(self.fold_found(found, b, kind, window, out))
    }

    /// Folds `b`'s samples into its found series.
    #[inline]
    fn fold_found(
        &self,
        found: Found<'_>,
        b: &SeriesBatch<'_>,
        kind: SampleKind,
        window: Window,
        out: &mut IngestOutcome,
    ) -> usize {
        let Found {
            pos,
            state,
            recent,
            dirty,
            rebased,
        } = found;
        if state.kind != kind {
            reject_kind_conflict(b, state.kind, kind, out);
            return 0;
        }
        state.arrived = state.arrived.max(window.arrived);
        let mut created = 0;
        let window = (window.oldest_ms, window.newest_ms);
        let (mut kept, keep_from) = recent_of(state, pos, recent, b.timestamps_ms.len());
        for (j, (&ts, &v)) in b.timestamps_ms.iter().zip(b.values).enumerate() {
            let sample = Sample {
                index: j as u32,
                ts,
                v,
            };
            let Some(adds) = self.sample_value(state, b, sample, window, out) else {
                continue;
            };
            state.note_last(ts, v);
            let minute = minute_of_ms(ts);
            // Nearly always the newest minute, so search from the back.
            let at = state.pending.iter().rposition(|(m, _)| *m == minute);
            if let Some(value) = adds {
                let sum = at.map_or(0.0, |i| state.pending[i].1.sum) + value;
                if !sum_in_range(sum) {
                    reject_overflow(b, sample, value, out);
                    // A counter's baseline moved without a sample kept:
                    // the ring's increases would be taken from the wrong one.
                    if let Some(r) = kept.as_deref_mut() {
                        r.ring.forget_through(ts);
                    }
                    continue;
                }
            }
            state.last_minute = state.last_minute.max(minute);
            if state.pending.is_empty() {
                dirty.push(pos);
            }
            created += usize::from(at.is_none());
            state.marks |= u8::from(adds.is_some()) * INCREASED;
            let slot = state.minute_slot(minute, at);
            if let Some(value) = adds {
                slot.add_value(value);
            }
            // The minute's last sample is the value as sent: a cumulative
            // counter's raw count, NaN as NaN.
            slot.see(ts, v);
            if let Some(r) = kept.as_deref_mut() {
                r.keep(j >= keep_from, ts, v, adds);
            }
            out.accepted += 1;
        }
        if let (Some(r), Some(skipped)) = (kept, b.timestamps_ms.get(..keep_from)) {
            r.ring.forget_through(Ring::skipped(skipped, window.1));
        }
        if kind == SampleKind::CumulativeCounter
            && state.pending.is_empty()
            && state.baseline().is_some()
        {
            rebased.push(pos);
        }
        created
    }

    /// The series' position and state, created if new (None when a series
    /// limit refuses it, the group then rejected).
    #[inline]
    pub(super) fn series_for<'t>(
        &self,
        series: &'t mut Table<SeriesState>,
        b: &SeriesBatch<'_>,
        hash: u64,
        key: SeriesRef<'_>,
        out: &mut IngestOutcome,
    ) -> Option<(u32, &'t mut SeriesState)> {
        let kind = b.kind?;
        if let Some((pos, _)) = series.find(hash, |s| s.hash == hash && s.is(key)) {
            return series.get_mut(pos).map(|s| (pos, s));
        }
        self.insert_series(series, b, hash, kind, out)
    }

    /// A new series' state, unless the series limit is reached (then the
    /// group is rejected and `None` returned). The caller has just probed
    /// `series` for it, under the same lock, and not found it: the table
    /// would otherwise hold it twice.
    #[cold]
    fn insert_series<'t>(
        &self,
        series: &'t mut Table<SeriesState>,
        b: &SeriesBatch<'_>,
        hash: u64,
        kind: SampleKind,
        out: &mut IngestOutcome,
    ) -> Option<(u32, &'t mut SeriesState)> {
        if self.reject_invalid(b, out) {
            return None;
        }
        let max_series = self.limits.max_series;
        if self.series_count.load(Ordering::Relaxed) >= max_series {
            let n = b.values.len() as u64;
            metrics::counter!("tally_series_refused_total", "limit" => "daemon").increment(1);
            out.reject(b, None, n, RejectReason::SeriesLimit, || {
                format!("the daemon already tracks {max_series} series (ingest.max_series)")
            });
            return None;
        }
        let (source, metric) = self.take_names(b, out)?;
        self.series_count.fetch_add(1, Ordering::Relaxed);
        let state = SeriesState::new(b, hash, kind, source, metric);
        let (pos, state) = series.insert(hash, state, |s| s.hash);
        self.index_labelled(&state.id);
        Some((pos, state))
    }

    /// Counts a new series against its source's limit and returns the
    /// shared copies of its source and metric; none (and the group
    /// rejected) when the source is at `ingest.max_series_per_source`.
    fn take_names(
        &self,
        b: &SeriesBatch<'_>,
        out: &mut IngestOutcome,
    ) -> Option<(Arc<str>, Arc<str>)> {
        let max = self.limits.max_series_per_source;
        let mut names = self.names.lock();
        match names.sources.count(b.source) {
            n if n >= max => {
                drop(names);
                metrics::counter!("tally_series_refused_total", "limit" => "source").increment(1);
                let count = b.values.len() as u64;
                out.reject(b, None, count, RejectReason::SourceSeriesLimit, || {
                    format!(
                        "source {:?} already has {max} series in memory (ingest.max_series_per_source); \
                         check for a label with unbounded values",
                        truncate(b.source)
                    )
                });
                None
            }
            _ => Some((names.sources.add(b.source), names.metrics.add(b.metric))),
        }
    }

    /// Why a sample at `ts` is outside the time window, if it is, with
    /// the rejection's detail (formatted only if it is reported).
    #[inline]
    fn out_of_window(
        &self,
        ts: i64,
        (oldest_ms, newest_ms): (i64, i64),
    ) -> Option<(RejectReason, Box<dyn Fn() -> String + '_>)> {
        if ts < oldest_ms {
            return Some((
                RejectReason::TooOld,
                Box::new(move || {
                    format!(
                        "timestamp {} is {}s older than the lateness window (ingest.lateness_window = {}s)",
                        fmt_ms(ts),
                        oldest_ms.saturating_sub(ts) / 1000,
                        self.limits.lateness_ms / 1000
                    )
                }),
            ));
        }
        if ts > newest_ms {
            return Some((
                RejectReason::TooFarAhead,
                Box::new(move || {
                    format!(
                        "timestamp {} is more than ingest.max_future_skew = {}s ahead of the daemon's clock",
                        fmt_ms(ts),
                        self.limits.future_skew_ms / 1000
                    )
                }),
            ));
        }
        None
    }

    /// Checks one sample against the value rules and the time window and
    /// returns what it adds to its minute's aggregates: `Some(None)` when
    /// it is accepted as the minute's last sample only (NaN, or a cumulative
    /// counter's first value, the baseline of the next increase); `None`
    /// when it was refused.
    #[inline]
    fn sample_value(
        &self,
        state: &mut SeriesState,
        b: &SeriesBatch<'_>,
        Sample { index, ts, v }: Sample,
        window: (i64, i64),
        out: &mut IngestOutcome,
    ) -> Option<Option<f64>> {
        let mut reject = |reason, detail: &dyn Fn() -> String| {
            out.reject(b, Some(index), 1, reason, detail);
            None
        };
        if v.is_infinite() {
            return reject(RejectReason::NonFiniteValue, &|| {
                format!("value {v} is not a finite number")
            });
        }
        if let Some((reason, detail)) = self.out_of_window(ts, window) {
            return reject(reason, &*detail);
        }
        if v.is_nan() {
            // Data, not an error: exporters send NaN (a summary quantile with
            // no observations). It can enter no sum, so it is only the
            // minute's last sample, and a counter's increase skips it.
            metrics::counter!("tally_samples_nan_total").increment(1);
            return Some(None);
        }
        match state.kind {
            SampleKind::Gauge => Some(Some(v)),
            SampleKind::DeltaCounter if v < 0.0 => reject(RejectReason::NegativeDelta, &|| {
                format!("delta counter value {v} is negative")
            }),
            SampleKind::DeltaCounter => Some(Some(v)),
            SampleKind::CumulativeCounter => match state.baseline() {
                None => {
                    // The first value is only the baseline of the next delta.
                    state.start_ms = start_of(b, index);
                    Some(None)
                }
                Some((last_ts, _)) if ts < last_ts => reject(RejectReason::OutOfOrder, &|| {
                    format!(
                        "cumulative counter sample at {} is older than the previous one at {}",
                        fmt_ms(ts),
                        fmt_ms(last_ts)
                    )
                }),
                Some((_, last_v)) => {
                    let start = start_of(b, index);
                    let restarted = start != 0 && state.start_ms != 0 && start != state.start_ms;
                    if start != 0 {
                        state.start_ms = start;
                    }
                    if v >= last_v && !restarted {
                        Some(Some(v - last_v))
                    } else {
                        // A reset: the counted process restarted from zero
                        // (its value went down, or its agent says its count
                        // began anew), so everything it counted since is `v`.
                        out.counter_resets += 1;
                        Some(Some(v))
                    }
                }
            },
        }
    }
}

/// Refuses a group whose kind is not its series' kind.
#[cold]
fn reject_kind_conflict(
    b: &SeriesBatch<'_>,
    was: SampleKind,
    kind: SampleKind,
    out: &mut IngestOutcome,
) {
    let n = b.values.len() as u64;
    out.reject(b, None, n, RejectReason::KindConflict, || {
        format!(
            "series is a {} but this batch says {}",
            was.as_str(),
            kind.as_str()
        )
    });
}

/// Refuses a finite sample whose increase or minute sum would leave
/// [`MAX_SUM`]. A cumulative counter's sample is already the baseline of
/// the next one: its own increase is what cannot be kept.
#[cold]
fn reject_overflow(b: &SeriesBatch<'_>, sample: Sample, added: f64, out: &mut IngestOutcome) {
    out.reject(b, Some(sample.index), 1, RejectReason::Overflow, || {
        format!(
            "value {} would add {added} to its minute, taking the minute's sum beyond ±{MAX_SUM:e}, the largest Tally keeps so that hour and day totals stay finite",
            sample.v
        )
    });
}

/// One sample of a series group and its position in it.
#[derive(Clone, Copy)]
struct Sample {
    index: u32,
    ts: i64,
    v: f64,
}

/// The start time the batch gives its `index`th value, 0 when none.
fn start_of(b: &SeriesBatch<'_>, index: u32) -> i64 {
    b.start_times_ms.get(index as usize).copied().unwrap_or(0)
}

pub(super) fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn fmt_ms(ts_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ts_ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ts_ms}ms"))
}

#[cfg(test)]
#[path = "series_tests.rs"]
mod tests;
