//! Which cumulative counters' baselines a drain hands to the write-ahead
//! log's marker, and which wait for a later one.
//!
//! Why not every cut: at one sample a second every counter's baseline moves
//! every second, and a marker that carried them all cost about 5% of the
//! daemon's CPU (the log's table of baselines, their names spelled out, and
//! zstd) and a quarter of the log's bytes, for what only replay's starting
//! point needs. So most cuts log none ([`BaselineLog::Defer`]): a counter
//! whose baseline moved is marked and listed once in its shard, and the
//! next cut that logs baselines takes every marked one with those it drains.
//! Replay starts from the newest marker that carries them and folds the
//! requests up to its resume point again to bring them forward
//! (`crate::recovery`).

use std::sync::Arc;

use super::series::{SeriesState, Shard};
use super::ArrivalMinute;
use crate::table::Table;
use crate::wal::Baseline;

/// What a drain does with the baselines of the counters it drains.
pub enum BaselineLog<'a> {
    /// Nothing: no log is written (tests, benchmarks, a daemon without
    /// the log).
    Skip,
    /// Marks them for a later cut that logs them.
    Defer,
    /// Adds them, and every one marked since the last cut that logged
    /// them, to the vector.
    Take(&'a mut Vec<Baseline>),
}

impl<'a> BaselineLog<'a> {
    /// `Take` into `out` if given, else `Skip`.
    pub fn take_or_skip(out: Option<&'a mut Vec<Baseline>>) -> BaselineLog<'a> {
        out.map_or(BaselineLog::Skip, BaselineLog::Take)
    }

    /// A drained series at `pos`: its baseline, if it is a counter with
    /// one, taken or marked.
    pub(super) fn drained(&mut self, st: &mut SeriesState, pos: u32, unlogged: &mut Vec<u32>) {
        match self {
            BaselineLog::Skip => {}
            BaselineLog::Defer => {
                if st.baseline().is_some() && st.mark_unlogged() {
                    unlogged.push(pos);
                }
            }
            BaselineLog::Take(out) => take(st, out),
        }
    }

    /// After a shard's dirty series were drained: the counters that moved
    /// without a slot (`rebased`), and with `Take` every one still marked.
    pub(super) fn shard_drained(&mut self, shard: &mut Shard) {
        let Shard {
            series,
            rebased,
            unlogged,
            ..
        } = shard;
        match self {
            BaselineLog::Skip => rebased.clear(),
            BaselineLog::Defer => {
                for pos in rebased.drain(..) {
                    if let Some(st) = series.get_mut(pos) {
                        BaselineLog::Defer.drained(st, pos, unlogged);
                    }
                }
            }
            BaselineLog::Take(out) => {
                // Evicted since and the position given to another series:
                // logging that one's baseline as well is harmless. Those
                // with a slot were taken as they were drained.
                for pos in rebased.drain(..) {
                    if let Some(st) = series.get_mut(pos).filter(|s| s.pending.is_empty()) {
                        take(st, out);
                    }
                }
                // Taken already (drained or rebased) once unmarked.
                for pos in unlogged.drain(..) {
                    if let Some(st) = series.get_mut(pos).filter(|s| s.is_unlogged()) {
                        take(st, out);
                    }
                }
            }
        }
    }
}

/// Keeps the unlogged list to live series still marked: a series evicted
/// while marked leaves its position behind.
pub(super) fn prune_unlogged(series: &Table<SeriesState>, unlogged: &mut Vec<u32>) {
    unlogged.retain(|&pos| series.get(pos).is_some_and(SeriesState::is_unlogged));
}

/// Adds `st`'s baseline, if it is a counter with one, to `out`.
fn take(st: &mut SeriesState, out: &mut Vec<Baseline>) {
    let Some((ts_ms, value)) = st.baseline() else {
        return;
    };
    st.logged();
    out.push(Baseline::hashed(
        Arc::clone(&st.id),
        st.hash,
        ts_ms,
        value,
        arrival_ms(st.arrived),
    ));
}

/// The last millisecond of an [`ArrivalMinute`], Unix ms: rounded up, so
/// that a baseline is never given up earlier than its series' arrival
/// says.
fn arrival_ms(m: ArrivalMinute) -> i64 {
    (i64::from(m) + 1) * 60_000 - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::tests::batch;
    use crate::aggregator::{Aggregator, AggregatorConfig};
    use crate::ingest::IngestConfig;
    use crate::model::SampleKind;

    const NOW: i64 = 1_780_000_000_000;

    fn agg() -> Aggregator {
        Aggregator::new(&AggregatorConfig { shards: 4 }, &IngestConfig::default())
    }

    fn push(a: &Aggregator, metric: &str, ts: i64, v: f64) {
        let out = a.ingest(
            &[batch(
                "s",
                metric,
                SampleKind::CumulativeCounter,
                &[ts],
                &[v],
            )],
            ts,
        );
        assert_eq!(out.rejected, 0);
    }

    fn logged(baselines: &[Baseline]) -> Vec<(String, f64)> {
        let mut all: Vec<_> = baselines
            .iter()
            .map(|b| (b.series.metric.to_string(), b.value))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    fn drain(a: &Aggregator, log: BaselineLog<'_>) -> usize {
        a.drain_into(Vec::new(), log, 0, None).len()
    }

    /// Cuts that defer mark what moved; the next that takes them logs each
    /// once, as it now stands, whether or not it drains the series.
    #[test]
    fn a_cut_that_logs_takes_every_baseline_deferred_since_the_last() {
        let a = agg();
        push(&a, "a", NOW, 1.0);
        push(&a, "b", NOW, 5.0);
        assert_eq!(drain(&a, BaselineLog::Defer), 2);
        push(&a, "a", NOW + 1_000, 2.0);
        assert_eq!(drain(&a, BaselineLog::Defer), 1);
        push(&a, "a", NOW + 2_000, 4.0);
        let mut out = Vec::new();
        assert_eq!(drain(&a, BaselineLog::Take(&mut out)), 1);
        assert_eq!(logged(&out), [("a".into(), 4.0), ("b".into(), 5.0)]);
        // Nothing moved since: nothing more to log.
        push(&a, "b", NOW + 3_000, 5.0);
        let mut out = Vec::new();
        drain(&a, BaselineLog::Take(&mut out));
        assert_eq!(logged(&out), [("b".into(), 5.0)]);
        let mut out = Vec::new();
        drain(&a, BaselineLog::Take(&mut out));
        assert!(out.is_empty());
        // Skipping leaves no mark behind.
        push(&a, "a", NOW + 4_000, 6.0);
        drain(&a, BaselineLog::Skip);
        let mut out = Vec::new();
        drain(&a, BaselineLog::Take(&mut out));
        assert!(out.is_empty());
    }

    /// Replay's discard drops the slots the refold left, keeps the
    /// baselines it brought forward and marks them for the next marker.
    #[test]
    fn discarding_pending_keeps_the_baselines_and_marks_them() {
        let a = agg();
        push(&a, "a", NOW, 10.0);
        push(&a, "a", NOW + 1_000, 13.0);
        a.discard_pending();
        assert_eq!(a.pending_slots(), 0);
        push(&a, "a", NOW + 2_000, 20.0);
        let mut out = Vec::new();
        let drained = a.drain_into(Vec::new(), BaselineLog::Take(&mut out), 0, None);
        assert_eq!(drained[0].minutes[0].1.sum, 7.0, "from 13, not 10");
        assert_eq!(logged(&out), [("a".into(), 20.0)]);
        // Discarded and not pushed again: still logged by the next take.
        push(&a, "b", NOW + 3_000, 1.0);
        a.discard_pending();
        let mut out = Vec::new();
        drain(&a, BaselineLog::Take(&mut out));
        assert_eq!(logged(&out), [("b".into(), 1.0)]);
    }

    /// A marked counter evicted as idle leaves no position behind.
    #[test]
    fn eviction_prunes_the_unlogged_list() {
        let a = agg();
        for i in 0..20 {
            push(&a, &format!("m{i}"), NOW, 1.0);
        }
        drain(&a, BaselineLog::Defer);
        let listed = |a: &Aggregator| -> usize {
            a.shards.iter().map(|c| c.shard.lock().unlogged.len()).sum()
        };
        assert_eq!(listed(&a), 20);
        let later = NOW + 400 * 24 * 3_600_000;
        assert_eq!(a.evict_idle(later), 20);
        assert_eq!(listed(&a), 0);
    }
}
