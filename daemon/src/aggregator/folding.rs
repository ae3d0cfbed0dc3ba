//! One request's series groups folded into the aggregator, a chunk of
//! [`FOLD_CHUNK`] at a time, each chunk a shard at a time.
//!
//! Why by shard: with a large fleet the series table outgrows the caches
//! and each series' lookup waits on memory. Folded one after another, each
//! under its own shard lock, those waits come one at a time, since a lock's
//! atomic instruction waits for every load before it; the lock and unlock
//! alone took 9% of the daemon's CPU on W1. Here a chunk's series are
//! taken a shard at a time under one lock: first their entries are loaded
//! into the cache together (nothing but independent loads, so the
//! processor overlaps the misses), then the known series are folded.
//!
//! The order stays the request's wherever it can be seen. Within a shard
//! the groups keep their order, so a series named twice takes its samples
//! in order. Groups that make a series or are refused whole (whose fate
//! may depend on the groups before them: the series limits) wait for a
//! second pass in request order. Rejections are put back in request order
//! before they are capped, so a client is told of the same first ones.

use std::sync::atomic::Ordering;

use smallvec::SmallVec;

use super::series::Shard;
use super::{length_mismatch, Aggregator, IngestOutcome, SeriesBatch, Window, FOLD_CHUNK};

/// A group's shard and hash; sorted by shard, its shard and place.
type Key = (usize, u64);

/// One request being folded: [`Aggregator::folding`].
pub struct Folding<'g> {
    agg: &'g Aggregator,
    window: Window,
    /// A chunk's (shard, hash) pairs in request order, then its (shard,
    /// place) pairs sorted behind them: one allocation per request.
    keys: Vec<Key>,
    /// The chunk's places of the groups left for the in-order pass: new
    /// series and groups refused whole. None in steady state.
    later: Vec<usize>,
    out: IngestOutcome,
}

