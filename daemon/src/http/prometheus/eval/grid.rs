//! The windows of a range function: which slots each evaluation time
//! reads (the rules are in the `eval` module's documentation), at the
//! widest granularity that tiles them, and their values in logarithmic
//! time per window.

use super::value::EvalError;
use crate::model::{Slot, DAY_S, HOUR_S, MINUTE_S};
use crate::query::{Aggregate, QueryEngine, QueryError, Step, StepSpec, Window};

/// The windows of one range function at every evaluation time.
pub(super) struct Grid {
    /// Per evaluation time, the end of its window (a minute boundary, Unix
    /// seconds); ascending.
    ends: Vec<i64>,
    range_s: i64,
    /// Width of the slots read: the widest of a day, an hour and a minute
    /// that tiles every window exactly.
    granularity: i64,
}

impl Grid {
    pub(super) fn new(times_ms: &[i64], range_s: i64) -> Grid {
        let ends: Vec<i64> = times_ms
            .iter()
            .map(|t| t.div_euclid(MINUTE_S * 1000) * MINUTE_S)
            .collect();
        let granularity = [DAY_S, HOUR_S]
            .into_iter()
            .find(|g| range_s % g == 0 && ends.iter().all(|e| e.rem_euclid(*g) == 0))
            .unwrap_or(MINUTE_S);
        Grid {
            ends,
            range_s,
            granularity,
        }
    }

    /// Start of the earliest window.
    fn from(&self) -> i64 {
        self.ends.first().copied().unwrap_or(0) - self.range_s
    }

    /// End of the latest window.
    fn to(&self) -> i64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The read covering every window, in slots of the grid's granularity.
    pub(super) fn window(&self, engine: &QueryEngine) -> Result<Window, EvalError> {
        let step = Step::fixed(self.granularity)?;
        engine
            .window(self.from(), self.to(), StepSpec::Fixed(step))
            .map_err(|e| match e {
                // The engine's advice is about its own step parameter.
                QueryError::Limit(_) => QueryError::Limit(format!(
                    "the windows span {} slots of {} per series; the limit is {} (query.max_points): use a shorter time range, or ranges and steps in whole hours so that hour slots serve them",
                    (self.to() - self.from()) / self.granularity,
                    step.label(),
                    engine.limits().max_points
                ))
                .into(),
                e => e.into(),
            })
    }

    /// `aggregate` of each window of `buckets` (ascending, non-empty slots).
    pub(super) fn values(&self, aggregate: Aggregate, buckets: &[(i64, Slot)]) -> Vec<Option<f64>> {
        let tree = SlotTree::new(buckets.iter().map(|(_, s)| *s).collect());
        self.ends
            .iter()
            .map(|&end| {
                let lo = buckets.partition_point(|(t, _)| *t < end - self.range_s);
                let hi = buckets.partition_point(|(t, _)| *t < end);
                // Callers refuse a rate of a gauge first: what reaches here
                // is a counter, or a series of unknown kind read as one.
                aggregate.of(&tree.merged(lo, hi), self.range_s, true)
            })
            .collect()
    }
}

/// Merges of any run of slots in logarithmic time, so long windows at
/// fine steps cost the same as short ones; sums are added in a balanced
/// order, never subtracted, so no precision is lost to cancellation.
struct SlotTree {
    n: usize,
    nodes: Vec<Slot>,
}

impl SlotTree {
    fn new(slots: Vec<Slot>) -> SlotTree {
        let n = slots.len();
        let mut nodes = vec![Slot::EMPTY; n];
        nodes.extend(slots);
        for i in (1..n).rev() {
            let mut s = nodes[2 * i];
            s.merge(&nodes[2 * i + 1]);
            nodes[i] = s;
        }
        SlotTree { n, nodes }
    }

    /// The merge of slots `lo..hi`.
    fn merged(&self, lo: usize, hi: usize) -> Slot {
        let mut acc = Slot::EMPTY;
        let (mut l, mut r) = (lo + self.n, hi + self.n);
        while l < r {
            if l & 1 == 1 {
                acc.merge(&self.nodes[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                acc.merge(&self.nodes[r]);
            }
            l >>= 1;
            r >>= 1;
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(values: &[f64]) -> Slot {
        let mut s = Slot::EMPTY;
        for v in values {
            s.add_value(*v);
        }
        s
    }

    #[test]
    fn windows_read_the_slots_that_end_inside_them() {
        // Minute slots at minutes 10..=14 holding 1, 2, 4, 8, 16.
        let buckets: Vec<(i64, Slot)> = (0..5)
            .map(|i| ((10 + i) * 60, slot(&[(1 << i) as f64])))
            .collect();
        // t = 13:00 (minute-aligned) and 13:30 both cover minutes 11 and 12.
        let grid = Grid::new(&[13 * 60_000, 13 * 60_000 + 30_000, 15 * 60_000], 120);
        assert_eq!(grid.granularity, MINUTE_S);
        assert_eq!((grid.from(), grid.to()), (11 * 60, 15 * 60));
        assert_eq!(
            grid.values(Aggregate::Sum, &buckets),
            vec![Some(6.0), Some(6.0), Some(24.0)]
        );
        assert_eq!(
            grid.values(Aggregate::Rate, &buckets),
            vec![Some(0.05), Some(0.05), Some(0.2)]
        );
        assert_eq!(
            grid.values(Aggregate::Count, &buckets),
            vec![Some(2.0), Some(2.0), Some(2.0)]
        );
        // Nothing before minute 10.
        let early = Grid::new(&[10 * 60_000], 60);
        assert_eq!(early.values(Aggregate::Avg, &buckets), vec![None]);
    }

    #[test]
    fn whole_hour_windows_at_whole_hours_read_hour_slots() {
        let h = 3_600_000;
        assert_eq!(Grid::new(&[5 * h, 6 * h], 3600).granularity, HOUR_S);
        assert_eq!(Grid::new(&[5 * h, 6 * h], 7200).granularity, HOUR_S);
        assert_eq!(
            Grid::new(&[5 * h, 5 * h + 60_000], 3600).granularity,
            MINUTE_S
        );
        assert_eq!(Grid::new(&[5 * h], 300).granularity, MINUTE_S);
        assert_eq!(Grid::new(&[24 * h, 48 * h], 86_400).granularity, DAY_S);
    }

    #[test]
    fn slot_tree_merges_any_run() {
        let slots: Vec<Slot> = (0..13).map(|i| slot(&[i as f64, -(i as f64)])).collect();
        let tree = SlotTree::new(slots.clone());
        for lo in 0..=13 {
            for hi in lo..=13 {
                let mut want = Slot::EMPTY;
                for s in &slots[lo..hi] {
                    want.merge(s);
                }
                assert_eq!(tree.merged(lo, hi), want, "{lo}..{hi}");
            }
        }
    }
}
