//! Replaying the write-ahead log at start, before the listeners open.
//!
//! The store's durable flush id says how far it is complete. The log is
//! read in order:
//! - up to the newest marker at or below that flush that carries baselines
//!   (one in about ten does, `crate::aggregator::BaselineLog`), requests
//!   are already in the store: only their rollup group declarations are
//!   replayed, and checkpoints and markers give each cumulative counter's
//!   baseline as of that point;
//! - from there to the marker of that flush (or the newest before it), the
//!   baselines are restored and the requests folded again only to bring
//!   them forward: their samples are in the store, so what they leave
//!   pending is dropped at that marker;
//! - after it, every request is folded again as
//!   it was taken (same clock, same sources refused), and at each marker the
//!   flush cut there before the crash is cut again with its own id and
//!   applied, so the documents' watermarks skip whatever the store already
//!   had of it. What follows the last marker stays in memory and is flushed
//!   as usual.
//!
//! Flushes above the highest one any document may hold
//! ([`Store::highest_flush_held`]) are new everywhere, so replay merges
//! them: it folds on past their markers and cuts once, at the last marker
//! of each [`MERGE_SPAN_US`] and at the log's last marker, with that
//! marker's id. The store receives what a longer flush interval would have
//! given it, but for two things a cut decides from what it holds:
//! - a group rollup takes the members its group has at the cut, so the
//!   marker before a request that declares groups is always cut;
//! - a minute's sum is checked against the largest a slot keeps over the
//!   merged flushes together, so a sum that only the merge takes past
//!   ±1e300 (samples near that bound) is refused at replay.
//!
//! A cut costs about as much as the fleet has series, whatever it holds:
//! the soak's 53 one-second cuts of 100,000 series were about half of a
//! 15 s replay. Flush ids grow along the log, so once one is above the
//! bound every later one is too.
//!
//! A crash during replay is safe: the flushes replay applied are durable or
//! not, and the next start begins from whichever.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::aggregator::Aggregator;
use crate::flush::Pipeline;
use crate::ingest::Ingestor;
use crate::store::{Store, StoreError};
use crate::wal::{Baseline, Baselines, Entry, Record, RecoveredSegment, WalError};

/// What replay did.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Every baseline as of the log's last marker, for the first checkpoint
    /// of the log's next segment.
    pub baselines: Baselines,
    /// The newest flush id in the log: new flushes must be numbered above.
    pub max_flush_id: u64,
    pub requests: u64,
    /// Requests the store had, folded again for their baselines.
    pub refolded: u64,
    /// Flushes cut again and applied.
    pub flushes: u64,
    /// Flushes merged into the next cut.
    pub merged: u64,
}

/// Flushes replay merges into one cut at most, in flush-id microseconds:
/// the aggregator then holds about two minutes per series, as it does
/// between two one-minute flushes.
const MERGE_SPAN_US: u64 = 60_000_000;

/// Where the store stands at start, as replay needs it.
#[derive(Debug, Clone, Copy)]
pub struct StoreAt {
    /// The newest flush complete in the store with every one before it
    /// ([`resume_flush_id`]): replay folds again what comes after it.
    pub complete: u64,
    /// The highest flush any document may hold ([`held_flush_id`]):
    /// replay merges the flushes above it.
    pub held: u64,
}

/// A record's place in the log: segment index, record index.
type At = (usize, usize);

/// The position just after the newest marker at or below `durable`
/// (segment index, record index), or the start; `id` says which entries
/// count as markers and their flush ids. With every marker, where the
/// store is complete; with those that carry baselines, where they are
/// known.
fn after_marker(
    segments: &[RecoveredSegment],
    durable: u64,
    id: impl Fn(&Entry) -> Option<u64>,
) -> At {
    let mut at = (0, 0);
    for (si, seg) in segments.iter().enumerate() {
        for (ri, e) in seg.entries.iter().enumerate() {
            if id(e).is_some_and(|flush_id| flush_id <= durable) {
                at = (si, ri + 1);
            }
        }
    }
    at
}

fn resume_point(segments: &[RecoveredSegment], durable: u64) -> At {
    after_marker(segments, durable, Entry::flush_id)
}