impl<'g> Folding<'g> {
    pub(super) fn new(agg: &'g Aggregator, window: Window, groups: usize) -> Folding<'g> {
        Folding {
            agg,
            window,
            keys: Vec::with_capacity(2 * groups.min(FOLD_CHUNK)),
            later: Vec::new(),
            out: IngestOutcome::listing(agg.limits.max_rejections_reported),
        }
    }

    /// Folds `groups`, in order, a chunk of [`FOLD_CHUNK`] at a time.
    pub fn fold(&mut self, groups: &[SeriesBatch<'_>]) {
        for chunk in groups.chunks(FOLD_CHUNK) {
            self.fold_chunk(chunk);
        }
    }

    /// What became of the groups folded.
    pub fn finish(self) -> IngestOutcome {
        self.out
    }

    fn fold_chunk(&mut self, chunk: &[SeriesBatch<'_>]) {
        let agg = self.agg;
        // Each group may list as many rejections as the request still has
        // room for: the first that many in request order are among them.
        // The chunk's own outcome is therefore given a limit before each
        // group, and the request's applies as the chunk is merged.
        let room = self.out.limit.saturating_sub(self.out.rejections.len());
        let mut out = IngestOutcome::default();
        self.keys.clear();
        self.keys.extend(chunk.iter().map(|b| {
            let hash = agg.hasher.hash_one(b.key());
            (agg.shard_of(hash), hash)
        }));
        let (hashes, by_shard) = by_shard(&mut self.keys, agg.shards.len());
        let pass = Pass {
            agg,
            window: self.window,
            chunk,
            hashes,
            room,
        };
        let later = &mut self.later;
        later.clear();
        // A shard another request holds is passed over and come back to,
        // so that requests folding at once do not queue behind each other
        // shard after shard.
        let mut busy: SmallVec<[&[Key]; 8]> = SmallVec::new();
        for run in by_shard.chunk_by(|a, b| a.0 == b.0) {
            match agg.shards[run[0].0].shard.try_lock() {
                Some(mut shard) => pass.fold_run(&mut shard, run, later, &mut out),
                None => busy.push(run),
            }
        }
        for run in busy {
            let mut shard = agg.shards[run[0].0].shard.lock();
            pass.fold_run(&mut shard, run, later, &mut out);
        }
        later.sort_unstable();
        for &i in later.iter() {
            out.limit = out.rejections.len() + room;
            agg.ingest_one(&chunk[i], hashes[i].1, pass.window, &mut out);
        }
        // Stable: a group's own rejections keep their order.
        out.rejections
            .sort_by_key(|r| (r.source_index, r.series_index));
        self.out.merge(out);
    }
}

/// One chunk being folded: its groups, their (shard, hash) pairs, and how
/// many rejections each group may list.
struct Pass<'p, 'g> {
    agg: &'p Aggregator,
    window: Window,
    chunk: &'p [SeriesBatch<'g>],
    hashes: &'p [Key],
    room: usize,
}

impl Pass<'_, '_> {
    /// Folds the known series of `run`, the places of the chunk's groups
    /// in one shard, under that shard's lock; the others wait for the
    /// in-order pass.
    fn fold_run(
        &self,
        shard: &mut Shard,
        run: &[Key],
        later: &mut Vec<usize>,
        out: &mut IngestOutcome,
    ) {
        let (chunk, hashes) = (self.chunk, self.hashes);
        for &(_, i) in run {
            if let Some(s) = shard.series.first_under(hashes[i as usize].1) {
                // One field on each of the entry's three cache lines.
                std::hint::black_box((s.hash, s.last_minute, s.kind));
            }
        }
        let mut created = 0;
        for &(_, i) in run {
            let (i, b) = (i as usize, &chunk[i as usize]);
            let kind = match b.kind {
                Some(kind) if length_mismatch(b).is_none() => kind,
                _ => {
                    later.push(i);
                    continue;
                }
            };
            out.limit = out.rejections.len() + self.room;
            match self
                .agg
                .fold_known(shard, b, kind, hashes[i].1, self.window, out)
            {
                Some(made) => created += made,
                None => later.push(i),
            }
        }
        if created > 0 {
            // Counted under the shard lock, as `ingest_one` does.
            self.agg.shards[run[0].0]
                .pending
                .fetch_add(created, Ordering::Relaxed);
        }
    }
}

/// Puts behind `keys`, a chunk's (shard, hash) pairs in request order, its
/// (shard, place) pairs by shard, each shard's in request order: a counting
/// sort, as the shards are few (a comparison sort of them took 8% of W1's
/// CPU). Returns the two halves.
fn by_shard(keys: &mut Vec<Key>, shards: usize) -> (&[Key], &[Key]) {
    let n = keys.len();
    let mut starts: SmallVec<[usize; 64]> = SmallVec::from_elem(0, shards + 1);
    for &(shard, _) in keys.iter() {
        starts[shard + 1] += 1;
    }
    for s in 1..starts.len() {
        starts[s] += starts[s - 1];
    }
    keys.resize(2 * n, (0, 0));
    let (hashes, sorted) = keys.split_at_mut(n);
    for (i, &(shard, _)) in hashes.iter().enumerate() {
        sorted[starts[shard]] = (shard, i as u64);
        starts[shard] += 1;
    }
    (hashes, sorted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::tests::batch;
    use crate::aggregator::{AggregatorConfig, RejectReason};
    use crate::ingest::IngestConfig;
    use crate::model::{minute_of_ms, SampleKind, SeriesRef};

    const NOW: i64 = 1_780_000_000_000;

    fn agg(limits: IngestConfig) -> Aggregator {
        Aggregator::new(&AggregatorConfig { shards: 8 }, &limits)
    }

    /// Group `i` of a request: series `s` `metric`.
    fn group<'a>(
        i: usize,
        metric: &'a str,
        kind: SampleKind,
        ts: &'a [i64],
        vs: &'a [f64],
    ) -> SeriesBatch<'a> {
        SeriesBatch {
            series_index: i as u32,
            ..batch("s", metric, kind, ts, vs)
        }
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn rejections_are_listed_in_request_order_across_shards() {
        let limits = IngestConfig {
            max_rejections_reported: 5,
            ..IngestConfig::default()
        };
        let a = agg(limits);
        let metrics = names(600);
        let ok = [1.0];
        let ts = [NOW];
        let known: Vec<_> = (0..600)
            .map(|i| group(i, &metrics[i], SampleKind::Gauge, &ts, &ok))
            .collect();
        assert_eq!(a.ingest(&known, NOW).accepted, 600);
        // Every other group refused, across three chunks and every shard;
        // the new ones (from 590) too.
        let bad = [f64::INFINITY];
        let more = names(620);
        let req: Vec<_> = (0..620)
            .map(|i| {
                let vs = if i % 2 == 1 { &bad } else { &ok };
                group(i, &more[i], SampleKind::Gauge, &ts, vs)
            })
            .collect();
        let out = a.ingest(&req, NOW);
        assert_eq!((out.accepted, out.rejected), (310, 310));
        let places: Vec<u32> = out.rejections.iter().map(|r| r.series_index).collect();
        assert_eq!(places, vec![1, 3, 5, 7, 9]);
        assert!(out.rejections_truncated);
    }

    #[test]
    fn a_group_keeps_its_own_rejections_in_sample_order() {
        let limits = IngestConfig {
            max_rejections_reported: 3,
            ..IngestConfig::default()
        };
        let a = agg(limits);
        let ts = [NOW, NOW + 1, NOW + 2, NOW + 3];
        let bad = [f64::NAN, f64::INFINITY, f64::INFINITY, f64::INFINITY];
        let ok = [1.0; 4];
        let (m0, m1) = ("a", "b");
        let req = [
            group(0, m0, SampleKind::Gauge, &ts, &ok),
            group(1, m1, SampleKind::Gauge, &ts, &bad),
        ];
        a.ingest(&req, NOW);
        let out = a.ingest(&req, NOW);
        let got: Vec<_> = out
            .rejections
            .iter()
            .map(|r| (r.series_index, r.sample_index))
            .collect();
        assert_eq!(got, vec![(1, Some(1)), (1, Some(2)), (1, Some(3))]);
        assert_eq!(out.rejected, 3);
    }

    #[test]
    fn new_series_meet_the_source_limit_in_request_order() {
        let limits = IngestConfig {
            max_series_per_source: 6,
            ..IngestConfig::default()
        };
        let a = agg(limits);
        let metrics = names(12);
        let (ts, vs) = ([NOW], [1.0]);
        let first: Vec<_> = (0..3)
            .map(|i| group(i, &metrics[i], SampleKind::Gauge, &ts, &vs))
            .collect();
        a.ingest(&first, NOW);
        // The three known series interleaved with nine new ones: the first
        // three new ones in request order take the room left.
        let req: Vec<_> = (0..12)
            .map(|i| group(i, &metrics[i], SampleKind::Gauge, &ts, &vs))
            .collect();
        let out = a.ingest(&req, NOW);
        assert_eq!((out.accepted, out.rejected), (6, 6));
        let refused: Vec<u32> = out.rejections.iter().map(|r| r.series_index).collect();
        assert_eq!(refused, vec![6, 7, 8, 9, 10, 11]);
        assert!(out
            .rejections
            .iter()
            .all(|r| r.reason == RejectReason::SourceSeriesLimit));
    }

    #[test]
    fn a_series_named_twice_takes_its_samples_in_order() {
        let a = agg(IngestConfig::default());
        let c = SampleKind::CumulativeCounter;
        let (t0, t1, t2) = ([NOW], [NOW + 1_000], [NOW + 2_000]);
        let (v0, v1, v2) = ([10.0], [15.0], [40.0]);
        // New: made by the first group, the second folds into it.
        let req = [group(0, "c", c, &t0, &v0), group(1, "c", c, &t1, &v1)];
        assert_eq!(a.ingest(&req, NOW).accepted, 2);
        // Known: both groups in one shard's run, in order.
        let metrics = names(40);
        let mut req: Vec<_> = (0..40)
            .map(|i| group(i, &metrics[i], SampleKind::Gauge, &t2, &v2))
            .collect();
        req.insert(7, group(40, "c", c, &t2, &v2));
        req.insert(31, group(41, "c", c, &[NOW + 3_000], &[42.0]));
        assert_eq!(a.ingest(&req, NOW).accepted, 42);
        let (_, minutes) = a.pending_for(SeriesRef::new("s", "c"));
        assert_eq!(minutes.len(), 1);
        assert_eq!(minutes[0].0, minute_of_ms(NOW));
        // Increases 5, 25 and 2: a baseline, then each sample against the
        // one before it.
        assert_eq!((minutes[0].1.n, minutes[0].1.sum), (3, 32.0));
        assert_eq!(
            (minutes[0].1.last, minutes[0].1.last_ms),
            (42.0, NOW + 3_000)
        );
    }
}
