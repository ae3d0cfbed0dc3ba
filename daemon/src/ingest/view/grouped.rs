//! Builds a [`PushView`] from series that come grouped by source already,
//! each of one sample and each within the request's budget: a Graphite
//! batch, which numbers and chains its lines by source as it takes them
//! and counts them against the budget then.
//!
//! Why not [`super::ViewBuilder`]: for a protocol that interleaves
//! sources it looks each series' source up, counts it against the budget
//! and regroups the series at the end; given series in order, all of that
//! is known beforehand. Through it a Graphite line's series cost about
//! 220 instructions to add, a sixth of reading the line in all.

use super::{PushView, Run, SeriesCols, SourceCols};

/// A [`PushView`] under construction, one source after another.
#[derive(Default)]
pub struct GroupedBuilder<'a> {
    view: PushView<'a>,
}

impl<'a> GroupedBuilder<'a> {
    /// Room for `series` series of one sample and `labels` labels in all.
    pub fn with_capacity(series: usize, labels: usize) -> GroupedBuilder<'a> {
        let mut view = PushView::default();
        view.series.reserve(series);
        view.labels.reserve(labels);
        view.timestamps_ms.reserve(series);
        view.values.reserve(series);
        GroupedBuilder { view }
    }

    /// Begins source `name`: the series appended next are its. A source
    /// begun before it with no series is left out.
    pub fn source(&mut self, name: &'a str) {
        let at = self.view.series.len();
        let cols = SourceCols {
            source: name,
            series: Run::new(at, at),
            groups: Run::default(),
        };
        match self.view.sources.last_mut() {
            Some(last) if last.series.start == last.series.end => *last = cols,
            _ => self.view.sources.push(cols),
        }
    }

    /// Appends a series of one sample to the source begun last; nothing
    /// when no source was begun.
    #[inline]
    pub fn series(
        &mut self,
        metric: &'a str,
        kind: i32,
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        ts_ms: i64,
        value: f64,
    ) {
        let v = &mut self.view;
        let Some(source) = v.sources.last_mut() else {
            return;
        };
        let first_label = v.labels.len();
        v.labels.extend(labels);
        let at = v.values.len();
        let sample = Run::new(at, at + 1);
        v.timestamps_ms.push(ts_ms);
        v.values.push(value);
        v.series.push(SeriesCols {
            metric,
            kind,
            labels: Run::new(first_label, v.labels.len()),
            timestamps_ms: sample,
            values: sample,
            start_times_ms: Run::at_end(&v.start_times_ms),
        });
        source.series = Run::new(source.series.start as usize, v.series.len());
    }

    /// The view; a last source with no series is left out.
    pub fn finish(mut self) -> PushView<'a> {
        if let Some(last) = self.view.sources.last() {
            if last.series.start == last.series.end {
                self.view.sources.pop();
            }
        }
        self.view
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::builder::Budget;
    use crate::ingest::view::ViewBuilder;

    /// The same series, grouped, make the same view as through the
    /// general builder; sources without series are left out.
    #[test]
    fn makes_the_view_the_general_builder_makes() {
        // Each source's series: metric, one label's value ("" for none),
        // sample value.
        type Series<'x> = &'x [(&'x str, &'x str, f64)];
        let input: [(&str, Series<'_>); 4] = [
            ("a", &[("m1", "x", 1.0), ("m2", "", 2.0)]),
            ("empty", &[]),
            ("b", &[("m1", "y", 3.0)]),
            ("last-empty", &[]),
        ];
        let budget = Budget {
            samples: 100,
            bytes: 1 << 20,
        };
        let mut general = ViewBuilder::new(10, budget);
        let mut grouped = GroupedBuilder::with_capacity(3, 1);
        // A series before any source is dropped.
        grouped.series("orphan", 1, [], 1, 1.0);
        for (source, series) in input {
            grouped.source(source);
            for &(metric, label, v) in series {
                let labels = (!label.is_empty()).then_some(("k", label));
                grouped.series(metric, 1, labels, 1_000, v);
                let m = general.mark();
                if let Some((k, v)) = labels {
                    general.label(k, v);
                }
                general.sample(1_000, v);
                general.end_series(m, source, metric, 1).unwrap();
            }
        }
        let want = general.finish().0;
        let got = grouped.finish();
        assert_eq!(got, want);
        assert_eq!(got.sources().count(), 2);
        assert_eq!(got.samples(), 3);
    }
}
