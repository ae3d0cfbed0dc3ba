//! Source and metric names shared by the series that carry them.
//!
//! A fleet has far fewer sources and metrics than series (a source sends
//! tens of metrics, and every source sends the same ones), so each series
//! id points at one shared copy of its names instead of holding its own:
//! two allocations fewer per series, 32 bytes at a million series. A name
//! is kept while a series in memory uses it; the count is also what
//! `ingest.max_series_per_source` checks.

use std::sync::Arc;

use hashbrown::HashMap;

/// The names of the series in memory.
#[derive(Debug, Default)]
pub(super) struct SeriesNames {
    pub(super) sources: Names,
    pub(super) metrics: Names,
}

/// Names in use, with how many series in memory use each.
#[derive(Debug, Default)]
pub(super) struct Names(HashMap<Arc<str>, usize>);

impl Names {
    /// How many series use `name`.
    pub(super) fn count(&self, name: &str) -> usize {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Names in use.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// One more series uses `name`: its shared copy.
    pub(super) fn add(&mut self, name: &str) -> Arc<str> {
        if let Some((shared, n)) = self.0.get_key_value_mut(name) {
            *n += 1;
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(name);
        self.0.insert(shared.clone(), 1);
        shared
    }

    /// One series fewer uses `name`; the name goes with its last series.
    pub(super) fn remove(&mut self, name: &str) {
        if let Some(n) = self.0.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.0.remove(name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_share_a_name_while_one_uses_it() {
        let mut names = Names::default();
        let a = names.add("host-1");
        let b = names.add("host-1");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((names.count("host-1"), names.len()), (2, 1));
        names.remove("host-1");
        assert_eq!(names.count("host-1"), 1);
        names.remove("host-1");
        assert_eq!((names.count("host-1"), names.len()), (0, 0));
        // Gone: a new series makes a new copy.
        let c = names.add("host-1");
        assert!(!Arc::ptr_eq(&a, &c));
        names.remove("never-added");
        assert_eq!(names.len(), 1);
    }
}
