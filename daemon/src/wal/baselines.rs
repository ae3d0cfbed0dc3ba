//! The newest baseline of every cumulative counter, which the log carries
//! from marker to marker and into each segment's checkpoint.
//!
//! One entry per counter of the fleet, so its size matters: an entry names
//! its series by the aggregator's shared id (8 bytes) instead of owned
//! copies of the names and a joined key, which took about 200 bytes per
//! counter and four allocations per counter per flush.

use hashbrown::HashTable;

use super::record::Baseline;
use crate::model::{series_hash, SeriesId};

/// Baselines by series, one each, found by the hash each carries.
#[derive(Debug, Default)]
pub struct Baselines {
    table: HashTable<Baseline>,
}

impl Baselines {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Sets `b`'s series' baseline to `b`.
    pub fn insert(&mut self, b: Baseline) {
        match self
            .table
            .entry(b.hash(), |old| old.series.same(&b.series), Baseline::hash)
        {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = b,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(b);
            }
        }
    }

    /// `series`' baseline, if it has one.
    pub fn get(&self, series: &SeriesId) -> Option<&Baseline> {
        let hash = series_hash(series.series_ref());
        self.table.find(hash, |b| b.series.same(series))
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Baseline) -> bool) {
        self.table.retain(|b| keep(b));
    }

    /// Gives the baselines read from an older log, whose arrival is
    /// unknown, the arrival `now_ms`.
    pub fn set_unknown_arrivals(&mut self, now_ms: i64) {
        for b in self.table.iter_mut() {
            if b.arrived_ms().is_none() {
                b.arrived_ms = now_ms;
            }
        }
    }

    pub fn clear(&mut self) {
        self.table.clear();
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Baseline> {
        self.table.iter()
    }
}

impl Extend<Baseline> for Baselines {
    fn extend<I: IntoIterator<Item = Baseline>>(&mut self, iter: I) {
        for b in iter {
            self.insert(b);
        }
    }
}

impl FromIterator<Baseline> for Baselines {
    fn from_iter<I: IntoIterator<Item = Baseline>>(iter: I) -> Self {
        let mut all = Baselines::default();
        all.extend(iter);
        all
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn baseline(series: &Arc<SeriesId>, ts_ms: i64, value: f64) -> Baseline {
        Baseline::new(series.clone(), ts_ms, value, ts_ms)
    }

    #[test]
    fn a_series_keeps_its_newest_baseline_only() {
        let a = Arc::new(SeriesId::new("h", "a"));
        // An equal id made apart: the same series.
        let a2 = Arc::new(SeriesId::new("h", "a"));
        let b = Arc::new(SeriesId::new("h", "b"));
        let mut all: Baselines = [baseline(&a, 1, 1.0), baseline(&b, 1, 5.0)]
            .into_iter()
            .collect();
        all.insert(baseline(&a2, 2, 3.0));
        assert_eq!(all.len(), 2);
        let got = all.get(&a).map(|x| (x.ts_ms, x.value));
        assert_eq!(got, Some((2, 3.0)));
        all.retain(|x| x.ts_ms >= 2);
        assert_eq!(all.len(), 1);
        assert!(all.get(&b).is_none());
        assert_eq!(all.iter().len(), 1);
        all.clear();
        assert!(all.is_empty());
    }
}
