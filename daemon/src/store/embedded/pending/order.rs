//! The order a close folds its series in: by series within each run's
//! `since`. Separate from the queue's other work because it is done once an
//! hour, before the close's first fold: the due runs are copied under the
//! pending minutes' lock (reads wait for the copy), and sorted without it,
//! but under the fold lock, which the flush in progress waits for as it
//! waits for a fold: a sort of the fleet's ids, once an hour.
//!
//! Why: a close folds the fleet over several minutes, a few hundred series
//! a transaction, and every document it writes is of the same hour. Taken
//! in the order runs entered the queue (the flushes' order, which is the
//! aggregator's hash order), each transaction's keys fell between those of
//! the transactions before, and each insert split a page holding a document
//! written a moment earlier: written per folded series grew from 10 KB to
//! 22 KB as the hour's documents filled in (BENCHMARKS.md, "Disk in real
//! time"). In series order each transaction's keys come after the last
//! one's, as the period-first keys (`../layout.rs`) put them after every older
//! hour's. Within a `since` only, so that the queue stays ascending by
//! `since`, which the logs' trimming relies on; a close's runs mostly share
//! one or a few.

use std::sync::Arc;

use super::Pending;
use crate::model::SeriesId;

/// The runs of the fold queue that began before a flush, as the queue held
/// them, and then sorted.
#[derive(Debug)]
pub(crate) struct DueRuns {
    /// `(since, position)` as the queue held them.
    held: Vec<(u64, u32)>,
    /// The same, each with its series (None where its place went stale),
    /// to be sorted.
    runs: Vec<(u64, u32, Option<Arc<SeriesId>>)>,
}

impl DueRuns {
    /// In series order within each `since`. Blocking: a sort of the fleet.
    pub(crate) fn sort(mut self) -> DueRuns {
        self.runs
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        self
    }
}

impl Pending {
    /// The runs waiting in the fold queue that began before flush `id`,
    /// once for each `id` (None if they were ordered for it already). A
    /// copy of ids: the sort is [`DueRuns::sort`], outside this lock.
    pub(crate) fn due_runs(&mut self, id: u64) -> Option<DueRuns> {
        if self.ordered_before >= id {
            return None;
        }
        self.ordered_before = id;
        let n = self.queued_before(id);
        let held: Vec<_> = self.queue.iter().take(n).copied().collect();
        let runs = held
            .iter()
            .map(|&(since, pos)| (since, pos, self.series.at(pos).map(|(s, _)| s.clone())))
            .collect();
        Some(DueRuns { held, runs })
    }

    /// Puts `due`'s runs back, sorted, in place of the queue's first ones,
    /// if those are still the runs it copied (only the holder of the fold
    /// lock takes runs from the front or puts them back there, and it holds
    /// it throughout); otherwise leaves the queue as it is. Returns whether
    /// it reordered.
    pub(crate) fn reorder_due(&mut self, due: DueRuns) -> bool {
        let n = due.held.len();
        if self.queue.len() < n || !self.queue.iter().take(n).eq(due.held.iter()) {
            return false;
        }
        for (place, (since, pos, _)) in self.queue.iter_mut().zip(due.runs) {
            *place = (since, pos);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SampleKind, Slot};

    fn add(p: &mut Pending, name: &str, since: u64) {
        let s = Arc::new(SeriesId::new(name, "m"));
        p.add(
            &s,
            SampleKind::Gauge,
            since,
            [(10, Slot::of(1.0))].into_iter(),
        );
    }

    fn names(p: &mut Pending, n: usize) -> Vec<String> {
        let folds = p.start_fold(n, None);
        folds.iter().map(|f| f.series.source.to_string()).collect()
    }

    /// Within each `since` the runs go in series order; the `since`s keep
    /// their order, and runs from the hour on are left where they were.
    #[test]
    fn a_close_folds_in_series_order_within_each_since() {
        let mut p = Pending::default();
        for (name, since) in [("d", 1), ("b", 1), ("c", 2), ("a", 2), ("z", 5), ("y", 5)] {
            add(&mut p, name, since);
        }
        let due = p.due_runs(5).unwrap().sort();
        assert!(p.reorder_due(due));
        assert_eq!(p.oldest(), Some(1));
        assert_eq!(names(&mut p, 6), ["b", "d", "a", "c", "z", "y"]);
        assert!(p.due_runs(5).is_none(), "once per hour");
        assert!(p.due_runs(6).is_some());
    }

    /// A queue whose front changed between the copy and the sort is left
    /// as it is.
    #[test]
    fn a_queue_that_moved_meanwhile_is_left_alone() {
        let mut p = Pending::default();
        for (name, since) in [("d", 1), ("b", 1), ("c", 2)] {
            add(&mut p, name, since);
        }
        let due = p.due_runs(3).unwrap().sort();
        let taken = p.start_fold(1, None);
        assert_eq!(taken.len(), 1);
        assert!(!p.reorder_due(due));
        assert_eq!(names(&mut p, 2), ["b", "c"]);
    }
}