fn baselines_point(segments: &[RecoveredSegment], durable: u64) -> At {
    after_marker(segments, durable, |e| match e {
        Entry::Marker(id) => Some(*id),
        _ => None,
    })
}

/// Where replay is in the log: before the baselines' point, between it and
/// the resume point (folding for the baselines only), or after.
struct Zones {
    baselines_at: At,
    resume: At,
    seeded: bool,
    resumed: bool,
}

impl Zones {
    /// Called before each record other than a checkpoint, with its place,
    /// and once after the last: restores the baselines where the fold
    /// begins, and drops what folding for them left pending where the
    /// store's part ends.
    fn enter(&mut self, at: Option<At>, agg: &Aggregator, baselines: &Baselines) {
        if !self.seeded && at.is_none_or(|at| at >= self.baselines_at) {
            seed(agg, baselines);
            self.seeded = true;
        }
        if !self.resumed && at.is_none_or(|at| at >= self.resume) {
            if self.baselines_at < self.resume {
                agg.discard_pending();
            }
            self.resumed = true;
        }
    }
}

/// The markers from `resume` on at which replay cuts a flush: each one at
/// or below `held`; above it, the last of every [`MERGE_SPAN_US`], the
/// log's last, and each one followed, before the next, by a request that
/// declares rollup groups: a declaration may change a group's members,
/// and each flush must be expanded into its groups with the members it
/// had when it was cut.
fn cut_points(segments: &[RecoveredSegment], resume: At, held: u64) -> HashSet<At> {
    let mut markers: Vec<(At, u64)> = Vec::new();
    let mut declaring: Vec<At> = Vec::new();
    for (si, seg) in segments.iter().enumerate() {
        for (ri, e) in seg.entries.iter().enumerate() {
            match (e, e.flush_id()) {
                (_, Some(id)) if (si, ri) >= resume => markers.push(((si, ri), id)),
                (Entry::Declaring, _) if (si, ri) >= resume => declaring.push((si, ri)),
                _ => {}
            }
        }
    }
    let mut cuts = HashSet::new();
    let mut since: Option<u64> = None;
    for (i, &(at, id)) in markers.iter().enumerate() {
        if id <= held {
            cuts.insert(at);
            continue;
        }
        let first = *since.get_or_insert(id);
        let next = markers.get(i + 1);
        let next_too_far = next.is_none_or(|&(_, n)| n.saturating_sub(first) > MERGE_SPAN_US);
        // The first declaring request after this marker comes before the next.
        let declared = declaring
            .get(declaring.partition_point(|&d| d < at))
            .is_some_and(|&d| next.is_none_or(|&(next_at, _)| d < next_at));
        if next_too_far || declared {
            cuts.insert(at);
            since = None;
        }
    }
    cuts
}

/// The highest flush any document may hold, never below `complete`. If the
/// store cannot say, every flush is cut on its own, as it was cut before.
pub async fn held_flush_id(segments: &[RecoveredSegment], complete: u64, store: &dyn Store) -> u64 {
    if !segments.iter().any(|s| s.markers().next().is_some()) {
        return complete;
    }
    match store.highest_flush_held().await {
        Ok(id) => id.max(complete),
        Err(e) => {
            warn!(error = %e, "the store cannot say which flushes it may hold; replay cuts every flush of the write-ahead log on its own");
            u64::MAX
        }
    }
}

/// Restores the baselines into the aggregator, but not those of counters
/// not pushed for longer than `IngestConfig::baseline_keep` (by arrival,
/// never by their samples' times): the aggregator would have forgotten
/// them (their next sample starts afresh), and so does replay. A baseline
/// from an older log, its arrival unknown, is restored.
fn seed(agg: &Aggregator, baselines: &Baselines) {
    let keep_ms = agg
        .limits()
        .baseline_keep()
        .as_millis()
        .min(i64::MAX as u128) as i64;
    let now = chrono::Utc::now().timestamp_millis();
    let oldest = now.saturating_sub(keep_ms);
    for b in baselines
        .iter()
        .filter(|b| b.arrived_ms().is_none_or(|t| t >= oldest))
    {
        agg.seed_baseline(b, now);
    }
}

fn merge(into: &mut Baselines, baselines: &[Baseline]) {
    into.extend(baselines.iter().cloned());
}

/// Asking the store again while it is unreachable at start.
const ASK_FIRST_BACKOFF: Duration = Duration::from_millis(100);
const ASK_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where replay starts: the store's complete flush id, from `ask`.
///
/// While the store is unreachable: if the log holds a flush marker, replay
/// cannot finish without the store anyway (it applies that flush), so this
/// asks again with backoff until the store answers. Starting from the
/// log's beginning instead would be safe (the watermarks skip what the
/// store has) but would write every flush of the log again: a start during
/// a 30 s outage of a MongoDB stand-in replayed 597 flushes and kept the
/// daemon down for 392 s. If the log holds no marker, replay needs no store:
/// it starts at once, from the beginning (0), and the daemon ingests while
/// the store is down.
pub async fn resume_flush_id<F, Fut>(
    segments: &[RecoveredSegment],
    mut ask: F,
) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    let has_marker = segments.iter().any(|s| s.markers().next().is_some());
    let mut backoff = ASK_FIRST_BACKOFF;
    loop {
        match ask().await {
            Ok(id) => return Ok(id),
            Err(e) if e.is_retryable() && !has_marker => {
                warn!(error = %e, "store unavailable at start; the write-ahead log holds no flush, so replay goes on without it");
                return Ok(0);
            }
            Err(e) if e.is_retryable() => {
                warn!(error = %e, retry_in = ?backoff, "store unavailable at start; waiting for it to learn where to replay the write-ahead log from");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ASK_MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Replays `segments` given where the store stands; `give_up` ends
/// retries of a flush the store keeps refusing (shutdown during replay).
/// Each segment is read again record by record. Fails only if a segment
/// can no longer be read as it was at [`crate::wal::recover`].
pub async fn replay(
    segments: &[RecoveredSegment],
    store: StoreAt,
    agg: &Aggregator,
    ingest: &Ingestor,
    pipeline: &Pipeline,
    give_up: &CancellationToken,
) -> Result<Replayed, WalError> {
    let resume = resume_point(segments, store.complete);
    let cuts = cut_points(segments, resume, store.held);
    let mut zones = Zones {
        baselines_at: baselines_point(segments, store.complete),
        resume,
        seeded: false,
        resumed: false,
    };
    let mut out = Replayed::default();
    for (si, seg) in segments.iter().enumerate() {
        // Read with `next` so that each request read is handed back to be
        // decoded into again (`recycle`).
        let mut records = seg.records()?;
        let mut ri = 0;
        while let Some(record) = records.next() {
            let record = record?;
            let at = (si, ri);
            ri += 1;
            if let Record::Checkpoint { baselines } = &record {
                // Once folding has begun, a checkpoint repeats what the
                // markers gave.
                if !zones.seeded {
                    out.baselines.clear();
                    merge(&mut out.baselines, baselines);
                }
                continue;
            }
            zones.enter(Some(at), agg, &out.baselines);
            let after = at >= resume;
            match &record {
                Record::Checkpoint { .. } => {}
                Record::Marker {
                    flush_id,
                    baselines,
                } => {
                    if let Some(baselines) = baselines {
                        merge(&mut out.baselines, baselines);
                    }
                    out.max_flush_id = out.max_flush_id.max(*flush_id);
                    if after && cuts.contains(&at) {
                        if !pipeline.replay_flush(*flush_id, give_up).await {
                            warn!(flush_id, "a replayed flush did not reach the store");
                        }
                        out.flushes += 1;
                    } else if after {
                        out.merged += 1;
                    }
                }
                Record::Request {
                    now_ms,
                    refused_sources: refused,
                    request,
                } => match (zones.seeded, after) {
                    (false, _) => ingest.replay_groups(request, *now_ms, refused),
                    (true, fresh) => {
                        ingest.replay(request, *now_ms, refused);
                        *if fresh {
                            &mut out.requests
                        } else {
                            &mut out.refolded
                        } += 1;
                    }
                },
            }
            if let Record::Request { request, .. } = record {
                records.recycle(request);
            }
        }
    }
    zones.enter(None, agg, &out.baselines);
    if out.requests > 0 || out.flushes > 0 || out.refolded > 0 {
        info!(
            requests = out.requests,
            refolded = out.refolded,
            flushes = out.flushes,
            merged = out.merged,
            durable_flush_id = store.complete,
            held_flush_id = store.held,
            "write-ahead log replayed"
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::path::PathBuf;

    use super::*;

    fn segment(entries: Vec<Entry>) -> Vec<RecoveredSegment> {
        vec![RecoveredSegment {
            number: 1,
            path: PathBuf::from("1.log"),
            entries,
        }]
    }

    fn marker() -> Entry {
        Entry::Marker(7)
    }

    const S: u64 = 1_000_000;

    /// A log of one segment: a request, then a marker, for each id.
    fn flushes(ids: &[u64]) -> Vec<RecoveredSegment> {
        let entries = ids
            .iter()
            .flat_map(|&id| [Entry::Request, Entry::Marker(id)])
            .collect();
        segment(entries)
    }

    /// The ids of the markers `cut_points` cuts at, in order.
    fn cut_ids(log: &[RecoveredSegment], complete: u64, held: u64) -> Vec<u64> {
        let cuts = cut_points(log, resume_point(log, complete), held);
        let mut ids: Vec<(At, u64)> = log[0]
            .entries
            .iter()
            .enumerate()
            .filter_map(|(ri, e)| match e {
                Entry::Marker(id) if cuts.contains(&(0, ri)) => Some(((0, ri), *id)),
                _ => None,
            })
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// A counter pushed 10, 13, 17, 20 in one minute, a marker after each
    /// of the first three: only the first carries baselines, and the store
    /// is complete through the third. Replay restores 10 at the first,
    /// folds 13 and 17 again only to bring it forward, drops what they
    /// left pending at the third, and folds 20 as new: 3 pending, where
    /// skipping either step would leave 10.
    #[tokio::test]
    async fn replay_brings_baselines_forward_from_the_last_marker_that_carries_them() {
        use std::sync::Arc;

        use tally_proto::v1 as pb;

        use crate::ingest::view::PushView;
        use crate::ingest::{IngestConfig, IngestGate};
        use crate::store::embedded::EmbeddedStore;
        use crate::wal::{Wal, WalConfig};

        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("wal");
        std::fs::create_dir_all(&log_dir).unwrap();
        let now = chrono::Utc::now().timestamp_millis();
        let minute = (now / 60_000 - 1) * 60_000;
        let push = |i: i64, v: f64| pb::PushRequest {
            sources: vec![pb::SourceBatch {
                source: "s".into(),
                series: vec![pb::SeriesSamples {
                    metric: "c".into(),
                    kind: pb::SampleKind::CumulativeCounter as i32,
                    timestamps_ms: vec![minute + i],
                    values: vec![v],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let wal = Wal::start(
            &log_dir,
            WalConfig::default(),
            &[],
            Baselines::default(),
            Duration::from_secs(3600),
        )
        .unwrap();
        for (i, v) in [10.0, 13.0, 17.0, 20.0].into_iter().enumerate() {
            let req = push(i as i64, v);
            wal.append_request(now, &[], &PushView::of(&req))
                .await
                .unwrap();
            let id = i as u64 + 1;
            let baselines = match id {
                1 => Some(vec![Baseline::new(
                    Arc::new(crate::model::SeriesId::new("s", "c")),
                    minute,
                    10.0,
                    now,
                )]),
                2 | 3 => None,
                _ => break,
            };
            wal.marker(id, baselines).unwrap().written().await.unwrap();
        }
        wal.close().await;
        let segments = crate::wal::recover(&log_dir).unwrap();

        let agg = Arc::new(Aggregator::new(
            &crate::aggregator::AggregatorConfig::default(),
            &IngestConfig::default(),
        ));
        let store = Arc::new(EmbeddedStore::open(&dir.path().join("db")).unwrap());
        let pipeline = Pipeline::new(agg.clone(), store, Default::default(), 3);
        let rollups = Arc::new(crate::rollup::Rollups::disabled());
        let ingest = Ingestor::new(agg.clone(), rollups, Arc::new(IngestGate::default()));
        let at = StoreAt {
            complete: 3,
            held: 3,
        };
        let cancel = CancellationToken::new();
        let out = replay(&segments, at, &agg, &ingest, &pipeline, &cancel)
            .await
            .unwrap();
        assert_eq!((out.refolded, out.requests, out.flushes), (2, 1, 0));
        let pending = agg.drain(None);
        let sums: Vec<f64> = pending
            .iter()
            .flat_map(|s| s.minutes.iter().map(|(_, slot)| slot.sum))
            .collect();
        assert_eq!(sums, [3.0]);
        assert_eq!(out.max_flush_id, 3);
    }

    #[test]
    fn flushes_no_document_holds_are_merged_into_the_last_one() {
        let log = flushes(&[S, 2 * S, 3 * S, 4 * S, 5 * S]);
        // Complete through the first; nothing above it is held anywhere.
        assert_eq!(cut_ids(&log, S, S), vec![5 * S]);
    }

    #[test]
    fn flushes_a_document_may_hold_are_each_cut_on_their_own() {
        let log = flushes(&[S, 2 * S, 3 * S, 4 * S, 5 * S]);
        // A fold after the checkpoint wrote flush 3 into some documents.
        assert_eq!(cut_ids(&log, S, 3 * S), vec![2 * S, 3 * S, 5 * S]);
        // A store that cannot say: every flush, as before merging.
        assert_eq!(cut_ids(&log, S, u64::MAX), vec![2 * S, 3 * S, 4 * S, 5 * S]);
    }

    #[test]
    fn a_merge_spans_a_minute_of_flush_ids_at_most() {
        let ids: Vec<u64> = (1..=150).map(|i| i * S).collect();
        let cuts = cut_ids(&flushes(&ids), 0, 0);
        assert_eq!(cuts, vec![61 * S, 122 * S, 150 * S]);
        // Never more than a minute apart, and the log's last always cut.
        let mut from = 0;
        for c in &cuts {
            assert!(c - from <= 61 * S);
            from = *c;
        }
    }

    #[test]
    fn the_flush_before_a_request_declaring_groups_is_cut_on_its_own() {
        let mut log = flushes(&[S, 2 * S, 3 * S, 4 * S, 5 * S]);
        // A request declaring groups after the marker of flush 3.
        let at = log[0]
            .entries
            .iter()
            .position(|e| *e == Entry::Marker(3 * S))
            .unwrap();
        log[0].entries.insert(at + 1, Entry::Declaring);
        assert_eq!(cut_ids(&log, S, S), vec![3 * S, 5 * S]);
        // After the log's last marker it changes nothing.
        let mut log = flushes(&[S, 2 * S]);
        log[0].entries.push(Entry::Declaring);
        assert_eq!(cut_ids(&log, 0, 0), vec![2 * S]);
    }

    #[test]
    fn a_log_without_markers_after_the_complete_point_cuts_nothing() {
        let log = flushes(&[S, 2 * S]);
        assert!(cut_ids(&log, 2 * S, 2 * S).is_empty());
    }

    /// Answers `Unavailable` `failures` times, then 42; counts the asks.
    fn store_down_for(
        failures: u32,
        asked: &Cell<u32>,
    ) -> impl FnMut() -> std::future::Ready<Result<u64, StoreError>> + '_ {
        move || {
            asked.set(asked.get() + 1);
            std::future::ready(if asked.get() <= failures {
                Err(StoreError::Unavailable("down".into()))
            } else {
                Ok(42)
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_with_a_flush_waits_for_the_store_instead_of_replaying_it_all() {
        let asked = Cell::new(0);
        let id = resume_flush_id(&segment(vec![marker()]), store_down_for(5, &asked)).await;
        assert_eq!(id.ok(), Some(42));
        assert_eq!(asked.get(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_without_a_flush_starts_at_once_while_the_store_is_down() {
        let asked = Cell::new(0);
        let id = resume_flush_id(&segment(Vec::new()), store_down_for(5, &asked)).await;
        assert_eq!(id.ok(), Some(0));
        assert_eq!(asked.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_error_that_retrying_cannot_fix_is_returned() {
        let mut ask = || {
            std::future::ready(Err(StoreError::Corrupt {
                doc: "meta".into(),
                reason: "bad".into(),
            }))
        };
        let got = resume_flush_id(&segment(vec![marker()]), &mut ask).await;
        assert!(matches!(got, Err(StoreError::Corrupt { .. })));
    }
}
